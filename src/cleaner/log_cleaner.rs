//! Cleaning one log's sealed segments (Kafka's `Cleaner.clean`), apart from the log itself: the
//! owner hands over a [`CleanableLog`] (the sealed segments' facts, which never change while the
//! segments stay in the log), and the cleaner reads and writes files through its own [`Storage`]
//! handle — on the engine's cleaner thread, its own io_uring — without touching the log's state.
//! Only the swap of each cleaned group goes back to the owner ([`SwapOutcome`]).
//!
//! Pass one maps the latest offset of every key from the first dirty offset to the cleanable end
//! (bounded by `min.compaction.lag.ms`); pass two rewrites the sealed segments below the mapped
//! end, a group of consecutive segments at a time (Kafka's `groupSegmentsBySize`: the group's
//! bytes fit one segment, its offsets fit relative offsets, its rebuilt indexes fit
//! `segment.index.bytes`), into `<first base offset>.log.cleaned`, synced, then handed to `swap`.
//! A group is swapped before the next one is written: a `.cleaned` file never exists below a
//! `.swap` one, which the open-time rule for leftovers (KAFKA-6264) relies on.

use std::io;
use std::path::{Path, PathBuf};

use crate::cleaner::batch_cleaning::{CleanRules, CompactError, build_offset_map, clean_batch};
use crate::cleaner::offset_map::OffsetMap;
use crate::config::LogConfig;
use crate::error::StorageError;
use crate::failpoint::failpoint;
use crate::format::BatchHeader;
use crate::format::file_name::{FileState, SegmentFileKind, SegmentFileName};
use crate::io::{OpenMode, Storage, StorageFile};
use crate::limits::TIME_INDEX_ENTRY_BYTES;
use crate::segment::Segment;
use crate::segment::scan::{LogScanner, ScanStep};
use crate::types::{Offset, TimestampMs, TopicPartition};

/// Bytes of cleaned batches gathered before one write to the `.cleaned` file.
const CLEANED_WRITE_BYTES: usize = 1024 * 1024;

/// A sealed segment as the cleaner sees it. A sealed segment never changes while it stays in its
/// log, so these facts identify it: a swap checks them before replacing anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedSegment {
    pub base_offset: Offset,
    pub next_offset: Offset,
    pub size_bytes: u64,
    /// The largest record timestamp, `None` for an empty segment.
    pub largest_timestamp_ms: Option<i64>,
}

/// What cleaning a log needs, taken from its owner.
#[derive(Debug, Clone)]
pub struct CleanableLog {
    pub topic_partition: TopicPartition,
    /// Which opening of the log this is: a log closed and reopened since is another instance,
    /// whose open may have removed the cleaner's files, so a group from an older one is stale.
    pub log_instance: u64,
    pub dir: PathBuf,
    pub config: LogConfig,
    pub log_start_offset: Offset,
    /// Where the log's offsets become dense: below it the cleaner may have left gaps, even in a
    /// log whose policy no longer compacts (`log/cleaned_end.rs`).
    pub cleaned_end: Offset,
    /// The sealed segments in offset order (the active segment is never cleaned).
    pub sealed: Vec<SealedSegment>,
}

impl CleanableLog {
    /// The first offset the cleaner may not touch at time `now`: the base offset of the first
    /// sealed segment holding a record newer than `min.compaction.lag.ms`, else the active
    /// segment's base offset.
    pub fn cleanable_end(&self, now: TimestampMs) -> Offset {
        let lag_ms = i64::try_from(self.config.min_compaction_lag_ms).unwrap_or(i64::MAX);
        let newest_allowed_ms = now.0.saturating_sub(lag_ms);
        // Without a lag every sealed segment is cleanable, whatever its timestamps say.
        let too_recent = |segment: &&SealedSegment| {
            lag_ms > 0
                && segment
                    .largest_timestamp_ms
                    .is_some_and(|largest| largest > newest_allowed_ms)
        };
        match self.sealed.iter().find(too_recent) {
            Some(segment) => segment.base_offset,
            None => self
                .sealed
                .last()
                .map_or(self.log_start_offset, |last| last.next_offset),
        }
    }

    /// `(clean bytes, dirty bytes)` given the first dirty offset, over the segments below the
    /// cleanable end: what `min.cleanable.dirty.ratio` is compared with.
    pub fn cleanable_bytes(&self, first_dirty_offset: Offset, now: TimestampMs) -> (u64, u64) {
        let cleanable_end = self.cleanable_end(now);
        self.sealed
            .iter()
            .filter(|segment| segment.next_offset <= cleanable_end)
            .fold((0, 0), |(clean, dirty), segment| {
                if segment.next_offset <= first_dirty_offset {
                    (clean + segment.size_bytes, dirty)
                } else {
                    (clean, dirty + segment.size_bytes)
                }
            })
    }
}

