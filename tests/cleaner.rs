//! The cleaner thread (issue 5, isolation): compaction reads and writes on its own low-priority,
//! pinned thread while the owning shard only swaps; dirty logs are cleaned in the background; a
//! failing partition is reported and retried without stopping the others; `min.compaction.lag.ms`
//! keeps recent segments dirty; small cleaned segments are grouped into one; a group whose
//! segments changed under the cleaner is refused and changes nothing; the scrubber on the same
//! thread reports a bad CRC and a broken offset sequence without changing anything.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seglog::cleaner::log_cleaner::{CleanedGroup, SwapOutcome};
use seglog::config::LogConfig;
use seglog::engine::{CleanerPriority, CleanerStats, Engine, EngineConfig, FetchOptions};
use seglog::io::hooked::{StorageHooks, StorageOp};
use seglog::io::storage_from_env;
use seglog::types::{Offset, TimestampMs, TopicName};
use support::batches::{self, T0, records_from, text};
use support::configs::{compacted, small_segments, with_settings};
use support::dirs::{count_ending, flip_byte, names_ending};
use support::engines::{self, append, fetch_batches, temp_engine};
use support::hooks::{hooked, wait_until};
use support::logs::{open_log, open_options};

mod support;

fn compacted_config() -> LogConfig {
    compacted(small_segments(1024, 128))
}

fn engine_config() -> EngineConfig {
    engines::engine_config(2).with_cleaner_core(None)
}

/// An engine in `dir` whose storage reports every operation to `hooks`.
fn open_hooked(dir: &Path, hooks: Arc<dyn StorageHooks>, config: EngineConfig) -> Engine {
    Engine::open_with_storage(dir, config, hooked(hooks)).unwrap()
}

/// A one-record batch: key `k<key>`, a 64-byte value numbered `value`.
fn keyed_batch(key: u32, value: u32, timestamp_ms: i64) -> bytes::Bytes {
    let key = format!("k{key}");
    let value = format!("value-{value:08}-{}", "x".repeat(46));
    batches::keyed_batch(Some(key.as_bytes()), Some(value.as_bytes()), timestamp_ms)
}

/// `rounds` rounds of one record for each of `keys` keys, stamped now.
fn append_rounds(engine: &Engine, topic: &TopicName, partition: u32, keys: u32, rounds: u32) {
    let now = TimestampMs::now().0;
    for round in 0..rounds {
        for key in 0..keys {
            append(
                engine,
                topic,
                partition,
                keyed_batch(key, round * keys + key, now),
            );
        }
    }
}

/// A record as read back: offset, key and value.
type Row = (u64, String, String);

/// Every record the partition serves.
fn read_all(engine: &Engine, topic: &TopicName, partition: u32) -> Vec<Row> {
    records_from(&fetch_batches(engine, topic, partition), 0)
        .into_iter()
        .map(|(offset, record)| (offset, text(&record.key), text(&record.value)))
        .collect()
}

fn latest(rows: &[Row]) -> BTreeMap<String, String> {
    rows.iter()
        .map(|(_, key, value)| (key.clone(), value.clone()))
        .collect()
}

/// An engine with `config` in a temporary directory, and in it a compacted topic `name` whose
/// partition 0 holds `rounds` rounds of `keys` keys; with the records it serves.
fn compacted_rounds(
    config: EngineConfig,
    name: &str,
    keys: u32,
    rounds: u32,
) -> (tempfile::TempDir, Engine, TopicName, Vec<Row>) {
    let (dir, engine) = temp_engine(config);
    let topic = engine.create_topic(name, 1, compacted_config()).unwrap();
    append_rounds(&engine, &topic, 0, keys, rounds);
    let rows = read_all(&engine, &topic, 0);
    (dir, engine, topic, rows)
}

/// An engine over storage that reports to `hooks`, in a temporary directory, with a compacted
/// topic `name` of two partitions, each holding 20 rounds of `keys` keys.
fn hooked_compacted(
    hooks: Arc<dyn StorageHooks>,
    name: &str,
    keys: u32,
) -> (tempfile::TempDir, Engine, TopicName) {
    let dir = tempfile::tempdir().unwrap();
    let engine = open_hooked(dir.path(), hooks, engine_config());
    let topic = engine.create_topic(name, 2, compacted_config()).unwrap();
    for partition in 0..2 {
        append_rounds(&engine, &topic, partition, keys, 20);
    }
    (dir, engine, topic)
}

