//! The engine's topic registry: topics, partition counts and per-topic configuration, persisted
//! in `<data dir>/seglog-topics` (FORMAT.md § Topic registry) with the checkpoint protocol (tmp,
//! fsync, rename, directory fsync).
//!
//! Partition directories found on disk without an entry (a directory Kafka wrote, or one from
//! before the registry existed) are adopted at open with the default configuration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::LogConfig;
use crate::error::{OpenError, StorageError};
use crate::format::file_name::{DELETE_DIR_SUFFIX, TOPIC_REGISTRY, parse_partition_dir_name};
use crate::format::topics::{self, TopicEntry};
use crate::io::Storage;
use crate::io::{read_small_file, sync_dir, write_durably};
use crate::types::{TopicName, TopicPartition};

/// What the engine knows about a topic.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicMetadata {
    /// How many partitions the topic has.
    pub partition_count: u32,
    /// The topic's configuration.
    pub config: LogConfig,
}

#[derive(Debug)]
pub(crate) struct TopicRegistry {
    root: PathBuf,
    topics: BTreeMap<TopicName, TopicMetadata>,
}

impl TopicRegistry {
    /// Reads the registry file, adopts partition directories it does not list, and finishes
    /// deleting directories left with the `-delete` suffix.
    pub(crate) fn load(
        storage: &dyn Storage,
        root: &Path,
        default_config: &LogConfig,
    ) -> Result<TopicRegistry, OpenError> {
        let path = root.join(TOPIC_REGISTRY);
        let mut topics = BTreeMap::new();
        if storage.exists(&path) {
            for (topic, entry) in read_entries(storage, &path)? {
                let config = config_from(default_config, &entry, &path)?;
                let partition_count = entry.partition_count;
                topics.insert(
                    topic,
                    TopicMetadata {
                        partition_count,
                        config,
                    },
                );
            }
        }
        let mut registry = TopicRegistry {
            root: root.to_owned(),
            topics,
        };
        registry.adopt_directories(storage, default_config)?;
        Ok(registry)
    }

    fn adopt_directories(
        &mut self,
        storage: &dyn Storage,
        default_config: &LogConfig,
    ) -> Result<(), StorageError> {
        let names = storage
            .list_subdirs(&self.root)
            .map_err(|source| StorageError::io("list directory", &self.root, source))?;
        for name in names {
            let path = self.root.join(&name);
            if name.ends_with(DELETE_DIR_SUFFIX) {
                storage
                    .remove_dir_all(&path)
                    .map_err(|source| StorageError::io("remove directory", &path, source))?;
                continue;
            }
            let Some(tp) = parse_partition_dir_name(&name) else {
                continue;
            };
            let metadata = self
                .topics
                .entry(tp.topic)
                .or_insert_with(|| TopicMetadata {
                    partition_count: 0,
                    config: default_config.clone(),
                });
            metadata.partition_count = metadata.partition_count.max(tp.partition + 1);
        }
        Ok(())
    }

    /// Writes the registry durably.
    pub(crate) fn save(&self, storage: &dyn Storage) -> Result<(), StorageError> {
        let entries: BTreeMap<TopicName, TopicEntry> = self
            .topics
            .iter()
            .map(|(topic, metadata)| {
                let settings = metadata
                    .config
                    .to_pairs()
                    .into_iter()
                    .map(|(key, value)| (key.to_owned(), value))
                    .collect();
                let entry = TopicEntry {
                    partition_count: metadata.partition_count,
                    settings,
                };
                (topic.clone(), entry)
            })
            .collect();
        let path = self.root.join(TOPIC_REGISTRY);
        let tmp = self.root.join(format!("{TOPIC_REGISTRY}.tmp"));
        write_durably(storage, &tmp, topics::encode(&entries).as_bytes())?;
        storage
            .rename(&tmp, &path)
            .map_err(|source| StorageError::io("rename", &tmp, source))?;
        sync_dir(storage, &self.root)
    }

    pub(crate) fn get(&self, topic: &TopicName) -> Option<&TopicMetadata> {
        self.topics.get(topic)
    }

    /// The configuration of an existing partition.
    pub(crate) fn partition_config(&self, tp: &TopicPartition) -> Option<&LogConfig> {
        self.topics
            .get(&tp.topic)
            .filter(|metadata| tp.partition < metadata.partition_count)
            .map(|metadata| &metadata.config)
    }

    pub(crate) fn topics(&self) -> &BTreeMap<TopicName, TopicMetadata> {
        &self.topics
    }

    pub(crate) fn insert(&mut self, topic: TopicName, metadata: TopicMetadata) {
        self.topics.insert(topic, metadata);
    }

    pub(crate) fn remove(&mut self, topic: &TopicName) -> Option<TopicMetadata> {
        self.topics.remove(topic)
    }

    /// Replaces the topic's configuration; returns the one it had (`None`: no such topic).
    pub(crate) fn set_config(&mut self, topic: &TopicName, config: LogConfig) -> Option<LogConfig> {
        let metadata = self.topics.get_mut(topic)?;
        Some(std::mem::replace(&mut metadata.config, config))
    }

    pub(crate) fn set_partition_count(&mut self, topic: &TopicName, partition_count: u32) {
        if let Some(metadata) = self.topics.get_mut(topic) {
            metadata.partition_count = partition_count;
        }
    }

    /// Every partition of every topic.
    pub(crate) fn partitions(&self) -> impl Iterator<Item = TopicPartition> + '_ {
        self.topics.iter().flat_map(|(topic, metadata)| {
            (0..metadata.partition_count).map(|partition| TopicPartition {
                topic: topic.clone(),
                partition,
            })
        })
    }
}

fn read_entries(
    storage: &dyn Storage,
    path: &Path,
) -> Result<BTreeMap<TopicName, TopicEntry>, OpenError> {
    let bytes = read_small_file(storage, path)?;
    topics::decode(&bytes).map_err(|error| OpenError::TopicRegistry {
        file: path.to_owned(),
        line: error.line,
        reason: error.reason,
    })
}

fn config_from(
    default_config: &LogConfig,
    entry: &TopicEntry,
    path: &Path,
) -> Result<LogConfig, OpenError> {
    let mut config = default_config.clone();
    for (key, value) in &entry.settings {
        config
            .set(key, value)
            .map_err(|error| OpenError::TopicRegistry {
                file: path.to_owned(),
                line: 0,
                reason: error.to_string(),
            })?;
    }
    Ok(config)
}
