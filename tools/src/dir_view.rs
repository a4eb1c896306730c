//! A read-only view of a data directory, for the commands that only read (`topics list|describe`,
//! `consume --partition`, `groups list|describe`, `verify`).
//!
//! It opens every file with `O_RDONLY` and never takes the directory's `.lock`, so it works on a
//! read-only file system and while another process (a running engine) holds the directory; it
//! creates, truncates, renames and adopts nothing. It shows what the engine would open: the topics
//! of the registry `seglog-topics`, plus the partition directories the registry does not list
//! (a directory Kafka wrote), with the default configuration, as the engine adopts them — but
//! adopts nothing itself. Checkpoints give each partition's log start offset and recovery point,
//! chosen from their copies as the engine chooses them. Partitions are read by
//! [`PartitionView`]: leftovers of an interrupted delete or compaction are not settled, and the
//! active segment ends at its last whole valid batch.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use seglog::config::LogConfig;
use seglog::engine::{PartitionDescription, TopicDescription, TopicMetadata};
use seglog::format::checkpoint::{CheckpointRead, read_checkpoint_with};
use seglog::format::file_name::{
    CLEAN_SHUTDOWN_MARKER, DELETE_DIR_SUFFIX, LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT, TOPIC_REGISTRY, parse_partition_dir_name, partition_dir_name,
};
use seglog::format::topics::{TopicEntry, decode};
use seglog::types::{Offset, TopicName, TopicPartition};

use crate::data_dir::{list_names, require_data_dir};
use crate::partition_view::{PartitionCheckpoints, PartitionView};

/// A data directory as its files show it now.
#[derive(Debug, Clone)]
pub struct DataDirView {
    root: PathBuf,
    topics: BTreeMap<TopicName, TopicMetadata>,
    recovery_points: BTreeMap<TopicPartition, Offset>,
    log_start_offsets: BTreeMap<TopicPartition, Offset>,
    closed_cleanly: bool,
}

impl DataDirView {
    /// Reads the data directory `root`, refusing one that is missing, empty or not a data
    /// directory ([`require_data_dir`]).
    pub fn open(root: &Path) -> anyhow::Result<DataDirView> {
        require_data_dir(root)?;
        let mut topics = read_registry(root)?;
        add_unregistered_partitions(root, &mut topics)?;
        let recovery = read_checkpoint(root, RECOVERY_POINT_CHECKPOINT)?;
        let log_start = read_checkpoint(root, LOG_START_OFFSET_CHECKPOINT)?;
        // As the engine: with a checkpoint lost, nothing is trusted as closed cleanly.
        let trusted = recovery.lost.is_none() && log_start.lost.is_none();
        Ok(DataDirView {
            root: root.to_owned(),
            topics,
            recovery_points: recovery.offsets,
            log_start_offsets: log_start.offsets,
            closed_cleanly: trusted && root.join(CLEAN_SHUTDOWN_MARKER).exists(),
        })
    }

    /// Every topic, in name order.
    pub fn topics(&self) -> &BTreeMap<TopicName, TopicMetadata> {
        &self.topics
    }

    /// A topic's metadata; an error naming the directory if there is no such topic.
    pub fn topic(&self, topic: &TopicName) -> anyhow::Result<&TopicMetadata> {
        self.topics
            .get(topic)
            .ok_or_else(|| anyhow!("topic {topic} does not exist in {}", self.root.display()))
    }

    /// Reads one partition, which must exist.
    pub fn partition(&self, tp: &TopicPartition) -> anyhow::Result<PartitionView> {
        let partition_count = self.topic(&tp.topic)?.partition_count;
        if tp.partition >= partition_count {
            return Err(anyhow!(
                "topic {} has {partition_count} partitions: there is no partition {}",
                tp.topic,
                tp.partition
            ));
        }
        let checkpoints = PartitionCheckpoints {
            log_start_offset: self.log_start_offsets.get(tp).copied(),
            recovery_point: self.recovery_points.get(tp).copied(),
            closed_cleanly: self.closed_cleanly,
        };
        let dir = self.root.join(partition_dir_name(tp));
        PartitionView::load(&dir, checkpoints)
            .with_context(|| format!("cannot read partition {tp}"))
    }

    /// What `Engine::describe_topic` reports, from the files.
    pub fn describe_topic(&self, topic: &TopicName) -> anyhow::Result<TopicDescription> {
        let metadata = self.topic(topic)?;
        let mut partitions = Vec::new();
        for partition in 0..metadata.partition_count {
            let tp = TopicPartition {
                topic: topic.clone(),
                partition,
            };
            let view = self.partition(&tp)?;
            partitions.push(PartitionDescription {
                partition,
                log_start_offset: Offset(view.log_start_offset),
                log_end_offset: Offset(view.log_end_offset),
                durable_offset: Offset(view.durable_offset),
                size_bytes: view.size_bytes(),
                segment_count: view.segments.len(),
                offline: None,
            });
        }
        Ok(TopicDescription {
            topic: topic.clone(),
            config: metadata.config.clone(),
            partitions,
        })
    }
}

/// The topics the registry of the data directory `root` lists, with their configuration (none
/// without a registry).
pub fn read_registry(root: &Path) -> anyhow::Result<BTreeMap<TopicName, TopicMetadata>> {
    let path = root.join(TOPIC_REGISTRY);
    if !path.exists() {
        return Ok(BTreeMap::new());
    }
    let context = || format!("cannot read the topic registry {}", path.display());
    let bytes = fs::read(&path).with_context(context)?;
    let entries = decode(&bytes).with_context(context)?;
    entries
        .into_iter()
        .map(|(topic, entry)| {
            let config = config_of(&topic, &entry).with_context(context)?;
            let metadata = TopicMetadata {
                partition_count: entry.partition_count,
                config,
            };
            Ok((topic, metadata))
        })
        .collect()
}

/// The default configuration with the registry's settings applied, as the engine loads it.
fn config_of(topic: &TopicName, entry: &TopicEntry) -> anyhow::Result<LogConfig> {
    let mut config = LogConfig::default();
    for (key, value) in &entry.settings {
        config
            .set(key, value)
            .with_context(|| format!("topic {topic}: setting {key}={value}"))?;
    }
    Ok(config)
}

/// Partition directories the registry does not cover, as the engine adopts them at open (but
/// nothing is written here): an unknown topic gets the default configuration, and a topic's
/// partition count covers every partition directory it has. Directories being deleted
/// (`-delete`) are not partitions.
fn add_unregistered_partitions(
    root: &Path,
    topics: &mut BTreeMap<TopicName, TopicMetadata>,
) -> anyhow::Result<()> {
    for name in list_names(root)? {
        if name.ends_with(DELETE_DIR_SUFFIX) || !root.join(&name).is_dir() {
            continue;
        }
        let Some(tp) = parse_partition_dir_name(&name) else {
            continue;
        };
        let metadata = topics.entry(tp.topic).or_insert_with(|| TopicMetadata {
            partition_count: 0,
            config: LogConfig::default(),
        });
        metadata.partition_count = metadata.partition_count.max(tp.partition + 1);
    }
    Ok(())
}

/// Checkpoint `name` of the data directory `root`, chosen as the engine chooses it
/// (`seglog::format::checkpoint::choose_checkpoint`): a lost one has no offsets, and says why.
pub fn read_checkpoint(root: &Path, name: &str) -> anyhow::Result<CheckpointRead> {
    read_checkpoint_with(name, |file| {
        let path = root.join(file);
        if !path.exists() {
            return Ok(None);
        }
        let bytes = fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        Ok(Some(bytes))
    })
}
