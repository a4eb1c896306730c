//! The active segment: the one segment of a log that takes appends. It is a [`Segment`] (read
//! through `Deref`) plus what only appending needs — the `O_DIRECT` writer, and the space
//! reserved (`fallocate`) or prewritten past the log end — so that a sealed segment holds none of
//! it. A roll ends appends ([`ActiveSegment::finish_appends`]) and keeps the segment
//! ([`ActiveSegment::into_sealed`]); a truncation into a sealed segment makes it active again
//! ([`ActiveSegment::from_sealed`]).

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use super::direct::DirectWriter;
use super::{AppendedBatch, IncomingAppend, SECTOR_BYTES, Segment, observe_timestamp};
use crate::config::LogConfig;
use crate::error::StorageError;
use crate::format::file_name::{SegmentFileKind, segment_path};
use crate::format::prewrite;
use crate::index::{OffsetIndex, TimeIndex};
use crate::io::{OpenMode, Storage, StorageFile};
use crate::types::{Offset, TimestampMs};

/// The first preallocation of an active `.log`; each next one doubles what the file holds, up to
/// `segment.bytes`, so a partition reserves at most as much again as it wrote.
const PREALLOCATE_BYTES_MIN: u64 = 64 * 1024;
/// Space past the log end is checked this much at a time (`check_prewritten`).
const CHECK_CHUNK_BYTES: u64 = 256 * 1024;

/// The segment that takes a log's appends.
#[derive(Debug)]
pub struct ActiveSegment {
    segment: Segment,
    /// Set when the log writes with `O_DIRECT` (`direct_writes`).
    direct: Option<Box<DirectWriter>>,
    /// How far the `.log` is preallocated (`fallocate`) or prewritten, `0` when it is not.
    preallocated_bytes: u64,
    /// The most to preallocate (`segment.bytes`), `0` for none.
    preallocate_max_bytes: u64,
    /// How far past an append's end to prewrite (`format/prewrite.rs`), `0` for none (the log
    /// decides: [`ActiveSegment::set_prewrite_bytes`]).
    prewrite_bytes: u64,
    /// Whether the space past the log end was prewritten (and is checked before it is cut).
    prewritten: bool,
}

impl Deref for ActiveSegment {
    type Target = Segment;

    fn deref(&self) -> &Segment {
        &self.segment
    }
}

impl ActiveSegment {
    /// Creates the three files of a new, empty segment, indexes preallocated. The caller syncs the
    /// directory so the new names are durable.
    pub fn create(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: Offset,
        config: &LogConfig,
        direct_writes: bool,
        now: TimestampMs,
    ) -> Result<ActiveSegment, StorageError> {
        let log_path = segment_path(dir, base_offset, SegmentFileKind::Log);
        let log = storage
            .open(&log_path, OpenMode::CreateOrOpen)
            .map_err(|source| StorageError::io("create", &log_path, source))
            .map(Arc::<dyn StorageFile>::from)?;
        log.set_length_bytes(0)
            .map_err(|source| StorageError::io("truncate", &log_path, source))?;
        let direct = match direct_writes {
            true => DirectWriter::open(storage, &log_path, log.as_ref(), 0)?,
            false => None,
        };
        let index_path = segment_path(dir, base_offset, SegmentFileKind::Index);
        let time_index_path = segment_path(dir, base_offset, SegmentFileKind::TimeIndex);
        let index_bytes = config.segment_index_bytes;
        let segment = Segment {
            base_offset,
            log_path,
            log,
            size_bytes: 0,
            next_offset: base_offset,
            offset_index: OffsetIndex::create(&index_path, base_offset, index_bytes)?,
            time_index: TimeIndex::create(&time_index_path, base_offset, index_bytes)?,
            bytes_since_last_index_entry: 0,
            max_timestamp_so_far: None,
            first_batch_timestamp: None,
            created_ms: now,
            prefetched_to: Default::default(),
            batch_bytes_hint: Default::default(),
            digests: Default::default(),
            recovery_data: Default::default(),
        };
        Ok(ActiveSegment {
            direct,
            preallocate_max_bytes: preallocate_max_bytes(config, direct_writes),
            ..ActiveSegment::from_sealed(segment)
        })
    }

