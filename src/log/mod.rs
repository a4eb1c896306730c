//! One partition's log: ordered segments, offsets, rolling, reads by offset and by time, the log
//! start offset, truncation and flushing (Kafka's `UnifiedLog` + `LocalLog`, for one replica).
//!
//! Invariants: there is always at least one segment; segments are sorted by base offset and do not
//! overlap; only the last (active) segment is appended to; every other segment is sealed (indexes
//! trimmed, data synced). `log_start_offset <= log_end_offset`, and the recovery point only moves
//! forward when an `fdatasync` of the data below it has succeeded.

mod append;
pub(crate) mod cleaned_end;
mod compaction;
mod open;
pub mod producer_state;
mod producers;
mod retention;
mod seal_sync;
mod segments;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::config::{ConfigError, FlushPolicy, LogConfig};
use crate::error::{DeleteRecordsError, ReadError, StorageError};
use crate::failpoint::failpoint;
use crate::format::batch::BatchIter;
use crate::index::time_index::TimestampOffset;
use crate::io::{Storage, StorageFile};
use crate::segment::{ActiveSegment, Segment};
pub use crate::segment::{DigestBudget, RecordRead};
use segments::{SegmentList, SegmentSlot};

use crate::types::{Offset, TimestampMs, TopicPartition};
pub use segments::SEALED_OPEN_MAX;

pub use crate::cleaner::log_cleaner::CompactionOutcome;

/// How a log's owner writes it: the engine's settings, the same for every partition it opens,
/// never a topic's (`LogConfig`) and never saved. The defaults are a standalone log's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogWriteMode {
    /// Write the active segment's `.log` with `O_DIRECT` where the file system allows it
    /// (`EngineConfig::direct_writes`).
    pub direct_writes: bool,
    /// While syncs each cover little, prewrite the space ahead of the appends (stamped zeros,
    /// `format::prewrite`), so that `fdatasync`s rewrite allocated blocks instead of growing the
    /// file (`EngineConfig::prewrite_synced_logs`).
    pub prewrite_synced: bool,
    /// An idempotent producer whose last batch's timestamp is this long before the append time
    /// is forgotten (Kafka's `producer.id.expiration.ms`; `EngineConfig::producer_id_expiration_ms`).
    pub producer_id_expiration_ms: i64,
}

/// Kafka's default `producer.id.expiration.ms`: a day.
pub const PRODUCER_ID_EXPIRATION_MS_DEFAULT: i64 = 24 * 60 * 60 * 1000;

impl Default for LogWriteMode {
    fn default() -> LogWriteMode {
        LogWriteMode {
            direct_writes: false,
            prewrite_synced: true,
            producer_id_expiration_ms: PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        }
    }
}
pub use append::{AppendInfo, AppendOutcome, ValidatedBatches};
pub(crate) use open::closed_log_files;
pub use open::{DirSync, LogOpenOptions, RecoveryReport};
pub use retention::RetentionOutcome;
pub use seal_sync::UnsyncedSeal;

/// The result of a read: whole batches, and the log's bounds at the time of the read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchData {
    /// Whole batches, starting with the batch that holds the requested offset. Empty when the
    /// requested offset is the log end offset.
    pub records: Bytes,
    /// The log start offset at the time of the read.
    pub log_start_offset: Offset,
    /// The log end offset at the time of the read.
    pub log_end_offset: Offset,
    /// Every offset below this is durable (the recovery point).
    pub durable_offset: Offset,
}

impl FetchData {
    /// The fetched batches, in order. The engine checked each one's CRC before serving it, so
    /// they are not checked again (`BatchIter::without_crc_check`); framing and headers are.
    pub fn batches(&self) -> BatchIter {
        BatchIter::without_crc_check(self.records.clone(), u64::MAX)
    }

