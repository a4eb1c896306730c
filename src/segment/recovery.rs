//! Opening an existing segment: trusting its indexes after a clean shutdown, or re-validating
//! every batch and rebuilding the indexes after an unclean one (Kafka's `LogSegment.recover`).
//!
//! Recovery reads each batch in order and checks its framing, magic, CRC-32C and offsets (the
//! base offset never goes below the previous batch's next offset nor the segment's base offset,
//! and equals it in a log that is never compacted). The first batch whose framing or CRC fails
//! ends the valid data: the `.log` is truncated there (a torn tail). A batch that passes its CRC
//! but breaks the offsets is damage, never a torn write: recovery refuses it (`Corrupt`) — unless
//! it reaches past its first sector and that sector holds only what a lost write leaves there
//! (zeros or prewritten space), so the base offset read is not the one written. Index entries
//! are rebuilt with the same `index.interval.bytes` rule the append path uses.
//!
//! In the segment holding the recovery point (every byte below it synced) recovery resumes at
//! the recovery point's batch boundary (`LoadMode::RecoverFrom`): found from the offset index's
//! last entry below it and the batch headers after that entry, whose index entries are kept.

use std::path::{Path, PathBuf};

use crate::config::LogConfig;
use crate::error::StorageError;
use crate::format::batch::field;
use crate::format::file_name::{
    FileState, SegmentFileKind, SegmentFileName, parse_partition_dir_name,
};
use crate::format::prewrite::{self, Misplaced, STAMP_BYTES};
use crate::format::{Batch, BatchHeader, BatchPrefix, DecodeError};
use crate::index::time_index::TimestampOffset;
use crate::index::{OffsetIndex, TimeIndex};
use crate::io::{DataRanges, OpenMode, Storage};
use crate::limits::RELATIVE_OFFSET_MAX;
use crate::limits::{BATCH_HEADER_BYTES, BATCH_MAGIC_V2, LOG_OVERHEAD_BYTES};
use crate::types::{Offset, TimestampMs};

use super::scan::{LogScanner, ScanStep};
use super::{SECTOR_BYTES, Segment, observe_timestamp};

/// The smallest record (a length, attributes, two deltas, null key and value, no headers).
const RECORD_BYTES_MIN: u64 = 7;

/// How much of a segment's invalid tail is read at a time when looking for a batch in it.
const SCAN_CHUNK_BYTES: usize = 1 << 20;

/// What recovering one segment found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentRecovery {
    /// Bytes cut from the end of the `.log`.
    pub bytes_truncated: u64,
    /// Where the valid data ended, and why, when something was cut.
    pub truncated_at: Option<(u64, String)>,
}

/// How an existing segment is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadMode {
    /// Trust the `.log` and check the indexes; rebuild indexes that fail their check.
    Trusted,
    /// Re-validate every batch and rebuild both indexes.
    Recover,
    /// The segment holding this recovery point (above its base offset) after an unclean
    /// shutdown: every byte below it was synced. Its position is found from the offset index
    /// (the last entry below it, then batch headers, no CRC), the index entries below it are
    /// kept, and only the batches from there on are re-validated and indexed. A recovery point
    /// not found on a batch boundary that way is not trusted: the segment is recovered from its
    /// start, as [`LoadMode::Recover`], with a warning.
    RecoverFrom(Offset),
}

/// What recovery may do with invalid bytes in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidTail {
    /// Cut them off: the segment is the log's tail, where a crash can tear an unacknowledged
    /// write.
    Truncate,
    /// Cut them off if they start at or above this offset (the recovery point: below it every
    /// byte was synced, so invalid bytes there are damage); refuse otherwise. For the log's
    /// segments at or above the recovery point: the last one, and sealed ones whose seal sync a
    /// crash may have cut short (`log/seal_sync.rs`).
    TruncateFrom(Offset),
    /// Refuse with `StorageError::Corrupt`, changing nothing: the segment was synced in full (a
    /// cleaned segment, synced before it was swapped in), so invalid bytes in it are damage to
    /// acknowledged data, not a torn write.
    Refuse,
}

/// Where recovery's validation starts: a batch boundary, and the position of the last index
/// entry before it (0 when none).
#[derive(Debug, Clone, Copy)]
struct Resume {
    position: u64,
    last_index_position: u64,
}

/// The result of loading one segment.
#[derive(Debug)]
pub struct LoadedSegment {
    pub segment: Segment,
    /// Set when the segment was recovered (by request, or because an index failed its check).
    pub recovery: Option<SegmentRecovery>,
}

impl Segment {
    /// Opens the segment at `base_offset` in `dir`, truncating invalid bytes at its end.
    pub fn load(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: Offset,
        config: &LogConfig,
        mode: LoadMode,
        now: TimestampMs,
    ) -> Result<LoadedSegment, StorageError> {
        Segment::load_with(
            storage,
            dir,
            base_offset,
            config,
            mode,
            InvalidTail::Truncate,
            !config.cleanup_policy.compacts(),
            now,
        )
    }

    /// Opens the segment at `base_offset` in `dir`; `invalid_tail` says whether recovery may
    /// truncate; `dense`, whether its offsets have no gaps (the cleaner never rewrote it).
    #[allow(clippy::too_many_arguments)]
    pub fn load_with(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: Offset,
        config: &LogConfig,
        mode: LoadMode,
        invalid_tail: InvalidTail,
        dense: bool,
        now: TimestampMs,
    ) -> Result<LoadedSegment, StorageError> {
        let names = SegmentNames::in_state(dir, base_offset, FileState::Live);
        Segment::load_named(storage, &names, config, mode, invalid_tail, dense, now)
    }

