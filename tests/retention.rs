//! Retention (issue 5): each rule with an injected clock, on a partition log opened directly —
//! time (`retention.ms`, and the rule that a far-future timestamp cannot pin a segment), size
//! (`retention.bytes`), log start offset (`delete_records`) — the active-segment rule (roll first,
//! never delete an empty active one), `cleanup.policy=compact` turning off time and size, delayed
//! deletion through `.deleted` files (`file.delete.delay.ms`), bytes already read staying valid
//! after their segment is deleted, and the engine applying retention to every partition on
//! request.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, FetchOptions};
use seglog::error::{ReadError, StorageError};
use seglog::format::Batch;
use seglog::io::{Storage, storage_from_env};
use seglog::log::{LogOpenOptions, LogWriteMode, PartitionLog};
use seglog::types::{Offset, TimestampMs, TopicName};
use support::assert_matches;
use support::batches::{T0, keyed_batch};
use support::configs::{DELAY_MS, retention_config};
use support::dirs::count_ending;
use support::engines::{append, engine_config, every_partition, temp_engine};
use support::hooks::{hooked, wait_every, wait_until};
use support::logs::{open_log, open_options};

mod support;

const HOUR: i64 = 3_600_000;

fn config(settings: &[(&str, &str)]) -> LogConfig {
    retention_config(settings)
}

/// One batch of one 200-byte record stamped `timestamp_ms`.
fn batch(timestamp_ms: i64) -> Bytes {
    keyed_batch(Some(b"k"), Some(&[9u8; 200]), timestamp_ms)
}

/// The partition log `events-0` in a temporary directory on `storage`, opened as a fresh log
/// at the wall clock's time: `count` batches, the one at offset `i` stamped `T0 + i hours`, four
/// batches (of 275 bytes) per 1100-byte segment.
fn populated_on(
    storage: Arc<dyn Storage>,
    (config, mode): (LogConfig, LogWriteMode),
    count: i64,
) -> (tempfile::TempDir, PartitionLog) {
    let root = tempfile::tempdir().unwrap();
    let options = LogOpenOptions {
        mode,
        ..open_options(false, 0, TimestampMs::now().0)
    };
    let dir = root.path().join("events-0");
    let mut log = open_log(storage, &dir, "events", config, options);
    for offset in 0..count {
        log.append(batch(T0 + offset * HOUR), TimestampMs(T0 + offset * HOUR))
            .unwrap();
    }
    (root, log)
}

/// [`populated_on`] the backend `SEGLOG_IO_BACKEND` names, with `settings`.
fn populated(settings: &[(&str, &str)], count: i64) -> (tempfile::TempDir, PartitionLog) {
    populated_on(
        storage_from_env(),
        (config(settings), LogWriteMode::default()),
        count,
    )
}

fn deleted_files(root: &Path) -> usize {
    count_ending(&root.join("events-0"), ".deleted")
}

/// Creates the topic `name` of `partitions` partitions with `settings` and appends `count`
/// batches stamped in 2023 (`T0 + n` ms) to each partition of `filled`.
fn aging_topic(
    engine: &Engine,
    name: &str,
    partitions: u32,
    settings: &[(&str, &str)],
    filled: std::ops::Range<u32>,
    count: i64,
) -> TopicName {
    let topic = engine
        .create_topic(name, partitions, config(settings))
        .unwrap();
    for partition in filled {
        for offset in 0..count {
            append(engine, &topic, partition, batch(T0 + offset));
        }
    }
    topic
}