    /// Keeps only the batches that end below `visible_end` (a durable-only read).
    pub fn trim_to(mut self, visible_end: Offset) -> FetchData {
        let mut length = 0usize;
        while let Ok(header) = crate::format::BatchHeader::parse(&self.records[length..]) {
            let end = length as u64 + header.size_bytes();
            if end > self.records.len() as u64 || header.last_offset() >= visible_end.0 as i64 {
                break;
            }
            length = end as usize;
        }
        self.records.truncate(length);
        self
    }
}

/// A summary of one segment, for tools and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub base_offset: Offset,
    pub next_offset: Offset,
    pub size_bytes: u64,
    pub offset_index_entries: usize,
    pub time_index_entries: usize,
}

/// One partition's log.
#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    topic_partition: TopicPartition,
    config: LogConfig,
    mode: LogWriteMode,
    storage: Arc<dyn Storage>,
    /// Sorted by base offset; the last one is active. Never empty.
    segments: SegmentList,
    log_start_offset: Offset,
    recovery_point: Offset,
    unflushed_records: u64,
    first_unflushed_at: Option<TimestampMs>,
    /// Bytes appended since the last sync (or the log opened): what the next sync covers.
    bytes_since_sync: u64,
    /// What the syncs covered, a moving average (the last sync weighs a quarter).
    sync_bytes_average: u64,
    /// Bytes appended since a sync covered the log end or was asked for in the background
    /// ([`PartitionLog::take_background_sync`]).
    bytes_since_background_sync: u64,
    /// How far ahead of its appends the active segment prewrites (`prewrite_bytes_for`).
    prewrite_bytes: u64,
    /// Why the log went offline: the first failed write, sync or rename (`None` while it serves).
    /// An offline log refuses appends and fetches until reopened, through recovery.
    failure: Option<String>,
    /// Deleted segments whose `.deleted` files wait for `file.delete.delay.ms`.
    pending_deletions: Vec<retention::PendingDeletion>,
    /// Whether `.deleted` renames wait for a directory sync the owner runs (`retention.rs`).
    renames_sync: retention::RenamesSync,
    /// This opening of the log, unique in the process (see `CleanableLog::log_instance`).
    instance: u64,
    /// Segments based at or above this were never rewritten by the cleaner: their offsets are
    /// dense (`cleaned_end.rs`; 0 for a log never compacted).
    cleaned_end: Offset,
    /// What point lookups' batch digests may take (`segment/lookup.rs`): unlimited unless the
    /// owner sets one it shares with other logs (`set_digest_budget`).
    digest_budget: DigestBudget,
    /// Sealed segments whose sync the owner has not taken yet (`seal_sync.rs`).
    unsynced_seals: Vec<UnsyncedSeal>,
    /// The ends of the sealed segments whose seal sync has not been reported yet, oldest first
    /// (taken or not): until then a segment's files may not be as sealed on the device (the
    /// trims), so the cleaner leaves it alone.
    pending_seal_ends: std::collections::VecDeque<Offset>,
    /// The idempotent producers' state as of the log end (`producer_state.rs`).
    producers: producer_state::ProducerStateTable,
    /// When expired producers were last forgotten (`producers.rs`); `None`: not since open.
    producers_expired_at: Option<TimestampMs>,
}

impl PartitionLog {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn topic_partition(&self) -> &TopicPartition {
        &self.topic_partition
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Changes the log's configuration while it serves (Kafka's `UnifiedLog.updateConfig`),
    /// refusing an invalid one. What reads the configuration as it runs follows at once: the
    /// appends' validation (`max.message.bytes`, null keys in a compacted log), the roll rules
    /// (`segment.bytes`, `segment.ms`: an active segment already past a lowered bound rolls at
    /// the next append), `message.timestamp.type`, `index.interval.bytes`, the flush policy,
    /// retention (`retention.ms`, `retention.bytes`, `cleanup.policy`, at its next pass),
    /// `file.delete.delay.ms` (for segments deleted from then on) and the cleaner's settings.
    /// What a segment fixes when it is created applies from the next one: the indexes' size
    /// (`segment.index.bytes`) and the active `.log`'s preallocation (`preallocate`). Offsets the
    /// cleaner left with gaps stay read as such whatever the new `cleanup.policy` (the log's
    /// cleaned end is kept).
    pub fn set_config(&mut self, config: LogConfig) -> Result<(), ConfigError> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    pub fn log_start_offset(&self) -> Offset {
        self.log_start_offset
    }

