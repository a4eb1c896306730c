//! The log's side of its idempotent producers' state (`producer_state.rs`): Kafka's
//! `<offset>.snapshot` files (FORMAT.md §5.8) and the replay of batch headers after them.
//!
//! A snapshot holds the state as of the offset in its name. One is written at a clean close (at
//! the log end) with the checkpoint protocol: `.snapshot.tmp`, fsync, rename, directory fsync.
//! One is written at each roll (at the new segment's base offset) as `.snapshot.tmp` and renamed
//! on the append path, its file and directory synced by the roll's seal sync, off it (as Kafka
//! flushes it with the rolled segment: a small file's fsync can wait for a journal commit). It
//! is valid while the log below its offset is unchanged, so a truncation removes those above the
//! new end and starting over removes them all; retention and `delete_records` remove those below
//! the log start offset.
//!
//! At open (and after a truncation) the state is the newest snapshot at or below the log end that
//! decodes, plus every producer batch from its offset to the log end, headers only; without one,
//! every producer batch from the log start. A snapshot that does not decode is removed and the
//! next older one tried: it costs a longer replay, never a wrong state. Nothing here needs the
//! snapshots' durability for correctness (a lost one means a longer replay); the syncs only
//! keep replays short after a crash.

use std::path::Path;

use super::PartitionLog;
use super::producer_state::{ProducerBatchHeader, ProducerStateTable};
use crate::error::StorageError;
use crate::format::file_name::{SnapshotFileName, SnapshotFileState};
use crate::format::producer_snapshot;
use crate::io::{OpenMode, Storage, read_small_file, sync_dir, write_durably};
use crate::types::{Offset, TimestampMs};

/// How often a log forgets expired producers, at most (Kafka's default
/// `producer.id.expiration.check.interval.ms`): checked at open and before an append.
const PRODUCER_EXPIRATION_CHECK_INTERVAL_MS: i64 = 10 * 60 * 1000;

impl PartitionLog {
    /// Forgets the producers idle past `producer.id.expiration.ms` (`LogWriteMode`), when the
    /// last check is [`PRODUCER_EXPIRATION_CHECK_INTERVAL_MS`] old or there was none since open.
    pub(super) fn expire_producers(&mut self, now: TimestampMs) {
        let due = self.producers_expired_at.is_none_or(|checked| {
            now.0.saturating_sub(checked.0) >= PRODUCER_EXPIRATION_CHECK_INTERVAL_MS
        });
        if due {
            let expiration_ms = self.mode.producer_id_expiration_ms;
            let forgotten = self.producers.remove_expired(now, expiration_ms);
            if forgotten > 0 {
                tracing::debug!("{}: {forgotten} idle producers forgotten", self.topic_partition);
            }
            self.producers_expired_at = Some(now);
        }
    }

    /// The idempotent producers' state, as of the log end.
    pub fn producer_state(&self) -> &ProducerStateTable {
        &self.producers
    }

    /// Loads the state at open: removes leftover `.snapshot.tmp` files and the snapshots outside
    /// `[log start, log end]`, then takes the newest valid snapshot and replays after it.
    /// `dir_names`: the directory's names as the open listed them.
    pub(super) fn load_producer_state(&mut self, dir_names: &[String]) -> Result<(), StorageError> {
        let log_start_offset = self.log_start_offset;
        let log_end_offset = self.log_end_offset();
        let mut removed = false;
        let mut kept = Vec::new();
        for name in parse_snapshot_names(dir_names) {
            let stale = name.offset < log_start_offset || name.offset > log_end_offset;
            if name.state == SnapshotFileState::Writing || stale {
                remove(self.storage.as_ref(), &name.path_in(&self.dir))?;
                removed = true;
            } else {
                kept.push(name);
            }
        }
        if removed {
            sync_dir(self.storage.as_ref(), &self.dir)?;
        }
        self.rebuild_producer_state_from(kept)
    }

    /// Rebuilds the state from the newest valid snapshot at or below the log end and the batches
    /// after it (from the log start when there is none). A snapshot that does not decode is
    /// removed.
    pub(super) fn rebuild_producer_state(&mut self) -> Result<(), StorageError> {
        let names = snapshot_names(self.storage.as_ref(), &self.dir)?;
        self.rebuild_producer_state_from(names)
    }

    /// [`PartitionLog::rebuild_producer_state`] from the snapshots `names`.
    fn rebuild_producer_state_from(
        &mut self,
        names: Vec<SnapshotFileName>,
    ) -> Result<(), StorageError> {
        let log_end_offset = self.log_end_offset();
        let mut snapshots: Vec<Offset> = names
            .into_iter()
            .filter(|name| name.state == SnapshotFileState::Live && name.offset <= log_end_offset)
            .map(|name| name.offset)
            .collect();
        snapshots.sort_unstable();
        while let Some(offset) = snapshots.pop() {
            let path = SnapshotFileName::live(offset).path_in(&self.dir);
            let bytes = read_small_file(self.storage.as_ref(), &path)?;
            match producer_snapshot::decode(&bytes) {
                Ok(entries) => {
                    self.producers = ProducerStateTable::from_snapshot(&entries);
                    return self.replay_producers_from(offset);
                }
                Err(error) => {
                    tracing::warn!(
                        "{}: producer snapshot unreadable ({error}); removed, the state is rebuilt from an older one or the log",
                        path.display()
                    );
                    remove(self.storage.as_ref(), &path)?;
                }
            }
        }
        self.producers.clear();
        let from = self.log_start_offset;
        self.replay_producers_from(from)
    }

