//! The recovery tests' logs (`tests/recovery_*.rs`): a partition `events-0` over the backend
//! `SEGLOG_IO_BACKEND` names, with `segment.bytes` = 1024 and `index.interval.bytes` = 64 so
//! that every log has several segments and every index has entries; records whose key, value
//! and timestamp are functions of their offset; a log left as a crash leaves it and one closed
//! cleanly, each copied for every case; and the checks that a reopened log serves exactly what
//! it should, read from the partition log or through the inline engine.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, FetchOptions};
use seglog::error::{OpenError, ReadError};
use seglog::format::Batch;
use seglog::io::{Storage, storage_from_env};
use seglog::log::{LogOpenOptions, LogWriteMode, PartitionLog, RecoveryReport};
use seglog::types::{Offset, TimestampMs, TopicName, TopicPartition};

pub use super::batches::T0;
use super::batches::{batch_at, record};
use super::dirs::{copy_dir, flip_byte, names_ending, scratch};
use super::engines::inline_config;
use super::logs::{self, open_options};

pub const TOPIC: &str = "events";
/// The data directory's clean-shutdown marker (Kafka's name), which the engine writes at a clean
/// close and takes at open.
pub const CLEAN_SHUTDOWN_MARKER: &str = ".kafka_cleanshutdown";

pub fn config() -> LogConfig {
    LogConfig::default()
        .with_segment_bytes(1024)
        .with_index_interval_bytes(64)
        .with_segment_index_bytes(4096)
}

pub fn topic() -> TopicName {
    TopicName::parse(TOPIC).unwrap()
}

pub fn topic_partition() -> TopicPartition {
    TopicPartition {
        topic: topic(),
        partition: 0,
    }
}

pub fn partition_dir(root: &Path) -> PathBuf {
    root.join(format!("{TOPIC}-0"))
}

/// The inline engine (`support::engines::inline_config`) on the data directory at `root`, on the
/// backend `SEGLOG_IO_BACKEND` names; the partition directories it adopts are configured as
/// [`config`].
pub fn open_engine(root: &Path) -> Engine {
    Engine::open(root, inline_config(config())).unwrap()
}

/// The wall clock the tests pretend it is: a minute after the first record, so `segment.ms`
/// never rolls a segment.
pub fn now() -> TimestampMs {
    TimestampMs(T0 + 60_000)
}

/// The timestamp of the record at `offset`: rising by 10 ms, every fifth record 25 ms late, so
/// timestamps are not in offset order.
pub fn timestamp(offset: u64) -> i64 {
    T0 + offset as i64 * 10 - if offset % 5 == 4 { 25 } else { 0 }
}

pub fn key(offset: u64) -> String {
    format!("key-{offset}")
}

pub fn value(offset: u64) -> Vec<u8> {
    let length = 8 + (offset * 13 % 41) as usize;
    (0..length)
        .map(|i| (offset as usize * 31 + i) as u8)
        .collect()
}

/// A batch of the records at offsets `first..first + count` (key, value and timestamp are
/// functions of the offset), with base offset `first`.
pub fn batch(first: u64, count: u64) -> Bytes {
    let keys: Vec<String> = (first..first + count).map(key).collect();
    let values: Vec<Vec<u8>> = (first..first + count).map(value).collect();
    let records: Vec<_> = (first..first + count)
        .zip(keys.iter().zip(&values))
        .map(|(offset, (key, value))| record(timestamp(offset), Some(key.as_bytes()), Some(value)))
        .collect();
    batch_at(first as i64, &records)
}

/// Appends `batches` batches of 1 to 4 records.
pub fn populate(log: &mut PartitionLog, batches: usize) {
    for n in 0..batches {
        let first = log.log_end_offset().0;
        let count = 1 + (n as u64 * 7 % 4);
        let info = log.append(batch(first, count), now()).unwrap();
        assert_eq!(info.first_offset, Offset(first));
    }
}

/// One batch as the log serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBatch {
    pub base: u64,
    pub last: u64,
    pub bytes: Bytes,
}

