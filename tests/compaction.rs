//! Compaction of a partition log (issue 5): against a model (the latest record per key, offsets
//! unchanged; tombstones kept until their delete horizon, then dropped), across reopens; and the
//! swap protocol interrupted at every file operation — each crash reopens to exactly the log
//! before or the log after the compaction, nothing lost and nothing duplicated.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use seglog::cleaner::offset_map::OffsetMap;
use seglog::config::LogConfig;
use seglog::io::Storage;
use seglog::io::hooked::{StorageHooks, StorageOp};
use seglog::io::pio::PositionedIo;
use seglog::log::{CompactionOutcome, PartitionLog};
use seglog::types::{Offset, TimestampMs};
use support::batches::{self, Row, T0, records_from, rows_from};
use support::configs::{compacted, small_segments};
use support::dirs::segment_bases;
use support::engines::{append as append_to, engine_config, fetch_batches};
use support::hooks::{hooked_pio, wait_every};
use support::logs::{log_batches, open_options, try_open_log};

mod support;

const DELETE_RETENTION_MS: i64 = 1_000;

fn config() -> LogConfig {
    compacted(small_segments(600, 64))
}

fn open(storage: Arc<dyn Storage>, dir: &Path, clean: bool) -> PartitionLog {
    try_open(storage, dir, clean).unwrap()
}

fn try_open(
    storage: Arc<dyn Storage>,
    dir: &Path,
    clean: bool,
) -> Result<PartitionLog, seglog::error::OpenError> {
    let options = open_options(clean, 0, T0);
    try_open_log(storage, dir, "compacted", config(), options).map(|(log, _)| log)
}

/// A log in `dir` on `storage` holding the (key, value or tombstone) records `records`.
fn log_of(storage: Arc<dyn Storage>, dir: &Path, records: &[(u8, Option<u32>)]) -> PartitionLog {
    let mut log = open(storage, dir, false);
    for (key, value) in records {
        append(&mut log, *key, *value);
    }
    log
}

/// (key, value or tombstone) records, one batch each.
fn append(log: &mut PartitionLog, key: u8, value: Option<u32>) {
    log.append(keyed_batch(key, value), TimestampMs(T0))
        .unwrap();
}

/// A one-record batch: key `k<key>`, a 55-byte value numbered `value` (or a tombstone).
fn keyed_batch(key: u8, value: Option<u32>) -> bytes::Bytes {
    let value = value.map(|value| format!("value-{value:08}-{}", "x".repeat(40)));
    let value = value.as_deref().map(str::as_bytes);
    batches::keyed_batch(Some(&[b'k', key]), value, T0)
}

/// Compacts the whole log once, with a fresh offset map, at T0.
fn compact_once(log: &mut PartitionLog) -> CompactionOutcome {
    let mut map = OffsetMap::new(64 * 1024).unwrap();
    log.compact(&mut map, Offset(0), DELETE_RETENTION_MS, TimestampMs(T0))
        .unwrap()
}

/// Every record of the log: (offset, key, value).
fn contents(log: &mut PartitionLog) -> Vec<Row> {
    let start = log.log_start_offset().0;
    rows_from(&log_batches(log), start)
}

/// What compaction must leave: below `mapped_end`, the latest record per key (tombstones only if
/// `keep_tombstones`); at and above it, everything.
fn expected(all: &[Row], mapped_end: u64, keep_tombstones: bool) -> Vec<Row> {
    let mut latest: BTreeMap<&[u8], u64> = BTreeMap::new();
    for (offset, key, _) in all.iter().filter(|row| row.0 < mapped_end) {
        latest.insert(key, *offset);
    }
    all.iter()
        .filter(|(offset, key, value)| {
            *offset >= mapped_end
                || (latest[key.as_slice()] == *offset && (value.is_some() || keep_tombstones))
        })
        .cloned()
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn compaction_keeps_the_latest_record_per_key_with_offsets_unchanged(
        records in proptest::collection::vec((0u8..6, proptest::option::weighted(0.8, 0u32..1000)), 1..60),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(PositionedIo);
        let mut log = log_of(storage.clone(), dir.path(), &records);
        let before = contents(&mut log);
        let mut map = OffsetMap::new(64 * 1024).unwrap();
        let outcome = log.compact(&mut map, Offset(0), DELETE_RETENTION_MS, TimestampMs(T0)).unwrap();
        let mapped_end = outcome.first_dirty_offset.0;
        let after = contents(&mut log);
        prop_assert_eq!(&after, &expected(&before, mapped_end, true), "first cleaning keeps tombstones");
        log.close().unwrap();
        let mut log = open(storage.clone(), dir.path(), true);
        prop_assert_eq!(&contents(&mut log), &after, "a reopen serves the compacted log");
        let later = TimestampMs(T0 + DELETE_RETENTION_MS + 1);
        let second = log.compact(&mut map, Offset(0), DELETE_RETENTION_MS, later).unwrap();
        prop_assert_eq!(second.first_dirty_offset.0, mapped_end);
        prop_assert_eq!(contents(&mut log), expected(&before, mapped_end, false), "expired tombstones go");
    }
}

