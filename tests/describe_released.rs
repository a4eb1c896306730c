//! `describe_topic` answers for a partition released to bound open files from what the shard
//! kept at its release, without opening it again (issue 47, item 4: describing 100,000 new
//! partitions reopened, and so released, most of them once more). Through the inline engine
//! keeping 4 partitions open, on positioned I/O with a hook counting every storage operation:
//! the description of a topic of 20 partitions of different lengths (several segments each)
//! issues none, and equals the description of the same topic after a clean close and reopen,
//! which opens every partition from its files.
//!
//! After a clean close, a reopened engine describes partitions it has not opened from their
//! checkpoints and directory listings, opening no file (item 4: a clean open reads the
//! checkpoints and lists directories), and opens a partition at its first use. After an unclean
//! one it opens (recovers) them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use seglog::engine::{Durability, Engine, EngineConfig};
use seglog::io::hooked::{StorageHooks, StorageOp};
use seglog::types::TopicName;
use support::batches::value_batch;
use support::configs::small_segments;
use support::engines::inline_config;
use support::hooks::hooked_pio;

mod support;

const TOPIC: &str = "released";
const PARTITIONS: u32 = 20;

/// Counts every storage operation.
#[derive(Debug, Default)]
struct CountOps {
    ops: AtomicU64,
}

impl StorageHooks for CountOps {
    fn before(&self, _op: StorageOp, _path: &Path) -> io::Result<()> {
        self.ops.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn config() -> EngineConfig {
    inline_config(small_segments(300, 64))
        .with_open_partitions_max(4)
        .with_open_segments_max(16)
}

/// 1 to 7 durable records to each partition, by its number.
fn append_different_lengths(engine: &Engine, topic: &TopicName) {
    for partition in 0..PARTITIONS {
        for record in 0..=partition % 7 {
            let batch = value_batch(&format!("partition {partition} record {record}"));
            let appended = engine.append(topic, partition, batch, Durability::Durable);
            appended.wait().unwrap();
        }
    }
}

#[test]
fn released_partitions_are_described_without_an_open_as_after_a_reopen() {
    let root = tempfile::tempdir().unwrap();
    let hooks = Arc::new(CountOps::default());
    let engine =
        Engine::open_with_storage(root.path(), config(), hooked_pio(hooks.clone())).unwrap();
    let topic = engine
        .create_topic(TOPIC, PARTITIONS, small_segments(300, 64))
        .unwrap();
    append_different_lengths(&engine, &topic);
    let ops_before = hooks.ops.load(Ordering::Relaxed);
    let described = engine.describe_topic(TOPIC).unwrap();
    assert_eq!(
        hooks.ops.load(Ordering::Relaxed),
        ops_before,
        "describing opened a partition"
    );
    assert!(
        described
            .partitions
            .iter()
            .any(|partition| partition.segment_count > 2),
        "{described:?}"
    );
    engine.close().unwrap();
    let engine = Engine::open_with_storage(root.path(), config(), hooked_pio(hooks)).unwrap();
    assert_eq!(engine.describe_topic(TOPIC).unwrap(), described);
}

/// Counts the files opened.
#[derive(Debug, Default)]
struct CountOpens {
    opens: AtomicU64,
}

impl StorageHooks for CountOpens {
    fn before(&self, op: StorageOp, _path: &Path) -> io::Result<()> {
        if op == StorageOp::Open {
            self.opens.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

#[test]
fn a_clean_reopen_describes_unopened_partitions_without_opening_a_file_and_opens_at_first_use() {
    let root = tempfile::tempdir().unwrap();
    let config = inline_config(small_segments(300, 64));
    let engine = Engine::open(root.path(), config.clone()).unwrap();
    let topic = engine
        .create_topic(TOPIC, PARTITIONS, small_segments(300, 64))
        .unwrap();
    append_different_lengths(&engine, &topic);
    let described = engine.describe_topic(TOPIC).unwrap();
    engine.close().unwrap();

    let hooks = Arc::new(CountOpens::default());
    let engine =
        Engine::open_with_storage(root.path(), config.clone(), hooked_pio(hooks.clone())).unwrap();
    let opens_at_open = hooks.opens.load(Ordering::Relaxed);
    assert_eq!(engine.describe_topic(TOPIC).unwrap(), described);
    assert_eq!(
        hooks.opens.load(Ordering::Relaxed),
        opens_at_open,
        "the description opened a file"
    );
    // The first use opens the partition, which continues where it ended.
    let end = described.partitions[3].log_end_offset;
    let appended = engine.append(&topic, 3, value_batch("after"), Durability::Durable);
    assert_eq!(appended.wait().unwrap().first_offset, end);
    assert!(hooks.opens.load(Ordering::Relaxed) > opens_at_open);
    let again = engine.describe_topic(TOPIC).unwrap();
    assert_eq!(again.partitions[3].log_end_offset, end.next());
    assert_eq!(again.partitions[4], described.partitions[4]);
    engine.close().unwrap();

    // Without the clean-shutdown marker the description recovers, so opens, every partition.
    std::fs::remove_file(root.path().join(".kafka_cleanshutdown")).unwrap();
    let hooks = Arc::new(CountOpens::default());
    let engine = Engine::open_with_storage(root.path(), config, hooked_pio(hooks.clone())).unwrap();
    let opens_at_open = hooks.opens.load(Ordering::Relaxed);
    engine.describe_topic(TOPIC).unwrap();
    assert!(
        hooks.opens.load(Ordering::Relaxed) >= opens_at_open + u64::from(PARTITIONS),
        "an unclean reopen's description opens every partition"
    );
}
