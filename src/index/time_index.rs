//! The sparse time index of one segment (`.timeindex`; Kafka's `TimeIndex`).
//!
//! Entry `(T, relative offset O)` says: T is the largest timestamp among records before
//! `base_offset + O` and in the batch ending there. Timestamps strictly increase; an entry is
//! appended only when the segment's largest timestamp grew. One slot is kept free for the entry
//! forced at roll and close, so that the final entry always records the segment's largest
//! timestamp (which time retention reads).

use std::path::Path;

use super::entries::IndexFile;
use crate::error::StorageError;
use crate::format::index_entry::TimeIndexEntry;
use crate::types::{Offset, TimestampMs};

/// A time index entry with its absolute offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    /// The timestamp, in milliseconds.
    pub timestamp: TimestampMs,
    /// The offset it maps to.
    pub offset: Offset,
}

#[derive(Debug)]
pub struct TimeIndex {
    base_offset: Offset,
    file: IndexFile<TimeIndexEntry>,
}

impl TimeIndex {
    pub fn create(path: &Path, base_offset: Offset, max_bytes: u64) -> Result<Self, StorageError> {
        Ok(TimeIndex {
            base_offset,
            file: IndexFile::create(path, max_bytes)?,
        })
    }

    pub fn open_existing(path: &Path, base_offset: Offset) -> Result<Self, StorageError> {
        Ok(TimeIndex {
            base_offset,
            file: IndexFile::open_existing(path)?,
        })
    }

    /// [`TimeIndex::open_existing`], read into memory rather than mapped (for recovery: its first
    /// length change, [`TimeIndex::keep_prefix`], maps it).
    pub fn open_existing_copied(path: &Path, base_offset: Offset) -> Result<Self, StorageError> {
        Ok(TimeIndex {
            base_offset,
            file: IndexFile::open_existing_copied(path)?,
        })
    }

    pub fn entry_count(&self) -> usize {
        self.file.entry_count()
    }

    /// Full for ordinary appends: the last slot is kept for the forced final entry.
    pub fn is_full(&self) -> bool {
        self.file.entry_count() + 1 >= self.file.capacity_entries()
    }

    /// Entries that ordinary appends can still add (the last slot is kept).
    pub fn free_entries(&self) -> usize {
        self.file
            .capacity_entries()
            .saturating_sub(self.file.entry_count() + 1)
    }