/// Waits until the cleaner's statistics say `done`.
fn wait_for_cleaner(engine: &Engine, done: impl Fn(&CleanerStats) -> bool) -> CleanerStats {
    wait_until(Duration::from_secs(60), || done(&engine.cleaner_stats()));
    engine.cleaner_stats()
}

/// Records, for each storage operation, the thread that performed it, and the bytes each thread
/// read.
#[derive(Debug, Default)]
struct ThreadLog {
    seen: Mutex<Vec<(StorageOp, PathBuf, String)>>,
    bytes_read: Mutex<BTreeMap<String, usize>>,
}

impl StorageHooks for ThreadLog {
    fn before(&self, op: StorageOp, path: &Path) -> io::Result<()> {
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        self.seen
            .lock()
            .unwrap()
            .push((op, path.to_owned(), thread));
        Ok(())
    }

    fn after_read(&self, _path: &Path, bytes: usize) {
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        *self.bytes_read.lock().unwrap().entry(thread).or_default() += bytes;
    }
}

impl ThreadLog {
    fn threads_of(&self, wanted: impl Fn(StorageOp, &str) -> bool) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(op, path, _)| wanted(*op, &path.to_string_lossy()))
            .map(|(_, _, thread)| thread.clone())
            .collect()
    }
}

#[test]
fn the_cleaner_thread_reads_and_writes_and_the_owning_shard_only_swaps() {
    let hooks = Arc::new(ThreadLog::default());
    let (_dir, engine, topic) = hooked_compacted(hooks.clone(), "latest", 5);
    let before = read_all(&engine, &topic, 0);
    hooks.seen.lock().unwrap().clear();

    let reports = engine.compact(None).unwrap();
    assert_eq!(reports.len(), 2);
    for report in &reports {
        assert!(report.outcome.as_ref().unwrap().segments_cleaned > 0);
    }
    let cleaned_writes = hooks.threads_of(|op, path| {
        matches!(op, StorageOp::Write | StorageOp::SyncData) && path.ends_with(".log.cleaned")
    });
    assert!(!cleaned_writes.is_empty());
    assert!(
        cleaned_writes
            .iter()
            .all(|thread| thread == "seglog-cleaner"),
        "{cleaned_writes:?}"
    );
    let segment_reads =
        hooks.threads_of(|op, path| op == StorageOp::Read && path.ends_with(".log"));
    assert!(
        segment_reads
            .iter()
            .any(|thread| thread == "seglog-cleaner")
    );
    let swaps = hooks.threads_of(|op, path| op == StorageOp::Rename && path.contains(".log"));
    assert!(!swaps.is_empty());
    assert!(
        swaps
            .iter()
            .all(|thread| thread.starts_with("seglog-shard-")),
        "{swaps:?}"
    );
    assert_eq!(latest(&read_all(&engine, &topic, 0)), latest(&before));
    engine.close().unwrap();
}

/// Issue 41, item 4: the swap reads, on the shard, only what follows the swapped-in segment's
/// last index entry: the cleaner checked every batch and wrote the indexes on its own thread.
#[test]
fn the_shard_reads_only_an_index_interval_of_each_segment_it_swaps_in() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = Arc::new(ThreadLog::default());
    let engine = open_hooked(dir.path(), hooks.clone(), engine_config());
    let config = LogConfig::default()
        .with_segment_bytes(64 * 1024)
        .with_index_interval_bytes(1024);
    let topic = engine.create_topic("wide", 1, compacted(config)).unwrap();
    // Two rounds over 2,000 keys: the first is cleaned away, the second kept (about 200 KiB).
    append_rounds(&engine, &topic, 0, 2_000, 2);
    engine.flush_all().unwrap();
    hooks.bytes_read.lock().unwrap().clear();
    hooks.seen.lock().unwrap().clear();
    let reports = engine.compact(None).unwrap();
    let outcome = reports[0].outcome.as_ref().unwrap();
    assert!(outcome.bytes_after > 100 * 1024, "{outcome:?}");
    let swaps = hooks
        .threads_of(|op, path| op == StorageOp::Rename && path.ends_with(".log.swap"))
        .len();
    let bytes_read = hooks.bytes_read.lock().unwrap().clone();
    let shard_bytes: usize = bytes_read
        .iter()
        .filter(|(thread, _)| thread.starts_with("seglog-shard-"))
        .map(|(_, bytes)| bytes)
        .sum();
    // A page for the first batch's header, and the batches past the last index entry a page at
    // a time; the segments are ten times that.
    let per_swap_bytes = 12 * 1024;
    assert!(swaps > 0);
    assert!(
        shard_bytes <= swaps * per_swap_bytes,
        "the shards read {shard_bytes} bytes for {swaps} swaps of {} bytes: {bytes_read:?}",
        outcome.bytes_after
    );
    assert_eq!(latest(&read_all(&engine, &topic, 0)).len(), 2_000);
    engine.close().unwrap();
}

