//! The consumer API of consumer groups (issue 6, part 2) on a real engine. Proves that: `poll`
//! returns records in offset order with their partition, offset, timestamp, key and value, bounded
//! by `max_records` and `max_bytes`, round-robin across partitions; a long poll returns as soon as
//! a record is appended; `pause` stops a partition's records until `resume`, keeping its position;
//! `seek`, `seek_to_beginning` and `seek_to_end` move the position; `auto.offset.reset` starts a
//! partition without a committed offset at the log start (earliest) or the log end (latest), or
//! refuses (none), and a committed offset wins over it; a position past the log end is reset;
//! `commit_sync` and `commit_async` make `committed` answer the position, even when the async
//! handle is dropped unawaited; auto-commit commits at its interval and at `close`; group
//! descriptions show members, committed offsets, log end offsets and lag; and deleting a group
//! removes its offsets, refusing a group with members.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use seglog::config::TimestampType;
use seglog::group::{
    DeleteGroupError, DescribeError, GroupCoordinator, GroupState, OffsetAndMetadata, PollError,
    PollOptions, PositionError,
};
use seglog::types::{Offset, TimestampMs};
use support::assert_matches;
use support::batches::T0;
use support::groups::{
    Groups, PATIENCE, by_partition, config, config_with, open_engine, poll_records, produce, tp,
    value, within_patience,
};

mod support;

#[test]
fn poll_returns_records_in_order_with_their_partition_offset_timestamp_key_and_value() {
    let groups = Groups::new(2, 0);
    produce(&groups.engine, "t", 0, &["a", "b"]);
    produce(&groups.engine, "t", 0, &["c"]);
    produce(&groups.engine, "t", 1, &["x"]);
    let mut consumer = groups.consumer(config("g"));
    let records = poll_records(&mut consumer, 4);
    let values = by_partition(&records);
    assert_eq!(values[&0], ["a", "b", "c"]);
    assert_eq!(values[&1], ["x"]);
    let first = records.iter().find(|r| r.partition == 0).unwrap();
    assert_eq!(first.topic.as_str(), "t");
    assert_eq!(first.offset, Offset(0));
    assert_eq!(first.timestamp, TimestampMs(T0));
    assert_eq!(first.timestamp_type, TimestampType::CreateTime);
    assert_eq!(first.key.as_deref(), Some(&b"k"[..]));
    let offsets: Vec<u64> = records
        .iter()
        .filter(|r| r.partition == 0)
        .map(|r| r.offset.0)
        .collect();
    assert_eq!(offsets, [0, 1, 2]);
    assert_eq!(consumer.position(&tp("t", 0)).unwrap(), Offset(3));
    assert_eq!(consumer.position(&tp("t", 1)).unwrap(), Offset(1));
}

#[test]
fn poll_is_bounded_by_max_records_and_max_bytes_and_rotates_over_partitions() {
    let groups = Groups::new(3, 10);
    let mut consumer = groups.consumer(config("g"));
    let options = PollOptions {
        max_records: 4,
        max_bytes: u64::MAX,
        timeout: PATIENCE,
    };
    let first = consumer.poll_with(options).unwrap();
    assert_eq!(first.len(), 4);
    let second = consumer.poll_with(options).unwrap();
    assert_eq!(second.len(), 4);
    assert_ne!(
        first[0].partition, second[0].partition,
        "the next poll starts at the next partition"
    );
    // Each record here carries 1 byte of key and 4 of value: 13 bytes allow two.
    let bounded = consumer
        .poll_with(PollOptions {
            max_bytes: 13,
            ..options
        })
        .unwrap();
    assert_eq!(bounded.len(), 2);
    let one = consumer
        .poll_with(PollOptions {
            max_bytes: 1,
            ..options
        })
        .unwrap();
    assert_eq!(one.len(), 1, "one record is always returned whole");
}

