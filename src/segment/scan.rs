//! Forward scans over a `.log` file through the I/O seam: batch headers only (to find an offset)
//! or whole, CRC-checked batches (recovery, verification).
//!
//! The scanner reads the file in windows of `window_bytes`, so walking many small batches costs
//! one read per window, not one per batch. Every length comes from the file and is checked against
//! the file's end before it is used.

#![deny(clippy::indexing_slicing)]

use std::path::Path;

use bytes::Bytes;

use crate::error::StorageError;
use crate::format::batch::field;
use crate::format::{Batch, BatchHeader, BatchPrefix, DecodeError, array_at};
use crate::io::StorageFile;
use crate::limits::{BATCH_HEADER_BYTES, BATCH_HEADER_UP_TO_MAGIC_BYTES, LOG_OVERHEAD_BYTES};

/// Default window: large enough to hold many batches, small enough to stay in cache.
pub const SCAN_WINDOW_BYTES: usize = 256 * 1024;
/// Window of a lookup's few hops from an index entry to the batch it wants: one page, since
/// entries are `index.interval.bytes` (4 KiB by default) apart.
pub const LOOKUP_WINDOW_BYTES: usize = 4096;

/// One step of a scan.
#[derive(Debug)]
pub enum ScanStep<T> {
    /// An item that starts at `position`.
    Item { position: u64, item: T },
    /// The scan reached the end of the valid range exactly.
    End,
    /// The bytes at `position` are not a valid batch: a torn tail or corruption.
    Invalid { position: u64, error: DecodeError },
}

/// Walks the batches of one `.log` from a starting position up to an end position.
pub struct LogScanner<'a> {
    file: &'a dyn StorageFile,
    path: &'a Path,
    position: u64,
    end: u64,
    window: Bytes,
    window_start: u64,
    window_bytes: usize,
    /// What reads after the first take at least (`window_bytes` unless `then_window` set it);
    /// it becomes `window_bytes` once the file was read.
    later_window_bytes: usize,
}

impl<'a> LogScanner<'a> {
    pub fn new(file: &'a dyn StorageFile, path: &'a Path, position: u64, end: u64) -> Self {
        LogScanner::with_window(file, path, position, end, SCAN_WINDOW_BYTES)
    }

    /// A scanner reading at least `window_bytes` at a time (at least what one step needs): small
    /// for a few hops between headers (a lookup), large for a whole segment (recovery).
    pub fn with_window(
        file: &'a dyn StorageFile,
        path: &'a Path,
        position: u64,
        end: u64,
        window_bytes: usize,
    ) -> Self {
        LogScanner {
            file,
            path,
            position,
            end,
            window: Bytes::new(),
            window_start: 0,
            window_bytes,
            later_window_bytes: window_bytes,
        }
    }

    /// After its first read, reads at least `window_bytes` at a time: a fetch reads its index
    /// entry's page first and, once it has to read past it, what the batch it wants takes.
    pub fn then_window(mut self, window_bytes: usize) -> Self {
        self.later_window_bytes = window_bytes;
        self
    }

    /// The bytes read so far from `position` to the end of what was read, if `position` lies in
    /// it (a caller that found a batch serves it from here rather than reading it again).
    pub fn window_from(&self, position: u64) -> Option<Bytes> {
        let start = usize::try_from(position.checked_sub(self.window_start)?).ok()?;
        (start < self.window.len()).then(|| self.window.slice(start..))
    }

    /// Position of the next batch.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The next batch's header, without reading or checking its records.
    pub fn next_header(&mut self) -> Result<ScanStep<BatchHeader>, StorageError> {
        let position = self.position;
        let size_bytes = match self.next_size(position)? {
            Ok(Some(size_bytes)) => size_bytes,
            Ok(None) => return Ok(ScanStep::End),
            Err(error) => return Ok(ScanStep::Invalid { position, error }),
        };
        let Some(bytes) = self.bytes_at(position, BATCH_HEADER_BYTES)? else {
            return Ok(truncated(position, BATCH_HEADER_BYTES, self.end));
        };
        let header = match BatchHeader::parse(&bytes) {
            Ok(header) => header,
            Err(error) => return Ok(ScanStep::Invalid { position, error }),
        };
        self.position += size_bytes;
        Ok(ScanStep::Item {
            position,
            item: header,
        })
    }

    /// The next whole batch, with its framing and CRC checked.
    pub fn next_batch(&mut self) -> Result<ScanStep<Batch>, StorageError> {
        let position = self.position;
        let size_bytes = match self.next_size(position)? {
            Ok(Some(size_bytes)) => size_bytes,
            Ok(None) => return Ok(ScanStep::End),
            Err(error) => return Ok(ScanStep::Invalid { position, error }),
        };
        let Some(bytes) = self.bytes_at(position, size_bytes as usize)? else {
            return Ok(truncated(position, size_bytes as usize, self.end));
        };
        match Batch::decode(&bytes, size_bytes) {
            Ok(batch) => {
                self.position += size_bytes;
                Ok(ScanStep::Item {
                    position,
                    item: batch,
                })
            }
            Err(error) => Ok(ScanStep::Invalid { position, error }),
        }
    }

