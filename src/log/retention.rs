//! Applying retention to one log (Kafka's `deleteOldSegments` and `LocalLog.removeAndDeleteSegments`):
//! the plan comes from [`crate::cleaner::retention_plan`]; here the segments leave the list first (no
//! reader can reach them afterwards), their files are renamed `.deleted`, and the files are
//! unlinked once `file.delete.delay.ms` has passed.
//!
//! Segments go oldest first; a failed rename takes the log offline (the segments not renamed keep
//! their live names), so the live files on disk are always a suffix of the log, and a reopen
//! finds the log before, after, or with only its oldest segments gone — never a gap. A failed
//! unlink is retried after [`RETRY_AFTER_FAILURE_MS`]. A `.deleted` file is unlinked
//! only once the directory sync after its rename succeeded, and no segment is renamed while an
//! earlier rename's directory sync is outstanding, so that a power cut cannot keep a later
//! rename and lose an earlier one.
//!
//! That directory sync is the owner's, as a roll's seal sync is (`seal_sync.rs`): the renames leave it due, the owner takes it
//! ([`PartitionLog::take_renames_sync`]), syncs the directory off its request path and reports
//! ([`PartitionLog::mark_renames_synced`]); a failure fails the log.
//!
//! Reads never hold a segment across a deletion: a read runs to completion on the owning thread
//! and returns owned bytes, so a segment out of the list has no reader left, and bytes already
//! returned stay valid after its files are gone.

use std::path::PathBuf;

use super::PartitionLog;
use crate::cleaner::retention_plan::{RetentionConfig, RetentionPlan, plan_retention};
use crate::config::CleanupPolicy;
use crate::error::StorageError;
use crate::failpoint::failpoint;
use crate::types::{Offset, TimestampMs};

/// What one retention pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// Segments taken out of the log (their files wait for `file.delete.delay.ms`).
    pub segments_deleted: usize,
    /// Bytes of those segments.
    pub bytes_deleted: u64,
    /// The log start offset after the pass.
    pub log_start_offset: Offset,
    /// The active segment was expired too: a new, empty one was rolled first.
    pub rolled: bool,
}

/// After a failed rename or unlink, how long until the next attempt (so that a storage that
/// keeps failing is not retried in a busy loop).
const RETRY_AFTER_FAILURE_MS: i64 = 1_000;

/// A segment out of the list whose files wait for `file.delete.delay.ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PendingDeletion {
    base_offset: Offset,
    due: TimestampMs,
    state: DeletionState,
}

/// How far a pending segment's files are from being unlinked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeletionState {
    /// Its files may still have their live names (not renamed yet, or a rename failed).
    Live,
    /// Renamed `.deleted`; no directory sync has covered the renames yet.
    Renamed,
    /// Renamed, and the renames are durable: the files may be unlinked once due.
    Durable,
}

/// The directory sync that makes `.deleted` renames durable, which the owner runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum RenamesSync {
    /// No rename waits for a directory sync.
    #[default]
    None,
    /// Renames wait; the owner has not taken their sync yet.
    Due,
    /// The owner took the sync and has not reported it yet.
    Taken,
}

