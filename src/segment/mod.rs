//! One segment: a `.log` of batches plus its sparse `.index` and `.timeindex`, named by the base
//! offset (FORMAT.md § Segments; Kafka's `LogSegment`).
//!
//! The segment decides where bytes go and which index entries to add; its `.log` is read and
//! written through the [`Storage`] seam. Only the last segment of a log is appended to; every
//! other segment is sealed: its indexes trimmed to their entries and its data synced.

mod direct;
mod lookup;
pub mod recovery;
pub mod scan;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::config::LogConfig;
use crate::error::StorageError;
use crate::format::file_name::{FileState, SegmentFileKind, SegmentFileName, segment_path};
use crate::format::prewrite;
use crate::format::{BatchHeader, BatchPrefix};
use crate::index::offset_index::OffsetPosition;
use crate::index::time_index::TimestampOffset;
use crate::index::{OffsetIndex, TimeIndex};
use crate::io::{OpenMode, Storage, StorageFile};
use crate::limits::BATCH_HEADER_BYTES;
use crate::types::{Offset, TimestampMs};
use direct::DirectWriter;
pub use lookup::DigestBudget;
use lookup::{BatchDigest, BatchDigests, DigestedRecord};
use scan::{LogScanner, ScanStep};

/// Reads at least this large are taken as a sequential consumer's and prefetch what follows.
const PREFETCH_READ_BYTES_MIN: u64 = 256 * 1024;
/// How many reads of the same size are prefetched after one.
const PREFETCH_READS: u64 = 4;
/// The first preallocation of an active `.log`; each next one doubles what the file holds, up to
/// `segment.bytes`, so a partition reserves at most as much again as it wrote.
const PREALLOCATE_BYTES_MIN: u64 = 64 * 1024;
/// The unit a crash keeps or loses whole, and where a misdirected write lands.
const SECTOR_BYTES: u64 = 512;

/// Space past the log end is checked this much at a time (`check_prewritten`).
const CHECK_CHUNK_BYTES: u64 = 256 * 1024;
/// A lookup reads at most this much between two index entries at once (Kafka's 4 KiB
/// `index.interval.bytes` keeps entries a batch or a few kilobytes apart).
const LOOKUP_GAP_BYTES_MAX: u64 = 64 * 1024;

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

/// A segment's files and the state derived from them.
#[derive(Debug)]
pub struct Segment {
    base_offset: Offset,
    log_path: PathBuf,
    /// Shared with a shard's syncer, which may still sync it after the segment is gone.
    log: Arc<dyn StorageFile>,
    /// Set while the segment is active and the log writes with `O_DIRECT` (`direct_writes`).
    direct: Option<Box<DirectWriter>>,
    size_bytes: u64,
    /// While active: how far the `.log` is preallocated (`fallocate`), `0` when it is not (a
    /// sealed segment, `preallocate=false`, or a file system without it).
    preallocated_bytes: u64,
    /// While active: the most to preallocate (`segment.bytes`), `0` for none.
    preallocate_max_bytes: u64,
    /// While active: how far past an append's end to prewrite (`format/prewrite.rs`), `0` for none
    /// (the log decides: [`Segment::set_prewrite_bytes`]).
    prewrite_bytes: u64,
    /// Whether the space past the log end was prewritten (and is checked before it is cut).
    prewritten: bool,
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
}