    /// Checks every batch of the cleaned file `<base_offset>.log.cleaned` (synced already) and
    /// writes its indexes beside it, sealed (`<base_offset>.index.cleaned`,
    /// `.timeindex.cleaned`), so that the swap that renames the three files in loads the segment
    /// as trusted, reading only past its last index entry. Invalid bytes are damage: refused.
    pub fn prepare_cleaned(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: Offset,
        config: &LogConfig,
        now: TimestampMs,
    ) -> Result<(), StorageError> {
        let names = SegmentNames::in_state(dir, base_offset, FileState::Cleaned);
        let mode = LoadMode::Recover;
        let loaded = Segment::load_named(
            storage,
            &names,
            config,
            mode,
            InvalidTail::Refuse,
            false,
            now,
        )?;
        let mut segment = loaded.segment;
        segment.seal()
    }

    fn load_named(
        storage: &dyn Storage,
        names: &SegmentNames,
        config: &LogConfig,
        mode: LoadMode,
        invalid_tail: InvalidTail,
        dense: bool,
        now: TimestampMs,
    ) -> Result<LoadedSegment, StorageError> {
        let base_offset = names.base_offset;
        let log_path = names.log.clone();
        let log = storage
            .open(&log_path, OpenMode::Existing)
            .map(std::sync::Arc::<dyn crate::io::StorageFile>::from)
            .map_err(|source| StorageError::io("open", &log_path, source))?;
        let size_bytes = log
            .length_bytes()
            .map_err(|source| StorageError::io("stat", &log_path, source))?;
        let indexes = match mode {
            LoadMode::Trusted => open_checked_indexes(names, size_bytes),
            // Checked entry by entry before any is kept (`Segment::resume_point`).
            LoadMode::RecoverFrom(_) => open_unchecked_indexes(names),
            LoadMode::Recover => None,
        };
        let needs_recovery = indexes.is_none() || mode != LoadMode::Trusted;
        let (offset_index, time_index) = match indexes {
            Some(indexes) => indexes,
            None => create_indexes(names, config)?,
        };
        let mut segment = Segment {
            base_offset,
            log_path,
            log,
            size_bytes,
            next_offset: base_offset,
            offset_index,
            time_index,
            bytes_since_last_index_entry: 0,
            max_timestamp_so_far: None,
            first_batch_timestamp: None,
            created_ms: now,
            prefetched_to: Default::default(),
            batch_bytes_hint: Default::default(),
            digests: Default::default(),
            recovery_data: Default::default(),
        };
        if needs_recovery {
            let recovery = match mode {
                LoadMode::RecoverFrom(recovery_point) => {
                    segment.recover_from(config, invalid_tail, dense, recovery_point)?
                }
                _ => segment.recover(config, invalid_tail, dense)?,
            };
            return Ok(LoadedSegment {
                segment,
                recovery: Some(recovery),
            });
        }
        match segment.load_tail()? {
            Ok(()) => Ok(LoadedSegment {
                segment,
                recovery: None,
            }),
            // The indexes looked right but the data after the last entry does not: recover.
            Err(_) => {
                let recovery = segment.recover(config, invalid_tail, dense)?;
                Ok(LoadedSegment {
                    segment,
                    recovery: Some(recovery),
                })
            }
        }
    }

    /// For a trusted segment: walks the headers after the last index entry to learn the next
    /// offset, the largest timestamp and the first batch's timestamp.
    /// Fails (position, reason) when the tail is not valid or an index names an offset past the
    /// data: such indexes cannot be trusted (an append would need an entry below theirs).
    fn load_tail(&mut self) -> Result<Result<(), (u64, String)>, StorageError> {
        self.max_timestamp_so_far = self.time_index.last_entry();
        let start = self
            .offset_index
            .last_entry()
            .map_or(0, |entry| entry.position);
        // Each offset index entry was made with a time index entry for the largest timestamp up
        // to its batch, where that grew (`maybe_index`; recovery and Kafka follow the same rule),
        // so the time index covers every batch before `start`: the scan from there finds the
        // rest, as Kafka takes the time index's last entry (`readMaxTimestampAndOffsetSoFar`)
        // without a scan. An empty time index beside offset entries (lost and recreated) covers
        // nothing: scan from the start. (Scanning from its last entry's batch read a whole sealed
        // segment at every open when the timestamps stopped growing early in it.)
        let scan_from = match self.max_timestamp_so_far {
            Some(_) => start,
            None => 0,
        };
        self.first_batch_timestamp = self
            .first_header()?
            .map(|header| TimestampMs(header.max_timestamp));
        // From an index entry the tail is about one index interval: read it a page at a time,
        // not a recovery's window (a trusted open reads only what it walks).
        let window = match scan_from {
            0 => super::scan::SCAN_WINDOW_BYTES,
            _ => super::scan::LOOKUP_WINDOW_BYTES,
        };
        let mut scanner = LogScanner::with_window(
            self.log.as_ref(),
            &self.log_path,
            u64::from(scan_from),
            self.size_bytes,
            window,
        );
        loop {
            match scanner.next_header()? {
                ScanStep::Item { item, .. } => {
                    self.next_offset =
                        Offset(u64::try_from(item.last_offset()).map_or(0, |last| last + 1));
                    observe_timestamp(
                        &mut self.max_timestamp_so_far,
                        TimestampMs(item.max_timestamp),
                        Offset(item.last_offset().max(0) as u64),
                    );
                }
                ScanStep::End => break,
                ScanStep::Invalid { position, error } => {
                    return Ok(Err((position, error.to_string())));
                }
            }
        }
        let next_offset = self.next_offset;
        if self
            .offset_index
            .last_entry()
            .is_some_and(|entry| entry.offset >= next_offset)
            || self
                .time_index
                .last_entry()
                .is_some_and(|entry| entry.offset >= next_offset)
        {
            return Ok(Err((
                u64::from(start),
                format!("an index entry names an offset at or past {next_offset}"),
            )));
        }
        self.bytes_since_last_index_entry = self.size_bytes - u64::from(start);
        Ok(Ok(()))
    }

