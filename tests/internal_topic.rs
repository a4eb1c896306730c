//! Issue 41, item 8: the internal topic `__consumer_offsets` is protected. Through the public API,
//! appending to it (directly or through a producer), creating it, growing it, deleting it and
//! deleting its records are refused with an `InternalTopic` error that names the topic and its
//! owner, the group coordinator, and change nothing: the coordinator still creates it and commits
//! to it, and every group's committed offsets survive the refused calls and a reopen. Fetching it
//! stays allowed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, FetchOptions, is_internal_topic};
use seglog::error::{AppendError, DeleteRecordsError, TopicError};
use seglog::group::{GroupCoordinator, OFFSETS_TOPIC, OffsetAndMetadata};
use seglog::producer::{ProducerConfig, ProducerError, ProducerRecord};
use seglog::types::{Offset, TopicName};

use support::assert_matches;
use support::batches::{T0, keyed_batch};
use support::groups::{config, create_topic, fill, open_engine, poll_records, subscribed, tp};

mod support;

/// What every refusal says: the topic, and that the group coordinator manages it.
const REFUSAL: &str = "topic __consumer_offsets is internal: the group coordinator manages it (the \
                       committed offsets of consumer groups), so it can be read but not written, \
                       created, grown or deleted directly";

fn offsets_topic() -> TopicName {
    TopicName::parse(OFFSETS_TOPIC).unwrap()
}

/// A keyed record, the kind that used to make every group command fail once appended there.
fn keyed_record() -> bytes::Bytes {
    keyed_batch(Some(b"not an offset commit key"), Some(b"v"), T0)
}

/// Group `g` commits offset 3 of `t-0` through the coordinator; returns what the offsets
/// topic's partition 0 holds after it (its log end offset).
fn commit_through_the_coordinator(engine: &Engine) -> Offset {
    create_topic(engine, "t", 1);
    fill(engine, "t", 1, 3);
    let coordinator = GroupCoordinator::open(engine).unwrap();
    let mut consumer = subscribed(&coordinator, config("g"), &["t"]);
    poll_records(&mut consumer, 3);
    consumer.commit_sync().unwrap();
    consumer.close().unwrap();
    let committed = coordinator.committed("g", &tp("t", 0));
    assert_eq!(committed, Some(OffsetAndMetadata::new(Offset(3))));
    engine
        .describe_partition(OFFSETS_TOPIC, 0)
        .unwrap()
        .log_end_offset
}

#[test]
fn only_the_offsets_topic_is_internal() {
    assert!(is_internal_topic("__consumer_offsets"));
    assert!(!is_internal_topic("__consumer_offsets2"));
    assert!(!is_internal_topic("orders"));
}

#[test]
fn appending_to_the_offsets_topic_is_refused_directly_and_through_a_producer() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path());
    let log_end = commit_through_the_coordinator(&engine);

    let error = engine
        .append(&offsets_topic(), 0, keyed_record(), Durability::Durable)
        .wait()
        .unwrap_err();
    assert_matches!(&error, AppendError::InternalTopic { topic } if topic == OFFSETS_TOPIC);
    assert_eq!(error.to_string(), REFUSAL);

    let producer = engine.producer(ProducerConfig::default()).unwrap();
    let topic = offsets_topic();
    let record = ProducerRecord::new(&topic, Some(b"key"), Some(b"value"));
    let sent = producer.send(&record).unwrap();
    assert_matches!(
        sent.wait(),
        Err(ProducerError::Append { source, .. })
            if matches!(*source, AppendError::InternalTopic { .. })
    );
    producer.close().unwrap();

    let description = engine.describe_partition(OFFSETS_TOPIC, 0).unwrap();
    assert_eq!(description.log_end_offset, log_end, "nothing was appended");
    let fetched = engine
        .fetch(&offsets_topic(), 0, Offset(0), FetchOptions::default())
        .wait()
        .unwrap();
    assert_eq!(fetched.batches().count(), 1, "reading it stays allowed");
}

#[test]
fn creating_growing_deleting_and_deleting_records_of_the_offsets_topic_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path());
    let create = || engine.create_topic(OFFSETS_TOPIC, 1, LogConfig::default());
    let error = create().unwrap_err();
    assert_matches!(&error, TopicError::InternalTopic { .. });
    assert_eq!(error.to_string(), REFUSAL);
    assert!(engine.list_topics().is_empty(), "nothing was created");

    let log_end = commit_through_the_coordinator(&engine);
    for refused in [
        engine.add_partitions(OFFSETS_TOPIC, 4).unwrap_err(),
        engine.delete_topic(OFFSETS_TOPIC).unwrap_err(),
        engine
            .alter_topic_config(OFFSETS_TOPIC, LogConfig::default())
            .unwrap_err(),
        create().unwrap_err(),
    ] {
        assert_matches!(refused, TopicError::InternalTopic { .. });
    }
    let records_deleted = engine
        .delete_records(&offsets_topic(), 0, log_end)
        .wait()
        .unwrap_err();
    assert_matches!(
        &records_deleted,
        DeleteRecordsError::InternalTopic { topic } if topic == OFFSETS_TOPIC
    );
    assert_eq!(records_deleted.to_string(), REFUSAL);

    let description = engine.describe_topic(OFFSETS_TOPIC).unwrap();
    assert_eq!(description.partitions.len(), 1, "not grown");
    assert_eq!(description.partitions[0].log_start_offset, Offset(0));
    assert_eq!(description.partitions[0].log_end_offset, log_end);
    engine.close().unwrap();

    // The committed offsets survive: the coordinator reads them back after a reopen.
    let engine = open_engine(dir.path());
    let coordinator = GroupCoordinator::open(&engine).unwrap();
    assert_eq!(
        coordinator.committed("g", &tp("t", 0)),
        Some(OffsetAndMetadata::new(Offset(3)))
    );
    drop(coordinator);
    engine.close().unwrap();
}
