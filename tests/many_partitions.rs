//! Ten thousand partitions under `ulimit -n 1024` (issue 3: bounded resources). The test
//! re-executes itself in a child process whose open-file limit is lowered with the shell's
//! `ulimit`; the child opens an engine with the default configuration (which sizes its bound on
//! open partitions from that limit), appends to every partition, reads every record back, closes,
//! reopens and reads again. It fails if any open runs out of file descriptors. It runs twice:
//! through the page cache, and with `O_DIRECT` appends, whose active segments hold a second
//! descriptor each. A third run, with `O_DIRECT` under `ulimit -n 9000`, leaves the shards
//! enough descriptors to open the partitions a request names together (on threads): those opens
//! must stay within the same bounds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use seglog::config::LogConfig;
use seglog::engine::{Engine, EngineConfig, FetchOptions, PartitionDescription};
use seglog::format::Batch;
use seglog::types::{Offset, TopicName};
use support::batches::{text, value_batch};
use support::engines::{append, every_partition};

mod support;

const CHILD_ENV: &str = "SEGLOG_MANY_PARTITIONS_DIR";
/// Set in the child when it appends with `O_DIRECT` (`EngineConfig::direct_writes`).
const CHILD_DIRECT_ENV: &str = "SEGLOG_MANY_PARTITIONS_DIRECT";
const PARTITION_COUNT: u32 = 10_000;
/// The open-file limit the child runs under.
const CHILD_LIMIT_ENV: &str = "SEGLOG_MANY_PARTITIONS_LIMIT";
const OPEN_FILES_LIMIT: u32 = 1024;
/// Enough for a shard to open partitions together (`PARALLEL_OPENS_FILES_MIN` in the shard).
const PARALLEL_OPEN_FILES_LIMIT: u32 = 9000;

fn small_segments() -> LogConfig {
    let mut config = LogConfig::default();
    config.set("segment.index.bytes", "4096").unwrap();
    config
}

/// Each of `partitions` serves its one record, `p<partition>`.
fn assert_single_values(engine: &Engine, topic: &TopicName, partitions: impl Iterator<Item = u32>) {
    for partition in partitions {
        let data = engine
            .fetch(topic, partition, Offset(0), FetchOptions::default())
            .wait()
            .unwrap();
        let records = Batch::decode(&data.records, u64::MAX).unwrap().records();
        assert_eq!(text(&records.unwrap()[0].value), format!("p{partition}"));
    }
}

#[test]
fn ten_thousand_partitions_run_under_an_open_file_limit_of_1024() {
    run_child(false, OPEN_FILES_LIMIT);
}

#[test]
fn ten_thousand_partitions_written_with_o_direct_run_under_an_open_file_limit_of_1024() {
    run_child(true, OPEN_FILES_LIMIT);
}

#[test]
fn ten_thousand_partitions_opened_together_run_under_an_open_file_limit_of_9000() {
    run_child(true, PARALLEL_OPEN_FILES_LIMIT);
}

fn run_child(direct_writes: bool, limit: u32) {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new("bash");
    child
        .arg("-c")
        .arg(format!("ulimit -n {limit} && exec \"$0\" --exact child_process_body --nocapture --test-threads 1"))
        .arg(&exe)
        .env(CHILD_ENV, dir.path())
        .env(CHILD_LIMIT_ENV, limit.to_string());
    if direct_writes {
        child.env(CHILD_DIRECT_ENV, "1");
    }
    let status = child.status().unwrap();
    assert!(
        status.success(),
        "the child under ulimit -n {limit} (direct writes: {direct_writes}) failed: {status}"
    );
}

/// The body, run only in the child process.
#[test]
fn child_process_body() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let limit = std::env::var(CHILD_LIMIT_ENV).unwrap();
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    assert!(
        limits
            .lines()
            .any(|line| line.starts_with("Max open files") && line.contains(&limit))
    );
    let config = EngineConfig::default()
        .with_pin_shards(false)
        .with_direct_writes(std::env::var_os(CHILD_DIRECT_ENV).is_some());
    assert!(config.open_partitions_max < PARTITION_COUNT as usize);
    let engine = Engine::open(&dir, config.clone()).unwrap();
    let topic = engine
        .create_topic("wide", PARTITION_COUNT, small_segments())
        .unwrap();
    for partition in 0..PARTITION_COUNT {
        append(
            &engine,
            &topic,
            partition,
            value_batch(&format!("p{partition}")),
        );
    }
    assert_single_values(&engine, &topic, 0..PARTITION_COUNT);
    engine.close().unwrap();
    let engine = Engine::open(&dir, config).unwrap();
    assert_single_values(&engine, &topic, (0..PARTITION_COUNT).step_by(7));
    let description = engine.describe_topic("wide").unwrap();
    assert_eq!(description.partitions.len(), PARTITION_COUNT as usize);
    let holding_one = |partition: &PartitionDescription| partition.log_end_offset == Offset(1);
    assert!(every_partition(&engine, "wide", holding_one));
    engine.close().unwrap();
}
