//! RecordBatch v2, the unit of every `.log` file (FORMAT.md § RecordBatch v2; Kafka's
//! `DefaultRecordBatch`).
//!
//! A batch is a 61-byte big-endian header followed by its records. The CRC-32C at byte 17 covers
//! bytes 21 to the end, so `baseOffset` and `partitionLeaderEpoch` can be stamped without
//! recomputing it, which is how the log assigns offsets. Decoding validates every length against
//! the buffer before slicing, so any input yields a value or a [`DecodeError`], never a panic.

use bytes::{BufMut, Bytes};

use super::compression::{self, Compression};
use super::crc::crc32c;
use super::record::{NewRecord, Record, RecordView};
use super::{DecodeError, Reader};
use crate::limits::{
    BATCH_HEADER_BYTES, BATCH_HEADER_UP_TO_MAGIC_BYTES, BATCH_MAGIC_V2,
    DECOMPRESSED_BATCH_BYTES_MAX, LOG_OVERHEAD_BYTES,
};

/// Byte positions of the header fields, in header order.
pub mod field {
    /// `baseOffset` (`int64`).
    pub const BASE_OFFSET: usize = 0;
    /// `batchLength` (`int32`).
    pub const BATCH_LENGTH: usize = 8;
    /// `partitionLeaderEpoch` (`int32`).
    pub const PARTITION_LEADER_EPOCH: usize = 12;
    /// `magic` (`int8`).
    pub const MAGIC: usize = 16;
    /// `crc` (`uint32`, CRC-32C).
    pub const CRC: usize = 17;
    /// `attributes` (`int16`), the first byte the CRC covers.
    pub const ATTRIBUTES: usize = 21;
    /// `lastOffsetDelta` (`int32`).
    pub const LAST_OFFSET_DELTA: usize = 23;
    /// `baseTimestamp` (`int64`).
    pub const BASE_TIMESTAMP: usize = 27;
    /// `maxTimestamp` (`int64`).
    pub const MAX_TIMESTAMP: usize = 35;
    /// `producerId` (`int64`).
    pub const PRODUCER_ID: usize = 43;
    /// `producerEpoch` (`int16`).
    pub const PRODUCER_EPOCH: usize = 51;
    /// `baseSequence` (`int32`).
    pub const BASE_SEQUENCE: usize = 53;
    /// `recordsCount` (`int32`).
    pub const RECORDS_COUNT: usize = 57;
    /// The first record: the end of the header.
    pub const RECORDS: usize = 61;
}

const _: () = assert!(field::RECORDS == BATCH_HEADER_BYTES);
const _: () = assert!(field::CRC + 4 == field::ATTRIBUTES);

/// The attributes bit field (`int16` at byte 21).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchAttributes(pub u16);

impl BatchAttributes {
    const COMPRESSION_MASK: u16 = 0x07;
    const TIMESTAMP_TYPE_LOG_APPEND: u16 = 0x08;
    const TRANSACTIONAL: u16 = 0x10;
    const CONTROL: u16 = 0x20;
    const DELETE_HORIZON: u16 = 0x40;

    /// The codec of the records section (bits 0-2); an unknown codec is an error.
    pub fn compression(self) -> Result<Compression, DecodeError> {
        Ok(Compression::from_attribute_bits(
            (self.0 & Self::COMPRESSION_MASK) as u8,
        )?)
    }
    /// True for `LogAppendTime`, false for `CreateTime`.
    pub fn is_log_append_time(self) -> bool {
        self.0 & Self::TIMESTAMP_TYPE_LOG_APPEND != 0
    }
    /// Whether a transactional producer wrote the batch (bit 4).
    pub fn is_transactional(self) -> bool {
        self.0 & Self::TRANSACTIONAL != 0
    }
    /// Whether the batch holds a control record (a transaction marker; bit 5), not data.
    pub fn is_control(self) -> bool {
        self.0 & Self::CONTROL != 0
    }
    /// Set by the cleaner once tombstones have a delete horizon in `baseTimestamp`.
    pub fn has_delete_horizon(self) -> bool {
        self.0 & Self::DELETE_HORIZON != 0
    }
    /// These attributes with the `LogAppendTime` bit set.
    pub fn with_log_append_time(self) -> BatchAttributes {
        BatchAttributes(self.0 | Self::TIMESTAMP_TYPE_LOG_APPEND)
    }
}

/// The smallest legacy (magic 0) message after the log overhead (`LegacyRecord.RECORD_OVERHEAD_V0`).
const LEGACY_MESSAGE_BYTES_MIN: usize = 14;

/// The first 17 bytes of a batch: enough to find the next batch while scanning a `.log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPrefix {
    /// `baseOffset`: the offset of the batch's first record.
    pub base_offset: i64,
    /// `batchLength`: the bytes after this field, to the end of the batch.
    pub batch_length: i32,
    /// `partitionLeaderEpoch`: the leader epoch it was written in (-1 in batches seglog builds).
    pub partition_leader_epoch: i32,
    /// `magic`: the format version, 2 for a RecordBatch.
    pub magic: i8,
}

