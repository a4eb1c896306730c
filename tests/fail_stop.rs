//! Fail-stop on storage errors (issue 41, items 1 and 2; RELIABILITY.md R26, R27), on the
//! simulated disk: a failed write, sync or rename takes its partition offline — appends and
//! fetches fail with `StorageError::Offline` while the other partitions serve — and nothing
//! forgets it: not an eviction to bound open files, not a checkpoint, not the clean-shutdown
//! marker. Only a reopen brings the partition back, through recovery, with every acknowledged
//! durable record.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig};
use seglog::error::{AppendError, FlushError, ReadError, StorageError};
use seglog::format::Batch;
use seglog::io::sim::{Fault, SimStorage};
use seglog::types::{Offset, TopicName};
use support::batches::value_batch;
use support::engines::{self, try_fetch_batches};

mod support;

const CLEAN_SHUTDOWN_MARKER: &str = ".kafka_cleanshutdown";
const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";

fn record(value: u32) -> Bytes {
    value_batch(&format!("value-{value:06}-{}", "x".repeat(100)))
}

/// One shard, one open partition at a time, no background syncs or checkpoints: each sync the
/// tests count is one they asked for.
fn engine_config() -> EngineConfig {
    engines::engine_config(1)
        .with_open_partitions_max(1)
        .with_direct_writes(false)
        .with_sync_inline_when_idle(false)
        .with_background_sync_bytes(0)
        .with_recovery_point_checkpoint_interval_ms(3_600_000)
        .with_retention_check_interval_ms(3_600_000)
}

/// Segments of about two records: the second append rolls.
fn small_segments() -> LogConfig {
    LogConfig::default().with_segment_bytes(400)
}

fn open(dir: &Path, sim: &SimStorage) -> Engine {
    Engine::open_with_storage(dir, engine_config(), Arc::new(sim.clone())).unwrap()
}

/// A fresh directory with topics `a` and `b`, closed cleanly and opened again: the engine now
/// trusts every partition's files, as after any clean restart.
fn reopened_clean(seed: u64) -> (tempfile::TempDir, SimStorage, Engine, TopicName, TopicName) {
    let dir = tempfile::tempdir().unwrap();
    let sim = SimStorage::new(dir.path(), seed).unwrap();
    let engine = open(dir.path(), &sim);
    engine.create_topic("a", 1, small_segments()).unwrap();
    engine.create_topic("b", 1, small_segments()).unwrap();
    engine.close().unwrap();
    let engine = open(dir.path(), &sim);
    let a = TopicName::parse("a").unwrap();
    let b = TopicName::parse("b").unwrap();
    (dir, sim, engine, a, b)
}

fn append(
    engine: &Engine,
    topic: &TopicName,
    value: u32,
    durability: Durability,
) -> Result<Offset, AppendError> {
    engine
        .append(topic, 0, record(value), durability)
        .wait()
        .map(|info| info.first_offset)
}

fn fetch_all(engine: &Engine, topic: &TopicName) -> Result<Vec<i64>, ReadError> {
    let batches = try_fetch_batches(engine, topic, 0, 0)?;
    Ok(batches.iter().map(Batch::last_offset).collect())
}

fn is_offline_append(result: &Result<Offset, AppendError>) -> bool {
    matches!(
        result,
        Err(AppendError::Storage(StorageError::Offline { .. }))
    )
}

fn is_offline_read(result: &Result<Vec<i64>, ReadError>) -> bool {
    matches!(
        result,
        Err(ReadError::Storage(StorageError::Offline { .. }))
    )
}

fn recovery_points(dir: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(dir.join(RECOVERY_POINT_CHECKPOINT)).unwrap();
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            Some((
                format!("{}-{}", fields.first()?, fields.get(1)?),
                fields.get(2)?.parse().ok()?,
            ))
        })
        .collect()
}

/// [`reopened_clean`], a durable record appended to `a`, and the next sync set to fail.
fn a_record_then_a_failing_sync(
    seed: u64,
) -> (tempfile::TempDir, SimStorage, Engine, TopicName, TopicName) {
    let (dir, sim, engine, a, b) = reopened_clean(seed);
    assert_eq!(
        append(&engine, &a, 0, Durability::Durable).unwrap(),
        Offset(0)
    );
    sim.schedule(Fault::SyncError, 1);
    (dir, sim, engine, a, b)
}

#[test]
fn a_failed_sync_takes_its_partition_offline_for_appends_and_fetches_until_a_reopen() {
    let (dir, sim, engine, a, b) = a_record_then_a_failing_sync(1);
    let failed = append(&engine, &a, 1, Durability::Durable);
    assert!(
        failed.is_err(),
        "the append whose sync failed is not acknowledged"
    );
    assert!(!sim.faults_fired().is_empty(), "the fault fired");
    assert!(
        is_offline_append(&append(&engine, &a, 2, Durability::Written)),
        "later appends are refused as offline"
    );
    assert!(
        is_offline_read(&fetch_all(&engine, &a)),
        "fetches fail instead of serving bytes whose append failed"
    );
    assert_eq!(
        append(&engine, &b, 0, Durability::Durable).unwrap(),
        Offset(0)
    );
    assert_eq!(
        fetch_all(&engine, &b).unwrap(),
        [0],
        "the other partition serves"
    );
    let described = engine.describe_topic("a").unwrap();
    assert!(
        described.partitions[0].offline.is_some(),
        "describe says why"
    );
    let closed = engine.close();
    assert!(
        matches!(
            closed,
            Err(FlushError::Storage(StorageError::Offline { .. }))
        ),
        "close names the offline partition: {closed:?}"
    );
    assert!(
        !dir.path().join(CLEAN_SHUTDOWN_MARKER).exists(),
        "no clean-shutdown marker while a partition is offline"
    );
    drop(engine);
    let engine = open(dir.path(), &sim);
    let served = fetch_all(&engine, &a).unwrap();
    assert_eq!(served[0], 0, "the acknowledged record survives: {served:?}");
    let next = append(&engine, &a, 3, Durability::Durable).unwrap();
    assert_eq!(
        next,
        Offset(served.len() as u64),
        "the reopened partition appends"
    );
    engine.close().unwrap();
}

