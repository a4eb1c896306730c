//! Log compaction's two passes as pure functions over decoded batches: Kafka's
//! `LogCleaner.buildOffsetMap` and `cleanInto`, with the record rules of `shouldRetainRecord` and
//! the batch rewriting of `MemoryRecords.filterTo`. The caller reads segments, feeds their batches
//! here and writes what comes back to `.cleaned` files; nothing here does I/O.
//!
//! # Pass one: the offset map
//!
//! [`build_offset_map`] walks the dirty part of the log (from the first dirty offset to the first
//! uncleanable one) and puts every keyed record's offset into an [`OffsetMap`], so that afterwards
//! the map holds each key's latest offset. When the map fills up, it stops at the first record
//! whose key does not fit and reports that offset as `mapped_end`: the map is exact for every
//! offset below it, and the next round starts there. Otherwise `mapped_end` is the end of the
//! range. Control batches and records without a key are not mapped.
//!
//! # Pass two: cleaning a batch
//!
//! [`clean_batch`] decides each record of a batch from the log start up to `mapped_end` (Kafka's
//! `shouldRetainRecord`, in its order):
//!
//! | record | kept |
//! |---|---|
//! | offset `>= mapped_end` (the map has not seen it) | yes, whatever it holds |
//! | no key | no (compacted topics reject them on append) |
//! | key mapped to a later offset | no: superseded |
//! | latest for its key, or key not in the map (an already-clean record) | yes, if it has a value |
//! | the same, but a tombstone (null value) | yes, unless its batch's delete horizon has passed |
//!
//! A batch with no record left is dropped (`None`). A batch that keeps every record and needs no
//! new delete horizon comes back as its own bytes, untouched. Any other batch is rewritten the way
//! Kafka's `MemoryRecordsBuilder` rebuilds it:
//!
//! - **Offsets never change.** `baseOffset` and `lastOffsetDelta` are the original's, so the batch
//!   still spans its original offsets (Kafka keeps the last offset because the producer's last
//!   sequence number is derived from it); kept records keep their `offsetDelta`, so the batch
//!   has gaps. `recordsCount` is the number kept.
//! - Kept fields: `partitionLeaderEpoch`, `producerId`, `producerEpoch`, `baseSequence`, the codec,
//!   the timestamp type and the transactional and control bits. Attribute bits 7-15, unused, are
//!   written as 0, as Kafka's `computeAttributes` does.
//! - Records are re-encoded with their keys, values and headers (record attributes 0, as Kafka
//!   writes them) and the records section is compressed again with the batch's own codec.
//! - Every record keeps its absolute timestamp. Without a delete horizon, `baseTimestamp` is the
//!   first kept record's timestamp; `timestampDelta`s are recomputed from it.
//! - `maxTimestamp`: with CreateTime, the largest timestamp among the kept records (or -1 when
//!   none has one), because Kafka's builder recomputes it; with LogAppendTime, the original
//!   (the broker's append time, which is every record's timestamp).
//! - The CRC-32C (bytes 21 to the end) and `batchLength` are recomputed.
//!
//! # The delete horizon (KIP-534, Kafka 3.1)
//!
//! A tombstone must outlive its key's older records in every replica and consumer, so it is kept
//! for `delete.retention.ms` after a cleaning first sees it. The time is kept in the batch:
//!
//! - When a cleaning keeps a tombstone in a batch that has no delete horizon yet, the rewritten
//!   batch gets attribute bit 6 (0x40) and `baseTimestamp = now + delete.retention.ms`.
//! - **What a reader computes.** Kafka's `DefaultRecordBatch` reads every record's timestamp as
//!   `baseTimestamp + timestampDelta`, whether bit 6 is set or not (and, for a LogAppendTime
//!   batch, as `maxTimestamp`, ignoring both). So with bit 6 set, `baseTimestamp` holds the
//!   horizon instead of the first record's time, and the cleaner recomputes every
//!   `timestampDelta` as `timestamp - horizon` (often negative): each record's timestamp reads
//!   back unchanged. `deleteHorizonMs()` is `baseTimestamp` when bit 6 is set, and absent
//!   otherwise. `maxTimestamp` is never the horizon.
//! - A later cleaning whose `now >= horizon` drops the batch's tombstones (those that are the
//!   latest for their key; superseded ones go as soon as they are superseded). A batch that has a
//!   horizon keeps it when rewritten, even if no tombstone is left in it.
//! - `now + delete.retention.ms` saturates at `i64::MAX` (Kafka's `long` addition would wrap).
//!
//! # Choosing a log
//!
//! [`cleanable_ratio`] and [`choose_log`]: the cleaner cleans the log with the largest share of
//! dirty bytes, if that share is at least `min.cleanable.dirty.ratio`.
//!
//! # What the caller does (not here)
//!
//! - Decide the range: from the first dirty offset (`cleaner-offset-checkpoint`) to the first
//!   uncleanable offset (active segment base, `min.compaction.lag.ms`, last stable offset), and
//!   start each round with [`OffsetMap::clear`].
//! - Clean every batch from the log start through the segment holding `mapped_end` (Kafka cleans
//!   whole segments). Batches at or above `mapped_end` keep all their records, though a tombstone
//!   among them still gets its delete horizon, as in Kafka.
//! - Transactions: control batches are skipped by pass one and kept whole by pass two; aborted
//!   transactional batches are mapped like committed ones (Kafka skips them using the aborted
//!   transaction index, which seglog does not have yet).
//! - Producer state: Kafka keeps an *empty* batch (header only) where it would drop the last batch
//!   of an active producer, and for the last batch of a cleaning round. [`empty_batch`] builds it.