/// Every batch the log serves, in order, read one at a time (`max_bytes` = 1 still returns one
/// whole batch). Also checks each batch's records against the offsets they were written at.
pub fn served_batches(log: &mut PartitionLog) -> Vec<StoredBatch> {
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
pub fn check_records(batch: &Batch) {
    let base_timestamp = batch.header().base_timestamp;
    for record in batch.records().unwrap() {
        let offset = (batch.base_offset() + i64::from(record.offset_delta)) as u64;
        assert_eq!(record.key.as_deref(), Some(key(offset).as_bytes()));
        assert_eq!(record.value.as_deref(), Some(&value(offset)[..]));
        assert_eq!(base_timestamp + record.timestamp_delta, timestamp(offset));
    }
}

/// Checks that the log serves exactly `expected` and ends after its last batch.
pub fn assert_serves(log: &mut PartitionLog, expected: &[StoredBatch]) {
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
pub fn assert_time_lookups(log: &mut PartitionLog) {
    let (start, end) = (log.log_start_offset().0, log.log_end_offset().0);
    assert_time_lookups_by(start..end, |target| {
        let found = log.read_by_timestamp(target).unwrap();
        found.map(|found| (found.timestamp.0, found.offset.0))
    });
}

/// [`assert_time_lookups`] through the engine, of its partition 0 of `events`.
pub fn assert_engine_time_lookups(engine: &Engine) {
    let description = engine.describe_partition(TOPIC, 0).unwrap();
    let offsets = description.log_start_offset.0..description.log_end_offset.0;
    assert_time_lookups_by(offsets, |target| {
        let found = engine.fetch_by_timestamp(&topic(), 0, target).wait();
        let found = found.unwrap();
        found.map(|found| (found.timestamp.0, found.offset.0))
    });
}

/// Asks `lookup` for timestamps from before the first record's to after the last one's, and
/// checks each answer (timestamp, offset) against the records at `offsets`.
fn assert_time_lookups_by(
    offsets: std::ops::Range<u64>,
    mut lookup: impl FnMut(TimestampMs) -> Option<(i64, u64)>,
) {
    let max = offsets.clone().map(timestamp).max().unwrap_or(T0);
    let mut target = T0 - 30;
    while target <= max + 30 {
        let expected = offsets
            .clone()
            .find(|offset| timestamp(*offset) >= target)
            .map(|offset| (timestamp(offset), offset));
        let found = lookup(TimestampMs(target));
        assert_eq!(found, expected, "lookup by timestamp {target}");
        target += 3;
    }
}

/// Appends one batch of two records and checks it lands at `expected_offset` and is served.
pub fn assert_appends_at(log: &mut PartitionLog, expected_offset: u64) {
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
pub fn segment_logs(dir: &Path) -> Vec<PathBuf> {
    let names = names_ending(dir, ".log");
    names.iter().map(|name| dir.join(name)).collect()
}

pub fn base_of(log_path: &Path) -> u64 {
    log_path
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

pub fn truncate_file(path: &Path, length: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(length)
        .unwrap();
}

pub fn append_to_file(path: &Path, bytes: &[u8]) {
    let mut content = fs::read(path).unwrap();
    content.extend_from_slice(bytes);
    fs::write(path, content).unwrap();
}

/// A small deterministic generator for garbage bytes.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn bytes(&mut self, length: usize) -> Vec<u8> {
        (0..length).map(|_| self.next() as u8).collect()
    }
}

/// A new partition log in a scratch directory (`<root>/events-0`), holding `batches` batches.
fn populated(batches: usize) -> (tempfile::TempDir, PartitionLog) {
    let (root, dir) = scratch_partition();
    let (mut log, _) = open_partition_log(&dir, config(), false, 0);
    populate(&mut log, batches);
    (root, log)
}

/// A log written and left as a crash leaves it: several segments, the active one holding at
/// least three batches, then the `PartitionLog` dropped without `close`. Its recovery point at
/// that moment is what a data directory's checkpoint would hold, and where recovery starts.
pub struct CrashedLog {
    pub root: tempfile::TempDir,
    pub batches: Vec<StoredBatch>,
    pub active_log: PathBuf,
    /// The log's recovery point when it was dropped.
    pub recovery_point: u64,
}

impl CrashedLog {
    pub fn new() -> CrashedLog {
        let (root, mut log) = populated(30);
        // End with batches of three records, at least three of them in the active segment.
        loop {
            let first = log.log_end_offset().0;
            log.append(batch(first, 3), now()).unwrap();
            let active_base = log.segments().last().unwrap().base_offset.0;
            let in_active = served_batches(&mut log)
                .iter()
                .filter(|b| b.base >= active_base)
                .count();
            if in_active >= 3 {
                break;
            }
        }
        assert!(log.segment_count() >= 4, "several segments");
        let batches = served_batches(&mut log);
        let recovery_point = log.recovery_point().0;
        drop(log);
        let active_log = segment_logs(&partition_dir(root.path())).pop().unwrap();
        let crashed = CrashedLog {
            root,
            batches,
            active_log,
            recovery_point,
        };
        // The file ends with the last batch, as served, above the recovery point.
        let content = fs::read(&crashed.active_log).unwrap();
        let last = crashed.last();
        assert!(content.ends_with(&last.bytes));
        assert!(recovery_point <= last.base, "the last batch is not synced");
        crashed
    }

    /// Opens the partition log of a copy in `root` as after the crash: no clean shutdown,
    /// recovering from the recovery point the log had.
    pub fn open(&self, root: &Path) -> Result<(PartitionLog, RecoveryReport), OpenError> {
        let dir = partition_dir(root);
        open_partition(
            &dir,
            config(),
            false,
            self.recovery_point,
            storage_from_env(),
        )
    }

    /// [`CrashedLog::open`], checking that the log serves every batch and answers lookups by
    /// timestamp.
    pub fn reopen_serving(&self, root: &Path) -> (PartitionLog, RecoveryReport) {
        let dir = partition_dir(root);
        reopen_serving(&dir, false, self.recovery_point, &self.batches)
    }

    pub fn last(&self) -> &StoredBatch {
        self.batches.last().unwrap()
    }

    /// Position of the last batch in the active `.log`, and the file's length.
    pub fn last_batch_range(&self) -> (u64, u64) {
        let length = fs::metadata(&self.active_log).unwrap().len();
        (length - self.last().bytes.len() as u64, length)
    }

    /// A copy of the crashed directory whose last batch has its byte at `position` XORed with
    /// `mask`, and the path of its active `.log`.
    pub fn copy_flipping(&self, position: u64, mask: u8) -> (tempfile::TempDir, PathBuf) {
        let (work, active_log) = self.copy();
        flip_byte(&active_log, self.last_batch_range().0 + position, mask);
        (work, active_log)
    }

    /// A copy of the crashed directory, and the path of its active `.log`.
    pub fn copy(&self) -> (tempfile::TempDir, PathBuf) {
        let work = scratch();
        copy_dir(self.root.path(), work.path());
        let active_log = partition_dir(work.path()).join(self.active_log.file_name().unwrap());
        (work, active_log)
    }
}

/// Reopens a damaged copy uncleanly and checks the last batch, and only it, is gone.
pub fn assert_last_batch_dropped(
    crashed: &CrashedLog,
    root: &Path,
    damaged_bytes: u64,
    what: &str,
) {
    let (mut log, report) = crashed.open(root).unwrap();
    let kept = &crashed.batches[..crashed.batches.len() - 1];
    assert_eq!(
        log.log_end_offset(),
        Offset(crashed.last().base),
        "log end after {what}"
    );
    assert_serves(&mut log, kept);
    assert_appends_at(&mut log, crashed.last().base);
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

/// The partition log holding the `.log` at `log_path`, opened as after a crash (no clean
/// shutdown, recovering from `recovery_point`), refuses to open (`Corrupt`), and the `.log` is
/// left as it was.
pub fn assert_refused_untouched(log_path: &Path, recovery_point: u64, what: &str) {
    let before = fs::read(log_path).unwrap();
    let dir = log_path.parent().unwrap();
    let opened = open_partition(dir, config(), false, recovery_point, storage_from_env());
    let error = opened.map(|_| ()).unwrap_err();
    assert!(format!("{error:?}").contains("Corrupt"), "{what}: {error}");
    assert_eq!(
        fs::read(log_path).unwrap(),
        before,
        "{what}: the .log changed"
    );
}

/// A log closed cleanly: several sealed segments with index entries, and what it served.
pub struct ClosedLog {
    pub root: tempfile::TempDir,
    pub batches: Vec<StoredBatch>,
    /// The recovery point the close left: the log end, which a data directory's checkpoint
    /// would hold after a clean shutdown.
    pub recovery_point: u64,
    /// Base offset of a sealed segment with at least two entries in each index.
    pub sealed_base: u64,
    pub sealed_entries: (usize, usize),
    pub segment_count: usize,
}

impl ClosedLog {
    pub fn new() -> ClosedLog {
        let (root, mut log) = populated(40);
        // The active segment has entries in both indexes too.
        while log
            .segments()
            .last()
            .is_some_and(|s| s.offset_index_entries < 2 || s.time_index_entries < 2)
        {
            populate(&mut log, 1);
        }
        let batches = served_batches(&mut log);
        assert_time_lookups(&mut log);
        let segments: Vec<_> = log.segments().collect();
        let sealed = segments[..segments.len() - 1]
            .iter()
            .skip(1)
            .find(|s| s.offset_index_entries >= 2 && s.time_index_entries >= 2)
            .unwrap()
            .clone();
        let segment_count = segments.len();
        assert!(segment_count >= 4);
        let recovery_point = log.log_end_offset().0;
        log.close().unwrap();
        ClosedLog {
            root,
            batches,
            recovery_point,
            sealed_base: sealed.base_offset.0,
            sealed_entries: (sealed.offset_index_entries, sealed.time_index_entries),
            segment_count,
        }
    }

    pub fn dir(&self) -> PathBuf {
        partition_dir(self.root.path())
    }

    pub fn copy(&self) -> (tempfile::TempDir, PathBuf) {
        let work = scratch();
        copy_dir(self.root.path(), work.path());
        let dir = partition_dir(work.path());
        (work, dir)
    }

    /// A copy, its partition directory, and the `.log` files there.
    pub fn copy_listing(&self) -> (tempfile::TempDir, PathBuf, Vec<PathBuf>) {
        let (work, dir) = self.copy();
        let logs = segment_logs(&dir);
        (work, dir, logs)
    }

    /// Reopens the partition log of a copy in `dir`, after a clean shutdown or not, from the
    /// recovery point the close left, and checks that it serves every batch and answers lookups
    /// by timestamp.
    pub fn reopen_serving(&self, dir: &Path, clean: bool) -> (PartitionLog, RecoveryReport) {
        reopen_serving(dir, clean, self.recovery_point, &self.batches)
    }

    /// The batches with base offsets in `from..to`.
    pub fn batches_in(&self, from: u64, to: u64) -> Vec<&StoredBatch> {
        let batches = self.batches.iter();
        batches.filter(|b| b.base >= from && b.base < to).collect()
    }

    /// The offset after the last batch.
    pub fn end(&self) -> u64 {
        self.batches.last().unwrap().last + 1
    }
}

pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// The name and bytes of every file in `dir`.
pub fn file_contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let names = file_names(dir).into_iter();
    names
        .map(|name| {
            let bytes = fs::read(dir.join(&name)).unwrap();
            (name, bytes)
        })
        .collect()
}

/// Opens the partition log in `dir` (after a clean shutdown or not, recovering from
/// `recovery_point`) and checks that it serves exactly `batches` and answers lookups by
/// timestamp; returns it with what its recovery reported.
pub fn reopen_serving(
    dir: &Path,
    clean: bool,
    recovery_point: u64,
    batches: &[StoredBatch],
) -> (PartitionLog, RecoveryReport) {
    let (mut log, report) = open_partition_log(dir, config(), clean, recovery_point);
    assert_serves(&mut log, batches);
    assert_time_lookups(&mut log);
    (log, report)
}

/// One batch partition 0 of `events` serves through `engine` from `offset` (`max_bytes` = 1
/// still returns one whole batch), if there is one: the engine checks its CRC; its records are
/// checked against the offsets they were written at.
pub fn engine_batch_at(engine: &Engine, offset: u64) -> Result<Option<StoredBatch>, ReadError> {
    let one_batch = FetchOptions {
        max_bytes: 1,
        ..FetchOptions::default()
    };
    let fetched = engine
        .fetch(&topic(), 0, Offset(offset), one_batch)
        .wait()?;
    if fetched.records.is_empty() {
        return Ok(None);
    }
    let batch = Batch::decode(&fetched.records, u64::MAX).unwrap();
    let size = batch.size_bytes() as usize;
    assert_eq!(size, fetched.records.len(), "one whole batch");
    assert!(batch.base_offset() as u64 <= offset && offset <= batch.last_offset() as u64);
    check_records(&batch);
    Ok(Some(StoredBatch {
        base: batch.base_offset() as u64,
        last: batch.last_offset() as u64,
        bytes: fetched.records,
    }))
}

/// Every batch partition 0 of `events` serves through `engine`, from its log start, one at a
/// time ([`engine_batch_at`]).
pub fn engine_batches(engine: &Engine) -> Result<Vec<StoredBatch>, ReadError> {
    let description = engine.describe_partition(TOPIC, 0).unwrap();
    let mut offset = description.log_start_offset.0;
    let mut batches = Vec::new();
    while let Some(batch) = engine_batch_at(engine, offset)? {
        offset = batch.last + 1;
        batches.push(batch);
    }
    Ok(batches)
}

/// Checks that the engine's partition serves exactly `expected`, that its log end offset is the
/// offset after the last batch, and that it answers lookups by timestamp.
pub fn assert_engine_serves(engine: &Engine, expected: &[StoredBatch]) {
    let served = engine_batches(engine).unwrap();
    assert_eq!(served.len(), expected.len(), "number of batches served");
    for (got, want) in served.iter().zip(expected) {
        assert_eq!(got, want, "batch at offset {}", want.base);
    }
    let description = engine.describe_partition(TOPIC, 0).unwrap();
    let end = expected
        .last()
        .map_or(description.log_start_offset.0, |b| b.last + 1);
    assert_eq!(description.log_end_offset, Offset(end), "log end offset");
    assert_engine_time_lookups(engine);
}

/// Appends one batch of two records through the engine and checks it lands at
/// `expected_offset`.
pub fn assert_engine_appends_at(engine: &Engine, expected_offset: u64) {
    let batch = batch(expected_offset, 2);
    let info = engine.append(&topic(), 0, batch, Durability::Written);
    let info = info.wait().unwrap();
    assert_eq!(info.first_offset, Offset(expected_offset));
    assert_eq!(info.last_offset, Offset(expected_offset + 1));
    let served = engine_batch_at(engine, expected_offset).unwrap().unwrap();
    assert_eq!(
        (served.base, served.last),
        (expected_offset, expected_offset + 1)
    );
}

/// A scratch directory and the partition directory in it.
pub fn scratch_partition() -> (tempfile::TempDir, PathBuf) {
    let root = scratch();
    let dir = partition_dir(root.path());
    (root, dir)
}

/// Opens the partition log in `dir` through `storage` with `config`, after a clean or an unclean
/// shutdown, recovering from `recovery_point`.
pub fn open_partition(
    dir: &Path,
    config: LogConfig,
    clean: bool,
    recovery_point: u64,
    storage: Arc<dyn Storage>,
) -> Result<(PartitionLog, RecoveryReport), OpenError> {
    let mode = LogWriteMode::default();
    open_partition_on(dir, (config, mode), clean, recovery_point, storage)
}

/// [`open_partition`], the log written as `mode` says.
pub fn open_partition_on(
    dir: &Path,
    (config, mode): (LogConfig, LogWriteMode),
    clean: bool,
    recovery_point: u64,
    storage: Arc<dyn Storage>,
) -> Result<(PartitionLog, RecoveryReport), OpenError> {
    let options = LogOpenOptions {
        mode,
        ..open_options(clean, recovery_point, now().0)
    };
    logs::try_open_log(storage, dir, TOPIC, config, options)
}

/// [`open_partition_log`], the log written as `mode` says.
pub fn open_partition_log_with(
    dir: &Path,
    config: LogConfig,
    mode: LogWriteMode,
    clean: bool,
    recovery_point: u64,
) -> (PartitionLog, RecoveryReport) {
    let storage = storage_from_env();
    open_partition_on(dir, (config, mode), clean, recovery_point, storage).unwrap()
}

/// [`open_partition`] through `storage_from_env()`, which must succeed.
pub fn open_partition_log(
    dir: &Path,
    config: LogConfig,
    clean: bool,
    recovery_point: u64,
) -> (PartitionLog, RecoveryReport) {
    open_partition(dir, config, clean, recovery_point, storage_from_env()).unwrap()
}

/// The bytes of `batches` as the log serves them.
pub fn payload_bytes(batches: &[StoredBatch]) -> u64 {
    batches.iter().map(|batch| batch.bytes.len() as u64).sum()
}

/// The bytes of every `.log` file in `dir`.
pub fn log_file_bytes(dir: &Path) -> u64 {
    segment_logs(dir)
        .iter()
        .map(|path| fs::metadata(path).unwrap().len())
        .sum()
}

/// The log `open(false)` reopens after a crash: recovery cut `cut` bytes, and it serves
/// `batches`.
pub fn reopened_after_crash(
    open: impl Fn(bool) -> (PartitionLog, RecoveryReport),
    cut: u64,
    batches: &[StoredBatch],
) -> PartitionLog {
    let (mut log, report) = open(false);
    assert_eq!(report.bytes_truncated, cut);
    assert_serves(&mut log, batches);
    log
}

/// Closes `log` and checks that the `.log` files of `dir` then hold its batches and nothing
/// else (`what` says why), and that `open(true)` recovers nothing and serves them.
pub fn assert_close_keeps_only_batches(
    mut log: PartitionLog,
    dir: &Path,
    open: impl Fn(bool) -> (PartitionLog, RecoveryReport),
    what: &str,
) {
    let batches = served_batches(&mut log);
    log.close().unwrap();
    assert_eq!(log_file_bytes(dir), payload_bytes(&batches), "{what}");
    let (mut log, report) = open(true);
    assert_eq!(report, RecoveryReport::default());
    assert_serves(&mut log, &batches);
}
