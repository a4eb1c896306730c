//! Engines for tests: configurations, appends and what a partition serves.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Clock, Durability, Engine, EngineConfig, FetchOptions};
use seglog::error::ReadError;
use seglog::format::Batch;
use seglog::types::{Offset, TimestampMs, TopicName};

use super::batches::{batches_from, records_from, text};

/// `shard_count` shards, not pinned to cores (tests share the machine).
pub fn engine_config(shard_count: usize) -> EngineConfig {
    EngineConfig::default()
        .with_shard_count(shard_count)
        .with_pin_shards(false)
}

/// [`engine_config`] whose idempotent producers never expire: tests whose batches carry
/// timestamps of 2023 (`T0`), which the system clock would expire at a reopen.
pub fn keeping_producers(shard_count: usize) -> EngineConfig {
    engine_config(shard_count).with_producer_id_expiration_ms(i64::MAX)
}

/// An inline engine (`EngineConfig::inline`: one shard, run by the callers, each request
/// answered before its call returns) whose topics default to `topic_config`.
pub fn inline_config(topic_config: LogConfig) -> EngineConfig {
    EngineConfig::default()
        .with_inline(true)
        .with_pin_shards(false)
        .with_default_topic_config(topic_config)
}

/// A clock that reads `time_ms`, which the test sets (a simulation's clock: an inline engine on
/// the simulated disk then runs the same way every time).
pub fn counter_clock(time_ms: &Arc<AtomicI64>) -> Clock {
    let time_ms = time_ms.clone();
    Clock::from_fn(move || TimestampMs(time_ms.load(Ordering::Relaxed)))
}

/// Appends `batch` to the partition, written (not synced); returns its first offset.
pub fn append(engine: &Engine, topic: &TopicName, partition: u32, batch: Bytes) -> Offset {
    engine
        .append(topic, partition, batch, Durability::Written)
        .wait()
        .unwrap()
        .first_offset
}

/// Every batch the partition serves from offset `from` on, fetched 1 MiB at a time.
pub fn try_fetch_batches(
    engine: &Engine,
    topic: &TopicName,
    partition: u32,
    from: u64,
) -> Result<Vec<Batch>, ReadError> {
    batches_from(from, |offset| {
        let fetched = engine.fetch(topic, partition, offset, FetchOptions::default());
        fetched.wait().map(|data| data.records)
    })
}

/// Every batch the partition serves.
pub fn fetch_batches(engine: &Engine, topic: &TopicName, partition: u32) -> Vec<Batch> {
    try_fetch_batches(engine, topic, partition, 0).unwrap()
}

/// Every record the partition serves: its offset and value, as text.
pub fn fetch_values(engine: &Engine, topic: &TopicName, partition: u32) -> Vec<(u64, String)> {
    let batches = fetch_batches(engine, topic, partition);
    records_from(&batches, 0)
        .into_iter()
        .map(|(offset, record)| (offset, text(&record.value)))
        .collect()
}

/// An engine opened with `config` (on the backend it names) in a new temporary directory.
pub fn temp_engine(config: EngineConfig) -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), config).unwrap();
    (dir, engine)
}

/// An engine opened with `config` in a new temporary directory, holding the topic `name` of
/// `partitions` partitions in Kafka's default configuration.
pub fn engine_with_topic(
    config: EngineConfig,
    name: &str,
    partitions: u32,
) -> (tempfile::TempDir, Engine, TopicName) {
    let (dir, engine) = temp_engine(config);
    let topic = engine
        .create_topic(name, partitions, seglog::config::LogConfig::default())
        .unwrap();
    (dir, engine, topic)
}

/// Whether every partition of `topic`, as `describe_topic` reports it, is as `is` says.
pub fn every_partition(
    engine: &Engine,
    topic: &str,
    is: impl Fn(&seglog::engine::PartitionDescription) -> bool,
) -> bool {
    let description = engine.describe_topic(topic).unwrap();
    description.partitions.iter().all(is)
}
