//! One segment: a `.log` of batches plus its sparse `.index` and `.timeindex`, named by the base
//! offset (FORMAT.md § Segments; Kafka's `LogSegment`).
//!
//! The segment decides where bytes go and which index entries to add; its `.log` is read and
//! written through the [`Storage`] seam. Only the last segment of a log is appended to; every
//! other segment is sealed: its indexes trimmed to their entries and its data synced.

mod active;
mod direct;
mod fetch_plan;
mod lookup;
pub mod recovery;
pub mod scan;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::error::StorageError;
use crate::format::file_name::{FileState, SegmentFileKind, SegmentFileName};
use crate::format::{BatchHeader, BatchPrefix};
use crate::index::time_index::TimestampOffset;
use crate::index::{OffsetIndex, TimeIndex};
use crate::io::{Storage, StorageFile};
use crate::types::{Offset, TimestampMs};
pub use active::ActiveSegment;
use fetch_plan::{FetchRequest, plan_fetch};
pub use lookup::DigestBudget;
use lookup::{BatchDigest, BatchDigests, DigestedRecord};
use scan::{LogScanner, ScanStep};

/// Reads at least this large are taken as a sequential consumer's and prefetch what follows.
const PREFETCH_READ_BYTES_MIN: u64 = 256 * 1024;
/// How many reads of the same size are prefetched after one.
const PREFETCH_READS: u64 = 4;
/// The unit a crash keeps or loses whole, and where a misdirected write lands.
const SECTOR_BYTES: u64 = 512;

/// What a point lookup found in a segment (`Segment::read_record`).
#[derive(Debug)]
pub enum RecordRead {
    /// No batch of the segment ends at or after the offset: the next segment may hold it.
    PastEnd,
    /// The batch holding the offset has no data record there: a control batch, or a record
    /// the cleaner removed.
    Absent,
    /// The record, with its batch's header.
    Found(BatchHeader, crate::format::Record),
    /// The batch passed its CRC but its records do not decode.
    Invalid(crate::format::DecodeError),
}

/// What the roll rule needs to know about an append before it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncomingAppend {
    pub size_bytes: u64,
    pub last_offset: Offset,
    pub max_timestamp: TimestampMs,
    pub now: TimestampMs,
}

/// One batch inside a write, with its offsets already assigned by the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendedBatch {
    /// Where the batch starts, relative to the start of the write.
    pub position_in_write: u64,
    pub size_bytes: u64,
    pub last_offset: Offset,
    pub max_timestamp: TimestampMs,
}

/// The batch that holds a target offset: where it starts and how large it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLocation {
    pub position: u64,
    pub size_bytes: u64,
    pub base_offset: Offset,
    pub last_offset: Offset,
}

/// A segment's files and the state derived from them: read by fetches, sealed once its appends
/// end. The log's last segment is an [`ActiveSegment`] around one.
#[derive(Debug)]
pub struct Segment {
    base_offset: Offset,
    log_path: PathBuf,
    /// Shared with a shard's syncer, which may still sync it after the segment is gone.
    log: Arc<dyn StorageFile>,
    size_bytes: u64,
    next_offset: Offset,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    bytes_since_last_index_entry: u64,
    max_timestamp_so_far: Option<TimestampOffset>,
    /// Timestamp of the first batch, for `segment.ms` (Kafka's `rollingBasedTimestamp`).
    first_batch_timestamp: Option<TimestampMs>,
    created_ms: TimestampMs,
    /// Where the last prefetch (readahead advice) ended.
    prefetched_to: std::cell::Cell<u64>,
    /// Size of the last batch a fetch started with: a fetch's read past its index entry's batch
    /// takes at least that much, so it brings the batch wanted whole (`read_from`).
    batch_bytes_hint: std::cell::Cell<u64>,
    /// What point lookups keep of the large batches they read (`lookup.rs`).
    digests: std::cell::RefCell<BatchDigests>,
    /// Where the `.log` held data when recovery began reading it (`recovery.rs`).
    recovery_data: crate::io::DataRanges,
}

impl Segment {
    pub fn base_offset(&self) -> Offset {
        self.base_offset
    }