    fn first_header(&self) -> Result<Option<BatchHeader>, StorageError> {
        let window = super::scan::LOOKUP_WINDOW_BYTES;
        let mut scanner = LogScanner::with_window(
            self.log.as_ref(),
            &self.log_path,
            0,
            self.size_bytes,
            window,
        );
        match scanner.next_header()? {
            ScanStep::Item { item, .. } => Ok(Some(item)),
            _ => Ok(None),
        }
    }

    /// Re-validates every batch, rebuilds both indexes and truncates the `.log` after the last
    /// valid batch. `dense`: the segment's offsets have no gaps (a log never compacted, a log's
    /// active segment, a segment above the cleaned range).
    pub fn recover(
        &mut self,
        config: &LogConfig,
        invalid_tail: InvalidTail,
        dense: bool,
    ) -> Result<SegmentRecovery, StorageError> {
        self.read_from_device()?;
        self.recover_from_start(config, invalid_tail, dense)
    }

    /// Recovers the segment holding `recovery_point` (every byte below it synced): from the
    /// batch boundary at the recovery point when the offset index and the batch headers lead
    /// there, else from the segment's start (with a warning). Below the boundary nothing is read
    /// but the headers walked from the offset index's last entry below the recovery point, and
    /// the index entries there are kept; from the boundary on, as [`Segment::recover`].
    pub fn recover_from(
        &mut self,
        config: &LogConfig,
        invalid_tail: InvalidTail,
        dense: bool,
        recovery_point: Offset,
    ) -> Result<SegmentRecovery, StorageError> {
        self.read_from_device()?;
        if recovery_point <= self.base_offset {
            return self.recover_from_start(config, invalid_tail, dense);
        }
        match self.resume_point(config, dense, recovery_point)? {
            Ok(resume) => self.recover_tail(config, invalid_tail, dense, resume),
            Err(why) => {
                tracing::warn!(
                    "{}: recovery point {recovery_point} is not trusted ({why}); recovering the \
                     segment from its start",
                    self.log_path.display()
                );
                self.recover_from_start(config, invalid_tail, dense)
            }
        }
    }

    /// Drops the `.log`'s cached pages and reads its length again, before recovery reads it.
    fn read_from_device(&mut self) -> Result<(), StorageError> {
        // Read what the device holds, not pages a failed fsync left behind in the page cache.
        if let Err(error) = self.log.drop_cache() {
            tracing::warn!(
                "{}: cannot drop cached pages before recovery ({error}); reading through the cache",
                self.log_path.display()
            );
        }
        // Its length too: a failed fsync may have lost a cut (a prewrite's, at a seal) or a
        // growth that the length read at open still showed.
        self.size_bytes = self
            .log
            .length_bytes()
            .map_err(|source| StorageError::io("stat", &self.log_path, source))?;
        self.recovery_data = DataRanges::map(self.log.as_ref(), 0, self.size_bytes)
            .unwrap_or_else(|error| {
                tracing::warn!(
                    "{}: cannot map where the file holds data ({error}); reading all of it",
                    self.log_path.display()
                );
                DataRanges::default()
            });
        Ok(())
    }

    fn recover_from_start(
        &mut self,
        config: &LogConfig,
        invalid_tail: InvalidTail,
        dense: bool,
    ) -> Result<SegmentRecovery, StorageError> {
        // Cutting the files drops whatever they held without writing a page.
        match self.offset_index.entry_count() {
            0 => self
                .offset_index
                .resize_for_append(config.segment_index_bytes)?,
            _ => self
                .offset_index
                .keep_prefix(0, config.segment_index_bytes)?,
        }
        match self.time_index.entry_count() {
            0 => self
                .time_index
                .resize_for_append(config.segment_index_bytes)?,
            _ => self.time_index.keep_prefix(0, config.segment_index_bytes)?,
        }
        self.next_offset = self.base_offset;
        self.max_timestamp_so_far = None;
        self.first_batch_timestamp = None;
        let start = Resume {
            position: 0,
            last_index_position: 0,
        };
        self.recover_tail(config, invalid_tail, dense, start)
    }

