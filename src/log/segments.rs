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
use crate::segment::recovery::{InvalidTail, LoadMode, LoadedSegment};
use crate::segment::{ActiveSegment, ReleasedSegment, Segment};
use crate::types::{Offset, TimestampMs};

/// Sealed segments of one log kept open at once (most recently read first).
pub const SEALED_OPEN_MAX: usize = 2;

/// One segment of the list: the last one is active, every other one sealed.
#[derive(Debug)]
pub(crate) enum SegmentSlot {
    /// The segment that takes the log's appends (always the last).
    Active(Box<ActiveSegment>),
    /// A sealed segment with its files open.
    Open(Box<Segment>),
    /// A sealed segment with its files closed.
    Released(ReleasedSegment),
}

impl SegmentSlot {
    /// The segment, when its files are open.
    fn segment(&self) -> Result<&Segment, &ReleasedSegment> {
        match self {
            SegmentSlot::Active(active) => Ok(active),
            SegmentSlot::Open(segment) => Ok(segment),
            SegmentSlot::Released(released) => Err(released),
        }
    }

    pub(crate) fn base_offset(&self) -> Offset {
        match self.segment() {
            Ok(segment) => segment.base_offset(),
            Err(released) => released.base_offset,
        }
    }

    pub(crate) fn next_offset(&self) -> Offset {
        match self.segment() {
            Ok(segment) => segment.next_offset(),
            Err(released) => released.next_offset,
        }
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        match self.segment() {
            Ok(segment) => segment.size_bytes(),
            Err(released) => released.size_bytes,
        }
    }

    pub(crate) fn max_timestamp(&self) -> Option<TimestampOffset> {
        match self.segment() {
            Ok(segment) => segment.max_timestamp(),
            Err(released) => released.max_timestamp,
        }
    }

    /// `(offset index entries, time index entries)`.
    pub(crate) fn index_entry_counts(&self) -> (usize, usize) {
        match self.segment() {
            Ok(segment) => (
                segment.offset_index().entry_count(),
                segment.time_index().entry_count(),
            ),
            Err(released) => (released.offset_index_entries, released.time_index_entries),
        }
    }