impl BatchPrefix {
    /// Parses the prefix; checks only what a scanner needs (length and magic), not the CRC.
    pub fn parse(bytes: &[u8]) -> Result<BatchPrefix, DecodeError> {
        let mut reader = Reader::new(bytes);
        let prefix = BatchPrefix {
            base_offset: reader.i64()?,
            batch_length: reader.i32()?,
            partition_leader_epoch: reader.i32()?,
            magic: reader.i8()?,
        };
        // Kafka's order (`FileLogInputStream.nextBatch`): a length below the smallest legacy
        // message is corruption; then the magic decides the format; then the v2 minimum.
        let too_small = |minimum: usize| (prefix.batch_length as i64) < minimum as i64;
        if too_small(LEGACY_MESSAGE_BYTES_MIN) {
            return Err(DecodeError::BatchLengthTooSmall {
                batch_length: prefix.batch_length,
            });
        }
        if prefix.magic != BATCH_MAGIC_V2 {
            return Err(DecodeError::UnsupportedMagic {
                magic: prefix.magic,
            });
        }
        if too_small(BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) {
            return Err(DecodeError::BatchLengthTooSmall {
                batch_length: prefix.batch_length,
            });
        }
        Ok(prefix)
    }

    /// Total bytes of the batch, header included.
    pub fn size_bytes(&self) -> u64 {
        LOG_OVERHEAD_BYTES as u64 + self.batch_length as u64
    }
}

/// The 61-byte header of a RecordBatch v2, fields in on-disk order and Kafka's types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// `baseOffset`: the offset of the batch's first record.
    pub base_offset: i64,
    /// `batchLength`: the bytes after this field, to the end of the batch.
    pub batch_length: i32,
    /// `partitionLeaderEpoch`: the leader epoch it was written in (-1 in batches seglog builds).
    pub partition_leader_epoch: i32,
    /// `magic`: the format version, 2 for a RecordBatch.
    pub magic: i8,
    /// `crc`: the CRC-32C of the bytes from `attributes` to the end of the batch.
    pub crc: u32,
    /// `attributes`: compression, timestamp type, transactional, control, delete horizon.
    pub attributes: BatchAttributes,
    /// `lastOffsetDelta`: the last record's offset minus `baseOffset`.
    pub last_offset_delta: i32,
    /// `baseTimestamp`: the first record's timestamp, or the delete horizon once the cleaner
    /// set one ([`BatchAttributes::has_delete_horizon`]); milliseconds.
    pub base_timestamp: i64,
    /// `maxTimestamp`: the largest record timestamp, or the append time under `LogAppendTime`;
    /// milliseconds.
    pub max_timestamp: i64,
    /// `producerId`: -1 for a non-idempotent producer.
    pub producer_id: i64,
    /// `producerEpoch`: -1 for a non-idempotent producer.
    pub producer_epoch: i16,
    /// `baseSequence`: the first record's sequence number; -1 for a non-idempotent producer.
    pub base_sequence: i32,
    /// `recordsCount`: how many records the batch holds.
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses the header fields without validating them.
    pub fn parse(bytes: &[u8]) -> Result<BatchHeader, DecodeError> {
        let mut reader = Reader::new(bytes);
        Ok(BatchHeader {
            base_offset: reader.i64()?,
            batch_length: reader.i32()?,
            partition_leader_epoch: reader.i32()?,
            magic: reader.i8()?,
            crc: reader.u32()?,
            attributes: BatchAttributes(reader.i16()? as u16),
            last_offset_delta: reader.i32()?,
            base_timestamp: reader.i64()?,
            max_timestamp: reader.i64()?,
            producer_id: reader.i64()?,
            producer_epoch: reader.i16()?,
            base_sequence: reader.i32()?,
            records_count: reader.i32()?,
        })
    }

    /// `baseOffset + lastOffsetDelta`.
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    /// Total bytes of the batch, header included.
    pub fn size_bytes(&self) -> u64 {
        LOG_OVERHEAD_BYTES as u64 + self.batch_length.max(0) as u64
    }

    /// Writes the header into `out`.
    fn write(&self, out: &mut [u8; BATCH_HEADER_BYTES]) {
        let mut cursor = out.as_mut_slice();
        cursor.put_i64(self.base_offset);
        cursor.put_i32(self.batch_length);
        cursor.put_i32(self.partition_leader_epoch);
        cursor.put_i8(self.magic);
        cursor.put_u32(self.crc);
        cursor.put_i16(self.attributes.0 as i16);
        cursor.put_i32(self.last_offset_delta);
        cursor.put_i64(self.base_timestamp);
        cursor.put_i64(self.max_timestamp);
        cursor.put_i64(self.producer_id);
        cursor.put_i16(self.producer_epoch);
        cursor.put_i32(self.base_sequence);
        cursor.put_i32(self.records_count);
    }
}

/// A batch whose framing, magic and CRC have been checked. Holds the batch's own bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    header: BatchHeader,
    bytes: Bytes,
}

impl Batch {
    /// Decodes the batch at the start of `buffer`, checking its length against the buffer and
    /// `max_bytes`, its magic and its CRC. Returns the batch; its size is `batch.size_bytes()`.
    pub fn decode(buffer: &Bytes, max_bytes: u64) -> Result<Batch, DecodeError> {
        let batch = Batch::decode_without_crc_check(buffer, max_bytes)?;
        let computed = crc32c(crc_covered(&batch.bytes)?);
        if computed != batch.header.crc {
            return Err(DecodeError::CrcMismatch {
                stored: batch.header.crc,
                computed,
            });
        }
        Ok(batch)
    }

    /// Decodes like `decode` (length, header, magic: every byte still bounds-checked) but does
    /// not compute the CRC again: for bytes whose CRC was already checked, such as an
    /// `Engine::fetch` result (the engine checks every batch's CRC on its read path and serves
    /// none that fails). What Kafka's consumer does with `check.crcs=false`; Kafka's broker, unlike
    /// seglog's read path, does not check CRCs when it serves a fetch.
    pub fn decode_without_crc_check(buffer: &Bytes, max_bytes: u64) -> Result<Batch, DecodeError> {
        let prefix = BatchPrefix::parse(buffer)?;
        let size_bytes = prefix.size_bytes();
        if size_bytes > max_bytes {
            return Err(DecodeError::BatchTooLarge {
                size_bytes,
                max_bytes,
            });
        }
        if size_bytes > buffer.len() as u64 {
            return Err(DecodeError::Truncated {
                at: 0,
                needed: size_bytes as usize,
                available: buffer.len(),
            });
        }
        let bytes = buffer.slice(..size_bytes as usize);
        let header = BatchHeader::parse(&bytes)?;
        Ok(Batch { header, bytes })
    }

