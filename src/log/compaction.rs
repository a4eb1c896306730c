//! The log's side of compaction: the facts the cleaner works from ([`PartitionLog::cleanable_log`])
//! and the swap of a cleaned group ([`PartitionLog::swap_in_cleaned`]) — the only step that
//! changes the log, so the engine runs it on the owning shard while the cleaner's thread does the
//! reading and writing (`cleaner::log_cleaner`). [`PartitionLog::compact`] runs both on the
//! caller's thread (FORMAT.md § `.deleted`, `.cleaned` and `.swap`).
//!
//! The swap of a group (the cleaned file synced already) is crash-safe at every step:
//! 1. rename `<base>.log.cleaned` to `<base>.log.swap` and sync the directory (a crash: open
//!    completes the swap, replacing the live segments the `.swap` covers);
//! 2. take the group's segments out of the list and rename their files `.deleted` (a crash: open
//!    removes the `.deleted` files and completes the swap);
//! 3. rename the `.swap` to `<base>.log`, sync the directory, and load it, rebuilding its
//!    indexes.
//!
//! A failure after step 1 fails the log until it is reopened: the open completes the swap.

use crate::cleaner::log_cleaner::{
    CleanableLog, CleanedGroup, CompactionOutcome, LogCleaner, SealedSegment, SwapOutcome,
    segment_file,
};
use crate::cleaner::offset_map::OffsetMap;
use crate::error::StorageError;
use crate::failpoint::failpoint;
use crate::format::file_name::{FileState, SegmentFileKind};
use crate::segment::Segment;
use crate::segment::recovery::{InvalidTail, LoadMode};
use crate::types::{Offset, TimestampMs};

use super::PartitionLog;
use super::cleaned_end;

impl PartitionLog {
    /// The facts of the sealed segments below the recovery point whose seal sync was reported,
    /// for the cleaner. A segment whose seal sync has not finished (`seal_sync.rs`) is left out:
    /// a crash could still cut its records (the cleaner must not drop an acknowledged record for
    /// a later one with its key that a crash can take away), or leave its file longer than
    /// sealed, which recovery cuts only in a segment the cleaner never touched (the `sim_ops`
    /// fuzz target found both).
    pub fn cleanable_log(&self) -> CleanableLog {
        let slots = self.segments.slots();
        let sealed = slots[..slots.len() - 1]
            .iter()
            .take_while(|slot| {
                slot.next_offset() <= self.recovery_point && self.seal_synced(slot.next_offset())
            })
            .map(|slot| SealedSegment {
                base_offset: slot.base_offset(),
                next_offset: slot.next_offset(),
                size_bytes: slot.size_bytes(),
                largest_timestamp_ms: slot.max_timestamp().map(|max| max.timestamp.0),
            })
            .collect();
        CleanableLog {
            topic_partition: self.topic_partition.clone(),
            log_instance: self.instance,
            dir: self.dir.clone(),
            config: self.config.clone(),
            log_start_offset: self.log_start_offset,
            cleaned_end: self.cleaned_end,
            sealed,
        }
    }

    /// Compacts the sealed segments from `first_dirty_offset` on, on this thread, with `map` as
    /// the dedupe buffer, at time `now`, keeping tombstones `delete_retention_ms` after their
    /// first cleaning.
    pub fn compact(
        &mut self,
        map: &mut OffsetMap,
        first_dirty_offset: Offset,
        delete_retention_ms: i64,
        now: TimestampMs,
    ) -> Result<CompactionOutcome, StorageError> {
        self.check_not_failed()?;
        // Sealed segments whose seal sync nobody took are synced here, so that they are cleanable.
        self.sync_untaken_seals()?;
        let mut log = self.cleanable_log();
        log.config.delete_retention_ms = u64::try_from(delete_retention_ms).unwrap_or(0);
        let storage = self.storage.clone();
        let mut cleaner = LogCleaner {
            storage: storage.as_ref(),
            map,
            throttle: &mut |_| {},
        };
        cleaner.clean(&log, first_dirty_offset, now, |group| {
            self.swap_in_cleaned(group, now)
        })
    }

    /// Swaps a cleaned group in for the segments it replaces, if the log still holds exactly
    /// those segments, sealed and unchanged; otherwise answers `Stale` and changes nothing. First
    /// the segments that left the log are deleted durably (`settle_deletions`; `Stale` when that
    /// waits for a directory sync the owner has taken).
    pub fn swap_in_cleaned(
        &mut self,
        group: &CleanedGroup,
        now: TimestampMs,
    ) -> Result<SwapOutcome, StorageError> {
        self.check_not_failed()?;
        let Some(index) = self.group_index(group) else {
            return Ok(SwapOutcome::Stale);
        };
        if !self.settle_deletions(now)? {
            return Ok(SwapOutcome::Stale);
        }
        let result = self.swap_group(index, group, now);
        self.fail_on(result).map(|()| SwapOutcome::Swapped)
    }