/// sim_ops (F13): DeleteRecords raised the log start past a key's tombstone, and compaction
/// mapped keys only from the log start: the older value of that key below it was kept while the
/// tombstone expired and went. The log start offset is checkpointed lazily (as Kafka's), so
/// after a crash it fell back and the value was served again: a resurrection. Compaction maps
/// from its first dirty offset whatever the log start, so the value goes with the first cleaning.
#[test]
fn a_tombstone_below_the_log_start_still_removes_older_values_of_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(PositionedIo);
    let mut log = open(storage.clone(), dir.path(), false);
    append(&mut log, 7, Some(1));
    append(&mut log, 7, None);
    for value in 0..12 {
        append(&mut log, value % 3, Some(value.into()));
    }
    log.delete_records(Offset(2), TimestampMs(T0)).unwrap();
    let mut map = OffsetMap::new(64 * 1024).unwrap();
    log.compact(&mut map, Offset(0), 0, TimestampMs(T0))
        .unwrap();
    log.compact(&mut map, Offset(0), 0, TimestampMs(T0 + 1))
        .unwrap();
    log.close().unwrap();
    // Reopened without the log start checkpoint, as after a crash before it was written.
    let mut log = open(storage, dir.path(), true);
    assert_eq!(log.log_start_offset(), Offset(0));
    let served_key_7: Vec<Row> = contents(&mut log)
        .into_iter()
        .filter(|(_, key, _)| key == &[b'k', 7])
        .collect();
    assert!(
        served_key_7.iter().all(|(_, _, value)| value.is_none()),
        "a value of key 7 outlived its tombstone: {served_key_7:?}"
    );
}

/// Hooks that fail the Nth rename, remove or directory sync (counting from 1) with EIO.
#[derive(Debug)]
struct FailingAt {
    operations: AtomicUsize,
    fail_at: AtomicUsize,
}

impl FailingAt {
    /// Fails the `count`th operation from now.
    fn arm(&self, count: usize) {
        let now = self.operations.load(Ordering::SeqCst);
        self.fail_at.store(now + count, Ordering::SeqCst);
    }

    fn step(&self) -> io::Result<()> {
        if self.operations.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_at.load(Ordering::SeqCst)
        {
            return Err(io::Error::from_raw_os_error(5));
        }
        Ok(())
    }
}

impl StorageHooks for FailingAt {
    fn before(&self, op: StorageOp, _path: &Path) -> io::Result<()> {
        match op {
            StorageOp::Rename | StorageOp::RemoveFile | StorageOp::SyncDir => self.step(),
            _ => Ok(()),
        }
    }
}

#[test]
fn a_crash_at_any_step_of_the_swap_reopens_to_before_or_after() {
    let keys_and_values: Vec<(u8, Option<u32>)> =
        (0..40).map(|i| ((i % 5) as u8, Some(i))).collect();
    let (before, after) = {
        let dir = tempfile::tempdir().unwrap();
        let mut log = log_of(Arc::new(PositionedIo), dir.path(), &keys_and_values);
        let before = contents(&mut log);
        compact_once(&mut log);
        (before, contents(&mut log))
    };
    assert_ne!(before, after);
    let mut interrupted = 0;
    for fail_at in 1..200 {
        let dir = tempfile::tempdir().unwrap();
        let failing = Arc::new(FailingAt {
            operations: AtomicUsize::new(0),
            fail_at: AtomicUsize::new(usize::MAX),
        });
        let mut log = log_of(hooked_pio(failing.clone()), dir.path(), &keys_and_values);
        failing.arm(fail_at);
        let mut map = OffsetMap::new(64 * 1024).unwrap();
        let result = log.compact(&mut map, Offset(0), DELETE_RETENTION_MS, TimestampMs(T0));
        drop(log);
        if result.is_ok() {
            break;
        }
        interrupted += 1;
        let mut reopened = open(Arc::new(PositionedIo), dir.path(), false);
        let state = contents(&mut reopened);
        let partial_prefix_ok = is_partially_compacted(&before, &after, &state);
        assert!(
            state == before || state == after || partial_prefix_ok,
            "crash at step {fail_at}: neither before nor after"
        );
    }
    assert!(
        interrupted >= 5,
        "the swap has several steps to interrupt: {interrupted}"
    );
}

/// Segments are swapped one at a time: a crash between two segments' swaps leaves a log whose
/// records are the compacted ones for the finished segments and the original ones after them —
/// still every latest value, no duplicate offset, offsets increasing.
fn is_partially_compacted(before: &[Row], after: &[Row], state: &[Row]) -> bool {
    let increasing = state.windows(2).all(|pair| pair[0].0 < pair[1].0);
    let from_before = state.iter().all(|row| before.contains(row));
    let keeps_latest = after.iter().all(|row| state.contains(row));
    increasing && from_before && keeps_latest
}