    /// The batch's parsed header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The batch's bytes, header included.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Total bytes of the batch, header included.
    pub fn size_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The offset of the batch's first record (`baseOffset`).
    pub fn base_offset(&self) -> i64 {
        self.header.base_offset
    }

    /// The offset of the batch's last record (`baseOffset + lastOffsetDelta`).
    pub fn last_offset(&self) -> i64 {
        self.header.last_offset()
    }

    /// The records section, decompressed when the batch is compressed.
    pub fn records_section(&self) -> Result<Bytes, DecodeError> {
        let section = self.bytes.slice(BATCH_HEADER_BYTES..);
        match self.header.attributes.compression()? {
            Compression::None => Ok(section),
            codec => Ok(compression::decompress(
                codec,
                &section,
                DECOMPRESSED_BATCH_BYTES_MAX,
            )?),
        }
    }

    /// The records section ready to be read in place (`RecordSection::iter`), decompressed when
    /// the batch is compressed.
    pub fn record_section(&self) -> Result<RecordSection, DecodeError> {
        Ok(RecordSection {
            bytes: self.records_section()?,
            records_count: self.header.records_count,
        })
    }

    /// Decodes every record and checks their number against `recordsCount`. Offset deltas are not
    /// checked here (compaction leaves gaps); `validate_records` checks them for appends.
    pub fn records(&self) -> Result<Vec<Record>, DecodeError> {
        self.record_section()?.to_records()
    }

    /// The record at `offset`, if the batch holds it, decoding only that one: the records before
    /// it are skipped by their length prefix (a point lookup reads one record, not the batch).
    pub fn record_at(&self, offset: i64) -> Result<Option<Record>, DecodeError> {
        let Some(offset_delta) = offset
            .checked_sub(self.base_offset())
            .and_then(|delta| i32::try_from(delta).ok())
        else {
            return Ok(None);
        };
        let section = self.records_section()?;
        let mut reader = Reader::new(&section);
        while reader.remaining() > 0 {
            let mut next = reader.clone();
            if Record::skip(&mut next)? == offset_delta {
                return Record::decode(&mut reader, &section).map(Some);
            }
            reader = next;
        }
        Ok(None)
    }

    /// Full validation of a batch handed in by a producer: records decode, the count matches
    /// `lastOffsetDelta + 1`, and offset deltas are dense from zero. `visit` sees each record,
    /// read in place, so a caller with further checks decodes them once and allocates nothing.
    pub fn validate_records(
        &self,
        mut visit: impl FnMut(&RecordView<'_>),
    ) -> Result<(), DecodeError> {
        if self.header.records_count <= 0 {
            return Err(DecodeError::EmptyBatch);
        }
        let section = self.record_section()?;
        let mut first_offset_delta_error = None;
        for (record_index, record) in section.iter().enumerate() {
            let record = record?;
            if first_offset_delta_error.is_none()
                && i64::from(record.offset_delta) != record_index as i64
            {
                first_offset_delta_error = Some(DecodeError::OffsetDelta {
                    record_index: record_index as i64,
                    offset_delta: record.offset_delta,
                });
            }
            visit(&record);
        }
        if i64::from(self.header.last_offset_delta) + 1 != i64::from(self.header.records_count) {
            return Err(DecodeError::LastOffsetDelta {
                last_offset_delta: self.header.last_offset_delta,
                records_count: self.header.records_count,
            });
        }
        first_offset_delta_error.map_or(Ok(()), Err)
    }
}

/// A batch's records section (decompressed), read in place by `iter`: each record borrows the
/// section, so a scan allocates nothing per record.
#[derive(Debug, Clone)]
pub struct RecordSection {
    bytes: Bytes,
    records_count: i32,
}

impl RecordSection {
    /// Every record in order; after the last, an error if their number is not the batch's
    /// `recordsCount`. Stops after the first error.
    pub fn iter(&self) -> RecordViews<'_> {
        RecordViews {
            reader: Reader::new(&self.bytes),
            declared: i64::from(self.records_count),
            found: 0,
            done: false,
        }
    }

    /// The records, owned (their bytes shared with the section).
    pub fn to_records(&self) -> Result<Vec<Record>, DecodeError> {
        // Each record takes at least 7 bytes, which bounds the allocation by the input's size.
        let capacity = usize::try_from(self.records_count)
            .unwrap_or(0)
            .min(self.bytes.len() / 7);
        let mut records = Vec::with_capacity(capacity);
        for view in self.iter() {
            records.push(view?.to_record(&self.bytes));
        }
        Ok(records)
    }
}

/// The records of a `RecordSection`, decoded in place.
#[derive(Debug, Clone)]
pub struct RecordViews<'a> {
    reader: Reader<'a>,
    declared: i64,
    found: i64,
    done: bool,
}

impl<'a> Iterator for RecordViews<'a> {
    type Item = Result<RecordView<'a>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.reader.remaining() == 0 {
            self.done = true;
            return (self.found != self.declared).then_some(Err(DecodeError::RecordCount {
                declared: self.declared,
                found: self.found,
            }));
        }
        let view = RecordView::decode(&mut self.reader);
        self.found += 1;
        self.done = view.is_err();
        Some(view)
    }
}