    /// One past the last offset in the segment (`base_offset` when empty).
    pub fn next_offset(&self) -> Offset {
        self.next_offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }

    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }

    /// Index entries that appends can still add before an index is full (a batch adds at most
    /// one).
    pub fn index_entries_free(&self) -> usize {
        self.offset_index
            .free_entries()
            .min(self.time_index.free_entries())
    }

    /// The largest timestamp in the segment, or the `.log` file's mtime when it has none
    /// (what time retention compares against).
    pub fn largest_timestamp(&self) -> Result<TimestampMs, StorageError> {
        match self.max_timestamp_so_far {
            Some(max) if max.timestamp.0 >= 0 => Ok(max.timestamp),
            _ => self
                .log
                .modified_ms()
                .map(TimestampMs)
                .map_err(|source| StorageError::io("stat", &self.log_path, source)),
        }
    }

    /// The `.log` file's last-modified time in milliseconds.
    pub fn modified_ms(&self) -> Result<i64, StorageError> {
        self.log
            .modified_ms()
            .map_err(|source| StorageError::io("stat", &self.log_path, source))
    }

    fn maybe_index(&mut self, last_offset: Offset, position: u64, size_bytes: u64, interval: u64) {
        let room = !self.offset_index.is_full() && !self.time_index.is_full();
        if self.bytes_since_last_index_entry > interval && room {
            self.offset_index.append(last_offset, position as u32);
            if let Some(max) = self.max_timestamp_so_far {
                self.time_index
                    .maybe_append(max.timestamp, max.offset, false);
            }
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += size_bytes;
    }

    /// The `.log`, for a sync that may outlive this segment (a shard's syncer).
    pub fn shared_log_file(&self) -> Arc<dyn StorageFile> {
        Arc::clone(&self.log)
    }

    /// Finds the first batch whose last offset is `>= target`, starting from the index entry at or
    /// below `target` and scanning forward, never past `max_position`.
    pub fn locate(
        &self,
        target: Offset,
        max_position: u64,
    ) -> Result<Option<BatchLocation>, StorageError> {
        let start = self.offset_index.lookup(target);
        self.scan_for(u64::from(start.position), max_position, |header| {
            header.last_offset() >= target.0 as i64
        })
    }

    /// Whole batches from the one holding `offset` (the first whose last offset is `>= offset`),
    /// up to `max_bytes` but at least that batch; `None` if no batch of this segment ends at or
    /// after `offset`.
    ///
    /// Reads: where the index places the batch holding `offset` (`read_indexed_batch`), one read
    /// of `max_bytes` or the size of the last batch served, which brings that batch whole. Else
    /// one read from the offset's index entry (keyed by its batch's last offset, so usually the
    /// batch before the one wanted) through the next entry and a batch's worth past it, and
    /// the hops between headers in it; only a batch larger than what was read is read again.
    pub fn read_from(
        &self,
        offset: Offset,
        max_bytes: u64,
        dense: bool,
    ) -> Result<Option<Bytes>, StorageError> {
        Ok(self
            .read_from_position(offset, max_bytes, dense)?
            .map(|(_, bytes)| bytes))
    }

    /// `read_from`, with where in the `.log` the bytes served start: the plan's indexed read,
    /// else its scan (`fetch_plan.rs`).
    fn read_from_position(
        &self,
        offset: Offset,
        max_bytes: u64,
        dense: bool,
    ) -> Result<Option<(u64, Bytes)>, StorageError> {
        let (entry, next_entry) = self.offset_index.lookup_with_next(offset);
        let plan = plan_fetch(&FetchRequest {
            offset,
            entry,
            next_entry,
            size_bytes: self.size_bytes,
            max_bytes,
            batch_hint_bytes: self.batch_bytes_hint.get(),
        });
        if let Some((position, length)) = plan.indexed
            && let Some(served) =
                self.read_indexed_batch(offset, position, length, max_bytes, dense)?
        {
            return Ok(Some(served));
        }
        let end = self.size_bytes;
        let scan = plan.scan;
        let mut scanner = LogScanner::with_window(
            self.log.as_ref(),
            &self.log_path,
            scan.start,
            end,
            scan.first_window_bytes,
        )
        .then_window(scan.window_bytes);
        let Some(first) = self.find_batch(&mut scanner, |header| {
            header.last_offset() >= offset.0 as i64
        })?
        else {
            return Ok(None);
        };
        self.batch_bytes_hint.set(first.size_bytes);
        // What `read_batches` would read: served from the window when it holds all of it.
        let wanted = max_bytes.max(first.size_bytes).min(end - first.position);
        let Some(window) = scanner
            .window_from(first.position)
            .filter(|window| window.len() as u64 >= wanted)
        else {
            return self
                .read_batches(first, offset, max_bytes, end, dense)
                .map(|bytes| Some((first.position, bytes)));
        };
        self.serve_batches(
            window.slice(..wanted as usize),
            first.position,
            offset,
            end,
            dense,
        )
        .map(|bytes| Some((first.position, bytes)))
    }

    /// The batch holding `offset`, read in one read of `length` bytes at `position`, where the
    /// plan says it starts. `None` when the batch read there does not hold `offset` (its header,
    /// checked before anything is served, says so): the caller scans instead.
    fn read_indexed_batch(
        &self,
        offset: Offset,
        position: u64,
        length: u64,
        max_bytes: u64,
        dense: bool,
    ) -> Result<Option<(u64, Bytes)>, StorageError> {
        let end = self.size_bytes;
        let bytes = Bytes::from(
            self.log
                .read_to_vec(length as usize, position)
                .map_err(|source| StorageError::io("read", &self.log_path, source))?,
        );
        let Some(header) = BatchPrefix::parse(&bytes)
            .and_then(|_| BatchHeader::parse(&bytes))
            .ok()
            .filter(|header| {
                header.base_offset <= offset.0 as i64 && header.last_offset() >= offset.0 as i64
            })
        else {
            return Ok(None);
        };
        let first = BatchLocation {
            position,
            size_bytes: header.size_bytes(),
            base_offset: Offset(header.base_offset.max(0) as u64),
            last_offset: Offset(header.last_offset().max(0) as u64),
        };
        self.batch_bytes_hint.set(first.size_bytes);
        let wanted = max_bytes.max(first.size_bytes).min(end - position);
        if (bytes.len() as u64) < wanted {
            return self
                .read_batches(first, offset, max_bytes, end, dense)
                .map(|bytes| Some((position, bytes)));
        }
        self.serve_batches(bytes.slice(..wanted as usize), position, offset, end, dense)
            .map(|bytes| Some((position, bytes)))
    }

    /// The record at `offset` (a point lookup). In a batch a lookup read before (`lookup.rs`),
    /// only the chunks holding the record are read and checked against the batch's digest;
    /// otherwise the batch is read whole and checked as a fetch checks it, and a large one
    /// digested for the next lookup if `budget` has room.
    pub fn read_record(
        &self,
        offset: Offset,
        dense: bool,
        budget: &DigestBudget,
    ) -> Result<RecordRead, StorageError> {
        let Ok(wanted) = i64::try_from(offset.0) else {
            return Ok(RecordRead::PastEnd);
        };
        if let Some(read) = self.read_digested_record(wanted)? {
            return Ok(read);
        }
        let Some((position, bytes)) = self.read_from_position(offset, 1, dense)? else {
            return Ok(RecordRead::PastEnd);
        };
        // The CRC was checked as the batch was served.
        let batch = match crate::format::Batch::decode_without_crc_check(&bytes, u64::MAX) {
            Ok(batch) => batch,
            Err(error) => return Ok(RecordRead::Invalid(error)),
        };
        if batch.header().attributes.is_control() {
            return Ok(RecordRead::Absent);
        }
        let record = match batch.record_at(wanted) {
            Ok(record) => record,
            Err(error) => return Ok(RecordRead::Invalid(error)),
        };
        if let Some(digest) = BatchDigest::of(position, &batch) {
            self.digests.borrow_mut().insert(digest, budget);
        }
        // Copied out, so the caller's record does not keep the batch's buffer alive (nor free
        // it on another thread: a shard's reads stay in its own allocations).
        Ok(record.map_or(RecordRead::Absent, |record| {
            RecordRead::Found(*batch.header(), record.detached())
        }))
    }

    /// The record at `wanted` from the chunks of a digested batch; `None` when no digest covers
    /// it or the chunks read no longer match theirs (the digest is dropped).
    fn read_digested_record(&self, wanted: i64) -> Result<Option<RecordRead>, StorageError> {
        let mut digests = self.digests.borrow_mut();
        let Some(digest) = digests.covering(wanted) else {
            return Ok(None);
        };
        let header = *digest.header();
        let Ok(offset_delta) = i32::try_from(wanted - header.base_offset) else {
            return Ok(None);
        };
        let Some(span) = digest.span(offset_delta) else {
            return Ok(Some(RecordRead::Absent));
        };
        let found = lookup::with_span_buffer(|buffer| {
            let read = self
                .log
                .read_into(
                    buffer,
                    digest.span_bytes(&span),
                    digest.position() + span.start_bytes() as u64,
                )
                .map_err(|source| StorageError::io("read", &self.log_path, source))?;
            Ok(digest.record_in(&span, buffer.get(..read).unwrap_or_default(), offset_delta))
        })?;
        match found {
            DigestedRecord::Found(record) => Ok(Some(RecordRead::Found(header, record))),
            DigestedRecord::Absent => Ok(Some(RecordRead::Absent)),
            DigestedRecord::Stale => {
                digests.remove(header.last_offset());
                Ok(None)
            }
        }
    }

    fn scan_for(
        &self,
        from_position: u64,
        max_position: u64,
        found: impl Fn(&crate::format::BatchHeader) -> bool,
    ) -> Result<Option<BatchLocation>, StorageError> {
        let end = max_position.min(self.size_bytes);
        let mut scanner = self.lookup_scanner(from_position, end);
        self.find_batch(&mut scanner, found)
    }

    /// A scanner for a few hops between headers from an index entry: a page at a time.
    fn lookup_scanner(&self, from_position: u64, end: u64) -> LogScanner<'_> {
        LogScanner::with_window(
            self.log.as_ref(),
            &self.log_path,
            from_position,
            end,
            scan::LOOKUP_WINDOW_BYTES,
        )
    }

    /// The first batch from `scanner`'s position whose header satisfies `found`.
    fn find_batch(
        &self,
        scanner: &mut LogScanner<'_>,
        found: impl Fn(&crate::format::BatchHeader) -> bool,
    ) -> Result<Option<BatchLocation>, StorageError> {
        loop {
            match scanner.next_header()? {
                ScanStep::Item { position, item } if found(&item) => {
                    return Ok(Some(BatchLocation {
                        position,
                        size_bytes: item.size_bytes(),
                        base_offset: Offset(item.base_offset.max(0) as u64),
                        last_offset: Offset(item.last_offset().max(0) as u64),
                    }));
                }
                ScanStep::Item { .. } => {}
                ScanStep::End => return Ok(None),
                ScanStep::Invalid { position, error } => {
                    return Err(StorageError::Corrupt {
                        file: self.log_path.clone(),
                        position,
                        reason: error.to_string(),
                    });
                }
            }
        }
    }

    /// Reads whole batches starting with `first`, up to `max_bytes` (at least `first` itself),
    /// never past `max_position`. The first batch must hold `offset` when `dense` (the log is
    /// never compacted, so each batch starts right after the previous one), else end at or
    /// after it.
    pub fn read_batches(
        &self,
        first: BatchLocation,
        offset: Offset,
        max_bytes: u64,
        max_position: u64,
        dense: bool,
    ) -> Result<Bytes, StorageError> {
        let end = max_position.min(self.size_bytes);
        let length = max_bytes.max(first.size_bytes).min(end - first.position);
        let bytes = Bytes::from(
            self.log
                .read_to_vec(length as usize, first.position)
                .map_err(|source| StorageError::io("read", &self.log_path, source))?,
        );
        self.serve_batches(bytes, first.position, offset, end, dense)
    }

    /// `bytes`, read from `position`, as served: the reads after them prefetched, cut to the
    /// whole batches that pass their checks (`checked_batches_length`).
    fn serve_batches(
        &self,
        bytes: Bytes,
        position: u64,
        offset: Offset,
        end: u64,
        dense: bool,
    ) -> Result<Bytes, StorageError> {
        let read = bytes.len() as u64;
        self.prefetch_after(position + read, read, end);
        let valid_length = self.checked_batches_length(&bytes, position, offset, dense)?;
        Ok(bytes.slice(..valid_length))
    }

    /// After a large read ending at `position`, has the kernel start reading the next
    /// `PREFETCH_READS` reads' worth (up to `end`), so a sequential consumer's next fetch comes
    /// from the page cache while this one is being answered. Point lookups (small reads) don't.
    fn prefetch_after(&self, position: u64, read_bytes: u64, end: u64) {
        if read_bytes < PREFETCH_READ_BYTES_MIN || position >= end {
            return;
        }
        let prefetch_end = (position + read_bytes * PREFETCH_READS).min(end);
        // Each byte is advised once: a consumer's next read only extends the window.
        let from = position.max(self.prefetched_to.get());
        if from < prefetch_end {
            self.log.prefetch(from, prefetch_end - from);
            self.prefetched_to.set(prefetch_end);
        }
    }

    /// Length of the prefix of `bytes` made of whole batches that pass their CRC and keep the
    /// offsets in order inside this segment. A first batch that fails is a `Corrupt` error; a
    /// later one ends the prefix, so the next read from there reports it. No batch with a bad
    /// CRC or out of order is ever returned.
    fn checked_batches_length(
        &self,
        bytes: &Bytes,
        start_position: u64,
        offset: Offset,
        dense: bool,
    ) -> Result<usize, StorageError> {
        let mut batches = crate::format::batch::BatchIter::new(bytes.clone(), u64::MAX);
        let mut length = 0;
        let mut previous_last = None;
        loop {
            let failure = match batches.next() {
                Some(Ok(batch)) => {
                    match self.check_served_offsets(batch.header(), offset, previous_last, dense) {
                        Ok(last) => {
                            previous_last = Some(last);
                            length += batch.size_bytes() as usize;
                            continue;
                        }
                        Err(reason) => reason,
                    }
                }
                Some(Err(crate::format::DecodeError::Truncated { .. })) | None => {
                    return Ok(length);
                }
                Some(Err(error)) => error.to_string(),
            };
            if length > 0 {
                return Ok(length);
            }
            return Err(StorageError::Corrupt {
                file: self.log_path.clone(),
                position: start_position,
                reason: failure,
            });
        }
    }

    /// A batch about to be served lies inside this segment's offsets and after `previous_last`
    /// (right after it when `dense`), or, the first one, holds `offset` (ends at or after it when
    /// not `dense`; starts the segment when `offset` lies before it, skipped by an earlier
    /// compacted segment's gap); returns its last offset. The offsets are outside the batch's CRC, so this is
    /// what catches a damaged header or a misdirected write.
    fn check_served_offsets(
        &self,
        header: &crate::format::BatchHeader,
        offset: Offset,
        previous_last: Option<u64>,
        dense: bool,
    ) -> Result<u64, String> {
        let base = u64::try_from(header.base_offset).ok();
        let last = u64::try_from(header.last_offset()).ok();
        let (Some(base), Some(last)) = (base, last) else {
            return Err(format!("negative batch offsets {}", header.base_offset));
        };
        let in_order = match previous_last {
            Some(previous) if dense => base == previous + 1,
            Some(previous) => base > previous,
            None => last >= offset.0 && (!dense || base <= offset.0.max(self.base_offset.0)),
        };
        if base < self.base_offset.0 || last < base || last >= self.next_offset.0 || !in_order {
            return Err(format!(
                "batch {base}..={last} is out of order in the segment {}..{} after {previous_last:?}",
                self.base_offset, self.next_offset
            ));
        }
        Ok(last)
    }

    /// The first record at or after `starting_offset` whose timestamp is `>= target`
    /// (Kafka's `LogSegment.findOffsetByTimestamp`).
    pub fn find_offset_by_timestamp(
        &self,
        target: TimestampMs,
        starting_offset: Offset,
    ) -> Result<Option<TimestampOffset>, StorageError> {
        let indexed = self.time_index.lookup(target);
        let start = self
            .offset_index
            .lookup(indexed.offset.max(starting_offset));
        let mut position = u64::from(start.position);
        loop {
            let Some(location) = self.scan_for(position, self.size_bytes, |header| {
                header.max_timestamp >= target.0 && header.last_offset() >= starting_offset.0 as i64
            })?
            else {
                return Ok(None);
            };
            let batch = self.read_batch(location)?;
            let base_timestamp = batch.header().base_timestamp;
            let records = batch
                .records()
                .map_err(|error| self.corrupt(location.position, error))?;
            let found = records.iter().find_map(|record| {
                let offset = batch.base_offset() + i64::from(record.offset_delta);
                let timestamp = if batch.header().attributes.is_log_append_time() {
                    batch.header().max_timestamp
                } else {
                    base_timestamp.saturating_add(record.timestamp_delta)
                };
                (timestamp >= target.0 && offset >= starting_offset.0 as i64).then_some(
                    TimestampOffset {
                        timestamp: TimestampMs(timestamp),
                        offset: Offset(offset as u64),
                    },
                )
            });
            if found.is_some() {
                return Ok(found);
            }
            // Only records below `starting_offset` reach the target in this batch: go on to the
            // next one, as Kafka's `FileRecords.searchForTimestamp` does.
            position = location.position + location.size_bytes;
        }
    }

    /// Calls `visit` with every batch of the segment in order, CRC-checked. Stops early when
    /// `visit` returns `false`. A batch that fails its checks is a `Corrupt` error: sealed data
    /// is never silently skipped.
    pub fn for_each_batch(
        &self,
        mut visit: impl FnMut(crate::format::Batch) -> bool,
    ) -> Result<(), StorageError> {
        let mut scanner = LogScanner::new(self.log.as_ref(), &self.log_path, 0, self.size_bytes);
        loop {
            match scanner.next_batch()? {
                ScanStep::Item { item, .. } => {
                    if !visit(item) {
                        return Ok(());
                    }
                }
                ScanStep::End => return Ok(()),
                ScanStep::Invalid { position, error } => return Err(self.corrupt(position, error)),
            }
        }
    }

    /// Calls `visit` with the header of every batch whose last offset is `from` or later, in
    /// order, from the offset index's entry for `from` (headers only: no CRC is checked, as a
    /// trusted load walks them). A header that does not frame is a `Corrupt` error.
    pub fn for_each_header_from(
        &self,
        from: Offset,
        mut visit: impl FnMut(&BatchHeader),
    ) -> Result<(), StorageError> {
        let start = self.offset_index.lookup(from);
        let mut scanner = LogScanner::new(
            self.log.as_ref(),
            &self.log_path,
            u64::from(start.position),
            self.size_bytes,
        );
        loop {
            match scanner.next_header()? {
                ScanStep::Item { item, .. } if item.last_offset() >= from.0 as i64 => visit(&item),
                ScanStep::Item { .. } => {}
                ScanStep::End => return Ok(()),
                ScanStep::Invalid { position, error } => return Err(self.corrupt(position, error)),
            }
        }
    }

    /// Reads and checks the one batch at `location`.
    pub fn read_batch(
        &self,
        location: BatchLocation,
    ) -> Result<crate::format::Batch, StorageError> {
        let bytes = self.read_batches(location, self.base_offset, 0, self.size_bytes, false)?;
        crate::format::Batch::decode(&bytes, u64::MAX)
            .map_err(|error| self.corrupt(location.position, error))
    }

    fn corrupt(&self, position: u64, error: crate::format::DecodeError) -> StorageError {
        StorageError::Corrupt {
            file: self.log_path.clone(),
            position,
            reason: error.to_string(),
        }
    }

    /// The largest timestamp in the segment: the last time index entry, or a larger one among the
    /// batches from that entry's position on (Kafka's `LogSegment.readLargestTimestamp`). After a
    /// truncation the time index alone can miss the batches appended since its last entry.
    fn read_largest_timestamp(&self) -> Result<Option<TimestampOffset>, StorageError> {
        let mut max = self.time_index.last_entry();
        let from = max.map_or(0, |entry| self.offset_index.lookup(entry.offset).position);
        let mut scanner = LogScanner::new(
            self.log.as_ref(),
            &self.log_path,
            u64::from(from),
            self.size_bytes,
        );
        loop {
            match scanner.next_header()? {
                ScanStep::Item { item, .. } => observe_timestamp(
                    &mut max,
                    TimestampMs(item.max_timestamp),
                    Offset(item.last_offset().max(0) as u64),
                ),
                ScanStep::End => return Ok(max),
                ScanStep::Invalid { position, error } => return Err(self.corrupt(position, error)),
            }
        }
    }

    /// Forces the final time index entry and trims both indexes to their entries, as a sealed
    /// segment's are: the files then reopen as trusted in this process.
    pub fn seal_indexes(&mut self) -> Result<(), StorageError> {
        if let Some(max) = self.max_timestamp_so_far {
            self.time_index
                .maybe_append(max.timestamp, max.offset, true);
        }
        self.offset_index.trim_to_valid_size()?;
        self.time_index.trim_to_valid_size()
    }

    /// Seals a segment whose indexes recovery rebuilt: [`Segment::seal_indexes`], then syncs
    /// everything.
    pub fn seal(&mut self) -> Result<(), StorageError> {
        self.seal_indexes()?;
        self.flush()
    }

    /// Makes the `.log` and both indexes durable.
    pub fn flush(&self) -> Result<(), StorageError> {
        self.log
            .sync_data()
            .map_err(|source| StorageError::io("fdatasync", &self.log_path, source))?;
        self.offset_index.flush()?;
        self.time_index.flush()
    }

    /// Makes the `.log` durable, not the indexes (which recovery can rebuild).
    pub fn flush_log(&self) -> Result<(), StorageError> {
        self.log
            .sync_data()
            .map_err(|source| StorageError::io("fdatasync", &self.log_path, source))
    }

    /// Makes the `.log`'s length durable as this process sees it: sets it again and syncs the
    /// file with its metadata. A seal cuts the space reserved past the batches; if that cut's
    /// sync failed, the device may still hold the longer file while the page cache shows the
    /// cut one.
    pub fn sync_length(&self) -> Result<(), StorageError> {
        self.log
            .set_length_bytes(self.size_bytes)
            .map_err(|source| StorageError::io("truncate", &self.log_path, source))?;
        self.log
            .sync_all()
            .map_err(|source| StorageError::io("fsync", &self.log_path, source))
    }

    /// Renames the segment's files to `.deleted` and removes them. The caller has already taken
    /// the segment out of the log, so no reader can reach it.
    pub fn delete(self, storage: &dyn Storage, dir: &Path) -> Result<(), StorageError> {
        let base_offset = self.base_offset;
        drop(self);
        delete_files(storage, dir, base_offset)
    }

    /// What the log keeps about the segment once its files and maps are closed (by dropping
    /// it). Only a sealed segment is released: its indexes are trimmed and its data synced, so
    /// reopening it trusts its files.
    pub fn released(&self) -> ReleasedSegment {
        let modified_ms = self.modified_ms().ok();
        ReleasedSegment {
            modified_ms,
            base_offset: self.base_offset,
            next_offset: self.next_offset,
            size_bytes: self.size_bytes,
            max_timestamp: self.max_timestamp_so_far,
            offset_index_entries: self.offset_index.entry_count(),
            time_index_entries: self.time_index.entry_count(),
        }
    }
}