    /// What retention needs to know about the segment.
    pub(crate) fn retention_facts(&self) -> Result<SegmentFacts, StorageError> {
        let modified_ms = match self.segment() {
            Ok(segment) => Some(segment.modified_ms()?),
            Err(released) => released.modified_ms,
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
            SegmentSlot::Active(active) => active.into_sealed().delete(storage, dir),
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
    /// Takes freshly loaded sealed segments (all open) and the active one, and releases the
    /// sealed ones beyond the bound.
    pub(crate) fn new(sealed: Vec<Segment>, active: ActiveSegment) -> SegmentList {
        let mut slots: Vec<SegmentSlot> = sealed
            .into_iter()
            .map(|segment| SegmentSlot::Open(Box::new(segment)))
            .collect();
        slots.push(SegmentSlot::Active(Box::new(active)));
        let mut list = SegmentList {
            slots,
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

    /// The bytes of the segments holding `offset` or later offsets: at most this many lie past
    /// `offset`.
    pub(crate) fn bytes_holding_from(&self, offset: Offset) -> u64 {
        self.slots
            .iter()
            .filter(|slot| slot.next_offset() > offset)
            .map(SegmentSlot::size_bytes)
            .sum()
    }

    pub(crate) fn slots(&self) -> &[SegmentSlot] {
        &self.slots
    }

    pub(crate) fn active(&self) -> Option<&ActiveSegment> {
        match self.slots.last() {
            Some(SegmentSlot::Active(active)) => Some(active),
            _ => None,
        }
    }

    pub(crate) fn active_mut(&mut self) -> Option<&mut ActiveSegment> {
        match self.slots.last_mut() {
            Some(SegmentSlot::Active(active)) => Some(active),
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
    /// `dense_from`: where the log's offsets become dense (its cleaned end).
    pub(crate) fn open(
        &mut self,
        index: usize,
        storage: &dyn Storage,
        dir: &Path,
        (config, dense_from): (&LogConfig, Offset),
    ) -> Result<&Segment, StorageError> {
        if let Some(SegmentSlot::Released(released)) = self.slots.get(index) {
            let base_offset = released.base_offset;
            let loaded = reload(storage, dir, base_offset, (config, dense_from))?;
            self.slots[index] = SegmentSlot::Open(Box::new(loaded.segment));
        }
        if let Some(SegmentSlot::Open(segment)) = self.slots.get(index) {
            let base_offset = segment.base_offset();
            self.touch_sealed(base_offset);
        }
        match self.slots.get(index).map(SegmentSlot::segment) {
            Some(Ok(segment)) => Ok(segment),
            _ => Err(StorageError::Corrupt {
                file: dir.to_owned(),
                position: 0,
                reason: format!("the log has no segment at index {index}"),
            }),
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

    /// Appends a new active segment; the previous active one, whose appends the log ended, is
    /// sealed now and joins the bound.
    pub(crate) fn push_active(&mut self, segment: ActiveSegment) {
        if let Some(last) = self.slots.pop() {
            let sealed = match last {
                SegmentSlot::Active(previous) => SegmentSlot::Open(Box::new(previous.into_sealed())),
                other => other,
            };
            let base_offset = sealed.base_offset();
            self.slots.push(sealed);
            self.touch_sealed(base_offset);
        }
        self.slots.push(SegmentSlot::Active(Box::new(segment)));
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
        (config, dense_from): (&LogConfig, Offset),
    ) -> Result<Vec<SegmentSlot>, StorageError> {
        let last = index.max(1) - 1;
        self.open(last, storage, dir, (config, dense_from))?;
        let removed: Vec<SegmentSlot> = self.slots.drain(last + 1..).collect();
        self.forget(&removed);
        if let Some(SegmentSlot::Open(segment)) = self.slots.last() {
            let base_offset = segment.base_offset();
            self.open_sealed.retain(|base| *base != base_offset);
        }
        let active = match self.slots.pop() {
            Some(SegmentSlot::Open(segment)) => ActiveSegment::from_sealed(*segment),
            Some(SegmentSlot::Active(active)) => *active,
            // Opened above, and the most recently used: never released since.
            Some(SegmentSlot::Released(released)) => {
                let base = released.base_offset;
                let loaded = reload(storage, dir, base, (config, dense_from))?;
                ActiveSegment::from_sealed(loaded.segment)
            }
            None => return Ok(removed),
        };
        self.slots.push(SegmentSlot::Active(Box::new(active)));
        Ok(removed)
    }

    /// Replaces every segment (a log restarted empty).
    pub(crate) fn replace_all(&mut self, segment: ActiveSegment) -> Vec<SegmentSlot> {
        self.open_sealed.clear();
        let removed = std::mem::take(&mut self.slots);
        self.slots.push(SegmentSlot::Active(Box::new(segment)));
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
            let slot = &mut self.slots[index];
            if slot.base_offset() != base_offset {
                continue;
            }
            if let SegmentSlot::Open(segment) = slot {
                // Replacing the slot drops the segment, closing its files and maps.
                *slot = SegmentSlot::Released(segment.released());
            }
        }
    }
}

/// Loads a released segment again: its files were sealed, so they are trusted. Its offsets are
/// held dense only in a log whose policy does not compact, at or above `dense_from` (the log's
/// cleaned end: a log compacted before its policy became `delete` keeps its gaps below it).
fn reload(
    storage: &dyn Storage,
    dir: &Path,
    base_offset: Offset,
    (config, dense_from): (&LogConfig, Offset),
) -> Result<LoadedSegment, StorageError> {
    let dense = !config.cleanup_policy.compacts() && base_offset >= dense_from;
    Segment::load_with(
        storage,
        dir,
        base_offset,
        config,
        LoadMode::Trusted,
        InvalidTail::Truncate,
        dense,
        TimestampMs::now(),
    )
}