/// A group of consecutive sealed segments cleaned into `<first base offset>.log.cleaned`,
/// synced, ready for the owner to swap in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanedGroup {
    /// [`CleanableLog::log_instance`] of the log it was cleaned from.
    pub log_instance: u64,
    /// The segments the cleaned file replaces, in offset order (at least one).
    pub replaced: Vec<SealedSegment>,
    /// The cleaned file's size.
    pub bytes_after: u64,
    /// Records in the group's segments, and in the cleaned file.
    pub records_before: u64,
    pub records_kept: u64,
}

impl CleanedGroup {
    pub fn base_offset(&self) -> Offset {
        self.replaced
            .first()
            .map_or(Offset(0), |first| first.base_offset)
    }

    pub fn bytes_before(&self) -> u64 {
        self.replaced.iter().map(|segment| segment.size_bytes).sum()
    }
}

/// The owner's answer to a cleaned group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapOutcome {
    /// The cleaned segment replaced the group.
    Swapped,
    /// The log no longer holds exactly the group's segments (retention deleted one, the log was
    /// reopened or deleted): nothing was replaced, and the cleaned file is to be removed.
    Stale,
}

/// What cleaning one log did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionOutcome {
    /// Sealed segments rewritten (several may become one).
    pub segments_cleaned: usize,
    /// Segments written in their place.
    pub segments_written: usize,
    /// Bytes of the rewritten segments' `.log` files.
    pub bytes_before: u64,
    /// Bytes of the `.log` files written in their place.
    pub bytes_after: u64,
    /// Records in the rewritten segments.
    pub records_before: u64,
    /// How many of those records the cleaning kept.
    pub records_kept: u64,
    /// The next round's first dirty offset: the first offset this round's map did not cover.
    pub first_dirty_offset: Offset,
    /// The map filled before the cleanable end: another round is needed.
    pub map_full: bool,
    /// The log changed under the cleaner; what was swapped stays, the rest waits for next time.
    pub stale: bool,
}

/// Cleans logs with one dedupe map, reading and writing through `storage`, reporting every byte
/// read or written to `throttle` (the I/O rate limit).
pub struct LogCleaner<'a> {
    pub storage: &'a dyn Storage,
    pub map: &'a mut OffsetMap,
    pub throttle: &'a mut dyn FnMut(u64),
}

