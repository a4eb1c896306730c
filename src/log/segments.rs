//! The log's segment list, with a bound on open files: the active segment is always open; a
//! sealed segment is either open (its `.log` descriptor and two index maps held) or released
//! (closed, with the few facts the log needs kept in memory). At most [`SEALED_OPEN_MAX`] sealed
//! segments of a log are open at once — the most recently used — so a partition with thousands of
//! segments holds a handful of file descriptors and maps, and the engine's bound on open
//! partitions bounds the whole process.

use std::collections::VecDeque;
use std::path::Path;

use crate::cleaner::retention_plan::SegmentFacts;
use crate::config::LogConfig;
use crate::error::StorageError;
use crate::index::time_index::TimestampOffset;
use crate::io::Storage;
use crate::segment::recovery::LoadMode;
use crate::segment::{ReleasedSegment, Segment};
use crate::types::{Offset, TimestampMs};

/// Sealed segments of one log kept open at once (most recently read first).
pub const SEALED_OPEN_MAX: usize = 2;

/// One segment of the list.
#[derive(Debug)]
pub(crate) enum SegmentSlot {
    Open(Box<Segment>),
    Released(ReleasedSegment),
}

impl SegmentSlot {
    pub(crate) fn base_offset(&self) -> Offset {
        match self {
            SegmentSlot::Open(segment) => segment.base_offset(),
            SegmentSlot::Released(released) => released.base_offset,
        }
    }

    pub(crate) fn next_offset(&self) -> Offset {
        match self {
            SegmentSlot::Open(segment) => segment.next_offset(),
            SegmentSlot::Released(released) => released.next_offset,
        }
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        match self {
            SegmentSlot::Open(segment) => segment.size_bytes(),
            SegmentSlot::Released(released) => released.size_bytes,
        }
    }

    pub(crate) fn max_timestamp(&self) -> Option<TimestampOffset> {
        match self {
            SegmentSlot::Open(segment) => segment.max_timestamp(),
            SegmentSlot::Released(released) => released.max_timestamp,
        }
    }

    /// `(offset index entries, time index entries)`.
    pub(crate) fn index_entry_counts(&self) -> (usize, usize) {
        match self {
            SegmentSlot::Open(segment) => (
                segment.offset_index().entry_count(),
                segment.time_index().entry_count(),
            ),
            SegmentSlot::Released(released) => {
                (released.offset_index_entries, released.time_index_entries)
            }
        }
    }

    /// What retention needs to know about the segment.
    pub(crate) fn retention_facts(&self) -> Result<SegmentFacts, StorageError> {
        let modified_ms = match self {
            SegmentSlot::Open(segment) => Some(segment.modified_ms()?),
            SegmentSlot::Released(released) => released.modified_ms,
        };
        Ok(SegmentFacts {
            base_offset: self.base_offset().0,
            size_bytes: self.size_bytes(),
            largest_timestamp_ms: self.max_timestamp().map(|max| max.timestamp.0),
            modified_ms: modified_ms.unwrap_or(i64::MAX),
        })
    }

    /// Closes the segment and renames its files to `.deleted`; they are unlinked later.
    pub(crate) fn mark_deleted(
        self,
        storage: &dyn Storage,
        dir: &Path,
    ) -> Result<(), StorageError> {
        let base_offset = self.base_offset();
        drop(self);
        crate::segment::rename_files_to_deleted(storage, dir, base_offset)
    }

    /// Renames the segment's files to `.deleted` and removes them.
    pub(crate) fn delete(self, storage: &dyn Storage, dir: &Path) -> Result<(), StorageError> {
        match self {
            SegmentSlot::Open(segment) => segment.delete(storage, dir),
            SegmentSlot::Released(released) => {
                crate::segment::delete_files(storage, dir, released.base_offset)
            }
        }
    }
}

/// The ordered segments of a log; the last one is active. Never empty once built.
#[derive(Debug)]
pub(crate) struct SegmentList {
    slots: Vec<SegmentSlot>,
    /// Base offsets of the open sealed segments, most recently used first.
    open_sealed: VecDeque<Offset>,
}

