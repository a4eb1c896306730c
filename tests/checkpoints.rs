//! Checkpoints that cannot silently reset (issue 41, item 3; RELIABILITY.md R28): each
//! checkpoint is kept in two checksummed copies written alternately (FORMAT.md § Checkpoints).
//! A corrupt newest copy falls back to the older one, so a `delete_records` survives it; with no
//! valid copy the engine trusts nothing it held: every partition opens through full recovery,
//! whatever the clean-shutdown marker says.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

use seglog::config::LogConfig;
use seglog::engine::{Engine, EngineConfig, FetchOptions};
use seglog::error::ReadError;
use seglog::types::{Offset, TopicName};
use support::batches::value_batch;
use support::dirs::{file_len, flip_byte};
use support::engines::{append, engine_config};

mod support;

const KAFKA_FILES: [&str; 2] = [
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
];

fn config() -> EngineConfig {
    engine_config(1).with_recovery_point_checkpoint_interval_ms(3_600_000)
}

/// Ten records in `t-0`, the first five removed by `delete_records`, checkpointed twice
/// (explicitly, then by the clean close).
fn ten_records_with_the_first_five_deleted(dir: &Path) -> TopicName {
    let engine = Engine::open(dir, config()).unwrap();
    let topic = engine.create_topic("t", 1, LogConfig::default()).unwrap();
    for value in 0..10 {
        append(&engine, &topic, 0, value_batch(&format!("value-{value}")));
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
    flip_byte(path, file_len(path) - 2, 0x04);
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
    flip_byte(&log, file_len(&log) - 1, 0x01);
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