use std::ops::Range;

use bytes::Bytes;
use thiserror::Error;

use super::offset_map::OffsetMap;
use crate::format::batch::field;
use crate::format::compression::{self, Compression};
use crate::format::crc::crc32c;
use crate::format::{Batch, BatchHeader, DecodeError, NewRecord, Record};
use crate::limits::{BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES};

/// Kafka's `RecordBatch.NO_TIMESTAMP`.
const NO_TIMESTAMP: i64 = -1;
/// Attribute bit 6: `baseTimestamp` holds the delete horizon (`DELETE_HORIZON_FLAG_MASK`).
const DELETE_HORIZON_BIT: u16 = 0x40;
/// The attribute bits a rewritten batch keeps: codec (0-2), timestamp type (3), transactional (4)
/// and control (5). Bit 6 is decided anew; bits 7-15 are unused and written as 0.
const REWRITE_KEPT_BITS: u16 = 0x3f;
/// The attribute bits an empty batch keeps: timestamp type, transactional and control. Its codec
/// is none and it has no delete horizon (`DefaultRecordBatch.writeEmptyHeader`).
const EMPTY_BATCH_KEPT_BITS: u16 = 0x38;

/// Why a batch cannot be mapped or cleaned. Each names the batch by its base offset.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CompactError {
    #[error("batch at base offset {base_offset} does not decode")]
    Decode {
        base_offset: i64,
        #[source]
        source: DecodeError,
    },
    #[error("cannot compress the cleaned batch at base offset {base_offset} with {codec}")]
    Compress {
        base_offset: i64,
        codec: Compression,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "batch at base offset {base_offset} with last offset delta {last_offset_delta} holds a \
         record at offset delta {offset_delta}, outside the batch or below offset 0"
    )]
    RecordOffset {
        base_offset: i64,
        last_offset_delta: i32,
        offset_delta: i32,
    },
    #[error("record offset {offset} follows offset {previous}; offsets must increase")]
    OffsetOrder { offset: u64, previous: u64 },
    #[error(
        "the cleaned batch at base offset {base_offset} takes {size_bytes} bytes, more than a \
         batch length can hold"
    )]
    BatchTooLarge { base_offset: i64, size_bytes: usize },
}

/// What one call of [`build_offset_map`] mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapBuildOutcome {
    /// The first offset the map does not cover: every keyed record in `range.start..mapped_end`
    /// is in the map. The next round starts here; cleaning keeps every record at or above it.
    pub mapped_end: u64,
    /// The map filled up before the end of the range.
    pub full: bool,
    /// Records put into the map by this call (keys seen again count again).
    pub records_mapped: u64,
}

/// The facts pass two decides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanRules {
    /// [`MapBuildOutcome::mapped_end`] of the map in use.
    pub mapped_end: u64,
    /// The cleaning's clock, compared with delete horizons.
    pub now_ms: i64,
    /// `delete.retention.ms`: how long a kept tombstone lives from its first cleaning.
    pub delete_retention_ms: i64,
}

/// One log's sizes, for [`choose_log`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleaningCandidate<Id> {
    pub id: Id,
    /// Bytes below the first dirty offset (already cleaned).
    pub clean_bytes: u64,
    /// Bytes from the first dirty offset to the first uncleanable one.
    pub dirty_bytes: u64,
    /// The log's `min.cleanable.dirty.ratio`.
    pub min_cleanable_ratio: f64,
}

/// Pass one: puts the offset of every keyed record of `batches` inside `range` into `map`.
///
/// `batches` are in offset order and must include every batch holding offsets in `range` (more
/// is fine: batches wholly outside the range are skipped without being decompressed, and records
/// outside it are ignored). The call adds to what `map` holds, so the range may be fed in pieces
/// (one segment per call, each piece's range starting where the previous call's ended); a new
/// round starts with [`OffsetMap::clear`]. When the map fills up, the call stops and returns
/// `full` with `mapped_end` at the record that did not fit.
pub fn build_offset_map<'a>(
    batches: impl IntoIterator<Item = &'a Batch>,
    map: &mut OffsetMap,
    range: Range<u64>,
) -> Result<MapBuildOutcome, CompactError> {
    let range_end = range.end.max(range.start);
    let mut outcome = MapBuildOutcome {
        mapped_end: range_end,
        full: false,
        records_mapped: 0,
    };
    let mut previous = None;
    for batch in batches {
        let header = batch.header();
        let wholly_before =
            u64::try_from(header.last_offset()).is_ok_and(|last| last < range.start);
        if header.attributes.is_control() || wholly_before {
            continue;
        }
        if u64::try_from(header.base_offset).is_ok_and(|base| base >= range_end) {
            break;
        }
        for record in decode_records(batch)? {
            let offset = record_offset(header, &record)?;
            check_increasing(&mut previous, offset)?;
            if offset < range.start {
                continue;
            }
            if offset >= range_end {
                return Ok(outcome);
            }
            let Some(key) = &record.key else {
                continue;
            };
            if map.put(key, offset).is_err() {
                outcome.mapped_end = offset;
                outcome.full = true;
                return Ok(outcome);
            }
            outcome.records_mapped += 1;
        }
    }
    Ok(outcome)
}