#[test]
fn a_long_poll_returns_as_soon_as_a_record_is_appended() {
    let groups = Groups::new(2, 0);
    let mut consumer = groups.consumer(config_with("g", &[("fetch.max.wait.ms", "5000")]));
    assert!(consumer.poll(Duration::ZERO).unwrap().is_empty());
    let producer_engine = groups.engine.clone();
    let producer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        produce(&producer_engine, "t", 1, &["late"]);
    });
    let started = Instant::now();
    let records = consumer.poll(Duration::from_secs(20)).unwrap();
    producer.join().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(value(&records[0]), "late");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_poll_with_nothing_to_return_waits_for_its_timeout() {
    let groups = Groups::new(1, 0);
    let mut consumer = groups.consumer(config("g"));
    let started = Instant::now();
    assert!(
        consumer
            .poll(Duration::from_millis(150))
            .unwrap()
            .is_empty()
    );
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[test]
fn pause_stops_a_partitions_records_until_resume_and_keeps_its_position() {
    let groups = Groups::new(2, 0);
    let mut consumer = groups.consumer(config("g"));
    consumer.poll(Duration::ZERO).unwrap();
    consumer.pause(&[tp("t", 0)]).unwrap();
    assert_eq!(consumer.paused(), [tp("t", 0)]);
    produce(&groups.engine, "t", 0, &["held"]);
    produce(&groups.engine, "t", 1, &["free"]);
    let records = poll_records(&mut consumer, 1);
    assert_eq!(by_partition(&records)[&1], ["free"]);
    assert!(
        consumer
            .poll(Duration::from_millis(100))
            .unwrap()
            .is_empty()
    );
    assert_eq!(consumer.position(&tp("t", 0)).unwrap(), Offset(0));
    consumer.resume(&[tp("t", 0)]).unwrap();
    let records = poll_records(&mut consumer, 1);
    assert_eq!(by_partition(&records)[&0], ["held"]);
    assert_matches!(
        consumer.pause(&[tp("t", 9)]).unwrap_err(),
        PositionError::NotAssigned { .. }
    );
}

#[test]
fn seek_moves_the_position_back_and_forward() {
    let partition = tp("t", 0);
    let groups = Groups::new(1, 5);
    let mut consumer = groups.consumer(config("g"));
    poll_records(&mut consumer, 5);
    consumer.seek(&partition, Offset(3)).unwrap();
    assert_eq!(consumer.position(&partition).unwrap(), Offset(3));
    let again: Vec<u64> = poll_records(&mut consumer, 2)
        .iter()
        .map(|r| r.offset.0)
        .collect();
    assert_eq!(again, [3, 4]);
    consumer.seek_to_beginning(&partition).unwrap();
    assert_eq!(poll_records(&mut consumer, 5)[0].offset, Offset(0));
    consumer.seek_to_end(&partition).unwrap();
    assert_eq!(consumer.position(&partition).unwrap(), Offset(5));
    assert!(consumer.poll(Duration::from_millis(50)).unwrap().is_empty());
    assert_matches!(
        consumer.seek(&tp("t", 1), Offset(0)).unwrap_err(),
        PositionError::NotAssigned { .. }
    );
}

#[test]
fn a_position_past_the_log_end_is_reset_by_auto_offset_reset() {
    let groups = Groups::new(1, 3);
    let mut consumer = groups.consumer(config("g"));
    consumer.poll(Duration::ZERO).unwrap();
    consumer.seek(&tp("t", 0), Offset(100)).unwrap();
    let records = poll_records(&mut consumer, 3);
    assert_eq!(
        records[0].offset,
        Offset(0),
        "earliest: back to the log start"
    );
}

#[test]
fn auto_offset_reset_earliest_reads_from_the_log_start_and_latest_from_the_log_end() {
    let groups = Groups::new(1, 5);
    let mut earliest = groups.consumer(config("from-start"));
    let mut latest = groups.consumer(config_with("from-end", &[("auto.offset.reset", "latest")]));

    assert_eq!(poll_records(&mut earliest, 5)[0].offset, Offset(0));
    assert!(latest.poll(Duration::from_millis(100)).unwrap().is_empty());
    assert_eq!(latest.position(&tp("t", 0)).unwrap(), Offset(5));
    produce(&groups.engine, "t", 0, &["after"]);
    let records = poll_records(&mut latest, 1);
    assert_eq!(records[0].offset, Offset(5));
    assert_eq!(value(&records[0]), "after");
}

#[test]
fn auto_offset_reset_none_refuses_a_partition_without_a_committed_offset() {
    let groups = Groups::new(1, 0);
    let mut consumer = groups.consumer(config_with("g", &[("auto.offset.reset", "none")]));
    assert_matches!(
        consumer.poll(Duration::ZERO).unwrap_err(),
        PollError::Position(PositionError::NoOffset { .. })
    );
}

#[test]
fn a_committed_offset_wins_over_auto_offset_reset() {
    let groups = Groups::new(1, 6);
    let mut first = groups.consumer(config("g"));
    poll_records(&mut first, 6);
    first.seek(&tp("t", 0), Offset(4)).unwrap();
    first.commit_sync().unwrap();
    first.close().unwrap();
    let mut second = groups.consumer(config_with("g", &[("auto.offset.reset", "latest")]));
    let records = poll_records(&mut second, 2);
    assert_eq!(records[0].offset, Offset(4));
}

#[test]
fn commit_sync_and_commit_async_make_committed_answer_the_position() {
    let groups = Groups::new(1, 10);
    let mut consumer = groups.consumer(config("g"));
    let partition = tp("t", 0);
    assert_eq!(consumer.committed(&partition), None);
    poll_records(&mut consumer, 10);
    consumer.seek(&partition, Offset(2)).unwrap();
    consumer.commit_sync().unwrap();
    assert_eq!(
        consumer.committed(&partition),
        Some(OffsetAndMetadata::new(Offset(2)))
    );
    consumer.seek(&partition, Offset(5)).unwrap();
    consumer.commit_async().wait().unwrap();
    assert_eq!(consumer.committed(&partition).unwrap().offset, Offset(5));
    let with_metadata = OffsetAndMetadata {
        offset: Offset(6),
        metadata: "checkpoint 6".to_owned(),
    };
    consumer
        .commit_sync_offsets(BTreeMap::from([(partition.clone(), with_metadata.clone())]))
        .unwrap();
    assert_eq!(consumer.committed(&partition), Some(with_metadata));

    consumer.seek(&partition, Offset(8)).unwrap();
    drop(consumer.commit_async());
    within_patience("a dropped commit is never recorded", || {
        let recorded = consumer.committed(&partition).unwrap().offset == Offset(8);
        recorded || {
            thread::sleep(Duration::from_millis(5));
            false
        }
    });
}

#[test]
fn auto_commit_commits_positions_at_its_interval_and_at_close() {
    let groups = Groups::new(1, 4);
    let auto = [
        ("enable.auto.commit", "true"),
        ("auto.commit.interval.ms", "50"),
    ];
    let mut consumer = groups.consumer(config_with("g", &auto));
    let partition = tp("t", 0);
    poll_records(&mut consumer, 4);
    within_patience("auto-commit never committed", || {
        let committed = consumer.committed(&partition).map(|c| c.offset) == Some(Offset(4));
        committed || {
            consumer.poll(Duration::from_millis(20)).unwrap();
            false
        }
    });
    produce(&groups.engine, "t", 0, &["last"]);
    poll_records(&mut consumer, 1);
    consumer.close().unwrap();
    assert_eq!(
        groups
            .coordinator
            .committed("g", &partition)
            .unwrap()
            .offset,
        Offset(5)
    );
}

#[test]
fn describe_group_shows_members_committed_offsets_log_end_offsets_and_lag() {
    let groups = Groups::new(2, 10);
    let coordinator = &groups.coordinator;
    let mut consumer = groups.consumer(config("g"));
    poll_records(&mut consumer, 20);
    consumer.seek(&tp("t", 0), Offset(7)).unwrap();
    consumer.commit_sync().unwrap();
    let description = coordinator.describe_group("g").unwrap();
    assert_eq!(description.state, GroupState::Stable);
    assert_eq!(description.members.len(), 1);
    assert_eq!(description.members[0].assignment, [tp("t", 0), tp("t", 1)]);
    let lags: Vec<(u32, u64, u64, u64)> = description
        .partitions
        .iter()
        .map(|p| {
            (
                p.partition.partition,
                p.committed.as_ref().unwrap().offset.0,
                p.log_end_offset.unwrap().0,
                p.lag.unwrap(),
            )
        })
        .collect();
    assert_eq!(lags, [(0, 7, 10, 3), (1, 10, 10, 0)]);
    assert!(
        description
            .partitions
            .iter()
            .all(|p| p.owner.as_ref() == consumer.member_id())
    );
    let listing = coordinator.list_groups();
    assert_eq!(listing.len(), 1);
    assert_eq!(listing[0].member_count, 1);

    consumer.close().unwrap();
    let description = coordinator.describe_group("g").unwrap();
    assert_eq!(description.state, GroupState::Empty);
    assert!(description.members.is_empty());
    assert_eq!(description.partitions.len(), 2);
    assert_matches!(
        coordinator.describe_group("nobody").unwrap_err(),
        DescribeError::UnknownGroup { .. }
    );
}

#[test]
fn deleting_a_group_removes_its_offsets_and_refuses_a_group_with_members() {
    let groups = Groups::new(1, 3);
    let consumer = groups.committed_consumer("g", 3);
    assert_matches!(
        groups.coordinator.delete_group("g").unwrap_err(),
        DeleteGroupError::NotEmpty {
            member_count: 1,
            ..
        }
    );
    consumer.close().unwrap();
    groups.coordinator.delete_group("g").unwrap();
    assert_eq!(groups.coordinator.committed("g", &tp("t", 0)), None);
    assert!(groups.coordinator.list_groups().is_empty());
    assert_matches!(
        groups.coordinator.delete_group("g").unwrap_err(),
        DeleteGroupError::UnknownGroup { .. }
    );
}

#[test]
fn polling_before_subscribing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path());
    let coordinator = GroupCoordinator::open(&engine).unwrap();
    let mut consumer = coordinator.consumer(config("g"));
    assert_matches!(
        consumer.poll(Duration::ZERO).unwrap_err(),
        PollError::NotSubscribed
    );
    let mut nameless = coordinator.consumer(config(""));
    assert!(nameless.subscribe(&["t"]).is_err());
    assert!(consumer.subscribe(&["bad/name"]).is_err());
}
