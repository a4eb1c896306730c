//! `PartitionLog` behaves like a plain in-memory list of batches across random sequences of
//! appends, reads, reads by timestamp, record deletion, truncation, flushes, rolls, and clean and
//! unclean reopens.
//!
//! How: proptest generates operation sequences (64 cases, at most 40 operations each) and runs
//! each against a real log in a temporary directory and against a model (the batches appended,
//! each a base offset and its records, plus the log start offset). The log is configured so that
//! everything that can roll does: `segment.bytes` = 1024, `segment.index.bytes` = 96 (12 offset
//! entries, 8 time entries, so indexes fill up) and `index.interval.bytes` = 32. After every
//! operation the log's start and end offsets and segment layout are checked; reads are checked
//! for the rules a consumer relies on (the first batch holds the requested offset, whole batches
//! only, at least one batch below the log end, no more than `max_bytes` beyond the first batch
//! and as many batches of the segment as fit, every record equal to the model's); errors must
//! be the typed ones the model predicts (`OffsetOutOfRange` carrying the range, `AppendTooLarge`).
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::path::PathBuf;

use bytes::Bytes;
use proptest::prelude::*;
use seglog::config::LogConfig;
use seglog::error::{AppendError, DeleteRecordsError, ReadError};
use seglog::format::batch::BatchIter;
use seglog::format::{BatchBuilder, BatchHeader, NewRecord, Record};
use seglog::io::storage_from_env;
use seglog::log::{LogOpenOptions, PartitionLog, RecordRead, RecoveryReport};
use seglog::types::{Offset, TimestampMs};
use support::assert_out_of_range;
use support::dirs::scratch;
use support::logs::{open_options, try_open_log};

mod support;

const T0: i64 = 1_700_000_000_000;
const SEGMENT_BYTES: u64 = 1024;
/// `segment.bytes` of the large-batch runs: batches of up to 40 records of up to 4 KB, so point
/// lookups meet batches large enough to digest (`segment/lookup.rs`).
const LARGE_SEGMENT_BYTES: u64 = 512 * 1024;

fn config(segment_bytes: u64) -> LogConfig {
    LogConfig::default()
        .with_segment_bytes(segment_bytes)
        .with_segment_index_bytes(96)
        .with_index_interval_bytes(32)
}

fn now() -> TimestampMs {
    TimestampMs(T0 + 5_000)
}