    /// Records in the table every producer batch whose last offset is `from` or later.
    fn replay_producers_from(&mut self, from: Offset) -> Result<(), StorageError> {
        if from >= self.log_end_offset() {
            return Ok(());
        }
        let first = self.segments.floor_index(from);
        let mut table = std::mem::take(&mut self.producers);
        let mut result = Ok(());
        for index in first..self.segments.len() {
            result = self.open_segment(index).and_then(|segment| {
                segment.for_each_header_from(from, |header| {
                    if let Some(producer) = ProducerBatchHeader::of(header) {
                        let last_offset = Offset(header.last_offset().max(0) as u64);
                        table.update(&producer, last_offset, TimestampMs(header.max_timestamp));
                    }
                })
            });
            if result.is_err() {
                break;
            }
        }
        self.producers = table;
        result
    }

    /// Writes the state as of the log end to `<log end>.snapshot` and returns its path. A failure
    /// fails the log, as any failed write of its files does.
    pub(super) fn write_producer_snapshot(
        &mut self,
        sync: SnapshotSync,
    ) -> Result<std::path::PathBuf, StorageError> {
        let name = SnapshotFileName::live(self.log_end_offset());
        let bytes = producer_snapshot::encode(&self.producers.to_snapshot());
        let result = write_snapshot_file(self.storage.as_ref(), &self.dir, name, &bytes, sync);
        self.fail_on(result)
    }

    /// Removes the snapshots `stale` names (by offset), unlinked at once: a snapshot that comes
    /// back after a crash is still true of its offset.
    pub(super) fn remove_producer_snapshots(
        &mut self,
        stale: impl Fn(Offset) -> bool,
    ) -> Result<(), StorageError> {
        let result = snapshot_names(self.storage.as_ref(), &self.dir).and_then(|names| {
            names
                .into_iter()
                .filter(|name| stale(name.offset))
                .try_for_each(|name| remove(self.storage.as_ref(), &name.path_in(&self.dir)))
        });
        self.fail_on(result)
    }
}

/// When a snapshot's file and name become durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SnapshotSync {
    /// Here: the file before its rename, the directory after (the checkpoint protocol).
    Now,
    /// With the seal sync of the roll that wrote it (`seal_sync.rs`): the file, then the
    /// directory, off the append path. Until then a crash may leave it missing or cut short
    /// under its name, which its CRC catches at open.
    WithSeal,
}

/// `bytes` as `name` in `dir`: written as `.snapshot.tmp`, renamed, synced per `sync`; returns the
/// path.
fn write_snapshot_file(
    storage: &dyn Storage,
    dir: &Path,
    name: SnapshotFileName,
    bytes: &[u8],
    sync: SnapshotSync,
) -> Result<std::path::PathBuf, StorageError> {
    let writing = name.writing().path_in(dir);
    let path = name.path_in(dir);
    match sync {
        SnapshotSync::Now => write_durably(storage, &writing, bytes)?,
        SnapshotSync::WithSeal => write_whole(storage, &writing, bytes)?,
    }
    storage
        .rename(&writing, &path)
        .map_err(|source| StorageError::io("rename", &writing, source))?;
    if sync == SnapshotSync::Now {
        sync_dir(storage, dir)?;
    }
    Ok(path)
}

/// Writes `bytes` as the whole of `path` (created if needed), without a sync.
fn write_whole(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let file = storage
        .open(path, OpenMode::CreateOrOpen)
        .map_err(|source| StorageError::io("create", path, source))?;
    file.set_length_bytes(0)
        .and_then(|()| file.write_all_at(bytes, 0))
        .map_err(|source| StorageError::io("write", path, source))
}

/// The snapshot files in `dir`, complete or not.
fn snapshot_names(storage: &dyn Storage, dir: &Path) -> Result<Vec<SnapshotFileName>, StorageError> {
    let names = storage
        .list_dir(dir)
        .map_err(|source| StorageError::io("list directory", dir, source))?;
    Ok(parse_snapshot_names(&names))
}

fn parse_snapshot_names(names: &[String]) -> Vec<SnapshotFileName> {
    names
        .iter()
        .filter_map(|name| SnapshotFileName::parse(name))
        .collect()
}

fn remove(storage: &dyn Storage, path: &Path) -> Result<(), StorageError> {
    storage
        .remove_file(path)
        .map_err(|source| StorageError::io("remove", path, source))
}
