//! Applying retention to one log (Kafka's `deleteOldSegments` and `LocalLog.removeAndDeleteSegments`):
//! the plan comes from [`crate::cleaner::retention`]; here the segments leave the list first (no
//! reader can reach them afterwards), their files are renamed `.deleted`, and the files are
//! unlinked once `file.delete.delay.ms` has passed.
//!
//! Reads never hold a segment across a deletion: a read runs to completion on the owning thread
//! and returns owned bytes, so a segment out of the list has no reader left, and bytes already
//! returned stay valid after its files are gone.

use super::PartitionLog;
use crate::cleaner::retention::{RetentionConfig, RetentionPlan, plan_retention};
use crate::config::CleanupPolicy;
use crate::error::StorageError;
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

/// Files renamed `.deleted`, waiting for `file.delete.delay.ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PendingDeletion {
    base_offset: Offset,
    due: TimestampMs,
}

impl PartitionLog {
    /// Deletes the segments that retention selects at time `now` (log start offset, then
    /// `retention.bytes` and `retention.ms` when `cleanup.policy` includes `delete`).
    pub fn apply_retention(&mut self, now: TimestampMs) -> Result<RetentionOutcome, StorageError> {
        self.check_not_failed()?;
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
    pub(super) fn delete_leading_segments(
        &mut self,
        count: usize,
        now: TimestampMs,
    ) -> Result<(usize, u64), StorageError> {
        let removed = self.segments.drain_front(count);
        let first_remaining = self.segments.slots()[0].base_offset();
        self.log_start_offset = self.log_start_offset.max(first_remaining);
        let delay_ms = i64::try_from(self.config.file_delete_delay_ms).unwrap_or(i64::MAX);
        let due = TimestampMs(now.0.saturating_add(delay_ms));
        let mut bytes_deleted = 0;
        let segments_deleted = removed.len();
        for slot in removed {
            bytes_deleted += slot.size_bytes();
            let base_offset = slot.base_offset();
            slot.mark_deleted(self.storage.as_ref(), &self.dir)?;
            self.pending_deletions
                .push(PendingDeletion { base_offset, due });
        }
        self.sync_dir()?;
        Ok((segments_deleted, bytes_deleted))
    }

    /// Unlinks the `.deleted` files whose delay has passed. Returns how many segments' files went.
    pub fn delete_expired_files(&mut self, now: TimestampMs) -> Result<usize, StorageError> {
        let (due, waiting): (Vec<PendingDeletion>, Vec<PendingDeletion>) = self
            .pending_deletions
            .iter()
            .partition(|pending| pending.due <= now);
        self.pending_deletions = waiting;
        for pending in &due {
            crate::segment::remove_deleted_files(
                self.storage.as_ref(),
                &self.dir,
                pending.base_offset,
            )?;
        }
        Ok(due.len())
    }

    /// Unlinks `base_offset`'s `.deleted` files at `due` or later.
    pub(super) fn schedule_file_deletion(&mut self, base_offset: Offset, due: TimestampMs) {
        self.pending_deletions
            .push(PendingDeletion { base_offset, due });
    }

    /// When the next `.deleted` files may be unlinked, if any wait.
    pub fn next_file_deletion(&self) -> Option<TimestampMs> {
        self.pending_deletions
            .iter()
            .map(|pending| pending.due)
            .min()
    }
}