    /// Makes a loaded or sealed segment the active one, appending nothing yet: call
    /// [`ActiveSegment::prepare_appends`] before the first append.
    pub fn from_sealed(segment: Segment) -> ActiveSegment {
        ActiveSegment {
            segment,
            direct: None,
            preallocated_bytes: 0,
            preallocate_max_bytes: 0,
            prewrite_bytes: 0,
            prewritten: false,
        }
    }

    /// Grows the indexes back to their preallocated size so appends can continue, and opens the
    /// `O_DIRECT` write side with `direct_writes`.
    pub fn prepare_appends(
        &mut self,
        storage: &dyn Storage,
        config: &LogConfig,
        direct_writes: bool,
    ) -> Result<(), StorageError> {
        self.preallocate_max_bytes = preallocate_max_bytes(config, direct_writes);
        let segment = &mut self.segment;
        if direct_writes && self.direct.is_none() {
            self.direct =
                DirectWriter::open(storage, &segment.log_path, segment.log.as_ref(), segment.size_bytes)?;
        }
        segment
            .offset_index
            .resize_for_append(config.segment_index_bytes)?;
        segment
            .time_index
            .resize_for_append(config.segment_index_bytes)
    }

    /// The segment as sealed, once [`ActiveSegment::finish_appends`] (or `seal`) ended its appends.
    pub fn into_sealed(self) -> Segment {
        self.segment
    }