#[test]
fn time_retention_deletes_segments_whose_newest_record_is_older_than_retention_ms() {
    let (_root, mut log) = populated(&[("retention.hours", "10")], 20);
    let bases: Vec<u64> = log
        .segments()
        .map(|segment| segment.base_offset.0)
        .collect();
    assert_eq!(bases, vec![0, 4, 8, 12, 16], "four batches per segment");
    // At T0 + 25 h, a segment is older than 10 h when its newest record is before T0 + 15 h:
    // segments [0..4), [4..8), [8..12) (newest at 3, 7, 11 h); [12..16) has 15 h, not older.
    let outcome = log.apply_retention(TimestampMs(T0 + 25 * HOUR)).unwrap();
    assert_eq!(outcome.segments_deleted, 3);
    assert_eq!(outcome.log_start_offset, Offset(12));
    assert_eq!(log.log_start_offset(), Offset(12));
    assert_matches!(
        log.read(Offset(11), 1),
        Err(ReadError::OffsetOutOfRange {
            log_start_offset: Offset(12),
            ..
        })
    );
    assert_eq!(
        log.read(Offset(12), 1).unwrap().records.len(),
        batch(0).len()
    );
    let again = log.apply_retention(TimestampMs(T0 + 25 * HOUR)).unwrap();
    assert_eq!(
        again.segments_deleted, 0,
        "nothing more is due at the same time"
    );
}

#[test]
fn size_retention_keeps_the_log_at_or_above_retention_bytes() {
    let batch_bytes = batch(0).len() as i64;
    let limit = 9 * batch_bytes;
    let (_root, mut log) = populated(&[("retention.bytes", &limit.to_string())], 20);
    let outcome = log.apply_retention(TimestampMs(T0)).unwrap();
    // 20 batches in segments of 4: deleting two segments leaves 12 ≥ 9; a third would leave 8.
    assert_eq!(outcome.segments_deleted, 2);
    assert_eq!(outcome.bytes_deleted, 8 * batch_bytes as u64);
    assert!(log.size_bytes() >= limit as u64);
}

#[test]
fn delete_records_moves_the_log_start_and_retention_removes_what_lies_below() {
    let (_root, mut log) = populated(&[("cleanup.policy", "compact")], 20);
    log.delete_records(Offset(9), TimestampMs(T0)).unwrap();
    assert_eq!(
        log.segments().next().unwrap().base_offset,
        Offset(8),
        "segments wholly below 9 went"
    );
    let outcome = log.apply_retention(TimestampMs(T0 + 1_000 * HOUR)).unwrap();
    assert_eq!(
        outcome.segments_deleted, 0,
        "compact turns off time and size; nothing is below the start"
    );
    assert_eq!(log.log_start_offset(), Offset(9));
}

#[test]
fn when_every_segment_expires_a_new_empty_active_segment_is_rolled_first() {
    let (_root, mut log) = populated(&[("retention.ms", "1000")], 10);
    let outcome = log.apply_retention(TimestampMs(T0 + 100 * HOUR)).unwrap();
    assert!(outcome.rolled);
    assert_eq!(outcome.segments_deleted, 3);
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_start_offset(), Offset(10));
    assert_eq!(
        log.log_end_offset(),
        Offset(10),
        "offsets continue where they were"
    );
    let appended = log
        .append(batch(T0 + 101 * HOUR), TimestampMs(T0 + 101 * HOUR))
        .unwrap();
    assert_eq!(appended.first_offset, Offset(10));
    let outcome = log.apply_retention(TimestampMs(T0 + 101 * HOUR)).unwrap();
    assert_eq!(
        outcome.segments_deleted, 0,
        "a fresh active segment is never deleted"
    );
    let empty_active = log.apply_retention(TimestampMs(T0 + 1_000 * HOUR)).unwrap();
    assert!(empty_active.rolled);
    let never_empty = log.apply_retention(TimestampMs(T0 + 2_000 * HOUR)).unwrap();
    assert_eq!(
        never_empty.segments_deleted, 0,
        "an empty active segment is never deleted"
    );
}

