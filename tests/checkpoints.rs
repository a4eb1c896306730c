//! Checkpoints that cannot silently reset (issue 41, item 3; RELIABILITY.md R28): each
//! checkpoint is kept in two checksummed copies written alternately (FORMAT.md § Checkpoints).
//! A corrupt newest copy falls back to the older one, so a `delete_records` survives it; with no
//! valid copy the engine trusts nothing it held: every partition opens through full recovery,
//! whatever the clean-shutdown marker says.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions};
use seglog::error::ReadError;
use seglog::format::{BatchBuilder, NewRecord};
use seglog::types::{Offset, TopicName};

const KAFKA_FILES: [&str; 2] = [
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
];

fn config() -> EngineConfig {
    EngineConfig {
        shard_count: 1,
        pin_shards: false,
        recovery_point_checkpoint_interval_ms: 3_600_000,
        ..EngineConfig::default()
    }
}

fn record(value: u32) -> Bytes {
    let value = format!("value-{value}");
    let mut builder = BatchBuilder::new(0);
    builder.push(&NewRecord {
        timestamp_ms: 1_700_000_000_000,
        key: None,
        value: Some(value.as_bytes()),
        headers: &[],
    });
    builder.build().unwrap()
}

/// Ten records in `t-0`, the first five removed by `delete_records`, checkpointed twice
/// (explicitly, then by the clean close).
fn ten_records_with_the_first_five_deleted(dir: &Path) -> TopicName {
    let engine = Engine::open(dir, config()).unwrap();
    let topic = engine.create_topic("t", 1, LogConfig::default()).unwrap();
    for value in 0..10 {
        engine
            .append(&topic, 0, record(value), Durability::Written)
            .wait()
            .unwrap();
    }
    engine.delete_records(&topic, 0, Offset(5)).wait().unwrap();
    engine.checkpoint().unwrap();
    engine.close().unwrap();
    topic
}

/// The copy of `name` with the highest generation.
fn newest_copy(dir: &Path, name: &str) -> std::path::PathBuf {
    let generation = |path: &Path| -> u64 {
        let text = fs::read_to_string(path).unwrap();
        text.split(' ').nth(2).unwrap().parse().unwrap()
    };
    let copies = [0, 1].map(|copy| dir.join(format!("{name}.{copy}")));
    assert!(
        copies.iter().all(|copy| copy.exists()),
        "two copies written"
    );
    copies
        .into_iter()
        .max_by_key(|copy| generation(copy))
        .unwrap()
}

fn corrupt(path: &Path) {
    let mut bytes = fs::read(path).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x04;
    fs::write(path, bytes).unwrap();
}

#[test]
fn a_corrupt_newest_checkpoint_falls_back_to_the_older_copy_and_deleted_records_stay_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let topic = ten_records_with_the_first_five_deleted(dir.path());
    for name in KAFKA_FILES {
        corrupt(&newest_copy(dir.path(), name));
        // Kafka's own file too: it is for Kafka's tools, never what seglog trusts.
        corrupt(&dir.path().join(name));
    }
    let engine = Engine::open(dir.path(), config()).unwrap();
    let refused = engine
        .fetch(&topic, 0, Offset(0), FetchOptions::default())
        .wait();
    assert!(
        matches!(
            refused,
            Err(ReadError::OffsetOutOfRange {
                log_start_offset: Offset(5),
                ..
            })
        ),
        "the deleted records stay deleted: {refused:?}"
    );
    engine.close().unwrap();
}

#[test]
fn with_no_valid_checkpoint_copy_every_partition_opens_through_full_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let topic = ten_records_with_the_first_five_deleted(dir.path());
    for copy in ["0", "1"] {
        fs::write(
            dir.path()
                .join(format!("recovery-point-offset-checkpoint.{copy}")),
            b"",
        )
        .unwrap();
    }
    assert!(dir.path().join(".kafka_cleanshutdown").exists());
    // A flipped byte in the last batch: a trusted segment is not read, only recovery finds it.
    let log = dir.path().join("t-0/00000000000000000000.log");
    let mut bytes = fs::read(&log).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    fs::write(&log, &bytes).unwrap();
    let engine = Engine::open(dir.path(), config()).unwrap();
    let described = engine.describe_topic("t").unwrap();
    assert_eq!(
        described.partitions[0].log_end_offset,
        Offset(9),
        "recovery cut the damaged last batch"
    );
    let data = engine
        .fetch(&topic, 0, Offset(5), FetchOptions::default())
        .wait()
        .unwrap();
    assert!(!data.records.is_empty());
    engine.close().unwrap();
}
