//! An index file as a growing array of fixed-size entries, shared by the offset and time indexes.

use std::marker::PhantomData;
use std::path::Path;

use super::mmap::MappedIndexFile;
use super::search;
use crate::error::StorageError;
use crate::format::index_entry::{OffsetIndexEntry, TimeIndexEntry};
use crate::limits::{OFFSET_INDEX_ENTRY_BYTES, TIME_INDEX_ENTRY_BYTES};

/// A fixed-size index entry with a search key (relative offset or timestamp).
pub trait IndexEntry: Copy + std::fmt::Debug {
    const BYTES: usize;
    fn decode_at(entries: &[u8], entry_index: usize) -> Option<Self>;
    fn encode_into(&self, out: &mut [u8]);
    /// The value lookups search by.
    fn key(&self) -> i64;
}

impl IndexEntry for OffsetIndexEntry {
    const BYTES: usize = OFFSET_INDEX_ENTRY_BYTES;
    fn decode_at(entries: &[u8], entry_index: usize) -> Option<Self> {
        OffsetIndexEntry::decode_at(entries, entry_index)
    }
    fn encode_into(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.encode());
    }
    fn key(&self) -> i64 {
        i64::from(self.relative_offset)
    }
}

impl IndexEntry for TimeIndexEntry {
    const BYTES: usize = TIME_INDEX_ENTRY_BYTES;
    fn decode_at(entries: &[u8], entry_index: usize) -> Option<Self> {
        TimeIndexEntry::decode_at(entries, entry_index)
    }
    fn encode_into(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.encode());
    }
    fn key(&self) -> i64 {
        self.timestamp_ms
    }
}

/// A mapped index file holding `entry_count` valid entries followed by preallocated space.
#[derive(Debug)]
pub struct IndexFile<E: IndexEntry> {
    file: MappedIndexFile,
    entry_count: usize,
    entry: PhantomData<E>,
}

impl<E: IndexEntry> IndexFile<E> {
    /// Creates a new, empty index of `max_bytes` (rounded down to whole entries). A leftover
    /// file at `path` is cut to nothing first, then extended: the length reads as zeros without
    /// writing a page or reserving a block (a sparse file; [`IndexFile::append`] reserves blocks
    /// as entries reach them), so a roll costs no index I/O. Its maps are advised `MADV_RANDOM`,
    /// so the first entry of each page zeroes that page alone.
    pub fn create(path: &Path, max_bytes: u64) -> Result<IndexFile<E>, StorageError> {
        let file = MappedIndexFile::create(path, round_down::<E>(max_bytes))?;
        Ok(IndexFile {
            file,
            entry_count: 0,
            entry: PhantomData,
        })
    }

    /// Opens an existing, trimmed index: every whole entry in the file counts. A length that is
    /// not a multiple of the entry size is corruption.
    pub fn open_existing(path: &Path) -> Result<IndexFile<E>, StorageError> {
        Self::with_every_entry(MappedIndexFile::open_existing(path)?, path)
    }

    /// [`IndexFile::open_existing`], read into memory up to the file's first hole rather than
    /// mapped ([`MappedIndexFile::open_existing_copied`]): for recovery, which keeps a prefix of
    /// the entries ([`IndexFile::keep_prefix`] maps it).
    pub fn open_existing_copied(path: &Path) -> Result<IndexFile<E>, StorageError> {
        let entry_bytes = E::BYTES as u64;
        Self::with_every_entry(MappedIndexFile::open_existing_copied(path, entry_bytes)?, path)
    }

