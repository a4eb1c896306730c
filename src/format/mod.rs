//! Bytes <-> values for everything seglog stores: RecordBatch v2, records, index entries, segment
//! file names and checkpoint files. No I/O happens here, and no input makes this module panic.
//!
//! `docs/FORMAT.md` is the source of truth for every byte; each file points at its section.

#![deny(clippy::indexing_slicing)]

pub mod batch;
pub mod checkpoint;
pub mod compression;
pub mod crc;
pub mod file_name;
pub mod index_entry;
pub mod prewrite;
pub mod record;
pub mod topics;
pub mod varint;

use thiserror::Error;

pub use batch::{Batch, BatchAttributes, BatchBuilder, BatchHeader, BatchPrefix, RecordSection};
pub use compression::{Compression, DecompressError};
pub use record::{HeadersView, NewRecord, Record, RecordHeader, RecordView};

/// Why bytes are not a valid batch or record. Positions are relative to the decoded buffer.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("truncated: {needed} bytes needed at byte {at}, {available} available")]
    Truncated {
        at: usize,
        needed: usize,
        available: usize,
    },
    #[error("batch length field {batch_length} is smaller than a batch header")]
    BatchLengthTooSmall { batch_length: i32 },
    #[error("batch of {size_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    BatchTooLarge { size_bytes: u64, max_bytes: u64 },
    #[error("unsupported batch magic {magic}; seglog reads magic 2 only")]
    UnsupportedMagic { magic: i8 },
    #[error("CRC-32C mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("malformed varint at byte {at}")]
    Varint { at: usize },
    #[error("{field} length {length} at byte {at} is out of range")]
    Length {
        field: &'static str,
        length: i64,
        at: usize,
    },
    #[error("record at byte {at} declares {declared} bytes but its fields take {consumed}")]
    RecordSize {
        at: usize,
        declared: usize,
        consumed: usize,
    },
    #[error("batch declares {declared} records but holds {found}")]
    RecordCount { declared: i64, found: i64 },
    #[error("record {record_index} has offset delta {offset_delta}, expected {record_index}")]
    OffsetDelta {
        record_index: i64,
        offset_delta: i32,
    },
    #[error("batch last offset delta {last_offset_delta} does not match {records_count} records")]
    LastOffsetDelta {
        last_offset_delta: i32,
        records_count: i32,
    },
    #[error("batch holds no records")]
    EmptyBatch,
    #[error("header key at byte {at} is not UTF-8")]
    HeaderKeyNotUtf8 { at: usize },
    #[error(transparent)]
    Decompress(#[from] DecompressError),
}

/// Reads big-endian integers from a byte slice with bounds checks; the decoders' only reader.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, position: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.position
    }

    pub(crate) fn remaining(&self) -> usize {
        self.rest().len()
    }

    pub(crate) fn take(&mut self, count: usize) -> Result<&'a [u8], DecodeError> {
        let taken = self.rest().get(..count).ok_or(DecodeError::Truncated {
            at: self.position,
            needed: count,
            available: self.remaining(),
        })?;
        self.position += count;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let array = array_at(self.bytes, self.position)?;
        self.position += N;
        Ok(array)
    }

    /// The bytes read since position `start` (empty if `start` is ahead).
    pub(crate) fn consumed_since(&self, start: usize) -> &'a [u8] {
        self.bytes.get(start..self.position).unwrap_or_default()
    }

    /// The bytes not read yet (`position` never passes the end, so this is never cut short).
    fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.position..).unwrap_or_default()
    }

    pub(crate) fn i8(&mut self) -> Result<i8, DecodeError> {
        Ok(i8::from_be_bytes(self.array()?))
    }
    pub(crate) fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    pub(crate) fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    pub(crate) fn varint(&mut self) -> Result<i32, DecodeError> {
        let at = self.position;
        let (value, length) =
            varint::decode_varint(self.rest()).ok_or(DecodeError::Varint { at })?;
        self.position += length;
        Ok(value)
    }
    pub(crate) fn varlong(&mut self) -> Result<i64, DecodeError> {
        let at = self.position;
        let (value, length) =
            varint::decode_varlong(self.rest()).ok_or(DecodeError::Varint { at })?;
        self.position += length;
        Ok(value)
    }
}

/// The `N` bytes of `bytes` starting at byte `at`, or `Truncated` if they run past its end.
pub(crate) fn array_at<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], DecodeError> {
    bytes
        .get(at..)
        .and_then(<[u8]>::first_chunk::<N>)
        .copied()
        .ok_or(DecodeError::Truncated {
            at,
            needed: N,
            available: bytes.len().saturating_sub(at),
        })
}
