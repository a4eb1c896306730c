//! Consumer-group tests' helpers: an engine with a topic and a group coordinator in a temporary
//! directory, records appended by value, consumer configurations for tests, and polling until a
//! condition holds.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use seglog::config::LogConfig;
use seglog::engine::Engine;
use seglog::group::{Consumer, ConsumerConfig, ConsumerRecord, GroupCoordinator, GroupState};
use seglog::types::{Offset, TopicName, TopicPartition};

use super::batches::{T0, batch_of, record};
use super::engines::{append, engine_config};

/// How long a test waits for something that should happen at once.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// An engine of two shards in `dir`.
pub fn open_engine(dir: &Path) -> Engine {
    Engine::open(dir, engine_config(2)).unwrap()
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

/// Appends one batch holding `values` (key `k`) to the partition; returns the first offset.
pub fn produce(engine: &Engine, topic: &str, partition: u32, values: &[&str]) -> Offset {
    let topic = TopicName::parse(topic).unwrap();
    let records: Vec<_> = values
        .iter()
        .map(|value| record(T0, Some(b"k"), Some(value.as_bytes())))
        .collect();
    append(engine, &topic, partition, batch_of(&records))
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
    let settings = [
        ("auto.offset.reset", "earliest"),
        ("enable.auto.commit", "false"),
        ("fetch.max.wait.ms", "20"),
        ("metadata.max.age.ms", "0"),
    ];
    with_settings(ConsumerConfig::new(group), &settings)
}

/// [`config`] with `settings` over it.
pub fn config_with(group: &str, settings: &[(&str, &str)]) -> ConsumerConfig {
    with_settings(config(group), settings)
}

fn with_settings(mut config: ConsumerConfig, settings: &[(&str, &str)]) -> ConsumerConfig {
    for (name, value) in settings {
        config.set(name, value).unwrap();
    }
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
    within_patience(&format!("group {group} never became stable"), || {
        for consumer in consumers.iter_mut() {
            consumer.poll(Duration::ZERO).unwrap();
        }
        coordinator.describe_group(group).unwrap().state == GroupState::Stable
    });
}

/// Runs `done` until it returns true; fails saying `what` if it has not within [`PATIENCE`].
pub fn within_patience(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
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

/// An engine in a temporary directory with topics, and its group coordinator (dropped first).
pub struct Groups {
    pub coordinator: GroupCoordinator,
    pub engine: Engine,
    pub dir: tempfile::TempDir,
}

impl Groups {
    /// The topic `t` of `partitions` partitions, each holding `count` records ([`fill`]).
    pub fn new(partitions: u32, count: usize) -> Groups {
        Groups::open(&[("t", partitions)], count)
    }

    /// The empty topics `topics`: (name, partitions).
    pub fn with_topics(topics: &[(&str, u32)]) -> Groups {
        Groups::open(topics, 0)
    }

    /// The topics `topics`, each partition holding `count` records; then the coordinator.
    fn open(topics: &[(&str, u32)], count: usize) -> Groups {
        let dir = tempfile::tempdir().unwrap();
        let engine = open_engine(dir.path());
        for (name, partitions) in topics {
            create_topic(&engine, name, *partitions);
            if count > 0 {
                fill(&engine, name, *partitions, count);
            }
        }
        let coordinator = GroupCoordinator::open(&engine).unwrap();
        Groups {
            coordinator,
            engine,
            dir,
        }
    }

    /// A consumer with `config` subscribed to `t`.
    pub fn consumer(&self, config: ConsumerConfig) -> Consumer {
        subscribed(&self.coordinator, config, &["t"])
    }

    /// A consumer of `t` in `group` ([`config`]) that polled `count` records and committed.
    pub fn committed_consumer(&self, group: &str, count: usize) -> Consumer {
        let mut consumer = self.consumer(config(group));
        poll_records(&mut consumer, count);
        consumer.commit_sync().unwrap();
        consumer
    }
}