    /// The offset the next appended record gets.
    pub fn log_end_offset(&self) -> Offset {
        self.active().next_offset()
    }

    /// Every offset below this is durable.
    pub fn recovery_point(&self) -> Offset {
        self.recovery_point
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments
            .slots()
            .iter()
            .map(SegmentSlot::size_bytes)
            .sum()
    }

    /// The most [`PartitionLog::open_segment_files`] can be.
    pub const OPEN_SEGMENT_FILES_MAX: usize = 1 + SEALED_OPEN_MAX + 1;

    /// Descriptors open now on this log's `.log` files: one per open segment (which also holds
    /// two index maps), and a second one on an active segment written with `O_DIRECT`.
    pub fn open_segment_files(&self) -> usize {
        let direct = self
            .segments
            .active()
            .is_some_and(ActiveSegment::writes_direct);
        self.segments.open_count() + usize::from(direct)
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn segments(&self) -> impl Iterator<Item = SegmentInfo> + '_ {
        self.segments.slots().iter().map(|slot| {
            let (offset_index_entries, time_index_entries) = slot.index_entry_counts();
            SegmentInfo {
                base_offset: slot.base_offset(),
                next_offset: slot.next_offset(),
                size_bytes: slot.size_bytes(),
                offset_index_entries,
                time_index_entries,
            }
        })
    }

    /// Lowers the recovery point to `synced` for a log released and reopened in this process:
    /// its files are trusted (this process wrote them), but only what its syncs covered is
    /// durable, and the open took the log end for it.
    pub(crate) fn limit_recovery_point(&mut self, synced: Offset) {
        self.recovery_point = self.recovery_point.min(synced);
    }

    /// True after an I/O error on a write, sync or rename: the log is offline, refusing appends
    /// and fetches until reopened.
    pub fn is_failed(&self) -> bool {
        self.failure.is_some()
    }

    /// The error that took the log offline, if one did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Takes the log offline on `result`'s error (the first error is the one reported after).
    fn fail_on<T>(&mut self, result: Result<T, StorageError>) -> Result<T, StorageError> {
        if let Err(error) = &result {
            self.failure.get_or_insert_with(|| error.cause());
        }
        result
    }

    fn active(&self) -> &ActiveSegment {
        self.segments.active().expect_active()
    }

    fn active_mut(&mut self) -> &mut ActiveSegment {
        self.segments.active_mut().expect_active()
    }

    /// The segment at `index`, opened if its files were released.
    fn open_segment(&mut self, index: usize) -> Result<&Segment, StorageError> {
        let dense_from = self.cleaned_end;
        self.segments
            .open(index, self.storage.as_ref(), &self.dir, (&self.config, dense_from))
    }

    /// Reads whole batches starting with the batch that holds `offset`, up to `max_bytes` but
    /// always at least one whole batch (Kafka's rule, so that a consumer always progresses).
    pub fn read(&mut self, offset: Offset, max_bytes: u64) -> Result<FetchData, ReadError> {
        let log_end_offset = self.check_readable(offset)?;
        let mut records = Bytes::new();
        for index in self.segments.floor_index(offset)..self.segments.len() {
            let dense = self.is_dense(index);
            let segment = self.open_segment(index)?;
            if let Some(read) = segment.read_from(offset, max_bytes, dense)? {
                records = read;
                break;
            }
        }
        Ok(FetchData {
            records,
            log_start_offset: self.log_start_offset,
            log_end_offset,
            durable_offset: self.recovery_point,
        })
    }

