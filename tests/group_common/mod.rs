//! Helpers shared by the consumer-group test files: an engine in a temporary directory, records
//! appended by value, consumer configurations for tests, and polling until a condition holds.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig};
use seglog::format::{BatchBuilder, NewRecord};
use seglog::group::{Consumer, ConsumerConfig, ConsumerRecord, GroupCoordinator, GroupState};
use seglog::types::{Offset, TopicName, TopicPartition};

/// How long a test waits for something that should happen at once.
pub const PATIENCE: Duration = Duration::from_secs(10);

pub fn open_engine(dir: &Path) -> Engine {
    let config = EngineConfig {
        shard_count: 2,
        pin_shards: false,
        ..EngineConfig::default()
    };
    Engine::open(dir, config).unwrap()
}

pub fn create_topic(engine: &Engine, topic: &str, partitions: u32) -> TopicName {
    engine
        .create_topic(topic, partitions, LogConfig::default())
        .unwrap()
}

pub fn tp(topic: &str, partition: u32) -> TopicPartition {
    TopicPartition {
        topic: TopicName::parse(topic).unwrap(),
        partition,
    }
}

/// Appends one batch holding `values` to the partition; returns the first offset.
pub fn produce(engine: &Engine, topic: &str, partition: u32, values: &[&str]) -> Offset {
    let topic = TopicName::parse(topic).unwrap();
    let mut batch = BatchBuilder::new(0);
    for value in values {
        batch.push(&NewRecord {
            timestamp_ms: 1_700_000_000_000,
            key: Some(b"k"),
            value: Some(value.as_bytes()),
            headers: &[],
        });
    }
    engine
        .append(
            &topic,
            partition,
            batch.build().unwrap(),
            Durability::Written,
        )
        .wait()
        .unwrap()
        .first_offset
}

/// Appends `count` records `p<partition>-<n>` to each of the topic's partitions.
pub fn fill(engine: &Engine, topic: &str, partitions: u32, count: usize) {
    for partition in 0..partitions {
        let values: Vec<String> = (0..count).map(|n| format!("p{partition}-{n}")).collect();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        produce(engine, topic, partition, &values);
    }
}

/// A test configuration: earliest reset, manual commits, short waits.
pub fn config(group: &str) -> ConsumerConfig {
    let mut config = ConsumerConfig::new(group);
    config.set("auto.offset.reset", "earliest").unwrap();
    config.set("enable.auto.commit", "false").unwrap();
    config.set("fetch.max.wait.ms", "20").unwrap();
    config.set("metadata.max.age.ms", "0").unwrap();
    config
}

pub fn subscribed(
    coordinator: &GroupCoordinator,
    config: ConsumerConfig,
    topics: &[&str],
) -> Consumer {
    let mut consumer = coordinator.consumer(config);
    consumer.subscribe(topics).unwrap();
    consumer
}

pub fn value(record: &ConsumerRecord) -> String {
    String::from_utf8(record.value.as_ref().unwrap().to_vec()).unwrap()
}

/// Polls every consumer in turn (timeout 0) until the group is stable. Records polled meanwhile
/// are dropped: call it before producing.
pub fn settle(coordinator: &GroupCoordinator, group: &str, consumers: &mut [&mut Consumer]) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        for consumer in consumers.iter_mut() {
            consumer.poll(Duration::ZERO).unwrap();
        }
        if coordinator.describe_group(group).unwrap().state == GroupState::Stable {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "group {group} never became stable"
        );
    }
}

/// Polls until `count` records arrived; returns them.
pub fn poll_records(consumer: &mut Consumer, count: usize) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + PATIENCE;
    let mut records = Vec::new();
    while records.len() < count {
        assert!(
            Instant::now() < deadline,
            "only {} of {count} records arrived",
            records.len()
        );
        records.extend(consumer.poll(Duration::from_millis(50)).unwrap());
    }
    records
}

/// Each partition's values, in the order received.
pub fn by_partition(records: &[ConsumerRecord]) -> BTreeMap<u32, Vec<String>> {
    let mut values: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for record in records {
        values
            .entry(record.partition)
            .or_default()
            .push(value(record));
    }
    values
}
