//! A data directory: the partition directories of every topic, plus Kafka's log-directory files —
//! `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and the clean-shutdown marker
//! `.kafka_cleanshutdown` — and a `.lock` file that makes the directory exclusive to one opener.
//!
//! Partitions are opened lazily, on first use, so a directory with many partitions opens fast
//! and holds file descriptors and index maps only for the partitions in use. Whether the last
//! shutdown was clean is decided once, at open: the marker is removed then, so a crash at any
//! later point leaves a directory that the next open recovers.

use std::collections::BTreeMap;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::LogConfig;
use crate::error::{OpenError, PartitionError, StorageError};
use crate::failpoint::failpoint;
use crate::format::checkpoint;
use crate::format::file_name::{
    CHECKPOINT_TMP_SUFFIX, CLEAN_SHUTDOWN_MARKER, LOCK_FILE, LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT, parse_partition_dir_name, partition_dir_name,
};
use crate::io::{OpenMode, Storage};
use crate::log::{LogOpenOptions, PartitionLog, RecoveryReport};
use crate::types::{Offset, PartitionId, TimestampMs, TopicName, TopicPartition};

/// Contents of the clean-shutdown marker (Kafka's `CleanShutdownFileHandler` JSON).
pub(crate) const CLEAN_SHUTDOWN_CONTENT: &str = "{\"version\":0,\"brokerEpoch\":-1}";

/// An open data directory.
#[derive(Debug)]
pub struct LogDir {
    root: PathBuf,
    storage: Arc<dyn Storage>,
    default_config: LogConfig,
    had_clean_shutdown: bool,
    recovery_points: BTreeMap<TopicPartition, Offset>,
    log_start_offsets: BTreeMap<TopicPartition, Offset>,
    partitions: BTreeMap<TopicPartition, PartitionLog>,
    recovery_reports: BTreeMap<TopicPartition, RecoveryReport>,
    _lock: File,
}

impl LogDir {
    /// Opens (creating if needed) the data directory at `root`, taking its lock.
    pub fn open(
        root: &Path,
        storage: Arc<dyn Storage>,
        default_config: LogConfig,
    ) -> Result<LogDir, OpenError> {
        default_config.validate()?;
        storage
            .create_dir_all(root)
            .map_err(|source| StorageError::io("create directory", root, source))?;
        let lock = lock_dir(root)?;
        let marker = root.join(CLEAN_SHUTDOWN_MARKER);
        let had_clean_shutdown = storage.exists(&marker);
        let recovery_points =
            read_checkpoint(storage.as_ref(), &root.join(RECOVERY_POINT_CHECKPOINT))?;
        let log_start_offsets =
            read_checkpoint(storage.as_ref(), &root.join(LOG_START_OFFSET_CHECKPOINT))?;
        if had_clean_shutdown {
            storage
                .remove_file(&marker)
                .map_err(|source| StorageError::io("remove", &marker, source))?;
            sync_dir(storage.as_ref(), root)?;
        }
        Ok(LogDir {
            root: root.to_owned(),
            storage,
            default_config,
            had_clean_shutdown,
            recovery_points,
            log_start_offsets,
            partitions: BTreeMap::new(),
            recovery_reports: BTreeMap::new(),
            _lock: lock,
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
        let storage = self.storage.as_ref();
        write_checkpoint(
            storage,
            &self.root,
            RECOVERY_POINT_CHECKPOINT,
            &self.recovery_points,
        )?;
        write_checkpoint(
            storage,
            &self.root,
            LOG_START_OFFSET_CHECKPOINT,
            &self.log_start_offsets,
        )
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
        let marker = self.root.join(CLEAN_SHUTDOWN_MARKER);
        write_durably(
            self.storage.as_ref(),
            &marker,
            CLEAN_SHUTDOWN_CONTENT.as_bytes(),
        )?;
        sync_dir(self.storage.as_ref(), &self.root)
    }
}

pub(crate) fn lock_dir(root: &Path) -> Result<File, OpenError> {
    let path = root.join(LOCK_FILE);
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|source| StorageError::io("open", &path, source))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(OpenError::Locked {
            dir: root.to_owned(),
        }),
        Err(TryLockError::Error(source)) => Err(StorageError::io("lock", &path, source).into()),
    }
}

/// Reads a checkpoint; a missing file is empty. A corrupt one is also treated as empty, which is
/// safe: every partition is then recovered from its first segment.
/// Files read whole (checkpoints, the topic registry) are at most this large.
const SMALL_FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Reads a small metadata file whole, at most `SMALL_FILE_BYTES_MAX` bytes of it.
pub(crate) fn read_small_file(storage: &dyn Storage, path: &Path) -> Result<Vec<u8>, StorageError> {
    let file = storage
        .open(path, OpenMode::Existing)
        .map_err(|source| StorageError::io("open", path, source))?;
    let length = file
        .length_bytes()
        .map_err(|source| StorageError::io("stat", path, source))?;
    let mut bytes = vec![0u8; length.min(SMALL_FILE_BYTES_MAX) as usize];
    let read = file
        .read_at(&mut bytes, 0)
        .map_err(|source| StorageError::io("read", path, source))?;
    bytes.truncate(read);
    Ok(bytes)
}

pub(crate) fn read_checkpoint(
    storage: &dyn Storage,
    path: &Path,
) -> Result<BTreeMap<TopicPartition, Offset>, StorageError> {
    if !storage.exists(path) {
        return Ok(BTreeMap::new());
    }
    let bytes = read_small_file(storage, path)?;
    Ok(checkpoint::decode_offsets(&bytes).unwrap_or_default())
}

/// Kafka's checkpoint protocol: write `<file>.tmp`, fsync it, rename over `<file>`, fsync the dir.
pub(crate) fn write_checkpoint(
    storage: &dyn Storage,
    root: &Path,
    name: &str,
    offsets: &BTreeMap<TopicPartition, Offset>,
) -> Result<(), StorageError> {
    let path = root.join(name);
    let tmp = root.join(format!("{name}{CHECKPOINT_TMP_SUFFIX}"));
    write_durably(
        storage,
        &tmp,
        checkpoint::encode_offsets(offsets).as_bytes(),
    )?;
    failpoint!("checkpoint.after_tmp_write");
    storage
        .rename(&tmp, &path)
        .map_err(|source| StorageError::io("rename", &tmp, source))?;
    failpoint!("checkpoint.after_rename");
    sync_dir(storage, root)
}

pub(crate) fn write_durably(
    storage: &dyn Storage,
    path: &Path,
    bytes: &[u8],
) -> Result<(), StorageError> {
    let file = storage
        .open(path, OpenMode::CreateOrOpen)
        .map_err(|source| StorageError::io("create", path, source))?;
    file.set_length_bytes(0)
        .and_then(|()| file.write_all_at(bytes, 0))
        .and_then(|()| file.sync_all())
        .map_err(|source| StorageError::io("write", path, source))
}

pub(crate) fn sync_dir(storage: &dyn Storage, dir: &Path) -> Result<(), StorageError> {
    storage
        .sync_dir(dir)
        .map_err(|source| StorageError::io("fsync directory", dir, source))
}
