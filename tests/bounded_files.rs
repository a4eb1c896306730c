//! A partition with many segments holds the files of at most `SEALED_OPEN_MAX` sealed segments
//! plus the active one (issue 3: bounded resources). Counts the process's open descriptors that
//! point into the partition directory (`/proc/self/fd`) while every offset of a 100-segment log is
//! read, and checks that reads of released segments still return the right bytes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use seglog::format::Batch;
use seglog::log::SEALED_OPEN_MAX;
use seglog::types::{Offset, TimestampMs, TopicName};
use support::batches::{T0, keyed_batch};
use support::configs::small_segments;
use support::logs::open_dir;

mod support;

/// Open descriptors of this process whose target lies under `dir`.
fn open_files_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

#[test]
fn reading_a_log_of_many_segments_keeps_few_files_open() {
    let root = tempfile::tempdir().unwrap();
    let mut log_dir = open_dir(root.path(), small_segments(1024, 64));
    let topic = TopicName::parse("wide").unwrap();
    log_dir.create_topic(&topic, 1).unwrap();
    let log = log_dir.partition(&topic, 0).unwrap();
    for offset in 0..300u64 {
        let key = offset.to_be_bytes();
        let batch = keyed_batch(Some(&key), Some(&[7u8; 300]), T0 + offset as i64);
        log.append(batch, TimestampMs(T0 + 100_000)).unwrap();
    }
    assert!(
        log.segment_count() >= 100,
        "{} segments",
        log.segment_count()
    );
    let partition_dir = root.path().join("wide-0");
    let files_per_segment = 3;
    let bound = files_per_segment * (SEALED_OPEN_MAX + 1);
    let mut most_open = 0;
    for offset in 0..300u64 {
        let data = log.read(Offset(offset), 1).unwrap();
        let batch = Batch::decode(&data.records, u64::MAX).unwrap();
        assert_eq!(batch.base_offset() as u64, offset);
        let key = batch.records().unwrap()[0].key.clone().unwrap();
        assert_eq!(&key[..], &offset.to_be_bytes());
        most_open = most_open.max(open_files_under(&partition_dir));
    }
    assert!(most_open <= bound, "{most_open} files open, bound {bound}");
    let found = log
        .read_by_timestamp(TimestampMs(T0 + 150))
        .unwrap()
        .unwrap();
    assert_eq!(found.offset, Offset(150));
    assert!(open_files_under(&partition_dir) <= bound);
    log_dir.close().unwrap();
}