#[test]
fn the_engine_compacts_compacted_topics_and_checkpoints_the_cleaner_progress() {
    use seglog::engine::Engine;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), engine_config(2)).unwrap();
    let topic = engine.create_topic("latest", 1, config()).unwrap();
    engine
        .create_topic("plain", 1, LogConfig::default())
        .unwrap();
    for sequence in 0..60u32 {
        append_to(
            &engine,
            &topic,
            0,
            keyed_batch((sequence % 4) as u8, Some(sequence)),
        );
    }
    let reports = engine.compact(None).unwrap();
    assert_eq!(reports.len(), 1, "only the compacted topic is compacted");
    let outcome = reports[0].outcome.as_ref().unwrap();
    assert!(outcome.segments_cleaned > 0);
    assert!(outcome.bytes_after < outcome.bytes_before);
    let first_dirty = outcome.first_dirty_offset;
    let checkpoint = std::fs::read_to_string(dir.path().join("cleaner-offset-checkpoint")).unwrap();
    assert!(
        checkpoint.contains(&format!("latest 0 {}", first_dirty.0)),
        "{checkpoint}"
    );
    let again = engine.compact(Some("latest")).unwrap();
    assert_eq!(
        again[0].outcome.as_ref().unwrap().segments_cleaned,
        0,
        "nothing new is dirty"
    );
    engine.close().unwrap();
    let engine = Engine::open(dir.path(), engine_config(2)).unwrap();
    let mut values_below_dirty = BTreeMap::new();
    for (offset, record) in records_from(&fetch_batches(&engine, &topic, 0), 0) {
        if offset < first_dirty.0 {
            let key = record.key.unwrap().to_vec();
            let first_of_key = values_below_dirty.insert(key, offset).is_none();
            assert!(first_of_key, "one record per key below the dirty offset");
        }
    }
    assert!(!values_below_dirty.is_empty());
    engine.close().unwrap();
}

#[test]
fn shards_compact_dirty_logs_on_their_own() {
    use seglog::engine::Engine;
    use std::time::Duration;
    let (_dir, engine) =
        support::engines::temp_engine(engine_config(1).with_cleaner_backoff_ms(20));
    let topic = engine.create_topic("auto", 1, config()).unwrap();
    let count_records = |engine: &Engine| records_from(&fetch_batches(engine, &topic, 0), 0).len();
    for sequence in 0..40u32 {
        append_to(
            &engine,
            &topic,
            0,
            keyed_batch((sequence % 2) as u8, Some(sequence)),
        );
    }
    let compacted = || count_records(&engine) < 40;
    wait_every(
        Duration::from_millis(20),
        Duration::from_secs(10),
        compacted,
    );
    assert!(
        count_records(&engine) < 40,
        "the shard compacted the dirty log without being asked"
    );
    engine.close().unwrap();
}

/// The cleaned end (`seglog-cleaned-end`): a compacted partition gets it at 0 when created; a
/// compaction raises it to the end of what it rewrote before the swap. A sealed segment above it
/// was only appended to, so a batch there with a gap before it (a misdirected write) fails the
/// reopen instead of passing for compaction.
#[test]
fn segments_above_the_cleaned_end_are_held_to_dense_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("seglog-cleaned-end");
    let mut log = open(Arc::new(PositionedIo), dir.path(), false);
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "0\n0\n");
    for value in 0..30 {
        append(&mut log, (value % 3) as u8, Some(value));
    }
    compact_once(&mut log);
    let cleaned_end: u64 = std::fs::read_to_string(&marker)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(cleaned_end > 0, "the compaction raised it");
    for value in 30..60 {
        append(&mut log, (value % 3) as u8, Some(value));
    }
    log.close().unwrap();
    let bases = segment_bases(dir.path());
    let above = *bases
        .iter()
        .find(|base| **base >= cleaned_end && Some(*base) != bases.last())
        .expect("a sealed segment above the cleaned end");
    // Its first batch claims the next offset: a gap at the segment's start, outside the CRC.
    shift_first_base_offset(dir.path(), above);
    let error = try_open(Arc::new(PositionedIo), dir.path(), false)
        .map(|_| ())
        .unwrap_err();
    assert!(format!("{error:?}").contains("Corrupt"), "{error}");
}

/// Adds one to the base offset of the first batch of segment `base` (a field the CRC does not
/// cover, so the batch still passes its CRC).
fn shift_first_base_offset(dir: &Path, base: u64) {
    let path = dir.join(format!("{base:020}.log"));
    let mut bytes = std::fs::read(&path).unwrap();
    let shifted = (base + 1).to_be_bytes();
    bytes[..8].copy_from_slice(&shifted);
    std::fs::write(&path, bytes).unwrap();
}
