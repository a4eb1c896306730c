//! How many reads a fetch costs, and what it serves. The index has an entry per batch when
//! batches are larger than `index.interval.bytes`, each keyed by its batch's last offset: once
//! the size of a batch is known (the last one served), a lookup reads the batch holding its
//! offset whole where the entry after the offset's places it, in one read. Otherwise one read
//! from the offset's entry through the next entry and a batch past it finds the batch. Either
//! way a fetch serves whole batches from the one holding its offset. A point lookup
//! (`read_record`) in a large batch it read before reads only the chunks holding its record.
//! Reopening a log reads only its segments' tails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use seglog::config::LogConfig;
use seglog::format::batch::BatchIter;
use seglog::io::hooked::{StorageHooks, StorageOp};
use seglog::log::{PartitionLog, RecordRead};
use seglog::types::{Offset, TimestampMs};
use support::batches::{T0, repeated_batch};
use support::dirs::{flip_byte, segment_file};
use support::hooks::hooked;
use support::logs::{self, open_options};

mod support;

const RECORDS_PER_BATCH: u64 = 100;
const BATCHES: u64 = 50;

/// Counts the reads of `.log` files.
#[derive(Debug, Default)]
struct CountLogReads(AtomicU64);

impl StorageHooks for CountLogReads {
    fn before(&self, op: StorageOp, path: &Path) -> std::io::Result<()> {
        if op == StorageOp::Read && path.extension().is_some_and(|ext| ext == "log") {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

impl CountLogReads {
    /// The reads counted so far.
    fn count(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A batch of 100 records of 100 B: about 11 KB, so each batch has its own index entry.
fn batch() -> bytes::Bytes {
    batch_of(RECORDS_PER_BATCH)
}

fn batch_of(records: u64) -> bytes::Bytes {
    batch_of_values(records, &[b'v'; 100])
}

/// `records` records, each with the value `value`.
fn batch_of_values(records: u64, value: &[u8]) -> bytes::Bytes {
    repeated_batch(records as usize, None, value, T0)
}

/// A log in a temporary directory of `BATCHES` batches, the `n`th `batch_at(n)`, over storage
/// counting its reads.
fn counted_log_of(
    batch_at: impl Fn(u64) -> bytes::Bytes,
) -> (tempfile::TempDir, Arc<CountLogReads>, PartitionLog) {
    let dir = tempfile::tempdir().unwrap();
    let reads = Arc::new(CountLogReads::default());
    let mut log = open_log(dir.path(), reads.clone());
    for n in 0..BATCHES {
        log.append(batch_at(n), TimestampMs(T0)).unwrap();
    }
    (dir, reads, log)
}

/// The log in `dir`, opened as after a clean shutdown (none yet, the first time).
fn open_log(dir: &Path, hooks: Arc<CountLogReads>) -> PartitionLog {
    let options = open_options(true, 0, T0);
    logs::open_log(hooked(hooks), dir, "reads", LogConfig::default(), options)
}

/// The base offsets of the batches a fetch served (each batch checked whole).
fn served_bases(records: bytes::Bytes) -> Vec<i64> {
    BatchIter::new(records, u64::MAX)
        .map(|batch| batch.unwrap().base_offset())
        .collect()
}

#[test]
fn a_lookup_reads_its_batch_whole_at_its_index_entry_once_the_batch_size_is_known() {
    let (_dir, reads, mut log) = counted_log_of(|_| batch());
    let mut lookup = |offset: u64| {
        let before = reads.count();
        let data = log.read(Offset(offset), 1).unwrap();
        (served_bases(data.records), reads.count() - before)
    };
    // The first fetch knows no batch size: from the entry's batch through a page past the next
    // entry in one read, which holds the wanted batch's header; then that batch.
    assert_eq!(lookup(1_234), (vec![1_200], 2));
    // Later ones: every batch has its entry, one batch apart, so the wanted batch starts at the
    // entry after the offset's: one read of a batch's size there.
    assert_eq!(lookup(4_950), (vec![4_900], 1));
    assert_eq!(lookup(2_550), (vec![2_500], 1));
    // An offset that keys an entry (a batch's last): its own batch, read at that entry.
    assert_eq!(lookup(2_599), (vec![2_500], 1));
    // The first batch has no entry: the segment's start holds it.
    assert_eq!(lookup(0), (vec![0], 1));
    // The log's last batch.
    assert_eq!(lookup(4_999).0, vec![4_900]);
}

#[test]
fn a_fetch_serves_whole_batches_from_the_one_holding_its_offset_up_to_max_bytes() {
    let (_dir, reads, mut log) = counted_log_of(|_| batch());
    let batch_bytes = batch().len() as u64;
    let before = reads.count();
    let data = log.read(Offset(1_050), 3 * batch_bytes + 10).unwrap();
    assert_eq!(served_bases(data.records), [1_000, 1_100, 1_200]);
    let reads_taken = reads.count() - before;
    assert_eq!(
        reads_taken, 1,
        "from the entry's batch through max_bytes past the next entry, at once"
    );
    let data = log.read(Offset(4_800), 10 * batch_bytes).unwrap();
    assert_eq!(
        served_bases(data.records),
        [4_800, 4_900],
        "up to the log end"
    );
}

/// Batches of 100 and of 3 records in turn: some entries are one batch apart and some two, and
/// the last batch's size (the guess) is often wrong. Every lookup still serves the batch holding
/// its offset, in at most the reads of a lookup without the guess.
#[test]
fn lookups_among_batches_of_varying_sizes_serve_the_batch_holding_the_offset() {
    let records_in = |n: u64| {
        if n.is_multiple_of(2) {
            RECORDS_PER_BATCH
        } else {
            3
        }
    };
    let (_dir, reads, mut log) = counted_log_of(|n| batch_of(records_in(n)));
    let mut bases = vec![0u64];
    for n in 0..BATCHES {
        bases.push(bases[n as usize] + records_in(n));
    }
    let end = *bases.last().unwrap();
    for offset in (0..end).step_by(7).chain([end - 1]) {
        let before = reads.count();
        let data = log.read(Offset(offset), 1).unwrap();
        let holding = bases.partition_point(|base| *base <= offset) - 1;
        assert_eq!(
            served_bases(data.records),
            vec![bases[holding] as i64],
            "offset {offset}"
        );
        assert!(reads.count() - before <= 3, "offset {offset}");
    }
}

/// A batch of 100 records of 1 KiB, each value `byte` repeated: about 100 KiB.
fn kib_batch(byte: u8) -> bytes::Bytes {
    batch_of_values(RECORDS_PER_BATCH, &[byte; 1024])
}

/// The value of the record at `offset`, which must be there.
fn looked_up_value(log: &mut PartitionLog, offset: u64) -> Result<bytes::Bytes, String> {
    match log.read_record(Offset(offset)) {
        Ok(RecordRead::Found(header, record)) => {
            assert_eq!(
                header.base_offset + i64::from(record.offset_delta),
                offset as i64
            );
            Ok(record.value.unwrap())
        }
        Ok(other) => panic!("offset {offset}: {other:?}"),
        Err(error) => Err(error.to_string()),
    }
}

#[test]
fn a_second_lookup_in_a_large_batch_reads_and_checks_only_the_chunks_of_its_record() {
    let (dir, _reads, mut log) = counted_log_of(|_| kib_batch(b'v'));
    let batch_bytes = kib_batch(b'v').len() as u64;
    let record_bytes = (batch_bytes - 61) / RECORDS_PER_BATCH;
    // The first lookup reads the batch 1_100..=1_199 whole and checks its CRC.
    assert_eq!(looked_up_value(&mut log, 1_150).unwrap(), vec![b'v'; 1024]);
    // The value of record 1_190 changes on disk, 78 KiB from record 1_150.
    let changed = 11 * batch_bytes + 61 + 90 * record_bytes + 500;
    // As a disk returning other bytes would.
    flip_byte(&segment_file(dir.path(), 0, ".log"), changed, 0xff);
    // Record 1_150's chunks are unchanged and pass their CRCs: the batch is not read whole.
    assert_eq!(looked_up_value(&mut log, 1_150).unwrap(), vec![b'v'; 1024]);
    // Record 1_190's chunk fails its CRC: the batch is read whole again, and fails its own.
    let error = looked_up_value(&mut log, 1_190).unwrap_err();
    assert!(error.contains("CRC"), "{error}");
    // Without the digest, record 1_150 is read with the whole batch too.
    let error = looked_up_value(&mut log, 1_150).unwrap_err();
    assert!(error.contains("CRC"), "{error}");
    // Other batches are untouched.
    assert_eq!(looked_up_value(&mut log, 1_250).unwrap(), vec![b'v'; 1024]);
}

#[test]
fn a_lookup_after_a_truncation_reads_the_batch_appended_in_the_truncated_ones_place() {
    let (_dir, _reads, mut log) = counted_log_of(|_| kib_batch(b'v'));
    for offset in [4_950, 4_951, 4_999] {
        assert_eq!(looked_up_value(&mut log, offset).unwrap(), vec![b'v'; 1024]);
    }
    log.truncate_to(Offset(4_900)).unwrap();
    assert!(matches!(
        log.read_record(Offset(4_900)),
        Ok(RecordRead::Absent)
    ));
    log.append(kib_batch(b'w'), TimestampMs(T0)).unwrap();
    for offset in [4_950, 4_951, 4_999] {
        assert_eq!(looked_up_value(&mut log, offset).unwrap(), vec![b'w'; 1024]);
    }
}

/// A segment whose timestamps stopped growing after its first batch has one time index entry,
/// there. Reopening it reads the first batch's header and the batches from the offset index's
/// last entry on, not the whole `.log` (as it did, at every open): the time index covers the
/// rest, so the largest timestamp is still known.
#[test]
fn reopening_a_log_whose_timestamps_stopped_growing_reads_only_its_tail() {
    let dir = tempfile::tempdir().unwrap();
    let reads = Arc::new(CountLogReads::default());
    let mut log = open_log(dir.path(), reads.clone());
    let value = [b'v'; 100];
    let stamped =
        |timestamp_ms| repeated_batch(RECORDS_PER_BATCH as usize, None, &value, timestamp_ms);
    log.append(stamped(T0 + 10_000), TimestampMs(T0)).unwrap();
    // 400 more batches of about 11 KB, all older than the first: some 17 of a scan's 256 KiB
    // reads.
    for _ in 0..400 {
        log.append(stamped(T0), TimestampMs(T0)).unwrap();
    }
    let end = log.log_end_offset();
    log.close().unwrap();
    assert_eq!(
        std::fs::metadata(dir.path().join("00000000000000000000.timeindex"))
            .unwrap()
            .len(),
        12,
        "one time index entry"
    );
    let before = reads.count();
    let mut log = open_log(dir.path(), reads.clone());
    let opening_reads = reads.count() - before;
    assert!(
        opening_reads <= 3,
        "the open read the .log {opening_reads} times"
    );
    assert_eq!(log.log_end_offset(), end);
    let found = log
        .read_by_timestamp(TimestampMs(T0 + 5_000))
        .unwrap()
        .unwrap();
    assert_eq!((found.timestamp.0, found.offset.0), (T0 + 10_000, 0));
}