impl PartitionLog {
    /// Deletes the segments that retention selects at time `now` (log start offset, then
    /// `retention.bytes` and `retention.ms` when `cleanup.policy` includes `delete`).
    #[tracing::instrument(name = "retention", level = "info", skip_all,
        fields(topic = %self.topic_partition.topic, partition = self.topic_partition.partition))]
    pub fn apply_retention(&mut self, now: TimestampMs) -> Result<RetentionOutcome, StorageError> {
        self.check_not_failed()?;
        self.finish_pending_renames(now)?;
        let plan = self.plan_retention(now)?;
        let mut outcome = RetentionOutcome {
            log_start_offset: self.log_start_offset,
            ..RetentionOutcome::default()
        };
        if plan.delete_count == 0 {
            return Ok(outcome);
        }
        if plan.roll_first {
            self.roll(now)?;
            outcome.rolled = true;
        }
        let (segments_deleted, bytes_deleted) =
            self.delete_leading_segments(plan.delete_count, now)?;
        outcome.segments_deleted = segments_deleted;
        outcome.bytes_deleted = bytes_deleted;
        outcome.log_start_offset = self.log_start_offset;
        Ok(outcome)
    }

    fn plan_retention(&self, now: TimestampMs) -> Result<RetentionPlan, StorageError> {
        let facts = self
            .segments
            .slots()
            .iter()
            .map(super::segments::SegmentSlot::retention_facts)
            .collect::<Result<Vec<_>, _>>()?;
        let config = RetentionConfig {
            delete_enabled: self.config.cleanup_policy != CleanupPolicy::Compact,
            retention_ms: self.config.retention_ms,
            retention_bytes: self.config.retention_bytes,
        };
        Ok(plan_retention(
            &facts,
            self.log_start_offset.0,
            &config,
            now.0,
        ))
    }

    /// Takes the first `count` segments out of the list (never the active one), moves the log
    /// start offset to the first remaining segment if it was below, and renames their files
    /// `.deleted` for unlinking after `file.delete.delay.ms`. Returns (segments, bytes) deleted.
    ///
    /// When a rename fails, that segment and the later ones stay pending with their live names
    /// (renaming a later one would leave a gap for a reopen) and are renamed first next time.
    pub(super) fn delete_leading_segments(
        &mut self,
        count: usize,
        now: TimestampMs,
    ) -> Result<(usize, u64), StorageError> {
        // An older rename that fails again stops the call before any segment leaves the list.
        self.finish_pending_renames(now)?;
        let removed = self.segments.drain_front(count);
        let first_remaining = self.segments.slots()[0].base_offset();
        self.log_start_offset = self.log_start_offset.max(first_remaining);
        let log_start_offset = self.log_start_offset;
        self.remove_producer_snapshots(|snapshot| snapshot < log_start_offset)?;
        let delay_ms = i64::try_from(self.config.file_delete_delay_ms).unwrap_or(i64::MAX);
        let due = TimestampMs(now.0.saturating_add(delay_ms));
        let segments_deleted = removed.len();
        let mut bytes_deleted = 0;
        // Dropping a slot closes its segment; its files are renamed below, by name.
        for slot in removed {
            bytes_deleted += slot.size_bytes();
            self.pending_deletions.push(PendingDeletion {
                base_offset: slot.base_offset(),
                due,
                state: DeletionState::Live,
            });
        }
        self.finish_pending_renames(now)?;
        Ok((segments_deleted, bytes_deleted))
    }

    /// Renames `.deleted`, oldest first, the files of pending segments that still have their live
    /// names, then makes the renames durable (a directory sync, or one due to the owner); stops
    /// at the first failure (and retries no sooner than `RETRY_AFTER_FAILURE_MS` from `now`).
    /// Renames nothing while an earlier rename's directory sync is outstanding.
    pub fn finish_pending_renames(&mut self, now: TimestampMs) -> Result<(), StorageError> {
        let is_live = |pending: &PendingDeletion| pending.state == DeletionState::Live;
        if self.renames_sync != RenamesSync::None || !self.pending_deletions.iter().any(is_live) {
            return Ok(());
        }
        self.pending_deletions
            .sort_by_key(|pending| pending.base_offset);
        let mut failure = None;
        let mut renamed_any = false;
        for pending in self.pending_deletions.iter_mut().filter(|p| is_live(p)) {
            if failure.is_none() {
                let rename = || {
                    failpoint!("retention.before_rename");
                    crate::segment::rename_files_to_deleted(
                        self.storage.as_ref(),
                        &self.dir,
                        pending.base_offset,
                    )
                };
                match rename() {
                    Ok(()) => {
                        pending.state = DeletionState::Renamed;
                        renamed_any = true;
                    }
                    Err(error) => failure = Some(error),
                }
            }
            if pending.state == DeletionState::Live {
                pending.due = pending.due.max(retry_at(now));
            }
        }
        if renamed_any {
            // The owner syncs the directory (`take_renames_sync`).
            self.renames_sync = RenamesSync::Due;
        }
        match failure {
            // Which name the device holds is unknown: the log goes offline, as after a failed sync.
            Some(error) => self.fail_on(Err(error)),
            None => Ok(()),
        }
    }

    /// Makes every segment that left the log `.deleted` durably, here: renames those that still
    /// have their live names and syncs the directory, also for renames whose sync the owner has
    /// not taken. `false` when the owner has taken that sync and not reported it yet: then not
    /// now.
    ///
    /// A compaction's swap comes first to this: it makes the cleaner's removals durable, and a
    /// segment that left the log below its start but could still be found after a crash (the
    /// log start offset is checkpointed lazily) would then serve values beside the cleaned
    /// segments whose tombstone is gone (fuzz finding S10).
    pub(super) fn settle_deletions(&mut self, now: TimestampMs) -> Result<bool, StorageError> {
        if self.renames_sync == RenamesSync::Taken {
            return Ok(false);
        }
        if self.renames_sync == RenamesSync::Due {
            self.sync_renames_here()?;
        }
        self.finish_pending_renames(now)?;
        if self.renames_sync == RenamesSync::Due {
            self.sync_renames_here()?;
        }
        Ok(self
            .pending_deletions
            .iter()
            .all(|pending| pending.state == DeletionState::Durable))
    }

    fn sync_renames_here(&mut self) -> Result<(), StorageError> {
        failpoint!("retention.before_dir_sync");
        self.sync_dir()?;
        self.renames_sync = RenamesSync::None;
        self.mark_renames_durable();
        Ok(())
    }

    fn mark_renames_durable(&mut self) {
        for pending in &mut self.pending_deletions {
            if pending.state == DeletionState::Renamed {
                pending.state = DeletionState::Durable;
            }
        }
    }

    /// The directory whose sync `.deleted` renames wait for, if its sync is due and the owner
    /// has not taken it yet. Report the outcome with
    /// [`PartitionLog::mark_renames_synced`].
    pub fn take_renames_sync(&mut self) -> Option<PathBuf> {
        if self.renames_sync != RenamesSync::Due {
            return None;
        }
        self.renames_sync = RenamesSync::Taken;
        Some(self.dir.clone())
    }

    /// Records the outcome of a taken renames sync: the renamed files may be unlinked once due,
    /// or the log fails (which directory entries reached the device is unknown).
    pub fn mark_renames_synced(
        &mut self,
        result: Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        self.renames_sync = RenamesSync::None;
        match result {
            Ok(()) => {
                self.mark_renames_durable();
                Ok(())
            }
            Err(error) => self.fail_on(Err(error)),
        }
    }

    /// Unlinks the `.deleted` files whose delay has passed (first renaming any whose rename
    /// failed earlier, and syncing the directory if renames wait for a sync the owner has not
    /// taken). Returns how many segments' files went. A segment whose unlink fails stays pending,
    /// due again after `RETRY_AFTER_FAILURE_MS`; the first error is returned after the other
    /// due segments were tried.
    pub fn delete_expired_files(&mut self, now: TimestampMs) -> Result<usize, StorageError> {
        let mut first_error = self.finish_pending_renames(now).err();
        if self.renames_sync == RenamesSync::Due
            && let Err(error) = self.sync_renames_here()
        {
            first_error.get_or_insert(error);
        }
        let mut removed = 0;
        let mut index = 0;
        while let Some(pending) = self.pending_deletions.get_mut(index) {
            if pending.state != DeletionState::Durable || pending.due > now {
                index += 1;
                continue;
            }
            let unlink = || {
                failpoint!("retention.before_unlink");
                crate::segment::remove_deleted_files(
                    self.storage.as_ref(),
                    &self.dir,
                    pending.base_offset,
                )
            };
            match unlink() {
                Ok(()) => {
                    self.pending_deletions.remove(index);
                    removed += 1;
                }
                Err(error) => {
                    pending.due = retry_at(now);
                    first_error.get_or_insert(error);
                    index += 1;
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(removed),
        }
    }

    /// Takes off the pending list the segments whose `.deleted` files may be unlinked at `now`,
    /// and returns those files' paths for the caller to unlink, in any order and on any thread
    /// (the engine's shards hand them to their file deleter: freeing a large file's blocks can
    /// keep `unlink` waiting on the disk). Segments not renamed yet, or whose renames wait for a
    /// directory sync, stay pending.
    pub fn take_expired_files(&mut self, now: TimestampMs) -> Vec<PathBuf> {
        let (expired, waiting) = std::mem::take(&mut self.pending_deletions)
            .into_iter()
            .partition(|pending: &PendingDeletion| {
                pending.state == DeletionState::Durable && pending.due <= now
            });
        self.pending_deletions = waiting;
        expired
            .iter()
            .flat_map(|pending| crate::segment::deleted_file_paths(&self.dir, pending.base_offset))
            .collect()
    }

    /// Unlinks `base_offset`'s `.deleted` files (renamed, their directory synced) at `due` or
    /// later.
    pub(super) fn schedule_file_deletion(&mut self, base_offset: Offset, due: TimestampMs) {
        self.pending_deletions.push(PendingDeletion {
            base_offset,
            due,
            state: DeletionState::Durable,
        });
    }

    /// When pending segments next need the log's owner (a rename to retry, `.deleted` files to
    /// unlink), if any do; segments whose renames wait for a directory sync need it first.
    pub fn next_file_deletion(&self) -> Option<TimestampMs> {
        self.pending_deletions
            .iter()
            .filter(|pending| match pending.state {
                DeletionState::Live => self.renames_sync == RenamesSync::None,
                DeletionState::Renamed => false,
                DeletionState::Durable => true,
            })
            .map(|pending| pending.due)
            .min()
    }
}

fn retry_at(now: TimestampMs) -> TimestampMs {
    TimestampMs(now.0.saturating_add(RETRY_AFTER_FAILURE_MS))
}
