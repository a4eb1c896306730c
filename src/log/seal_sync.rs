//! Deferred seal syncs: a roll leaves the sync of the segment it seals to the log's owner.
//!
//! The sync of a sealed segment (its `.log`, both indexes, and the directory that names the new
//! segment's files) writes every dirty page of it at once — up to a whole segment of them
//! without a sync policy. As Kafka schedules the flush of a rolled segment instead of running it
//! in the append, a roll only trims the indexes and records an [`UnsyncedSeal`], which the owner
//! (the engine's shard) takes, syncs off the append path and reports with
//! [`PartitionLog::mark_seal_synced`].
//!
//! Invariants:
//! - the recovery point moves past a sealed segment only once its seal sync succeeded;
//! - the owner reports a log's seal syncs before any later sync of the same log (the engine sends
//!   both to the same sync thread, in order), so an acknowledged durable append in a newer segment
//!   implies every older segment was synced;
//! - recovery may therefore find invalid bytes at the tail of a
//!   sealed segment at or above the recovery point (a crash before its seal sync finished), or
//!   the segment ending short of the next one. It cuts them and, when the segment then ends short
//!   of the next one, deletes the later segments, which can hold no acknowledged durable data
//!   (`open.rs`); a cut that leaves it ending where the next one starts removed no batch, and the
//!   later segments stay. A segment the cleaner rewrote was synced before its swap, and invalid
//!   bytes followed by valid batches, or below the recovery point, are damage: those fail the
//!   open;
//! - a restart forgets a seal sync that failed. If the segment's batches had been synced before
//!   its roll, the recovery point is already at its end and it loads as trusted, though the
//!   device may still hold the space its seal cut: an unclean open therefore sets that segment's
//!   length again and syncs it (`open.rs`) before anything after it is acknowledged;
//! - [`PartitionLog::flush`], [`PartitionLog::close`] and [`PartitionLog::truncate_to`] first
//!   sync, on the caller's thread, any seal the owner has not taken yet.

use std::path::PathBuf;
use std::sync::Arc;

use super::PartitionLog;
use crate::error::StorageError;
use crate::index::mmap::sync_index_file;
use crate::io::{OpenMode, Storage, StorageFile};
use crate::segment::Segment;
use crate::types::Offset;

/// A sealed segment whose sync is due: its `.log` (the shared descriptor, so the sync may outlive
/// the segment's place in the log), its indexes, the producer snapshot the roll wrote and the
/// partition directory, which names the segment and snapshot created after it.
#[derive(Debug, Clone)]
pub struct UnsyncedSeal {
    pub log_file: Arc<dyn StorageFile>,
    pub log_path: PathBuf,
    pub index_paths: [PathBuf; 2],
    pub dir: PathBuf,
    /// The sealed segment's end: what its sync makes durable.
    pub through: Offset,
    /// The producer snapshot written at the roll (`producers.rs`), synced before the directory.
    pub snapshot_path: Option<PathBuf>,
}

impl UnsyncedSeal {
    pub(super) fn of(segment: &Segment, dir: PathBuf) -> UnsyncedSeal {
        UnsyncedSeal {
            log_file: segment.shared_log_file(),
            log_path: segment.log_path().to_owned(),
            index_paths: [
                segment.offset_index().path().to_owned(),
                segment.time_index().path().to_owned(),
            ],
            dir,
            through: segment.next_offset(),
            snapshot_path: None,
        }
    }

    /// Syncs everything: the `.log`, then [`UnsyncedSeal::sync_indexes_and_dir`].
    pub fn sync(&self, storage: &dyn Storage) -> Result<(), StorageError> {
        self.log_file
            .sync_data()
            .map_err(|source| StorageError::io("fdatasync", &self.log_path, source))?;
        self.sync_indexes_and_dir(storage)
    }

    /// Syncs the indexes and the producer snapshot (one deleted since, with its segment, has
    /// nothing left to sync) and the directory. For an owner that syncs the `.log` with other
    /// files.
    pub fn sync_indexes_and_dir(&self, storage: &dyn Storage) -> Result<(), StorageError> {
        for path in &self.index_paths {
            sync_index_file(path)?;
        }
        if let Some(path) = &self.snapshot_path {
            sync_snapshot_file(storage, path)?;
        }
        storage
            .sync_dir(&self.dir)
            .map_err(|source| StorageError::io("fsync directory", &self.dir, source))
    }
}

/// Syncs the snapshot file at `path` whole, unless it is gone.
fn sync_snapshot_file(storage: &dyn Storage, path: &std::path::Path) -> Result<(), StorageError> {
    match storage.open(path, OpenMode::Existing) {
        Ok(file) => file
            .sync_all()
            .map_err(|source| StorageError::io("fsync", path, source)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StorageError::io("open", path, source)),
    }
}

impl PartitionLog {
    /// The seals rolls left unsynced since the last call, oldest first.
    pub fn take_unsynced_seals(&mut self) -> Vec<UnsyncedSeal> {
        std::mem::take(&mut self.unsynced_seals)
    }

    /// Records the outcome of a taken seal's sync: the recovery point moves to its end, or the
    /// log fails (nothing is acknowledged after a failed sync).
    pub fn mark_seal_synced(
        &mut self,
        through: Offset,
        result: Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        self.record_sync(through, result)?;
        while self
            .pending_seal_ends
            .front()
            .is_some_and(|end| *end <= through)
        {
            self.pending_seal_ends.pop_front();
        }
        Ok(())
    }

    /// Whether the sealed segment ending at `next_offset` had its seal sync reported: its files
    /// are on the device as sealed.
    pub(super) fn seal_synced(&self, next_offset: Offset) -> bool {
        self.pending_seal_ends
            .front()
            .is_none_or(|first_pending| next_offset < *first_pending)
    }

    /// Syncs, here, the seals not taken yet, so that a sync of the active segment never moves
    /// the recovery point past an unsynced one.
    pub(super) fn sync_untaken_seals(&mut self) -> Result<(), StorageError> {
        for seal in std::mem::take(&mut self.unsynced_seals) {
            let result = seal.sync(self.storage.as_ref());
            self.mark_seal_synced(seal.through, result)?;
        }
        Ok(())
    }
}