impl LogCleaner<'_> {
    /// One round over `log` from `first_dirty_offset` at time `now`: pass one, then pass two
    /// group by group, each cleaned group handed to `swap` before the next is written.
    pub fn clean(
        &mut self,
        log: &CleanableLog,
        first_dirty_offset: Offset,
        now: TimestampMs,
        mut swap: impl FnMut(&CleanedGroup) -> Result<SwapOutcome, StorageError>,
    ) -> Result<CompactionOutcome, StorageError> {
        // Not raised to the log start (Kafka raises it): a tombstone below the log start must
        // still remove its key's older values, or they outlive it, and the log start offset,
        // checkpointed lazily, may fall back after a crash and serve them again (fuzz finding
        // F13). Segments wholly below the log start are retention's, and go anyway.
        let first_dirty = first_dirty_offset;
        let cleanable_end = log.cleanable_end(now).max(first_dirty);
        let mapped = match self.build_map(log, first_dirty, cleanable_end)? {
            Some(mapped) => mapped,
            None => return Ok(stale(first_dirty_offset)),
        };
        let mut outcome = CompactionOutcome {
            first_dirty_offset: Offset(mapped.end),
            map_full: mapped.full,
            ..CompactionOutcome::default()
        };
        if self.map.is_empty() {
            return Ok(outcome);
        }
        let rules = CleanRules {
            mapped_end: mapped.end,
            now_ms: now.0,
            delete_retention_ms: i64::try_from(log.config.delete_retention_ms).unwrap_or(i64::MAX),
        };
        for group in group_segments(log, Offset(mapped.end)) {
            let Some(cleaned) = self.clean_group(log, group, &rules)? else {
                return Ok(stale(first_dirty_offset));
            };
            if swap(&cleaned)? == SwapOutcome::Stale {
                remove_cleaned(self.storage, &log.dir, cleaned.base_offset())?;
                return Ok(stale(first_dirty_offset));
            }
            outcome.segments_cleaned += cleaned.replaced.len();
            outcome.segments_written += 1;
            outcome.bytes_before += cleaned.bytes_before();
            outcome.bytes_after += cleaned.bytes_after;
            outcome.records_before += cleaned.records_before;
            outcome.records_kept += cleaned.records_kept;
        }
        Ok(outcome)
    }

    /// Pass one over the sealed segments holding `first_dirty..cleanable_end`. `None` when a
    /// segment is gone (the log changed).
    fn build_map(
        &mut self,
        log: &CleanableLog,
        first_dirty: Offset,
        cleanable_end: Offset,
    ) -> Result<Option<MappedRange>, StorageError> {
        self.map.clear();
        let range = first_dirty.0..cleanable_end.0;
        let mut mapped = MappedRange {
            end: range.end,
            full: false,
        };
        let dirty_segments = log.sealed.iter().filter(|segment| {
            segment.next_offset > first_dirty && segment.base_offset < cleanable_end
        });
        for segment in dirty_segments {
            let Some(reader) = SegmentReader::open(self.storage, &log.dir, segment)? else {
                return Ok(None);
            };
            let map = &mut *self.map;
            reader.for_each_batch(self.throttle, |batch| {
                // Batches come in offset order, so the same range serves every call.
                let built = build_offset_map([batch], map, range.clone())?;
                if built.full {
                    mapped = MappedRange {
                        end: built.mapped_end,
                        full: true,
                    };
                }
                Ok(!built.full)
            })?;
            if mapped.full {
                break;
            }
        }
        Ok(Some(mapped))
    }

    /// Pass two for one group: its kept batches streamed into the `.cleaned` file, synced.
    /// `None` when a segment of the group is gone.
    fn clean_group(
        &mut self,
        log: &CleanableLog,
        group: &[SealedSegment],
        rules: &CleanRules,
    ) -> Result<Option<CleanedGroup>, StorageError> {
        let Some(first) = group.first() else {
            return Ok(None);
        };
        let mut writer = CleanedWriter::create(self.storage, &log.dir, first.base_offset)?;
        let (mut records_before, mut records_kept) = (0u64, 0u64);
        for segment in group {
            let Some(reader) = SegmentReader::open(self.storage, &log.dir, segment)? else {
                drop(writer);
                remove_cleaned(self.storage, &log.dir, first.base_offset)?;
                return Ok(None);
            };
            let map = &*self.map;
            let mut written = 0;
            reader.for_each_batch(self.throttle, |batch| {
                records_before += records_count(batch.bytes());
                if let Some(bytes) = clean_batch(batch, map, rules)? {
                    records_kept += records_count(&bytes);
                    written += bytes.len() as u64;
                    writer.push(&bytes).map_err(CleanError::Storage)?;
                }
                Ok(true)
            })?;
            (self.throttle)(written);
        }
        let bytes_after = writer.finish()?;
        // Checked and indexed here, off the owner's thread: the swap then reads nothing.
        let now = TimestampMs(rules.now_ms);
        Segment::prepare_cleaned(self.storage, &log.dir, first.base_offset, &log.config, now)?;
        failpoint!("compaction.after_cleaned_written");
        Ok(Some(CleanedGroup {
            log_instance: log.log_instance,
            replaced: group.to_vec(),
            bytes_after,
            records_before,
            records_kept,
        }))
    }
}

/// The `recordsCount` of a batch's header (0 if the header does not parse: the batch was checked
/// already, so that does not happen).
fn records_count(batch: &[u8]) -> u64 {
    BatchHeader::parse(batch).map_or(0, |header| u64::try_from(header.records_count).unwrap_or(0))
}

fn stale(first_dirty_offset: Offset) -> CompactionOutcome {
    CompactionOutcome {
        first_dirty_offset,
        stale: true,
        ..CompactionOutcome::default()
    }
}

/// What pass one covered.
struct MappedRange {
    /// The first offset not in the map.
    end: u64,
    full: bool,
}

/// The sealed segments below `mapped_end`, in groups that each become one cleaned segment.
fn group_segments(log: &CleanableLog, mapped_end: Offset) -> Vec<&[SealedSegment]> {
    let cleanable_count = log
        .sealed
        .iter()
        .take_while(|segment| segment.base_offset < mapped_end)
        .count();
    let mut groups = Vec::new();
    let mut rest = &log.sealed[..cleanable_count];
    while !rest.is_empty() {
        let length = group_length(rest, &log.config);
        let (group, tail) = rest.split_at(length);
        groups.push(group);
        rest = tail;
    }
    groups
}