    /// Where the group's segments sit in the list, if they are all there, sealed, unchanged.
    fn group_index(&self, group: &CleanedGroup) -> Option<usize> {
        if group.log_instance != self.instance {
            return None;
        }
        let slots = self.segments.slots();
        let sealed = &slots[..slots.len() - 1];
        let first = group.replaced.first()?;
        let index = sealed
            .iter()
            .position(|slot| slot.base_offset() == first.base_offset)?;
        let candidates = sealed.get(index..index + group.replaced.len())?;
        let unchanged = candidates.iter().zip(&group.replaced).all(|(slot, seen)| {
            slot.base_offset() == seen.base_offset
                && slot.next_offset() == seen.next_offset
                && slot.size_bytes() == seen.size_bytes
        });
        unchanged.then_some(index)
    }

    /// Steps 1 to 3 of the swap for the group at `index`.
    fn swap_group(
        &mut self,
        index: usize,
        group: &CleanedGroup,
        now: TimestampMs,
    ) -> Result<(), StorageError> {
        // Raise the cleaned end durably before the swap, so that after any crash it is at or
        // above every segment the cleaner rewrote (segments above it are held to dense offsets).
        let group_end = group
            .replaced
            .iter()
            .map(|segment| segment.next_offset)
            .max()
            .unwrap_or_default();
        if group_end > self.cleaned_end {
            cleaned_end::write(self.storage.as_ref(), &self.dir, group_end)?;
            self.cleaned_end = group_end;
        }
        let base_offset = group.base_offset();
        self.rename_segment_files(base_offset, FileState::Cleaned, FileState::Swap)?;
        failpoint!("compaction.after_swap_rename");
        self.sync_dir()?;
        failpoint!("compaction.after_swap_dir_sync");
        let replaced = self.segments.remove_sealed(index, group.replaced.len());
        for slot in replaced {
            slot.mark_deleted(self.storage.as_ref(), &self.dir)?;
        }
        failpoint!("compaction.after_deleted_renames");
        self.rename_segment_files(base_offset, FileState::Swap, FileState::Live)?;
        failpoint!("compaction.after_live_rename");
        self.sync_dir()?;
        failpoint!("compaction.after_live_dir_sync");
        // The cleaner checked every batch of the cleaned segment and wrote its indexes
        // (`Segment::prepare_cleaned`): trusted, it is read only past its last index entry. Every
        // byte of it was synced before the swap: invalid bytes in it are damage (a misdirected
        // write, R14), never a torn tail to cut. The log fails instead.
        let loaded = Segment::load_with(
            self.storage.as_ref(),
            &self.dir,
            base_offset,
            &self.config,
            LoadMode::Trusted,
            InvalidTail::Refuse,
            false,
            now,
        );
        let loaded = self.fail_on(loaded)?;
        let mut segment = loaded.segment;
        if loaded.recovery.is_some() {
            // Its indexes failed their check and were rebuilt.
            segment.seal()?;
        }
        self.segments.insert_sealed(index, segment);
        let delay_ms = i64::try_from(self.config.file_delete_delay_ms).unwrap_or(i64::MAX);
        let due = TimestampMs(now.0.saturating_add(delay_ms));
        for segment in &group.replaced {
            self.schedule_file_deletion(segment.base_offset, due);
        }
        Ok(())
    }

    /// Renames the `.log` of the segment at `base_offset` from state `from` to `to`, and its
    /// indexes where they exist (an index lost in a crash is rebuilt at the load).
    fn rename_segment_files(
        &self,
        base_offset: Offset,
        from: FileState,
        to: FileState,
    ) -> Result<(), StorageError> {
        for kind in [
            SegmentFileKind::Log,
            SegmentFileKind::Index,
            SegmentFileKind::TimeIndex,
        ] {
            let source = segment_file(&self.dir, base_offset, kind, from);
            if kind != SegmentFileKind::Log && !self.storage.exists(&source) {
                continue;
            }
            let target = segment_file(&self.dir, base_offset, kind, to);
            self.storage
                .rename(&source, &target)
                .map_err(|error| StorageError::io("rename", &source, error))?;
        }
        Ok(())
    }
}