    /// Where recovery of the segment holding `recovery_point` (above its base offset) resumes:
    /// the position of the batch boundary at the recovery point, found by walking batch headers
    /// (framing and offsets checked, no CRC: those bytes were synced) from the offset index's
    /// last entry below it, or from the segment's start when the index has none. Keeps the index
    /// entries below the recovery point (both indexes are cut after them), adds those the walk
    /// passes where the append path would have, and sets the next offset and largest timestamp.
    /// `Ok(Err(why))` when the index or the recovery point cannot be trusted: the caller recovers
    /// the whole segment.
    fn resume_point(
        &mut self,
        config: &LogConfig,
        dense: bool,
        recovery_point: Offset,
    ) -> Result<Result<Resume, String>, StorageError> {
        let (mut kept, mut entry) = self.offset_index.increasing_prefix_below(recovery_point);
        let mut time_kept = entry.map_or(0, |entry| {
            self.time_index.increasing_prefix_through(entry.offset)
        });
        if kept > 0 && time_kept == 0 {
            // Offset entries without time entries: the time index was lost (or its batches
            // carry no timestamps). It no longer covers the batches before the last offset
            // entry, so both are rebuilt by the walk from the start.
            (kept, entry, time_kept) = (0, None, 0);
        }
        if let Some(entry) = entry
            && u64::from(entry.position) >= self.size_bytes
        {
            return Ok(Err(format!(
                "the offset index's entry ({}, {}) points past the log's {} bytes",
                entry.offset, entry.position, self.size_bytes
            )));
        }
        self.offset_index
            .keep_prefix(kept, config.segment_index_bytes)?;
        self.time_index
            .keep_prefix(time_kept, config.segment_index_bytes)?;
        self.max_timestamp_so_far = self.time_index.last_entry();
        self.first_batch_timestamp = self
            .first_header()?
            .map(|header| TimestampMs(header.max_timestamp));
        let walk_from = entry.map_or(0, |entry| u64::from(entry.position));
        let mut last_index_position = walk_from;
        // The offset after the last batch walked; unknown before the first when walking from
        // an index entry.
        let mut next = (walk_from == 0).then_some(self.base_offset);
        let mut scanner = LogScanner::with_window(
            self.log.as_ref(),
            &self.log_path,
            walk_from,
            self.size_bytes,
            super::scan::LOOKUP_WINDOW_BYTES,
        );
        loop {
            if next == Some(recovery_point) {
                self.next_offset = recovery_point;
                return Ok(Ok(Resume {
                    position: scanner.position(),
                    last_index_position,
                }));
            }
            let (position, header) = match scanner.next_header()? {
                ScanStep::Item { position, item } => (position, item),
                ScanStep::End => {
                    let end = next.unwrap_or(self.base_offset);
                    // Where the cleaner left a gap, the recovery point may lie past the last
                    // batch of a sealed segment.
                    if !dense && end < recovery_point && next.is_some() {
                        self.next_offset = end;
                        return Ok(Ok(Resume {
                            position: scanner.position(),
                            last_index_position,
                        }));
                    }
                    return Ok(Err(format!(
                        "the batches end at offset {end} at position {}, below it",
                        scanner.position()
                    )));
                }
                ScanStep::Invalid { position, error } => {
                    return Ok(Err(format!(
                        "the batch at position {position} below it is invalid: {error}"
                    )));
                }
            };
            let base = header.base_offset;
            let last = header.last_offset();
            if let (Some(entry), None) = (entry, next)
                && last != entry.offset.0 as i64
            {
                return Ok(Err(format!(
                    "the offset index's entry ({}, {}) points at a batch of offsets {base} to \
                     {last}",
                    entry.offset, entry.position
                )));
            }
            let expected = next.unwrap_or(Offset(u64::try_from(base).unwrap_or(0)));
            if let Err(reason) = check_offsets(&header, self.base_offset, expected, dense) {
                return Ok(Err(format!("at position {position}: {reason}")));
            }
            if last >= recovery_point.0 as i64 {
                // Past the recovery point without reaching it exactly: only where the cleaner
                // left a gap may a batch start above it.
                if !dense && next.is_some() && base >= recovery_point.0 as i64 {
                    self.next_offset = expected;
                    return Ok(Ok(Resume {
                        position,
                        last_index_position,
                    }));
                }
                return Ok(Err(format!(
                    "the batch at position {position} holds offsets {base} to {last}, across it"
                )));
            }
            let last_offset = Offset(last as u64);
            observe_timestamp(
                &mut self.max_timestamp_so_far,
                TimestampMs(header.max_timestamp),
                last_offset,
            );
            if position - last_index_position > config.index_interval_bytes
                && !self.offset_index.is_full()
            {
                // An entry the append path made and the crash lost.
                self.offset_index.append(last_offset, position as u32);
                if let Some(max) = self.max_timestamp_so_far {
                    self.time_index
                        .maybe_append(max.timestamp, max.offset, false);
                }
                last_index_position = position;
            }
            next = Some(last_offset.next());
        }
    }