    /// Size of the batch at `position` from its prefix: `Ok(None)` at the end, an error if the
    /// prefix is invalid or the batch runs past the end.
    fn next_size(
        &mut self,
        position: u64,
    ) -> Result<Result<Option<u64>, DecodeError>, StorageError> {
        if position >= self.end {
            return Ok(Ok(None));
        }
        let Some(bytes) = self.bytes_at(position, BATCH_HEADER_UP_TO_MAGIC_BYTES)? else {
            return Ok(Err(DecodeError::Truncated {
                at: 0,
                needed: BATCH_HEADER_UP_TO_MAGIC_BYTES,
                available: (self.end - position) as usize,
            }));
        };
        let prefix = match BatchPrefix::parse(&bytes) {
            Ok(prefix) => prefix,
            Err(DecodeError::UnsupportedMagic { magic }) => {
                // A legacy message is only reported as such when it fits the file; otherwise the
                // bytes are a torn tail like any other.
                let size_bytes = match legacy_message_size(&bytes) {
                    Ok(size_bytes) => size_bytes,
                    Err(error) => return Ok(Err(error)),
                };
                if position + size_bytes > self.end {
                    return Ok(Err(truncated_error(size_bytes, self.end - position)));
                }
                return self.check_legacy_message(position, size_bytes, magic);
            }
            Err(error) => return Ok(Err(error)),
        };
        let size_bytes = prefix.size_bytes();
        if position + size_bytes > self.end {
            return Ok(Err(truncated_error(size_bytes, self.end - position)));
        }
        Ok(Ok(Some(size_bytes)))
    }

    /// A legacy (magic 0 or 1) message whose CRC-32 holds is old-format data, reported as
    /// `UnsupportedMagic`; one whose CRC fails is damage, reported as a CRC mismatch (Kafka's
    /// `LegacyRecord.ensureValid`: CRC-32 over the bytes from the magic to the end).
    fn check_legacy_message(
        &mut self,
        position: u64,
        size_bytes: u64,
        magic: i8,
    ) -> Result<Result<Option<u64>, DecodeError>, StorageError> {
        if !(0..=1).contains(&magic) {
            return Ok(Err(DecodeError::UnsupportedMagic { magic }));
        }
        let Some(message) = self.bytes_at(position, size_bytes as usize)? else {
            return Ok(Err(truncated_error(size_bytes, self.end - position)));
        };
        let (stored, computed) = match legacy_crcs(&message) {
            Ok(crcs) => crcs,
            Err(error) => return Ok(Err(error)),
        };
        if stored != computed {
            return Ok(Err(DecodeError::CrcMismatch { stored, computed }));
        }
        Ok(Err(DecodeError::UnsupportedMagic { magic }))
    }

    /// `length` bytes at `position`, or `None` if they run past the end.
    fn bytes_at(&mut self, position: u64, length: usize) -> Result<Option<Bytes>, StorageError> {
        if position + length as u64 > self.end {
            return Ok(None);
        }
        let window_end = self.window_start + self.window.len() as u64;
        if position < self.window_start || position + length as u64 > window_end {
            self.fill_window(position, length)?;
        }
        let start = (position - self.window_start) as usize;
        if start + length > self.window.len() {
            return Ok(None);
        }
        Ok(Some(self.window.slice(start..start + length)))
    }

    fn fill_window(&mut self, position: u64, length: usize) -> Result<(), StorageError> {
        let wanted = length.max(self.window_bytes) as u64;
        self.window_bytes = self.later_window_bytes;
        let available = self.end - position;
        let buffer = self
            .file
            .read_to_vec(wanted.min(available) as usize, position)
            .map_err(|source| StorageError::io("read", self.path, source))?;
        self.window = Bytes::from(buffer);
        self.window_start = position;
        Ok(())
    }
}

/// Byte of a legacy (magic 0 or 1) message where its CRC-32 is stored.
const LEGACY_CRC_AT: usize = 12;
/// Byte of a legacy message where its magic is, the first byte its CRC-32 covers.
const LEGACY_MAGIC_AT: usize = 16;

/// Size of a legacy message from its prefix: the log overhead plus its length field.
fn legacy_message_size(prefix: &[u8]) -> Result<u64, DecodeError> {
    let length = i32::from_be_bytes(array_at(prefix, field::BATCH_LENGTH)?);
    Ok(LOG_OVERHEAD_BYTES as u64 + length.max(0) as u64)
}

/// The CRC-32 a legacy message stores and the one computed over its bytes from the magic on.
fn legacy_crcs(message: &[u8]) -> Result<(u32, u32), DecodeError> {
    let truncated = || truncated_error(LEGACY_MAGIC_AT as u64, message.len() as u64);
    let (before_magic, covered) = message
        .split_first_chunk::<LEGACY_MAGIC_AT>()
        .ok_or_else(truncated)?;
    let stored = u32::from_be_bytes(array_at(before_magic, LEGACY_CRC_AT)?);
    Ok((stored, crc32fast::hash(covered)))
}

fn truncated_error(needed: u64, available: u64) -> DecodeError {
    DecodeError::Truncated {
        at: 0,
        needed: needed as usize,
        available: available as usize,
    }
}

fn truncated<T>(position: u64, needed: usize, end: u64) -> ScanStep<T> {
    ScanStep::Invalid {
        position,
        error: DecodeError::Truncated {
            at: 0,
            needed,
            available: end.saturating_sub(position) as usize,
        },
    }
}