/// How many of `segments` (at least one) go into one cleaned segment: while their bytes fit
/// `segment.bytes`, their offsets fit the indexes' 32-bit relative offsets, and the index entries
/// a rebuild could need fit `segment.index.bytes`.
fn group_length(segments: &[SealedSegment], config: &LogConfig) -> usize {
    let Some(first) = segments.first() else {
        return 0;
    };
    let mut bytes = 0u64;
    let mut length = 0;
    for segment in segments {
        let group_bytes = bytes + segment.size_bytes;
        let offsets = segment.next_offset.0.saturating_sub(first.base_offset.0);
        let index_entries = group_bytes / config.index_interval_bytes.max(1) + 1;
        let fits = group_bytes <= config.segment_bytes
            && offsets <= i32::MAX as u64
            && index_entries * TIME_INDEX_ENTRY_BYTES as u64 <= config.segment_index_bytes;
        if length > 0 && !fits {
            break;
        }
        bytes = group_bytes;
        length += 1;
    }
    length
}

/// Why reading a segment stopped.
pub(crate) enum CleanError {
    Compact(CompactError),
    Storage(StorageError),
}

impl From<CompactError> for CleanError {
    fn from(error: CompactError) -> Self {
        CleanError::Compact(error)
    }
}

/// One sealed segment's `.log`, opened by the cleaner on its own.
pub(crate) struct SegmentReader {
    path: PathBuf,
    file: Box<dyn StorageFile>,
    size_bytes: u64,
}

impl SegmentReader {
    /// `None` if the segment's file is gone (retention deleted it since the snapshot).
    pub(crate) fn open(
        storage: &dyn Storage,
        dir: &Path,
        segment: &SealedSegment,
    ) -> Result<Option<SegmentReader>, StorageError> {
        let path = segment_file(
            dir,
            segment.base_offset,
            SegmentFileKind::Log,
            FileState::Live,
        );
        match storage.open(&path, OpenMode::Existing) {
            Ok(file) => Ok(Some(SegmentReader {
                path,
                file,
                size_bytes: segment.size_bytes,
            })),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StorageError::io("open", &path, source)),
        }
    }

    /// Calls `visit` with each batch (CRC checked) up to the snapshot's size, until it returns
    /// false; each batch's bytes count against the throttle.
    pub(crate) fn for_each_batch(
        &self,
        throttle: &mut dyn FnMut(u64),
        mut visit: impl FnMut(&crate::format::Batch) -> Result<bool, CleanError>,
    ) -> Result<(), StorageError> {
        let mut scanner = LogScanner::new(self.file.as_ref(), &self.path, 0, self.size_bytes);
        loop {
            match scanner.next_batch()? {
                ScanStep::Item { item, position } => {
                    throttle(scanner.position() - position);
                    match visit(&item) {
                        Ok(true) => {}
                        Ok(false) => return Ok(()),
                        Err(CleanError::Storage(error)) => return Err(error),
                        Err(CleanError::Compact(error)) => {
                            return Err(self.corrupt(position, error.to_string()));
                        }
                    }
                }
                ScanStep::End => return Ok(()),
                ScanStep::Invalid { position, error } => {
                    return Err(self.corrupt(position, error.to_string()));
                }
            }
        }
    }

    fn corrupt(&self, position: u64, reason: String) -> StorageError {
        StorageError::Corrupt {
            file: self.path.clone(),
            position,
            reason: format!("compaction: {reason}"),
        }
    }
}

/// Step 1 of the swap: cleaned batches streamed into `<base>.log.cleaned` in writes of
/// [`CLEANED_WRITE_BYTES`], then synced; memory stays bounded however large the group.
struct CleanedWriter {
    path: PathBuf,
    file: Box<dyn StorageFile>,
    position: u64,
    buffer: Vec<u8>,
}

impl CleanedWriter {
    fn create(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: Offset,
    ) -> Result<Self, StorageError> {
        let path = segment_file(dir, base_offset, SegmentFileKind::Log, FileState::Cleaned);
        let file = storage
            .open(&path, OpenMode::CreateOrOpen)
            .map_err(|source| StorageError::io("create", &path, source))?;
        file.set_length_bytes(0)
            .map_err(|source| StorageError::io("truncate", &path, source))?;
        Ok(CleanedWriter {
            path,
            file,
            position: 0,
            buffer: Vec::with_capacity(CLEANED_WRITE_BYTES),
        })
    }

    fn push(&mut self, batch: &[u8]) -> Result<(), StorageError> {
        self.buffer.extend_from_slice(batch);
        if self.buffer.len() >= CLEANED_WRITE_BYTES {
            self.write_buffer()?;
        }
        Ok(())
    }