/// Pass two: the batch as the cleaned log holds it, or `None` if none of its records stays. See
/// the module documentation for the rules and the rewritten batch's fields.
pub fn clean_batch(
    batch: &Batch,
    map: &OffsetMap,
    rules: &CleanRules,
) -> Result<Option<Bytes>, CompactError> {
    let header = batch.header();
    if header.attributes.is_control() {
        return Ok(Some(batch.bytes().clone()));
    }
    let records = decode_records(batch)?;
    let horizon_ms = delete_horizon_ms(header);
    let mut kept = Vec::with_capacity(records.len());
    let mut previous = None;
    for record in &records {
        let offset = record_offset(header, record)?;
        check_increasing(&mut previous, offset)?;
        if retains(record, offset, map, rules, horizon_ms) {
            kept.push(record);
        }
    }
    if kept.is_empty() {
        return Ok(None);
    }
    let horizon_is_new = horizon_ms.is_none() && kept.iter().any(|record| record.value.is_none());
    if kept.len() == records.len() && !horizon_is_new {
        return Ok(Some(batch.bytes().clone()));
    }
    let horizon_ms = if horizon_is_new {
        Some(rules.now_ms.saturating_add(rules.delete_retention_ms))
    } else {
        horizon_ms
    };
    rewrite_batch(batch, &kept, horizon_ms).map(Some)
}

/// The batch's delete horizon: `baseTimestamp` when attribute bit 6 is set.
pub fn delete_horizon_ms(header: &BatchHeader) -> Option<i64> {
    header
        .attributes
        .has_delete_horizon()
        .then_some(header.base_timestamp)
}