/// Stamps `base_offset` into an encoded batch. The CRC does not cover it, so nothing else changes.
/// Returns false (and changes nothing) if `batch` is shorter than a batch header.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) -> bool {
    let Some(field) = batch.get_mut(field::BASE_OFFSET..field::BASE_OFFSET + 8) else {
        return false;
    };
    field.copy_from_slice(&base_offset.to_be_bytes());
    true
}

/// Stamps `partitionLeaderEpoch` into an encoded batch. The CRC does not cover it, so nothing else
/// changes. Returns false (and changes nothing) if `batch` is shorter than a batch header.
pub fn set_partition_leader_epoch(batch: &mut [u8], leader_epoch: i32) -> bool {
    let range = field::PARTITION_LEADER_EPOCH..field::PARTITION_LEADER_EPOCH + 4;
    let Some(field) = batch.get_mut(range) else {
        return false;
    };
    field.copy_from_slice(&leader_epoch.to_be_bytes());
    true
}

/// Marks an encoded batch as `LogAppendTime` with `max_timestamp = now_ms` and re-computes its CRC,
/// as Kafka's leader does for topics with `message.timestamp.type=LogAppendTime`.
/// Returns false (and changes nothing) if `batch` is shorter than a batch header.
pub fn set_log_append_time(batch: &mut [u8], now_ms: i64) -> bool {
    let Some(header) = batch.first_chunk_mut::<BATCH_HEADER_BYTES>() else {
        return false;
    };
    let attributes = u16::from_be_bytes([header[field::ATTRIBUTES], header[field::ATTRIBUTES + 1]]);
    let attributes = BatchAttributes(attributes).with_log_append_time();
    header[field::ATTRIBUTES..field::ATTRIBUTES + 2].copy_from_slice(&attributes.0.to_be_bytes());
    header[field::MAX_TIMESTAMP..field::MAX_TIMESTAMP + 8].copy_from_slice(&now_ms.to_be_bytes());
    write_crc(batch);
    true
}

/// The bytes a batch's CRC-32C covers: from the attributes field to the end.
fn crc_covered(batch: &[u8]) -> Result<&[u8], DecodeError> {
    batch
        .get(field::ATTRIBUTES..)
        .ok_or(DecodeError::Truncated {
            at: 0,
            needed: field::ATTRIBUTES,
            available: batch.len(),
        })
}

/// Stores the CRC-32C of bytes 21 to the end at bytes 17 to 20. Leaves a slice too short to hold
/// the CRC field unchanged (callers only pass whole batches).
fn write_crc(batch: &mut [u8]) {
    let Some((before_attributes, covered)) = batch.split_first_chunk_mut::<{ field::ATTRIBUTES }>()
    else {
        return;
    };
    let crc = crc32c(covered);
    before_attributes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Builds an uncompressed RecordBatch v2 exactly as Kafka's `MemoryRecordsBuilder` does for a
/// non-transactional, non-idempotent producer: producer id, epoch and sequence are -1.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    base_offset: i64,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    records_count: i32,
    /// `producerId`, `producerEpoch`, `baseSequence`: -1 each unless an idempotent producer
    /// set them.
    producer: (i64, i16, i32),
    buffer: Vec<u8>,
}

impl BatchBuilder {
    /// An empty batch whose first record gets offset `base_offset` (the log stamps the real one
    /// on append).
    pub fn new(base_offset: i64) -> BatchBuilder {
        BatchBuilder::with_capacity(base_offset, 1024)
    }

    /// Like [`BatchBuilder::new`], with room for `capacity_bytes` of batch before it reallocates.
    pub fn with_capacity(base_offset: i64, capacity_bytes: usize) -> BatchBuilder {
        let mut buffer = Vec::with_capacity(capacity_bytes.max(BATCH_HEADER_BYTES));
        buffer.resize(BATCH_HEADER_BYTES, 0);
        BatchBuilder {
            base_offset,
            base_timestamp: None,
            max_timestamp: -1,
            records_count: 0,
            producer: (-1, -1, -1),
            buffer,
        }
    }

    /// Marks the batch as an idempotent producer's: its id, epoch and the sequence number of
    /// its first record (Kafka's `producerId`, `producerEpoch`, `baseSequence`).
    pub fn with_producer(
        mut self,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) -> BatchBuilder {
        self.producer = (producer_id, producer_epoch, base_sequence);
        self
    }

    /// Appends a record; its offset is the next in the batch and its timestamp is kept as a delta
    /// from the first record's.
    pub fn push(&mut self, record: &NewRecord<'_>) {
        let base_timestamp = *self.base_timestamp.get_or_insert(record.timestamp_ms);
        let timestamp_delta = record.timestamp_ms.wrapping_sub(base_timestamp);
        record.encode(self.records_count, timestamp_delta, &mut self.buffer);
        self.records_count += 1;
        self.max_timestamp = self.max_timestamp.max(record.timestamp_ms);
    }

    /// Bytes the batch would take if built now.
    pub fn size_bytes(&self) -> usize {
        self.buffer.len()
    }

    /// Bytes the batch would take after pushing `record`.
    pub fn size_bytes_with(&self, record: &NewRecord<'_>) -> usize {
        let base_timestamp = self.base_timestamp.unwrap_or(record.timestamp_ms);
        let timestamp_delta = record.timestamp_ms.wrapping_sub(base_timestamp);
        self.buffer.len() + record.size_bytes(self.records_count, timestamp_delta)
    }

    /// How many records were pushed.
    pub fn records_count(&self) -> i32 {
        self.records_count
    }