impl Segment {
    /// Creates the three files of a new, empty segment, indexes preallocated. The caller syncs the
    /// directory so the new names are durable.
    pub fn create(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: Offset,
        config: &LogConfig,
        now: TimestampMs,
    ) -> Result<Segment, StorageError> {
        let log_path = segment_path(dir, base_offset, SegmentFileKind::Log);
        let log = storage
            .open(&log_path, OpenMode::CreateOrOpen)
            .map_err(|source| StorageError::io("create", &log_path, source))
            .map(Arc::<dyn StorageFile>::from)?;
        log.set_length_bytes(0)
            .map_err(|source| StorageError::io("truncate", &log_path, source))?;
        let direct = match config.direct_writes {
            true => DirectWriter::open(storage, &log_path, log.as_ref(), 0)?,
            false => None,
        };
        let index_path = segment_path(dir, base_offset, SegmentFileKind::Index);
        let time_index_path = segment_path(dir, base_offset, SegmentFileKind::TimeIndex);
        Ok(Segment {
            base_offset,
            log_path,
            log,
            direct,
            size_bytes: 0,
            preallocated_bytes: 0,
            preallocate_max_bytes: preallocate_max_bytes(config),
            prewrite_bytes: 0,
            prewritten: false,
            next_offset: base_offset,
            offset_index: OffsetIndex::create(
                &index_path,
                base_offset,
                config.segment_index_bytes,
            )?,
            time_index: TimeIndex::create(
                &time_index_path,
                base_offset,
                config.segment_index_bytes,
            )?,
            bytes_since_last_index_entry: 0,
            max_timestamp_so_far: None,
            first_batch_timestamp: None,
            created_ms: now,
            prefetched_to: Default::default(),
            batch_bytes_hint: Default::default(),
            digests: Default::default(),
        })
    }

    pub fn base_offset(&self) -> Offset {
        self.base_offset
    }

    /// One past the last offset in the segment (`base_offset` when empty).
    pub fn next_offset(&self) -> Offset {
        self.next_offset
    }

    /// Whether the segment's appends go through a second, `O_DIRECT` descriptor.
    pub fn writes_direct(&self) -> bool {
        self.direct.is_some()
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

    /// Whether an append must go to a new segment (Kafka's `LogSegment.shouldRoll`), given
    /// `pending_bytes` already queued for this segment's next write.
    pub fn should_roll(
        &self,
        config: &LogConfig,
        pending_bytes: u64,
        incoming: &IncomingAppend,
    ) -> bool {
        let size_bytes = self.size_bytes + pending_bytes;
        if size_bytes == 0 {
            return false;
        }
        let full = size_bytes > config.segment_bytes.saturating_sub(incoming.size_bytes);
        let segment_ms = i64::try_from(config.segment_ms).unwrap_or(i64::MAX);
        let too_old = self.time_waited_for_roll(incoming) > segment_ms;
        let relative_overflow = incoming.last_offset.0.saturating_sub(self.base_offset.0)
            > crate::limits::RELATIVE_OFFSET_MAX;
        let index_full = self.offset_index.is_full() || self.time_index.is_full();
        full || too_old || relative_overflow || index_full
    }

    /// Kafka's `timeWaitedForRoll`: the incoming timestamp minus the first batch's, or, when the
    /// segment has no usable timestamp, wall-clock time since the segment was created.
    fn time_waited_for_roll(&self, incoming: &IncomingAppend) -> i64 {
        match self.first_batch_timestamp.filter(|first| first.0 >= 0) {
            Some(first) => incoming.max_timestamp.0.saturating_sub(first.0),
            None => incoming.now.0.saturating_sub(self.created_ms.0),
        }
    }

    /// Writes `bytes` (whole batches, one or more appends) at the end of the `.log` with one
    /// positioned write, then applies Kafka's index rule batch by batch, as recovery does: an
    /// entry `(last offset, position)` for a batch when more than `index_interval_bytes` were
    /// written since the last entry.
    pub fn append(
        &mut self,
        bytes: &[u8],
        batches: &[AppendedBatch],
        first_batch_timestamp: TimestampMs,
        index_interval_bytes: u64,
    ) -> Result<(), StorageError> {
        let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
            return Ok(());
        };
        self.check_append(bytes.len() as u64, first, last)?;
        let position = self.size_bytes;
        self.preallocate_for(position + bytes.len() as u64)?;
        // After the prewrite, which may itself have landed in the wrong place (fuzz finding F17).
        self.check_overwritten(position, position + bytes.len() as u64)?;
        if let Some(direct) = &mut self.direct {
            direct.check_last_block(&self.log_path)?;
        }
        match &mut self.direct {
            Some(direct) => direct.append(bytes, position),
            None => self.log.write_all_at(bytes, position),
        }
        .map_err(|source| StorageError::io("write", &self.log_path, source))?;
        self.size_bytes += bytes.len() as u64;
        self.next_offset = last.last_offset.next();
        if self.first_batch_timestamp.is_none() {
            self.first_batch_timestamp = Some(first_batch_timestamp);
        }
        for batch in batches {
            observe_timestamp(
                &mut self.max_timestamp_so_far,
                batch.max_timestamp,
                batch.last_offset,
            );
            let batch_position = position + batch.position_in_write;
            self.maybe_index(
                batch.last_offset,
                batch_position,
                batch.size_bytes,
                index_interval_bytes,
            );
        }
        Ok(())
    }