#[test]
fn the_cleaner_thread_runs_at_idle_priority_on_its_configured_core() {
    let (_dir, engine) = temp_engine(engine_config().with_cleaner_core(Some(0)));
    // The thread sets its own scheduling as it starts; wait for it to report.
    let unknown = || engine.cleaner_stats().priority == CleanerPriority::Unknown;
    wait_until(Duration::from_secs(30), || !unknown());
    let stats = engine.cleaner_stats();
    let priority = stats.priority;
    let tid = stats.thread_id.expect("the cleaner reports its thread id");
    let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap();
    assert_eq!(comm.trim(), "seglog-cleaner");
    let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/sched")).unwrap();
    let policy = sched
        .lines()
        .find(|line| line.starts_with("policy"))
        .and_then(|line| line.split(':').nth(1))
        .map(|value| value.trim().to_owned())
        .unwrap();
    match priority {
        CleanerPriority::Idle => assert_eq!(policy, "5", "SCHED_IDLE"),
        CleanerPriority::Nice19 => {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
            let after_name = stat.rsplit(')').next().unwrap();
            let nice: i32 = after_name
                .split_whitespace()
                .nth(16)
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(nice, 19);
        }
        other => panic!("the cleaner could not lower its priority: {other:?}"),
    }
    let ionice = std::process::Command::new("ionice")
        .args(["-p", &tid.to_string()])
        .output();
    match ionice {
        Ok(output) => assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            "idle",
            "the cleaner's I/O class"
        ),
        Err(error) => seglog::testing::skip(
            "the_cleaner_thread_runs_at_idle_priority_on_its_configured_core (I/O class)",
            format!("ionice cannot run: {error}"),
        ),
    }
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    let allowed = status
        .lines()
        .find(|line| line.starts_with("Cpus_allowed_list"))
        .unwrap();
    assert_eq!(allowed.split(':').nth(1).unwrap().trim(), "0", "{allowed}");
    engine.close().unwrap();
}

#[test]
fn dirty_logs_are_cleaned_in_the_background() {
    let config = engine_config().with_cleaner_backoff_ms(20);
    let (_dir, engine, topic, before) = compacted_rounds(config, "background", 4, 30);
    let stats = wait_for_cleaner(&engine, |stats| stats.segments_cleaned > 0);
    assert!(
        stats.logs_cleaned > 0 && stats.segments_cleaned > 0,
        "{stats:?}"
    );
    assert!(stats.bytes_after < stats.bytes_before, "{stats:?}");
    assert!(stats.records_kept < stats.records_before, "{stats:?}");
    let after = read_all(&engine, &topic, 0);
    assert!(
        after.len() < 4 * 30,
        "duplicates are gone: {} records",
        after.len()
    );
    assert_eq!(latest(&after), latest(&before));
    assert!(after.windows(2).all(|pair| pair[0].0 < pair[1].0));
    engine.close().unwrap();
}

/// Issue 41, item 4: the cleaner also cleans a compacted partition that no shard has open,
/// choosing it from its files; the shard opens only that one.
#[test]
fn a_closed_dirty_partition_is_cleaned_in_the_background() {
    let (dir, engine, topic, before) = compacted_rounds(engine_config(), "closed", 4, 30);
    engine.close().unwrap();
    let config = engine_config().with_cleaner_backoff_ms(20);
    let engine = Engine::open(dir.path(), config).unwrap();
    let stats = wait_for_cleaner(&engine, |stats| stats.segments_cleaned > 0);
    assert!(stats.logs_cleaned > 0, "{stats:?}");
    let after = read_all(&engine, &topic, 0);
    assert!(after.len() < before.len());
    assert_eq!(latest(&after), latest(&before));
    engine.close().unwrap();
}

