//! Compacting one log (Kafka's `Cleaner.clean` for one log, run by its owner): pass one maps the
//! latest offset of every key in the dirty part of the sealed segments, pass two rewrites each
//! sealed segment up to the mapped end keeping only the latest record per key, with every offset
//! unchanged (FORMAT.md § `.deleted`, `.cleaned` and `.swap`).
//!
//! The swap, per segment, is crash-safe at every step:
//! 1. write `<base>.log.cleaned` and sync it (a crash leaves a `.cleaned` file: removed at open);
//! 2. rename it `<base>.log.swap` and sync the directory (a crash: open completes the swap);
//! 3. take the old segment out of the list and rename its files `.deleted` (a crash: open removes
//!    the `.deleted` files and completes the swap);
//! 4. rename the `.swap` to `<base>.log`, sync the directory, and load it, rebuilding its indexes.
//!
//! The active segment is never compacted, so appends go on while sealed segments are cleaned.

use std::path::{Path, PathBuf};

use super::PartitionLog;
use crate::cleaner::compact::{CleanRules, CompactError, build_offset_map, clean_batch};
use crate::cleaner::offset_map::OffsetMap;
use crate::error::StorageError;
use crate::format::file_name::{FileState, SegmentFileKind, SegmentFileName};
use crate::io::{OpenMode, Storage, StorageFile};
use crate::segment::Segment;
use crate::segment::recovery::LoadMode;
use crate::types::{Offset, TimestampMs};

/// Bytes of cleaned batches gathered before one write to the `.cleaned` file.
const CLEANED_WRITE_BYTES: usize = 1024 * 1024;

/// What one compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionOutcome {
    /// Segments rewritten.
    pub segments_cleaned: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// The first offset not covered by this round's map: the next round's first dirty offset.
    pub first_dirty_offset: Offset,
    /// The map filled before the end of the dirty range: another round is needed.
    pub map_full: bool,
}

impl PartitionLog {
    /// `(clean bytes, dirty bytes)` of the sealed segments given the cleaner's first dirty offset:
    /// what `min.cleanable.dirty.ratio` is compared with (the active segment is never cleanable).
    pub fn cleanable_bytes(&self, first_dirty_offset: Offset) -> (u64, u64) {
        let slots = self.segments.slots();
        let sealed = &slots[..slots.len() - 1];
        sealed.iter().fold((0, 0), |(clean, dirty), slot| {
            if slot.next_offset() <= first_dirty_offset {
                (clean + slot.size_bytes(), dirty)
            } else {
                (clean, dirty + slot.size_bytes())
            }
        })
    }

    /// Compacts the sealed segments from `first_dirty_offset` on, with `map` as the dedupe
    /// buffer, at time `now` (for tombstones' delete horizons, `delete.retention.ms`).
    pub fn compact(
        &mut self,
        map: &mut OffsetMap,
        first_dirty_offset: Offset,
        delete_retention_ms: i64,
        now: TimestampMs,
    ) -> Result<CompactionOutcome, StorageError> {
        self.check_not_failed()?;
        let sealed_count = self.segments.len() - 1;
        let cleanable_end = self.active().base_offset();
        let first_dirty = first_dirty_offset.max(self.log_start_offset);
        let (mapped_end, map_full) = self.build_map(map, first_dirty, cleanable_end)?;
        let mut outcome = CompactionOutcome {
            first_dirty_offset: Offset(mapped_end),
            map_full,
            ..CompactionOutcome::default()
        };
        if map.is_empty() {
            return Ok(outcome);
        }
        let rules = CleanRules {
            mapped_end,
            now_ms: now.0,
            delete_retention_ms,
        };
        for index in 0..sealed_count {
            if self.segments.slots()[index].base_offset().0 >= mapped_end {
                break;
            }
            let (before, after) = self.clean_segment(index, map, &rules, now)?;
            outcome.segments_cleaned += 1;
            outcome.bytes_before += before;
            outcome.bytes_after += after;
        }
        Ok(outcome)
    }

    /// Pass one over the sealed segments holding `first_dirty..cleanable_end`.
    fn build_map(
        &mut self,
        map: &mut OffsetMap,
        first_dirty: Offset,
        cleanable_end: Offset,
    ) -> Result<(u64, bool), StorageError> {
        map.clear();
        let range = first_dirty.0..cleanable_end.0.max(first_dirty.0);
        let mut mapped_end = range.end;
        let mut full = false;
        let mut failure = None;
        let first_index = self.segments.floor_index(first_dirty);
        for index in first_index..self.segments.len() - 1 {
            let segment = self.open_segment(index)?;
            segment.for_each_batch(|batch| {
                // Batches come in offset order, so the same range serves every call: each call
                // maps its batch's records inside it.
                match build_offset_map([&batch], map, range.clone()) {
                    Ok(built) if built.full => {
                        mapped_end = built.mapped_end;
                        full = true;
                    }
                    Ok(_) => {}
                    Err(error) => failure = Some(error),
                }
                !full && failure.is_none()
            })?;
            if let Some(error) = failure.take() {
                return Err(self.compaction_error(index, error));
            }
            if full {
                break;
            }
        }
        Ok((mapped_end, full))
    }

