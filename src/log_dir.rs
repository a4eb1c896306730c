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
    /// The generation of the checkpoints last read or written.
    checkpoint_generation: u64,
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
        let marker_found = storage.exists(&marker);
        let checkpoints = read_open_checkpoints(storage.as_ref(), root)?;
        let had_clean_shutdown = marker_found && checkpoints.trusted;
        if marker_found {
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
            recovery_points: checkpoints.recovery_points,
            log_start_offsets: checkpoints.log_start_offsets,
            checkpoint_generation: checkpoints.generation,
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
        // Advanced once written: a failed write is retried over the same (older) copy.
        let generation = self.checkpoint_generation + 1;
        write_checkpoint(
            storage,
            &self.root,
            RECOVERY_POINT_CHECKPOINT,
            generation,
            &self.recovery_points,
        )?;
        write_checkpoint(
            storage,
            &self.root,
            LOG_START_OFFSET_CHECKPOINT,
            generation,
            &self.log_start_offsets,
        )?;
        self.checkpoint_generation = generation;
        Ok(())
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

/// What the recovery-point and log-start-offset checkpoints say at open.
#[derive(Debug)]
pub(crate) struct OpenCheckpoints {
    pub recovery_points: BTreeMap<TopicPartition, Offset>,
    pub log_start_offsets: BTreeMap<TopicPartition, Offset>,
    /// The newest generation read (the next write is one more).
    pub generation: u64,
    /// False when either checkpoint had no valid copy: then every partition opens through full
    /// recovery, whatever the clean-shutdown marker says.
    pub trusted: bool,
}

/// Reads both checkpoints; when one has copies and none is valid, warns once, naming what may
/// reappear, and leaves the partitions to full recovery.
pub(crate) fn read_open_checkpoints(
    storage: &dyn Storage,
    root: &Path,
) -> Result<OpenCheckpoints, StorageError> {
    let recovery = read_checkpoint(storage, root, RECOVERY_POINT_CHECKPOINT)?;
    let log_start = read_checkpoint(storage, root, LOG_START_OFFSET_CHECKPOINT)?;
    let trusted = recovery.lost.is_none() && log_start.lost.is_none();
    if !trusted {
        let causes: Vec<&str> = [&recovery.lost, &log_start.lost]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        log::warn!(
            "{}: no valid checkpoint copy ({}); every partition opens through full recovery from \
             its first segment, and records that retention or delete_records removed from a \
             partition's first segment may reappear",
            root.display(),
            causes.join("; ")
        );
    }
    Ok(OpenCheckpoints {
        generation: recovery.generation.max(log_start.generation),
        recovery_points: recovery.offsets,
        log_start_offsets: log_start.offsets,
        trusted,
    })
}

/// A checkpoint as read at open: the offsets of its newest valid copy (FORMAT.md § Checkpoints).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointRead {
    pub offsets: BTreeMap<TopicPartition, Offset>,
    /// The copy's generation (0 with no copy).
    pub generation: u64,
    /// Why no copy could be used, when copies exist and none is valid: `offsets` is then
    /// empty, and the caller must not trust what the checkpoint held.
    pub lost: Option<String>,
}

/// Reads checkpoint `name` in `root` ([`choose_checkpoint`]). Only I/O errors fail; a
/// checkpoint that cannot be used is reported in [`CheckpointRead::lost`].
pub fn read_checkpoint(
    storage: &dyn Storage,
    root: &Path,
    name: &str,
) -> Result<CheckpointRead, StorageError> {
    read_checkpoint_with(name, |file| {
        let path = root.join(file);
        match storage.exists(&path) {
            true => Ok(Some(read_small_file(storage, &path)?)),
            false => Ok(None),
        }
    })
}

/// Checkpoint `name` from the files `read` returns by name (`None`: no such file): its copies,
/// else Kafka's file ([`choose_checkpoint`]). For readers with their own file access (the tools).
pub fn read_checkpoint_with<E>(
    name: &str,
    mut read: impl FnMut(&str) -> Result<Option<Vec<u8>>, E>,
) -> Result<CheckpointRead, E> {
    let mut copies = Vec::with_capacity(2);
    for copy in checkpoint_copy_names(name) {
        if let Some(bytes) = read(&copy)? {
            copies.push((copy, bytes));
        }
    }
    let kafka_file = match copies.is_empty() {
        true => read(name)?.map(|bytes| (name.to_owned(), bytes)),
        false => None,
    };
    Ok(choose_checkpoint(&copies, kafka_file))
}

/// What a checkpoint holds, from the contents of its copies found (name, bytes): the valid copy
/// of the highest generation; with no copy at all (a new directory, or one Kafka wrote), Kafka's
/// own file, if it decodes.
pub fn choose_checkpoint(
    copies: &[(String, Vec<u8>)],
    kafka_file: Option<(String, Vec<u8>)>,
) -> CheckpointRead {
    let mut newest: Option<(u64, BTreeMap<TopicPartition, Offset>)> = None;
    let mut problems = Vec::new();
    for (name, bytes) in copies {
        match checkpoint::decode_copy(bytes) {
            Ok((generation, offsets)) => {
                if newest
                    .as_ref()
                    .is_none_or(|(newest, _)| generation > *newest)
                {
                    newest = Some((generation, offsets));
                }
            }
            Err(error) => problems.push(format!("{name}: {error}")),
        }
    }
    match (newest, kafka_file) {
        (Some((generation, offsets)), _) => CheckpointRead {
            offsets,
            generation,
            lost: None,
        },
        (None, _) if !problems.is_empty() => CheckpointRead {
            lost: Some(problems.join("; ")),
            ..CheckpointRead::default()
        },
        (None, None) => CheckpointRead::default(),
        (None, Some((name, bytes))) => match checkpoint::decode_offsets(&bytes) {
            Ok(offsets) => CheckpointRead {
                offsets,
                ..CheckpointRead::default()
            },
            Err(error) => CheckpointRead {
                lost: Some(format!("{name}: {error}")),
                ..CheckpointRead::default()
            },
        },
    }
}

/// The names of checkpoint `name`'s two copies; generation `g` goes to copy `g % 2`.
pub fn checkpoint_copy_names(name: &str) -> [String; 2] {
    [format!("{name}.0"), format!("{name}.1")]
}

/// Writes checkpoint `name` as generation `generation`: its copy first (over the older copy,
/// synced; the newer one stays valid if this write is cut short), then Kafka's own file with
/// Kafka's protocol — write `<file>.tmp`, fsync it, rename over `<file>`, fsync the directory.
pub(crate) fn write_checkpoint(
    storage: &dyn Storage,
    root: &Path,
    name: &str,
    generation: u64,
    offsets: &BTreeMap<TopicPartition, Offset>,
) -> Result<(), StorageError> {
    let [even, odd] = checkpoint_copy_names(name);
    let copy = root.join(if generation.is_multiple_of(2) {
        even
    } else {
        odd
    });
    write_durably(
        storage,
        &copy,
        checkpoint::encode_copy(generation, offsets).as_bytes(),
    )?;
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
    // Also makes a new copy's name durable.
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