/// Issue 41, item 4: the periodic retention pass reads the partitions' files on the cleaner's
/// thread; a shard opens only the partition that has a segment to delete, not every partition
/// it owns.
#[test]
fn periodic_retention_opens_only_the_partitions_with_segments_to_delete() {
    let (dir, engine) = temp_engine(engine_config());
    let aging = LogConfig::default().with_segment_bytes(1024);
    let aging = with_settings(aging, &[("retention.hours", "24")]);
    let old = engine.create_topic("aging", 1, aging).unwrap();
    let quiet = engine
        .create_topic("quiet", 12, LogConfig::default())
        .unwrap();
    for value in 0..40 {
        append(&engine, &old, 0, keyed_batch(value, value, T0));
    }
    for partition in 0..12 {
        append_rounds(&engine, &quiet, partition, 1, 1);
    }
    engine.close().unwrap();
    let hooks = Arc::new(ThreadLog::default());
    let config = engine_config().with_retention_check_interval_ms(20);
    let engine = open_hooked(dir.path(), hooks.clone(), config);
    let first_segment = dir.path().join("aging-0/00000000000000000000.log");
    wait_until(Duration::from_secs(60), || !first_segment.exists());
    assert!(
        !first_segment.exists(),
        "retention deleted the expired segment"
    );
    let shard_opens = hooks.threads_of(|op, path| {
        op == StorageOp::Open && path.contains("/quiet-") && path.ends_with(".log")
    });
    let shard_opens: Vec<&String> = shard_opens
        .iter()
        .filter(|thread| thread.starts_with("seglog-shard-"))
        .collect();
    assert!(
        shard_opens.is_empty(),
        "no shard opened a partition with nothing to delete: {shard_opens:?}"
    );
    engine.close().unwrap();
}

/// Fails the creation of `.cleaned` files under a directory while armed.
#[derive(Debug, Default)]
struct FailCleanedIn {
    armed: AtomicBool,
    dir_suffix: String,
}

impl StorageHooks for FailCleanedIn {
    fn before(&self, op: StorageOp, path: &Path) -> io::Result<()> {
        let path = path.to_string_lossy();
        let in_dir = path.contains(&format!("{}/", self.dir_suffix));
        if self.armed.load(Ordering::SeqCst)
            && op == StorageOp::Open
            && in_dir
            && path.ends_with(".log.cleaned")
        {
            return Err(io::Error::other("injected: cannot create the cleaned file"));
        }
        Ok(())
    }
}

#[test]
fn a_failing_partition_is_reported_and_retried_while_the_others_are_cleaned() {
    let hooks = Arc::new(FailCleanedIn {
        armed: AtomicBool::new(true),
        dir_suffix: "flaky-0".to_owned(),
    });
    let (_dir, engine, topic) = hooked_compacted(hooks.clone(), "flaky", 4);

    let reports = engine.compact(None).unwrap();
    assert!(reports[0].outcome.is_err(), "{reports:?}");
    assert!(reports[1].outcome.as_ref().unwrap().segments_cleaned > 0);
    let stats = engine.cleaner_stats();
    assert_eq!(stats.failures, 1);
    assert_eq!(stats.uncleanable.len(), 1);
    let uncleanable = &stats.uncleanable[0];
    assert_eq!(uncleanable.topic_partition.partition, 0);
    assert_eq!(uncleanable.failures, 1);
    assert!(
        uncleanable.last_error.contains("injected"),
        "{uncleanable:?}"
    );
    assert!(uncleanable.retry_in > Duration::ZERO);
    assert!(
        read_all(&engine, &topic, 0).len() == 80,
        "the failed partition is untouched and still readable"
    );

    hooks.armed.store(false, Ordering::SeqCst);
    let retried = engine.compact(Some("flaky")).unwrap();
    assert!(retried[0].outcome.as_ref().unwrap().segments_cleaned > 0);
    assert!(engine.cleaner_stats().uncleanable.is_empty());
    engine.close().unwrap();
}

