//! The data directory's own files, owned by one opener: the `.lock` that makes the directory
//! exclusive, the clean-shutdown marker `.kafka_cleanshutdown`, and the checkpoints
//! (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
//! `cleaner-offset-checkpoint`, each with its two checksummed copies). The topic registry beside
//! them is [`super::topic_registry`]'s.
//!
//! Whether the last shutdown was clean is decided once, at open: the marker is removed then, so a
//! crash at any later point leaves a directory that the next open recovers.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{OpenError, StorageError};
use crate::failpoint::failpoint;
use crate::format::checkpoint::{
    self, CheckpointRead, checkpoint_copy_names, read_checkpoint_with,
};
use crate::format::file_name::{
    CHECKPOINT_TMP_SUFFIX, CLEAN_SHUTDOWN_MARKER, CLEANER_OFFSET_CHECKPOINT, LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
};
use crate::io::{Storage, lock_exclusive, read_small_file, sync_dir, write_durably};
use crate::types::{Offset, TopicPartition};

/// Contents of the clean-shutdown marker (Kafka's `CleanShutdownFileHandler` JSON).
const CLEAN_SHUTDOWN_CONTENT: &str = "{\"version\":0,\"brokerEpoch\":-1}";

/// Offsets per partition, as a checkpoint holds them.
pub(crate) type PartitionOffsets = BTreeMap<TopicPartition, Offset>;

/// An open data directory's own files; the lock is held until [`DataDir::release`] or drop.
#[derive(Debug)]
pub(crate) struct DataDir {
    root: PathBuf,
    storage: Arc<dyn Storage>,
    lock: Option<File>,
    /// The generation of the checkpoints last read or written.
    generation: u64,
}

/// What the data directory held at open.
#[derive(Debug)]
pub(crate) struct DirAtOpen {
    /// The marker was there and both checkpoints were readable: partitions may trust their
    /// files up to the recovery point without a scan.
    pub had_clean_shutdown: bool,
    pub recovery_points: PartitionOffsets,
    pub log_start_offsets: PartitionOffsets,
    /// The cleaner's checkpoint: where each compacted partition's dirty part begins.
    pub first_dirty_offsets: PartitionOffsets,
}

impl DataDir {
    /// Opens (creating if needed) the data directory at `root`: takes its lock, reads the
    /// checkpoints and removes the clean-shutdown marker.
    pub(crate) fn open(
        root: &Path,
        storage: Arc<dyn Storage>,
    ) -> Result<(DataDir, DirAtOpen), OpenError> {
        crate::segment::create_dir_all(storage.as_ref(), root)?;
        let lock = lock_dir(root)?;
        let marker_found = take_clean_shutdown_marker(storage.as_ref(), root)?;
        let read = read_open_checkpoints(storage.as_ref(), root)?;
        let cleaner = read_checkpoint(storage.as_ref(), root, CLEANER_OFFSET_CHECKPOINT)?;
        if let Some(cause) = &cleaner.lost {
            tracing::warn!(
                "{}: no valid cleaner checkpoint copy ({cause}); the cleaner cleans every \
                 compacted partition from its start again",
                root.display()
            );
        }
        let data_dir = DataDir {
            root: root.to_owned(),
            storage,
            lock: Some(lock),
            generation: read.generation.max(cleaner.generation),
        };
        let at_open = DirAtOpen {
            had_clean_shutdown: marker_found && read.trusted,
            recovery_points: read.recovery_points,
            log_start_offsets: read.log_start_offsets,
            first_dirty_offsets: cleaner.offsets,
        };
        Ok((data_dir, at_open))
    }

    /// Writes the recovery-point and log-start-offset checkpoints, and the cleaner's when given,
    /// as the next generation. The generation advances only once all are written: a failed
    /// write is retried over the same (older) copies.
    pub(crate) fn write_checkpoints(
        &mut self,
        recovery_points: &PartitionOffsets,
        log_start_offsets: &PartitionOffsets,
        first_dirty_offsets: Option<&PartitionOffsets>,
    ) -> Result<(), StorageError> {
        let generation = self.generation + 1;
        let files = [
            (RECOVERY_POINT_CHECKPOINT, Some(recovery_points)),
            (LOG_START_OFFSET_CHECKPOINT, Some(log_start_offsets)),
            (CLEANER_OFFSET_CHECKPOINT, first_dirty_offsets),
        ];
        for (name, offsets) in files {
            if let Some(offsets) = offsets {
                write_checkpoint(self.storage.as_ref(), &self.root, name, generation, offsets)?;
            }
        }
        self.generation = generation;
        Ok(())
    }

    /// Writes the clean-shutdown marker: everything in the directory is as closed.
    pub(crate) fn mark_clean_shutdown(&self) -> Result<(), StorageError> {
        let storage = self.storage.as_ref();
        let marker = self.root.join(CLEAN_SHUTDOWN_MARKER);
        write_durably(storage, &marker, CLEAN_SHUTDOWN_CONTENT.as_bytes())?;
        sync_dir(storage, &self.root)
    }

    /// Releases the directory's lock; nothing is written through this opener afterwards.
    pub(crate) fn release(&mut self) {
        self.lock.take();
    }
}

/// Takes the data directory's exclusive lock (`.lock`, `flock`), held while the file is open.
pub(crate) fn lock_dir(root: &Path) -> Result<File, OpenError> {
    lock_exclusive(&root.join(LOCK_FILE))?.ok_or_else(|| OpenError::Locked {
        dir: root.to_owned(),
    })
}

/// Notes whether the last shutdown was clean and removes the marker, so that any crash from now
/// on is seen as unclean.
fn take_clean_shutdown_marker(storage: &dyn Storage, root: &Path) -> Result<bool, StorageError> {
    let marker = root.join(CLEAN_SHUTDOWN_MARKER);
    if !storage.exists(&marker) {
        return Ok(false);
    }
    storage
        .remove_file(&marker)
        .map_err(|source| StorageError::io("remove", &marker, source))?;
    sync_dir(storage, root)?;
    Ok(true)
}

/// What the recovery-point and log-start-offset checkpoints say at open.
#[derive(Debug)]
struct OpenCheckpoints {
    recovery_points: PartitionOffsets,
    log_start_offsets: PartitionOffsets,
    /// The newest generation read (the next write is one more).
    generation: u64,
    /// False when either checkpoint had no valid copy: then every partition opens through full
    /// recovery, whatever the clean-shutdown marker says.
    trusted: bool,
}

/// Reads both checkpoints; when one has copies and none is valid, warns once, naming what may
/// reappear, and leaves the partitions to full recovery.
fn read_open_checkpoints(
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
        tracing::warn!(
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

/// Reads checkpoint `name` in `root` ([`choose_checkpoint`]). Only I/O errors fail; a
/// checkpoint that cannot be used is reported in [`CheckpointRead::lost`].
pub(crate) fn read_checkpoint(
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

/// Writes checkpoint `name` as generation `generation`: its copy first (over the older copy,
/// synced; the newer one stays valid if this write is cut short), then Kafka's own file with
/// Kafka's protocol — write `<file>.tmp`, fsync it, rename over `<file>`, fsync the directory.
fn write_checkpoint(
    storage: &dyn Storage,
    root: &Path,
    name: &str,
    generation: u64,
    offsets: &PartitionOffsets,
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
