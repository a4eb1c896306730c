//! The engine as a replica's log (issue 43: what a Raft log store needs of it): an append at a
//! named offset with the leader's epoch stamped, refused where the log ends elsewhere; a cut of a
//! suffix (`truncate_to`); a restart empty at a leader's log start
//! (`truncate_fully_and_start_at`). Each survives a reopen, clean or not, and answers what was
//! in flight before it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use seglog::engine::{Durability, Engine, FetchOptions};
use seglog::error::{AppendError, ReadError, TruncateError};
use seglog::types::{Offset, TopicName};
use support::batches::{repeated_batch, value_batch};
use support::configs::small_segments;
use support::engines::{engine_config, fetch_batches, fetch_values};

mod support;

const TOPIC: &str = "replica";

fn open(dir: &std::path::Path) -> (Engine, TopicName) {
    let engine = Engine::open(dir, engine_config(1)).unwrap();
    let topic = match engine.describe_topic(TOPIC) {
        Ok(description) => description.topic,
        Err(_) => engine
            .create_topic(TOPIC, 1, small_segments(4096, 512))
            .unwrap(),
    };
    (engine, topic)
}

/// Appends `count` three-record batches at the log end with `epoch`; returns the log end.
fn append_batches(engine: &Engine, topic: &TopicName, count: usize, epoch: i32) -> Offset {
    let mut end = log_end(engine, topic);
    for _ in 0..count {
        let batch = repeated_batch(3, None, &[b'x'; 200], 1_000);
        let info = engine
            .append_at(topic, 0, batch, end, epoch, Durability::Durable)
            .wait()
            .unwrap();
        assert_eq!(info.first_offset, end);
        end = info.last_offset.next();
    }
    end
}

fn log_end(engine: &Engine, topic: &TopicName) -> Offset {
    let description = engine.describe_partition(topic.as_str(), 0).unwrap();
    description.log_end_offset
}

fn log_start(engine: &Engine, topic: &TopicName) -> Offset {
    let description = engine.describe_partition(topic.as_str(), 0).unwrap();
    description.log_start_offset
}

#[test]
fn an_append_at_the_log_end_stamps_the_leader_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, topic) = open(dir.path());
    append_batches(&engine, &topic, 2, 7);
    engine
        .append(&topic, 0, value_batch("plain"), Durability::Written)
        .wait()
        .unwrap();
    let epochs: Vec<i32> = fetch_batches(&engine, &topic, 0)
        .iter()
        .map(|batch| batch.header().partition_leader_epoch)
        .collect();
    assert_eq!(epochs, vec![7, 7, -1]);
    engine.close().unwrap();
}

#[test]
fn an_append_at_another_offset_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, topic) = open(dir.path());
    let end = append_batches(&engine, &topic, 1, 1);
    for wrong in [Offset(0), end.next(), Offset(end.0 + 100)] {
        let refused = engine
            .append_at(&topic, 0, value_batch("v"), wrong, 1, Durability::Durable)
            .wait();
        match refused {
            Err(AppendError::LogEndMismatch {
                expected,
                log_end_offset,
            }) => {
                assert_eq!(expected, wrong);
                assert_eq!(log_end_offset, end);
            }
            other => panic!("expected LogEndMismatch, got {other:?}"),
        }
    }
    assert_eq!(log_end(&engine, &topic), end);
    // Appends queued together: the one that expects the right offset lands, the others not.
    let pendings: Vec<_> = [end, end, Offset(end.0 + 1)]
        .into_iter()
        .map(|at| engine.append_at(&topic, 0, value_batch("q"), at, 2, Durability::Written))
        .collect();
    let outcomes: Vec<bool> = pendings.into_iter().map(|p| p.wait().is_ok()).collect();
    assert_eq!(outcomes, vec![true, false, true]);
    assert_eq!(log_end(&engine, &topic), Offset(end.0 + 2));
    engine.close().unwrap();
}

