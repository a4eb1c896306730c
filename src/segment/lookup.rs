//! Point lookups in large batches: a record's chunks read and checked, not its whole batch.
//!
//! A batch's CRC covers the whole batch, so checking one record against it means reading all of
//! it: 100 KiB for a batch of a hundred 1 KiB records, where a block store reads a 4 KiB block.
//! The first lookup in a large batch reads it whole, checks its CRC and keeps a [`BatchDigest`]:
//! the header and, for each [`CHUNK_BYTES`] chunk of the batch, the chunk's CRC-32C and the first
//! and last records that start in it. A later lookup in that batch reads only the chunks that
//! hold its record: the one chunk where a record ends that starts before the chunk's last record
//! start, else from that last record to the next chunk's first one (one chunk for most 100 B
//! records, two for a 1 KiB one or a record that crosses into the next), and checks each chunk
//! against the CRC the digest took from bytes that had passed the batch CRC. A chunk that no longer
//! matches drops the digest and the lookup reads the batch whole again, so every record served
//! was checked against a CRC, as on every other read.
//!
//! Digests live with the open segment: dropped when it is truncated, released, deleted or
//! replaced by the cleaner. Each costs about 100 bytes plus 24 per chunk (2.4 % of a 100 KiB
//! batch, 3.3 % of an 11 KB one); a segment keeps at most [`DIGESTS_BYTES_MAX`] of them and
//! starts again when that is full, and all the segments of an engine's shard together at most
//! its [`DigestBudget`] (`EngineConfig::lookup_digest_bytes_max`): past it, lookups in batches
//! not yet digested read them whole, as without digests.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::format::crc::crc32c;
use crate::format::{Batch, BatchHeader, Compression, DecodeError, Reader, Record, RecordView};
use crate::limits::BATCH_HEADER_BYTES;

/// The unit a digested batch is read and checked in: a lookup of a 100 B record reads 1 KiB
/// (2 where it crosses a chunk's end), of a 1 KiB record 2 KiB (3 at most). With 4 KiB chunks
/// the storage layer's 100 B hot lookups ran slower.
pub(crate) const CHUNK_BYTES: usize = 1024;
/// Smaller batches are read whole: two or three pages at most, not worth a digest's memory. A
/// batch of a hundred 100 B records (11 KB) is digested.
pub(crate) const DIGESTED_BATCH_BYTES_MIN: u64 = 8 * 1024;
/// The most a segment's digests take (24 bytes per chunk, 2.3 % of the batches they cover):
/// those of about 1.3 GB of batches, a whole default segment.
pub(crate) const DIGESTS_BYTES_MAX: usize = 32 << 20;

/// A span buffer larger than this is not kept after its lookup (a lookup of a record of
/// megabytes does not leave megabytes with the thread).
const SPAN_BUFFER_KEPT_BYTES_MAX: usize = 64 * 1024;