    /// The record at `offset` (a point lookup: `Segment::read_record`). `Absent` at the log end.
    pub fn read_record(&mut self, offset: Offset) -> Result<RecordRead, ReadError> {
        self.check_readable(offset)?;
        for index in self.segments.floor_index(offset)..self.segments.len() {
            let dense = self.is_dense(index);
            let segment = self.segments.open(
                index,
                self.storage.as_ref(),
                &self.dir,
                (&self.config, self.cleaned_end),
            )?;
            match segment.read_record(offset, dense, &self.digest_budget)? {
                RecordRead::PastEnd => {}
                read => return Ok(read),
            }
        }
        Ok(RecordRead::Absent)
    }

    /// Shares `budget` for point lookups' digests with the other logs that hold it (an engine
    /// shard's), from the next digest on.
    pub fn set_digest_budget(&mut self, budget: DigestBudget) {
        self.digest_budget = budget;
    }

    /// The log end offset, once `offset` is within the log (`OffsetOutOfRange` otherwise).
    fn check_readable(&self, offset: Offset) -> Result<Offset, ReadError> {
        self.check_not_failed()?;
        let log_end_offset = self.log_end_offset();
        if offset < self.log_start_offset || offset > log_end_offset {
            return Err(ReadError::OffsetOutOfRange {
                requested: offset,
                log_start_offset: self.log_start_offset,
                log_end_offset,
            });
        }
        Ok(log_end_offset)
    }

    /// Offsets are dense unless the cleaner may have left gaps: never in the active (last)
    /// segment, which it does not touch, nor above the cleaned end.
    fn is_dense(&self, index: usize) -> bool {
        index + 1 == self.segments.len()
            || self.segments.slots()[index].base_offset() >= self.cleaned_end
    }