    /// Re-validates the batches from `start` (a batch boundary; the segment's next offset, index
    /// entries and largest timestamp as of there already set), indexes them and truncates the
    /// `.log` after the last valid one.
    fn recover_tail(
        &mut self,
        config: &LogConfig,
        invalid_tail: InvalidTail,
        dense: bool,
        start: Resume,
    ) -> Result<SegmentRecovery, StorageError> {
        let mut last_index_position = start.last_index_position;
        let mut scanner = LogScanner::new(
            self.log.as_ref(),
            &self.log_path,
            start.position,
            self.size_bytes,
        );
        let mut valid_bytes = start.position;
        let mut truncated_at = None;
        loop {
            let (position, batch) = match scanner.next_batch()? {
                ScanStep::Item { position, item } => (position, item),
                ScanStep::End => break,
                ScanStep::Invalid {
                    position,
                    error:
                        DecodeError::UnsupportedMagic {
                            magic: magic @ (0 | 1),
                        },
                } => {
                    // Old-format data written by an old Kafka is not damage: refuse to cut it.
                    return Err(StorageError::UnsupportedFormat {
                        file: self.log_path.clone(),
                        position,
                        magic,
                    });
                }
                ScanStep::Invalid { position, error } => {
                    truncated_at = Some((position, error.to_string()));
                    break;
                }
            };
            let header = *batch.header();
            if let Err(reason) = check_offsets(&header, self.base_offset, self.next_offset, dense) {
                // The CRC does not cover the base offset: a lost first sector took it with it
                // (a torn write; fuzz finding F7).
                if first_sector_lost(position, batch.bytes()) {
                    truncated_at = Some((
                        position,
                        format!(
                            "{reason}, and its first sector holds only what was there before \
                             (zeros or prewritten space): a torn write"
                        ),
                    ));
                    break;
                }
                // The batch passed its CRC, so a crash did not tear it: its offsets (outside the
                // CRC) were damaged, or a misdirected write landed it here. Never cut it as a
                // torn tail: acknowledged records may follow or be the ones overwritten.
                return Err(StorageError::Corrupt {
                    file: self.log_path.clone(),
                    position,
                    reason: format!(
                        "{reason}; the batch passes its CRC, so this is damage or a misdirected \
                         write, not a torn tail: the partition is not opened rather than \
                         truncated; {}",
                        recover_hint(&self.log_path)
                    ),
                });
            }
            let last_offset = Offset(header.last_offset() as u64);
            if self.first_batch_timestamp.is_none() {
                self.first_batch_timestamp = Some(TimestampMs(header.max_timestamp));
            }
            observe_timestamp(
                &mut self.max_timestamp_so_far,
                TimestampMs(header.max_timestamp),
                last_offset,
            );
            if position - last_index_position > config.index_interval_bytes
                && !self.offset_index.is_full()
            {
                self.offset_index.append(last_offset, position as u32);
                if let Some(max) = self.max_timestamp_so_far {
                    self.time_index
                        .maybe_append(max.timestamp, max.offset, false);
                }
                last_index_position = position;
            }
            self.next_offset = last_offset.next();
            valid_bytes = position + header.size_bytes();
        }
        let bytes_truncated = self.size_bytes - valid_bytes;
        let refused = match invalid_tail {
            InvalidTail::Truncate => None,
            InvalidTail::Refuse => Some("the segment was synced in full".to_owned()),
            InvalidTail::TruncateFrom(durable) if self.next_offset < durable => Some(format!(
                "they start at offset {}, below the recovery point {durable}",
                self.next_offset
            )),
            InvalidTail::TruncateFrom(_) => None,
        };
        let refused = match refused {
            None if bytes_truncated > 0 => {
                self.not_a_torn_tail(valid_bytes, dense, config.max_message_bytes)?
            }
            refused => refused,
        };
        if bytes_truncated > 0
            && let Some(why) = refused
        {
            let (position, reason) = truncated_at.unwrap_or((valid_bytes, "invalid bytes".into()));
            return Err(StorageError::Corrupt {
                file: self.log_path.clone(),
                position,
                reason: format!(
                    "{reason}; {why}, so this is damage to synced data, not a torn write: the \
                     partition is not opened rather than truncated; {}",
                    recover_hint(&self.log_path)
                ),
            });
        }
        if bytes_truncated > 0 {
            self.log
                .set_length_bytes(valid_bytes)
                .map_err(|source| StorageError::io("truncate", &self.log_path, source))?;
            self.size_bytes = valid_bytes;
        }
        self.bytes_since_last_index_entry = valid_bytes - last_index_position;
        Ok(SegmentRecovery {
            bytes_truncated,
            truncated_at,
        })
    }

