//! Opening an existing segment: trusting its indexes after a clean shutdown, or re-validating
//! every batch and rebuilding the indexes after an unclean one (Kafka's `LogSegment.recover`).
//!
//! Recovery reads each batch in order and checks its framing, magic, CRC-32C and offsets (the
//! base offset never goes below the previous batch's next offset nor the segment's base offset).
//! The first batch that fails ends the valid data: the `.log` is truncated there. Index entries
//! are rebuilt with the same `index.interval.bytes` rule the append path uses.

use std::path::Path;

use crate::config::LogConfig;
use crate::error::StorageError;
use crate::format::file_name::{SegmentFileKind, segment_path};
use crate::format::{BatchHeader, DecodeError};
use crate::index::time_index::TimestampOffset;
use crate::index::{OffsetIndex, TimeIndex};
use crate::io::{OpenMode, Storage};
use crate::limits::RELATIVE_OFFSET_MAX;
use crate::types::{Offset, TimestampMs};

use super::scan::{LogScanner, ScanStep};
use super::{Segment, observe_timestamp};

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
}

/// What recovery may do with invalid bytes in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidTail {
    /// Cut them off: the segment is the log's tail, where a crash can tear an unacknowledged
    /// write.
    Truncate,
    /// Cut them off if they start at or above this offset (the recovery point: below it every
    /// byte was synced, so invalid bytes there are damage); refuse otherwise.
    TruncateFrom(Offset),
    /// Refuse with `StorageError::Corrupt`, changing nothing: later segments hold data, so this
    /// segment was synced when it rolled and invalid bytes in it are damage to acknowledged
    /// data, not a torn write.
    Refuse,
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
            now,
        )
    }

    /// Opens the segment at `base_offset` in `dir`; `invalid_tail` says whether recovery may
    /// truncate.
    pub fn load_with(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: Offset,
        config: &LogConfig,
        mode: LoadMode,
        invalid_tail: InvalidTail,
        now: TimestampMs,
    ) -> Result<LoadedSegment, StorageError> {
        let log_path = segment_path(dir, base_offset, SegmentFileKind::Log);
        let log = storage
            .open(&log_path, OpenMode::Existing)
            .map_err(|source| StorageError::io("open", &log_path, source))?;
        let size_bytes = log
            .length_bytes()
            .map_err(|source| StorageError::io("stat", &log_path, source))?;
        let indexes = match mode {
            LoadMode::Trusted => open_checked_indexes(dir, base_offset, size_bytes),
            LoadMode::Recover => None,
        };
        let needs_recovery = indexes.is_none();
        let (offset_index, time_index) = match indexes {
            Some(indexes) => indexes,
            None => create_indexes(dir, base_offset, config)?,
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
        };
        if needs_recovery {
            let recovery = segment.recover(config, invalid_tail)?;
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
                let recovery = segment.recover(config, invalid_tail)?;
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
        // A time index that lags the offset index (empty, or lost and recreated) does not cover
        // the batches before `start`: scan from its last entry's batch, as Kafka's
        // `LogSegment.readLargestTimestamp` does (from 0 when it has no entry).
        let time_start = self
            .max_timestamp_so_far
            .map_or(0, |entry| self.offset_index.lookup(entry.offset).position);
        self.first_batch_timestamp = self
            .first_header()?
            .map(|header| TimestampMs(header.max_timestamp));
        let mut scanner = LogScanner::new(
            self.log.as_ref(),
            &self.log_path,
            u64::from(start.min(time_start)),
            self.size_bytes,
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
        let mut scanner = LogScanner::new(self.log.as_ref(), &self.log_path, 0, self.size_bytes);
        match scanner.next_header()? {
            ScanStep::Item { item, .. } => Ok(Some(item)),
            _ => Ok(None),
        }
    }

    /// Re-validates every batch, rebuilds both indexes and truncates the `.log` after the last
    /// valid batch.
    pub fn recover(
        &mut self,
        config: &LogConfig,
        invalid_tail: InvalidTail,
    ) -> Result<SegmentRecovery, StorageError> {
        // Read what the device holds, not pages a failed fsync left behind in the page cache.
        if let Err(error) = self.log.drop_cache() {
            log::warn!(
                "{}: cannot drop cached pages before recovery ({error}); reading through the cache",
                self.log_path.display()
            );
        }
        self.offset_index.reset();
        self.time_index.reset();
        self.offset_index
            .resize_for_append(config.segment_index_bytes)?;
        self.time_index
            .resize_for_append(config.segment_index_bytes)?;
        self.next_offset = self.base_offset;
        self.max_timestamp_so_far = None;
        self.first_batch_timestamp = None;
        let mut last_index_position = 0u64;
        let mut scanner = LogScanner::new(self.log.as_ref(), &self.log_path, 0, self.size_bytes);
        let mut valid_bytes = 0u64;
        let mut truncated_at = None;
        loop {
            let (position, header) = match scanner.next_batch()? {
                ScanStep::Item { position, item } => (position, *item.header()),
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
            if let Err(reason) = check_offsets(&header, self.base_offset, self.next_offset) {
                truncated_at = Some((position, reason));
                break;
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
            InvalidTail::Refuse => Some("later segments hold data".to_owned()),
            InvalidTail::TruncateFrom(durable) if self.next_offset < durable => Some(format!(
                "they start at offset {}, below the recovery point {durable}",
                self.next_offset
            )),
            InvalidTail::TruncateFrom(_) => None,
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
                     partition is not opened rather than truncated"
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

    /// The largest timestamp recorded, if any batch carried one.
    pub fn max_timestamp(&self) -> Option<TimestampOffset> {
        self.max_timestamp_so_far
    }
}

/// A recovered batch must start at or after the previous batch's end, inside this segment, and
/// its offsets must fit the index's relative offsets.
fn check_offsets(
    header: &BatchHeader,
    base_offset: Offset,
    next_offset: Offset,
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

/// Opens both indexes and checks them against the `.log`'s size; `None` if either is missing or
/// fails its check (the caller then rebuilds them).
fn open_checked_indexes(
    dir: &Path,
    base_offset: Offset,
    log_size_bytes: u64,
) -> Option<(OffsetIndex, TimeIndex)> {
    let index_path = segment_path(dir, base_offset, SegmentFileKind::Index);
    let time_index_path = segment_path(dir, base_offset, SegmentFileKind::TimeIndex);
    if !index_path.exists() || !time_index_path.exists() {
        return None;
    }
    let offset_index = OffsetIndex::open_existing(&index_path, base_offset).ok()?;
    let time_index = TimeIndex::open_existing(&time_index_path, base_offset).ok()?;
    offset_index.check(log_size_bytes).ok()?;
    let next_offset_bound = Offset(base_offset.0.saturating_add(RELATIVE_OFFSET_MAX + 1));
    time_index.check(next_offset_bound).ok()?;
    // A time index entry must not name an offset past the offset index's reach.
    Some((offset_index, time_index))
}

fn create_indexes(
    dir: &Path,
    base_offset: Offset,
    config: &LogConfig,
) -> Result<(OffsetIndex, TimeIndex), StorageError> {
    let index_path = segment_path(dir, base_offset, SegmentFileKind::Index);
    let time_index_path = segment_path(dir, base_offset, SegmentFileKind::TimeIndex);
    Ok((
        OffsetIndex::create(&index_path, base_offset, config.segment_index_bytes)?,
        TimeIndex::create(&time_index_path, base_offset, config.segment_index_bytes)?,
    ))
}