    /// Pass two for the sealed segment at `index`, then the swap. Returns (bytes before, after).
    fn clean_segment(
        &mut self,
        index: usize,
        map: &OffsetMap,
        rules: &CleanRules,
        now: TimestampMs,
    ) -> Result<(u64, u64), StorageError> {
        let base_offset = self.segments.slots()[index].base_offset();
        let mut writer = CleanedWriter::create(self.storage.as_ref(), &self.dir, base_offset)?;
        let segment = self.open_segment(index)?;
        let before = segment.size_bytes();
        let mut compact_failure = None;
        let mut write_failure = None;
        segment.for_each_batch(|batch| {
            match clean_batch(&batch, map, rules) {
                Ok(Some(bytes)) => write_failure = writer.push(&bytes).err(),
                Ok(None) => {}
                Err(error) => compact_failure = Some(error),
            }
            compact_failure.is_none() && write_failure.is_none()
        })?;
        if let Some(error) = compact_failure {
            return Err(self.compaction_error(index, error));
        }
        if let Some(error) = write_failure {
            return Err(error);
        }
        let after = writer.finish()?;
        self.swap_in(index, base_offset, now)?;
        Ok((before, after))
    }

    /// Steps 2 to 4 of the swap for the sealed segment at `index`. The old segment stays in the
    /// list (its open files still read the old bytes) until the new one is loaded in its place.
    fn swap_in(
        &mut self,
        index: usize,
        base_offset: Offset,
        now: TimestampMs,
    ) -> Result<(), StorageError> {
        let cleaned = segment_file(&self.dir, base_offset, FileState::Cleaned);
        let swap = segment_file(&self.dir, base_offset, FileState::Swap);
        let live = segment_file(&self.dir, base_offset, FileState::Live);
        self.rename(&cleaned, &swap)?;
        self.sync_dir()?;
        crate::segment::rename_files_to_deleted(self.storage.as_ref(), &self.dir, base_offset)?;
        self.rename(&swap, &live)?;
        self.sync_dir()?;
        let mode = LoadMode::Recover;
        let mut loaded = Segment::load(
            self.storage.as_ref(),
            &self.dir,
            base_offset,
            &self.config,
            mode,
            now,
        )?
        .segment;
        loaded.seal()?;
        drop(self.segments.replace_sealed(index, loaded));
        let delay_ms = i64::try_from(self.config.file_delete_delay_ms).unwrap_or(i64::MAX);
        self.schedule_file_deletion(base_offset, TimestampMs(now.0.saturating_add(delay_ms)));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<(), StorageError> {
        self.storage
            .rename(from, to)
            .map_err(|source| StorageError::io("rename", from, source))
    }

    fn compaction_error(&self, index: usize, error: CompactError) -> StorageError {
        StorageError::Corrupt {
            file: segment_file(
                &self.dir,
                self.segments.slots()[index].base_offset(),
                FileState::Live,
            ),
            position: 0,
            reason: format!("compaction: {error}"),
        }
    }
}

/// Step 1 of the swap: cleaned batches streamed into `<base>.log.cleaned` in writes of
/// [`CLEANED_WRITE_BYTES`], then synced; memory stays bounded however large the segment.
struct CleanedWriter {
    path: PathBuf,
    file: Box<dyn StorageFile>,
    position: u64,
    buffer: Vec<u8>,
}

impl CleanedWriter {
    fn create(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: Offset,
    ) -> Result<Self, StorageError> {
        let path = segment_file(dir, base_offset, FileState::Cleaned);
        let file = storage
            .open(&path, OpenMode::CreateOrOpen)
            .map_err(|source| StorageError::io("create", &path, source))?;
        file.set_length_bytes(0)
            .map_err(|source| StorageError::io("truncate", &path, source))?;
        Ok(CleanedWriter {
            path,
            file,
            position: 0,
            buffer: Vec::with_capacity(CLEANED_WRITE_BYTES),
        })
    }

    fn push(&mut self, batch: &[u8]) -> Result<(), StorageError> {
        self.buffer.extend_from_slice(batch);
        if self.buffer.len() >= CLEANED_WRITE_BYTES {
            self.write_buffer()?;
        }
        Ok(())
    }

    fn write_buffer(&mut self) -> Result<(), StorageError> {
        self.file
            .write_all_at(&self.buffer, self.position)
            .map_err(|source| StorageError::io("write", &self.path, source))?;
        self.position += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    /// Writes what is buffered and syncs the file. Returns its size.
    fn finish(mut self) -> Result<u64, StorageError> {
        self.write_buffer()?;
        self.file
            .sync_data()
            .map_err(|source| StorageError::io("fdatasync", &self.path, source))?;
        Ok(self.position)
    }
}

fn segment_file(dir: &Path, base_offset: Offset, state: FileState) -> std::path::PathBuf {
    SegmentFileName::live(base_offset, SegmentFileKind::Log)
        .with_state(state)
        .path_in(dir)
}
