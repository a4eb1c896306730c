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
pub mod producer_ids;
pub mod producer_snapshot;
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
    /// The bytes end before the field or batch being read does (a cut-short buffer or tail).
    #[error("truncated: {needed} bytes needed at byte {at}, {available} available")]
    Truncated {
        /// The byte position of the read.
        at: usize,
        /// The bytes the read needed.
        needed: usize,
        /// The bytes left from `at`.
        available: usize,
    },
    /// `batchLength` is below the smallest batch (or legacy message): the bytes are not a batch.
    #[error("batch length field {batch_length} is smaller than a batch header")]
    BatchLengthTooSmall {
        /// The `batchLength` read.
        batch_length: i32,
    },
    /// The batch's `batchLength` makes it larger than the caller's limit on one batch.
    #[error("batch of {size_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    BatchTooLarge {
        /// The batch's size from its `batchLength`, header included.
        size_bytes: u64,
        /// The caller's limit, in bytes.
        max_bytes: u64,
    },
    /// The batch's magic is not 2: a legacy message set (magic 0 or 1) or not a batch at all.
    #[error("unsupported batch magic {magic}; seglog reads magic 2 only")]
    UnsupportedMagic {
        /// The magic byte read.
        magic: i8,
    },
    /// The batch's CRC-32C does not match its bytes from `attributes` on: they were damaged.
    #[error("CRC-32C mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// The `crc` field.
        stored: u32,
        /// The CRC-32C of the bytes read.
        computed: u32,
    },
    /// A varint or varlong runs past the end or past its longest encoding.
    #[error("malformed varint at byte {at}")]
    Varint {
        /// The varint's byte position.
        at: usize,
    },
    /// A length or count in a record is negative (where null is not allowed) or larger than the
    /// bytes left.
    #[error("{field} length {length} at byte {at} is out of range")]
    Length {
        /// Which length: `record`, `key`, `value`, `headers count`, `header key` or
        /// `header value`.
        field: &'static str,
        /// The length read.
        length: i64,
        /// The length's byte position.
        at: usize,
    },
    /// A record's fields do not take exactly the bytes its `length` prefix declares.
    #[error("record at byte {at} declares {declared} bytes but its fields take {consumed}")]
    RecordSize {
        /// The record's byte position in the records section.
        at: usize,
        /// The record's `length` prefix.
        declared: usize,
        /// The bytes its fields took.
        consumed: usize,
    },
    /// The records section holds another number of records than the batch's `recordsCount`.
    #[error("batch declares {declared} records but holds {found}")]
    RecordCount {
        /// The batch's `recordsCount`.
        declared: i64,
        /// The records found in its records section.
        found: i64,
    },
    /// A record's `offsetDelta` is not its index in the batch: offsets in a produced batch are
    /// dense from 0.
    #[error("record {record_index} has offset delta {offset_delta}, expected {record_index}")]
    OffsetDelta {
        /// The record's index in the batch, from 0.
        record_index: i64,
        /// Its `offsetDelta`.
        offset_delta: i32,
    },
    /// The batch's `lastOffsetDelta` is not `recordsCount - 1`.
    #[error("batch last offset delta {last_offset_delta} does not match {records_count} records")]
    LastOffsetDelta {
        /// The batch's `lastOffsetDelta`.
        last_offset_delta: i32,
        /// The batch's `recordsCount`.
        records_count: i32,
    },
    /// The batch's `recordsCount` is 0 or negative; Kafka never writes an empty batch.
    #[error("batch holds no records")]
    EmptyBatch,
    /// A record header's key is not UTF-8.
    #[error("header key at byte {at} is not UTF-8")]
    HeaderKeyNotUtf8 {
        /// The key's byte position in the records section.
        at: usize,
    },
    /// The compressed records section does not decompress.
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