#[test]
fn min_compaction_lag_keeps_segments_with_recent_records_dirty() {
    let (_dir, engine) = temp_engine(engine_config());
    let config = with_settings(compacted_config(), &[("min.compaction.lag.ms", "3600000")]);
    let topic = engine.create_topic("lagged", 1, config).unwrap();
    let two_hours_ago = TimestampMs::now().0 - 2 * 3_600_000;
    for sequence in 0..60u32 {
        append(
            &engine,
            &topic,
            0,
            keyed_batch(sequence % 4, sequence, two_hours_ago),
        );
    }
    let old_records = read_all(&engine, &topic, 0).len() as u64;
    append_rounds(&engine, &topic, 0, 4, 15);

    let reports = engine.compact(None).unwrap();
    let outcome = reports[0].outcome.as_ref().unwrap();
    assert!(outcome.segments_cleaned > 0, "old segments are cleaned");
    assert!(
        outcome.first_dirty_offset.0 <= old_records,
        "the cleaner stops before the recent records: {outcome:?}"
    );
    let rows = read_all(&engine, &topic, 0);
    let recent: Vec<_> = rows.iter().filter(|row| row.0 >= old_records).collect();
    assert_eq!(recent.len(), 60, "every recent record stays");
    engine.close().unwrap();
}

#[test]
fn small_cleaned_segments_are_grouped_into_one() {
    let (dir, engine, topic, _) = compacted_rounds(engine_config(), "grouped", 2, 40);
    engine.compact(None).unwrap();
    let partition_dir = dir.path().join("grouped-0");
    let after_first = count_ending(&partition_dir, ".log");
    append_rounds(&engine, &topic, 0, 2, 40);
    let before_second = count_ending(&partition_dir, ".log");
    let reports = engine.compact(None).unwrap();
    let outcome = reports[0].outcome.as_ref().unwrap();
    assert!(
        outcome.segments_written < outcome.segments_cleaned,
        "several cleaned segments became one: {outcome:?}"
    );
    let after_second = count_ending(&partition_dir, ".log");
    assert!(
        after_second < before_second && after_second <= after_first + 1,
        "{after_first} -> {before_second} -> {after_second}"
    );
    let rows = read_all(&engine, &topic, 0);
    assert_eq!(latest(&rows).len(), 2);
    assert!(rows.windows(2).all(|pair| pair[0].0 < pair[1].0));
    engine.close().unwrap();
}

#[test]
fn a_group_whose_segments_changed_is_stale_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let options = open_options(true, 0, 0);
    let storage = storage_from_env();
    let mut log = open_log(storage, dir.path(), "stale", compacted_config(), options);
    let now = TimestampMs::now();
    for sequence in 0..60u32 {
        log.append(keyed_batch(sequence % 3, sequence, now.0), now)
            .unwrap();
    }
    // The cleaner sees only segments whose seal sync was reported.
    log.flush().unwrap();
    let snapshot = log.cleanable_log();
    assert!(snapshot.sealed.len() >= 3);
    let group = CleanedGroup {
        log_instance: snapshot.log_instance,
        replaced: snapshot.sealed[..2].to_vec(),
        bytes_after: 0,
        records_before: 0,
        records_kept: 0,
    };
    // Retention takes the first segment away before the swap arrives.
    log.delete_records(snapshot.sealed[1].base_offset, now)
        .unwrap();
    log.apply_retention(now).unwrap();
    let segments_before = log.segment_count();
    assert_eq!(
        log.swap_in_cleaned(&group, now).unwrap(),
        SwapOutcome::Stale
    );
    assert_eq!(log.segment_count(), segments_before);
    assert!(!log.is_failed());

    let other_instance = CleanedGroup {
        log_instance: snapshot.log_instance + 1_000_000,
        replaced: log.cleanable_log().sealed[..1].to_vec(),
        bytes_after: 0,
        records_before: 0,
        records_kept: 0,
    };
    assert_eq!(
        log.swap_in_cleaned(&other_instance, now).unwrap(),
        SwapOutcome::Stale,
        "a group cleaned from another opening of the log is refused"
    );
}

/// Appends `count` one-record batches to a `delete`-policy topic with 1 KiB segments.
fn plain_topic_with_segments(engine: &Engine, name: &str, count: u32) -> TopicName {
    let config = small_segments(1024, 4096);
    let topic = engine.create_topic(name, 1, config).unwrap();
    let now = TimestampMs::now().0;
    for sequence in 0..count {
        append(engine, &topic, 0, keyed_batch(sequence, sequence, now));
    }
    topic
}