#[test]
fn deleted_segments_wait_as_deleted_files_and_bytes_already_read_stay_valid() {
    let (root, mut log) = populated(&[("retention.ms", "1000")], 10);
    let before = log.read(Offset(0), 4096).unwrap().records;
    let now = TimestampMs(T0 + 3 * HOUR + 2_000);
    let outcome = log.apply_retention(now).unwrap();
    assert_eq!(outcome.segments_deleted, 1);
    assert_eq!(
        deleted_files(root.path()),
        3,
        ".log, .index and .timeindex renamed .deleted"
    );
    assert_eq!(
        Batch::decode(&before, u64::MAX).unwrap().base_offset(),
        0,
        "read bytes are owned"
    );
    assert_eq!(
        log.delete_expired_files(TimestampMs(now.0 + DELAY_MS - 1))
            .unwrap(),
        0
    );
    assert_eq!(
        deleted_files(root.path()),
        3,
        "kept until file.delete.delay.ms passes"
    );
    assert_eq!(
        log.next_file_deletion(),
        Some(TimestampMs(now.0 + DELAY_MS))
    );
    assert_eq!(
        log.delete_expired_files(TimestampMs(now.0 + DELAY_MS))
            .unwrap(),
        1
    );
    assert_eq!(deleted_files(root.path()), 0);
}

#[test]
fn expired_deleted_files_are_taken_for_the_caller_to_unlink_once() {
    let (root, mut log) = populated(&[("retention.ms", "1000")], 10);
    let now = TimestampMs(T0 + 3 * HOUR + 2_000);
    assert_eq!(log.apply_retention(now).unwrap().segments_deleted, 1);
    // The owner syncs the directory after the renames, as the engine's syncer does.
    let dir = log
        .take_renames_sync()
        .expect("the renames' directory sync is due");
    storage_from_env().sync_dir(&dir).unwrap();
    log.mark_renames_synced(Ok(())).unwrap();
    assert!(
        log.take_expired_files(TimestampMs(now.0 + DELAY_MS - 1))
            .is_empty(),
        "nothing before file.delete.delay.ms passes"
    );
    let taken = log.take_expired_files(TimestampMs(now.0 + DELAY_MS));
    let mut names: Vec<String> = taken
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "00000000000000000000.index.deleted",
            "00000000000000000000.log.deleted",
            "00000000000000000000.timeindex.deleted",
        ]
    );
    assert!(
        taken.iter().all(|path| path.exists()),
        "taken, not unlinked"
    );
    assert_eq!(log.next_file_deletion(), None, "no longer pending");
    assert!(log.take_expired_files(TimestampMs(i64::MAX)).is_empty());
    assert_eq!(
        log.delete_expired_files(TimestampMs(i64::MAX)).unwrap(),
        0,
        "the log unlinks nothing it handed over"
    );
    assert_eq!(deleted_files(root.path()), 3);
}

#[test]
fn renames_wait_for_the_owners_directory_sync() {
    let settings = [("retention.ms", "1000"), ("file.delete.delay.ms", "0")];
    let (root, mut log) = populated(&settings, 10);
    let storage = storage_from_env();
    for seal in log.take_unsynced_seals() {
        let synced = seal.sync(storage.as_ref());
        log.mark_seal_synced(seal.through, synced).unwrap();
    }
    let now = TimestampMs(T0 + 3 * HOUR + 2_000);
    assert_eq!(log.apply_retention(now).unwrap().segments_deleted, 1);
    assert_eq!(deleted_files(root.path()), 3, "renamed at once");
    assert!(
        log.take_expired_files(now).is_empty(),
        "not unlinked before the renames are durable"
    );
    assert_eq!(
        log.next_file_deletion(),
        None,
        "nothing to do before the sync"
    );
    let dir = log
        .take_renames_sync()
        .expect("the renames' directory sync is due");
    assert_eq!(log.take_renames_sync(), None, "taken once");

    assert_eq!(log.delete_records(Offset(8), now).unwrap(), Offset(8));
    assert_eq!(log.log_start_offset(), Offset(8), "deleted at once");
    assert_eq!(
        deleted_files(root.path()),
        3,
        "but not renamed while the earlier renames' sync is outstanding"
    );

    storage.sync_dir(&dir).unwrap();
    log.mark_renames_synced(Ok(())).unwrap();
    assert_eq!(
        log.take_expired_files(now).len(),
        3,
        "the first segment's files"
    );
    log.finish_pending_renames(now).unwrap();
    assert_eq!(
        deleted_files(root.path()),
        3 + 3,
        "the second segment renamed"
    );
    assert!(log.take_renames_sync().is_some());
    let failed = StorageError::Offline {
        dir: dir.clone(),
        cause: "EIO".to_owned(),
    };
    assert!(log.mark_renames_synced(Err(failed)).is_err());
    assert!(log.is_failed(), "a failed directory sync fails the log");
    assert!(log.take_expired_files(TimestampMs(i64::MAX)).is_empty());
}

