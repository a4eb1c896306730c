//! A partition with many segments holds the files of at most `SEALED_OPEN_MAX` sealed segments
//! plus the active one (issue 3: bounded resources). Through the inline engine (the shard's code
//! on the test's thread, so every read has finished when its call returns), counts the process's
//! open descriptors that point into the partition directory (`/proc/self/fd`) while every offset
//! of a 100-segment partition is fetched, and checks that fetches from released segments still
//! return the right bytes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use seglog::engine::{Durability, Engine, FetchOptions};
use seglog::format::Batch;
use seglog::log::SEALED_OPEN_MAX;
use seglog::types::{Offset, TimestampMs};
use support::batches::{T0, keyed_batch};
use support::configs::small_segments;
use support::engines::inline_config;

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
    let config = small_segments(1024, 64);
    let engine = Engine::open(root.path(), inline_config(config.clone())).unwrap();
    let topic = engine.create_topic("wide", 1, config).unwrap();
    for offset in 0..300u64 {
        let key = offset.to_be_bytes();
        let batch = keyed_batch(Some(&key), Some(&[7u8; 300]), T0 + offset as i64);
        let appended = engine.append(&topic, 0, batch, Durability::Written);
        assert_eq!(appended.wait().unwrap().first_offset, Offset(offset));
    }
    let segments = engine.describe_partition("wide", 0).unwrap().segment_count;
    assert!(segments >= 100, "{segments} segments");
    let partition_dir = root.path().join("wide-0");
    // Each open segment's `.log` (its indexes are mapped and hold no descriptor), and a second
    // descriptor of the active `.log` for its `O_DIRECT` writes.
    let bound = SEALED_OPEN_MAX + 1 + 1;
    let one_batch = FetchOptions {
        max_bytes: 1,
        ..FetchOptions::default()
    };
    let mut most_open = 0;
    for offset in 0..300u64 {
        let data = engine.fetch(&topic, 0, Offset(offset), one_batch);
        let data = data.wait().unwrap();
        let batch = Batch::decode(&data.records, u64::MAX).unwrap();
        assert_eq!(batch.base_offset() as u64, offset);
        let key = batch.records().unwrap()[0].key.clone().unwrap();
        assert_eq!(&key[..], &offset.to_be_bytes());
        most_open = most_open.max(open_files_under(&partition_dir));
    }
    assert!(most_open <= bound, "{most_open} files open, bound {bound}");
    let found = engine.fetch_by_timestamp(&topic, 0, TimestampMs(T0 + 150));
    assert_eq!(found.wait().unwrap().unwrap().offset, Offset(150));
    assert!(open_files_under(&partition_dir) <= bound);
    engine.close().unwrap();
}