    /// Writes the header and CRC. `None` for a batch with no records, which Kafka never writes.
    pub fn build(mut self) -> Option<Bytes> {
        if self.records_count == 0 {
            return None;
        }
        let header = self.header(Compression::None, self.buffer.len());
        write_header_and_crc(&header, &mut self.buffer);
        Some(Bytes::from(self.buffer))
    }

    /// Builds a control batch (attributes bit 5; uncompressed): consumers skip it, as they skip
    /// Kafka's transaction markers and KRaft's leader-change records. Each record's key should
    /// be a control key (`int16` version, `int16` type). `None` for a batch with no records.
    pub fn build_control(mut self) -> Option<Bytes> {
        if self.records_count == 0 {
            return None;
        }
        let mut header = self.header(Compression::None, self.buffer.len());
        header.attributes = BatchAttributes(header.attributes.0 | BatchAttributes::CONTROL);
        write_header_and_crc(&header, &mut self.buffer);
        Some(Bytes::from(self.buffer))
    }

    /// Builds the batch with its records section compressed by `codec`, as Kafka's
    /// `MemoryRecordsBuilder` does with `compression.type` set: the header stays in the clear,
    /// attributes bits 0-2 name the codec, and `batchLength` and the CRC-32C cover the compressed
    /// bytes. `recordsCount` and `lastOffsetDelta` still count the records inside, so the log
    /// assigns offsets without decompressing. `Compression::None` gives exactly [`Self::build`].
    ///
    /// `Ok(None)` for a batch with no records. The error is the codec's own (out of memory in
    /// practice: every codec accepts any input).
    pub fn build_compressed(self, codec: Compression) -> Result<Option<Bytes>, std::io::Error> {
        if codec == Compression::None {
            return Ok(self.build());
        }
        if self.records_count == 0 {
            return Ok(None);
        }
        // `new` reserves the header, so the records section is never cut short here.
        let records = self.buffer.get(BATCH_HEADER_BYTES..).unwrap_or_default();
        let compressed = compression::compress(codec, records)?;
        let size_bytes = BATCH_HEADER_BYTES + compressed.len();
        let mut batch = Vec::with_capacity(size_bytes);
        batch.resize(BATCH_HEADER_BYTES, 0);
        batch.extend_from_slice(&compressed);
        write_header_and_crc(&self.header(codec, size_bytes), &mut batch);
        Ok(Some(Bytes::from(batch)))
    }

    /// The header of this batch once its records take `size_bytes` with the header, stored with
    /// `codec`. The CRC is left 0 for [`write_header_and_crc`].
    fn header(&self, codec: Compression, size_bytes: usize) -> BatchHeader {
        BatchHeader {
            base_offset: self.base_offset,
            batch_length: (size_bytes - LOG_OVERHEAD_BYTES) as i32,
            partition_leader_epoch: -1,
            magic: BATCH_MAGIC_V2,
            crc: 0,
            attributes: BatchAttributes(u16::from(codec.attribute_bits())),
            last_offset_delta: self.records_count - 1,
            base_timestamp: self.base_timestamp.unwrap_or(-1),
            max_timestamp: self.max_timestamp,
            producer_id: self.producer.0,
            producer_epoch: self.producer.1,
            base_sequence: self.producer.2,
            records_count: self.records_count,
        }
    }
}

/// Writes `header` into the first 61 bytes of `batch`, then the CRC-32C of bytes 21 to the end.
fn write_header_and_crc(header: &BatchHeader, batch: &mut [u8]) {
    debug_assert_eq!(header.size_bytes(), batch.len() as u64);
    if let Some(header_bytes) = batch.first_chunk_mut::<BATCH_HEADER_BYTES>() {
        header.write(header_bytes);
    }
    write_crc(batch);
}

/// Iterates the batches of a buffer holding whole batches back to back (a fetch result or a
/// producer's append). Stops at the first error.
#[derive(Debug, Clone)]
pub struct BatchIter {
    buffer: Bytes,
    position: usize,
    max_bytes: u64,
    check_crc: bool,
    failed: bool,
}

impl BatchIter {
    /// Checks each batch's CRC (`Batch::decode`).
    pub fn new(buffer: Bytes, max_bytes: u64) -> BatchIter {
        BatchIter {
            buffer,
            position: 0,
            max_bytes,
            check_crc: true,
            failed: false,
        }
    }

    /// Does not compute the CRCs again (`Batch::decode_without_crc_check`): for bytes whose
    /// batches were checked already, an `Engine::fetch` result (`FetchData::batches`).
    pub fn without_crc_check(buffer: Bytes, max_bytes: u64) -> BatchIter {
        BatchIter {
            check_crc: false,
            ..BatchIter::new(buffer, max_bytes)
        }
    }

    /// Byte position in the buffer of the next batch.
    pub fn position(&self) -> usize {
        self.position
    }
}

impl Iterator for BatchIter {
    type Item = Result<Batch, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.position >= self.buffer.len() {
            return None;
        }
        let rest = self.buffer.slice(self.position..);
        let batch = if self.check_crc {
            Batch::decode(&rest, self.max_bytes)
        } else {
            Batch::decode_without_crc_check(&rest, self.max_bytes)
        };
        match batch {
            Ok(batch) => {
                self.position += batch.size_bytes() as usize;
                Some(Ok(batch))
            }
            Err(error) => {
                self.failed = true;
                Some(Err(error))
            }
        }
    }
}