impl SegmentList {
    /// Takes freshly loaded segments (all open) and releases the sealed ones beyond the bound.
    pub(crate) fn new(segments: Vec<Segment>) -> SegmentList {
        let mut list = SegmentList {
            slots: segments
                .into_iter()
                .map(|segment| SegmentSlot::Open(Box::new(segment)))
                .collect(),
            open_sealed: VecDeque::new(),
        };
        let sealed_count = list.slots.len().saturating_sub(1);
        for slot in list.slots[..sealed_count].iter().rev() {
            list.open_sealed.push_back(slot.base_offset());
        }
        list.release_beyond_bound();
        list
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Segments open now: the active one and the open sealed ones.
    pub(crate) fn open_count(&self) -> usize {
        1 + self.open_sealed.len()
    }

    pub(crate) fn slots(&self) -> &[SegmentSlot] {
        &self.slots
    }

    pub(crate) fn active(&self) -> Option<&Segment> {
        match self.slots.last() {
            Some(SegmentSlot::Open(segment)) => Some(segment),
            _ => None,
        }
    }

    pub(crate) fn active_mut(&mut self) -> Option<&mut Segment> {
        match self.slots.last_mut() {
            Some(SegmentSlot::Open(segment)) => Some(segment),
            _ => None,
        }
    }

    /// Index of the segment that would hold `offset` (greatest base `<= offset`).
    pub(crate) fn floor_index(&self, offset: Offset) -> usize {
        self.slots
            .partition_point(|slot| slot.base_offset() <= offset)
            .saturating_sub(1)
    }

    /// Number of leading segments whose base offset is `<= offset`.
    pub(crate) fn count_at_or_below(&self, offset: Offset) -> usize {
        self.slots
            .partition_point(|slot| slot.base_offset() <= offset)
    }

    /// The segment at `index`, opened if it was released (its files were sealed, so they are
    /// trusted), counted as most recently used.
    pub(crate) fn open(
        &mut self,
        index: usize,
        storage: &dyn Storage,
        dir: &Path,
        config: &LogConfig,
    ) -> Result<&mut Segment, StorageError> {
        let is_active = index + 1 == self.slots.len();
        if let Some(SegmentSlot::Released(released)) = self.slots.get(index) {
            let base_offset = released.base_offset;
            let mode = LoadMode::Trusted;
            let loaded =
                Segment::load(storage, dir, base_offset, config, mode, TimestampMs::now())?;
            self.slots[index] = SegmentSlot::Open(Box::new(loaded.segment));
        }
        if !is_active {
            self.touch_sealed(self.slots[index].base_offset());
        }
        match &mut self.slots[index] {
            SegmentSlot::Open(segment) => Ok(segment),
            SegmentSlot::Released(_) => unreachable!("the slot was opened above"),
        }
    }

    /// Takes `count` sealed segments out of the list from `index` (a cleaned group's originals).
    pub(crate) fn remove_sealed(&mut self, index: usize, count: usize) -> Vec<SegmentSlot> {
        let sealed_count = self.slots.len().saturating_sub(1);
        let end = (index + count).min(sealed_count);
        let removed: Vec<SegmentSlot> = self.slots.drain(index.min(end)..end).collect();
        self.forget(&removed);
        removed
    }

    /// Puts a sealed `segment` at `index` (a cleaned group's replacement).
    pub(crate) fn insert_sealed(&mut self, index: usize, segment: Segment) {
        let base_offset = segment.base_offset();
        let index = index.min(self.slots.len().saturating_sub(1));
        self.slots
            .insert(index, SegmentSlot::Open(Box::new(segment)));
        self.touch_sealed(base_offset);
    }

    /// Appends a new active segment; the previous active one is sealed now and joins the bound.
    pub(crate) fn push_active(&mut self, segment: Segment) {
        if let Some(previous) = self.slots.last() {
            let base_offset = previous.base_offset();
            self.touch_sealed(base_offset);
        }
        self.slots.push(SegmentSlot::Open(Box::new(segment)));
    }

    /// Removes the first `count` segments (never the active one).
    pub(crate) fn drain_front(&mut self, count: usize) -> Vec<SegmentSlot> {
        let count = count.min(self.slots.len().saturating_sub(1));
        let removed: Vec<SegmentSlot> = self.slots.drain(..count).collect();
        self.forget(&removed);
        removed
    }

    /// Removes every segment from `index` on; the new last segment becomes the active one (and
    /// is opened if it was released).
    pub(crate) fn truncate_from(
        &mut self,
        index: usize,
        storage: &dyn Storage,
        dir: &Path,
        config: &LogConfig,
    ) -> Result<Vec<SegmentSlot>, StorageError> {
        let removed: Vec<SegmentSlot> = self.slots.drain(index.max(1)..).collect();
        self.forget(&removed);
        let last = self.slots.len() - 1;
        self.open(last, storage, dir, config)?;
        let active_base = self.slots[last].base_offset();
        self.open_sealed.retain(|base| *base != active_base);
        Ok(removed)
    }

    /// Replaces every segment (a log restarted empty).
    pub(crate) fn replace_all(&mut self, segment: Segment) -> Vec<SegmentSlot> {
        self.open_sealed.clear();
        let removed = std::mem::take(&mut self.slots);
        self.slots.push(SegmentSlot::Open(Box::new(segment)));
        removed
    }

    fn touch_sealed(&mut self, base_offset: Offset) {
        self.open_sealed.retain(|base| *base != base_offset);
        self.open_sealed.push_front(base_offset);
        self.release_beyond_bound();
    }

    fn forget(&mut self, removed: &[SegmentSlot]) {
        self.open_sealed
            .retain(|base| !removed.iter().any(|slot| slot.base_offset() == *base));
    }

    /// Releases the least recently used open sealed segments beyond [`SEALED_OPEN_MAX`].
    fn release_beyond_bound(&mut self) {
        while self.open_sealed.len() > SEALED_OPEN_MAX {
            let Some(base_offset) = self.open_sealed.pop_back() else {
                return;
            };
            let index = self.count_at_or_below(base_offset).saturating_sub(1);
            let is_sealed = index + 1 < self.slots.len();
            let slot = &mut self.slots[index];
            if !is_sealed || slot.base_offset() != base_offset {
                continue;
            }
            if let SegmentSlot::Open(segment) = slot {
                // Replacing the slot drops the segment, closing its files and maps.
                *slot = SegmentSlot::Released(segment.released());
            }
        }
    }
}