    /// Why the invalid bytes at `invalid_at` (P) cannot be a torn tail, if they cannot. A crash
    /// keeps or loses each sector whole, the page cache takes writes in order, and bytes past the
    /// synced end read as zeros when their sector was lost. So in a torn tail:
    /// - a batch header at P that lies in one sector and parses names the expected offset (any
    ///   other, or a lower one when not `dense`, was never written there);
    /// - no batch that passes its CRC and carries the offsets that follow starts inside the extent
    ///   P's intact header claims (only P's own bytes were written there), nor in P's sector with
    ///   a non-zero byte in that sector (the sector then holds new bytes, so P's bytes before it
    ///   were written whole), nor at P's end in P's last sector with a non-zero byte there when
    ///   P spans at most two sectors (both were kept then); nor one of later offsets that starts
    ///   inside that extent and reaches past it (P's own bytes end there, older ones hold no
    ///   batch);
    /// - no batch that passes its CRC starts inside the header that belongs at P (its first 61
    ///   bytes): only that header's bytes or older ones were ever there; nor one of the expected
    ///   offset or later in P's sector before P and reaching past it;
    /// - the batch for the expected offset does not lie further on (a misdirected write, R14).
    ///
    /// The offsets that follow are P's last offset + 1 when P's header is intact, else above the
    /// expected offset by at most the records that fit between: a batch stored inside a record's
    /// value carries other offsets and is not taken for evidence.
    fn not_a_torn_tail(
        &self,
        invalid_at: u64,
        dense: bool,
        max_batch_bytes: u64,
    ) -> Result<Option<String>, StorageError> {
        let expected = self.next_offset.0 as i64;
        let sector = |position: u64| position / SECTOR_BYTES;
        let parsed = self.header_at(invalid_at)?;
        let one_sector = sector(invalid_at) == sector(invalid_at + field::MAGIC as u64);
        let header = parsed.filter(|_| one_sector);
        if let Some(header) = &header
            && header.base_offset != expected
            && (dense || header.base_offset < expected)
        {
            return Ok(Some(format!(
                "their header is for offset {} where {expected} is next: nothing was ever \
                 written there with that offset",
                header.base_offset
            )));
        }
        // P's own header, when intact: the extent it claims (a length beyond `max.message.bytes`
        // was never written) and the offset that follows it. Across two sectors only when it
        // names the (non-zero) expected offset: the first sector was written then, and a lost
        // second one reads as zeros or stamps, no plausible length.
        let own = parsed.filter(|header| {
            (one_sector || expected != 0)
                && header.base_offset == expected
                && header.size_bytes() <= max_batch_bytes
        });
        let claimed_end = own.map_or(0, |header| invalid_at + header.size_bytes());
        let follows = own.map(|header| header.last_offset().saturating_add(1));
        let sector_end = (sector(invalid_at) + 1) * SECTOR_BYTES;
        // P's extent in at most two sectors: a successor starting right where it ends, with a
        // non-zero byte in P's last sector, shows that sector was kept too, and with it P's bytes
        // there, so P was written whole (fuzz finding F15).
        let last_sector_end = claimed_end.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
        let two_sectors = own.is_some() && sector(claimed_end - 1) <= sector(invalid_at) + 1;
        let region_end = sector_end.max(claimed_end + 1).min(self.size_bytes);
        let evidence = |position: u64, batch: &Batch| {
            let base = batch.base_offset();
            let records_between = ((position - invalid_at) / RECORD_BYTES_MIN) as i64;
            let successor = match follows {
                Some(follows) => base == follows,
                None => base > expected && base - expected <= records_between + 1,
            };
            let in_sector = batch
                .bytes()
                .iter()
                .take(sector_end.saturating_sub(position) as usize)
                .any(|byte| *byte != 0);
            // A batch reaching past the claimed extent from inside it is neither P's own bytes
            // (a batch stored in a record's value ends inside P) nor older ones (zeros,
            // prewritten space): one written later landed over P (fuzz finding F11).
            let straddles = follows.is_some_and(|follows| base >= follows)
                && position + batch.size_bytes() > claimed_end;
            let in_last_sector = two_sectors
                && position == claimed_end
                && batch
                    .bytes()
                    .iter()
                    .take(last_sector_end.saturating_sub(position) as usize)
                    .any(|byte| *byte != 0);
            (position < claimed_end && (successor || straddles))
                || (successor && (in_sector || in_last_sector))
        };
        if let Some(misplaced) = self.misplaced_stamp(invalid_at)? {
            return Ok(Some(misplaced.describe()));
        }
        // A batch of the expected offset or later that starts in P's sector before P and
        // reaches past it was written over P's start, its first bytes the same as the ones it
        // covered (fuzz finding F18): a torn write leaves P's bytes or older ones from P on.
        let sector_start = sector(invalid_at) * SECTOR_BYTES;
        if let Some(position) =
            self.valid_batch_in(sector_start, invalid_at, None, |position, batch| {
                batch.base_offset() >= expected && position + batch.size_bytes() > invalid_at
            })?
        {
            return Ok(Some(format!(
                "a batch of offset {expected} or later passes its CRC at position {position}, \
                 across their start: it was written over them (a misdirected write)"
            )));
        }
        // Where a batch header belongs, a torn write leaves that header's bytes or older ones
        // (zeros, prewritten space), never the start of another batch (fuzz finding F9).
        let header_end = (invalid_at + BATCH_HEADER_BYTES as u64).min(self.size_bytes);
        if let Some(position) =
            self.valid_batch_in(invalid_at + 1, header_end, None, |_, _| true)?
        {
            return Ok(Some(format!(
                "a batch passes its CRC at position {position}, inside the header of the batch \
                 that belongs at {invalid_at}: it was written over that batch (a misdirected \
                 write)"
            )));
        }
        if let Some(position) = self.valid_batch_in(invalid_at + 1, region_end, None, evidence)? {
            return Ok(Some(format!(
                "the next batch passes its CRC at position {position}, inside their sector or \
                 the extent their header claims, so they were written and then damaged"
            )));
        }
        Ok(self.misplaced_batch(invalid_at + 1)?.map(|position| {
            format!(
                "the batch for offset {} passes its CRC at position {position}, past them (a \
                 misdirected write), so they hide synced data",
                self.next_offset
            )
        }))
    }

    /// The first stamp of prewritten space at or after `from` that lies away from the position
    /// it was written for (`format/prewrite.rs`): a misdirected prewrite, which may have landed over
    /// synced batches and left only zeros and stamps where they were.
    fn misplaced_stamp(&self, from: u64) -> Result<Option<Misplaced>, StorageError> {
        // Grown to what each read needs: most scans read a few pages, not a whole chunk.
        let mut chunk = Vec::new();
        let mut start = from;
        // A stamp's bytes are not zero, so every stamp lies in data.
        while let Some(data) = self.data_from(start) {
            start = data.start;
            let span = (data.end - start).min(SCAN_CHUNK_BYTES as u64) as usize;
            grow_zeroed(&mut chunk, span + STAMP_BYTES);
            let read = self
                .log
                .read_at(&mut chunk[..span + STAMP_BYTES], start)
                .map_err(|source| StorageError::io("read", &self.log_path, source))?;
            let bytes = chunk.get(..read).unwrap_or_default();
            // Stamps starting in the last `STAMP_BYTES` are found whole by the next read.
            let owned = read.min(span);
            if let Some(misplaced) = prewrite::misplaced_stamp(bytes, start)
                .filter(|misplaced| misplaced.position() < start + owned as u64)
            {
                return Ok(Some(misplaced));
            }
            if owned == 0 {
                break;
            }
            start += owned as u64;
        }
        Ok(None)
    }