    fn write_buffer(&mut self) -> Result<(), StorageError> {
        self.file
            .write_all_at(&self.buffer, self.position)
            .map_err(|source| StorageError::io("write", &self.path, source))?;
        self.position += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    /// Writes what is buffered and syncs the file. Returns its size.
    fn finish(mut self) -> Result<u64, StorageError> {
        self.write_buffer()?;
        self.file
            .sync_data()
            .map_err(|source| StorageError::io("fdatasync", &self.path, source))?;
        Ok(self.position)
    }
}

/// Removes the `.cleaned` files that will not be swapped in (missing already is fine).
fn remove_cleaned(
    storage: &dyn Storage,
    dir: &Path,
    base_offset: Offset,
) -> Result<(), StorageError> {
    for kind in SegmentFileKind::ALL {
        let path = segment_file(dir, base_offset, kind, FileState::Cleaned);
        match storage.remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(StorageError::io("remove", &path, source)),
        }
    }
    Ok(())
}

/// The path of the `kind` file of the segment at `base_offset` in `state`.
pub(crate) fn segment_file(
    dir: &Path,
    base_offset: Offset,
    kind: SegmentFileKind,
    state: FileState,
) -> PathBuf {
    SegmentFileName::live(base_offset, kind)
        .with_state(state)
        .path_in(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(base: u64, next: u64, size_bytes: u64, largest: Option<i64>) -> SealedSegment {
        SealedSegment {
            base_offset: Offset(base),
            next_offset: Offset(next),
            size_bytes,
            largest_timestamp_ms: largest,
        }
    }

    fn log(sealed: Vec<SealedSegment>, config: LogConfig) -> CleanableLog {
        CleanableLog {
            topic_partition: TopicPartition {
                topic: crate::types::TopicName::parse("t").unwrap(),
                partition: 0,
            },
            log_instance: 1,
            dir: PathBuf::from("/nowhere"),
            config,
            log_start_offset: Offset(0),
            cleaned_end: Offset(0),
            sealed,
        }
    }

    #[test]
    fn min_compaction_lag_stops_the_cleanable_end_at_the_first_recent_segment() {
        let config = LogConfig {
            min_compaction_lag_ms: 1_000,
            ..LogConfig::default()
        };
        let sealed = vec![
            segment(0, 10, 100, Some(500)),
            segment(10, 20, 100, Some(1_500)),
            segment(20, 30, 100, Some(900)),
        ];
        let log = log(sealed, config);
        assert_eq!(log.cleanable_end(TimestampMs(2_000)), Offset(10));
        assert_eq!(log.cleanable_end(TimestampMs(2_500)), Offset(30));
        assert_eq!(
            log.cleanable_bytes(Offset(0), TimestampMs(2_000)),
            (0, 100),
            "bytes beyond the cleanable end are neither clean nor dirty"
        );
        assert_eq!(
            log.cleanable_bytes(Offset(10), TimestampMs(2_500)),
            (100, 200)
        );
    }

    #[test]
    fn without_a_lag_every_sealed_segment_is_cleanable() {
        let sealed = vec![segment(0, 10, 100, Some(i64::MAX))];
        let log = log(sealed, LogConfig::default());
        assert_eq!(log.cleanable_end(TimestampMs(0)), Offset(10));
    }

    #[test]
    fn groups_fill_a_segment_and_stop_below_the_mapped_end() {
        let config = LogConfig {
            segment_bytes: 250,
            ..LogConfig::default()
        };
        let sealed = vec![
            segment(0, 10, 100, None),
            segment(10, 20, 100, None),
            segment(20, 30, 100, None),
            segment(30, 40, 300, None),
            segment(40, 50, 10, None),
            segment(50, 60, 10, None),
        ];
        let log = log(sealed, config);
        let bases = |groups: Vec<&[SealedSegment]>| -> Vec<Vec<u64>> {
            groups
                .iter()
                .map(|group| group.iter().map(|segment| segment.base_offset.0).collect())
                .collect()
        };
        assert_eq!(
            bases(group_segments(&log, Offset(55))),
            vec![vec![0, 10], vec![20], vec![30], vec![40, 50]],
            "an oversized segment is a group of its own"
        );
        assert_eq!(
            bases(group_segments(&log, Offset(40))),
            vec![vec![0, 10], vec![20], vec![30]]
        );
    }

    #[test]
    fn groups_keep_offsets_within_relative_offset_range() {
        let sealed = vec![
            segment(0, 10, 1, None),
            segment(10, i32::MAX as u64 + 5, 1, None),
        ];
        let log = log(sealed, LogConfig::default());
        assert_eq!(group_segments(&log, Offset(u64::MAX)).len(), 2);
    }
}
