//! How many reads a fetch costs, and what it serves: a page at the offset's index entry (which,
//! keyed by its batch's last offset, usually points at the batch before the one wanted), then one
//! read past that batch as large as `max_bytes` or the last batch served, which brings the wanted
//! batch whole. Either way a fetch serves whole batches from the one holding its offset.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use seglog::config::LogConfig;
use seglog::format::batch::BatchIter;
use seglog::format::{BatchBuilder, NewRecord};
use seglog::io::hooked::{HookedStorage, StorageHooks, StorageOp};
use seglog::io::storage_from_env;
use seglog::log::{LogOpenOptions, PartitionLog};
use seglog::types::{Offset, TimestampMs, TopicName, TopicPartition};

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

/// A batch of 100 records of 100 B: about 11 KB, so each batch has its own index entry.
fn batch() -> bytes::Bytes {
    let value = [b'v'; 100];
    let mut builder = BatchBuilder::new(0);
    for _ in 0..RECORDS_PER_BATCH {
        builder.push(&NewRecord {
            timestamp_ms: 1_700_000_000_000,
            key: None,
            value: Some(&value),
            headers: &[],
        });
    }
    builder.build().unwrap()
}

fn log_of_batches(dir: &Path, hooks: Arc<CountLogReads>) -> PartitionLog {
    let storage = Arc::new(HookedStorage::new(storage_from_env(), hooks));
    let tp = TopicPartition {
        topic: TopicName::parse("reads").unwrap(),
        partition: 0,
    };
    let options = LogOpenOptions {
        had_clean_shutdown: true,
        recovery_point: Offset(0),
        log_start_offset: None,
        now: TimestampMs(1_700_000_000_000),
    };
    let (mut log, _) = PartitionLog::open(storage, dir, tp, LogConfig::default(), options).unwrap();
    for _ in 0..BATCHES {
        log.append(batch(), TimestampMs(1_700_000_000_000)).unwrap();
    }
    log
}

/// The base offsets of the batches a fetch served (each batch checked whole).
fn served_bases(records: bytes::Bytes) -> Vec<i64> {
    BatchIter::new(records, u64::MAX)
        .map(|batch| batch.unwrap().base_offset())
        .collect()
}

#[test]
fn a_lookup_reads_the_entry_page_then_its_batch_whole_once_the_batch_size_is_known() {
    let dir = tempfile::tempdir().unwrap();
    let reads = Arc::new(CountLogReads::default());
    let mut log = log_of_batches(dir.path(), reads.clone());
    let mut lookup = |offset: u64| {
        let before = reads.0.load(Ordering::SeqCst);
        let data = log.read(Offset(offset), 1).unwrap();
        (
            served_bases(data.records),
            reads.0.load(Ordering::SeqCst) - before,
        )
    };
    // The first fetch knows no batch size: the entry's page, the next batch's page, then the
    // batch.
    assert_eq!(lookup(1_234), (vec![1_200], 3));
    // Later ones: the entry's page, then the wanted batch in one read.
    assert_eq!(lookup(4_950), (vec![4_900], 2));
    assert_eq!(lookup(2_550), (vec![2_500], 2));
    // An offset that keys an entry (a batch's last): its own batch at the entry, then the rest.
    assert_eq!(lookup(2_599), (vec![2_500], 2));
    // The first batch has no entry: the segment's start, whose page holds its header.
    assert_eq!(lookup(0), (vec![0], 2));
}

#[test]
fn a_fetch_serves_whole_batches_from_the_one_holding_its_offset_up_to_max_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let reads = Arc::new(CountLogReads::default());
    let mut log = log_of_batches(dir.path(), reads.clone());
    let batch_bytes = batch().len() as u64;
    let before = reads.0.load(Ordering::SeqCst);
    let data = log.read(Offset(1_050), 3 * batch_bytes + 10).unwrap();
    assert_eq!(served_bases(data.records), [1_000, 1_100, 1_200]);
    let reads_taken = reads.0.load(Ordering::SeqCst) - before;
    assert_eq!(reads_taken, 2, "the entry's page, then max_bytes at once");
    let data = log.read(Offset(4_800), 10 * batch_bytes).unwrap();
    assert_eq!(
        served_bases(data.records),
        [4_800, 4_900],
        "up to the log end"
    );
}