#[test]
fn the_scrubber_reports_a_bad_crc_and_a_broken_offset_and_changes_nothing() {
    let (dir, engine) = temp_engine(engine_config());
    let topic = plain_topic_with_segments(&engine, "scrubbed", 40);
    let clean = engine.scrub(None).unwrap();
    assert_eq!(clean.len(), 1);
    assert!(clean[0].1.segments_scrubbed >= 3, "{clean:?}");
    assert!(clean[0].1.corrupt.is_empty(), "{clean:?}");

    let partition_dir = dir.path().join("scrubbed-0");
    let sealed: Vec<PathBuf> = names_ending(&partition_dir, ".log")
        .iter()
        .map(|name| partition_dir.join(name))
        .collect();
    // A flipped bit in the last byte of the first segment's first batch (a record byte: the CRC
    // fails), and the second segment's first batch moved to offset 0 (the base offset is not
    // covered by the CRC: continuity catches it).
    let batch_length = std::fs::read(&sealed[0]).unwrap()[8..12]
        .try_into()
        .unwrap();
    let first_batch_end = 12 + u32::from_be_bytes(batch_length) as u64;
    flip_byte(&sealed[0], first_batch_end - 1, 0x01);
    let first = std::fs::read(&sealed[0]).unwrap();
    let mut second = std::fs::read(&sealed[1]).unwrap();
    second[..8].copy_from_slice(&0i64.to_be_bytes());
    std::fs::write(&sealed[1], &second).unwrap();

    let found = engine.scrub(Some("scrubbed")).unwrap();
    let corrupt = &found[0].1.corrupt;
    assert_eq!(corrupt.len(), 2, "{corrupt:?}");
    assert_eq!(corrupt[0].base_offset, Offset(0));
    assert!(corrupt[1].reason.contains("continuity"), "{corrupt:?}");
    assert_eq!(
        std::fs::read(&sealed[0]).unwrap(),
        first,
        "nothing repaired or truncated"
    );
    assert_eq!(std::fs::read(&sealed[1]).unwrap(), second);
    let stats = engine.cleaner_stats();
    assert_eq!(stats.scrub.corrupt.len(), 2, "{stats:?}");
    assert!(stats.scrub.passes >= 2);
    let options = FetchOptions {
        max_bytes: 1 << 20,
        ..FetchOptions::default()
    };
    let tail = engine.fetch(&topic, 0, Offset(39), options).wait().unwrap();
    assert!(
        !tail.records.is_empty(),
        "the sound segments are still served"
    );
    engine.close().unwrap();
}

#[test]
fn the_scrubber_runs_on_its_own_schedule() {
    let (_dir, engine) = temp_engine(engine_config().with_scrub_interval_ms(20));
    plain_topic_with_segments(&engine, "scheduled", 40);
    let stats = wait_for_cleaner(&engine, |stats| stats.scrub.segments_scrubbed > 0);
    assert!(
        stats.scrub.passes > 0 && stats.scrub.segments_scrubbed > 0,
        "{stats:?}"
    );
    assert!(stats.scrub.corrupt.is_empty());
    engine.close().unwrap();
}

#[test]
fn a_dedupe_buffer_too_small_for_one_key_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let buffer_of_one_byte = engine_config().with_cleaner_dedupe_buffer_bytes(1);
    let error = Engine::open(dir.path(), buffer_of_one_byte).unwrap_err();
    assert!(
        matches!(error, seglog::error::OpenError::DedupeBuffer(_)),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("log.cleaner.dedupe.buffer.size"),
        "{error}"
    );
}

#[test]
fn fetch_record_after_compaction_is_none_for_a_removed_offset_and_the_record_for_a_kept_one() {
    let (_dir, engine, topic, before) = compacted_rounds(engine_config(), "latest", 5, 20);
    let reports = engine.compact(None).unwrap();
    assert!(reports[0].outcome.as_ref().unwrap().segments_cleaned > 0);
    let kept: BTreeMap<u64, (String, String)> = read_all(&engine, &topic, 0)
        .into_iter()
        .map(|(offset, key, value)| (offset, (key, value)))
        .collect();
    let mut removed = 0;
    for (offset, _, _) in &before {
        let record = engine
            .fetch_record(&topic, 0, Offset(*offset))
            .wait()
            .unwrap();
        match kept.get(offset) {
            Some((key, value)) => {
                let record = record.unwrap_or_else(|| panic!("kept offset {offset} not found"));
                assert_eq!(record.offset, Offset(*offset));
                assert_eq!(record.key.as_deref(), Some(key.as_bytes()));
                assert_eq!(record.value.as_deref(), Some(value.as_bytes()));
            }
            None => {
                assert!(record.is_none(), "offset {offset} was compacted away");
                removed += 1;
            }
        }
    }
    assert!(removed > 0, "compaction removed older values of the keys");
    engine.close().unwrap();
}