    /// Whether the segment's appends go through a second, `O_DIRECT` descriptor.
    pub fn writes_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Whether an append must go to a new segment (Kafka's `LogSegment.shouldRoll`), given
    /// `pending_bytes` already queued for this segment's next write.
    pub fn should_roll(
        &self,
        config: &LogConfig,
        pending_bytes: u64,
        incoming: &IncomingAppend,
    ) -> bool {
        let size_bytes = self.segment.size_bytes + pending_bytes;
        if size_bytes == 0 {
            return false;
        }
        let full = size_bytes > config.segment_bytes.saturating_sub(incoming.size_bytes);
        let segment_ms = i64::try_from(config.segment_ms).unwrap_or(i64::MAX);
        let too_old = self.time_waited_for_roll(incoming) > segment_ms;
        let relative_overflow = incoming.last_offset.0.saturating_sub(self.segment.base_offset.0)
            > crate::limits::RELATIVE_OFFSET_MAX;
        let index_full = self.segment.offset_index.is_full() || self.segment.time_index.is_full();
        full || too_old || relative_overflow || index_full
    }

    /// Kafka's `timeWaitedForRoll`: the incoming timestamp minus the first batch's, or, when the
    /// segment has no usable timestamp, wall-clock time since the segment was created.
    fn time_waited_for_roll(&self, incoming: &IncomingAppend) -> i64 {
        match self.segment.first_batch_timestamp.filter(|first| first.0 >= 0) {
            Some(first) => incoming.max_timestamp.0.saturating_sub(first.0),
            None => incoming.now.0.saturating_sub(self.segment.created_ms.0),
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
        let position = self.segment.size_bytes;
        self.preallocate_for(position + bytes.len() as u64)?;
        // After the prewrite, which may itself have landed in the wrong place (fuzz finding F17).
        self.check_overwritten(position, position + bytes.len() as u64)?;
        if let Some(direct) = &mut self.direct {
            direct.check_last_block(&self.segment.log_path)?;
        }
        match &mut self.direct {
            Some(direct) => direct.append(bytes, position),
            None => self.segment.log.write_all_at(bytes, position),
        }
        .map_err(|source| StorageError::io("write", &self.segment.log_path, source))?;
        self.segment.size_bytes += bytes.len() as u64;
        self.segment.next_offset = last.last_offset.next();
        if self.segment.first_batch_timestamp.is_none() {
            self.segment.first_batch_timestamp = Some(first_batch_timestamp);
        }
        for batch in batches {
            observe_timestamp(
                &mut self.segment.max_timestamp_so_far,
                batch.max_timestamp,
                batch.last_offset,
            );
            let batch_position = position + batch.position_in_write;
            self.segment.maybe_index(
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
        let reason = if first.last_offset < self.segment.next_offset {
            format!(
                "the write's first batch ends at offset {}, below the segment's next offset {}",
                first.last_offset, self.segment.next_offset
            )
        } else if batches_end != write_bytes {
            format!("the write's batches end at byte {batches_end} of its {write_bytes} bytes")
        } else {
            return Ok(());
        };
        Err(StorageError::InvalidAppend {
            file: self.segment.log_path.clone(),
            reason,
        })
    }

    /// Reserves the `.log` ahead of an append ending at `end`, so that the write fills blocks
    /// the file already has, below its length: by prewriting when the log asks for it
    /// ([`ActiveSegment::set_prewrite_bytes`]), else by `fallocate` when `preallocate` is set.
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
        let from = self.preallocated_bytes.max(self.segment.size_bytes);
        let to = (from * 2)
            .max(PREALLOCATE_BYTES_MIN)
            .min(self.preallocate_max_bytes)
            .max(end);
        match self.segment.log.allocate(from, to - from) {
            Ok(true) => self.preallocated_bytes = to,
            Ok(false) => self.preallocate_max_bytes = 0,
            Err(error) if error.raw_os_error() == Some(libc::ENOSPC) => {}
            Err(source) => return Err(StorageError::io("fallocate", &self.segment.log_path, source)),
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
        match self.segment.log.write_all_at(&bytes, position) {
            Ok(()) => {
                self.preallocated_bytes = to;
                self.prewritten = true;
                Ok(())
            }
            // A full disk: the append itself may still fit. Cut what the prewrite left and
            // append without it, as a refused `fallocate` does.
            Err(error) if error.raw_os_error() == Some(libc::ENOSPC) => {
                self.prewrite_bytes = 0;
                let length = self.preallocated_bytes.max(self.segment.size_bytes);
                self.segment.log
                    .set_length_bytes(length)
                    .map_err(|source| StorageError::io("truncate", &self.segment.log_path, source))
            }
            Err(source) => Err(StorageError::io("prewrite", &self.segment.log_path, source)),
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
            .map_err(|source| StorageError::io("read", &self.segment.log_path, source))?;
        let remainder = prewrite::stamp_remainder_bytes(&bytes, position);
        let rest = bytes.get(remainder..).unwrap_or_default();
        let more_follows = check_to < self.preallocated_bytes;
        prewrite::check_prewritten(rest, position + remainder as u64, more_follows)
            .map(|_| ())
            .map_err(|misplaced| StorageError::Corrupt {
                file: self.segment.log_path.clone(),
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
        let found = crate::io::first_non_zero_byte(self.segment.log.as_ref(), from, to)
            .map_err(|source| StorageError::io("read", &self.segment.log_path, source))?;
        match found {
            None => Ok(()),
            Some(position) => Err(StorageError::Corrupt {
                file: self.segment.log_path.clone(),
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

    /// Removes every batch holding an offset `>= offset` (whole batches: a batch holding `offset`
    /// goes entirely). Returns the bytes removed.
    pub fn truncate_to(&mut self, offset: Offset) -> Result<u64, StorageError> {
        // Appends will write over the positions cut.
        self.segment.digests.get_mut().clear();
        let Some(location) = self.locate(offset, self.segment.size_bytes)? else {
            return Ok(0);
        };
        let cut_offset = location.base_offset.max(self.segment.base_offset);
        let removed = self.segment.size_bytes - location.position;
        self.segment.offset_index.truncate_to(cut_offset);
        self.segment.time_index.truncate_to(cut_offset);
        self.set_log_size(location.position)?;
        self.segment.next_offset = cut_offset;
        self.segment.max_timestamp_so_far = self.read_largest_timestamp()?;
        if self.segment.size_bytes == 0 {
            self.segment.first_batch_timestamp = None;
        }
        self.segment.bytes_since_last_index_entry = 0;
        Ok(removed)
    }

    fn set_log_size(&mut self, size_bytes: u64) -> Result<(), StorageError> {
        self.segment.log
            .set_length_bytes(size_bytes)
            .map_err(|source| StorageError::io("truncate", &self.segment.log_path, source))?;
        self.segment.size_bytes = size_bytes;
        self.preallocated_bytes = 0;
        self.prewritten = false;
        self.segment.prefetched_to.set(0);
        if let Some(direct) = &mut self.direct {
            direct.load_tail(self.segment.log.as_ref(), &self.segment.log_path, size_bytes)?;
        }
        Ok(())
    }

    /// Completes the thread's writes behind and returns the first failure of this segment's
    /// (`O_DIRECT` appends on io_uring, `direct.rs`): nothing they carried may be acknowledged
    /// before this said `Ok`.
    pub fn take_write_error(&self) -> Result<(), StorageError> {
        match &self.direct {
            Some(direct) => direct
                .take_write_error()
                .map_err(|source| StorageError::io("write", &self.segment.log_path, source)),
            None => Ok(()),
        }
    }

    /// A mark after the `.log`'s writes behind so far; `None` when none are left in flight.
    pub fn write_mark(&self) -> Option<crate::io::WriteMark> {
        self.direct.as_ref().and_then(|direct| direct.write_mark())
    }

    /// Seals the segment when it stops being active: [`ActiveSegment::finish_appends`], then
    /// syncs everything (Kafka's `onBecomeInactiveSegment` + flush).
    pub fn seal(&mut self) -> Result<(), StorageError> {
        self.finish_appends()?;
        self.segment.flush()
    }

    /// Ends appends without syncing: ends direct writes and preallocation, cutting the `.log`
    /// back to the log's bytes, then [`Segment::seal_indexes`]; the files then reopen as trusted
    /// in this process. [`ActiveSegment::into_sealed`] follows.
    pub fn finish_appends(&mut self) -> Result<(), StorageError> {
        self.check_reserve()?;
        let direct = self.direct.take();
        if let Some(direct) = &direct {
            direct
                .take_write_error()
                .map_err(|source| StorageError::io("write", &self.segment.log_path, source))?;
        }
        let padded = direct.is_some() || self.preallocated_bytes > self.segment.size_bytes;
        self.preallocated_bytes = 0;
        self.preallocate_max_bytes = 0;
        self.prewrite_bytes = 0;
        self.prewritten = false;
        if padded {
            self.segment.log
                .set_length_bytes(self.segment.size_bytes)
                .map_err(|source| StorageError::io("truncate", &self.segment.log_path, source))?;
        }
        self.segment.seal_indexes()
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
            .read_to_vec(prewrite::STAMP_BYTES, self.segment.size_bytes)
            .map_err(|source| StorageError::io("read", &self.segment.log_path, source))?;
        let remainder = prewrite::stamp_remainder_bytes(&head, self.segment.size_bytes) as u64;
        let file_end = self
            .log
            .length_bytes()
            .map_err(|source| StorageError::io("stat", &self.segment.log_path, source))?;
        self.check_prewritten(
            self.segment.size_bytes + remainder,
            self.preallocated_bytes.max(file_end),
        )
    }

    /// Before the space past the log end of a segment written `O_DIRECT` or preallocated is cut:
    /// the last block's padding and the reserved blocks hold zeros (the reservation's unwritten
    /// extents are skipped, `StorageFile::next_data`), so the cut removes nothing. A write the
    /// device put there instead of where it was sent (R14) would be cut with them, leaving at its
    /// own place a hole that reads as a torn tail; it is reported instead, and nothing is cut.
    fn check_padding_and_reservation(&self) -> Result<(), StorageError> {
        if self.direct.is_none() && self.preallocated_bytes <= self.segment.size_bytes {
            return Ok(());
        }
        let file_end = self
            .log
            .length_bytes()
            .map_err(|source| StorageError::io("stat", &self.segment.log_path, source))?;
        self.refuse_data_past_the_end(self.segment.size_bytes, file_end, "padding or reservation")
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
                .map_err(|source| StorageError::io("read", &self.segment.log_path, source))?;
            let more_follows = bytes.len() as u64 == length && position + length < to;
            let checked = prewrite::check_prewritten(&bytes, position, more_follows).map_err(
                |misplaced| StorageError::Corrupt {
                    file: self.segment.log_path.clone(),
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
}

/// `segment.bytes` when the active `.log` is preallocated (`preallocate`), else `0`.
/// `preallocate`, and every `O_DIRECT` writer: an `O_DIRECT` write that would grow the file (or
/// fill a hole) cannot be issued without blocking, so io_uring hands it to a worker thread, while
/// one into reserved blocks below the file's length goes to the device at once.
fn preallocate_max_bytes(config: &LogConfig, direct_writes: bool) -> u64 {
    if config.preallocate || direct_writes {
        config.segment_bytes
    } else {
        0
    }
}