#[test]
fn truncate_to_cuts_the_suffix_and_appends_continue_from_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, topic) = open(dir.path());
    // Many segments (4 KiB each, ~700 B per batch): the cut removes whole segments too.
    let end = append_batches(&engine, &topic, 30, 1);
    assert_eq!(end, Offset(90));
    let segments_before = engine.describe_partition(TOPIC, 0).unwrap().segment_count;
    let cut = engine.truncate_to(&topic, 0, Offset(30)).wait().unwrap();
    assert_eq!(cut, Offset(30));
    let after = engine.describe_partition(TOPIC, 0).unwrap();
    assert!(after.segment_count < segments_before);
    assert_eq!(after.log_end_offset, Offset(30));
    assert!(after.durable_offset <= Offset(30));
    // A cut inside a batch keeps none of it: the log ends at the batch's base.
    let cut = engine.truncate_to(&topic, 0, Offset(25)).wait().unwrap();
    assert_eq!(cut, Offset(24));
    // A cut at or past the end changes nothing.
    let cut = engine.truncate_to(&topic, 0, Offset(1_000)).wait().unwrap();
    assert_eq!(cut, Offset(24));
    let end = append_batches(&engine, &topic, 2, 2);
    assert_eq!(end, Offset(30));
    let offsets: Vec<u64> = fetch_values(&engine, &topic, 0)
        .iter()
        .map(|(offset, _)| *offset)
        .collect();
    assert_eq!(offsets, (0..30).collect::<Vec<_>>());
    let epochs: Vec<i32> = fetch_batches(&engine, &topic, 0)
        .iter()
        .map(|batch| batch.header().partition_leader_epoch)
        .collect();
    assert_eq!(epochs[..8], [1; 8]);
    assert_eq!(epochs[8..], [2, 2]);
    engine.close().unwrap();
    // The cut and what followed it survive a reopen.
    let (engine, topic) = open(dir.path());
    assert_eq!(log_end(&engine, &topic), Offset(30));
    assert_eq!(fetch_values(&engine, &topic, 0).len(), 30);
    engine.close().unwrap();
}

#[test]
fn a_truncation_survives_an_unclean_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, topic) = open(dir.path());
    append_batches(&engine, &topic, 20, 1);
    engine.truncate_to(&topic, 0, Offset(12)).wait().unwrap();
    let end = append_batches(&engine, &topic, 1, 3);
    // Dropped without close: no clean-shutdown marker; recovery reads the files.
    drop(engine);
    let (engine, topic) = open(dir.path());
    assert_eq!(log_end(&engine, &topic), end);
    let epochs: Vec<i32> = fetch_batches(&engine, &topic, 0)
        .iter()
        .map(|batch| batch.header().partition_leader_epoch)
        .collect();
    assert_eq!(epochs, vec![1, 1, 1, 1, 3]);
    engine.close().unwrap();
}

/// The recovery point the checkpoint file holds for the replica's partition.
fn checkpointed_recovery_point(dir: &std::path::Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("recovery-point-offset-checkpoint")).unwrap();
    text.lines().skip(2).find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            [TOPIC, "0", offset] => offset.parse().ok(),
            _ => None,
        }
    })
}

#[test]
fn a_truncation_is_answered_once_the_checkpoint_holds_the_lowered_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, topic) = open(dir.path());
    let end = append_batches(&engine, &topic, 10, 1);
    engine.checkpoint().unwrap();
    assert_eq!(checkpointed_recovery_point(dir.path()), Some(end.0));
    engine.truncate_to(&topic, 0, Offset(12)).wait().unwrap();
    // An unclean open trusts what lies below the checkpointed recovery point: never the cut's.
    assert_eq!(checkpointed_recovery_point(dir.path()), Some(12));
    engine
        .truncate_fully_and_start_at(&topic, 0, Offset(500))
        .wait()
        .unwrap();
    assert_eq!(checkpointed_recovery_point(dir.path()), Some(500));
    engine.close().unwrap();
}

#[test]
fn truncate_to_below_the_log_start_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, topic) = open(dir.path());
    append_batches(&engine, &topic, 20, 1);
    engine.delete_records(&topic, 0, Offset(30)).wait().unwrap();
    match engine.truncate_to(&topic, 0, Offset(10)).wait() {
        Err(TruncateError::BelowLogStart {
            requested,
            log_start_offset,
        }) => {
            assert_eq!(requested, Offset(10));
            assert_eq!(log_start_offset, Offset(30));
        }
        other => panic!("expected BelowLogStart, got {other:?}"),
    }
    assert_eq!(log_end(&engine, &topic), Offset(60));
    engine.close().unwrap();
}