/// What a generated record looks like; turned into bytes by `RecordSpec::materialize`.
#[derive(Debug, Clone)]
struct RecordSpec {
    key: Option<u16>,
    value: Option<(u16, u8)>,
    timestamp: u16,
    header: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelRecord {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    timestamp: i64,
    header: Option<Vec<u8>>,
}

impl RecordSpec {
    fn materialize(&self) -> ModelRecord {
        ModelRecord {
            key: self.key.map(|key| format!("key-{key}").into_bytes()),
            value: self
                .value
                .map(|(length, seed)| (0..length).map(|i| seed.wrapping_add(i as u8)).collect()),
            timestamp: T0 + i64::from(self.timestamp),
            header: self.header.map(|byte| vec![byte; 3]),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// One append of one or two batches of 1 to 5 records.
    Append(Vec<Vec<RecordSpec>>),
    Read {
        pick: u32,
        max_bytes: u64,
    },
    /// A point lookup (`read_record`) of the offset `pick` chooses, twice.
    ReadRecord(u32),
    ReadByTimestamp(i64),
    DeleteRecords(u32),
    TruncateTo(u32),
    Flush,
    Roll,
    CleanReopen,
    UncleanReopen,
}

fn record_spec(value_bytes_max: u16) -> impl Strategy<Value = RecordSpec> {
    (
        proptest::option::weighted(0.8, 0u16..500),
        proptest::option::weighted(0.9, (0u16..value_bytes_max, any::<u8>())),
        0u16..1000,
        proptest::option::weighted(0.2, any::<u8>()),
    )
        .prop_map(|(key, value, timestamp, header)| RecordSpec {
            key,
            value,
            timestamp,
            header,
        })
}

/// Appends of one or two batches of up to `records_max` records, values up to
/// `value_bytes_max` bytes, and the other operations.
fn op(records_max: usize, value_bytes_max: u16) -> impl Strategy<Value = Op> {
    let batch = proptest::collection::vec(record_spec(value_bytes_max), 1..=records_max);
    prop_oneof![
        6 => proptest::collection::vec(batch, 1..=2).prop_map(Op::Append),
        4 => (any::<u32>(), prop_oneof![Just(1u64), 1u64..2048, Just(u64::MAX)])
            .prop_map(|(pick, max_bytes)| Op::Read { pick, max_bytes }),
        4 => any::<u32>().prop_map(Op::ReadRecord),
        2 => (-20i64..1020).prop_map(Op::ReadByTimestamp),
        1 => any::<u32>().prop_map(Op::DeleteRecords),
        1 => any::<u32>().prop_map(Op::TruncateTo),
        1 => Just(Op::Flush),
        1 => Just(Op::Roll),
        1 => Just(Op::CleanReopen),
        1 => Just(Op::UncleanReopen),
    ]
}

#[derive(Debug, Clone)]
struct ModelBatch {
    base: u64,
    records: Vec<ModelRecord>,
}

impl ModelBatch {
    fn last(&self) -> u64 {
        self.base + self.records.len() as u64 - 1
    }
}

/// The model: every batch still in the log (including those below the log start offset, which
/// reads of a batch straddling the log start still return) and the log start offset.
#[derive(Debug, Default)]
struct Model {
    batches: Vec<ModelBatch>,
    log_start: u64,
}

impl Model {
    fn log_end(&self) -> u64 {
        self.batches.last().map_or(0, |batch| batch.last() + 1)
    }

    fn batch_holding(&self, offset: u64) -> Option<&ModelBatch> {
        self.batches
            .iter()
            .find(|batch| batch.base <= offset && offset <= batch.last())
    }

    fn first_at_or_after(&self, timestamp: i64) -> Option<(i64, u64)> {
        self.batches
            .iter()
            .flat_map(|batch| {
                batch
                    .records
                    .iter()
                    .enumerate()
                    .map(move |(delta, record)| (batch.base + delta as u64, record.timestamp))
            })
            .find(|(offset, ts)| *offset >= self.log_start && *ts >= timestamp)
            .map(|(offset, ts)| (ts, offset))
    }

    /// An offset in `[low, high]`, chosen by `pick`.
    fn pick(pick: u32, low: u64, high: u64) -> u64 {
        low + u64::from(pick) % (high - low + 1)
    }
}

fn encode_batch(records: &[ModelRecord]) -> Bytes {
    let mut builder = BatchBuilder::new(0);
    for record in records {
        let headers: Vec<(&str, Option<&[u8]>)> = record
            .header
            .as_deref()
            .map(|value| ("h", Some(value)))
            .into_iter()
            .collect();
        builder.push(&NewRecord {
            timestamp_ms: record.timestamp,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &headers,
        });
    }
    builder.build().unwrap()
}

struct Harness {
    _root: tempfile::TempDir,
    dir: PathBuf,
    segment_bytes: u64,
    log: Option<PartitionLog>,
    model: Model,
}

impl Harness {
    fn new() -> Harness {
        Harness::with_segment_bytes(SEGMENT_BYTES)
    }

    fn with_segment_bytes(segment_bytes: u64) -> Harness {
        let root = scratch();
        let dir = root.path().join("model-0");
        let mut harness = Harness {
            _root: root,
            dir,
            segment_bytes,
            log: None,
            model: Model::default(),
        };
        let report = harness.open(false, Offset(0), None);
        assert_eq!(report.bytes_truncated, 0);
        harness
    }

    fn open(
        &mut self,
        clean: bool,
        recovery_point: Offset,
        log_start: Option<Offset>,
    ) -> RecoveryReport {
        let options = LogOpenOptions {
            log_start_offset: log_start,
            ..open_options(clean, recovery_point.0, now().0)
        };
        let config = config(self.segment_bytes);
        let opened = try_open_log(storage_from_env(), &self.dir, "model", config, options);
        let (log, report) = opened.unwrap();
        self.log = Some(log);
        report
    }

    fn log(&mut self) -> &mut PartitionLog {
        self.log.as_mut().unwrap()
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Append(batches) => self.append(batches),
            Op::Read { pick, max_bytes } => {
                let (start, end) = (self.model.log_start, self.model.log_end());
                let offset = Model::pick(*pick, start.saturating_sub(2), end + 2);
                check_read(self.log.as_mut().unwrap(), &self.model, offset, *max_bytes)
            }
            Op::ReadRecord(pick) => {
                let (start, end) = (self.model.log_start, self.model.log_end());
                let offset = Model::pick(*pick, start.saturating_sub(2), end + 2);
                let log = self.log.as_mut().unwrap();
                check_read_record(log, &self.model, offset)?;
                check_read_record(log, &self.model, offset)
            }
            Op::ReadByTimestamp(delta) => {
                check_read_by_timestamp(self.log.as_mut().unwrap(), &self.model, T0 + delta)
            }
            Op::DeleteRecords(pick) => {
                let (start, end) = (self.model.log_start, self.model.log_end());
                let offset = Model::pick(*pick, start, end + 1);
                let result = self.log().delete_records(Offset(offset), now());
                if offset > end {
                    assert_out_of_range!(result, DeleteRecordsError, offset, start, end);
                } else {
                    self.model.log_start = start.max(offset);
                    prop_assert_eq!(result.unwrap(), Offset(self.model.log_start));
                    // Below the log start, reads fail with the range.
                    if self.model.log_start > 0 {
                        check_read(
                            self.log.as_mut().unwrap(),
                            &self.model,
                            self.model.log_start - 1,
                            u64::MAX,
                        )?;
                    }
                }
                self.check_everything()
            }
            Op::TruncateTo(pick) => {
                let (start, end) = (self.model.log_start, self.model.log_end());
                let offset = Model::pick(*pick, start, end + 1);
                self.log().truncate_to(Offset(offset)).unwrap();
                if let Some(cut) = self.model.batch_holding(offset).map(|batch| batch.base) {
                    self.model.batches.retain(|batch| batch.base < cut);
                }
                self.model.log_start = self.model.log_start.min(self.model.log_end());
                self.check_everything()
            }
            Op::Flush => {
                self.log().flush().unwrap();
                let end = self.model.log_end();
                prop_assert_eq!(self.log().recovery_point(), Offset(end));
                Ok(())
            }
            Op::Roll => {
                let before = self.log().segment_count();
                let empty_active = self.log().segments().last().unwrap().size_bytes == 0;
                self.log().roll(now()).unwrap();
                let expected = if empty_active { before } else { before + 1 };
                prop_assert_eq!(self.log().segment_count(), expected);
                Ok(())
            }
            Op::CleanReopen => {
                self.log.take().unwrap().close().unwrap();
                let end = Offset(self.model.log_end());
                let start = Offset(self.model.log_start);
                let report = self.open(true, end, Some(start));
                prop_assert_eq!(report, RecoveryReport::default());
                self.check_everything()
            }
            Op::UncleanReopen => {
                // As if the process died: no close. The checkpoints a log directory would have
                // written hold the current recovery point and log start offset.
                let recovery_point = self.log().recovery_point();
                let prewritten = self.prewritten_bytes();
                drop(self.log.take());
                let start = Offset(self.model.log_start);
                let report = self.open(false, recovery_point, Some(start));
                // Only the space a synced log prewrites ahead of its appends is cut.
                prop_assert_eq!(report.bytes_truncated, prewritten);
                prop_assert_eq!(report.segments_deleted, 0);
                prop_assert!(report.segments_recovered >= 1);
                self.check_everything()
            }
        }
    }

    /// How far the active `.log` runs past its batches: space prewritten ahead of the appends.
    fn prewritten_bytes(&mut self) -> u64 {
        let active = self.log().segments().last().unwrap();
        let path = self.dir.join(format!("{:020}.log", active.base_offset.0));
        let length = std::fs::metadata(&path).unwrap().len();
        length - active.size_bytes
    }

    fn append(&mut self, specs: &[Vec<RecordSpec>]) -> Result<(), TestCaseError> {
        let batches: Vec<Vec<ModelRecord>> = specs
            .iter()
            .map(|batch| batch.iter().map(RecordSpec::materialize).collect())
            .collect();
        let mut bytes = Vec::new();
        for batch in &batches {
            bytes.extend_from_slice(&encode_batch(batch));
        }
        let size = bytes.len() as u64;
        let end = self.model.log_end();
        let result = self.log().append(Bytes::from(bytes), now());
        if size > self.segment_bytes {
            match result {
                Err(AppendError::AppendTooLarge {
                    size_bytes,
                    segment_bytes,
                }) => {
                    prop_assert_eq!(size_bytes, size);
                    prop_assert_eq!(segment_bytes, self.segment_bytes);
                }
                other => prop_assert!(false, "append of {} bytes gave {:?}", size, other),
            }
            prop_assert_eq!(self.log().log_end_offset(), Offset(end));
            return Ok(());
        }
        let info = result.unwrap();
        let count: u64 = batches.iter().map(|batch| batch.len() as u64).sum();
        prop_assert_eq!(info.first_offset, Offset(end));
        prop_assert_eq!(info.last_offset, Offset(end + count - 1));
        prop_assert_eq!(info.record_count, count);
        prop_assert_eq!(info.batch_count, batches.len());
        let max_timestamp = batches.iter().flatten().map(|r| r.timestamp).max().unwrap();
        prop_assert_eq!(info.max_timestamp, TimestampMs(max_timestamp));
        let mut base = end;
        for records in batches {
            let length = records.len() as u64;
            self.model.batches.push(ModelBatch { base, records });
            base += length;
        }
        self.check_layout()
    }

    /// Start and end offsets, and segments that tile the offsets without gaps or overlaps.
    fn check_layout(&mut self) -> Result<(), TestCaseError> {
        let (start, end) = (self.model.log_start, self.model.log_end());
        let log = self.log.as_mut().unwrap();
        prop_assert_eq!(log.log_start_offset(), Offset(start));
        prop_assert_eq!(log.log_end_offset(), Offset(end));
        prop_assert!(log.recovery_point() <= log.log_end_offset());
        let segments: Vec<_> = log.segments().collect();
        prop_assert!(!segments.is_empty());
        for pair in segments.windows(2) {
            prop_assert_eq!(pair[0].next_offset, pair[1].base_offset, "{:?}", segments);
            prop_assert!(
                pair[0].size_bytes > 0,
                "only the active segment may be empty"
            );
        }
        for segment in &segments {
            prop_assert!(segment.size_bytes <= self.segment_bytes, "{:?}", segment);
            prop_assert!(segment.offset_index_entries <= 12);
            prop_assert!(segment.time_index_entries <= 8);
        }
        let first = &segments[0];
        prop_assert!(first.base_offset.0 <= start);
        prop_assert_eq!(segments.last().unwrap().next_offset, Offset(end));
        Ok(())
    }

    /// The layout, then every batch from the log start read one by one, then reads by
    /// timestamp at every model timestamp.
    fn check_everything(&mut self) -> Result<(), TestCaseError> {
        self.check_layout()?;
        let log = self.log.as_mut().unwrap();
        let mut offset = self.model.log_start;
        while offset < self.model.log_end() {
            check_read(log, &self.model, offset, 1)?;
            let batch = self.model.batch_holding(offset).unwrap();
            // The first lookup in a large batch reads it whole, the later ones its chunks.
            for lookup in [
                batch.last(),
                offset,
                (offset + batch.last()) / 2,
                batch.last(),
            ] {
                check_read_record(log, &self.model, lookup)?;
            }
            offset = batch.last() + 1;
        }
        check_read_record(log, &self.model, self.model.log_end())?;
        check_read(log, &self.model, self.model.log_start, u64::MAX)?;
        let mut targets: Vec<i64> = self
            .model
            .batches
            .iter()
            .flat_map(|batch| batch.records.iter().map(|record| record.timestamp))
            .collect();
        targets.sort_unstable();
        targets.dedup();
        for target in targets.iter().flat_map(|ts| [ts - 1, *ts, ts + 1]) {
            check_read_by_timestamp(log, &self.model, target)?;
        }
        Ok(())
    }
}

/// Checks one lookup by timestamp against the model: the first record at or after `target`.
fn check_read_by_timestamp(
    log: &mut PartitionLog,
    model: &Model,
    target: i64,
) -> Result<(), TestCaseError> {
    let found = log
        .read_by_timestamp(TimestampMs(target))
        .unwrap()
        .map(|found| (found.timestamp.0, found.offset.0));
    prop_assert_eq!(
        found,
        model.first_at_or_after(target),
        "read_by_timestamp({})",
        target
    );
    Ok(())
}

/// The model's view of `record` in the batch with `header`.
fn model_record(header: &BatchHeader, record: &Record) -> Result<ModelRecord, TestCaseError> {
    prop_assert!(record.headers.iter().all(|h| h.key == "h"));
    Ok(ModelRecord {
        key: record.key.as_ref().map(|key| key.to_vec()),
        value: record.value.as_ref().map(|value| value.to_vec()),
        timestamp: header.base_timestamp + record.timestamp_delta,
        header: record
            .headers
            .first()
            .and_then(|h| h.value.as_ref().map(|v| v.to_vec())),
    })
}

/// Checks one point lookup against the model: the record at `offset`, nothing at the log end,
/// the range outside the log.
fn check_read_record(
    log: &mut PartitionLog,
    model: &Model,
    offset: u64,
) -> Result<(), TestCaseError> {
    let (start, end) = (model.log_start, model.log_end());
    let result = log.read_record(Offset(offset));
    if offset < start || offset > end {
        prop_assert!(
            matches!(result, Err(ReadError::OffsetOutOfRange { requested, .. }) if requested == Offset(offset)),
            "read_record({}) outside [{}, {}] gave {:?}",
            offset,
            start,
            end,
            result
        );
        return Ok(());
    }
    let read = result.unwrap();
    if offset == end {
        prop_assert!(
            matches!(read, RecordRead::Absent),
            "read_record at the log end: {:?}",
            read
        );
        return Ok(());
    }
    let RecordRead::Found(header, record) = read else {
        return Err(TestCaseError::fail(format!(
            "read_record({offset}) gave {read:?}"
        )));
    };
    let batch = model.batch_holding(offset).unwrap();
    prop_assert_eq!(header.base_offset, batch.base as i64);
    prop_assert_eq!(i64::from(record.offset_delta), (offset - batch.base) as i64);
    let want = &batch.records[(offset - batch.base) as usize];
    prop_assert_eq!(
        &model_record(&header, &record)?,
        want,
        "read_record({})",
        offset
    );
    Ok(())
}

/// Checks one read against the model.
fn check_read(
    log: &mut PartitionLog,
    model: &Model,
    offset: u64,
    max_bytes: u64,
) -> Result<(), TestCaseError> {
    let (start, end) = (model.log_start, model.log_end());
    let result = log.read(Offset(offset), max_bytes);
    if offset < start || offset > end {
        assert_out_of_range!(result, ReadError, offset, start, end);
        return Ok(());
    }
    let fetched = result.unwrap();
    prop_assert_eq!(fetched.log_start_offset, Offset(start));
    prop_assert_eq!(fetched.log_end_offset, Offset(end));
    if offset == end {
        prop_assert!(
            fetched.records.is_empty(),
            "read at the log end returns nothing"
        );
        return Ok(());
    }
    prop_assert!(
        !fetched.records.is_empty(),
        "read({}) below the log end returned nothing",
        offset
    );
    let mut iter = BatchIter::new(fetched.records.clone(), u64::MAX);
    let mut batches = Vec::new();
    for batch in iter.by_ref() {
        batches.push(batch.unwrap());
    }
    prop_assert_eq!(iter.position(), fetched.records.len(), "whole batches only");
    let first = &batches[0];
    prop_assert!(
        first.base_offset() as u64 <= offset && offset <= first.last_offset() as u64,
        "the first batch [{}, {}] holds {}",
        first.base_offset(),
        first.last_offset(),
        offset
    );
    prop_assert!(fetched.records.len() as u64 <= max_bytes.max(first.size_bytes()));
    let mut expected_base = first.base_offset() as u64;
    for batch in &batches {
        let base = batch.base_offset() as u64;
        prop_assert_eq!(base, expected_base, "batches are contiguous");
        let model_batch = model.batch_holding(base).unwrap();
        prop_assert_eq!(model_batch.base, base);
        prop_assert_eq!(batch.last_offset() as u64, model_batch.last());
        let header = batch.header();
        let timestamps = model_batch.records.iter().map(|r| r.timestamp);
        prop_assert_eq!(Some(header.max_timestamp), timestamps.max());
        let records = batch.records().unwrap();
        prop_assert_eq!(records.len(), model_batch.records.len());
        for (record, want) in records.iter().zip(&model_batch.records) {
            prop_assert_eq!(&model_record(header, record)?, want);
        }
        expected_base = batch.last_offset() as u64 + 1;
    }
    // As many batches as fit: the next batch of the same segment would exceed `max_bytes`.
    let segment_end = log
        .segments()
        .filter(|segment| segment.base_offset.0 <= offset)
        .last()
        .unwrap()
        .next_offset
        .0;
    if expected_base < segment_end {
        let next = log.read(Offset(expected_base), 1).unwrap().records.len() as u64;
        prop_assert!(
            fetched.records.len() as u64 + next > max_bytes,
            "read({}, {}) stopped at {} with room for the next batch of {} bytes",
            offset,
            max_bytes,
            expected_base,
            next
        );
    }
    Ok(())
}

#[test]
fn the_model_configuration_rolls_on_full_indexes() {
    // Guards the proptest's premise: with these settings a segment rolls because its time index
    // is full (8 slots, one kept for the final entry at roll, which is not needed here: the last
    // entry already holds the largest timestamp) long before it reaches `segment.bytes`.
    let mut harness = Harness::new();
    for n in 0..30 {
        let record = RecordSpec {
            key: Some(n),
            value: Some((10, 0)),
            timestamp: n * 10,
            header: None,
        };
        harness.append(&[vec![record]]).unwrap();
    }
    let segments: Vec<_> = harness.log().segments().collect();
    assert!(segments.len() >= 3, "{segments:?}");
    let sealed = &segments[0];
    assert_eq!(sealed.time_index_entries, 7, "{sealed:?}");
    assert!(sealed.size_bytes < SEGMENT_BYTES * 3 / 4, "{sealed:?}");
    harness.check_everything().unwrap();
}

fn spec(timestamp: u16, value_bytes: u16) -> RecordSpec {
    RecordSpec {
        key: None,
        value: Some((value_bytes, 1)),
        timestamp,
        header: None,
    }
}

fn find(log: &mut PartitionLog, timestamp: i64) -> Option<(i64, u64)> {
    log.read_by_timestamp(TimestampMs(timestamp))
        .unwrap()
        .map(|found| (found.timestamp.0, found.offset.0))
}

#[test]
fn read_by_timestamp_after_a_truncation_sees_batches_past_the_last_time_index_entry() {
    // The first batch of a segment is never indexed. After truncating back to it, the segment's
    // largest timestamp must come from its batches, not only from its (now empty) time index.
    let mut harness = Harness::new();
    harness.append(&[vec![spec(0, 0), spec(0, 0)]]).unwrap();
    harness.append(&[vec![spec(0, 0), spec(1, 0)]]).unwrap();
    harness
        .append(&[vec![spec(0, 0), spec(26, 20), spec(58, 156)]])
        .unwrap();
    harness.log().truncate_to(Offset(3)).unwrap();
    assert_eq!(harness.log().log_end_offset(), Offset(2));
    assert_eq!(find(harness.log(), T0 - 1), Some((T0, 0)));
    assert_eq!(find(harness.log(), T0), Some((T0, 0)));
    assert_eq!(find(harness.log(), T0 + 1), None);
}

#[test]
fn read_by_timestamp_looks_past_a_batch_whose_late_records_are_below_the_log_start() {
    // Batch [0, 4] holds timestamps 5, 32, 752, 873, 472; batch [5] holds 599. With the log
    // start at 4, the first record at or after it with a timestamp >= 473 is offset 5 (599), in
    // the next batch of the same segment, not in a later segment.
    let mut harness = Harness::new();
    harness
        .append(&[
            vec![
                spec(5, 0),
                spec(32, 0),
                spec(752, 41),
                spec(873, 136),
                spec(472, 38),
            ],
            vec![spec(599, 139)],
        ])
        .unwrap();
    harness
        .append(&[vec![spec(147, 134)], vec![spec(989, 14), spec(317, 121)]])
        .unwrap();
    assert_eq!(
        harness.log().delete_records(Offset(4), now()).unwrap(),
        Offset(4)
    );
    assert_eq!(find(harness.log(), T0 + 473), Some((T0 + 599, 5)));
    assert_eq!(find(harness.log(), T0 + 472), Some((T0 + 472, 4)));
    assert_eq!(find(harness.log(), T0 + 600), Some((T0 + 989, 7)));
}

/// `ops` applied to the log and the model, then a check of everything, before and after an
/// unclean reopen.
fn run_against_the_model(mut harness: Harness, ops: &[Op]) -> Result<(), TestCaseError> {
    for op in ops {
        harness.apply(op)?;
    }
    harness.check_everything()?;
    let recovery_point = harness.log().recovery_point();
    drop(harness.log.take());
    let start = Offset(harness.model.log_start);
    harness.open(false, recovery_point, Some(start));
    harness.check_everything()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_log_behaves_like_the_model(ops in proptest::collection::vec(op(5, 160), 1..=40)) {
        run_against_the_model(Harness::new(), &ops)?;
    }

    /// Batches of up to 160 KB: point lookups read digested batches' chunks (`segment/lookup.rs`)
    /// across rolls, truncations, record deletion and reopens.
    #[test]
    fn a_log_of_large_batches_behaves_like_the_model(
        ops in proptest::collection::vec(op(40, 4000), 1..=40),
    ) {
        run_against_the_model(Harness::with_segment_bytes(LARGE_SEGMENT_BYTES), &ops)?;
    }
}