#[test]
fn a_far_future_timestamp_does_not_pin_a_segment() {
    let (_root, mut log) = populated(&[("retention.hours", "1")], 0);
    let year_2200 = T0 + 175 * 365 * 24 * HOUR;
    for _ in 0..6 {
        log.append(batch(year_2200), TimestampMs::now()).unwrap();
    }
    let real_now = TimestampMs::now().0;
    let outcome = log
        .apply_retention(TimestampMs(real_now + 2 * HOUR))
        .unwrap();
    assert!(
        outcome.segments_deleted >= 1,
        "the file's modification time caps the future timestamp"
    );
}

#[test]
fn the_engine_applies_retention_to_every_partition_on_request() {
    let (dir, engine) = temp_engine(engine_config(2));
    let topic = aging_topic(&engine, "old", 3, &[("retention.ms", "60000")], 0..3, 8);
    let reports = engine.apply_retention(Some("old")).unwrap();
    assert_eq!(reports.len(), 3);
    for report in &reports {
        let outcome = report.outcome.as_ref().unwrap();
        assert!(
            outcome.rolled,
            "records from 2023 are all older than a minute"
        );
        assert_eq!(outcome.log_start_offset, Offset(8));
    }
    let fetched = engine
        .fetch(&topic, 1, Offset(0), FetchOptions::default())
        .wait();
    assert_matches!(
        fetched,
        Err(ReadError::OffsetOutOfRange {
            log_start_offset: Offset(8),
            ..
        })
    );
    assert!(every_partition(&engine, "old", |partition| {
        partition.log_start_offset == Offset(8)
    }));
    engine.close().unwrap();
    let engine = Engine::open(dir.path(), engine_config(2)).unwrap();
    assert_eq!(
        engine
            .describe_partition("old", 2)
            .unwrap()
            .log_start_offset,
        Offset(8),
        "survives a restart"
    );
    engine.close().unwrap();
}

#[test]
fn shards_apply_retention_on_their_own_schedule() {
    let every_20_ms = engine_config(1).with_retention_check_interval_ms(20);
    let (_dir, engine) = temp_engine(every_20_ms);
    aging_topic(&engine, "aging", 40, &[("retention.ms", "60000")], 0..40, 6);
    let all_expired = || {
        every_partition(&engine, "aging", |partition| {
            partition.log_start_offset == Offset(6)
        })
    };
    wait_every(
        Duration::from_millis(20),
        Duration::from_secs(20),
        all_expired,
    );
    assert!(
        all_expired(),
        "every partition's records from 2023 were deleted without being asked"
    );
    engine.close().unwrap();
}

/// Holds the storage operations `holds` selects until released, noting which threads asked.
struct Hold {
    holds: fn(seglog::io::hooked::StorageOp, &Path) -> bool,
    armed: std::sync::atomic::AtomicBool,
    released: std::sync::Mutex<bool>,
    release: std::sync::Condvar,
    holding_threads: std::sync::Mutex<Vec<String>>,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold").finish_non_exhaustive()
    }
}