    /// The log hands whole batches whose offsets come after the segment's and whose extents end
    /// where the write does: anything else is refused (`InvalidAppend`) before a byte is written,
    /// since it would leave offsets going backwards or a batch cut short in the file.
    fn check_append(
        &self,
        write_bytes: u64,
        first: &AppendedBatch,
        last: &AppendedBatch,
    ) -> Result<(), StorageError> {
        let batches_end = last.position_in_write.saturating_add(last.size_bytes);
        let reason = if first.last_offset < self.next_offset {
            format!(
                "the write's first batch ends at offset {}, below the segment's next offset {}",
                first.last_offset, self.next_offset
            )
        } else if batches_end != write_bytes {
            format!("the write's batches end at byte {batches_end} of its {write_bytes} bytes")
        } else {
            return Ok(());
        };
        Err(StorageError::InvalidAppend {
            file: self.log_path.clone(),
            reason,
        })
    }

    /// Reserves the `.log` ahead of an append ending at `end`, so that the write fills blocks
    /// the file already has, below its length: by prewriting when the log asks for it
    /// ([`Segment::set_prewrite_bytes`]), else by `fallocate` when `preallocate` is set.
    fn preallocate_for(&mut self, end: u64) -> Result<(), StorageError> {
        if end <= self.preallocated_bytes {
            return Ok(());
        }
        if self.prewrite_bytes > 0 && self.direct.is_none() {
            return self.prewrite_for(end);
        }
        if self.preallocate_max_bytes == 0 {
            return Ok(());
        }
        let from = self.preallocated_bytes.max(self.size_bytes);
        let to = (from * 2)
            .max(PREALLOCATE_BYTES_MIN)
            .min(self.preallocate_max_bytes)
            .max(end);
        match self.log.allocate(from, to - from) {
            Ok(true) => self.preallocated_bytes = to,
            Ok(false) => self.preallocate_max_bytes = 0,
            Err(error) if error.raw_os_error() == Some(libc::ENOSPC) => {}
            Err(source) => return Err(StorageError::io("fallocate", &self.log_path, source)),
        }
        Ok(())
    }

    /// Prewrites the space from `end` to `prewrite_bytes` past it (stamped zeros,
    /// `format/prewrite.rs`). `fallocate` leaves unwritten extents, whose conversion each later
    /// `fdatasync` still makes durable (a journal commit, or metadata written in place); blocks
    /// written once are only rewritten, so a sync of an append into them flushes its data alone.
    /// The sync that first covers a prewrite pays for its allocation, once per prewrite.
    fn prewrite_for(&mut self, end: u64) -> Result<(), StorageError> {
        let position = self.preallocated_bytes.max(end);
        let to = end + self.prewrite_bytes;
        self.check_prewritten(position, to)?;
        let bytes = prewrite::prewrite_bytes(position, (to - position) as usize);
        match self.log.write_all_at(&bytes, position) {
            Ok(()) => {
                self.preallocated_bytes = to;
                self.prewritten = true;
                Ok(())
            }
            // A full disk: the append itself may still fit. Cut what the prewrite left and
            // append without it, as a refused `fallocate` does.
            Err(error) if error.raw_os_error() == Some(libc::ENOSPC) => {
                self.prewrite_bytes = 0;
                let length = self.preallocated_bytes.max(self.size_bytes);
                self.log
                    .set_length_bytes(length)
                    .map_err(|source| StorageError::io("truncate", &self.log_path, source))
            }
            Err(source) => Err(StorageError::io("prewrite", &self.log_path, source)),
        }
    }