#[test]
fn truncate_fully_and_start_at_empties_the_log_at_any_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, topic) = open(dir.path());
    let end = append_batches(&engine, &topic, 20, 1);
    // Past the end, below the end, and at an existing segment's base (a name reused).
    let first_sealed_base = Offset(0);
    for start in [Offset(end.0 + 500), Offset(100), first_sealed_base] {
        let answered = engine
            .truncate_fully_and_start_at(&topic, 0, start)
            .wait()
            .unwrap();
        assert_eq!(answered, start);
        let description = engine.describe_partition(TOPIC, 0).unwrap();
        assert_eq!(description.log_start_offset, start);
        assert_eq!(description.log_end_offset, start);
        assert_eq!(description.segment_count, 1);
        assert!(fetch_batches_from(&engine, &topic, start).is_empty());
        append_batches(&engine, &topic, 10, 4);
    }
    engine.close().unwrap();
    let (engine, topic) = open(dir.path());
    assert_eq!(log_start(&engine, &topic), Offset(0));
    assert_eq!(log_end(&engine, &topic), Offset(30));
    engine.close().unwrap();
}

#[test]
fn a_restart_at_an_offset_survives_an_unclean_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, topic) = open(dir.path());
    append_batches(&engine, &topic, 20, 1);
    engine
        .truncate_fully_and_start_at(&topic, 0, Offset(1_000))
        .wait()
        .unwrap();
    let end = append_batches(&engine, &topic, 2, 2);
    drop(engine);
    let (engine, topic) = open(dir.path());
    assert_eq!(log_start(&engine, &topic), Offset(1_000));
    assert_eq!(log_end(&engine, &topic), end);
    let first = fetch_batches_from(&engine, &topic, Offset(1_000));
    assert_eq!(first.len(), 2);
    assert_eq!(first[0].header().partition_leader_epoch, 2);
    engine.close().unwrap();
}

#[test]
fn appends_in_flight_are_answered_before_a_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, topic) = open(dir.path());
    append_batches(&engine, &topic, 4, 1);
    let in_flight: Vec<_> = (0..8)
        .map(|_| engine.append(&topic, 0, value_batch("w"), Durability::Durable))
        .collect();
    engine.truncate_to(&topic, 0, Offset(6)).wait().unwrap();
    for pending in in_flight {
        let info = pending.wait().unwrap();
        assert!(info.durable);
        assert!(info.first_offset >= Offset(12));
    }
    assert_eq!(log_end(&engine, &topic), Offset(6));
    engine.close().unwrap();
}

#[test]
fn a_fetch_parked_at_the_log_end_is_answered_by_a_cut_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, topic) = open(dir.path());
    let end = append_batches(&engine, &topic, 4, 1);
    let long_poll = FetchOptions {
        min_bytes: 1,
        max_wait_ms: 60_000,
        ..FetchOptions::default()
    };
    let mut parked = engine.fetch(&topic, 0, end, long_poll);
    // The shard takes requests in order: the fetch is parked before the cut arrives, and is
    // answered before the cut is.
    engine.truncate_to(&topic, 0, Offset(6)).wait().unwrap();
    let mut context = Context::from_waker(Waker::noop());
    match Pin::new(&mut parked).poll(&mut context) {
        Poll::Ready(Err(ReadError::OffsetOutOfRange { .. })) => {}
        other => panic!("expected the parked fetch answered out of range, got {other:?}"),
    }
    engine.close().unwrap();
}

#[test]
fn an_internal_topic_cannot_be_truncated_nor_appended_at() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = open(dir.path());
    let internal = TopicName::parse("__consumer_offsets").unwrap();
    let truncated = engine.truncate_to(&internal, 0, Offset(0)).wait();
    assert!(matches!(
        truncated,
        Err(TruncateError::InternalTopic { .. })
    ));
    let restarted = engine
        .truncate_fully_and_start_at(&internal, 0, Offset(5))
        .wait();
    assert!(matches!(
        restarted,
        Err(TruncateError::InternalTopic { .. })
    ));
    let appended = engine
        .append_at(
            &internal,
            0,
            value_batch("x"),
            Offset(0),
            1,
            Durability::Written,
        )
        .wait();
    assert!(matches!(appended, Err(AppendError::InternalTopic { .. })));
    let unknown = TopicName::parse("nope").unwrap();
    let truncated = engine.truncate_to(&unknown, 0, Offset(0)).wait();
    assert!(matches!(
        truncated,
        Err(TruncateError::UnknownPartition { .. })
    ));
    engine.close().unwrap();
}

fn fetch_batches_from(
    engine: &Engine,
    topic: &TopicName,
    from: Offset,
) -> Vec<seglog::format::Batch> {
    support::engines::try_fetch_batches(engine, topic, 0, from.0).unwrap()
}