thread_local! {
    /// The chunks of digested lookups are read into this buffer, kept by the reading thread (a
    /// shard) from lookup to lookup; each record found is copied out of it. So a lookup
    /// allocates only its record, and no read buffer is freed on the caller's thread.
    static SPAN_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `read` with this thread's span buffer.
pub(crate) fn with_span_buffer<T>(read: impl FnOnce(&mut Vec<u8>) -> T) -> T {
    SPAN_BUFFER.with_borrow_mut(|buffer| {
        let result = read(buffer);
        if buffer.capacity() > SPAN_BUFFER_KEPT_BYTES_MAX {
            *buffer = Vec::new();
        }
        result
    })
}

/// The memory the digests of many segments may take together (an engine shard's): each
/// segment's digests take their bytes from it and give them back when dropped.
#[derive(Debug, Clone)]
pub struct DigestBudget {
    limit_bytes: usize,
    used_bytes: Arc<AtomicUsize>,
}

impl DigestBudget {
    pub fn new(limit_bytes: usize) -> DigestBudget {
        DigestBudget {
            limit_bytes,
            used_bytes: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// No bound beyond each segment's own `DIGESTS_BYTES_MAX`.
    pub fn unlimited() -> DigestBudget {
        DigestBudget::new(usize::MAX)
    }

    /// What the digests holding this budget take now.
    pub fn used_bytes(&self) -> usize {
        self.used_bytes.load(Ordering::Relaxed)
    }

    fn try_take(&self, bytes: usize) -> bool {
        self.used_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes)
                    .filter(|total| *total <= self.limit_bytes)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.used_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// The digests of one segment's batches that lookups read, by last offset.
#[derive(Debug, Default)]
pub(crate) struct BatchDigests {
    by_last_offset: BTreeMap<i64, BatchDigest>,
    bytes: usize,
    /// Where `bytes` were taken from (the first insert's budget).
    budget: Option<DigestBudget>,
}

impl Drop for BatchDigests {
    fn drop(&mut self) {
        self.clear();
    }
}

impl BatchDigests {
    /// The digest of the batch holding `offset` (`baseOffset <= offset <= lastOffset`).
    pub(crate) fn covering(&self, offset: i64) -> Option<&BatchDigest> {
        let (_, digest) = self.by_last_offset.range(offset..).next()?;
        (digest.header.base_offset <= offset).then_some(digest)
    }

    /// Keeps `digest` if `budget` has room for it (after starting again when this segment's
    /// digests would pass `DIGESTS_BYTES_MAX`).
    pub(crate) fn insert(&mut self, digest: BatchDigest, budget: &DigestBudget) {
        let bytes = digest.footprint_bytes();
        if self.bytes + bytes > DIGESTS_BYTES_MAX {
            self.clear();
        }
        self.remove(digest.header.last_offset());
        let budget = self.budget.get_or_insert_with(|| budget.clone());
        if !budget.try_take(bytes) {
            return;
        }
        self.by_last_offset
            .insert(digest.header.last_offset(), digest);
        self.bytes += bytes;
    }

    pub(crate) fn remove(&mut self, last_offset: i64) {
        if let Some(old) = self.by_last_offset.remove(&last_offset) {
            self.release(old.footprint_bytes());
        }
    }

    pub(crate) fn clear(&mut self) {
        self.by_last_offset.clear();
        self.release(self.bytes);
    }

    fn release(&mut self, bytes: usize) {
        self.bytes -= bytes;
        if let Some(budget) = &self.budget {
            budget.give_back(bytes);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_last_offset.len()
    }
}

/// What a lookup keeps of a batch whose CRC it checked.
#[derive(Debug)]
pub(crate) struct BatchDigest {
    /// Where the batch starts in its segment's `.log`.
    position: u64,
    header: BatchHeader,
    chunks: Box<[ChunkDigest]>,
}

/// One chunk of a digested batch: bytes `[index * CHUNK_BYTES, (index + 1) * CHUNK_BYTES)` of it,
/// the last one shorter.
#[derive(Debug, Clone, Copy)]
struct ChunkDigest {
    crc: u32,
    /// The first and the last record that start in this chunk, if one does. A record from the
    /// first up to the one before the last ends inside the chunk.
    record_starts: Option<ChunkRecordStarts>,
}

#[derive(Debug, Clone, Copy)]
struct ChunkRecordStarts {
    first: RecordStart,
    last: RecordStart,
}

#[derive(Debug, Clone, Copy)]
struct RecordStart {
    offset_delta: i32,
    /// From the start of the batch.
    position: u32,
}

/// The chunks a lookup reads: `[first_chunk, end_chunk)` of the batch, holding the records from
/// `records_from` (a record start at or before the wanted one) up to `records_to` (the next
/// record start after it in a later chunk, or the batch's end). Positions from the batch's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkSpan {
    first_chunk: usize,
    end_chunk: usize,
    records_from: usize,
    records_to: usize,
}

impl ChunkSpan {
    /// Where the span starts, from the batch's start.
    pub(crate) fn start_bytes(&self) -> usize {
        self.first_chunk * CHUNK_BYTES
    }
}

/// A lookup in a digested batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DigestedRecord {
    Found(Record),
    /// The batch holds no record at the offset (the cleaner removed it).
    Absent,
    /// The chunks read do not match the digest, or their records do not decode: read the batch
    /// whole and check it again.
    Stale,
}

impl BatchDigest {
    /// The digest of `batch`, which starts at `position` and passed its CRC; `None` for a batch
    /// a lookup reads whole anyway (small, compressed or a control batch) or whose records do
    /// not decode.
    pub(crate) fn of(position: u64, batch: &Batch) -> Option<BatchDigest> {
        let header = *batch.header();
        let compressed = header.attributes.compression().ok()? != Compression::None;
        if compressed
            || header.attributes.is_control()
            || batch.size_bytes() < DIGESTED_BATCH_BYTES_MIN
            || batch.size_bytes() > u64::from(u32::MAX)
        {
            return None;
        }
        let bytes = batch.bytes();
        let mut chunks: Box<[ChunkDigest]> = bytes
            .chunks(CHUNK_BYTES)
            .map(|chunk| ChunkDigest {
                crc: crc32c(chunk),
                record_starts: None,
            })
            .collect();
        let section = bytes.get(BATCH_HEADER_BYTES..)?;
        let mut reader = Reader::new(section);
        while reader.remaining() > 0 {
            let position = BATCH_HEADER_BYTES + reader.position();
            let start = RecordStart {
                offset_delta: Record::skip(&mut reader).ok()?,
                position: u32::try_from(position).ok()?,
            };
            let chunk = chunks.get_mut(position / CHUNK_BYTES)?;
            let starts = chunk.record_starts.get_or_insert(ChunkRecordStarts {
                first: start,
                last: start,
            });
            starts.last = start;
        }
        Some(BatchDigest {
            position,
            header,
            chunks,
        })
    }

    pub(crate) fn position(&self) -> u64 {
        self.position
    }

    pub(crate) fn header(&self) -> &BatchHeader {
        &self.header
    }

    fn size_bytes(&self) -> usize {
        self.header.size_bytes() as usize
    }

    fn footprint_bytes(&self) -> usize {
        std::mem::size_of::<BatchDigest>()
            + self.chunks.len() * std::mem::size_of::<ChunkDigest>()
            // The map's node share per entry, roughly.
            + 2 * std::mem::size_of::<i64>()
    }

    /// The chunks to read for the record `offset_delta` past the batch's base offset; `None`
    /// when no record of the batch can hold it (it precedes every record).
    ///
    /// The chunk where the last record start at or before it lies is read alone when the record
    /// comes before that chunk's last record start (it ends inside the chunk); otherwise the
    /// record is that last one (or absent), read from its start to the next chunk's first
    /// record start (or the batch's end).
    pub(crate) fn span(&self, offset_delta: i32) -> Option<ChunkSpan> {
        // Chunks up to `after` have their last record start at or before the record (binary
        // search: a chunk no record starts in takes the start of the nearest one before it).
        let (mut low, mut high) = (0, self.chunks.len());
        while low < high {
            let middle = (low + high) / 2;
            match self.starts_at_or_before(middle) {
                Some(starts) if starts.first.offset_delta <= offset_delta => low = middle + 1,
                _ => high = middle,
            }
        }
        let after = low;
        let from = self.starts_at_or_before(after.checked_sub(1)?)?;
        let first_chunk = from.first.position as usize / CHUNK_BYTES;
        if offset_delta < from.last.offset_delta {
            return Some(ChunkSpan {
                first_chunk,
                end_chunk: first_chunk + 1,
                records_from: from.first.position as usize,
                records_to: from.last.position as usize,
            });
        }
        let to = self.chunks[after..]
            .iter()
            .find_map(|chunk| chunk.record_starts)
            .map_or(self.size_bytes(), |starts| starts.first.position as usize);
        Some(ChunkSpan {
            first_chunk,
            end_chunk: to.div_ceil(CHUNK_BYTES),
            records_from: from.last.position as usize,
            records_to: to,
        })
    }

    /// The record starts of chunk `index`, or of the nearest chunk before it that has some
    /// (a chunk inside a record longer than a chunk has none).
    fn starts_at_or_before(&self, index: usize) -> Option<ChunkRecordStarts> {
        self.chunks[..=index]
            .iter()
            .rev()
            .find_map(|chunk| chunk.record_starts)
    }

    /// How many bytes `span` reads: whole chunks, the batch's last one shorter.
    pub(crate) fn span_bytes(&self, span: &ChunkSpan) -> usize {
        (span.end_chunk * CHUNK_BYTES).min(self.size_bytes()) - span.start_bytes()
    }

    /// The record `offset_delta` from `read`, the bytes of `span`, once each chunk in it matches
    /// its CRC; copied out of `read` (a buffer the reading thread keeps).
    pub(crate) fn record_in(
        &self,
        span: &ChunkSpan,
        read: &[u8],
        offset_delta: i32,
    ) -> DigestedRecord {
        let expected = self.chunks.get(span.first_chunk..span.end_chunk);
        let intact = read.len() == self.span_bytes(span)
            && expected.is_some_and(|expected| {
                expected.len() == read.chunks(CHUNK_BYTES).len()
                    && expected
                        .iter()
                        .zip(read.chunks(CHUNK_BYTES))
                        .all(|(chunk, bytes)| chunk.crc == crc32c(bytes))
            });
        if !intact {
            return DigestedRecord::Stale;
        }
        let base = span.start_bytes();
        match find_record(
            read,
            span.records_from - base,
            span.records_to - base,
            offset_delta,
        ) {
            Ok(Some(record)) => DigestedRecord::Found(record),
            Ok(None) => DigestedRecord::Absent,
            Err(_) => DigestedRecord::Stale,
        }
    }
}

/// The record `offset_delta` among the records laid end to end in `buffer[from..to]`, copied.
fn find_record(
    buffer: &[u8],
    from: usize,
    to: usize,
    offset_delta: i32,
) -> Result<Option<Record>, DecodeError> {
    let records = buffer.get(from..to).ok_or(DecodeError::Truncated {
        at: from,
        needed: to.saturating_sub(from),
        available: buffer.len().saturating_sub(from),
    })?;
    let mut reader = Reader::new(records);
    while reader.remaining() > 0 {
        let mut next = reader.clone();
        let found = Record::skip(&mut next)?;
        if found == offset_delta {
            return RecordView::decode(&mut reader).map(|view| Some(view.to_detached_record()));
        }
        if found > offset_delta {
            return Ok(None);
        }
        reader = next;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "test code")]

    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;
    use crate::cleaner::batch_cleaning::{CleanRules, clean_batch};
    use crate::cleaner::offset_map::OffsetMap;
    use crate::format::{BatchBuilder, NewRecord};

    const BASE_OFFSET: i64 = 1_000;
    const T0: i64 = 1_700_000_000_000;

    fn batch_of(values: &[Vec<u8>], key_of: impl Fn(usize) -> Vec<u8>) -> Batch {
        let mut builder = BatchBuilder::new(BASE_OFFSET);
        for (index, value) in values.iter().enumerate() {
            let key = key_of(index);
            builder.push(&NewRecord {
                timestamp_ms: T0 + index as i64,
                key: Some(&key),
                value: Some(value),
                headers: &[("h", Some(b"header value"))],
            });
        }
        Batch::decode(&builder.build().unwrap(), u64::MAX).unwrap()
    }

    fn batch_of_sizes(value_bytes: &[usize]) -> Batch {
        let values: Vec<Vec<u8>> = value_bytes
            .iter()
            .enumerate()
            .map(|(index, &size)| (0..size).map(|byte| (byte + index) as u8).collect())
            .collect();
        batch_of(&values, |index| format!("key-{index}").into_bytes())
    }

    /// What a lookup of `offset_delta` in `batch` gets from the chunks its digest reads.
    fn digested_lookup(digest: &BatchDigest, batch: &Batch, offset_delta: i32) -> DigestedRecord {
        let Some(span) = digest.span(offset_delta) else {
            return DigestedRecord::Absent;
        };
        let read = batch
            .bytes()
            .slice(span.start_bytes()..span.start_bytes() + digest.span_bytes(&span));
        digest.record_in(&span, &read, offset_delta)
    }

    proptest! {
        #[test]
        fn every_record_of_a_digested_batch_is_read_from_its_chunks_as_record_at_reads_it(
            value_bytes in proptest::collection::vec(0usize..9_000, 1..60),
        ) {
            let batch = batch_of_sizes(&value_bytes);
            let Some(digest) = BatchDigest::of(0, &batch) else {
                prop_assert!(batch.size_bytes() < DIGESTED_BATCH_BYTES_MIN);
                return Ok(());
            };
            for offset_delta in 0..=value_bytes.len() as i32 {
                let expected = batch.record_at(BASE_OFFSET + i64::from(offset_delta)).unwrap();
                let found = digested_lookup(&digest, &batch, offset_delta);
                match expected {
                    Some(record) => prop_assert_eq!(found, DigestedRecord::Found(record)),
                    None => prop_assert_eq!(found, DigestedRecord::Absent),
                }
            }
        }
    }

    /// The bytes each lookup of `records` records of `value_bytes` reads from their digest.
    fn span_bytes_of_each_record(value_bytes: usize, records: usize) -> Vec<usize> {
        let batch = batch_of_sizes(&vec![value_bytes; records]);
        let digest = BatchDigest::of(0, &batch).unwrap();
        (0..records as i32)
            .map(|offset_delta| digest.span_bytes(&digest.span(offset_delta).unwrap()))
            .collect()
    }

    #[test]
    fn a_lookup_of_a_1_kib_record_reads_two_chunks_three_where_it_starts_at_a_chunk_end() {
        let spans = span_bytes_of_each_record(1024, 100);
        assert!(
            spans.iter().all(|&bytes| bytes <= 3 * CHUNK_BYTES),
            "{spans:?}"
        );
        // A record a little longer than a chunk covers two unless it starts in a chunk's last
        // few bytes.
        let two_chunks = spans
            .iter()
            .filter(|&&bytes| bytes <= 2 * CHUNK_BYTES)
            .count();
        assert!(
            two_chunks >= 95,
            "{two_chunks} of 100 in two chunks: {spans:?}"
        );
    }

    #[test]
    fn a_lookup_of_a_100_byte_record_reads_one_chunk_of_its_batch_but_at_a_chunk_boundary() {
        let spans = span_bytes_of_each_record(100, 100);
        assert!(
            spans.iter().all(|&bytes| bytes <= 2 * CHUNK_BYTES),
            "{spans:?}"
        );
        // Nine records start in most chunks: only the last of them may cross.
        let one_chunk = spans.iter().filter(|&&bytes| bytes <= CHUNK_BYTES).count();
        assert!(
            one_chunk >= 85,
            "{one_chunk} of 100 in one chunk: {spans:?}"
        );
    }

    #[test]
    fn a_lookup_of_a_record_longer_than_many_chunks_reads_from_its_start_to_the_next() {
        let batch = batch_of_sizes(&[100, 9_000, 100, 100]);
        let digest = BatchDigest::of(0, &batch).unwrap();
        let span = digest.span(1).unwrap();
        assert!(span.records_from < CHUNK_BYTES + BATCH_HEADER_BYTES);
        assert!(span.records_to > 9_000);
        assert!(digest.span_bytes(&span) >= 9_000);
        assert_eq!(
            digested_lookup(&digest, &batch, 2),
            DigestedRecord::Found(batch.record_at(BASE_OFFSET + 2).unwrap().unwrap())
        );
    }

    #[test]
    fn a_chunk_that_no_longer_matches_its_crc_makes_the_digest_stale() {
        let batch = batch_of_sizes(&[1024; 100]);
        let digest = BatchDigest::of(0, &batch).unwrap();
        let span = digest.span(50).unwrap();
        let start = span.start_bytes();
        let mut read = batch.bytes()[start..start + digest.span_bytes(&span)].to_vec();
        let last = read.len() - 1;
        read[last] ^= 1;
        assert_eq!(
            digest.record_in(&span, &Bytes::from(read), 50),
            DigestedRecord::Stale
        );
        let short = batch
            .bytes()
            .slice(start..start + digest.span_bytes(&span) - 1);
        assert_eq!(digest.record_in(&span, &short, 50), DigestedRecord::Stale);
    }

    #[test]
    fn small_compressed_and_control_batches_are_not_digested() {
        let small = batch_of_sizes(&[100; 50]);
        assert!(small.size_bytes() < DIGESTED_BATCH_BYTES_MIN);
        assert!(BatchDigest::of(0, &small).is_none());

        let large = batch_of_sizes(&[1024; 100]);
        let mut compressed_attributes = large.bytes().to_vec();
        compressed_attributes[21..23].copy_from_slice(&1u16.to_be_bytes());
        let compressed =
            Batch::decode_without_crc_check(&Bytes::from(compressed_attributes), u64::MAX);
        assert!(BatchDigest::of(0, &compressed.unwrap()).is_none());

        let mut control_attributes = large.bytes().to_vec();
        control_attributes[21..23].copy_from_slice(&0x20u16.to_be_bytes());
        let control = Batch::decode_without_crc_check(&Bytes::from(control_attributes), u64::MAX);
        assert!(BatchDigest::of(0, &control.unwrap()).is_none());
    }

    #[test]
    fn a_compacted_batch_finds_its_kept_records_and_none_for_the_removed_ones() {
        // Every third record shares one key: the cleaner keeps only the last of those.
        let values = vec![vec![7u8; 1024]; 99];
        let key_of = |index: usize| {
            if index.is_multiple_of(3) {
                b"shared".to_vec()
            } else {
                format!("key-{index}").into_bytes()
            }
        };
        let batch = batch_of(&values, key_of);
        let mut map = OffsetMap::new(64 * 1024).unwrap();
        for index in 0..values.len() {
            map.put(&key_of(index), BASE_OFFSET as u64 + index as u64)
                .unwrap();
        }
        let rules = CleanRules {
            mapped_end: BASE_OFFSET as u64 + values.len() as u64,
            now_ms: T0,
            delete_retention_ms: 0,
        };
        let cleaned = clean_batch(&batch, &map, &rules).unwrap().unwrap();
        let cleaned = Batch::decode(&cleaned, u64::MAX).unwrap();
        let digest = BatchDigest::of(0, &cleaned).unwrap();
        for offset_delta in 0..values.len() as i32 {
            let found = digested_lookup(&digest, &cleaned, offset_delta);
            let kept = !(offset_delta as usize).is_multiple_of(3) || offset_delta == 96;
            match (kept, found) {
                (true, DigestedRecord::Found(record)) => {
                    assert_eq!(record.offset_delta, offset_delta);
                    assert_eq!(record.key.unwrap(), key_of(offset_delta as usize));
                }
                (false, DigestedRecord::Absent) => {}
                (kept, found) => panic!("offset delta {offset_delta} kept {kept}: {found:?}"),
            }
        }
    }

    #[test]
    fn a_segments_digests_start_again_once_they_would_pass_their_budget() {
        let batch = batch_of_sizes(&[1024; 16]);
        let mut digests = BatchDigests::default();
        let mut inserted = 0usize;
        loop {
            let mut digest = BatchDigest::of(0, &batch).unwrap();
            digest.header.base_offset = inserted as i64 * 100;
            let before = digests.len();
            digests.insert(digest, &DigestBudget::unlimited());
            inserted += 1;
            if digests.len() <= before {
                break;
            }
        }
        // As many as fit the budget, then the one that cleared it.
        let footprint = BatchDigest::of(0, &batch).unwrap().footprint_bytes();
        assert_eq!(inserted, DIGESTS_BYTES_MAX / footprint + 1);
        assert_eq!(digests.len(), 1);
        assert_eq!(digests.bytes, footprint);
        let last = (inserted as i64 - 1) * 100;
        assert!(digests.covering(last).is_some());
        assert!(digests.covering(0).is_none());
    }

    #[test]
    fn segments_share_a_budget_that_a_full_one_refuses_and_dropped_digests_give_back() {
        let batch = batch_of_sizes(&[1024; 16]);
        let digest_at = |base_offset: i64| {
            let mut digest = BatchDigest::of(0, &batch).unwrap();
            digest.header.base_offset = base_offset;
            digest
        };
        let footprint = digest_at(0).footprint_bytes();
        let budget = DigestBudget::new(3 * footprint);
        let mut first = BatchDigests::default();
        let mut second = BatchDigests::default();
        first.insert(digest_at(0), &budget);
        first.insert(digest_at(100), &budget);
        second.insert(digest_at(0), &budget);
        assert_eq!(budget.used_bytes(), 3 * footprint);
        // Full: a fourth is not kept (its lookups read the batch whole).
        second.insert(digest_at(100), &budget);
        assert_eq!((first.len(), second.len()), (2, 1));
        assert!(second.covering(100).is_none());
        // Digesting a batch again replaces its digest without taking more.
        first.insert(digest_at(0), &budget);
        assert_eq!(budget.used_bytes(), 3 * footprint);
        first.remove(digest_at(100).header.last_offset());
        assert_eq!(budget.used_bytes(), 2 * footprint);
        second.insert(digest_at(100), &budget);
        assert_eq!(second.len(), 2);
        drop(second);
        assert_eq!(budget.used_bytes(), footprint);
        first.clear();
        assert_eq!(budget.used_bytes(), 0);
    }
}
