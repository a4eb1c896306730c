//! Recovery of a partition log from what a crash, a disk or an interrupted operation can leave
//! on disk: torn and corrupt tails, damaged or missing indexes, garbage after the last batch, a
//! corrupt segment in the middle of the log, leftover `.deleted`/`.cleaned`/`.swap` files, and
//! segments written by Kafka itself.
//!
//! How: a `LogDir` over the backend `SEGLOG_IO_BACKEND` names in a temporary directory, with `segment.bytes` = 1024 and
//! `index.interval.bytes` = 64 so that every log has several segments and every index has
//! entries. Each scenario writes a log, records what it serves (every batch's bytes, offsets
//! stamped), damages the files the way the scenario says (on a copy of the directory when one
//! template serves many cases), reopens cleanly or uncleanly (without `close`, or with the
//! clean-shutdown marker removed), and checks that every complete batch before the damage is
//! served with identical bytes, nothing after it is, the log end offset is the next offset of the
//! last complete batch, a new append gets exactly that offset, and lookups by timestamp agree with
//! the records' own timestamps. Nothing may panic: corrupt input gives truncation or a typed
//! error.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::fs;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::error::{AppendError, OpenError, PartitionError, ReadError, StorageError};
use seglog::format::{Batch, BatchBuilder, NewRecord};
use seglog::io::{IoBackend, ring_tests_must_run, storage_from_env};
use seglog::log::{LogOpenOptions, PartitionLog, RecoveryReport};
use seglog::log_dir::LogDir;
use seglog::testing::{current_test, skip};
use seglog::types::{Offset, TimestampMs, TopicName, TopicPartition};

const T0: i64 = 1_700_000_000_000;
const TOPIC: &str = "events";
const CLEAN_SHUTDOWN_MARKER: &str = ".kafka_cleanshutdown";
const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";

/// Removes the recovery-point checkpoint: Kafka's file and seglog's two copies.
fn remove_recovery_point_checkpoint(dir: &Path) {
    fs::remove_file(dir.join(RECOVERY_POINT_CHECKPOINT)).unwrap();
    for copy in ["0", "1"] {
        let path = dir.join(format!("{RECOVERY_POINT_CHECKPOINT}.{copy}"));
        if path.exists() {
            fs::remove_file(path).unwrap();
        }
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 64,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

/// A scratch directory, on tmpfs when there is one (the log fsyncs a lot; tmpfs keeps it fast).
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().unwrap()
}

fn topic() -> TopicName {
    TopicName::parse(TOPIC).unwrap()
}

fn topic_partition() -> TopicPartition {
    TopicPartition {
        topic: topic(),
        partition: 0,
    }
}

fn partition_dir(root: &Path) -> PathBuf {
    root.join(format!("{TOPIC}-0"))
}

fn open_dir(root: &Path) -> LogDir {
    LogDir::open(root, storage_from_env(), config()).unwrap()
}

/// The wall clock the tests pretend it is: a minute after the first record, so `segment.ms`
/// never rolls a segment.
fn now() -> TimestampMs {
    TimestampMs(T0 + 60_000)
}

/// The timestamp of the record at `offset`: rising by 10 ms, every fifth record 25 ms late, so
/// timestamps are not in offset order.
fn timestamp(offset: u64) -> i64 {
    T0 + offset as i64 * 10 - if offset % 5 == 4 { 25 } else { 0 }
}

fn key(offset: u64) -> String {
    format!("key-{offset}")
}

fn value(offset: u64) -> Vec<u8> {
    let length = 8 + (offset * 13 % 41) as usize;
    (0..length)
        .map(|i| (offset as usize * 31 + i) as u8)
        .collect()
}

/// A batch of the records at offsets `first..first + count` (key, value and timestamp are
/// functions of the offset), with base offset `first`.
fn batch(first: u64, count: u64) -> Bytes {
    let mut builder = BatchBuilder::new(first as i64);
    for offset in first..first + count {
        let key = key(offset);
        let value = value(offset);
        builder.push(&NewRecord {
            timestamp_ms: timestamp(offset),
            key: Some(key.as_bytes()),
            value: Some(&value),
            headers: &[],
        });
    }
    builder.build().unwrap()
}

/// Appends `batches` batches of 1 to 4 records.
fn populate(log: &mut PartitionLog, batches: usize) {
    for n in 0..batches {
        let first = log.log_end_offset().0;
        let count = 1 + (n as u64 * 7 % 4);
        let info = log.append(batch(first, count), now()).unwrap();
        assert_eq!(info.first_offset, Offset(first));
    }
}

/// One batch as the log serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StoredBatch {
    base: u64,
    last: u64,
    bytes: Bytes,
}

/// Every batch the log serves, in order, read one at a time (`max_bytes` = 1 still returns one
/// whole batch). Also checks each batch's records against the offsets they were written at.
fn served_batches(log: &mut PartitionLog) -> Vec<StoredBatch> {
    let mut batches = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let fetched = log.read(offset, 1).unwrap().records;
        let batch = Batch::decode(&fetched, u64::MAX).unwrap();
        assert_eq!(
            batch.size_bytes() as usize,
            fetched.len(),
            "one whole batch"
        );
        assert!(batch.base_offset() as u64 <= offset.0 && offset.0 <= batch.last_offset() as u64);
        check_records(&batch);
        batches.push(StoredBatch {
            base: batch.base_offset() as u64,
            last: batch.last_offset() as u64,
            bytes: fetched,
        });
        offset = Offset(batch.last_offset() as u64 + 1);
    }
    batches
}

/// The records of `batch` are the ones written at their offsets.
fn check_records(batch: &Batch) {
    let base_timestamp = batch.header().base_timestamp;
    for record in batch.records().unwrap() {
        let offset = (batch.base_offset() + i64::from(record.offset_delta)) as u64;
        assert_eq!(record.key.as_deref(), Some(key(offset).as_bytes()));
        assert_eq!(record.value.as_deref(), Some(&value(offset)[..]));
        assert_eq!(base_timestamp + record.timestamp_delta, timestamp(offset));
    }
}

/// Checks that the log serves exactly `expected` and ends after its last batch.
fn assert_serves(log: &mut PartitionLog, expected: &[StoredBatch]) {
    let served = served_batches(log);
    assert_eq!(served.len(), expected.len(), "number of batches served");
    for (got, want) in served.iter().zip(expected) {
        assert_eq!(got, want, "batch at offset {}", want.base);
    }
    let end = expected
        .last()
        .map_or(log.log_start_offset().0, |b| b.last + 1);
    assert_eq!(log.log_end_offset(), Offset(end), "log end offset");
    // A read inside each batch (not at its base) returns that same batch first.
    for want in expected {
        let fetched = log.read(Offset(want.last), 1).unwrap().records;
        assert_eq!(fetched, want.bytes);
    }
    // Nothing is served at or past the end.
    let at_end = log.read(Offset(end), u64::MAX).unwrap();
    assert!(at_end.records.is_empty());
    assert_eq!(at_end.log_end_offset, Offset(end));
    match log.read(Offset(end + 1), u64::MAX) {
        Err(ReadError::OffsetOutOfRange {
            requested,
            log_start_offset,
            log_end_offset,
        }) => {
            assert_eq!(requested, Offset(end + 1));
            assert_eq!(log_start_offset, log.log_start_offset());
            assert_eq!(log_end_offset, Offset(end));
        }
        other => panic!("read past the end gave {other:?}"),
    }
}

/// Every lookup by timestamp agrees with the records' timestamps: the answer is the first offset
/// (from the log start) whose record has a timestamp `>=` the target.
fn assert_time_lookups(log: &mut PartitionLog) {
    let (start, end) = (log.log_start_offset().0, log.log_end_offset().0);
    let max = (start..end).map(timestamp).max().unwrap_or(T0);
    let mut target = T0 - 30;
    while target <= max + 30 {
        let expected = (start..end)
            .find(|offset| timestamp(*offset) >= target)
            .map(|offset| (timestamp(offset), offset));
        let found = log
            .read_by_timestamp(TimestampMs(target))
            .unwrap()
            .map(|found| (found.timestamp.0, found.offset.0));
        assert_eq!(found, expected, "read_by_timestamp({target})");
        target += 3;
    }
}

/// Appends one batch of two records and checks it lands at `expected_offset` and is served.
fn assert_appends_at(log: &mut PartitionLog, expected_offset: u64) {
    let info = log.append(batch(expected_offset, 2), now()).unwrap();
    assert_eq!(info.first_offset, Offset(expected_offset));
    assert_eq!(info.last_offset, Offset(expected_offset + 1));
    assert_eq!(log.log_end_offset(), Offset(expected_offset + 2));
    let fetched = log.read(Offset(expected_offset), 1).unwrap().records;
    let batch = Batch::decode(&fetched, u64::MAX).unwrap();
    assert_eq!(batch.base_offset(), expected_offset as i64);
    check_records(&batch);
}

/// Live `.log` files of a partition directory, sorted by base offset.
fn segment_logs(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    logs.sort();
    logs
}

fn base_of(log_path: &Path) -> u64 {
    log_path
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn segment_file(dir: &Path, base: u64, extension: &str) -> PathBuf {
    dir.join(format!("{base:020}{extension}"))
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn truncate_file(path: &Path, length: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(length)
        .unwrap();
}

fn append_to_file(path: &Path, bytes: &[u8]) {
    let mut content = fs::read(path).unwrap();
    content.extend_from_slice(bytes);
    fs::write(path, content).unwrap();
}

/// A small deterministic generator for garbage bytes.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, length: usize) -> Vec<u8> {
        (0..length).map(|_| self.next() as u8).collect()
    }
}

/// A log written and left as a crash leaves it: several segments, the active one holding at
/// least three batches, the recovery-point checkpoint written, then the `LogDir` dropped
/// without `close` (so no clean-shutdown marker).
struct CrashedLog {
    root: tempfile::TempDir,
    batches: Vec<StoredBatch>,
    active_log: PathBuf,
}

impl CrashedLog {
    fn new() -> CrashedLog {
        let root = scratch();
        let mut log_dir = open_dir(root.path());
        log_dir.create_topic(&topic(), 1).unwrap();
        let log = log_dir.partition(&topic(), 0).unwrap();
        populate(log, 30);
        // End with batches of three records, at least three of them in the active segment.
        loop {
            let first = log.log_end_offset().0;
            log.append(batch(first, 3), now()).unwrap();
            let active_base = log.segments().last().unwrap().base_offset.0;
            let in_active = served_batches(log)
                .iter()
                .filter(|b| b.base >= active_base)
                .count();
            if in_active >= 3 {
                break;
            }
        }
        assert!(log.segment_count() >= 4, "several segments");
        let batches = served_batches(log);
        log_dir.checkpoint().unwrap();
        drop(log_dir);
        let active_log = segment_logs(&partition_dir(root.path())).pop().unwrap();
        let crashed = CrashedLog {
            root,
            batches,
            active_log,
        };
        // The file ends with the last batch, as served.
        let content = fs::read(&crashed.active_log).unwrap();
        let last = crashed.batches.last().unwrap();
        assert!(content.ends_with(&last.bytes));
        crashed
    }