/// Keeps the largest timestamp seen and the offset it was first seen at.
fn observe_timestamp(max: &mut Option<TimestampOffset>, timestamp: TimestampMs, offset: Offset) {
    if max.is_none_or(|max| timestamp > max.timestamp) {
        *max = Some(TimestampOffset { timestamp, offset });
    }
}

/// A sealed segment whose files are closed: what the log needs to know without opening it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasedSegment {
    pub base_offset: Offset,
    /// The `.log` file's last-modified time when it was released (sealed files do not change).
    pub modified_ms: Option<i64>,
    pub next_offset: Offset,
    pub size_bytes: u64,
    pub max_timestamp: Option<TimestampOffset>,
    pub offset_index_entries: usize,
    pub time_index_entries: usize,
}

/// The kinds of file a segment has.
const SEGMENT_FILE_KINDS: [SegmentFileKind; 3] = [
    SegmentFileKind::Log,
    SegmentFileKind::Index,
    SegmentFileKind::TimeIndex,
];

/// Renames a segment's files to `.deleted`, then removes them (the segment is closed).
pub fn delete_files(
    storage: &dyn Storage,
    dir: &Path,
    base_offset: Offset,
) -> Result<(), StorageError> {
    rename_files_to_deleted(storage, dir, base_offset)?;
    remove_deleted_files(storage, dir, base_offset)
}

