//! The sparse offset index of one segment (`.index`; Kafka's `OffsetIndex`).
//!
//! Entry `(relative offset, position)` says: the batch whose last offset is
//! `base_offset + relative_offset` starts at `position` in the `.log`. Offsets strictly increase.
//! Lookup returns the greatest entry at or below the target, from which a forward scan of the
//! `.log` finds the batch holding the target.

use std::path::Path;

use super::entries::IndexFile;
use crate::error::StorageError;
use crate::format::index_entry::OffsetIndexEntry;
use crate::types::Offset;

/// Where a scan for an offset starts: the indexed offset and the position of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: Offset,
    pub position: u32,
}

#[derive(Debug)]
pub struct OffsetIndex {
    base_offset: Offset,
    file: IndexFile<OffsetIndexEntry>,
}

impl OffsetIndex {
    pub fn create(path: &Path, base_offset: Offset, max_bytes: u64) -> Result<Self, StorageError> {
        Ok(OffsetIndex {
            base_offset,
            file: IndexFile::create(path, max_bytes)?,
        })
    }

    pub fn open_existing(path: &Path, base_offset: Offset) -> Result<Self, StorageError> {
        Ok(OffsetIndex {
            base_offset,
            file: IndexFile::open_existing(path)?,
        })
    }

    /// [`OffsetIndex::open_existing`], read into memory rather than mapped (for recovery: its first
    /// length change, [`OffsetIndex::keep_prefix`], maps it).
    pub fn open_existing_copied(path: &Path, base_offset: Offset) -> Result<Self, StorageError> {
        Ok(OffsetIndex {
            base_offset,
            file: IndexFile::open_existing_copied(path)?,
        })
    }

    pub fn entry_count(&self) -> usize {
        self.file.entry_count()
    }

    pub fn is_full(&self) -> bool {
        self.file.is_full()
    }

    /// Entries that can still be appended.
    pub fn free_entries(&self) -> usize {
        self.file
            .capacity_entries()
            .saturating_sub(self.file.entry_count())
    }