/// The header-only batch Kafka keeps in place of a batch whose records all went, when the batch
/// must stay for producer state (`DefaultRecordBatch.writeEmptyHeader`): same base offset, last
/// offset delta, leader epoch, producer id, epoch and base sequence, timestamp type,
/// transactional and control bits and `maxTimestamp`; no codec, no delete horizon,
/// `baseTimestamp` -1 and no records.
pub fn empty_batch(batch: &Batch) -> Bytes {
    let header = batch.header();
    let mut bytes = batch.bytes()[..BATCH_HEADER_BYTES].to_vec();
    let fields = ChangedFields {
        batch_length: (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32,
        attributes: header.attributes.0 & EMPTY_BATCH_KEPT_BITS,
        base_timestamp: NO_TIMESTAMP,
        max_timestamp: header.max_timestamp,
        records_count: 0,
    };
    fields.write(&mut bytes);
    Bytes::from(bytes)
}

/// Share of a log's bytes that are dirty: `dirty / (clean + dirty)`, 0 for an empty log.
pub fn cleanable_ratio(clean_bytes: u64, dirty_bytes: u64) -> f64 {
    // In floating point: the sum of two `u64`s may not fit one.
    let total_bytes = clean_bytes as f64 + dirty_bytes as f64;
    if total_bytes == 0.0 {
        return 0.0;
    }
    dirty_bytes as f64 / total_bytes
}

impl<Id> CleaningCandidate<Id> {
    /// [`cleanable_ratio`] of the log.
    pub fn ratio(&self) -> f64 {
        cleanable_ratio(self.clean_bytes, self.dirty_bytes)
    }

    /// Whether the log is due for cleaning: it has dirty bytes (so a ratio of 0 does not make the
    /// cleaner rewrite clean logs) and its ratio reached its `min.cleanable.dirty.ratio`.
    pub fn is_cleanable(&self) -> bool {
        self.dirty_bytes > 0 && self.ratio() >= self.min_cleanable_ratio
    }
}

/// The log to clean next: the cleanable candidate ([`CleaningCandidate::is_cleanable`]) with the
/// highest ratio, the first one on a tie.
pub fn choose_log<Id: Copy>(candidates: &[CleaningCandidate<Id>]) -> Option<Id> {
    let mut chosen: Option<(Id, f64)> = None;
    for candidate in candidates {
        let ratio = candidate.ratio();
        if candidate.is_cleanable() && chosen.is_none_or(|(_, best)| ratio > best) {
            chosen = Some((candidate.id, ratio));
        }
    }
    chosen.map(|(id, _)| id)
}

/// Kafka's `shouldRetainRecord` for a record of a non-control v2 batch.
fn retains(
    record: &Record,
    offset: u64,
    map: &OffsetMap,
    rules: &CleanRules,
    horizon_ms: Option<i64>,
) -> bool {
    if offset >= rules.mapped_end {
        return true;
    }
    let Some(key) = &record.key else {
        return false;
    };
    if map.get(key).is_some_and(|latest| offset < latest) {
        return false;
    }
    record.value.is_some() || horizon_ms.is_none_or(|horizon| rules.now_ms < horizon)
}

fn decode_records(batch: &Batch) -> Result<Vec<Record>, CompactError> {
    batch.records().map_err(|source| CompactError::Decode {
        base_offset: batch.base_offset(),
        source,
    })
}

/// The record's absolute offset, checked to lie in its batch and at or above 0.
fn record_offset(header: &BatchHeader, record: &Record) -> Result<u64, CompactError> {
    let in_batch = (0..=header.last_offset_delta).contains(&record.offset_delta);
    let offset = header
        .base_offset
        .checked_add(i64::from(record.offset_delta))
        .and_then(|offset| u64::try_from(offset).ok());
    match offset {
        Some(offset) if in_batch => Ok(offset),
        _ => Err(CompactError::RecordOffset {
            base_offset: header.base_offset,
            last_offset_delta: header.last_offset_delta,
            offset_delta: record.offset_delta,
        }),
    }
}

fn check_increasing(previous: &mut Option<u64>, offset: u64) -> Result<(), CompactError> {
    if let Some(previous) = *previous
        && offset <= previous
    {
        return Err(CompactError::OffsetOrder { offset, previous });
    }
    *previous = Some(offset);
    Ok(())
}

/// A record's timestamp as Kafka's reader computes it (see the module documentation).
fn record_timestamp(header: &BatchHeader, record: &Record) -> i64 {
    if header.attributes.is_log_append_time() {
        header.max_timestamp
    } else {
        header.base_timestamp.wrapping_add(record.timestamp_delta)
    }
}

/// Rebuilds `batch` with only the `kept` records (at least one), as Kafka's
/// `buildRetainedRecordsInto` does.
fn rewrite_batch(
    batch: &Batch,
    kept: &[&Record],
    horizon_ms: Option<i64>,
) -> Result<Bytes, CompactError> {
    let header = batch.header();
    let timestamps: Vec<i64> = kept
        .iter()
        .map(|record| record_timestamp(header, record))
        .collect();
    let first_timestamp = timestamps.first().copied().unwrap_or(NO_TIMESTAMP);
    let base_timestamp = horizon_ms.unwrap_or(first_timestamp);
    let max_timestamp = if header.attributes.is_log_append_time() {
        header.max_timestamp
    } else {
        timestamps.iter().copied().fold(NO_TIMESTAMP, i64::max)
    };
    let section = encode_records(kept, &timestamps, base_timestamp, batch.bytes().len());
    let records_bytes = compress_section(batch, section)?;
    let size_bytes = BATCH_HEADER_BYTES + records_bytes.len();
    if size_bytes - LOG_OVERHEAD_BYTES > i32::MAX as usize {
        return Err(CompactError::BatchTooLarge {
            base_offset: header.base_offset,
            size_bytes,
        });
    }
    let horizon_bit = if horizon_ms.is_some() {
        DELETE_HORIZON_BIT
    } else {
        0
    };
    let fields = ChangedFields {
        batch_length: (size_bytes - LOG_OVERHEAD_BYTES) as i32,
        attributes: (header.attributes.0 & REWRITE_KEPT_BITS) | horizon_bit,
        base_timestamp,
        max_timestamp,
        // A subset of the records whose count `Batch::records` checked against an `i32`.
        records_count: kept.len() as i32,
    };
    let mut bytes = Vec::with_capacity(size_bytes);
    bytes.extend_from_slice(&batch.bytes()[..BATCH_HEADER_BYTES]);
    bytes.extend_from_slice(&records_bytes);
    fields.write(&mut bytes);
    let bytes = Bytes::from(bytes);
    debug_assert!(
        Batch::decode(&bytes, u64::MAX)
            .and_then(|cleaned| cleaned.records())
            .is_ok_and(|records| records.len() == kept.len()),
        "a rewritten batch reads back with the records it was given"
    );
    Ok(bytes)
}

/// The records section of the kept records, each at its own offset delta and timestamp.
fn encode_records(
    kept: &[&Record],
    timestamps: &[i64],
    base_timestamp: i64,
    capacity_bytes: usize,
) -> Vec<u8> {
    let mut section = Vec::with_capacity(capacity_bytes);
    let mut headers: Vec<(&str, Option<&[u8]>)> = Vec::new();
    for (record, timestamp) in kept.iter().zip(timestamps) {
        headers.clear();
        headers.extend(
            record
                .headers
                .iter()
                .map(|header| (header.key.as_str(), header.value.as_deref())),
        );
        let encoded = NewRecord {
            timestamp_ms: *timestamp,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &headers,
        };
        encoded.encode(
            record.offset_delta,
            timestamp.wrapping_sub(base_timestamp),
            &mut section,
        );
    }
    section
}

/// The records section as stored: compressed with the batch's own codec.
fn compress_section(batch: &Batch, section: Vec<u8>) -> Result<Vec<u8>, CompactError> {
    let base_offset = batch.base_offset();
    let codec = batch
        .header()
        .attributes
        .compression()
        .map_err(|source| CompactError::Decode {
            base_offset,
            source,
        })?;
    if codec == Compression::None {
        return Ok(section);
    }
    compression::compress(codec, &section).map_err(|source| CompactError::Compress {
        base_offset,
        codec,
        source,
    })
}

/// The header fields a cleaned batch may change. The others (base offset, leader epoch, magic,
/// last offset delta, producer id, epoch and base sequence) stay the original's bytes.
struct ChangedFields {
    batch_length: i32,
    attributes: u16,
    base_timestamp: i64,
    max_timestamp: i64,
    records_count: i32,
}

impl ChangedFields {
    /// Writes the fields into a batch whose other bytes are final, then its CRC.
    fn write(&self, bytes: &mut [u8]) {
        put_field(bytes, field::BATCH_LENGTH, &self.batch_length.to_be_bytes());
        put_field(bytes, field::ATTRIBUTES, &self.attributes.to_be_bytes());
        put_field(
            bytes,
            field::BASE_TIMESTAMP,
            &self.base_timestamp.to_be_bytes(),
        );
        put_field(
            bytes,
            field::MAX_TIMESTAMP,
            &self.max_timestamp.to_be_bytes(),
        );
        put_field(
            bytes,
            field::RECORDS_COUNT,
            &self.records_count.to_be_bytes(),
        );
        seal_crc(bytes);
    }
}

fn put_field(bytes: &mut [u8], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

/// Writes the CRC-32C of bytes 21 to the end into bytes 17..21.
fn seal_crc(bytes: &mut [u8]) {
    let crc = crc32c(&bytes[field::ATTRIBUTES..]);
    put_field(bytes, field::CRC, &crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::batch::set_log_append_time;
    use crate::format::{BatchAttributes, BatchBuilder};

    const T0: i64 = 1_700_000_000_000;
    const RETENTION_MS: i64 = 86_400_000;

    /// A record to build: key, value, timestamp.
    type Spec<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, i64);

    fn build(base_offset: i64, records: &[Spec<'_>]) -> Bytes {
        let mut builder = BatchBuilder::new(base_offset);
        for (key, value, timestamp_ms) in records {
            builder.push(&NewRecord {
                timestamp_ms: *timestamp_ms,
                key: *key,
                value: *value,
                headers: &[("h", Some(b"v"))],
            });
        }
        builder.build().unwrap()
    }

    fn decode(bytes: &Bytes) -> Batch {
        Batch::decode(bytes, u64::MAX).unwrap()
    }

    /// `bytes` edited, then its CRC recomputed.
    fn patched(bytes: &Bytes, edit: impl FnOnce(&mut Vec<u8>)) -> Bytes {
        let mut bytes = bytes.to_vec();
        edit(&mut bytes);
        seal_crc(&mut bytes);
        Bytes::from(bytes)
    }

    fn with_attributes(bytes: &Bytes, set: u16) -> Bytes {
        patched(bytes, |bytes| {
            let attributes = u16::from_be_bytes([bytes[21], bytes[22]]) | set;
            put_field(bytes, field::ATTRIBUTES, &attributes.to_be_bytes());
        })
    }

    /// The batch with a delete horizon in its header (record deltas unchanged).
    fn with_horizon(bytes: &Bytes, horizon_ms: i64) -> Bytes {
        let bytes = with_attributes(bytes, DELETE_HORIZON_BIT);
        patched(&bytes, |bytes| {
            put_field(bytes, field::BASE_TIMESTAMP, &horizon_ms.to_be_bytes())
        })
    }

    /// The same batch with its records section compressed by `codec`.
    fn compressed(bytes: &Bytes, codec: Compression) -> Bytes {
        let mut out = bytes[..BATCH_HEADER_BYTES].to_vec();
        out.extend_from_slice(&compression::compress(codec, &bytes[BATCH_HEADER_BYTES..]).unwrap());
        let length = (out.len() - LOG_OVERHEAD_BYTES) as i32;
        put_field(&mut out, field::BATCH_LENGTH, &length.to_be_bytes());
        let attributes = u16::from(codec.attribute_bits());
        put_field(&mut out, field::ATTRIBUTES, &attributes.to_be_bytes());
        seal_crc(&mut out);
        Bytes::from(out)
    }

    fn map_of(entries: &[(&[u8], u64)]) -> OffsetMap {
        let mut map = OffsetMap::new(64 * 24).unwrap();
        for (key, offset) in entries {
            map.put(key, *offset).unwrap();
        }
        map
    }

    fn rules(mapped_end: u64, now_ms: i64) -> CleanRules {
        CleanRules {
            mapped_end,
            now_ms,
            delete_retention_ms: RETENTION_MS,
        }
    }

    fn timestamps(batch: &Batch) -> Vec<(i32, i64)> {
        batch
            .records()
            .unwrap()
            .iter()
            .map(|record| {
                (
                    record.offset_delta,
                    record_timestamp(batch.header(), record),
                )
            })
            .collect()
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Coverage {
        BeyondMap,
        Latest,
        Superseded,
        NotInMap,
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Horizon {
        None,
        Future,
        Passed,
    }

    /// Every combination of the rule table in the module documentation, on a one-record batch at
    /// offset 5.
    #[test]
    fn the_keep_rule_table_exhaustively() {
        let now = T0 + 1000;
        for coverage in [
            Coverage::BeyondMap,
            Coverage::Latest,
            Coverage::Superseded,
            Coverage::NotInMap,
        ] {
            for key in [Some(&b"k"[..]), None] {
                for value in [Some(&b"v"[..]), None] {
                    for horizon in [Horizon::None, Horizon::Future, Horizon::Passed] {
                        let case = format!("{coverage:?} key {key:?} value {value:?} {horizon:?}");
                        let plain = build(5, &[(key, value, T0)]);
                        let bytes = match horizon {
                            Horizon::None => plain,
                            Horizon::Future => with_horizon(&plain, now + 1),
                            Horizon::Passed => with_horizon(&plain, now),
                        };
                        let map = match coverage {
                            Coverage::Latest | Coverage::BeyondMap => map_of(&[(b"k", 5)]),
                            Coverage::Superseded => map_of(&[(b"k", 6)]),
                            Coverage::NotInMap => map_of(&[(b"other", 7)]),
                        };
                        let mapped_end = if coverage == Coverage::BeyondMap {
                            5
                        } else {
                            8
                        };
                        let cleaned =
                            clean_batch(&decode(&bytes), &map, &rules(mapped_end, now)).unwrap();
                        let expected_kept = match (coverage, key, value, horizon) {
                            (Coverage::BeyondMap, ..) => true,
                            (_, None, ..) | (Coverage::Superseded, ..) => false,
                            (_, _, Some(_), _) => true,
                            (_, _, None, Horizon::Passed) => false,
                            (_, _, None, _) => true,
                        };
                        assert_eq!(cleaned.is_some(), expected_kept, "{case}");
                        let Some(cleaned) = cleaned else { continue };
                        if value.is_none() && horizon == Horizon::None {
                            let header = *decode(&cleaned).header();
                            assert_eq!(
                                delete_horizon_ms(&header),
                                Some(now + RETENTION_MS),
                                "{case}"
                            );
                        } else {
                            assert_eq!(cleaned, bytes, "{case}: nothing to change");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_batch_that_keeps_everything_comes_back_as_its_own_bytes() {
        let bytes = build(
            0,
            &[(Some(b"a"), Some(b"1"), T0), (Some(b"b"), Some(b"2"), T0)],
        );
        let batch = decode(&bytes);
        let map = map_of(&[(b"a", 0), (b"b", 1)]);
        let cleaned = clean_batch(&batch, &map, &rules(2, T0)).unwrap().unwrap();
        assert_eq!(cleaned.as_ptr(), batch.bytes().as_ptr(), "no copy");
    }

    #[test]
    fn a_batch_with_no_record_left_is_dropped() {
        let bytes = build(0, &[(Some(b"a"), Some(b"1"), T0), (None, Some(b"2"), T0)]);
        let map = map_of(&[(b"a", 9)]);
        assert_eq!(
            clean_batch(&decode(&bytes), &map, &rules(10, T0)).unwrap(),
            None
        );
    }

    #[test]
    fn control_batches_are_kept_whole() {
        let bytes = with_attributes(&build(0, &[(Some(b"a"), None, T0)]), 0x20);
        let map = map_of(&[(b"a", 9)]);
        let cleaned = clean_batch(&decode(&bytes), &map, &rules(10, T0 + RETENTION_MS * 9));
        assert_eq!(cleaned.unwrap(), Some(bytes));
    }

    #[test]
    fn a_rewrite_keeps_offsets_producer_fields_and_timestamps_and_clears_unused_bits() {
        let plain = build(
            100,
            &[
                (Some(b"a"), Some(b"old"), T0 + 7),
                (Some(b"b"), Some(b"keep"), T0 + 3),
                (Some(b"a"), Some(b"new"), T0 + 5),
                (Some(b"c"), Some(b"gone"), T0 + 9),
            ],
        );
        let bytes = patched(&with_attributes(&plain, 0x0110), |bytes| {
            put_field(bytes, field::PARTITION_LEADER_EPOCH, &9i32.to_be_bytes());
            put_field(bytes, field::PRODUCER_ID, &77i64.to_be_bytes());
            put_field(bytes, field::PRODUCER_EPOCH, &3i16.to_be_bytes());
            put_field(bytes, field::BASE_SEQUENCE, &40i32.to_be_bytes());
        });
        let batch = decode(&bytes);
        let map = map_of(&[(b"a", 102), (b"b", 101), (b"c", 200)]);
        let cleaned = clean_batch(&batch, &map, &rules(201, T0)).unwrap().unwrap();
        let cleaned = decode(&cleaned);
        let (before, after) = (batch.header(), cleaned.header());
        assert_eq!(after.base_offset, 100);
        assert_eq!(
            after.last_offset_delta, 3,
            "the batch still spans offsets 100..=103"
        );
        assert_eq!(after.partition_leader_epoch, 9);
        assert_eq!(after.producer_id, 77);
        assert_eq!(after.producer_epoch, 3);
        assert_eq!(after.base_sequence, 40);
        assert_eq!(
            after.attributes.0, 0x0010,
            "transactional kept, bit 8 cleared"
        );
        assert_eq!(after.records_count, 2);
        assert_eq!(
            after.base_timestamp,
            T0 + 3,
            "the first kept record's timestamp"
        );
        assert_eq!(
            after.max_timestamp,
            T0 + 5,
            "recomputed over the kept records"
        );
        assert_eq!(before.max_timestamp, T0 + 9);
        assert_eq!(timestamps(&cleaned), vec![(1, T0 + 3), (2, T0 + 5)]);
        let records = cleaned.records().unwrap();
        assert_eq!(records[1].value.as_deref(), Some(&b"new"[..]));
        assert_eq!(records[1].headers[0].key, "h");
        assert_eq!(records[1].headers[0].value.as_deref(), Some(&b"v"[..]));
    }

    #[test]
    fn every_codec_rewrites_with_itself() {
        let plain = build(
            0,
            &[
                (Some(b"a"), Some(b"old value old value"), T0),
                (Some(b"a"), Some(b"new value new value"), T0 + 1),
            ],
        );
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let bytes = compressed(&plain, codec);
            let map = map_of(&[(b"a", 1)]);
            let cleaned = clean_batch(&decode(&bytes), &map, &rules(2, T0))
                .unwrap()
                .unwrap();
            let cleaned = decode(&cleaned);
            assert_eq!(cleaned.header().attributes.compression().unwrap(), codec);
            let records = cleaned.records().unwrap();
            assert_eq!(records.len(), 1, "{codec}");
            assert_eq!(records[0].offset_delta, 1, "{codec}");
            assert_eq!(
                records[0].value.as_deref(),
                Some(&b"new value new value"[..])
            );
            assert_eq!(timestamps(&cleaned), vec![(1, T0 + 1)], "{codec}");
        }
    }

    #[test]
    fn log_append_time_batches_keep_max_timestamp_as_every_records_time() {
        let mut bytes = build(
            0,
            &[
                (Some(b"a"), Some(b"1"), T0),
                (Some(b"b"), Some(b"2"), T0 + 4),
            ],
        )
        .to_vec();
        assert!(set_log_append_time(&mut bytes, T0 + 50));
        let batch = decode(&Bytes::from(bytes));
        let map = map_of(&[(b"a", 5), (b"b", 1)]);
        let cleaned = decode(&clean_batch(&batch, &map, &rules(6, T0)).unwrap().unwrap());
        assert!(cleaned.header().attributes.is_log_append_time());
        assert_eq!(cleaned.header().max_timestamp, T0 + 50);
        assert_eq!(
            cleaned.header().base_timestamp,
            T0 + 50,
            "Kafka's builder: the append time"
        );
        assert_eq!(cleaned.records().unwrap()[0].timestamp_delta, 0);
        assert_eq!(timestamps(&cleaned), vec![(1, T0 + 50)]);
    }

    #[test]
    fn a_kept_tombstone_sets_the_horizon_and_a_later_cleaning_past_it_drops_it() {
        let bytes = build(
            0,
            &[
                (Some(b"a"), Some(b"1"), T0 + 2),
                (Some(b"b"), None, T0 + 8),
                (Some(b"c"), Some(b"3"), T0 - 4),
            ],
        );
        let map = map_of(&[(b"a", 0), (b"b", 1), (b"c", 2)]);
        let now = T0 + 100;
        let first = decode(
            &clean_batch(&decode(&bytes), &map, &rules(3, now))
                .unwrap()
                .unwrap(),
        );
        let horizon = now + RETENTION_MS;
        assert_eq!(
            first.header().attributes.0 & DELETE_HORIZON_BIT,
            DELETE_HORIZON_BIT
        );
        assert_eq!(first.header().base_timestamp, horizon);
        assert_eq!(delete_horizon_ms(first.header()), Some(horizon));
        assert_eq!(
            first.header().max_timestamp,
            T0 + 8,
            "maxTimestamp is never the horizon"
        );
        assert_eq!(first.header().records_count, 3);
        assert_eq!(
            first.records().unwrap()[1].timestamp_delta,
            T0 + 8 - horizon
        );
        assert_eq!(
            timestamps(&first),
            vec![(0, T0 + 2), (1, T0 + 8), (2, T0 - 4)]
        );

        let before = clean_batch(&first, &map, &rules(3, horizon - 1))
            .unwrap()
            .unwrap();
        assert_eq!(&before, first.bytes(), "before the horizon nothing changes");

        let after = decode(
            &clean_batch(&first, &map, &rules(3, horizon))
                .unwrap()
                .unwrap(),
        );
        assert_eq!(after.header().records_count, 2);
        assert_eq!(
            delete_horizon_ms(after.header()),
            Some(horizon),
            "the horizon stays"
        );
        assert_eq!(timestamps(&after), vec![(0, T0 + 2), (2, T0 - 4)]);
        assert_eq!(after.header().max_timestamp, T0 + 2);
    }

    #[test]
    fn a_batch_with_a_horizon_keeps_it_when_rewritten_without_tombstones() {
        let horizon = T0 + 500;
        let bytes = with_horizon(
            &build(
                0,
                &[
                    (Some(b"a"), Some(b"1"), T0),
                    (Some(b"b"), Some(b"2"), T0 + 1),
                ],
            ),
            horizon,
        );
        let batch = decode(&bytes);
        let kept_timestamp = timestamps(&batch)[1].1;
        let map = map_of(&[(b"a", 9), (b"b", 1)]);
        let cleaned = decode(&clean_batch(&batch, &map, &rules(10, T0)).unwrap().unwrap());
        assert_eq!(delete_horizon_ms(cleaned.header()), Some(horizon));
        assert_eq!(timestamps(&cleaned), vec![(1, kept_timestamp)]);
    }

    #[test]
    fn the_empty_batch_is_kafkas_empty_header() {
        let bytes = patched(
            &with_horizon(
                &compressed(
                    &build(50, &[(Some(b"a"), None, T0), (Some(b"a"), None, T0 + 3)]),
                    Compression::Gzip,
                ),
                T0 + 9,
            ),
            |bytes| {
                put_field(bytes, field::PRODUCER_ID, &5i64.to_be_bytes());
                put_field(bytes, field::BASE_SEQUENCE, &12i32.to_be_bytes());
            },
        );
        let bytes = with_attributes(&bytes, 0x18);
        let batch = decode(&bytes);
        let empty = empty_batch(&batch);
        assert_eq!(empty.len(), BATCH_HEADER_BYTES);
        let empty = decode(&empty);
        let header = empty.header();
        assert_eq!(header.base_offset, 50);
        assert_eq!(header.last_offset_delta, 1);
        assert_eq!(header.batch_length, 49);
        assert_eq!(
            header.attributes.0, 0x18,
            "LogAppendTime and transactional; no codec, no horizon"
        );
        assert_eq!(header.base_timestamp, -1);
        assert_eq!(header.max_timestamp, batch.header().max_timestamp);
        assert_eq!(header.producer_id, 5);
        assert_eq!(header.base_sequence, 12);
        assert_eq!(header.records_count, 0);
        assert!(empty.records().unwrap().is_empty());
    }

    #[test]
    fn the_map_takes_keyed_records_in_the_range_and_skips_the_rest() {
        let batches = [
            decode(&build(
                0,
                &[(Some(b"a"), Some(b"1"), T0), (Some(b"b"), Some(b"1"), T0)],
            )),
            decode(&with_attributes(&build(2, &[(Some(b"x"), None, T0)]), 0x20)),
            decode(&build(
                3,
                &[
                    (None, Some(b"1"), T0),
                    (Some(b"a"), Some(b"2"), T0),
                    (Some(b"c"), None, T0),
                ],
            )),
            decode(&build(6, &[(Some(b"d"), Some(b"1"), T0)])),
        ];
        let mut map = map_of(&[]);
        let outcome = build_offset_map(&batches, &mut map, 1..6).unwrap();
        assert_eq!(
            outcome,
            MapBuildOutcome {
                mapped_end: 6,
                full: false,
                records_mapped: 3
            }
        );
        assert_eq!(map.get(b"a"), Some(4));
        assert_eq!(map.get(b"b"), Some(1));
        assert_eq!(map.get(b"c"), Some(5), "tombstones are mapped");
        assert_eq!(map.get(b"x"), None, "control batches are not");
        assert_eq!(map.get(b"d"), None, "beyond the range");
    }

    #[test]
    fn a_full_map_stops_at_the_record_that_did_not_fit() {
        let batches = [decode(&build(
            10,
            &[
                (Some(b"a"), Some(b"1"), T0),
                (Some(b"a"), Some(b"2"), T0),
                (Some(b"b"), Some(b"1"), T0),
            ],
        ))];
        let mut map = OffsetMap::new(2 * 24).unwrap();
        assert_eq!(map.capacity(), 1);
        let outcome = build_offset_map(&batches, &mut map, 10..13).unwrap();
        assert_eq!(
            outcome,
            MapBuildOutcome {
                mapped_end: 12,
                full: true,
                records_mapped: 2
            }
        );
        assert_eq!(map.get(b"a"), Some(11), "an update fits in a full map");
        map.clear();
        let next = build_offset_map(&batches, &mut map, 12..13).unwrap();
        assert_eq!(
            next,
            MapBuildOutcome {
                mapped_end: 13,
                full: false,
                records_mapped: 1
            }
        );
    }

    #[test]
    fn batches_outside_the_range_are_not_decompressed_and_disorder_is_an_error() {
        let garbage = patched(&build(0, &[(Some(b"a"), Some(b"1"), T0)]), |bytes| {
            let last = bytes.len() - 1;
            bytes[61] = 0x7e;
            bytes[last] ^= 0xff;
        });
        let good = build(5, &[(Some(b"b"), Some(b"1"), T0)]);
        let batches = [decode(&garbage), decode(&good)];
        let mut map = map_of(&[]);
        assert!(build_offset_map(&batches, &mut map, 5..6).is_ok());
        assert!(matches!(
            build_offset_map(&batches, &mut map, 0..6),
            Err(CompactError::Decode { base_offset: 0, .. })
        ));
        let disordered = [
            decode(&good),
            decode(&build(3, &[(Some(b"c"), Some(b"1"), T0)])),
        ];
        assert!(matches!(
            build_offset_map(&disordered, &mut map, 0..10),
            Err(CompactError::OffsetOrder {
                offset: 3,
                previous: 5
            })
        ));
    }

    #[test]
    fn cleanable_ratio_is_the_dirty_share() {
        assert_eq!(cleanable_ratio(0, 0), 0.0);
        assert_eq!(cleanable_ratio(100, 0), 0.0);
        assert_eq!(cleanable_ratio(0, 100), 1.0);
        assert_eq!(cleanable_ratio(300, 100), 0.25);
        assert_eq!(cleanable_ratio(u64::MAX, u64::MAX), 0.5, "no overflow");
    }

    #[test]
    fn choose_log_takes_the_dirtiest_at_or_above_the_minimum() {
        let logs = |min_cleanable_ratio| {
            let candidate = |id, clean_bytes, dirty_bytes| CleaningCandidate {
                id,
                clean_bytes,
                dirty_bytes,
                min_cleanable_ratio,
            };
            [
                candidate("low", 90, 10),
                candidate("half", 50, 50),
                candidate("high", 20, 80),
                candidate("also-high", 40, 160),
                candidate("clean", 0, 0),
            ]
        };
        let (strict, any) = (logs(0.5), logs(0.0));
        assert_eq!(
            choose_log(&strict),
            Some("high"),
            "the first of equal ratios"
        );
        assert_eq!(
            choose_log(&strict[..2]),
            Some("half"),
            "at the minimum counts"
        );
        assert_eq!(choose_log(&strict[..1]), None);
        assert_eq!(choose_log(&any[4..]), None, "nothing dirty, nothing to do");
        assert_eq!(choose_log(&any[..1]), Some("low"));
        assert_eq!(choose_log::<&str>(&[]), None);
        let lenient_low = CleaningCandidate {
            id: "lenient-low",
            ..any[0]
        };
        assert_eq!(
            choose_log(&[strict[2], lenient_low]),
            Some("high"),
            "the dirtiest eligible log wins"
        );
        assert_eq!(
            choose_log(&[strict[0], lenient_low]),
            Some("lenient-low"),
            "each log is held to its own minimum"
        );
    }

    #[test]
    fn the_attribute_bits_are_the_formats() {
        assert!(BatchAttributes(DELETE_HORIZON_BIT).has_delete_horizon());
        assert!(BatchAttributes(EMPTY_BATCH_KEPT_BITS).is_log_append_time());
        assert!(BatchAttributes(EMPTY_BATCH_KEPT_BITS).is_transactional());
        assert!(BatchAttributes(EMPTY_BATCH_KEPT_BITS).is_control());
        assert_eq!(REWRITE_KEPT_BITS, EMPTY_BATCH_KEPT_BITS | 0x07);
    }
}