    /// Before an append overwrites `position..end`: the part of it in prewritten space still
    /// holds only prewritten space (a stamp the append cuts checked whole). A write the device put
    /// there instead of where it was sent (a misdirected write, R14), once overwritten in part,
    /// would leave nothing for recovery to find, and the records it held would read as a torn
    /// tail (fuzz finding F8). One read of the append's size and 64 bytes, in logs synced in
    /// small steps only.
    fn check_overwritten(&self, position: u64, end: u64) -> Result<(), StorageError> {
        if position >= self.preallocated_bytes {
            return Ok(());
        }
        if !self.prewritten {
            return self.check_reserved(position, end.min(self.preallocated_bytes));
        }
        // Two stamps' worth past the end: a non-zero byte within the first is then checked
        // whole, not passed as the start of a stamp cut off by the read (fuzz finding F16).
        let check_to = (end + 2 * prewrite::STAMP_BYTES as u64).min(self.preallocated_bytes);
        let bytes = self
            .log
            .read_to_vec((check_to - position) as usize, position)
            .map_err(|source| StorageError::io("read", &self.log_path, source))?;
        let remainder = prewrite::stamp_remainder_bytes(&bytes, position);
        let rest = bytes.get(remainder..).unwrap_or_default();
        let more_follows = check_to < self.preallocated_bytes;
        prewrite::check_prewritten(rest, position + remainder as u64, more_follows)
            .map(|_| ())
            .map_err(|misplaced| StorageError::Corrupt {
                file: self.log_path.clone(),
                position: misplaced.position(),
                reason: misplaced.describe(),
            })
    }

    /// Before a page-cache append overwrites `position..end` of a preallocated `.log`: the space
    /// holds zeros (unwritten extents read as zeros without touching the device), and so does
    /// the rest of `end`'s sector. A write the device put there instead of where it was sent
    /// (R14) would otherwise be overwritten, and the records it carried would read as a torn
    /// tail after a crash. Such a write starts at a sector boundary with a batch header, which
    /// has a non-zero byte in its first 17, so covering its start shows it.
    fn check_reserved(&self, position: u64, end: u64) -> Result<(), StorageError> {
        if self.direct.is_some() || position >= end {
            return Ok(());
        }
        self.refuse_data_past_the_end(position, end.next_multiple_of(SECTOR_BYTES), "reservation")
    }

    /// `from..to`, past the log end, holds only zeros (holes and unwritten extents skipped), or
    /// the first other byte is reported: a misdirected write (R14) in space only `held` held.
    fn refuse_data_past_the_end(&self, from: u64, to: u64, held: &str) -> Result<(), StorageError> {
        let found = crate::io::first_non_zero_byte(self.log.as_ref(), from, to)
            .map_err(|source| StorageError::io("read", &self.log_path, source))?;
        match found {
            None => Ok(()),
            Some(position) => Err(StorageError::Corrupt {
                file: self.log_path.clone(),
                position,
                reason: format!(
                    "data past the log end, in space only the {held} held (a misdirected write?)"
                ),
            }),
        }
    }

    /// Notes that a sync covered every byte appended so far (`direct.rs`, the check of the last
    /// block before the next append).
    pub fn note_synced(&mut self) {
        if let Some(direct) = &mut self.direct {
            direct.note_synced();
        }
    }