    pub fn entries(&self) -> impl Iterator<Item = OffsetPosition> + '_ {
        (0..self.entry_count()).filter_map(|entry_index| {
            self.file
                .entry(entry_index)
                .map(|entry| self.to_offset_position(entry))
        })
    }

    pub fn last_entry(&self) -> Option<OffsetPosition> {
        self.file
            .last_entry()
            .map(|entry| self.to_offset_position(entry))
    }

    /// The greatest indexed offset `<= target` and its position; `(base_offset, 0)` if none.
    pub fn lookup(&self, target: Offset) -> OffsetPosition {
        let Some(relative) = target.0.checked_sub(self.base_offset.0) else {
            return self.start();
        };
        let relative = i64::try_from(relative).unwrap_or(i64::MAX);
        self.file
            .greatest_at_most(relative)
            .map_or(self.start(), |entry| self.to_offset_position(entry))
    }

    /// [`OffsetIndex::lookup`]'s entry, and the entry after it (the first one when no entry is
    /// at or below `target`): the batch holding `target` starts after the first and at or
    /// before the second.
    pub fn lookup_with_next(&self, target: Offset) -> (OffsetPosition, Option<OffsetPosition>) {
        let relative = target
            .0
            .checked_sub(self.base_offset.0)
            .map(|relative| i64::try_from(relative).unwrap_or(i64::MAX));
        let at_most = relative.and_then(|relative| self.file.greatest_at_most_index(relative));
        let entry_at = |entry_index| {
            self.file
                .entry(entry_index)
                .map(|entry| self.to_offset_position(entry))
        };
        let next_index = at_most.map_or(0, |entry_index| entry_index + 1);
        let found = at_most.and_then(entry_at).unwrap_or(self.start());
        (found, entry_at(next_index))
    }

    /// Appends `(offset, position)`. The caller guarantees offsets and positions increase and
    /// that `offset - base_offset` fits 31 bits; an entry that breaks either is left out and
    /// logged (the index stays a sorted set of hints), not a panic of the host.
    pub fn append(&mut self, offset: Offset, position: u32) {
        let increasing = self.last_entry().is_none_or(|last| offset > last.offset);
        let relative_offset = super::relative_offset(self.base_offset, offset);
        let Some(relative_offset) = relative_offset.filter(|_| increasing) else {
            tracing::error!(
                "index entry left out: offset {} at position {position} does not follow the last \
                 entry of {} (base offset {}) or does not fit it",
                offset.0,
                self.file.path().display(),
                self.base_offset.0
            );
            return;
        };
        self.file.append(OffsetIndexEntry {
            relative_offset,
            position,
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
    /// leading entries increase strictly (offsets and positions, no position 0: a segment's first
    /// batch is never indexed) and name offsets below `below`, and the last of them.
    pub fn increasing_prefix_below(&self, below: Offset) -> (usize, Option<OffsetPosition>) {
        let mut kept = 0;
        let mut last: Option<OffsetPosition> = None;
        for entry in self.entries() {
            let follows = last.map_or(entry.position > 0, |last| {
                entry.offset > last.offset && entry.position > last.position
            });
            if !follows || entry.offset >= below {
                break;
            }
            kept += 1;
            last = Some(entry);
        }
        (kept, last)
    }

    /// Keeps the first `entry_count` entries; the file is cut after them and regrown to
    /// `max_bytes` for appends.
    pub fn keep_prefix(&mut self, entry_count: usize, max_bytes: u64) -> Result<(), StorageError> {
        self.file.keep_prefix(entry_count, max_bytes)
    }

    /// Removes every entry (before a rebuild).
    pub fn reset(&mut self) {
        self.file.truncate_entries(0);
    }

    /// Checks that offsets strictly increase, positions do not decrease and none points past
    /// `log_size_bytes`. Returns the first bad entry's byte position and the reason.
    pub fn check(&self, log_size_bytes: u64) -> Result<(), (u64, String)> {
        let mut previous: Option<OffsetPosition> = None;
        for (entry_index, entry) in self.entries().enumerate() {
            let at = (entry_index * 8) as u64;
            if u64::from(entry.position) >= log_size_bytes {
                return Err((
                    at,
                    format!(
                        "entry {entry_index} points at position {} past the log's {log_size_bytes} bytes",
                        entry.position
                    ),
                ));
            }
            if let Some(previous) = previous
                && (entry.offset <= previous.offset || entry.position <= previous.position)
            {
                return Err((
                    at,
                    format!(
                        "entry {entry_index} ({}, {}) does not follow ({}, {})",
                        entry.offset, entry.position, previous.offset, previous.position
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

    fn start(&self) -> OffsetPosition {
        OffsetPosition {
            offset: self.base_offset,
            position: 0,
        }
    }

    fn to_offset_position(&self, entry: OffsetIndexEntry) -> OffsetPosition {
        OffsetPosition {
            offset: Offset(self.base_offset.0 + u64::from(entry.relative_offset)),
            position: entry.position,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_example_through_a_real_index_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000206233.index");
        let mut index = OffsetIndex::create(&path, Offset(206_233), 4096).unwrap();
        for (offset, position) in [
            (206_782, 5189),
            (206_783, 12094),
            (207_236, 22092),
            (207_800, 34400),
            (208_047, 39321),
            (208_920, 57194),
        ] {
            index.append(Offset(offset), position);
        }
        let found = index.lookup(Offset(208_050));
        assert_eq!(
            found,
            OffsetPosition {
                offset: Offset(208_047),
                position: 39321
            }
        );
        assert_eq!(
            index.lookup(Offset(206_300)),
            OffsetPosition {
                offset: Offset(206_233),
                position: 0
            }
        );
        assert_eq!(
            index.lookup(Offset(5)),
            OffsetPosition {
                offset: Offset(206_233),
                position: 0
            }
        );
        index.trim_to_valid_size().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 6 * 8);
        drop(index);
        let reopened = OffsetIndex::open_existing(&path, Offset(206_233)).unwrap();
        assert_eq!(reopened.lookup(Offset(208_050)).position, 39321);
        assert!(reopened.check(60_000).is_ok());
        assert!(reopened.check(50_000).is_err());
    }

    /// The file's allocated bytes (`st_blocks`).
    fn allocated_bytes(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    #[test]
    fn blocks_are_reserved_as_entries_reach_them_and_trimming_frees_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        let mut index = OffsetIndex::create(&path, Offset(0), 10 * 1024 * 1024).unwrap();
        assert_eq!(allocated_bytes(&path), 0, "a new index is sparse");
        // 1,000 entries of 8 bytes end in the second 4 KiB block.
        for offset in 1..=1000u64 {
            index.append(Offset(offset), offset as u32 * 4096);
        }
        let reserved = allocated_bytes(&path);
        assert_eq!(
            reserved, 8192,
            "blocks through the last entry's, no further"
        );
        index.trim_to_valid_size().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 8000);
        assert_eq!(allocated_bytes(&path), reserved, "trimming freed no block");
        // Reopened for appends, the index reserves again from where its entries end.
        drop(index);
        let mut reopened = OffsetIndex::open_existing(&path, Offset(0)).unwrap();
        reopened.resize_for_append(10 * 1024 * 1024).unwrap();
        for offset in 1001..=1100u64 {
            reopened.append(Offset(offset), offset as u32 * 4096);
        }
        assert_eq!(allocated_bytes(&path), 12288);
        assert_eq!(reopened.lookup(Offset(1100)).position, 1100 * 4096);
        assert_eq!(reopened.lookup(Offset(500)).position, 500 * 4096);
    }

    #[test]
    fn truncate_removes_entries_at_and_above() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = OffsetIndex::create(&dir.path().join("i"), Offset(0), 80).unwrap();
        for offset in 1..=5 {
            index.append(Offset(offset * 10), offset as u32 * 100);
        }
        index.truncate_to(Offset(30));
        assert_eq!(index.entry_count(), 2);
        assert_eq!(index.last_entry().unwrap().offset, Offset(20));
    }

    #[test]
    fn an_entry_that_breaks_the_rules_is_left_out_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        // Room for two entries.
        let mut index = OffsetIndex::create(&dir.path().join("i"), Offset(100), 16).unwrap();
        index.append(Offset(110), 1000);
        // Not above the last entry, below the base offset, beyond 31 bits of relative offset.
        index.append(Offset(110), 2000);
        index.append(Offset(50), 2000);
        index.append(Offset(100 + crate::limits::RELATIVE_OFFSET_MAX + 1), 2000);
        assert_eq!(index.entry_count(), 1);
        index.append(Offset(120), 2000);
        // Full: the third entry is left out.
        index.append(Offset(130), 3000);
        let entries: Vec<_> = index.entries().collect();
        assert_eq!(
            entries.iter().map(|e| e.offset).collect::<Vec<_>>(),
            [Offset(110), Offset(120)]
        );
        assert_eq!(index.lookup(Offset(125)).position, 2000);
    }
}