/// A flush of an offline partition answers its failure even when nothing is left to sync: a
/// failed write leaves the log end where the last sync reached, and a flush answered `Ok` would
/// read as "everything written is durable".
#[test]
fn a_flush_of_an_offline_partition_fails_with_nothing_left_to_sync() {
    let (_dir, sim, engine, a, _b) = reopened_clean(5);
    assert_eq!(
        append(&engine, &a, 0, Durability::Durable).unwrap(),
        Offset(0)
    );
    sim.schedule(Fault::WriteError, 1);
    assert!(append(&engine, &a, 1, Durability::Written).is_err());
    assert!(!sim.faults_fired().is_empty(), "the fault fired");
    let described = engine.describe_topic("a").unwrap();
    let partition = &described.partitions[0];
    assert!(partition.offline.is_some(), "{partition:?}");
    assert_eq!(partition.log_end_offset, partition.durable_offset);
    let flushed = engine.flush(&a, 0).wait();
    assert!(flushed.is_err(), "a named flush: {flushed:?}");
    assert!(engine.flush_all().is_err(), "a flush of everything");
}

/// Item 2: the failed seal sync, then an eviction to bound open files, then a use of the
/// partition. The eviction must not forget the failure: the partition stays offline (today's
/// code reopened it trusting its files), its checkpoint entry keeps its value from before the
/// failure (today's code wrote the log end), and the next open recovers it.
#[test]
fn a_failed_seal_sync_is_not_forgotten_by_an_eviction_and_the_next_open_recovers() {
    let (dir, sim, engine, a, b) = a_record_then_a_failing_sync(2);
    // The roll leaves the sealed segment's sync to the sync threads; it fails.
    append(&engine, &a, 1, Durability::Written).unwrap();
    append(&engine, &a, 2, Durability::Written).unwrap();
    let flushed = engine.flush(&a, 0).wait();
    assert!(
        flushed.is_err(),
        "the failed seal sync fails the flush: {flushed:?}"
    );
    let fired = sim.faults_fired();
    assert_eq!(fired.len(), 1);
    assert!(fired[0].1.to_string_lossy().ends_with(".log"), "{fired:?}");
    // `b` takes the shard's only open partition: `a` is closed.
    append(&engine, &b, 0, Durability::Written).unwrap();
    assert!(
        is_offline_append(&append(&engine, &a, 3, Durability::Durable)),
        "after the eviction the partition is still offline"
    );
    assert!(is_offline_read(&fetch_all(&engine, &a)));
    engine.checkpoint().unwrap();
    assert_eq!(
        recovery_points(dir.path())["a-0"],
        0,
        "the offline partition's checkpoint keeps its value from before the failure"
    );
    assert!(engine.close().is_err());
    assert!(!dir.path().join(CLEAN_SHUTDOWN_MARKER).exists());
    drop(engine);
    sim.crash().unwrap();
    let engine = open(dir.path(), &sim);
    let served = fetch_all(&engine, &a).unwrap();
    assert_eq!(
        served.first(),
        Some(&0),
        "the durable record survives the power cut"
    );
    engine.close().unwrap();
}

/// A partition released to bound open files with appends no sync covered yet, then opened
/// again in the same process: its files are trusted, but its recovery point stays where its
/// syncs left it (today's code moved it to the log end, calling unsynced bytes durable).
#[test]
fn a_partition_reopened_after_an_eviction_keeps_its_recovery_point_below_unsynced_bytes() {
    let (dir, _sim, engine, a, b) = reopened_clean(3);
    let appends = [
        (&a, 0, Durability::Durable),
        (&a, 1, Durability::Written),
        // `b` takes the shard's only open partition: `a` is closed.
        (&b, 0, Durability::Written),
    ];
    for (topic, value, durability) in appends {
        append(&engine, topic, value, durability).unwrap();
    }
    assert_eq!(
        fetch_all(&engine, &a).unwrap(),
        [0, 1],
        "reopened in this process"
    );
    engine.checkpoint().unwrap();
    assert_eq!(recovery_points(dir.path())["a-0"], 1);
    let described = engine.describe_topic("a").unwrap();
    assert_eq!(described.partitions[0].durable_offset, Offset(1));
    engine.close().unwrap();
}

/// A checkpoint file is the directory's, not a partition's: a failed write of one takes the
/// whole data directory offline, and no clean-shutdown marker is written.
#[test]
fn a_failed_checkpoint_write_takes_the_data_directory_offline() {
    let (dir, sim, engine, a, _b) = reopened_clean(4);
    append(&engine, &a, 0, Durability::Durable).unwrap();
    sim.schedule(Fault::NoSpace, 1);
    let checkpointed = engine.checkpoint();
    assert!(checkpointed.is_err(), "{checkpointed:?}");
    let refused = append(&engine, &a, 1, Durability::Durable);
    assert!(
        matches!(
            refused,
            Err(AppendError::Unavailable(
                seglog::error::EngineUnavailable::Offline { .. }
            ))
        ),
        "{refused:?}"
    );
    assert!(engine.close().is_err());
    assert!(!dir.path().join(CLEAN_SHUTDOWN_MARKER).exists());
    drop(engine);
    let engine = open(dir.path(), &sim);
    assert_eq!(fetch_all(&engine, &a).unwrap(), [0]);
    engine.close().unwrap();
}