    /// The data at or after `position` and inside the `.log`, up to the first hole, as it was
    /// when recovery began (`DataRanges`): the scans for evidence past a torn tail skip the reserved,
    /// never-written space of an active segment (unwritten extents, holes) without reading it. A
    /// write that landed there, misdirected or not, made its blocks data.
    fn data_from(&self, position: u64) -> Option<std::ops::Range<u64>> {
        let data = self.recovery_data.data_from(position)?;
        (data.start < self.size_bytes).then(|| data.start..data.end.min(self.size_bytes))
    }

    /// The batch header at `position`, if the bytes there parse as one with magic 2 and a
    /// plausible length.
    fn header_at(&self, position: u64) -> Result<Option<BatchHeader>, StorageError> {
        let mut header = [0u8; BATCH_HEADER_BYTES];
        let read = self
            .log
            .read_at(&mut header, position)
            .map_err(|source| StorageError::io("read", &self.log_path, source))?;
        Ok(header.get(..read).and_then(|bytes| {
            BatchPrefix::parse(bytes).ok()?;
            BatchHeader::parse(bytes).ok()
        }))
    }

    /// The first position in `from..to` where a batch that passes its CRC and `accept` starts
    /// (with `base_offset`, when given). The bytes are read once, a chunk at a time; only
    /// positions holding magic 2, a plausible length and that base offset are decoded.
    fn valid_batch_in(
        &self,
        from: u64,
        to: u64,
        base_offset: Option<i64>,
        accept: impl Fn(u64, &Batch) -> bool,
    ) -> Result<Option<u64>, StorageError> {
        let mut chunk = Vec::new();
        let mut start = from;
        // A batch's magic byte is 2, so a batch starts at most `field::MAGIC` bytes before data.
        while let Some(data) = self.data_from(start + field::MAGIC as u64) {
            start = start.max(data.start - field::MAGIC as u64);
            if start >= to {
                break;
            }
            let positions = (to.min(data.end) - start).min(SCAN_CHUNK_BYTES as u64) as usize;
            grow_zeroed(&mut chunk, positions + field::MAGIC + 1);
            let read = self
                .log
                .read_at(&mut chunk[..positions + field::MAGIC + 1], start)
                .map_err(|source| StorageError::io("read", &self.log_path, source))?;
            let bytes = chunk.get(..read).unwrap_or_default();
            for index in 0..positions {
                let position = start + index as u64;
                let other_base = base_offset.is_some_and(|base| {
                    bytes.get(index..index + 8) != Some(&base.to_be_bytes()[..])
                });
                if bytes.get(index + field::MAGIC) != Some(&(BATCH_MAGIC_V2 as u8))
                    || other_base
                    || !self.plausible_length(bytes, index, position)
                {
                    continue;
                }
                // Exact reads: one candidate batch, no window.
                let mut scanner = LogScanner::with_window(
                    self.log.as_ref(),
                    &self.log_path,
                    position,
                    self.size_bytes,
                    0,
                );
                if let ScanStep::Item { item, .. } = scanner.next_batch()?
                    && accept(position, &item)
                {
                    return Ok(Some(position));
                }
            }
            start += positions as u64;
        }
        Ok(None)
    }