    fn with_every_entry(file: MappedIndexFile, path: &Path) -> Result<IndexFile<E>, StorageError> {
        let length_bytes = file.length_bytes();
        if !length_bytes.is_multiple_of(E::BYTES as u64) {
            return Err(StorageError::Corrupt {
                file: path.to_owned(),
                position: length_bytes,
                reason: format!("length is not a multiple of {} bytes", E::BYTES),
            });
        }
        Ok(IndexFile {
            entry_count: (length_bytes / E::BYTES as u64) as usize,
            file,
            entry: PhantomData,
        })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    pub fn entry_count(&self) -> usize {
        self.entry_count
    }

    pub fn capacity_entries(&self) -> usize {
        self.file.bytes().len() / E::BYTES
    }

    pub fn is_full(&self) -> bool {
        self.entry_count >= self.capacity_entries()
    }

    /// True when the file holds exactly its valid entries (trimmed at roll or close).
    pub fn is_trimmed(&self) -> bool {
        self.entry_count == self.capacity_entries()
    }

    /// The valid entries' bytes.
    pub fn entries_bytes(&self) -> &[u8] {
        &self.file.bytes()[..self.entry_count * E::BYTES]
    }

    pub fn entry(&self, entry_index: usize) -> Option<E> {
        E::decode_at(self.entries_bytes(), entry_index)
    }

    pub fn last_entry(&self) -> Option<E> {
        self.entry_count
            .checked_sub(1)
            .and_then(|last| self.entry(last))
    }

    /// The greatest entry whose key is at most `target`.
    pub fn greatest_at_most(&self, target: i64) -> Option<E> {
        self.greatest_at_most_index(target)
            .and_then(|entry_index| self.entry(entry_index))
    }

    /// The index of the greatest entry whose key is at most `target`.
    pub fn greatest_at_most_index(&self, target: i64) -> Option<usize> {
        let entries = self.entries_bytes();
        let key_at = |entry_index| E::decode_at(entries, entry_index).map_or(i64::MAX, |e| e.key());
        search::greatest_at_most(self.entry_count, E::BYTES, target, key_at)
    }

    /// Appends an entry; the caller has checked `!is_full()` and the ordering rules. Where the
    /// index is full anyway, or the disk has no block for it (a full file system), the entry is
    /// left out, and that logged: an index is a sparse set of hints, and loading a segment scans
    /// its batches past the last entry of either index. Never panics the host.
    pub fn append(&mut self, entry: E) {
        if self.is_full() {
            tracing::error!(
                "index entry left out: {} is full ({} entries)",
                self.path().display(),
                self.entry_count
            );
            return;
        }
        let start = self.entry_count * E::BYTES;
        if let Err(error) = self.file.reserve_through((start + E::BYTES) as u64) {
            tracing::warn!("index entry left out: {error}");
            return;
        }
        entry.encode_into(&mut self.bytes_mut_all()[start..start + E::BYTES]);
        self.entry_count += 1;
    }

    /// Keeps only the first `entry_count` entries, zeroing the rest.
    pub fn truncate_entries(&mut self, entry_count: usize) {
        let entry_count = entry_count.min(self.entry_count);
        let start = entry_count * E::BYTES;
        let end = self.entry_count * E::BYTES;
        // An index read into memory is never written: its first length change maps it.
        if let Some(stale) = self.bytes_mut_all().get_mut(start..end) {
            stale.fill(0);
        }
        self.entry_count = entry_count;
    }

    /// Keeps the first `entry_count` entries (at most those counted now) and drops the rest by
    /// cutting the file there, then grows it back to `max_bytes` for appends: whatever lay past
    /// the kept entries (a preallocated tail, stale or torn entries) reads as zeros, and no page
    /// is written (recovery resuming mid-segment, `segment/recovery.rs`).
    pub fn keep_prefix(&mut self, entry_count: usize, max_bytes: u64) -> Result<(), StorageError> {
        self.entry_count = entry_count.min(self.entry_count);
        let valid_bytes = (self.entry_count * E::BYTES) as u64;
        let length = round_down::<E>(max_bytes).max(valid_bytes);
        self.file.cut_and_resize(valid_bytes, length)
    }

    /// Shrinks the file to its valid entries (roll, close).
    pub fn trim_to_valid_size(&mut self) -> Result<(), StorageError> {
        self.file.resize((self.entry_count * E::BYTES) as u64)
    }

    /// Grows the file back to `max_bytes` so that appends can continue (reopening the active
    /// segment). Never drops valid entries.
    pub fn resize_for_append(&mut self, max_bytes: u64) -> Result<(), StorageError> {
        let valid_bytes = (self.entry_count * E::BYTES) as u64;
        let length = round_down::<E>(max_bytes).max(valid_bytes);
        self.file.resize(length)
    }

    pub fn flush(&self) -> Result<(), StorageError> {
        self.file.flush()
    }

    fn bytes_mut_all(&mut self) -> &mut [u8] {
        self.file.bytes_mut()
    }
}

fn round_down<E: IndexEntry>(bytes: u64) -> u64 {
    bytes / E::BYTES as u64 * E::BYTES as u64
}