    fn last(&self) -> &StoredBatch {
        self.batches.last().unwrap()
    }

    /// Position of the last batch in the active `.log`, and the file's length.
    fn last_batch_range(&self) -> (u64, u64) {
        let length = fs::metadata(&self.active_log).unwrap().len();
        (length - self.last().bytes.len() as u64, length)
    }

    /// A copy of the crashed directory, and the path of its active `.log`.
    fn copy(&self) -> (tempfile::TempDir, PathBuf) {
        let work = scratch();
        copy_dir(self.root.path(), work.path());
        let active_log = partition_dir(work.path()).join(self.active_log.file_name().unwrap());
        (work, active_log)
    }
}

/// Reopens a damaged copy uncleanly and checks the last batch, and only it, is gone.
fn assert_last_batch_dropped(crashed: &CrashedLog, root: &Path, damaged_bytes: u64, what: &str) {
    let mut log_dir = open_dir(root);
    assert!(!log_dir.had_clean_shutdown());
    let log = log_dir.partition(&topic(), 0).unwrap();
    let kept = &crashed.batches[..crashed.batches.len() - 1];
    assert_eq!(
        log.log_end_offset(),
        Offset(crashed.last().base),
        "log end after {what}"
    );
    assert_serves(log, kept);
    assert_appends_at(log, crashed.last().base);
    let report = log_dir.recovery_reports().get(&topic_partition()).cloned();
    let report = report.unwrap_or_default();
    assert_eq!(
        report.bytes_truncated, damaged_bytes,
        "bytes cut after {what}"
    );
    if damaged_bytes > 0 {
        let (file, position, _) = report.truncated_at.clone().unwrap();
        assert_eq!(file.file_name(), crashed.active_log.file_name());
        assert_eq!(
            position,
            crashed.last_batch_range().0,
            "cut position after {what}"
        );
    }
    assert_eq!(report.segments_deleted, 0);
}

#[test]
fn a_torn_last_batch_is_cut_at_every_byte_position() {
    let crashed = CrashedLog::new();
    let (start, end) = crashed.last_batch_range();
    assert!(end - start > 61, "the last batch has records");
    for length in start..end {
        let (work, active_log) = crashed.copy();
        truncate_file(&active_log, length);
        assert_last_batch_dropped(
            &crashed,
            work.path(),
            length - start,
            &format!("cutting the .log to {length} bytes"),
        );
    }
}

/// The partition refuses to open (`Corrupt`) and the `.log` at `log_path` is left as it was.
fn assert_refused_untouched(root: &Path, log_path: &Path, what: &str) {
    let before = fs::read(log_path).unwrap();
    let mut log_dir = open_dir(root);
    let error = log_dir.partition(&topic(), 0).map(|_| ()).unwrap_err();
    assert!(format!("{error:?}").contains("Corrupt"), "{what}: {error}");
    assert_eq!(
        fs::read(log_path).unwrap(),
        before,
        "{what}: the .log changed"
    );
}

/// A bit flipped where the CRC covers it is indistinguishable from a torn write of the last
/// batch: the batch is cut. A flip in the base offset (outside the CRC) leaves a batch that
/// passes its CRC with offsets out of order: damage, not a torn write, so the partition is
/// refused rather than cut.
#[test]
fn a_flipped_bit_in_the_last_batch_truncates_it() {
    let crashed = CrashedLog::new();
    let (start, end) = crashed.last_batch_range();
    let size = end - start;
    // Header fields (base offset sign and high word, batch length, magic, CRC, attributes,
    // last offset delta, both timestamps, producer id/epoch, base sequence, record count), and
    // record bytes: first, middle, last.
    let mut positions: Vec<(u64, u8)> = vec![
        (0, 7),
        (3, 0),
        (8, 7),
        (10, 0),
        (11, 0),
        (11, 5),
        (16, 0),
        (16, 7),
        (17, 0),
        (20, 7),
        (21, 0),
        (22, 1),
        (24, 3),
        (26, 0),
        (30, 2),
        (42, 0),
        (45, 4),
        (52, 0),
        (55, 6),
        (60, 0),
        (60, 1),
        (61, 0),
        (62, 0),
        (size / 2, 3),
        (size - 2, 0),
        (size - 1, 7),
    ];
    positions.sort_unstable();
    for (position, bit) in positions {
        let (work, active_log) = crashed.copy();
        let mut content = fs::read(&active_log).unwrap();
        content[(start + position) as usize] ^= 1 << bit;
        fs::write(&active_log, content).unwrap();
        let what = format!("flipping bit {bit} of byte {position} of the last batch");
        if position < 8 {
            assert_refused_untouched(work.path(), &active_log, &what);
        } else {
            assert_last_batch_dropped(&crashed, work.path(), size, &what);
        }
    }
}

#[test]
fn a_flipped_bit_in_the_leader_epoch_is_not_detected_as_in_kafka() {
    // `partitionLeaderEpoch` (bytes 12..16) is outside the CRC, in Kafka as here: the batch is
    // kept and served with the epoch as found.
    let crashed = CrashedLog::new();
    let (start, _) = crashed.last_batch_range();
    let (work, active_log) = crashed.copy();
    let mut content = fs::read(&active_log).unwrap();
    content[(start + 14) as usize] ^= 0x10;
    fs::write(&active_log, content).unwrap();
    let mut log_dir = open_dir(work.path());
    let log = log_dir.partition(&topic(), 0).unwrap();
    let mut expected = crashed.batches.clone();
    let mut last = expected.pop().unwrap().bytes.to_vec();
    last[14] ^= 0x10;
    expected.push(StoredBatch {
        base: crashed.last().base,
        last: crashed.last().last,
        bytes: Bytes::from(last),
    });
    assert_serves(log, &expected);
}

#[test]
fn garbage_after_the_last_batch_is_truncated_on_unclean_reopen() {
    let crashed = CrashedLog::new();
    let end = crashed.last().last + 1;
    let mut random = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut garbage: Vec<(String, Vec<u8>)> = [1usize, 5, 12, 16, 17, 60, 61, 62, 200, 1000]
        .into_iter()
        .map(|length| (format!("{length} random bytes"), random.bytes(length)))
        .collect();
    garbage.push(("4096 zero bytes".into(), vec![0; 4096]));
    // A plausible header (next offset, magic 2) whose length runs far past the end.
    let mut huge = Vec::new();
    huge.extend_from_slice(&(end as i64).to_be_bytes());
    huge.extend_from_slice(&i32::MAX.to_be_bytes());
    huge.extend_from_slice(&(-1i32).to_be_bytes());
    huge.push(2);
    huge.extend(random.bytes(100));
    garbage.push(("a header with a huge length".into(), huge));
    // A plausible header whose length fits but whose CRC cannot match.
    let mut bad_crc = Vec::new();
    bad_crc.extend_from_slice(&(end as i64).to_be_bytes());
    bad_crc.extend_from_slice(&60i32.to_be_bytes());
    bad_crc.extend_from_slice(&(-1i32).to_be_bytes());
    bad_crc.push(2);
    bad_crc.extend(random.bytes(55));
    garbage.push(("a header with a bad CRC".into(), bad_crc));
    for (what, bytes) in garbage {
        let (work, active_log) = crashed.copy();
        append_to_file(&active_log, &bytes);
        let mut log_dir = open_dir(work.path());
        let log = log_dir.partition(&topic(), 0).unwrap();
        assert_serves(log, &crashed.batches);
        assert_time_lookups(log);
        assert_appends_at(log, end);
        let report = log_dir.recovery_reports()[&topic_partition()].clone();
        assert_eq!(report.bytes_truncated, bytes.len() as u64, "{what}");
        assert_eq!(
            report.truncated_at.unwrap().1,
            crashed.last_batch_range().1,
            "{what}"
        );
    }
}

/// A copy of the last batch after it (torn or whole) carries offsets that were never written
/// there: a misdirected write, not a torn one (R14). The partition is refused, nothing cut.
#[test]
fn a_copy_of_the_last_batch_after_it_is_refused_not_truncated() {
    let crashed = CrashedLog::new();
    let last = crashed.last().bytes.clone();
    for (what, bytes) in [
        ("a torn copy", last[..last.len() - 3].to_vec()),
        ("a whole copy", last.to_vec()),
    ] {
        let (work, active_log) = crashed.copy();
        append_to_file(&active_log, &bytes);
        assert_refused_untouched(work.path(), &active_log, what);
    }
}

#[test]
fn an_unclean_reopen_of_an_undamaged_log_loses_nothing() {
    let crashed = CrashedLog::new();
    let (work, _) = crashed.copy();
    // Without the recovery-point checkpoint every segment is re-validated.
    remove_recovery_point_checkpoint(work.path());
    let mut log_dir = open_dir(work.path());
    let log = log_dir.partition(&topic(), 0).unwrap();
    let segments = log.segment_count();
    assert_serves(log, &crashed.batches);
    assert_time_lookups(log);
    assert_appends_at(log, crashed.last().last + 1);
    let report = log_dir.recovery_reports()[&topic_partition()].clone();
    assert_eq!(report.segments_recovered, segments);
    assert_eq!(report.bytes_truncated, 0);
    assert_eq!(report.truncated_at, None);
    assert_eq!(report.segments_deleted, 0);
}

/// A log closed cleanly: several sealed segments with index entries, and what it served.
struct ClosedLog {
    root: tempfile::TempDir,
    batches: Vec<StoredBatch>,
    /// Base offset of a sealed segment with at least two entries in each index.
    sealed_base: u64,
    sealed_entries: (usize, usize),
    segment_count: usize,
}

impl ClosedLog {
    fn new() -> ClosedLog {
        let root = scratch();
        let mut log_dir = open_dir(root.path());
        log_dir.create_topic(&topic(), 1).unwrap();
        let log = log_dir.partition(&topic(), 0).unwrap();
        populate(log, 40);
        // The active segment has entries in both indexes too.
        while log
            .segments()
            .last()
            .is_some_and(|s| s.offset_index_entries < 2 || s.time_index_entries < 2)
        {
            populate(log, 1);
        }
        let batches = served_batches(log);
        assert_time_lookups(log);
        let segments: Vec<_> = log.segments().collect();
        let sealed = segments[..segments.len() - 1]
            .iter()
            .skip(1)
            .find(|s| s.offset_index_entries >= 2 && s.time_index_entries >= 2)
            .unwrap()
            .clone();
        let segment_count = segments.len();
        assert!(segment_count >= 4);
        log_dir.close().unwrap();
        ClosedLog {
            root,
            batches,
            sealed_base: sealed.base_offset.0,
            sealed_entries: (sealed.offset_index_entries, sealed.time_index_entries),
            segment_count,
        }
    }

    fn dir(&self) -> PathBuf {
        partition_dir(self.root.path())
    }