    /// Whether the batch length at `index` of `bytes` (the file's bytes at `position`) is a v2
    /// batch's and ends inside the file; unknown (past the chunk) counts as plausible.
    fn plausible_length(&self, bytes: &[u8], index: usize, position: u64) -> bool {
        let field = field::BATCH_LENGTH;
        let Some(length) = bytes.get(index + field..index + field + 4) else {
            return true;
        };
        let length = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
        let minimum = (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i64;
        i64::from(length) >= minimum
            && position + LOG_OVERHEAD_BYTES as u64 + length as u64 <= self.size_bytes
    }

    /// The position at or after `from` of a batch that passes its CRC and starts at the next
    /// offset recovery expects. Invalid bytes followed by such a batch are not a torn tail: in a
    /// torn tail every later batch that survived holds later offsets, so this batch was written
    /// to the wrong place (R14) and the data it carries was acknowledged.
    ///
    /// A batch whose bytes in its first sector are what a crash leaves there (zeros, prewritten
    /// space) is not taken: that sector's write may have been lost with the base offset in it,
    /// so the offset it reads as says nothing (fuzz finding F14: 0 read as the empty segment's
    /// first). Unless that sector holds at most the top four bytes of the base offset: a lost
    /// sector changes the offset read by a multiple of 2^32, and every batch of the segment lies
    /// within 2^31 of the offset expected, so one read as that offset is that offset's.
    fn misplaced_batch(&self, from: u64) -> Result<Option<u64>, StorageError> {
        let expected = self.next_offset.0 as i64;
        self.valid_batch_in(from, self.size_bytes, Some(expected), |position, batch| {
            low_offset_bytes_past_first_sector(position)
                || !first_sector_lost(position, batch.bytes())
        })
    }

    /// The largest timestamp recorded, if any batch carried one.
    pub fn max_timestamp(&self) -> Option<TimestampOffset> {
        self.max_timestamp_so_far
    }
}

/// Grows `buffer` with zeros to at least `length` bytes (a scan's buffer, sized by its reads).
fn grow_zeroed(buffer: &mut Vec<u8>, length: usize) {
    if buffer.len() < length {
        buffer.resize(length, 0);
    }
}

/// What the operator of a partition that is not opened because of damage in `log_path` can do:
/// `seglog recover` truncates the partition to its last valid batch, after showing what that
/// discards and asking.
pub(crate) fn recover_hint(log_path: &Path) -> String {
    let partition_dir = log_path.parent();
    let partition = partition_dir
        .and_then(Path::file_name)
        .and_then(|name| name.to_str())
        .and_then(parse_partition_dir_name);
    let root = partition_dir
        .and_then(Path::parent)
        .filter(|root| !root.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let command = match partition {
        Some(tp) => format!(
            "seglog recover --dir {} --topic {} --partition {}",
            root.display(),
            tp.topic,
            tp.partition
        ),
        None => "seglog recover".to_owned(),
    };
    format!(
        "to serve the batches before the damage, `{command}` shows what truncating the partition \
         to its last valid batch would discard and, once confirmed, truncates it"
    )
}

/// Whether a batch at `position` keeps the low four bytes of its base offset (and everything
/// after them) past its first 512-byte sector.
fn low_offset_bytes_past_first_sector(position: u64) -> bool {
    SECTOR_BYTES - position % SECTOR_BYTES <= 4
}

/// Whether `bytes`, a batch's from `position`, reach past their first 512-byte sector and hold
/// there only what a crash that lost that sector's write leaves (zeros past the old end, or
/// prewritten space): the fields the batch keeps in that sector were never stored.
fn first_sector_lost(position: u64, bytes: &[u8]) -> bool {
    let in_first_sector = (SECTOR_BYTES - position % SECTOR_BYTES) as usize;
    match bytes.get(..in_first_sector) {
        Some(head) if bytes.len() > in_first_sector => prewrite::may_be_prewritten(head, position),
        _ => false,
    }
}

/// A recovered batch must start at or after the previous batch's end (exactly there when `dense`:
/// a log that is never compacted has no offset gaps), inside this segment, and its offsets must
/// fit the index's relative offsets.
pub(crate) fn check_offsets(
    header: &BatchHeader,
    base_offset: Offset,
    next_offset: Offset,
    dense: bool,
) -> Result<(), String> {
    if header
        .base_offset
        .checked_add(i64::from(header.last_offset_delta))
        .is_none()
    {
        return Err(format!(
            "batch offsets overflow: base offset {} + last offset delta {}",
            header.base_offset, header.last_offset_delta
        ));
    }
    if u64::try_from(header.base_offset).map_or(true, |base| base < next_offset.0) {
        return Err(format!(
            "batch base offset {} is below the expected next offset {next_offset}",
            header.base_offset
        ));
    }
    if dense && u64::try_from(header.base_offset).is_ok_and(|base| base != next_offset.0) {
        return Err(format!(
            "batch base offset {} leaves a gap after the expected next offset {next_offset} in a \
             log that is never compacted",
            header.base_offset
        ));
    }
    if header.last_offset_delta < 0 {
        return Err(format!(
            "negative last offset delta {}",
            header.last_offset_delta
        ));
    }
    if (header.last_offset() as u64).saturating_sub(base_offset.0) > RELATIVE_OFFSET_MAX {
        return Err(format!(
            "batch last offset {} does not fit the segment based at {base_offset}",
            header.last_offset()
        ));
    }
    Ok(())
}

/// The paths of one segment's three files, in one state (live, or `.cleaned` before a swap).
struct SegmentNames {
    base_offset: Offset,
    log: PathBuf,
    offset_index: PathBuf,
    time_index: PathBuf,
}

impl SegmentNames {
    fn in_state(dir: &Path, base_offset: Offset, state: FileState) -> SegmentNames {
        let path = |kind| {
            SegmentFileName::live(base_offset, kind)
                .with_state(state)
                .path_in(dir)
        };
        SegmentNames {
            base_offset,
            log: path(SegmentFileKind::Log),
            offset_index: path(SegmentFileKind::Index),
            time_index: path(SegmentFileKind::TimeIndex),
        }
    }
}

/// Opens both indexes and checks them against the `.log`'s size; `None` if either is missing or
/// fails its check (the caller then rebuilds them).
fn open_checked_indexes(
    names: &SegmentNames,
    log_size_bytes: u64,
) -> Option<(OffsetIndex, TimeIndex)> {
    let base_offset = names.base_offset;
    let offset_index = OffsetIndex::open_existing(&names.offset_index, base_offset).ok()?;
    let time_index = TimeIndex::open_existing(&names.time_index, base_offset).ok()?;
    offset_index.check(log_size_bytes).ok()?;
    let next_offset_bound = Offset(base_offset.0.saturating_add(RELATIVE_OFFSET_MAX + 1));
    time_index.check(next_offset_bound).ok()?;
    // A time index entry must not name an offset past the offset index's reach.
    Some((offset_index, time_index))
}

/// Both indexes as found, unchecked (a missing or unreadable one: `None`), read into memory: the
/// recovery that reads them keeps a prefix of their entries, which maps them.
fn open_unchecked_indexes(names: &SegmentNames) -> Option<(OffsetIndex, TimeIndex)> {
    let base_offset = names.base_offset;
    let offset_index = OffsetIndex::open_existing_copied(&names.offset_index, base_offset).ok()?;
    let time_index = TimeIndex::open_existing_copied(&names.time_index, base_offset).ok()?;
    Some((offset_index, time_index))
}

fn create_indexes(
    names: &SegmentNames,
    config: &LogConfig,
) -> Result<(OffsetIndex, TimeIndex), StorageError> {
    let base_offset = names.base_offset;
    Ok((
        OffsetIndex::create(&names.offset_index, base_offset, config.segment_index_bytes)?,
        TimeIndex::create(&names.time_index, base_offset, config.segment_index_bytes)?,
    ))
}
