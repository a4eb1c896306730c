//! Applying retention to one log (Kafka's `deleteOldSegments` and `LocalLog.removeAndDeleteSegments`):
//! the plan comes from [`crate::cleaner::retention`]; here the segments leave the list first (no
//! reader can reach them afterwards), their files are renamed `.deleted`, and the files are
//! unlinked once `file.delete.delay.ms` has passed.
//!
//! Segments go oldest first, and a segment whose rename failed is renamed before any later
//! segment is: the live files on disk are always a suffix of the log, so a reopen after any
//! failure finds the log before, after, or with only its oldest segments gone — never a gap.
//! A failed unlink is retried after [`RETRY_AFTER_FAILURE_MS`].
//!
//! Reads never hold a segment across a deletion: a read runs to completion on the owning thread
//! and returns owned bytes, so a segment out of the list has no reader left, and bytes already
//! returned stay valid after its files are gone.

use super::PartitionLog;
use crate::cleaner::retention::{RetentionConfig, RetentionPlan, plan_retention};
use crate::config::CleanupPolicy;
use crate::error::StorageError;
use crate::failpoint::failpoint;
use crate::types::{Offset, TimestampMs};

/// What one retention pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    pub segments_deleted: usize,
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
    /// False while its files may still have their live names (a rename failed).
    renamed: bool,
}

impl PartitionLog {
    /// Deletes the segments that retention selects at time `now` (log start offset, then
    /// `retention.bytes` and `retention.ms` when `cleanup.policy` includes `delete`).
    pub fn apply_retention(&mut self, now: TimestampMs) -> Result<RetentionOutcome, StorageError> {
        self.check_not_failed()?;
        self.finish_failed_renames(now)?;
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
        self.finish_failed_renames(now)?;
        let removed = self.segments.drain_front(count);
        let first_remaining = self.segments.slots()[0].base_offset();
        self.log_start_offset = self.log_start_offset.max(first_remaining);
        let delay_ms = i64::try_from(self.config.file_delete_delay_ms).unwrap_or(i64::MAX);
        let due = TimestampMs(now.0.saturating_add(delay_ms));
        let mut bytes_deleted = 0;
        let segments_deleted = removed.len();
        let mut failure = None;
        for slot in removed {
            bytes_deleted += slot.size_bytes();
            let base_offset = slot.base_offset();
            // After a failure the later segments keep their live names (dropping `slot` closes it).
            let rename = || {
                failpoint!("retention.before_rename");
                slot.mark_deleted(self.storage.as_ref(), &self.dir)
            };
            let renamed = failure.is_none()
                && match rename() {
                    Ok(()) => true,
                    Err(error) => {
                        failure = Some(error);
                        false
                    }
                };
            let due = if renamed { due } else { retry_at(now).max(due) };
            self.pending_deletions.push(PendingDeletion {
                base_offset,
                due,
                renamed,
            });
        }
        if let Some(error) = failure {
            return Err(error);
        }
        failpoint!("retention.before_dir_sync");
        self.sync_dir()?;
        Ok((segments_deleted, bytes_deleted))
    }

    /// Renames, oldest first, the files of pending segments whose rename failed earlier; stops at
    /// the first failure (and retries no sooner than [`RETRY_AFTER_FAILURE_MS`] from `now`).
    fn finish_failed_renames(&mut self, now: TimestampMs) -> Result<(), StorageError> {
        if self.pending_deletions.iter().all(|pending| pending.renamed) {
            return Ok(());
        }
        self.pending_deletions
            .sort_by_key(|pending| pending.base_offset);
        let mut failure = None;
        for pending in self
            .pending_deletions
            .iter_mut()
            .filter(|pending| !pending.renamed)
        {
            if failure.is_none() {
                match crate::segment::rename_files_to_deleted(
                    self.storage.as_ref(),
                    &self.dir,
                    pending.base_offset,
                ) {
                    Ok(()) => pending.renamed = true,
                    Err(error) => failure = Some(error),
                }
            }
            if !pending.renamed {
                pending.due = pending.due.max(retry_at(now));
            }
        }
        match failure {
            Some(error) => Err(error),
            None => self.sync_dir(),
        }
    }

    /// Unlinks the `.deleted` files whose delay has passed (first renaming any whose rename
    /// failed earlier). Returns how many segments' files went. A segment whose unlink fails stays
    /// pending, due again after [`RETRY_AFTER_FAILURE_MS`]; the first error is returned after the
    /// other due segments were tried.
    pub fn delete_expired_files(&mut self, now: TimestampMs) -> Result<usize, StorageError> {
        let mut first_error = self.finish_failed_renames(now).err();
        let mut removed = 0;
        let mut index = 0;
        while let Some(pending) = self.pending_deletions.get_mut(index) {
            if !pending.renamed || pending.due > now {
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

    /// Unlinks `base_offset`'s `.deleted` files at `due` or later.
    pub(super) fn schedule_file_deletion(&mut self, base_offset: Offset, due: TimestampMs) {
        self.pending_deletions.push(PendingDeletion {
            base_offset,
            due,
            renamed: true,
        });
    }

    /// When the next `.deleted` files may be unlinked, if any wait.
    pub fn next_file_deletion(&self) -> Option<TimestampMs> {
        self.pending_deletions
            .iter()
            .map(|pending| pending.due)
            .min()
    }
}

fn retry_at(now: TimestampMs) -> TimestampMs {
    TimestampMs(now.0.saturating_add(RETRY_AFTER_FAILURE_MS))
}