    fn copy(&self) -> (tempfile::TempDir, PathBuf) {
        let work = scratch();
        copy_dir(self.root.path(), work.path());
        let dir = partition_dir(work.path());
        (work, dir)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IndexDamage {
    Delete,
    ZeroFill,
}

#[test]
fn deleted_or_zeroed_indexes_of_a_sealed_segment_are_rebuilt() {
    let closed = ClosedLog::new();
    let base = closed.sealed_base;
    let original_index = fs::read(segment_file(&closed.dir(), base, ".index")).unwrap();
    let original_time_index = fs::read(segment_file(&closed.dir(), base, ".timeindex")).unwrap();
    assert_eq!(original_index.len(), closed.sealed_entries.0 * 8);
    assert_eq!(original_time_index.len(), closed.sealed_entries.1 * 12);
    let targets: [&[&str]; 3] = [&[".index", ".timeindex"], &[".index"], &[".timeindex"]];
    for (damage, clean, damaged) in [IndexDamage::Delete, IndexDamage::ZeroFill]
        .into_iter()
        .flat_map(|damage| [true, false].map(|clean| (damage, clean)))
        .flat_map(|(damage, clean)| targets.map(|damaged| (damage, clean, damaged)))
    {
        let what = format!("{damage:?} {damaged:?}, clean reopen: {clean}");
        let (work, dir) = closed.copy();
        for extension in damaged {
            let path = segment_file(&dir, base, extension);
            match damage {
                IndexDamage::Delete => fs::remove_file(&path).unwrap(),
                IndexDamage::ZeroFill => {
                    let length = fs::metadata(&path).unwrap().len() as usize;
                    fs::write(&path, vec![0u8; length]).unwrap();
                }
            }
        }
        if !clean {
            fs::remove_file(work.path().join(CLEAN_SHUTDOWN_MARKER)).unwrap();
        }
        let mut log_dir = open_dir(work.path());
        assert_eq!(log_dir.had_clean_shutdown(), clean, "{what}");
        let log = log_dir.partition(&topic(), 0).unwrap();
        assert_serves(log, &closed.batches);
        assert_time_lookups(log);
        let info = log.segments().find(|s| s.base_offset.0 == base).unwrap();
        assert_eq!(
            (info.offset_index_entries, info.time_index_entries),
            closed.sealed_entries,
            "rebuilt entry counts, {what}"
        );
        let report = log_dir.recovery_reports()[&topic_partition()].clone();
        assert!(report.segments_recovered >= 1, "{what}");
        assert_eq!(report.bytes_truncated, 0, "{what}");
        log_dir.close().unwrap();
        // The rebuilt indexes are the ones the appends wrote.
        assert_eq!(
            fs::read(segment_file(&dir, base, ".index")).unwrap(),
            original_index,
            "rebuilt .index, {what}"
        );
        assert_eq!(
            fs::read(segment_file(&dir, base, ".timeindex")).unwrap(),
            original_time_index,
            "rebuilt .timeindex, {what}"
        );
    }
}

#[test]
fn an_index_entry_past_the_end_of_its_log_is_rebuilt() {
    let closed = ClosedLog::new();
    let base = closed.sealed_base;
    let (work, dir) = closed.copy();
    let index_path = segment_file(&dir, base, ".index");
    let original_index = fs::read(&index_path).unwrap();
    let log_size = fs::metadata(segment_file(&dir, base, ".log"))
        .unwrap()
        .len();
    let last_relative = u32::from_be_bytes(
        original_index[original_index.len() - 8..][..4]
            .try_into()
            .unwrap(),
    );
    let mut bogus = Vec::new();
    bogus.extend_from_slice(&(last_relative + 1).to_be_bytes());
    bogus.extend_from_slice(&(log_size as u32 + 100).to_be_bytes());
    append_to_file(&index_path, &bogus);
    let mut log_dir = open_dir(work.path());
    assert!(log_dir.had_clean_shutdown());
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_serves(log, &closed.batches);
    assert_time_lookups(log);
    let info = log.segments().find(|s| s.base_offset.0 == base).unwrap();
    assert_eq!(info.offset_index_entries, closed.sealed_entries.0);
    assert_appends_at(log, closed.batches.last().unwrap().last + 1);
    log_dir.close().unwrap();
    assert_eq!(fs::read(&index_path).unwrap(), original_index);
}

#[test]
fn index_entries_naming_offsets_past_the_segment_end_are_not_trusted() {
    // The last entry of the active segment's `.index` (or `.timeindex`) keeps its position but
    // names an offset beyond the segment's data. A trusted load must not keep it: appending
    // would otherwise need an index entry below it, and a time lookup would start too late.
    let closed = ClosedLog::new();
    let active_base = base_of(segment_logs(&closed.dir()).last().unwrap());
    for (extension, entry_bytes, relative_at) in [(".index", 8, 0), (".timeindex", 12, 8)] {
        let (work, dir) = closed.copy();
        let path = segment_file(&dir, active_base, extension);
        let mut content = fs::read(&path).unwrap();
        assert!(
            content.len() >= entry_bytes,
            "the active {extension} has entries"
        );
        let at = content.len() - entry_bytes + relative_at;
        let relative = u32::from_be_bytes(content[at..at + 4].try_into().unwrap());
        content[at..at + 4].copy_from_slice(&(relative + 1000).to_be_bytes());
        fs::write(&path, content).unwrap();
        let mut log_dir = open_dir(work.path());
        let log = log_dir.partition(&topic(), 0).unwrap();
        assert_serves(log, &closed.batches);
        assert_time_lookups(log);
        populate(log, 20);
        let batches = served_batches(log);
        assert_eq!(batches.len(), closed.batches.len() + 20, "{extension}");
        assert_time_lookups(log);
        log_dir.close().unwrap();
    }
}

/// The configuration of a log whose owner syncs what rolls seal (the engine's shards).
fn deferred_config() -> LogConfig {
    LogConfig {
        deferred_seal_syncs: true,
        ..config()
    }
}

fn open_dir_with(root: &Path, config: LogConfig) -> LogDir {
    LogDir::open(root, storage_from_env(), config).unwrap()
}

/// With `LogConfig::deferred_seal_syncs` a roll leaves the recovery point where it was and hands
/// the sealed segment's sync to the owner; reporting it moves the recovery point to the segment's
/// end, and a flush syncs any seal the owner has not taken before the active segment.
#[test]
fn a_deferred_seal_moves_the_recovery_point_only_when_its_sync_is_reported() {
    let root = scratch();
    let mut log_dir = open_dir_with(root.path(), deferred_config());
    log_dir.create_topic(&topic(), 1).unwrap();
    let log = log_dir.partition(&topic(), 0).unwrap();
    let rolls_until = |log: &mut PartitionLog| {
        let segments = log.segments().count();
        while log.segments().count() == segments {
            populate(log, 1);
        }
    };
    rolls_until(log);
    let before = log.recovery_point();
    let seals = log.take_unsynced_seals();
    assert_eq!(seals.len(), 1);
    let active_base = log.segments().last().unwrap().base_offset;
    assert_eq!(seals[0].through, active_base);
    assert!(before < active_base, "the roll synced nothing: {before}");
    assert!(log.take_unsynced_seals().is_empty(), "taken once");
    let result = seals[0].sync(&*storage_from_env());
    log.mark_seal_synced(seals[0].through, result).unwrap();
    assert_eq!(log.recovery_point(), active_base);

    rolls_until(log);
    populate(log, 1);
    log.flush().unwrap();
    assert!(log.take_unsynced_seals().is_empty(), "the flush synced it");
    assert_eq!(log.recovery_point(), log.log_end_offset());
    log_dir.close().unwrap();
}

/// How a crash before a roll's deferred seal sync can leave a sealed segment.
#[derive(Debug, Clone, Copy)]
enum SealCut {
    /// Its last batch written in part.
    TornBatch,
    /// Its last batch lost whole: the segment ends before the next one starts.
    LostBatch,
}

/// The closed log's second segment cut as `cut`, with recovery from `recovery_point` (the rest of
/// the directory as the crash left it); returns the work directory, the partition directory,
/// the batches the cut segment keeps and the last one it had.
fn cut_sealed_segment(
    closed: &ClosedLog,
    cut: SealCut,
    recovery_point: Option<u64>,
) -> (tempfile::TempDir, PathBuf, Vec<StoredBatch>, u64) {
    let (work, dir) = closed.copy();
    fs::remove_file(work.path().join(CLEAN_SHUTDOWN_MARKER)).unwrap();
    if recovery_point.is_none() {
        remove_recovery_point_checkpoint(work.path());
    }
    let logs = segment_logs(&dir);
    let (victim_base, next_base) = (base_of(&logs[1]), base_of(&logs[2]));
    let in_victim: Vec<&StoredBatch> = closed
        .batches
        .iter()
        .filter(|b| b.base >= victim_base && b.base < next_base)
        .collect();
    assert!(in_victim.len() >= 2);
    let last = in_victim[in_victim.len() - 1];
    let kept_bytes: usize = in_victim[..in_victim.len() - 1]
        .iter()
        .map(|b| b.bytes.len())
        .sum();
    let cut_bytes = match cut {
        SealCut::TornBatch => kept_bytes + last.bytes.len() / 2,
        SealCut::LostBatch => kept_bytes,
    };
    let file = fs::OpenOptions::new().write(true).open(&logs[1]).unwrap();
    file.set_len(cut_bytes as u64).unwrap();
    let kept: Vec<StoredBatch> = closed
        .batches
        .iter()
        .filter(|b| b.base < last.base)
        .cloned()
        .collect();
    (work, dir, kept, last.base)
}

/// A crash before a roll's deferred seal sync finished can leave a sealed segment torn or cut
/// short, with later segments after it: above the recovery point that is a torn tail like the
/// active segment's. Recovery cuts it there and deletes the later segments (which can hold no
/// acknowledged durable record), and the log serves everything before the cut and takes appends.
#[test]
fn a_sealed_segment_torn_or_cut_short_above_the_recovery_point_is_cut_and_later_ones_deleted() {
    let closed = ClosedLog::new();
    for cut in [SealCut::TornBatch, SealCut::LostBatch] {
        let (work, dir, kept, cut_at) = cut_sealed_segment(&closed, cut, None);
        let mut log_dir = open_dir_with(work.path(), deferred_config());
        let log = log_dir.partition(&topic(), 0).unwrap();
        assert_eq!(log.log_end_offset(), Offset(cut_at), "{cut:?}");
        assert_serves(log, &kept);
        assert_eq!(
            segment_logs(&dir).len(),
            2,
            "{cut:?}: the later segments are deleted"
        );
        populate(log, 3);
        assert_eq!(served_batches(log).len(), kept.len() + 3);
        log_dir.close().unwrap();
    }
}

/// The same cut is damage to synced data below the recovery point, and anywhere in a log whose
/// rolls sync what they seal (no `deferred_seal_syncs`): the partition refuses to open and
/// nothing is deleted.
#[test]
fn a_sealed_segment_cut_below_the_recovery_point_or_in_a_log_that_syncs_its_seals_fails() {
    let closed = ClosedLog::new();
    for cut in [SealCut::TornBatch, SealCut::LostBatch] {
        // With the checkpoint the clean close wrote, the recovery point is at the log end.
        for (recovery_point, config) in [(Some(0), deferred_config()), (None, config())] {
            let (work, dir, _, _) = cut_sealed_segment(&closed, cut, recovery_point);
            let before = segment_logs(&dir);
            let mut log_dir = open_dir_with(work.path(), config);
            let opened = log_dir.partition(&topic(), 0).map(|_| ());
            assert!(opened.is_err(), "{cut:?}, {recovery_point:?}: {opened:?}");
            assert_eq!(segment_logs(&dir), before, "{cut:?}: nothing deleted");
        }
    }
}

/// A bad batch in a segment that later segments follow is damage to data that was synced when
/// the segment rolled, not a torn write: the partition refuses to open (naming the file and the
/// position) and no file is truncated or deleted (RELIABILITY.md, the promise; R13).
#[test]
fn a_corrupt_middle_segment_fails_the_partition_and_nothing_is_truncated() {
    let closed = ClosedLog::new();
    let (work, dir) = closed.copy();
    // Recovery must start at offset 0: no clean-shutdown marker, no recovery point.
    fs::remove_file(work.path().join(CLEAN_SHUTDOWN_MARKER)).unwrap();
    remove_recovery_point_checkpoint(work.path());
    let logs = segment_logs(&dir);
    assert_eq!(logs.len(), closed.segment_count);
    let victim = &logs[1];
    let victim_base = base_of(victim);
    let next_base = base_of(&logs[2]);
    let in_victim: Vec<&StoredBatch> = closed
        .batches
        .iter()
        .filter(|b| b.base >= victim_base && b.base < next_base)
        .collect();
    assert!(in_victim.len() >= 3);
    // Corrupt the second batch of the segment, in its records.
    let bad_position = in_victim[0].bytes.len();
    let mut content = fs::read(victim).unwrap();
    content[bad_position + 70] ^= 0xff;
    fs::write(victim, &content).unwrap();
    let before: Vec<(String, Vec<u8>)> = file_names(&dir)
        .into_iter()
        .map(|name| {
            let bytes = fs::read(dir.join(&name)).unwrap();
            (name, bytes)
        })
        .collect();

    let mut log_dir = open_dir(work.path());
    let error = match log_dir.partition(&topic(), 0) {
        Ok(_) => panic!("a corrupt sealed segment must not open"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains(&victim.file_name().unwrap().to_string_lossy().into_owned()),
        "the error names the file: {error}"
    );
    assert!(
        error.contains(&bad_position.to_string()),
        "and the position: {error}"
    );
    let after: Vec<(String, Vec<u8>)> = file_names(&dir)
        .into_iter()
        .map(|name| {
            let bytes = fs::read(dir.join(&name)).unwrap();
            (name, bytes)
        })
        .collect();
    let logs_only = |files: &[(String, Vec<u8>)]| -> Vec<(String, Vec<u8>)> {
        files
            .iter()
            .filter(|(name, _)| name.ends_with(".log"))
            .cloned()
            .collect()
    };
    assert_eq!(
        logs_only(&after),
        logs_only(&before),
        "no segment truncated or deleted"
    );
}

/// In the tail segment a batch that fails its CRC with a valid batch after it in the same
/// sector is not a torn write either (a crash keeps or loses a sector whole, and writes reach
/// the page cache in order): the partition is refused, nothing cut.
#[test]
fn a_corrupt_batch_followed_in_its_sector_by_a_valid_one_is_refused() {
    let closed = ClosedLog::new();
    let (work, dir) = closed.copy();
    fs::remove_file(work.path().join(CLEAN_SHUTDOWN_MARKER)).unwrap();
    remove_recovery_point_checkpoint(work.path());
    let logs = segment_logs(&dir);
    let victim = logs.last().unwrap();
    let victim_base = base_of(victim);
    let in_victim: Vec<&StoredBatch> = closed
        .batches
        .iter()
        .filter(|b| b.base >= victim_base)
        .collect();
    assert!(in_victim.len() >= 3, "the last segment holds batches");
    let bad_position = in_victim[0].bytes.len();
    let next_position = bad_position + in_victim[1].bytes.len();
    assert!(
        next_position < 512,
        "the next batch starts in the same sector"
    );
    let mut content = fs::read(victim).unwrap();
    content[bad_position + 70] ^= 0xff;
    fs::write(victim, &content).unwrap();
    assert_refused_untouched(work.path(), victim, "a corrupt middle batch");
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn deleted_and_cleaned_leftovers_are_removed_on_open() {
    let closed = ClosedLog::new();
    let (work, dir) = closed.copy();
    let before = file_names(&dir);
    let logs = segment_logs(&dir);
    let (first, second) = (base_of(&logs[0]), base_of(&logs[1]));
    let leftovers = [
        segment_file(&dir, first, ".log.deleted"),
        segment_file(&dir, first, ".index.deleted"),
        segment_file(&dir, 99_999, ".timeindex.deleted"),
        segment_file(&dir, second, ".log.cleaned"),
        segment_file(&dir, second, ".index.cleaned"),
    ];
    for (n, path) in leftovers.iter().enumerate() {
        fs::write(path, XorShift(n as u64 + 1).bytes(300)).unwrap();
    }
    let mut log_dir = open_dir(work.path());
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_serves(log, &closed.batches);
    assert_time_lookups(log);
    for path in &leftovers {
        assert!(!path.exists(), "{} must be removed", path.display());
    }
    assert_eq!(log.segment_count(), closed.segment_count);
    let report = log_dir.recovery_reports()[&topic_partition()].clone();
    assert_eq!(report.leftovers_swept, leftovers.len());
    assert_eq!(report.bytes_truncated, 0);
    log_dir.close().unwrap();
    assert_eq!(file_names(&dir), before);
}

#[test]
fn a_swap_segment_replaces_the_segment_it_covers() {
    let closed = ClosedLog::new();
    let (work, dir) = closed.copy();
    let logs = segment_logs(&dir);
    let base = base_of(&logs[1]);
    let swap = segment_file(&dir, base, ".log.swap");
    fs::copy(&logs[1], &swap).unwrap();
    let mut log_dir = open_dir(work.path());
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_serves(log, &closed.batches);
    assert_time_lookups(log);
    assert_eq!(log.segment_count(), closed.segment_count);
    assert!(!swap.exists());
    assert!(segment_file(&dir, base, ".log").exists());
    let report = log_dir.recovery_reports()[&topic_partition()].clone();
    assert!(report.leftovers_swept >= 1);
}

#[test]
fn a_swap_segment_covering_two_segments_replaces_both() {
    let closed = ClosedLog::new();
    let (work, dir) = closed.copy();
    let logs = segment_logs(&dir);
    let (base, next) = (base_of(&logs[1]), base_of(&logs[2]));
    // What a cleaner that merged segments 1 and 2 into one would leave.
    let mut merged = fs::read(&logs[1]).unwrap();
    merged.extend(fs::read(&logs[2]).unwrap());
    fs::write(segment_file(&dir, base, ".log.swap"), merged).unwrap();
    let mut log_dir = open_dir(work.path());
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_serves(log, &closed.batches);
    assert_time_lookups(log);
    assert_eq!(log.segment_count(), closed.segment_count - 1);
    for extension in [".log", ".index", ".timeindex"] {
        assert!(!segment_file(&dir, next, extension).exists());
    }
    assert!(!segment_file(&dir, base, ".log.swap").exists());
    let merged_info = log.segments().find(|s| s.base_offset.0 == base).unwrap();
    assert_eq!(merged_info.next_offset.0, base_of(&logs[3]));
    assert!(merged_info.offset_index_entries > 0);
    assert_appends_at(log, closed.batches.last().unwrap().last + 1);
}

#[test]
fn a_swap_from_an_incomplete_split_is_discarded() {
    // Kafka's KAFKA-6264 rule: a `.swap` whose base offset is at or above the lowest `.cleaned`
    // base offset may be part of an incomplete split and is deleted; the original stays.
    let closed = ClosedLog::new();
    let (work, dir) = closed.copy();
    let logs = segment_logs(&dir);
    let base = base_of(&logs[1]);
    let next = base_of(&logs[2]);
    let in_segment: Vec<&StoredBatch> = closed
        .batches
        .iter()
        .filter(|b| b.base >= base && b.base < next)
        .collect();
    let split_at = in_segment.len() / 2;
    let first_half: Vec<u8> = in_segment[..split_at]
        .iter()
        .flat_map(|b| b.bytes.to_vec())
        .collect();
    let second_half: Vec<u8> = in_segment[split_at..]
        .iter()
        .flat_map(|b| b.bytes.to_vec())
        .collect();
    let second_base = in_segment[split_at].base;
    fs::write(segment_file(&dir, base, ".log.cleaned"), first_half).unwrap();
    fs::write(segment_file(&dir, second_base, ".log.swap"), second_half).unwrap();
    let mut log_dir = open_dir(work.path());
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_serves(log, &closed.batches);
    assert_eq!(log.segment_count(), closed.segment_count);
    assert!(!segment_file(&dir, second_base, ".log.swap").exists());
    assert!(!segment_file(&dir, second_base, ".log").exists());
    assert!(!segment_file(&dir, base, ".log.cleaned").exists());
}

/// Writes `.log` files as a Kafka broker would have: base offsets from 100, contiguous batches,
/// leader epoch 0, no index and no checkpoint files. Returns the batches as written.
fn write_kafka_segments(dir: &Path) -> Vec<StoredBatch> {
    fs::create_dir_all(dir).unwrap();
    let mut written = Vec::new();
    let mut next = 100u64;
    for _segment in 0..2 {
        let base = next;
        let mut content = Vec::new();
        for n in 0..8u64 {
            let count = 1 + (next + n) % 3;
            let mut bytes = batch(next, count).to_vec();
            bytes[12..16].copy_from_slice(&0i32.to_be_bytes()); // partitionLeaderEpoch 0
            content.extend_from_slice(&bytes);
            written.push(StoredBatch {
                base: next,
                last: next + count - 1,
                bytes: Bytes::from(bytes),
            });
            next += count;
        }
        fs::write(segment_file(dir, base, ".log"), content).unwrap();
    }
    written
}

#[test]
fn segments_written_by_kafka_open_and_serve() {
    for kafka_marker in [false, true] {
        let root = scratch();
        let dir = partition_dir(root.path());
        let written = write_kafka_segments(&dir);
        if kafka_marker {
            // Kafka's own clean-shutdown marker: the files are trusted, the indexes rebuilt.
            fs::write(
                root.path().join(CLEAN_SHUTDOWN_MARKER),
                "{\"version\":0,\"brokerEpoch\":7}",
            )
            .unwrap();
        }
        let mut log_dir = open_dir(root.path());
        assert_eq!(log_dir.had_clean_shutdown(), kafka_marker);
        let log = log_dir.partition(&topic(), 0).unwrap();
        assert_eq!(log.log_start_offset(), Offset(100));
        assert_eq!(log.segment_count(), 2);
        assert_serves(log, &written);
        assert_time_lookups(log);
        for info in log.segments() {
            assert!(info.offset_index_entries > 0, "index rebuilt for {info:?}");
            assert!(
                info.time_index_entries > 0,
                "time index rebuilt for {info:?}"
            );
        }
        let end = written.last().unwrap().last + 1;
        assert_appends_at(log, end);
        let report = log_dir.recovery_reports()[&topic_partition()].clone();
        assert_eq!(report.segments_recovered, 2);
        assert_eq!(report.bytes_truncated, 0);
        log_dir.close().unwrap();
        // The two segments Kafka wrote now have index files with entries.
        for log_path in &segment_logs(&dir)[..2] {
            for extension in ["index", "timeindex"] {
                let index = log_path.with_extension(extension);
                assert!(
                    fs::metadata(&index).unwrap().len() > 0,
                    "{}",
                    index.display()
                );
            }
        }
    }
}

#[test]
fn a_clean_close_then_reopen_does_no_recovery() {
    let closed = ClosedLog::new();
    let dir = closed.dir();
    let before: Vec<(String, Vec<u8>)> = file_names(&dir)
        .into_iter()
        .map(|name| {
            let content = fs::read(dir.join(&name)).unwrap();
            (name, content)
        })
        .collect();
    let mut log_dir = open_dir(closed.root.path());
    assert!(log_dir.had_clean_shutdown());
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_serves(log, &closed.batches);
    assert_time_lookups(log);
    assert_eq!(log.segment_count(), closed.segment_count);
    assert!(log_dir.recovery_reports().is_empty());
    // Sealed segments are untouched; the active `.log` too (its indexes are grown for appends).
    let active = segment_logs(&dir).pop().unwrap();
    let active_stem = active.file_stem().unwrap().to_str().unwrap().to_owned();
    for (name, content) in &before {
        if name.starts_with(&active_stem) && !name.ends_with(".log") {
            continue;
        }
        assert_eq!(
            &fs::read(dir.join(name)).unwrap(),
            content,
            "{name} changed"
        );
    }
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_appends_at(log, closed.batches.last().unwrap().last + 1);
    log_dir.close().unwrap();
    // The marker is consumed at open: a crash now would be seen as unclean.
    let log_dir = open_dir(closed.root.path());
    assert!(log_dir.had_clean_shutdown());
    drop(log_dir);
    let log_dir = open_dir(closed.root.path());
    assert!(!log_dir.had_clean_shutdown());
}

#[test]
fn partition_log_open_reports_nothing_for_a_clean_log() {
    // The same guarantee one level down, through `PartitionLog::open` directly.
    let root = scratch();
    let dir = root.path().join("direct-0");
    let tp = TopicPartition {
        topic: TopicName::parse("direct").unwrap(),
        partition: 0,
    };
    let options = |clean: bool, recovery_point: Offset| LogOpenOptions {
        had_clean_shutdown: clean,
        recovery_point,
        log_start_offset: None,
        now: now(),
    };
    let storage = storage_from_env();
    let (mut log, report) = PartitionLog::open(
        storage.clone(),
        &dir,
        tp.clone(),
        config(),
        options(false, Offset(0)),
    )
    .unwrap();
    assert_eq!(report.bytes_truncated, 0);
    populate(&mut log, 25);
    let batches = served_batches(&mut log);
    let end = log.log_end_offset();
    log.close().unwrap();
    let (mut log, report) =
        PartitionLog::open(storage, &dir, tp, config(), options(true, end)).unwrap();
    assert_eq!(report, RecoveryReport::default());
    assert_serves(&mut log, &batches);
    assert_time_lookups(&mut log);
}

#[test]
fn an_empty_time_index_beside_a_full_offset_index_still_finds_timestamps() {
    // A sealed segment whose `.timeindex` is empty while its `.index` has entries (Kafka leaves
    // this when a time index was lost below the recovery point). Its largest timestamp, here in
    // its first batch, must still be known, or lookups by time skip the segment.
    let root = scratch();
    let dir = root.path().join("spike-0");
    let tp = TopicPartition {
        topic: TopicName::parse("spike").unwrap(),
        partition: 0,
    };
    let storage = storage_from_env();
    let options = |clean: bool| LogOpenOptions {
        had_clean_shutdown: clean,
        recovery_point: Offset(0),
        log_start_offset: None,
        now: now(),
    };
    let (mut log, _) =
        PartitionLog::open(storage.clone(), &dir, tp.clone(), config(), options(false)).unwrap();
    for n in 0..30i64 {
        let timestamp = if n == 0 { T0 + 10_000 } else { T0 + n };
        let mut builder = BatchBuilder::new(0);
        builder.push(&NewRecord {
            timestamp_ms: timestamp,
            key: None,
            value: Some(&[7u8; 100]),
            headers: &[],
        });
        log.append(builder.build().unwrap(), now()).unwrap();
    }
    assert!(log.segment_count() >= 2);
    let spike = |log: &mut PartitionLog| {
        log.read_by_timestamp(TimestampMs(T0 + 5_000))
            .unwrap()
            .map(|found| (found.timestamp.0, found.offset.0))
    };
    assert_eq!(spike(&mut log), Some((T0 + 10_000, 0)));
    log.close().unwrap();
    truncate_file(&segment_file(&dir, 0, ".timeindex"), 0);
    assert!(fs::metadata(segment_file(&dir, 0, ".index")).unwrap().len() > 0);
    let (mut log, _) = PartitionLog::open(storage, &dir, tp, config(), options(true)).unwrap();
    assert_eq!(spike(&mut log), Some((T0 + 10_000, 0)));
}

/// The `(relative offset, position)` entries of a `.index` file and the `(timestamp, relative
/// offset)` entries of a `.timeindex` file.
type OffsetEntries = Vec<(u32, u32)>;
type TimeEntries = Vec<(i64, u32)>;

fn index_entries(dir: &Path, base: u64) -> (OffsetEntries, TimeEntries) {
    let index = fs::read(segment_file(dir, base, ".index")).unwrap();
    let time_index = fs::read(segment_file(dir, base, ".timeindex")).unwrap();
    let offsets = index
        .chunks_exact(8)
        .map(|e| {
            let relative = u32::from_be_bytes(e[..4].try_into().unwrap());
            (relative, u32::from_be_bytes(e[4..].try_into().unwrap()))
        })
        .collect();
    let times = time_index
        .chunks_exact(12)
        .map(|e| {
            let timestamp = i64::from_be_bytes(e[..8].try_into().unwrap());
            (timestamp, u32::from_be_bytes(e[8..].try_into().unwrap()))
        })
        .collect();
    (offsets, times)
}

#[test]
fn index_entries_follow_kafkas_interval_rule_on_append_and_on_rebuild() {
    // Kafka indexes an append when *more than* `index.interval.bytes` were written since the last
    // entry. With batches of exactly the interval's size, that is every second batch from the
    // third on, both when appending and when a rebuild walks the `.log`.
    let root = scratch();
    let dir = root.path().join("rule-0");
    let tp = TopicPartition {
        topic: TopicName::parse("rule").unwrap(),
        partition: 0,
    };
    let fixed_size_batch = |offset: u64| {
        let mut builder = BatchBuilder::new(0);
        builder.push(&NewRecord {
            timestamp_ms: timestamp(offset),
            key: Some(key(offset).as_bytes()),
            value: Some(&[offset as u8; 20]),
            headers: &[],
        });
        builder.build().unwrap()
    };
    let size = fixed_size_batch(0).len() as u64;
    assert!((0..10).all(|offset| fixed_size_batch(offset).len() as u64 == size));
    let config = LogConfig {
        index_interval_bytes: size,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    };
    let options = |clean: bool| LogOpenOptions {
        had_clean_shutdown: clean,
        recovery_point: Offset(0),
        log_start_offset: None,
        now: now(),
    };
    let storage = storage_from_env();
    let (mut log, _) = PartitionLog::open(
        storage.clone(),
        &dir,
        tp.clone(),
        config.clone(),
        options(false),
    )
    .unwrap();
    for offset in 0..10 {
        log.append(fixed_size_batch(offset), now()).unwrap();
    }
    log.close().unwrap();
    let expected_offsets: Vec<(u32, u32)> = [2u32, 4, 6, 8]
        .iter()
        .map(|offset| (*offset, offset * size as u32))
        .collect();
    // Time entries go with the offset entries, each the largest timestamp so far and the first
    // offset holding it, appended only when it grew; closing adds the segment's largest.
    let mut expected_times: Vec<(i64, u32)> = Vec::new();
    for offset in [2u64, 4, 6, 8, 9] {
        let largest = (0..=offset).map(timestamp).max().unwrap();
        let first_at_largest = (0..=offset).find(|o| timestamp(*o) == largest).unwrap();
        if expected_times
            .last()
            .is_none_or(|(last, _)| largest > *last)
        {
            expected_times.push((largest, first_at_largest as u32));
        }
    }
    assert_eq!(
        expected_times.len(),
        4,
        "offsets 4 and 9 are late: no new maximum"
    );
    assert_eq!(
        index_entries(&dir, 0),
        (expected_offsets.clone(), expected_times.clone())
    );
    // Rebuilt by an unclean open, the same entries (the final one again added at close).
    let (log, report) = PartitionLog::open(
        storage.clone(),
        &dir,
        tp.clone(),
        config.clone(),
        options(false),
    )
    .unwrap();
    assert_eq!(report.segments_recovered, 1);
    log.close().unwrap();
    assert_eq!(index_entries(&dir, 0), (expected_offsets, expected_times));
}

#[test]
fn a_crashed_partition_left_unopened_through_a_clean_session_is_still_recovered() {
    // Session 1 crashes with a corrupt last batch. Session 2 opens the directory but never the
    // partition, and closes cleanly, which writes the clean-shutdown marker. Session 3 must not
    // trust the partition's damaged tail because of that marker.
    let crashed = CrashedLog::new();
    let (work, active_log) = crashed.copy();
    let (start, _) = crashed.last_batch_range();
    let mut content = fs::read(&active_log).unwrap();
    content[start as usize + 70] ^= 0x01;
    fs::write(&active_log, content).unwrap();
    let log_dir = open_dir(work.path());
    assert!(!log_dir.had_clean_shutdown());
    log_dir.close().unwrap();
    // (What saves it today: the untrimmed, preallocated index of its active segment fails the
    // index check, so the segment is re-validated.)
    let mut log_dir = open_dir(work.path());
    assert!(log_dir.had_clean_shutdown());
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_serves(log, &crashed.batches[..crashed.batches.len() - 1]);
    assert_appends_at(log, crashed.last().base);
}

#[test]
fn overlapping_segments_are_a_typed_error_not_a_panic() {
    // Two segment files whose offsets overlap cannot both be right; opening says so.
    let root = scratch();
    let dir = partition_dir(root.path());
    let written = write_kafka_segments(&dir);
    let second_base = base_of(&segment_logs(&dir)[1]);
    let overlapping = written
        .iter()
        .find(|b| b.base > 100 && b.base < second_base)
        .unwrap();
    fs::write(
        segment_file(&dir, overlapping.base, ".log"),
        &overlapping.bytes,
    )
    .unwrap();
    for clean in [false, true] {
        if clean {
            fs::write(root.path().join(CLEAN_SHUTDOWN_MARKER), "{}").unwrap();
        }
        let mut log_dir = open_dir(root.path());
        match log_dir.partition(&topic(), 0) {
            Err(PartitionError::Open(OpenError::Storage(StorageError::Corrupt {
                file, ..
            }))) => {
                assert_eq!(file, segment_file(&dir, overlapping.base, ".log"));
            }
            other => panic!("opening overlapping segments gave {other:?}"),
        }
    }
}

/// A message in Kafka's legacy format (magic 0): offset, size, crc, magic, attributes, key, value.
fn legacy_message(offset: i64, value: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.push(0); // magic 0
    body.push(0); // attributes
    body.extend_from_slice(&(-1i32).to_be_bytes()); // null key
    body.extend_from_slice(&(value.len() as i32).to_be_bytes());
    body.extend_from_slice(value);
    let mut message = offset.to_be_bytes().to_vec();
    message.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    message.extend_from_slice(&crc32fast::hash(&body).to_be_bytes()); // CRC-32 from magic on
    message.extend_from_slice(&body);
    message
}

#[test]
fn a_log_in_kafkas_legacy_format_is_refused_not_truncated() {
    let root = scratch();
    let dir = partition_dir(root.path());
    fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("00000000000000000000.log");
    let mut bytes = legacy_message(0, b"old message");
    bytes.extend_from_slice(&legacy_message(1, b"another"));
    fs::write(&log_path, &bytes).unwrap();
    let mut log_dir = open_dir(root.path());
    let error = log_dir.partition(&topic(), 0).unwrap_err();
    let message = error.to_string();
    assert!(message.contains("legacy format (magic 0)"), "{message}");
    assert_eq!(
        fs::read(&log_path).unwrap(),
        bytes,
        "the old data is left exactly as it was"
    );
}

#[test]
fn a_legacy_message_with_a_bad_crc_is_damage_and_truncated() {
    let root = scratch();
    {
        let mut log_dir = open_dir(root.path());
        log_dir.create_topic(&topic(), 1).unwrap();
        let log = log_dir.partition(&topic(), 0).unwrap();
        log.append(batch(0, 3), now()).unwrap();
    }
    let log_path = partition_dir(root.path()).join("00000000000000000000.log");
    let valid_length = fs::metadata(&log_path).unwrap().len();
    let mut damaged = legacy_message(3, b"looks old");
    let last = damaged.len() - 1;
    damaged[last] ^= 0x10;
    let mut file = fs::OpenOptions::new().append(true).open(&log_path).unwrap();
    std::io::Write::write_all(&mut file, &damaged).unwrap();
    drop(file);
    let mut log_dir = open_dir(root.path());
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_eq!(log.log_end_offset(), Offset(3));
    assert_eq!(fs::metadata(&log_path).unwrap().len(), valid_length);
}

#[test]
fn a_torn_tail_that_looks_like_a_legacy_message_is_still_truncated() {
    let root = scratch();
    {
        let mut log_dir = open_dir(root.path());
        log_dir.create_topic(&topic(), 1).unwrap();
        let log = log_dir.partition(&topic(), 0).unwrap();
        log.append(batch(0, 3), now()).unwrap();
        log.flush().unwrap();
    }
    let log_path = partition_dir(root.path()).join("00000000000000000000.log");
    let valid_length = fs::metadata(&log_path).unwrap().len();
    let torn = legacy_message(3, &[7u8; 200]);
    let mut file = fs::OpenOptions::new().append(true).open(&log_path).unwrap();
    std::io::Write::write_all(&mut file, &torn[..100]).unwrap();
    drop(file);
    let mut log_dir = open_dir(root.path());
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_eq!(log.log_end_offset(), Offset(3));
    assert_eq!(fs::metadata(&log_path).unwrap().len(), valid_length);
}

/// `O_DIRECT` writes (`EngineConfig::direct_writes`): segments of 16 KiB, so the active segment
/// spans several 4 KiB blocks and the log still rolls.
fn direct_config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        direct_writes: true,
        ..config()
    }
}

/// A scratch directory on a disk (tmpfs before Linux 6.6 has no `O_DIRECT`): `/var/tmp` when it
/// can, else the system's temporary directory. `None`, after a `SKIP:` line (a failure under
/// `CI=true`), when that file system refuses `O_DIRECT` too.
fn direct_scratch() -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let probe = dir.path().join("probe");
    fs::write(&probe, b"").unwrap();
    let direct = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    fs::remove_file(&probe).unwrap();
    match direct {
        Ok(_) => Some(dir),
        Err(error) => {
            let reason = format!("{} refuses O_DIRECT: {error}", dir.path().display());
            skip(&current_test("a recovery test of O_DIRECT writes"), reason);
            None
        }
    }
}

fn open_direct(dir: &Path, clean: bool, recovery_point: Offset) -> (PartitionLog, RecoveryReport) {
    let options = open_options(clean, recovery_point);
    PartitionLog::open(
        storage_from_env(),
        dir,
        topic_partition(),
        direct_config(),
        options,
    )
    .unwrap()
}

/// How a log is opened after a clean or an unclean shutdown, from `recovery_point`.
fn open_options(clean: bool, recovery_point: Offset) -> LogOpenOptions {
    LogOpenOptions {
        had_clean_shutdown: clean,
        recovery_point,
        log_start_offset: None,
        now: now(),
    }
}

/// Opens the log in `dir` with `preallocate=true` (256 KiB segments), from offset 0.
fn open_preallocated(dir: &Path, clean: bool) -> (PartitionLog, RecoveryReport) {
    let preallocating = LogConfig {
        segment_bytes: 256 * 1024,
        preallocate: true,
        ..config()
    };
    let options = open_options(clean, Offset(0));
    PartitionLog::open(
        storage_from_env(),
        dir,
        topic_partition(),
        preallocating,
        options,
    )
    .unwrap()
}

/// The bytes of `batches` as the log serves them.
fn payload_bytes(batches: &[StoredBatch]) -> u64 {
    batches.iter().map(|batch| batch.bytes.len() as u64).sum()
}

fn log_file_bytes(dir: &Path) -> u64 {
    segment_logs(dir)
        .iter()
        .map(|path| fs::metadata(path).unwrap().len())
        .sum()
}

#[test]
fn direct_writes_serve_every_batch_and_leave_no_padding_after_close() {
    let Some(root) = direct_scratch() else {
        return;
    };
    let dir = partition_dir(root.path());
    let (mut log, _) = open_direct(&dir, false, Offset(0));
    populate(&mut log, 600);
    assert!(log.segment_count() > 3, "the log rolled");
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    let end = log.log_end_offset();
    log.close().unwrap();
    assert_eq!(
        log_file_bytes(&dir),
        payload,
        "the .log files hold the batches, no padding"
    );
    let (mut log, report) = open_direct(&dir, true, end);
    assert_eq!(report, RecoveryReport::default());
    assert_serves(&mut log, &batches);
    assert_time_lookups(&mut log);
    assert_appends_at(&mut log, end.0);
}

/// Every batch from `offset` to the log end, read in fetches of 1 MiB, checked record by record.
/// Returns the offset after the last one.
fn consume(log: &mut PartitionLog, mut offset: u64) -> u64 {
    while offset < log.log_end_offset().0 {
        let mut rest = log.read(Offset(offset), 1024 * 1024).unwrap().records;
        assert!(
            !rest.is_empty(),
            "a fetch at {offset} below the log end is empty"
        );
        while !rest.is_empty() {
            let batch = Batch::decode(&rest, u64::MAX).unwrap();
            assert_eq!(batch.base_offset() as u64, offset, "batches in order");
            check_records(&batch);
            offset = batch.last_offset() as u64 + 1;
            rest = rest.slice(batch.size_bytes() as usize..);
        }
    }
    offset
}

#[test]
fn a_consumer_catching_up_past_the_page_cache_while_the_o_direct_writer_appends_reads_every_record()
{
    // Both options on: large cold reads go through windows read past the page cache (io_uring's
    // `direct_cold_reads`; some of this consumer's reads do) while the active segment is
    // appended to through its O_DIRECT descriptor. That a window read before such an append is
    // not served after it is pinned by `io::uring`'s own test of an O_DIRECT descriptor's write.
    let Some(root) = direct_scratch() else {
        return;
    };
    let test = "recovery::a_consumer_catching_up_past_the_page_cache_while_the_o_direct_writer_appends_reads_every_record";
    if !ring_tests_must_run(test) {
        return;
    }
    let storage = IoBackend::IoUring
        .storage_with_direct_cold_reads(true)
        .unwrap();
    let dir = partition_dir(root.path());
    let options = open_options(false, Offset(0));
    let config = LogConfig {
        segment_bytes: 64 * 1024 * 1024,
        index_interval_bytes: 4096,
        direct_writes: true,
        ..config()
    };
    let (mut log, _) =
        PartitionLog::open(storage, &dir, topic_partition(), config, options).unwrap();
    let append = |log: &mut PartitionLog, batches: usize| {
        for _ in 0..batches {
            let first = log.log_end_offset().0;
            log.append(batch(first, 100), now()).unwrap();
        }
    };
    append(&mut log, 400); // about 2.6 MB
    let mut offset = 0;
    for _ in 0..6 {
        offset = consume(&mut log, offset);
        append(&mut log, 60);
    }
    assert_eq!(consume(&mut log, offset), log.log_end_offset().0);
}

#[test]
fn a_crash_under_direct_writes_cuts_only_the_padding() {
    let Some(root) = direct_scratch() else {
        return;
    };
    let dir = partition_dir(root.path());
    let (mut log, _) = open_direct(&dir, false, Offset(0));
    populate(&mut log, 250);
    log.flush().unwrap();
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    let end = log.log_end_offset();
    drop(log); // a crash: the active segment keeps its zero padding and reserved space
    let active = segment_logs(&dir).pop().unwrap();
    let padded = fs::metadata(&active).unwrap().len();
    assert!(
        padded.is_multiple_of(4096),
        "the active .log ends on a block"
    );
    // The last block's padding, then the blocks reserved ahead of the writes (`fallocate`,
    // which read as zeros).
    let padding = log_file_bytes(&dir) - payload;
    assert!(padding > 0, "{padding} bytes past the batches");
    let tail = fs::read(&active).unwrap();
    let past_batches = &tail[tail.len() - padding as usize..];
    assert!(
        past_batches.iter().all(|byte| *byte == 0),
        "zeros past the batches"
    );
    let (mut log, report) = open_direct(&dir, false, Offset(0));
    assert_eq!(report.bytes_truncated, padding);
    assert_eq!(report.segments_deleted, 0);
    assert_serves(&mut log, &batches);
    assert_appends_at(&mut log, end.0);
}

/// A write the device put past the log end, in the last block's padding or the space reserved
/// ahead (a misdirected write, R14), would be cut with that space when the segment stops being
/// active, leaving its own place a hole that reads as a torn tail: the roll reports it instead.
#[test]
fn data_in_the_reserved_space_past_the_log_end_is_reported_not_cut() {
    let Some(root) = direct_scratch() else {
        return;
    };
    let dir = partition_dir(root.path());
    let (mut log, _) = open_direct(&dir, false, Offset(0));
    populate(&mut log, 40);
    log.flush().unwrap();
    let active = segment_logs(&dir).pop().unwrap();
    let file_bytes = fs::metadata(&active).unwrap().len();
    let payload = payload_bytes(&served_batches(&mut log));
    assert!(
        file_bytes >= payload + 8192,
        "space reserved past the log end"
    );
    // A batch's bytes landed 4 KiB past the log end's block instead of at their own place.
    let landed_at = (payload / 4096 + 1) * 4096;
    let file = fs::OpenOptions::new().write(true).open(&active).unwrap();
    file.write_all_at(&[0xab; 512], landed_at).unwrap();
    file.sync_all().unwrap();
    let error = log.roll(now()).unwrap_err();
    assert!(
        matches!(&error, StorageError::Corrupt { position, .. } if *position == landed_at),
        "{error:?}"
    );
    assert_eq!(
        fs::metadata(&active).unwrap().len(),
        file_bytes,
        "nothing was cut"
    );
}

/// R14 on `O_DIRECT`: the first append after a sync reads the last block written back. Had that
/// block's write landed elsewhere, the device would hold older bytes there, and the append would
/// rewrite the block over the only evidence; it is refused instead, nothing written.
#[test]
fn an_append_after_a_sync_refuses_a_last_block_that_does_not_read_back_as_sent() {
    let Some(root) = direct_scratch() else {
        return;
    };
    let dir = partition_dir(root.path());
    let (mut log, _) = open_direct(&dir, false, Offset(0));
    populate(&mut log, 3);
    log.flush().unwrap();
    let payload = payload_bytes(&served_batches(&mut log));
    let active = segment_logs(&dir).pop().unwrap();
    // The last batch's final bytes, as if the write that carried them had landed elsewhere.
    let file = fs::OpenOptions::new().write(true).open(&active).unwrap();
    file.write_all_at(&[0xab; 16], payload - 16).unwrap();
    let end = log.log_end_offset();
    let error = log.append(batch(end.0, 1), now()).unwrap_err();
    assert!(
        matches!(&error, AppendError::Storage(StorageError::Corrupt { position, .. })
            if (payload - 16..payload).contains(position)),
        "{error:?}"
    );
    assert_eq!(log.log_end_offset(), end, "nothing appended");
}

/// R14 on a preallocated log written through the page cache: an append into the reserved space
/// first checks it holds zeros, so a write that landed there is reported, not overwritten.
#[test]
fn an_append_into_reserved_space_that_holds_data_is_refused() {
    let Some(root) = direct_scratch() else {
        return;
    };
    let dir = partition_dir(root.path());
    let (mut log, _) = open_preallocated(&dir, false);
    populate(&mut log, 3);
    let payload = payload_bytes(&served_batches(&mut log));
    let active = segment_logs(&dir).pop().unwrap();
    assert!(
        fs::metadata(&active).unwrap().len() > payload + 512,
        "space reserved"
    );
    let file = fs::OpenOptions::new().write(true).open(&active).unwrap();
    file.write_all_at(&[0xab; 512], payload + 8).unwrap();
    let end = log.log_end_offset();
    let error = log.append(batch(end.0, 1), now()).unwrap_err();
    assert!(
        matches!(&error, AppendError::Storage(StorageError::Corrupt { position, .. })
            if *position == payload + 8),
        "{error:?}"
    );
    assert_eq!(log.log_end_offset(), end, "nothing appended");
}

#[test]
fn truncation_under_direct_writes_keeps_the_bytes_below_the_cut() {
    let Some(root) = direct_scratch() else {
        return;
    };
    let dir = partition_dir(root.path());
    let (mut log, _) = open_direct(&dir, false, Offset(0));
    populate(&mut log, 120);
    let batches = served_batches(&mut log);
    // Cut inside the active segment, at a batch whose start is not on a block boundary.
    let active_base = log.segments().last().unwrap().base_offset;
    let keep = batches
        .iter()
        .position(|batch| batch.base > active_base.0 + 5)
        .unwrap();
    log.truncate_to(Offset(batches[keep].base)).unwrap();
    populate(&mut log, 60);
    let after = served_batches(&mut log);
    assert_eq!(after[..keep], batches[..keep]);
    let end = log.log_end_offset();
    log.close().unwrap();
    let (mut log, report) = open_direct(&dir, true, end);
    assert_eq!(report, RecoveryReport::default());
    assert_serves(&mut log, &after);
}

#[test]
fn preallocated_segments_hold_only_their_batches_after_close_and_after_a_crash() {
    let Some(root) = direct_scratch() else {
        return;
    };
    let dir = partition_dir(root.path());
    let open = |clean: bool| open_preallocated(&dir, clean);
    let (mut log, _) = open(false);
    populate(&mut log, 200);
    let active = segment_logs(&dir).pop().unwrap();
    let reserved = fs::metadata(&active).unwrap().len();
    assert!(
        reserved >= 64 * 1024,
        "the active .log is preallocated: {reserved} bytes"
    );
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    assert!(payload < reserved);
    log.flush().unwrap();
    drop(log); // a crash: the reserved zeros stay
    let (mut log, report) = open(false);
    assert_eq!(report.bytes_truncated, reserved - payload);
    assert_serves(&mut log, &batches);
    populate(&mut log, 100);
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    log.close().unwrap();
    assert_eq!(log_file_bytes(&dir), payload, "close cut the reservation");
    let (mut log, report) = open(true);
    assert_eq!(report, RecoveryReport::default());
    assert_serves(&mut log, &batches);
}

/// Appends `batches` batches, syncing after each (a lone durable writer's pattern).
fn populate_synced(log: &mut PartitionLog, batches: usize) {
    for _ in 0..batches {
        populate(log, 1);
        log.flush().unwrap();
    }
}

#[test]
fn a_log_synced_in_small_steps_prewrites_ahead_and_holds_only_its_batches_after_a_crash_and_close()
{
    let root = scratch();
    let dir = partition_dir(root.path());
    assert!(LogConfig::default().prewrite_synced, "on by default");
    let open = |clean: bool| try_open_plain(&dir, clean).unwrap();
    let (mut log, _) = open(false);
    populate_synced(&mut log, 50);
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    let active = segment_logs(&dir).pop().unwrap();
    let length = fs::metadata(&active).unwrap().len();
    assert!(
        length > payload && length >= 128 * 1024,
        "prewritten ahead of the {payload} bytes of batches: the file holds {length}"
    );
    let tail = fs::read(&active).unwrap().split_off(payload as usize);
    let stamps = tail
        .windows(8)
        .filter(|window| window == b"SGLGPRE1")
        .count();
    assert!(
        stamps >= 100,
        "stamped zeros (FORMAT.md §7.5): {stamps} stamps"
    );
    drop(log); // a crash: the prewritten space stays
    let (mut log, report) = open(false);
    assert_eq!(report.bytes_truncated, length - payload);
    assert_serves(&mut log, &batches);
    populate_synced(&mut log, 20);
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    assert!(
        log_file_bytes(&dir) > payload,
        "prewriting again after reopening"
    );
    log.close().unwrap();
    assert_eq!(
        log_file_bytes(&dir),
        payload,
        "close cut the prewritten space"
    );
    let (mut log, report) = open(true);
    assert_eq!(report, RecoveryReport::default());
    assert_serves(&mut log, &batches);
}

#[test]
fn a_log_prewrites_nothing_unsynced_with_large_syncs_or_when_told_not_to() {
    let open = |dir: &Path, config: LogConfig| {
        let options = LogOpenOptions {
            had_clean_shutdown: false,
            recovery_point: Offset(0),
            log_start_offset: None,
            now: now(),
        };
        let opened =
            PartitionLog::open(storage_from_env(), dir, topic_partition(), config, options);
        opened.unwrap().0
    };
    let large = LogConfig {
        segment_bytes: 64 * 1024 * 1024,
        ..config()
    };
    type Case = (&'static str, LogConfig, fn(&mut PartitionLog));
    let cases: [Case; 3] = [
        ("never synced", large.clone(), |log| populate(log, 200)),
        ("syncs of 200 KiB", large.clone(), |log| {
            for _ in 0..4 {
                append_bytes(log, 200 * 1024);
                log.flush().unwrap();
            }
        }),
        (
            "prewrite_synced off",
            LogConfig {
                prewrite_synced: false,
                ..large
            },
            |log| populate_synced(log, 50),
        ),
    ];
    for (case, config, fill) in cases {
        let root = scratch();
        let dir = partition_dir(root.path());
        let mut log = open(&dir, config);
        fill(&mut log);
        let payload = payload_bytes(&served_batches(&mut log));
        assert_eq!(
            log_file_bytes(&dir),
            payload,
            "{case}: the file holds its batches"
        );
    }
}

/// Appends batches of 200 records (about 10 KiB) until `bytes` more are in the log.
fn append_bytes(log: &mut PartitionLog, bytes: u64) {
    let target = log.size_bytes() + bytes;
    while log.size_bytes() < target {
        let first = log.log_end_offset().0;
        log.append(batch(first, 200), now()).unwrap();
    }
}

/// A log synced in small steps, crashed: its active `.log` and the bytes of its batches.
fn crashed_prewriting_log(dir: &Path) -> (PathBuf, u64) {
    let mut log = open_plain(dir, false);
    populate_synced(&mut log, 50);
    let payload = payload_bytes(&served_batches(&mut log));
    drop(log);
    (segment_logs(dir).pop().unwrap(), payload)
}

/// A log synced in small steps, so prewritten past its batches; its batches, their bytes in
/// all, its active `.log`, and that file opened for writing (a test's misdirected write).
fn prewriting_log(dir: &Path) -> (PartitionLog, Vec<StoredBatch>, u64, PathBuf, fs::File) {
    let mut log = open_plain(dir, false);
    populate_synced(&mut log, 50);
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    let active = segment_logs(dir).pop().unwrap();
    let file = fs::OpenOptions::new().write(true).open(&active).unwrap();
    (log, batches, payload, active, file)
}

fn open_plain(dir: &Path, clean: bool) -> PartitionLog {
    try_open_plain(dir, clean).unwrap().0
}

/// The log in `dir` (1 MiB segments, recovery point 0), after a clean or an unclean shutdown.
fn try_open_plain(dir: &Path, clean: bool) -> Result<(PartitionLog, RecoveryReport), String> {
    try_open_on(storage_from_env(), dir, clean)
}

/// [`try_open_plain`] through `storage`.
fn try_open_on(
    storage: std::sync::Arc<dyn seglog::io::Storage>,
    dir: &Path,
    clean: bool,
) -> Result<(PartitionLog, RecoveryReport), String> {
    let options = open_options(clean, Offset(0));
    let config = LogConfig {
        segment_bytes: 1024 * 1024,
        ..config()
    };
    PartitionLog::open(storage, dir, topic_partition(), config, options)
        .map_err(|error| error.to_string())
}

#[test]
fn a_prewrite_that_landed_over_synced_batches_is_reported_not_cut_as_a_torn_tail() {
    let root = scratch();
    let dir = partition_dir(root.path());
    let (active, payload) = crashed_prewriting_log(&dir);
    // A misdirected prewrite: stamped zeros meant for past the batches land on all of them.
    let mut bytes = fs::read(&active).unwrap();
    let prewritten = bytes[payload as usize..].to_vec();
    bytes[..payload as usize].copy_from_slice(&prewritten[..payload as usize]);
    fs::write(&active, &bytes).unwrap();
    let error = try_open_plain(&dir, false).unwrap_err();
    assert!(
        error.contains("prewritten space stamped for position"),
        "reported, not cut: {error}"
    );
    assert_eq!(fs::read(&active).unwrap(), bytes, "nothing was cut");
}

#[test]
fn data_in_the_prewritten_space_is_reported_when_the_segment_stops_being_active() {
    let root = scratch();
    let dir = partition_dir(root.path());
    let (log, batches, payload, active, file) = prewriting_log(&dir);
    // A misdirected write of the first batch lands past the log end, in the prewritten space.
    file.write_all_at(&batches[0].bytes, payload + 4096)
        .unwrap();
    let error = log.close().unwrap_err().to_string();
    assert!(
        error.contains("where only prewritten space belongs"),
        "reported, not cut: {error}"
    );
    assert!(
        fs::metadata(&active).unwrap().len() > payload + 4096,
        "nothing was cut"
    );
}

/// F12 (`sim_ops`): a misdirected write lands at the end of the prewritten space and past it,
/// growing the file; its batch, acknowledged by the next sync, is then only there. Cutting the
/// space when the segment stops being active would leave prewritten space where the batch
/// belongs, which reads as a torn tail after a crash: the whole file past the log end is checked
/// before the cut, not only the space prewritten.
#[test]
fn data_written_past_the_prewritten_space_is_reported_when_the_segment_stops_being_active() {
    let root = scratch();
    let dir = partition_dir(root.path());
    let (log, batches, _, active, file) = prewriting_log(&dir);
    let length = fs::metadata(&active).unwrap().len();
    file.write_all_at(&batches[0].bytes, length).unwrap();
    let error = log.close().unwrap_err().to_string();
    assert!(
        error.contains("where only prewritten space belongs"),
        "reported, not cut: {error}"
    );
    assert_eq!(
        fs::metadata(&active).unwrap().len(),
        length + batches[0].bytes.len() as u64,
        "nothing was cut"
    );
}

/// F8 (`sim_ops`): a misdirected write lands just past the log end, in the prewritten space, and
/// the next append is written over part of it: what is left of the landed batch no longer
/// passes its CRC, and after a crash its records would read as a torn tail. The append checks
/// the space it overwrites first: reported, the log failed, nothing written there.
#[test]
fn an_append_over_data_in_the_prewritten_space_is_refused_and_reported() {
    let root = scratch();
    let dir = partition_dir(root.path());
    let (mut log, batches, payload, active, file) = prewriting_log(&dir);
    file.write_all_at(&batches[0].bytes, payload + 100).unwrap();
    let landed = fs::read(&active).unwrap();
    let error = log.append(batch(log.log_end_offset().0, 10), now());
    let error = error.unwrap_err().to_string();
    assert!(
        error.contains("where only prewritten space belongs"),
        "reported: {error}"
    );
    assert_eq!(
        fs::read(&active).unwrap(),
        landed,
        "nothing written over it"
    );
    assert!(log.flush().is_err(), "the log failed");
}

/// F16 (`sim_ops`): the same, with the next append overwriting only the first bytes of the
/// landed batch, zeros (the top of its base offset), so the space it overwrote read as
/// prewritten. The check reads far enough past the append's end to see the bytes after them
/// whole: reported.
#[test]
fn an_append_over_the_zero_bytes_of_data_in_the_prewritten_space_is_refused_and_reported() {
    let root = scratch();
    let dir = partition_dir(root.path());
    let (mut log, batches, payload, _, file) = prewriting_log(&dir);
    let append = batch(log.log_end_offset().0, 10);
    let landed = batches[0].bytes.clone();
    assert_eq!(
        &landed[..8],
        &[0u8; 8],
        "a base offset of 0: eight zero bytes"
    );
    file.write_all_at(&landed, payload + append.len() as u64 - 3)
        .unwrap();
    let error = log.append(append, now()).unwrap_err().to_string();
    assert!(
        error.contains("where only prewritten space belongs"),
        "reported: {error}"
    );
    assert!(log.flush().is_err(), "the log failed");
}

/// A one-record batch of exactly `size_bytes` (its value padded to fit).
fn batch_of_size(size_bytes: usize) -> Bytes {
    (0..size_bytes)
        .map(|value_bytes| {
            let value = vec![7u8; value_bytes];
            let mut builder = BatchBuilder::new(0);
            builder.push(&NewRecord {
                timestamp_ms: T0,
                key: None,
                value: Some(&value),
                headers: &[],
            });
            builder.build().unwrap()
        })
        .find(|batch| batch.len() == size_bytes)
        .unwrap()
}

#[test]
fn an_append_that_ends_inside_a_stamp_leaves_the_segment_to_seal_and_reopen() {
    let root = scratch();
    let dir = partition_dir(root.path());
    let mut log = open_plain(&dir, false);
    log.append(batch_of_size(300), now()).unwrap();
    log.flush().unwrap(); // small syncs: the next append prewrites past its end
    let prewrite_start = log.size_bytes() + 400;
    log.append(batch_of_size(400), now()).unwrap();
    log.flush().unwrap();
    // Stamps lie every 512 bytes from the prewrite's start: end 7 bytes into the second one.
    let stamp_start = prewrite_start + 512;
    log.append(
        batch_of_size((stamp_start + 7 - log.size_bytes()) as usize),
        now(),
    )
    .unwrap();
    assert_eq!(log.size_bytes(), stamp_start + 7);
    log.roll(now()).unwrap(); // seals: checks the space past the end, then cuts it
    log.close().unwrap();
    let mut log = open_plain(&dir, true);
    assert_eq!(log.log_end_offset(), Offset(3));
    assert_eq!(log.size_bytes(), stamp_start + 7);
    for offset in 0..3 {
        let fetched = log.read(Offset(offset), 1).unwrap().records;
        let batch = Batch::decode(&fetched, u64::MAX).unwrap();
        assert_eq!(batch.base_offset(), offset as i64);
    }
}

/// Once armed with `(position, bytes)`, puts `bytes` at `position` of the `.log` next written,
/// beside that write: a prewrite that also landed where the append after it goes.
#[derive(Debug, Default)]
struct PrewriteLandsAlsoAt {
    armed: std::sync::Mutex<Option<(u64, Vec<u8>)>>,
}

impl seglog::io::hooked::StorageHooks for PrewriteLandsAlsoAt {
    fn before(&self, op: seglog::io::hooked::StorageOp, path: &Path) -> std::io::Result<()> {
        let log = path.extension().is_some_and(|ext| ext == "log");
        if log
            && matches!(op, seglog::io::hooked::StorageOp::Write)
            && let Some((position, bytes)) = self.armed.lock().unwrap().take()
        {
            let file = fs::OpenOptions::new().write(true).open(path)?;
            file.write_all_at(&bytes, position)?;
        }
        Ok(())
    }
}

/// F17 (`sim_ops`): an append prewrites the space past its end first, then writes its batches,
/// and the prewrite landed in the wrong place, over where the batches then went; the check of the
/// space an append overwrites ran before the prewrite and saw nothing. It runs after it now: the
/// stamp away from its position is reported and nothing is written.
#[test]
fn an_append_whose_prewrite_landed_where_its_batches_go_is_refused() {
    use seglog::format::prewrite::prewrite_bytes;
    let root = scratch();
    let dir = partition_dir(root.path());
    let hooks = std::sync::Arc::new(PrewriteLandsAlsoAt::default());
    let storage = std::sync::Arc::new(seglog::io::hooked::HookedStorage::new(
        storage_from_env(),
        hooks.clone(),
    ));
    let (mut log, _) = try_open_on(storage, &dir, false).unwrap();
    populate_synced(&mut log, 1); // small syncs: the next append prewrites first
    let end = log_file_bytes(&dir);
    *hooks.armed.lock().unwrap() = Some((end, prewrite_bytes(end + 100_000, 32)));
    let error = log
        .append(batch(log.log_end_offset().0, 10), now())
        .unwrap_err()
        .to_string();
    assert!(hooks.armed.lock().unwrap().is_none(), "the prewrite ran");
    assert!(
        error.contains("a write landed in the wrong place"),
        "reported: {error}"
    );
    assert!(log.flush().is_err(), "the log failed");
}

/// Fails the next write to a `.log` with `ENOSPC`, once armed.
#[derive(Debug, Default)]
struct FullDiskOnce {
    armed: std::sync::atomic::AtomicBool,
}

impl seglog::io::hooked::StorageHooks for FullDiskOnce {
    fn before(&self, op: seglog::io::hooked::StorageOp, path: &Path) -> std::io::Result<()> {
        let log = path.extension().is_some_and(|ext| ext == "log");
        let write = matches!(op, seglog::io::hooked::StorageOp::Write);
        if log && write && self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }
}

#[test]
fn a_prewrite_refused_for_a_full_disk_leaves_the_append_to_go_ahead_without_it() {
    let root = scratch();
    let dir = partition_dir(root.path());
    let hooks = std::sync::Arc::new(FullDiskOnce::default());
    let storage = std::sync::Arc::new(seglog::io::hooked::HookedStorage::new(
        storage_from_env(),
        hooks.clone(),
    ));
    let (mut log, _) = try_open_on(storage, &dir, false).unwrap();
    populate_synced(&mut log, 1); // small syncs: the next append prewrites first
    hooks.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    populate_synced(&mut log, 1);
    assert!(
        !hooks.armed.load(std::sync::atomic::Ordering::SeqCst),
        "the prewrite was refused"
    );
    let batches = served_batches(&mut log);
    assert_eq!(batches.len(), 2, "the append went ahead");
    assert_eq!(
        log_file_bytes(&dir),
        payload_bytes(&batches),
        "nothing prewritten"
    );
    populate_synced(&mut log, 3); // and prewriting resumes
    assert!(log_file_bytes(&dir) > payload_bytes(&served_batches(&mut log)));
    let batches = served_batches(&mut log);
    log.close().unwrap();
    assert_serves(&mut open_plain(&dir, true), &batches);
}
