//! A data directory of partitions on the caller's thread: the partition directories of every
//! topic, with the directory's own files (lock, checkpoints, clean-shutdown marker) kept by the
//! engine's `DataDir` (`engine::data_dir`).
//!
//! Partitions are opened lazily, on first use, so a directory with many partitions opens fast
//! and holds file descriptors and index maps only for the partitions in use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::LogConfig;
use crate::engine::data_dir::{DataDir, PartitionOffsets};
use crate::error::{OpenError, PartitionError, StorageError};
use crate::format::file_name::{parse_partition_dir_name, partition_dir_name};
use crate::io::{Storage, sync_dir};
use crate::log::{LogOpenOptions, LogWriteMode, PartitionLog, RecoveryReport};
use crate::types::{PartitionId, TimestampMs, TopicName, TopicPartition};

/// An open data directory.
#[derive(Debug)]
pub struct LogDir {
    root: PathBuf,
    storage: Arc<dyn Storage>,
    dir: DataDir,
    default_config: LogConfig,
    mode: LogWriteMode,
    had_clean_shutdown: bool,
    recovery_points: PartitionOffsets,
    log_start_offsets: PartitionOffsets,
    partitions: BTreeMap<TopicPartition, PartitionLog>,
    recovery_reports: BTreeMap<TopicPartition, RecoveryReport>,
}

impl LogDir {
    /// Opens (creating if needed) the data directory at `root`, taking its lock; its logs are
    /// written as standalone logs are ([`LogWriteMode::default`]).
    pub fn open(
        root: &Path,
        storage: Arc<dyn Storage>,
        default_config: LogConfig,
    ) -> Result<LogDir, OpenError> {
        LogDir::open_with(root, storage, default_config, LogWriteMode::default())
    }

    /// [`LogDir::open`], its logs written as `mode` says.
    pub fn open_with(
        root: &Path,
        storage: Arc<dyn Storage>,
        default_config: LogConfig,
        mode: LogWriteMode,
    ) -> Result<LogDir, OpenError> {
        default_config.validate()?;
        let (dir, at_open) = DataDir::open(root, storage.clone())?;
        Ok(LogDir {
            root: root.to_owned(),
            storage,
            dir,
            default_config,
            mode,
            had_clean_shutdown: at_open.had_clean_shutdown,
            recovery_points: at_open.recovery_points,
            log_start_offsets: at_open.log_start_offsets,
            partitions: BTreeMap::new(),
            recovery_reports: BTreeMap::new(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the previous opener closed the directory cleanly.
    pub fn had_clean_shutdown(&self) -> bool {
        self.had_clean_shutdown
    }

    /// Every partition directory present, sorted.
    pub fn list_partitions(&self) -> Result<Vec<TopicPartition>, StorageError> {
        let names = self
            .storage
            .list_dir(&self.root)
            .map_err(|source| StorageError::io("list directory", &self.root, source))?;
        let mut partitions: Vec<TopicPartition> = names
            .iter()
            .filter(|name| self.storage.is_dir(&self.root.join(name)))
            .filter_map(|name| parse_partition_dir_name(name))
            .collect();
        partitions.sort();
        Ok(partitions)
    }

    /// Number of partitions of `topic` on disk (0 if the topic does not exist).
    pub fn partition_count(&self, topic: &TopicName) -> Result<u32, StorageError> {
        Ok(self
            .list_partitions()?
            .iter()
            .filter(|tp| &tp.topic == topic)
            .count() as u32)
    }

    /// Creates partitions `0..partition_count` of `topic` that do not exist yet.
    pub fn create_topic(
        &mut self,
        topic: &TopicName,
        partition_count: u32,
    ) -> Result<(), PartitionError> {
        for partition in 0..partition_count {
            let tp = TopicPartition {
                topic: topic.clone(),
                partition,
            };
            self.open_partition(&tp, true)?;
        }
        sync_dir(self.storage.as_ref(), &self.root).map_err(OpenError::from)?;
        Ok(())
    }

    /// The log of an existing partition, opened (and recovered) on first use.
    pub fn partition(
        &mut self,
        topic: &TopicName,
        partition: PartitionId,
    ) -> Result<&mut PartitionLog, PartitionError> {
        let tp = TopicPartition {
            topic: topic.clone(),
            partition,
        };
        self.open_partition(&tp, false)
    }

    /// What opening each partition repaired.
    pub fn recovery_reports(&self) -> &BTreeMap<TopicPartition, RecoveryReport> {
        &self.recovery_reports
    }

    fn open_partition(
        &mut self,
        tp: &TopicPartition,
        create: bool,
    ) -> Result<&mut PartitionLog, PartitionError> {
        if !self.partitions.contains_key(tp) {
            let dir = self.root.join(partition_dir_name(tp));
            if !create && !self.storage.is_dir(&dir) {
                return Err(PartitionError::UnknownPartition {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                });
            }
            let options = LogOpenOptions {
                had_clean_shutdown: self.had_clean_shutdown,
                recovery_point: self.recovery_points.get(tp).copied().unwrap_or_default(),
                log_start_offset: self.log_start_offsets.get(tp).copied(),
                now: TimestampMs::now(),
                mode: self.mode,
            };
            let (log, report) = PartitionLog::open(
                self.storage.clone(),
                &dir,
                tp.clone(),
                self.default_config.clone(),
                options,
            )?;
            if report != RecoveryReport::default() {
                self.recovery_reports.insert(tp.clone(), report);
            }
            self.partitions.insert(tp.clone(), log);
        }
        self.partitions
            .get_mut(tp)
            .ok_or_else(|| PartitionError::UnknownPartition {
                topic: tp.topic.to_string(),
                partition: tp.partition,
            })
    }

    /// Writes both checkpoint files: the open partitions' current values over the values read at
    /// open for partitions not opened since.
    pub fn checkpoint(&mut self) -> Result<(), StorageError> {
        for (tp, log) in &self.partitions {
            self.recovery_points
                .insert(tp.clone(), log.recovery_point());
            self.log_start_offsets
                .insert(tp.clone(), log.log_start_offset());
        }
        self.dir
            .write_checkpoints(&self.recovery_points, &self.log_start_offsets, None)
    }

    /// After an unclean shutdown, opens (and so recovers) every partition not opened since: the
    /// clean-shutdown marker that `close` writes must be true of all of them.
    fn recover_unopened(&mut self) -> Result<(), StorageError> {
        for tp in self.list_partitions()? {
            if self.partitions.contains_key(&tp) {
                continue;
            }
            match self.open_partition(&tp, false) {
                Ok(_) => {}
                Err(PartitionError::Open(OpenError::Storage(error))) => return Err(error),
                Err(error) => {
                    return Err(StorageError::Corrupt {
                        file: self.root.join(partition_dir_name(&tp)),
                        position: 0,
                        reason: error.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Closes every open partition, writes the checkpoints and the clean-shutdown marker.
    pub fn close(mut self) -> Result<(), StorageError> {
        if !self.had_clean_shutdown {
            self.recover_unopened()?;
        }
        let partitions = std::mem::take(&mut self.partitions);
        for (tp, log) in partitions {
            let (recovery_point, log_start_offset) = (log.log_end_offset(), log.log_start_offset());
            log.close()?;
            self.recovery_points.insert(tp.clone(), recovery_point);
            self.log_start_offsets.insert(tp, log_start_offset);
        }
        self.checkpoint()?;
        self.dir.mark_clean_shutdown()
    }
}