/// Renames a closed segment's files to `.deleted`: no reader can open them by their live names
/// any more, and a crash leaves files that the next open removes.
pub fn rename_files_to_deleted(
    storage: &dyn Storage,
    dir: &Path,
    base_offset: Offset,
) -> Result<(), StorageError> {
    for kind in SEGMENT_FILE_KINDS {
        let live = SegmentFileName::live(base_offset, kind);
        let deleted = live.with_state(FileState::Deleted).path_in(dir);
        let live = live.path_in(dir);
        if storage.exists(&live) {
            storage
                .rename(&live, &deleted)
                .map_err(|source| StorageError::io("rename", &live, source))?;
        }
    }
    Ok(())
}

/// Unlinks a segment's `.deleted` files (a file already gone counts as unlinked).
pub fn remove_deleted_files(
    storage: &dyn Storage,
    dir: &Path,
    base_offset: Offset,
) -> Result<(), StorageError> {
    deleted_file_paths(dir, base_offset)
        .try_for_each(|deleted| remove_if_present(storage, &deleted))
}

/// Creates `dir` and its missing parents. A path on the way that exists but is not a directory is
/// reported as such (`NotADirectory`, naming it), not as the OS's `File exists`.
pub(crate) fn create_dir_all(storage: &dyn Storage, dir: &Path) -> Result<(), StorageError> {
    storage.create_dir_all(dir).map_err(|source| {
        let not_a_directory = dir
            .ancestors()
            .find(|path| storage.exists(path) && !storage.is_dir(path));
        match not_a_directory {
            Some(path) => StorageError::NotADirectory {
                path: path.to_owned(),
            },
            None => StorageError::io("create directory", dir, source),
        }
    })
}