    /// Sets how far ahead of its appends the active `.log` is prewritten (`0`: not at all;
    /// space already prewritten stays). Ignored with direct writes, which pad their own tail.
    pub fn set_prewrite_bytes(&mut self, bytes: u64) {
        self.prewrite_bytes = bytes;
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

    /// `read_from`, with where in the `.log` the bytes served start.
    fn read_from_position(
        &self,
        offset: Offset,
        max_bytes: u64,
        dense: bool,
    ) -> Result<Option<(u64, Bytes)>, StorageError> {
        let (entry, next_entry) = self.offset_index.lookup_with_next(offset);
        let end = self.size_bytes;
        let batch_bytes = max_bytes.max(self.batch_bytes_hint.get());
        if let Some(served) =
            self.read_indexed_batch(offset, entry, next_entry, batch_bytes, max_bytes, dense)?
        {
            return Ok(Some(served));
        }
        let start = u64::from(entry.position);
        // Through the next entry's batch, which ends at or after `offset`: the hops in one read
        // (a sparser index than Kafka's 4 KiB interval is scanned a window at a time).
        let header_window = batch_bytes.max(scan::LOOKUP_WINDOW_BYTES as u64);
        let first_window = next_entry.map_or(scan::LOOKUP_WINDOW_BYTES as u64, |next| {
            (u64::from(next.position).saturating_sub(start))
                .min(LOOKUP_GAP_BYTES_MAX)
                .saturating_add(header_window)
        });
        let mut scanner = LogScanner::with_window(
            self.log.as_ref(),
            &self.log_path,
            start,
            end,
            usize::try_from(first_window).unwrap_or(usize::MAX),
        )
        .then_window(
            usize::try_from(batch_bytes)
                .map_or(usize::MAX, |bytes| bytes.max(scan::LOOKUP_WINDOW_BYTES)),
        );
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

    /// The batch holding `offset` read where the index places it, in one read of `batch_bytes`:
    /// at `entry` when it is keyed by `offset` itself (its batch ends there), else at
    /// `next_entry` when the two entries are one batch apart (every batch indexed, as when
    /// batches are larger than `index.interval.bytes`): the batch after `entry`'s. `None` when
    /// neither applies or the batch read there does not hold `offset` (its header, checked
    /// before anything is served, says so): the caller scans from `entry`.
    fn read_indexed_batch(
        &self,
        offset: Offset,
        entry: OffsetPosition,
        next_entry: Option<OffsetPosition>,
        batch_bytes: u64,
        max_bytes: u64,
        dense: bool,
    ) -> Result<Option<(u64, Bytes)>, StorageError> {
        let end = self.size_bytes;
        // Batches of about the size of the last one served: the gap holds one batch, not two.
        let hint = self.batch_bytes_hint.get();
        let one_batch_apart = |next: &OffsetPosition| {
            next.position > entry.position
                && u64::from(next.position - entry.position) <= hint + hint / 2
        };
        let position = match next_entry {
            _ if entry.offset == offset => u64::from(entry.position),
            Some(next) if one_batch_apart(&next) => u64::from(next.position),
            _ => return Ok(None),
        };
        let length = batch_bytes.min(end.saturating_sub(position));
        if length < BATCH_HEADER_BYTES as u64 {
            return Ok(None);
        }
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

    /// Removes every batch holding an offset `>= offset` (whole batches: a batch holding `offset`
    /// goes entirely). Returns the bytes removed.
    pub fn truncate_to(&mut self, offset: Offset) -> Result<u64, StorageError> {
        // Appends will write over the positions cut.
        self.digests.get_mut().clear();
        let Some(location) = self.locate(offset, self.size_bytes)? else {
            return Ok(0);
        };
        let cut_offset = location.base_offset.max(self.base_offset);
        let removed = self.size_bytes - location.position;
        self.offset_index.truncate_to(cut_offset);
        self.time_index.truncate_to(cut_offset);
        self.set_log_size(location.position)?;
        self.next_offset = cut_offset;
        self.max_timestamp_so_far = self.read_largest_timestamp()?;
        if self.size_bytes == 0 {
            self.first_batch_timestamp = None;
        }
        self.bytes_since_last_index_entry = 0;
        Ok(removed)
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

    fn set_log_size(&mut self, size_bytes: u64) -> Result<(), StorageError> {
        self.log
            .set_length_bytes(size_bytes)
            .map_err(|source| StorageError::io("truncate", &self.log_path, source))?;
        self.size_bytes = size_bytes;
        self.preallocated_bytes = 0;
        self.prewritten = false;
        self.prefetched_to.set(0);
        if let Some(direct) = &mut self.direct {
            direct.load_tail(self.log.as_ref(), &self.log_path, size_bytes)?;
        }
        Ok(())
    }

    /// Makes the `.log` and both indexes durable.
    pub fn flush(&self) -> Result<(), StorageError> {
        self.log
            .sync_data()
            .map_err(|source| StorageError::io("fdatasync", &self.log_path, source))?;
        self.offset_index.flush()?;
        self.time_index.flush()
    }

    /// Completes the thread's writes behind and returns the first failure of this segment's
    /// (`O_DIRECT` appends on io_uring, `direct.rs`): nothing they carried may be acknowledged
    /// before this said `Ok`.
    pub fn take_write_error(&self) -> Result<(), StorageError> {
        match &self.direct {
            Some(direct) => direct
                .take_write_error()
                .map_err(|source| StorageError::io("write", &self.log_path, source)),
            None => Ok(()),
        }
    }

    /// A mark after the `.log`'s writes behind so far; `None` when none are left in flight.
    pub fn write_mark(&self) -> Option<crate::io::WriteMark> {
        self.direct.as_ref().and_then(|direct| direct.write_mark())
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

    /// Seals the segment when it stops being active: forces the final time index entry, trims both
    /// indexes to their entries and syncs everything (Kafka's `onBecomeInactiveSegment` + flush).
    pub fn seal(&mut self) -> Result<(), StorageError> {
        self.trim_indexes()?;
        self.flush()
    }

    /// Forces the final time index entry and trims both indexes to their entries, without
    /// syncing: the files then reopen as trusted in this process. Ends direct writes and
    /// preallocation, cutting the `.log` back to the log's bytes.
    pub fn trim_indexes(&mut self) -> Result<(), StorageError> {
        self.check_reserve()?;
        let direct = self.direct.take();
        if let Some(direct) = &direct {
            direct
                .take_write_error()
                .map_err(|source| StorageError::io("write", &self.log_path, source))?;
        }
        let padded = direct.is_some() || self.preallocated_bytes > self.size_bytes;
        self.preallocated_bytes = 0;
        self.preallocate_max_bytes = 0;
        self.prewrite_bytes = 0;
        self.prewritten = false;
        if padded {
            self.log
                .set_length_bytes(self.size_bytes)
                .map_err(|source| StorageError::io("truncate", &self.log_path, source))?;
        }
        if let Some(max) = self.max_timestamp_so_far {
            self.time_index
                .maybe_append(max.timestamp, max.offset, true);
        }
        self.offset_index.trim_to_valid_size()?;
        self.time_index.trim_to_valid_size()
    }

    /// Before the space reserved past the log end is cut: it must hold only prewritten space
    /// (zeros, or stamps at their own positions, the first perhaps cut by the last append), and
    /// so must anything past it up to the file's end, which only a write the device put in the
    /// wrong place can have grown (fuzz finding F12).
    fn check_reserve(&self) -> Result<(), StorageError> {
        if !self.prewritten {
            return self.check_padding_and_reservation();
        }
        let head = self
            .log
            .read_to_vec(prewrite::STAMP_BYTES, self.size_bytes)
            .map_err(|source| StorageError::io("read", &self.log_path, source))?;
        let remainder = prewrite::stamp_remainder_bytes(&head, self.size_bytes) as u64;
        let file_end = self
            .log
            .length_bytes()
            .map_err(|source| StorageError::io("stat", &self.log_path, source))?;
        self.check_prewritten(
            self.size_bytes + remainder,
            self.preallocated_bytes.max(file_end),
        )
    }

    /// Before the space past the log end of a segment written `O_DIRECT` or preallocated is cut:
    /// the last block's padding and the reserved blocks hold zeros (the reservation's unwritten
    /// extents are skipped, `StorageFile::next_data`), so the cut removes nothing. A write the
    /// device put there instead of where it was sent (R14) would be cut with them, leaving at its
    /// own place a hole that reads as a torn tail; it is reported instead, and nothing is cut.
    fn check_padding_and_reservation(&self) -> Result<(), StorageError> {
        if self.direct.is_none() && self.preallocated_bytes <= self.size_bytes {
            return Ok(());
        }
        let file_end = self
            .log
            .length_bytes()
            .map_err(|source| StorageError::io("stat", &self.log_path, source))?;
        self.refuse_data_past_the_end(self.size_bytes, file_end, "padding or reservation")
    }

    /// Past the log end, `from..to` holds prewritten space or nothing (past the end of the
    /// file). A write the device put there instead of where it was sent (a misdirected write,
    /// R14) left a hole in the log; prewriting over it, or cutting it, would make that hole look
    /// like a torn tail. It is reported instead, and nothing is written or cut.
    fn check_prewritten(&self, from: u64, to: u64) -> Result<(), StorageError> {
        let mut position = from;
        while position < to {
            let length = (to - position).min(CHECK_CHUNK_BYTES);
            let bytes = self
                .log
                .read_to_vec(length as usize, position)
                .map_err(|source| StorageError::io("read", &self.log_path, source))?;
            let more_follows = bytes.len() as u64 == length && position + length < to;
            let checked = prewrite::check_prewritten(&bytes, position, more_follows).map_err(
                |misplaced| StorageError::Corrupt {
                    file: self.log_path.clone(),
                    position: misplaced.position(),
                    reason: misplaced.describe(),
                },
            )?;
            if !more_follows {
                return Ok(());
            }
            position += checked as u64;
        }
        Ok(())
    }

    /// True when both indexes hold exactly their entries, as sealing leaves them.
    pub fn is_sealed(&self) -> bool {
        self.offset_index.is_trimmed() && self.time_index.is_trimmed()
    }

    /// Grows the indexes back to their preallocated size so appends can continue, and opens the
    /// direct write side when the configuration asks for it.
    pub fn reopen_for_append(
        &mut self,
        storage: &dyn Storage,
        config: &LogConfig,
    ) -> Result<(), StorageError> {
        self.preallocate_max_bytes = preallocate_max_bytes(config);
        if config.direct_writes && self.direct.is_none() {
            self.direct =
                DirectWriter::open(storage, &self.log_path, self.log.as_ref(), self.size_bytes)?;
        }
        self.offset_index
            .resize_for_append(config.segment_index_bytes)?;
        self.time_index
            .resize_for_append(config.segment_index_bytes)
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

/// `segment.bytes` when the active `.log` is preallocated (`preallocate`), else `0`.
/// `preallocate`, and every `O_DIRECT` writer: an `O_DIRECT` write that would grow the file (or
/// fill a hole) cannot be issued without blocking, so io_uring hands it to a worker thread, while
/// one into reserved blocks below the file's length goes to the device at once.
fn preallocate_max_bytes(config: &LogConfig) -> u64 {
    if config.preallocate || config.direct_writes {
        config.segment_bytes
    } else {
        0
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