    /// The first offset whose record has a timestamp `>= target`, with that timestamp (Kafka's
    /// ListOffsets by time). `None` if every record is older.
    pub fn read_by_timestamp(
        &mut self,
        target: TimestampMs,
    ) -> Result<Option<TimestampOffset>, ReadError> {
        self.check_not_failed()?;
        let log_start_offset = self.log_start_offset;
        for index in 0..self.segments.len() {
            let slot = &self.segments.slots()[index];
            let newer = slot
                .max_timestamp()
                .is_some_and(|max| max.timestamp >= target);
            if !newer || slot.next_offset() <= log_start_offset {
                continue;
            }
            let segment = self.open_segment(index)?;
            if let Some(found) = segment.find_offset_by_timestamp(target, log_start_offset)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// Moves the log start offset to `offset` (Kafka's DeleteRecords) and deletes the sealed
    /// segments that hold only offsets below it (their files due for unlinking
    /// `file.delete.delay.ms` after `now`). Returns the new log start offset.
    pub fn delete_records(
        &mut self,
        offset: Offset,
        now: TimestampMs,
    ) -> Result<Offset, DeleteRecordsError> {
        self.check_not_failed()?;
        let log_end_offset = self.log_end_offset();
        if offset > log_end_offset {
            return Err(DeleteRecordsError::OffsetOutOfRange {
                requested: offset,
                log_start_offset: self.log_start_offset,
                log_end_offset,
            });
        }
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            self.delete_segments_below_log_start(now)?;
            self.remove_producer_snapshots(|snapshot| snapshot < offset)?;
        }
        Ok(self.log_start_offset)
    }

    fn delete_segments_below_log_start(&mut self, now: TimestampMs) -> Result<(), StorageError> {
        let deletable = self
            .segments
            .slots()
            .windows(2)
            .take_while(|pair| pair[1].base_offset() <= self.log_start_offset)
            .count();
        if deletable > 0 {
            self.delete_leading_segments(deletable, now)?;
        }
        Ok(())
    }

    /// Removes every record at or after `offset` (whole batches): recovery's cut, and a replica
    /// dropping a suffix its leader does not have. A cut below the log start offset empties the
    /// log (it then starts at the first segment's base). A failure fails the log.
    pub fn truncate_to(&mut self, offset: Offset) -> Result<(), StorageError> {
        self.check_not_failed()?;
        self.sync_untaken_seals()?;
        if offset >= self.log_end_offset() {
            return Ok(());
        }
        let result = self.cut_segments_from(offset).and_then(|()| {
            // Snapshots above the new end describe batches that are gone.
            let log_end_offset = self.log_end_offset();
            self.remove_producer_snapshots(|snapshot| snapshot > log_end_offset)?;
            self.rebuild_producer_state()
        });
        self.fail_on(result)?;
        // A cleaned group read before the cut must not be swapped in after it.
        self.instance = open::next_log_instance();
        self.sync_dir()
    }

    fn cut_segments_from(&mut self, offset: Offset) -> Result<(), StorageError> {
        let keep = self.segments.count_at_or_below(offset).max(1);
        let removed =
            self.segments
                .truncate_from(
                    keep,
                    self.storage.as_ref(),
                    &self.dir,
                    (&self.config, self.cleaned_end),
                )?;
        for slot in removed {
            slot.delete(self.storage.as_ref(), &self.dir)?;
        }
        let config = self.config.clone();
        let storage = self.storage.clone();
        let direct_writes = self.mode.direct_writes;
        let active = self.active_mut();
        active.truncate_to(offset)?;
        active.prepare_appends(storage.as_ref(), &config, direct_writes)?;
        let log_end_offset = self.log_end_offset();
        self.log_start_offset = self.log_start_offset.min(log_end_offset);
        self.recovery_point = self.recovery_point.min(log_end_offset);
        self.pending_seal_ends.retain(|end| *end <= log_end_offset);
        Ok(())
    }

    /// Removes every segment and starts the log over, empty, at `offset` (log start and end): a
    /// replica catching up from its leader's log start (Kafka's `truncateFullyAndStartAt`). The
    /// old files are unlinked at once; a crash midway leaves a log that ends below `offset`,
    /// which its owner restarts again. A failure fails the log.
    pub fn truncate_fully_and_start_at(
        &mut self,
        offset: Offset,
        now: TimestampMs,
    ) -> Result<(), StorageError> {
        self.check_not_failed()?;
        self.sync_untaken_seals()?;
        let result = self.start_over_at(offset, now);
        self.fail_on(result)?;
        self.instance = open::next_log_instance();
        self.sync_dir()
    }

    fn start_over_at(&mut self, offset: Offset, now: TimestampMs) -> Result<(), StorageError> {
        // Every snapshot describes batches that go: removed first, so that none outlives them.
        self.remove_producer_snapshots(|_| true)?;
        let reuses_a_name = self
            .segments
            .slots()
            .iter()
            .any(|slot| slot.base_offset() == offset);
        if reuses_a_name {
            // The segment named `offset` becomes the empty active one; those before it go.
            self.cut_segments_from(offset)?;
            let leading = self.segments.len() - 1;
            for slot in self.segments.drain_front(leading) {
                slot.delete(self.storage.as_ref(), &self.dir)?;
            }
        } else {
            self.replace_with_empty_segment(offset, now)?;
            let config = self.config.clone();
            let storage = self.storage.clone();
            let direct_writes = self.mode.direct_writes;
            self.active_mut()
                .prepare_appends(storage.as_ref(), &config, direct_writes)?;
        }
        self.log_start_offset = offset;
        self.recovery_point = offset;
        self.pending_seal_ends.clear();
        self.producers.clear();
        Ok(())
    }

    /// Unlinks every segment, leaving one new empty active segment at `base_offset` (whose
    /// name no segment may hold).
    pub(super) fn replace_with_empty_segment(
        &mut self,
        base_offset: Offset,
        now: TimestampMs,
    ) -> Result<(), StorageError> {
        let segment = ActiveSegment::create(
            self.storage.as_ref(),
            &self.dir,
            base_offset,
            &self.config,
            self.mode.direct_writes,
            now,
        )?;
        for slot in self.segments.replace_all(segment) {
            slot.delete(self.storage.as_ref(), &self.dir)?;
        }
        Ok(())
    }

    /// Makes every appended byte durable and moves the recovery point to the log end offset.
    pub fn flush(&mut self) -> Result<(), StorageError> {
        self.check_not_failed()?;
        self.sync_untaken_seals()?;
        let log_end_offset = self.log_end_offset();
        failpoint!("flush.before_sync");
        // The sync waits for the writes behind; one that failed fails the log, synced or not.
        let active = self.active();
        let result = active.flush_log().and_then(|()| active.take_write_error());
        self.mark_flushed(log_end_offset, result)?;
        failpoint!("flush.after_sync");
        Ok(())
    }

    /// Path of the active segment's `.log`, for error context.
    pub fn active_log_path(&self) -> &Path {
        self.active().log_path()
    }

    /// The active segment's `.log`, for a caller that syncs many partitions' files together
    /// (group commit). Report the outcome with [`PartitionLog::mark_flushed`].
    pub fn active_log_file(&self) -> Arc<dyn StorageFile> {
        self.active().shared_log_file()
    }

    /// After a sync: prewrites ahead of the appends while the syncs cover little on average
    /// (`EngineConfig::prewrite_synced_logs`), not while they are large or absent.
    fn adapt_prewrite(&mut self) {
        let synced_bytes = std::mem::take(&mut self.bytes_since_sync);
        if synced_bytes == 0 {
            return;
        }
        self.sync_bytes_average = match self.sync_bytes_average {
            0 => synced_bytes,
            average => (average * 3 + synced_bytes) / 4,
        };
        self.prewrite_bytes = match self.mode.prewrite_synced {
            true => prewrite_bytes_for(self.sync_bytes_average, self.config.segment_bytes),
            false => 0,
        };
        let prewrite_bytes = self.prewrite_bytes;
        self.active_mut().set_prewrite_bytes(prewrite_bytes);
    }

    /// Records the outcome of a sync of the active `.log` that covered every offset below
    /// `through`: success moves the recovery point; failure fails the log until it is reopened,
    /// so nothing is acknowledged as durable after a failed sync.
    pub fn mark_flushed(
        &mut self,
        through: Offset,
        result: Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        self.record_sync(through, result)?;
        self.adapt_prewrite();
        if through >= self.log_end_offset() {
            self.unflushed_records = 0;
            self.first_unflushed_at = None;
            self.bytes_since_background_sync = 0;
        }
        Ok(())
    }

    /// A sync that covered every offset below `through` (at most the log end): success moves the
    /// recovery point there, failure fails the log.
    fn record_sync(
        &mut self,
        through: Offset,
        result: Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        self.fail_on(result)?;
        self.recovery_point = self.recovery_point.max(through.min(self.log_end_offset()));
        self.active_mut().note_synced();
        Ok(())
    }

    /// Whether `threshold_bytes` (> 0) or more were appended since a sync covered the log end or
    /// was last asked for here: the caller then syncs the active `.log` in the background, so that
    /// the dirty pages a roll's sync (or the kernel's writeback) must write at once stay bounded.
    /// Counts from zero again when it answers yes.
    pub fn take_background_sync(&mut self, threshold_bytes: u64) -> bool {
        let due = threshold_bytes > 0 && self.bytes_since_background_sync >= threshold_bytes;
        if due {
            self.bytes_since_background_sync = 0;
        }
        due
    }

    /// Whether the flush policy asks for a sync now.
    pub fn flush_due(&self, now: TimestampMs) -> bool {
        if self.unflushed_records == 0 {
            return false;
        }
        match self.config.flush_policy {
            FlushPolicy::EveryAppend => true,
            FlushPolicy::Messages(count) => self.unflushed_records >= count,
            FlushPolicy::IntervalMs(ms) => self.first_unflushed_at.is_some_and(|first| {
                now.0.saturating_sub(first.0) >= i64::try_from(ms).unwrap_or(i64::MAX)
            }),
            FlushPolicy::Never => false,
        }
    }

    /// When the flush policy's timer next expires, if it runs (for `flush.ms`).
    pub fn flush_deadline(&self) -> Option<TimestampMs> {
        match self.config.flush_policy {
            FlushPolicy::IntervalMs(ms) => self.first_unflushed_at.map(|first| {
                TimestampMs(
                    first
                        .0
                        .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)),
                )
            }),
            _ => None,
        }
    }

    /// Seals the active segment's indexes (final time entry, trim) and syncs everything. The log
    /// can be reopened afterwards without recovery.
    pub fn close(mut self) -> Result<(), StorageError> {
        self.check_not_failed()?;
        self.delete_expired_files(TimestampMs(i64::MAX))?;
        self.sync_untaken_seals()?;
        self.active_mut().seal()?;
        self.recovery_point = self.log_end_offset();
        // The state as of the log end: the next open replays nothing.
        self.write_producer_snapshot(producers::SnapshotSync::Now)?;
        Ok(())

    }

    /// Releases the log's files and maps without syncing (to bound open files): the indexes are
    /// trimmed so that a reopen in this process trusts them, and the recovery point stays where
    /// the last sync left it.
    pub fn release(mut self) -> Result<(), StorageError> {
        self.check_not_failed()?;
        self.active_mut().finish_appends()
    }

    fn check_not_failed(&self) -> Result<(), StorageError> {
        match &self.failure {
            Some(cause) => Err(StorageError::Offline {
                dir: self.dir.clone(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Makes the directory's entries durable. A failure fails the log until it is reopened, as
    /// a failed file sync does: which entries reached the device is unknown (fsyncgate applies to
    /// directories too), so nothing that depends on them may be acknowledged.
    fn sync_dir(&mut self) -> Result<(), StorageError> {
        let result = self
            .storage
            .sync_dir(&self.dir)
            .map_err(|source| StorageError::io("fsync directory", &self.dir, source));
        self.fail_on(result)
    }
}

/// Logs whose syncs cover more than this on average grow their files. Prewriting costs a second
/// write of every block; a sync into written blocks saves the metadata write of the blocks'
/// allocation (ext4 without a journal writes the inode's and bitmaps' blocks in place). Past
/// about this much data per sync, the second write takes the disk longer than the metadata write
/// it saves; near it the two ways tie (BENCHMARKS.md § Tried and not kept).
const PREWRITE_SYNC_BYTES_MAX: u64 = 128 * 1024;
/// Space is prewritten this many syncs' worth ahead (within the bounds below): each prewrite's
/// allocation is paid by the one sync that first covers it, and a larger prewrite makes that
/// sync slower (it is written back with it).
const PREWRITE_SYNCS_AHEAD: u64 = 4;
const PREWRITE_BYTES_MIN: u64 = 128 * 1024;
const PREWRITE_BYTES_MAX: u64 = 512 * 1024;

/// How far ahead of its appends a log whose syncs cover `sync_bytes` on average prewrites
/// (`0`: not at all), never more than a segment holds.
fn prewrite_bytes_for(sync_bytes: u64, segment_bytes: u64) -> u64 {
    if sync_bytes > PREWRITE_SYNC_BYTES_MAX {
        return 0;
    }
    (sync_bytes * PREWRITE_SYNCS_AHEAD)
        .clamp(PREWRITE_BYTES_MIN, PREWRITE_BYTES_MAX)
        .min(segment_bytes)
}

/// `segments` is never empty; this names the invariant where it is relied on.
trait ExpectActive<T> {
    fn expect_active(self) -> T;
}

impl<T> ExpectActive<T> for Option<T> {
    #[expect(clippy::expect_used, reason = "a log always has an active segment")]
    fn expect_active(self) -> T {
        self.expect("a partition log always has at least one segment")
    }
}