/// Whether `bytes` begins with at least a full prefix.
pub fn has_prefix(bytes: &[u8]) -> bool {
    bytes.len() >= BATCH_HEADER_UP_TO_MAGIC_BYTES
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::indexing_slicing,
        reason = "test code: an index out of range fails the test"
    )]

    use super::*;

    #[test]
    fn record_at_decodes_the_one_record_holding_the_offset() {
        let mut builder = BatchBuilder::new(40);
        for index in 0u8..5 {
            builder.push(&NewRecord {
                timestamp_ms: 1_700_000_000_000 + i64::from(index),
                key: Some(&[index]),
                value: Some(&[index; 3]),
                headers: &[],
            });
        }
        let bytes = builder.build().unwrap();
        let batch = Batch::decode(&bytes, u64::MAX).unwrap();
        let all = batch.records().unwrap();
        for (index, record) in all.iter().enumerate() {
            assert_eq!(
                batch.record_at(40 + index as i64).unwrap().as_ref(),
                Some(record)
            );
        }
        assert_eq!(batch.record_at(39).unwrap(), None);
        assert_eq!(batch.record_at(45).unwrap(), None);
        assert_eq!(batch.record_at(i64::MIN).unwrap(), None);
    }

    fn sample_batch(base_offset: i64, count: usize) -> Bytes {
        let mut builder = BatchBuilder::new(base_offset);
        for index in 0..count {
            let value = format!("value-{index}");
            builder.push(&NewRecord {
                timestamp_ms: 1_700_000_000_000 + index as i64,
                key: Some(b"key"),
                value: Some(value.as_bytes()),
                headers: &[],
            });
        }
        builder.build().unwrap()
    }

    #[test]
    fn built_batch_decodes_and_validates() {
        let bytes = sample_batch(42, 3);
        let batch = Batch::decode(&bytes, u64::MAX).unwrap();
        assert_eq!(batch.base_offset(), 42);
        assert_eq!(batch.last_offset(), 44);
        assert_eq!(batch.header().records_count, 3);
        assert_eq!(batch.header().max_timestamp, 1_700_000_000_002);
        batch.validate_records(|_| {}).unwrap();
        let records = batch.records().unwrap();
        assert_eq!(records[2].value.as_deref(), Some(&b"value-2"[..]));
        assert_eq!(records[2].timestamp_delta, 2);
    }

    #[test]
    fn stamping_the_base_offset_keeps_the_crc_valid() {
        let mut bytes = sample_batch(0, 2).to_vec();
        set_base_offset(&mut bytes, 1000);
        let batch = Batch::decode(&Bytes::from(bytes), u64::MAX).unwrap();
        assert_eq!(batch.base_offset(), 1000);
    }

    #[test]
    fn log_append_time_rewrites_the_crc() {
        let mut bytes = sample_batch(0, 2).to_vec();
        set_log_append_time(&mut bytes, 99);
        let batch = Batch::decode(&Bytes::from(bytes), u64::MAX).unwrap();
        assert!(batch.header().attributes.is_log_append_time());
        assert_eq!(batch.header().max_timestamp, 99);
    }

    #[test]
    fn a_flipped_bit_fails_the_crc() {
        let mut bytes = sample_batch(0, 2).to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(matches!(
            Batch::decode(&Bytes::from(bytes), u64::MAX),
            Err(DecodeError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn without_the_crc_check_a_damaged_batch_still_decodes_and_with_it_fails() {
        let mut bytes = sample_batch(0, 2).to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let bytes = Bytes::from(bytes);
        let checked: Vec<_> = BatchIter::new(bytes.clone(), u64::MAX).collect();
        assert!(matches!(
            checked[..],
            [Err(DecodeError::CrcMismatch { .. })]
        ));
        let unchecked: Vec<_> = BatchIter::without_crc_check(bytes.clone(), u64::MAX).collect();
        assert!(matches!(&unchecked[..], [Ok(batch)] if batch.bytes() == &bytes));
        // Framing is still checked: a cut batch is an error either way.
        let cut = bytes.slice(..bytes.len() - 1);
        assert!(matches!(
            Batch::decode_without_crc_check(&cut, u64::MAX),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn records_read_in_place_borrow_the_batch_and_match_the_owned_records() {
        let bytes = sample_batch(7, 3);
        let batch = Batch::decode(&bytes, u64::MAX).unwrap();
        let section = batch.record_section().unwrap();
        let views: Vec<RecordView<'_>> = section.iter().map(Result::unwrap).collect();
        let records = batch.records().unwrap();
        assert_eq!(views.len(), 3);
        let batch_memory = bytes.as_ptr_range();
        for (view, record) in views.iter().zip(&records) {
            assert_eq!(view.to_record(&bytes), *record);
            let value = view.value.unwrap();
            assert_eq!(Some(value), record.value.as_deref());
            // In place: the value is the batch's own memory, and so is the owned record's.
            assert!(batch_memory.contains(&value.as_ptr()));
            assert_eq!(record.value.as_ref().unwrap().as_ptr(), value.as_ptr());
        }
        assert_eq!(views[2].value, Some(&b"value-2"[..]));
    }

    #[test]
    fn a_records_count_above_the_records_present_fails_after_the_last_record() {
        let mut bytes = sample_batch(0, 3).to_vec();
        bytes[field::RECORDS_COUNT..field::RECORDS_COUNT + 4].copy_from_slice(&4i32.to_be_bytes());
        write_crc(&mut bytes);
        let batch = Batch::decode(&Bytes::from(bytes), u64::MAX).unwrap();
        let section = batch.record_section().unwrap();
        let mut views = section.iter();
        for _ in 0..3 {
            assert!(matches!(views.next(), Some(Ok(_))));
        }
        assert!(matches!(
            views.next(),
            Some(Err(DecodeError::RecordCount {
                declared: 4,
                found: 3
            }))
        ));
        assert!(views.next().is_none());
        assert!(matches!(
            batch.records(),
            Err(DecodeError::RecordCount { .. })
        ));
    }

    #[test]
    fn oversized_and_truncated_batches_are_rejected() {
        let bytes = sample_batch(0, 2);
        assert!(matches!(
            Batch::decode(&bytes, 61),
            Err(DecodeError::BatchTooLarge { .. })
        ));
        assert!(matches!(
            Batch::decode(&bytes.slice(..bytes.len() - 1), u64::MAX),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn empty_builder_builds_nothing() {
        assert!(BatchBuilder::new(0).build().is_none());
    }

    /// `build_compressed` against Kafka's layout: every header field a Kafka producer writes,
    /// and the records section starting with the codec's own stream magic.
    mod build_compressed {
        use super::*;

        /// The first bytes of each codec's stream as Kafka writes it: gzip's ID1 ID2, snappy-java's
        /// `SnappyOutputStream` header, the LZ4 frame magic 0x184D2204 and the zstd frame magic
        /// 0xFD2FB528 (both little-endian on the wire).
        const STREAM_MAGIC: [(Compression, &[u8]); 4] = [
            (Compression::Gzip, &[0x1f, 0x8b]),
            (Compression::Snappy, b"\x82SNAPPY\x00"),
            (Compression::Lz4, &[0x04, 0x22, 0x4d, 0x18]),
            (Compression::Zstd, &[0x28, 0xb5, 0x2f, 0xfd]),
        ];

        fn builder() -> BatchBuilder {
            let mut builder = BatchBuilder::new(0);
            let value = b"compressible value ".repeat(20);
            for index in 0..10i64 {
                builder.push(&NewRecord {
                    timestamp_ms: 1_700_000_000_000 + 10 * index,
                    key: Some(b"key"),
                    value: Some(&value),
                    headers: &[("h", Some(b"v"))],
                });
            }
            builder
        }

        #[test]
        fn header_fields_are_kafkas_and_the_section_is_the_codecs_stream() {
            let uncompressed_bytes = builder().size_bytes();
            for (codec, magic) in STREAM_MAGIC {
                let bytes = builder().build_compressed(codec).unwrap().unwrap();
                let header = BatchHeader::parse(&bytes).unwrap();
                assert_eq!(header.base_offset, 0, "{codec}");
                assert_eq!(header.batch_length as usize, bytes.len() - 12, "{codec}");
                assert_eq!(header.partition_leader_epoch, -1, "{codec}");
                assert_eq!(header.magic, 2, "{codec}");
                assert_eq!(header.crc, ::crc32c::crc32c(&bytes[21..]), "{codec}");
                assert_eq!(
                    header.attributes.0,
                    u16::from(codec.attribute_bits()),
                    "{codec}"
                );
                assert_eq!(header.attributes.compression().unwrap(), codec);
                assert_eq!(header.last_offset_delta, 9, "{codec}");
                assert_eq!(header.base_timestamp, 1_700_000_000_000, "{codec}");
                assert_eq!(header.max_timestamp, 1_700_000_000_090, "{codec}");
                assert_eq!(header.producer_id, -1, "{codec}");
                assert_eq!(header.producer_epoch, -1, "{codec}");
                assert_eq!(header.base_sequence, -1, "{codec}");
                assert_eq!(header.records_count, 10, "{codec}");
                assert!(bytes[BATCH_HEADER_BYTES..].starts_with(magic), "{codec}");
                assert!(
                    bytes.len() < uncompressed_bytes,
                    "{codec} shrinks repeated values"
                );
                let batch = Batch::decode(&bytes, u64::MAX).unwrap();
                batch.validate_records(|_| {}).unwrap();
                let records = batch.records().unwrap();
                assert_eq!(records.len(), 10);
                assert_eq!(records[9].timestamp_delta, 90);
                assert_eq!(records[9].headers[0].key, "h");
            }
        }

        #[test]
        fn no_codec_is_the_uncompressed_build_and_an_empty_builder_builds_nothing() {
            assert_eq!(
                builder().build_compressed(Compression::None).unwrap(),
                builder().build()
            );
            for (codec, _) in STREAM_MAGIC {
                assert!(
                    BatchBuilder::new(0)
                        .build_compressed(codec)
                        .unwrap()
                        .is_none()
                );
            }
        }
    }

    mod round_trip {
        use super::*;
        use crate::format::compression::compress;
        use proptest::prelude::*;

        type OwnedRecord = (
            i64,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Vec<(String, Option<Vec<u8>>)>,
        );

        fn records_strategy() -> impl Strategy<Value = Vec<OwnedRecord>> {
            let bytes = || proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64));
            let header = ("[a-z]{0,8}", bytes());
            let record = (
                -1_000i64..1_000_000,
                bytes(),
                bytes(),
                proptest::collection::vec(header, 0..3),
            );
            proptest::collection::vec(record, 1..20)
        }

        fn build(base_offset: i64, records: &[OwnedRecord]) -> Bytes {
            let mut builder = BatchBuilder::new(base_offset);
            for (timestamp, key, value, headers) in records {
                let headers: Vec<(&str, Option<&[u8]>)> = headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_deref()))
                    .collect();
                builder.push(&NewRecord {
                    timestamp_ms: 1_700_000_000_000 + timestamp,
                    key: key.as_deref(),
                    value: value.as_deref(),
                    headers: &headers,
                });
            }
            builder.build().unwrap()
        }

        /// The builder `build` builds, before it is built.
        fn builder(base_offset: i64, records: &[OwnedRecord]) -> BatchBuilder {
            let mut builder = BatchBuilder::new(base_offset);
            for (timestamp, key, value, headers) in records {
                let headers: Vec<(&str, Option<&[u8]>)> = headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_deref()))
                    .collect();
                builder.push(&NewRecord {
                    timestamp_ms: 1_700_000_000_000 + timestamp,
                    key: key.as_deref(),
                    value: value.as_deref(),
                    headers: &headers,
                });
            }
            builder
        }

        /// The same batch with its records section compressed by `codec`, as a Kafka producer
        /// would send it: attributes, length and CRC rewritten.
        fn compressed(batch: &Bytes, codec: Compression) -> Bytes {
            let mut bytes = batch[..BATCH_HEADER_BYTES].to_vec();
            bytes.extend_from_slice(&compress(codec, &batch[BATCH_HEADER_BYTES..]).unwrap());
            let length = (bytes.len() - LOG_OVERHEAD_BYTES) as i32;
            bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4]
                .copy_from_slice(&length.to_be_bytes());
            let attributes = u16::from(codec.attribute_bits());
            bytes[field::ATTRIBUTES..field::ATTRIBUTES + 2]
                .copy_from_slice(&attributes.to_be_bytes());
            let crc = ::crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
            bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
            Bytes::from(bytes)
        }

        fn assert_records_equal(
            batch: &Batch,
            records: &[OwnedRecord],
        ) -> Result<(), TestCaseError> {
            let decoded = batch.records().unwrap();
            prop_assert_eq!(decoded.len(), records.len());
            let base_timestamp = batch.header().base_timestamp;
            for (index, (record, (timestamp, key, value, headers))) in
                decoded.iter().zip(records).enumerate()
            {
                prop_assert_eq!(record.offset_delta as usize, index);
                prop_assert_eq!(
                    base_timestamp + record.timestamp_delta,
                    1_700_000_000_000 + timestamp
                );
                prop_assert_eq!(record.key.as_deref(), key.as_deref());
                prop_assert_eq!(record.value.as_deref(), value.as_deref());
                prop_assert_eq!(record.headers.len(), headers.len());
                for (decoded_header, (header_key, header_value)) in
                    record.headers.iter().zip(headers)
                {
                    prop_assert_eq!(&decoded_header.key, header_key);
                    prop_assert_eq!(decoded_header.value.as_deref(), header_value.as_deref());
                }
            }
            Ok(())
        }

        proptest! {
            #[test]
            fn records_read_in_place_are_the_owned_records(
                records in records_strategy(),
                codec in prop_oneof![Just(Compression::None), Just(Compression::Gzip), Just(Compression::Lz4)],
            ) {
                let built = builder(3, &records).build_compressed(codec).unwrap().unwrap();
                let batch = Batch::decode(&built, u64::MAX).unwrap();
                let owned = batch.records().unwrap();
                let section = batch.record_section().unwrap();
                let mut count = 0;
                for (view, record) in section.iter().zip(&owned) {
                    let view = view.unwrap();
                    prop_assert_eq!(view.offset_delta, record.offset_delta);
                    prop_assert_eq!(view.timestamp_delta, record.timestamp_delta);
                    prop_assert_eq!(view.key, record.key.as_deref());
                    prop_assert_eq!(view.value, record.value.as_deref());
                    let headers: Vec<(&str, Option<&[u8]>)> = view.headers.iter().collect();
                    let owned_headers: Vec<(&str, Option<&[u8]>)> = record
                        .headers
                        .iter()
                        .map(|header| (header.key.as_str(), header.value.as_deref()))
                        .collect();
                    prop_assert_eq!(view.headers.len(), owned_headers.len());
                    prop_assert_eq!(headers, owned_headers);
                    count += 1;
                }
                prop_assert_eq!(count, records.len());
            }

            #[test]
            fn encode_then_decode_gives_back_every_field(base_offset in 0i64..1 << 40, records in records_strategy()) {
                let bytes = build(base_offset, &records);
                let batch = Batch::decode(&bytes, u64::MAX).unwrap();
                prop_assert_eq!(batch.size_bytes(), bytes.len() as u64);
                prop_assert_eq!(batch.base_offset(), base_offset);
                prop_assert_eq!(batch.last_offset(), base_offset + records.len() as i64 - 1);
                let max_timestamp = records.iter().map(|record| 1_700_000_000_000 + record.0).max().unwrap();
                prop_assert_eq!(batch.header().max_timestamp, max_timestamp);
                batch.validate_records(|_| {}).unwrap();
                assert_records_equal(&batch, &records)?;
            }

            #[test]
            fn build_compressed_writes_the_bytes_of_a_hand_assembled_kafka_batch(
                records in records_strategy(),
                codec in prop_oneof![Just(Compression::None), Just(Compression::Gzip), Just(Compression::Snappy), Just(Compression::Lz4), Just(Compression::Zstd)],
            ) {
                let built = builder(7, &records).build_compressed(codec).unwrap().unwrap();
                let expected = match codec {
                    Compression::None => build(7, &records),
                    codec => compressed(&build(7, &records), codec),
                };
                prop_assert_eq!(&built, &expected);
                let batch = Batch::decode(&built, u64::MAX).unwrap();
                batch.validate_records(|_| {}).unwrap();
                assert_records_equal(&batch, &records)?;
            }

            #[test]
            fn compressed_batches_decode_to_the_same_records(
                records in records_strategy(),
                codec in prop_oneof![Just(Compression::Gzip), Just(Compression::Snappy), Just(Compression::Lz4), Just(Compression::Zstd)],
            ) {
                let batch = Batch::decode(&compressed(&build(7, &records), codec), u64::MAX).unwrap();
                prop_assert_eq!(batch.header().attributes.compression().unwrap(), codec);
                batch.validate_records(|_| {}).unwrap();
                assert_records_equal(&batch, &records)?;
            }
        }
    }
}