/// Unlinks `path`; a file already gone counts as unlinked.
/// The base offsets of the live segments in `dir`, in order.
pub(crate) fn live_segment_bases(
    storage: &dyn Storage,
    dir: &Path,
) -> Result<Vec<Offset>, StorageError> {
    let names = storage
        .list_dir(dir)
        .map_err(|source| StorageError::io("list directory", dir, source))?;
    let mut bases: Vec<Offset> = names
        .iter()
        .filter_map(|name| SegmentFileName::parse(name))
        .filter(|name| name.kind == SegmentFileKind::Log && name.state == FileState::Live)
        .map(|name| name.base_offset)
        .collect();
    bases.sort_unstable();
    Ok(bases)
}

pub(crate) fn remove_if_present(storage: &dyn Storage, path: &Path) -> Result<(), StorageError> {
    match storage.remove_file(path) {
        Err(source) if source.kind() != std::io::ErrorKind::NotFound => {
            Err(StorageError::io("remove", path, source))
        }
        _ => Ok(()),
    }
}

/// The paths of a segment's files once renamed `.deleted`.
pub fn deleted_file_paths(dir: &Path, base_offset: Offset) -> impl Iterator<Item = PathBuf> {
    SEGMENT_FILE_KINDS.into_iter().map(move |kind| {
        SegmentFileName::live(base_offset, kind)
            .with_state(FileState::Deleted)
            .path_in(dir)
    })
}