impl Hold {
    fn new(holds: fn(seglog::io::hooked::StorageOp, &Path) -> bool) -> Hold {
        Hold {
            holds,
            armed: std::sync::atomic::AtomicBool::new(false),
            released: std::sync::Mutex::new(false),
            release: std::sync::Condvar::new(),
            holding_threads: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.release.notify_all();
    }

    fn holding_threads(&self) -> Vec<String> {
        self.holding_threads.lock().unwrap().clone()
    }
}

impl seglog::io::hooked::StorageHooks for Hold {
    fn before(&self, op: seglog::io::hooked::StorageOp, path: &Path) -> std::io::Result<()> {
        if self.armed.load(std::sync::atomic::Ordering::SeqCst) && (self.holds)(op, path) {
            let thread = std::thread::current().name().unwrap_or("").to_owned();
            self.holding_threads.lock().unwrap().push(thread);
            let mut released = self.released.lock().unwrap();
            while !*released {
                released = self.release.wait(released).unwrap();
            }
        }
        Ok(())
    }
}

fn unlink_of_deleted_file(op: seglog::io::hooked::StorageOp, path: &Path) -> bool {
    op == seglog::io::hooked::StorageOp::RemoveFile && path.to_string_lossy().ends_with(".deleted")
}

fn sync_of_aging_0(op: seglog::io::hooked::StorageOp, path: &Path) -> bool {
    op == seglog::io::hooked::StorageOp::SyncDir && path.ends_with("aging-0")
}

/// Opens an engine (one shard) on `hold`'s storage with topic `aging` of two partitions, whose
/// records from 2023 retention deletes at once, appends six of them to partition 0, and arms
/// `hold`.
fn engine_with_expired_records(dir: &Path, hold: &Arc<Hold>) -> (Engine, TopicName) {
    let config = engine_config(1).with_retention_check_interval_ms(20);
    let engine = Engine::open_with_storage(dir, config, hooked(hold.clone())).unwrap();
    let settings = [("retention.ms", "60000"), ("file.delete.delay.ms", "0")];
    let topic = aging_topic(&engine, "aging", 2, &settings, 0..1, 6);
    hold.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    (engine, topic)
}

/// Waits for retention to rename partition 0's segments and for `hold` to hold an operation,
/// then asserts that the shard answers a durable append
/// to partition 1 meanwhile (on another thread, so that a shard stuck in the held operation
/// fails the test instead of hanging it), and releases the operation.
fn assert_the_shard_answers_while_held(
    engine: &Engine,
    topic: &TopicName,
    hold: &Hold,
    dir: &Path,
) {
    let reached = || !hold.holding_threads().is_empty() && deleted_files_of_aging_0(dir) > 0;
    if !wait_until(Duration::from_secs(20), reached) {
        hold.release();
        panic!("retention did not delete the records from 2023 or reach the held operation");
    }
    let (answered, answer) = crossbeam_channel::bounded(1);
    let appender = engine.clone();
    let appending_topic = topic.clone();
    std::thread::spawn(move || {
        let now = TimestampMs::now().0;
        let appended = appender
            .append(&appending_topic, 1, batch(now), Durability::Durable)
            .wait();
        let _ = answered.send(appended.is_ok());
    });
    let served = answer.recv_timeout(std::time::Duration::from_secs(10));
    hold.release();
    assert_eq!(served, Ok(true), "a durable append answered meanwhile");
}

fn deleted_files_of_aging_0(dir: &Path) -> usize {
    count_ending(&dir.join("aging-0"), ".deleted")
}

fn wait_for_no_deleted_files(dir: &Path) {
    wait_until(Duration::from_secs(20), || {
        deleted_files_of_aging_0(dir) == 0
    });
    assert_eq!(deleted_files_of_aging_0(dir), 0, "every .deleted file went");
}

/// Holds the operations `holds` selects during retention's deletion of partition 0's records,
/// asserts that the shard answers meanwhile and that only threads named `thread_prefix…` were
/// held, and that every `.deleted` file goes once released.
fn assert_held_off_the_shard(
    holds: fn(seglog::io::hooked::StorageOp, &Path) -> bool,
    thread_prefix: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let hold = Arc::new(Hold::new(holds));
    let (engine, topic) = engine_with_expired_records(dir.path(), &hold);
    assert_the_shard_answers_while_held(&engine, &topic, &hold, dir.path());
    wait_for_no_deleted_files(dir.path());
    let threads = hold.holding_threads();
    assert!(
        threads
            .iter()
            .all(|thread| thread.starts_with(thread_prefix)),
        "held on {threads:?}, expected only {thread_prefix}…"
    );
    engine.close().unwrap();
}

#[test]
fn a_shard_serves_its_partitions_while_deleted_segments_are_unlinked() {
    assert_held_off_the_shard(unlink_of_deleted_file, "seglog-delete-0");
}

#[test]
fn a_shard_serves_its_partitions_while_the_deleted_segments_directory_syncs() {
    assert_held_off_the_shard(sync_of_aging_0, "seglog-sync-0.");
}

#[test]
fn leftover_deleted_files_found_at_open_are_unlinked_off_the_shard() {
    let (dir, engine) = temp_engine(engine_config(1));
    let topic = engine.create_topic("aging", 2, config(&[])).unwrap();
    engine
        .append(&topic, 0, batch(T0), Durability::Durable)
        .wait()
        .unwrap();
    engine.close().unwrap();
    // What a crash between a `.deleted` rename and its unlink leaves.
    let leftover = dir
        .path()
        .join("aging-0")
        .join("00000000000000000100.log.deleted");
    std::fs::write(&leftover, [7u8; 4096]).unwrap();

    let hold = Arc::new(Hold::new(unlink_of_deleted_file));
    hold.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let storage = hooked(hold.clone());
    let engine = Engine::open_with_storage(dir.path(), engine_config(1), storage).unwrap();
    // Opens partition 0, from a thread of its own: a shard stuck in the unlink would hold it.
    let opener = engine.clone();
    let opened_topic = topic.clone();
    std::thread::spawn(move || {
        let _ = opener
            .fetch(&opened_topic, 0, Offset(0), FetchOptions::default())
            .wait();
    });
    assert_the_shard_answers_while_held(&engine, &topic, &hold, dir.path());
    wait_for_no_deleted_files(dir.path());
    let threads = hold.holding_threads();
    assert!(
        threads.iter().all(|thread| thread == "seglog-delete-0"),
        "unlinked by the shard's file deleter: {threads:?}"
    );
    engine.close().unwrap();
}

#[test]
fn the_engine_unlinks_what_delete_records_removed_without_waiting_for_a_retention_pass() {
    let (dir, engine) = temp_engine(engine_config(1));
    let topic = aging_topic(
        &engine,
        "aging",
        1,
        &[("file.delete.delay.ms", "0")],
        0..1,
        10,
    );
    let log_start = engine.delete_records(&topic, 0, Offset(8)).wait().unwrap();
    assert_eq!(log_start, Offset(8));
    // The periodic retention pass is 5 minutes away: the deletion alone must lead to the unlink.
    wait_for_no_deleted_files(dir.path());
    let logs = count_ending(&dir.path().join("aging-0"), ".log");
    assert_eq!(logs, 1, "only the segment holding offset 8 is left");
    engine.close().unwrap();
}

/// Fails every file sync once armed.
#[derive(Debug, Default)]
struct FailSyncs(std::sync::atomic::AtomicBool);

impl seglog::io::hooked::StorageHooks for FailSyncs {
    fn before(&self, op: seglog::io::hooked::StorageOp, _path: &Path) -> std::io::Result<()> {
        let armed = self.0.load(std::sync::atomic::Ordering::SeqCst);
        if armed && op == seglog::io::hooked::StorageOp::SyncData {
            return Err(std::io::Error::other("injected fdatasync failure"));
        }
        Ok(())
    }
}

#[test]
fn delete_records_on_a_failed_log_changes_nothing_until_it_is_reopened() {
    let hooks = Arc::new(FailSyncs::default());
    let (dir, mut log) = populated_on(
        hooked(hooks.clone()),
        (config(&[]), LogWriteMode::default()),
        12,
    );
    let segments = log.segment_count();
    hooks.0.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        log.flush().is_err(),
        "the injected sync failure is reported"
    );
    assert!(log.is_failed());
    assert!(
        log.delete_records(Offset(8), TimestampMs(T0)).is_err(),
        "a failed log refuses to delete records"
    );
    assert_eq!(log.log_start_offset(), Offset(0));
    assert_eq!(log.segment_count(), segments);
    assert_eq!(deleted_files(dir.path()), 0, "no file was renamed");
}