    pub fn entries(&self) -> impl Iterator<Item = TimestampOffset> + '_ {
        (0..self.entry_count()).filter_map(|entry_index| {
            self.file
                .entry(entry_index)
                .map(|entry| self.to_timestamp_offset(entry))
        })
    }

    pub fn last_entry(&self) -> Option<TimestampOffset> {
        self.file
            .last_entry()
            .map(|entry| self.to_timestamp_offset(entry))
    }

    /// The greatest entry with a timestamp `<= target`; `(NONE, base_offset)` if none.
    pub fn lookup(&self, target: TimestampMs) -> TimestampOffset {
        self.file.greatest_at_most(target.0).map_or(
            TimestampOffset {
                timestamp: TimestampMs::NONE,
                offset: self.base_offset,
            },
            |entry| self.to_timestamp_offset(entry),
        )
    }

    /// Appends `(timestamp, offset)` if `timestamp` is larger than the last entry's. With
    /// `force_final`, the reserved last slot may be used (roll and close).
    pub fn maybe_append(&mut self, timestamp: TimestampMs, offset: Offset, force_final: bool) {
        // An empty index behaves as if its last entry were (-1, base offset), as in Kafka, so a
        // batch without a timestamp never makes an entry.
        let last = self.last_entry().unwrap_or(TimestampOffset {
            timestamp: TimestampMs::NONE,
            offset: self.base_offset,
        });
        if timestamp <= last.timestamp || offset < last.offset {
            return;
        }
        if self.file.is_full() || (!force_final && self.is_full()) {
            return;
        }
        let Some(relative_offset) = super::relative_offset(self.base_offset, offset) else {
            tracing::error!(
                "time index entry left out: offset {} does not fit {} (base offset {})",
                offset.0,
                self.file.path().display(),
                self.base_offset.0
            );
            return;
        };
        self.file.append(TimeIndexEntry {
            timestamp_ms: timestamp.0,
            relative_offset,
        });
    }

    /// Removes every entry for an offset `>= offset`.
    pub fn truncate_to(&mut self, offset: Offset) {
        let keep = self
            .entries()
            .take_while(|entry| entry.offset < offset)
            .count();
        self.file.truncate_entries(keep);
    }

    /// In an index a crash may have left preallocated, torn or stale past its entries: how many
    /// leading entries have strictly increasing timestamps (none negative) and non-decreasing
    /// offsets, from the base offset through `through`.
    pub fn increasing_prefix_through(&self, through: Offset) -> usize {
        let mut kept = 0;
        let mut last: Option<TimestampOffset> = None;
        for entry in self.entries() {
            let follows = match last {
                None => entry.timestamp.0 >= 0 && entry.offset >= self.base_offset,
                Some(last) => entry.timestamp > last.timestamp && entry.offset >= last.offset,
            };
            if !follows || entry.offset > through {
                break;
            }
            kept += 1;
            last = Some(entry);
        }
        kept
    }

    /// Keeps the first `entry_count` entries; the file is cut after them and regrown to
    /// `max_bytes` for appends.
    pub fn keep_prefix(&mut self, entry_count: usize, max_bytes: u64) -> Result<(), StorageError> {
        self.file.keep_prefix(entry_count, max_bytes)
    }

    pub fn reset(&mut self) {
        self.file.truncate_entries(0);
    }

    /// Checks that timestamps strictly increase and offsets do not decrease or pass `next_offset`.
    pub fn check(&self, next_offset: Offset) -> Result<(), (u64, String)> {
        let mut previous: Option<TimestampOffset> = None;
        for (entry_index, entry) in self.entries().enumerate() {
            let at = (entry_index * 12) as u64;
            if entry.offset >= next_offset.max(self.base_offset.next()) {
                return Err((
                    at,
                    format!(
                        "entry {entry_index} names offset {} at or past the segment's end {next_offset}",
                        entry.offset
                    ),
                ));
            }
            if let Some(previous) = previous
                && (entry.timestamp <= previous.timestamp || entry.offset < previous.offset)
            {
                return Err((
                    at,
                    format!(
                        "entry {entry_index} ({}, {}) does not follow ({}, {})",
                        entry.timestamp, entry.offset, previous.timestamp, previous.offset
                    ),
                ));
            }
            previous = Some(entry);
        }
        Ok(())
    }

    /// True when the file holds exactly its valid entries.
    pub fn is_trimmed(&self) -> bool {
        self.file.is_trimmed()
    }

    pub fn trim_to_valid_size(&mut self) -> Result<(), StorageError> {
        self.file.trim_to_valid_size()
    }

    pub fn resize_for_append(&mut self, max_bytes: u64) -> Result<(), StorageError> {
        self.file.resize_for_append(max_bytes)
    }

    pub fn flush(&self) -> Result<(), StorageError> {
        self.file.flush()
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    fn to_timestamp_offset(&self, entry: TimeIndexEntry) -> TimestampOffset {
        TimestampOffset {
            timestamp: TimestampMs(entry.timestamp_ms),
            offset: Offset(self.base_offset.0 + u64::from(entry.relative_offset)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copied_index_reads_what_a_mapped_one_reads_and_keeps_a_prefix_as_it_does() {
        // 600 entries of 12 bytes end in the second page of an untrimmed 1 MiB file: the copy
        // stops at the first hole (8192 bytes), rounded up to whole entries.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.timeindex");
        let max_bytes = 1024 * 1024;
        let mut index = TimeIndex::create(&path, Offset(0), max_bytes).unwrap();
        for entry in 1..=600u64 {
            index.maybe_append(TimestampMs(1000 + entry as i64), Offset(entry), false);
        }
        drop(index);
        let mapped = TimeIndex::open_existing(&path, Offset(0)).unwrap();
        let mut copied = TimeIndex::open_existing_copied(&path, Offset(0)).unwrap();
        let everything = Offset(u64::MAX);
        assert_eq!(copied.increasing_prefix_through(everything), 600);
        assert_eq!(mapped.increasing_prefix_through(everything), 600);
        let mapped_entries: Vec<_> = mapped.entries().take(600).collect();
        let copied_entries: Vec<_> = copied.entries().take(600).collect();
        assert_eq!(copied_entries, mapped_entries);
        drop(mapped);
        copied.keep_prefix(300, max_bytes).unwrap();
        assert_eq!(copied.entry_count(), 300);
        assert_eq!(copied.last_entry(), Some(copied_entries[299]));
        copied.maybe_append(TimestampMs(5000), Offset(800), false);
        drop(copied);
        let reopened = TimeIndex::open_existing(&path, Offset(0)).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), max_bytes / 12 * 12);
        assert_eq!(reopened.increasing_prefix_through(everything), 301);
    }

    #[test]
    fn only_increasing_timestamps_are_indexed_and_the_last_slot_is_reserved() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = TimeIndex::create(&dir.path().join("t"), Offset(100), 36).unwrap();
        index.maybe_append(TimestampMs(10), Offset(101), false);
        index.maybe_append(TimestampMs(10), Offset(102), false);
        index.maybe_append(TimestampMs(9), Offset(103), false);
        assert_eq!(index.entry_count(), 1);
        index.maybe_append(TimestampMs(20), Offset(104), false);
        assert!(index.is_full());
        index.maybe_append(TimestampMs(30), Offset(105), false);
        assert_eq!(index.entry_count(), 2);
        index.maybe_append(TimestampMs(30), Offset(105), true);
        assert_eq!(index.entry_count(), 3);
        assert_eq!(index.lookup(TimestampMs(25)).offset, Offset(104));
        assert_eq!(index.lookup(TimestampMs(5)).offset, Offset(100));
        assert!(index.check(Offset(106)).is_ok());
        assert!(index.check(Offset(105)).is_err());
    }

    #[test]
    fn an_offset_that_does_not_fit_the_index_is_left_out_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = TimeIndex::create(&dir.path().join("t"), Offset(100), 36).unwrap();
        index.maybe_append(TimestampMs(10), Offset(50), false);
        let beyond = Offset(100 + crate::limits::RELATIVE_OFFSET_MAX + 1);
        index.maybe_append(TimestampMs(20), beyond, false);
        assert_eq!(index.entry_count(), 0);
        index.maybe_append(TimestampMs(30), Offset(101), false);
        assert_eq!(index.last_entry().unwrap().offset, Offset(101));
    }
}
