//! Opening a partition log: sweep leftovers of interrupted operations, load segments, recover
//! what an unclean shutdown may have left torn, and settle the log start offset and recovery point
//! (Kafka's `LogLoader`).
//!
//! | shutdown | segment                              | action                                   |
//! |----------|--------------------------------------|------------------------------------------|
//! | clean    | any                                  | trust the `.log`; check indexes, rebuild a bad one |
//! | unclean  | wholly below the recovery point      | trust the `.log`; check indexes, rebuild a bad one |
//! | unclean  | holding the recovery point           | from the recovery point's byte (found from the offset index and the headers after its entry): re-validate, index, truncate a torn tail; keep the index entries below it |
//! | unclean  | above the recovery point             | re-validate every batch, rebuild indexes, truncate a torn tail |
//! | any      | after one cut short of the next one  | delete                                   |

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cleaned_end;
use super::segments::SegmentList;
use super::{DigestBudget, LogWriteMode, PartitionLog};
use crate::config::LogConfig;
use crate::error::{OpenError, StorageError};
use crate::format::file_name::{FileState, SegmentFileKind, SegmentFileName};
use crate::io::Storage;
use crate::segment::{ActiveSegment, Segment};
use crate::segment::recovery::{InvalidTail, LoadMode, SegmentRecovery};
use crate::segment::scan::{LogScanner, ScanStep};
use crate::types::{Offset, TimestampMs, TopicPartition};

/// What the log directory knows about a partition from its checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOpenOptions {
    /// True when the data directory was closed cleanly (the clean-shutdown marker was present).
    pub had_clean_shutdown: bool,
    /// From `recovery-point-offset-checkpoint`; 0 when absent.
    pub recovery_point: Offset,
    /// From `log-start-offset-checkpoint`, if present.
    pub log_start_offset: Option<Offset>,
    /// The clock at open.
    pub now: TimestampMs,
    /// How the owner writes the log.
    pub mode: LogWriteMode,
}

/// What opening a log repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments whose batches were re-validated.
    pub segments_recovered: usize,
    /// Bytes cut off torn or corrupt tails.
    pub bytes_truncated: u64,
    /// Where the first cut happened: file, position, reason.
    pub truncated_at: Option<(PathBuf, u64, String)>,
    /// Segments deleted because they followed a truncation.
    pub segments_deleted: usize,
    /// Leftover `.deleted`, `.cleaned`, `.swap` and orphan index files removed or completed.
    pub leftovers_swept: usize,
}

/// Whether an open left its directory to be synced: a new log's first segment's names are not
/// durable until it is, and nothing may be acknowledged on the log before.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirSync {
    /// Nothing the open created waits for a directory sync.
    Done,
    /// The open created the log's first segment: sync the directory, and take the log offline
    /// if that fails (`PartitionLog::fail_dir_sync`).
    Due,
}

impl PartitionLog {
    /// Opens (or creates) the log in `dir`.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        topic_partition: TopicPartition,
        config: LogConfig,
        options: LogOpenOptions,
    ) -> Result<(PartitionLog, RecoveryReport), OpenError> {
        let (log, report, dir_sync) =
            Self::open_leaving_dir_sync(storage, dir, topic_partition, config, options)?;
        if dir_sync == DirSync::Due {
            // The new files' names must be durable before an append to them is acknowledged.
            crate::io::sync_dir(log.storage.as_ref(), &log.dir)?;
        }
        Ok((log, report))
    }

    /// [`PartitionLog::open`], except that a new log's directory is left to the caller to sync
    /// (`DirSync::Due`): a shard creating many partitions syncs their directories together.
    #[tracing::instrument(name = "partition_open", level = "info", skip_all,
        fields(topic = %topic_partition.topic, partition = topic_partition.partition))]
    pub fn open_leaving_dir_sync(
        storage: Arc<dyn Storage>,
        dir: &Path,
        topic_partition: TopicPartition,
        config: LogConfig,
        options: LogOpenOptions,
    ) -> Result<(PartitionLog, RecoveryReport, DirSync), OpenError> {
        config.validate()?;
        let names = list_or_create(storage.as_ref(), dir)?;
        let (leftovers_swept, leftover_deletions) =
            sweep_leftovers(storage.as_ref(), dir, &names)?;
        let mut report = RecoveryReport {
            leftovers_swept,
            ..RecoveryReport::default()
        };
        let names = match leftovers_swept {
            0 => names,
            _ => list_names(storage.as_ref(), dir)?,
        };
        let base_offsets = segment_base_offsets(&names);
        // Below the cleaned end the cleaner may have left gaps; a compacted log without the
        // record may have been cleaned anywhere. A log never compacted is dense throughout.
        let compacts = config.cleanup_policy.compacts();
        let recorded = names.iter().any(|name| name == cleaned_end::CLEANED_END_FILE);
        let recorded_cleaned_end = cleaned_end::dense_from(storage.as_ref(), dir, compacts, recorded)?;
        let dense_from = recorded_cleaned_end.unwrap_or(Offset(u64::MAX));
        let mut segments = load_segments(
            storage.as_ref(),
            dir,
            &base_offsets,
            &config,
            &options,
            dense_from,
            &mut report,
        )?;
        let log_start_checkpoint = options.log_start_offset.unwrap_or_default();
        seal_recovered(&mut segments)?;
        let (active, mut dir_sync) = match segments.pop() {
            Some((last, _)) => (ActiveSegment::from_sealed(last), DirSync::Done),
            None => {
                let created = ActiveSegment::create(
                    storage.as_ref(),
                    dir,
                    log_start_checkpoint,
                    &config,
                    options.mode.direct_writes,
                    options.now,
                )?;
                (created, DirSync::Due)
            }
        };
        let sealed = segments.into_iter().map(|(segment, _)| segment).collect();
        let mut log = PartitionLog {
            dir: dir.to_owned(),
            topic_partition,
            config,
            mode: options.mode,
            storage,
            segments: SegmentList::new(sealed, active),
            log_start_offset: Offset(0),
            recovery_point: Offset(0),
            unflushed_records: 0,
            first_unflushed_at: None,
            bytes_since_sync: 0,
            bytes_since_background_sync: 0,
            sync_bytes_average: 0,
            prewrite_bytes: 0,
            failure: None,
            pending_deletions: Vec::new(),
            renames_sync: super::retention::RenamesSync::default(),
            instance: next_log_instance(),
            cleaned_end: dense_from,
            digest_budget: DigestBudget::unlimited(),
            unsynced_seals: Vec::new(),
            pending_seal_ends: std::collections::VecDeque::new(),
            producers: Default::default(),
            producers_expired_at: None,
        };
        for base_offset in leftover_deletions {
            log.schedule_file_deletion(base_offset, TimestampMs(i64::MIN));
        }
        log.settle_offsets(log_start_checkpoint, &options, &report)?;
        log.load_producer_state(&names)?;
        log.expire_producers(options.now);
        if recorded_cleaned_end.is_none() {
            // From here on the log is appended to: what lies above its end now is dense.
            let end = log.log_end_offset();
            cleaned_end::write(log.storage.as_ref(), &log.dir, end)?;
            log.cleaned_end = end;
            // Its write synced the directory, the new segment's names with it.
            dir_sync = DirSync::Done;
        }
        Ok((log, report, dir_sync))
    }

    /// Takes the log offline after the sync of its directory that its open left to the caller
    /// failed: its first segment's names may not be durable.
    pub(crate) fn fail_dir_sync(&mut self, error: &StorageError) {
        self.failure.get_or_insert_with(|| error.cause());
    }

    /// Fixes the log start offset and recovery point after loading and prepares the active
    /// segment for appends. Syncs no byte recovery kept in the active segment: as Kafka, the
    /// recovery point stays below them after an unclean shutdown and moves when a sync covers
    /// the log end (the next group commit, flush or close), so another crash checks them again.
    /// Every sealed segment is durable by now (trusted below the recovery point, or synced by
    /// `seal_recovered`), so the recovery point is at least the active segment's base once the
    /// directory holds the names made since the checkpointed one: segments a roll created
    /// after it (the roll's directory sync may have been lost with the crash). The directory is
    /// synced for them, and after a deletion (a segment that came back after a crash would
    /// overlap the appends that follow).
    fn settle_offsets(
        &mut self,
        log_start_checkpoint: Offset,
        options: &LogOpenOptions,
        report: &RecoveryReport,
    ) -> Result<(), StorageError> {
        let first_base = self.segments.slots()[0].base_offset();
        self.log_start_offset = log_start_checkpoint.max(first_base);
        let active_base = self.active().base_offset();
        let rolled_since_checkpoint =
            !options.had_clean_shutdown && active_base > options.recovery_point;
        if self.log_start_offset > self.log_end_offset() {
            // The files below the checkpointed start are gone and nothing above it is here:
            // start over, empty, at the checkpointed offset (Kafka does the same).
            self.replace_with_empty_segment(self.log_start_offset, options.now)?;
            self.sync_dir()?;
        } else if report.segments_deleted > 0 || rolled_since_checkpoint {
            self.sync_dir()?;
        }
        let config = self.config.clone();
        let storage = self.storage.clone();
        let direct_writes = self.mode.direct_writes;
        let active = self.active_mut();
        active.prepare_appends(storage.as_ref(), &config, direct_writes)?;
        let log_end_offset = self.log_end_offset();
        self.recovery_point = match options.had_clean_shutdown {
            true => log_end_offset,
            false => options
                .recovery_point
                .min(log_end_offset)
                .max(self.active().base_offset()),
        };
        self.note_unsynced_since_recovery_point(options.now);
        Ok(())
    }

    /// Counts the records past the recovery point as unsynced appends, so that the flush policy
    /// and the background sync take them as the appends they were.
    fn note_unsynced_since_recovery_point(&mut self, now: TimestampMs) {
        let records = self.log_end_offset().0 - self.recovery_point.0;
        if records == 0 {
            return;
        }
        self.unflushed_records = records;
        self.first_unflushed_at = Some(now);
        self.bytes_since_background_sync = self.segments.bytes_holding_from(self.recovery_point);
    }
}

/// Seals the sealed segments that recovery rebuilt (their indexes are untrimmed and unsynced), so
/// that they can be released and trusted when reopened. Sealed segments loaded as trusted are left
/// alone; the last segment becomes the active one.
fn seal_recovered(segments: &mut [(Segment, bool)]) -> Result<(), StorageError> {
    let sealed_count = segments.len().saturating_sub(1);
    for (segment, recovered) in &mut segments[..sealed_count] {
        if *recovered {
            segment.seal()?;
        }
    }
    Ok(())
}

/// Loads every segment in order, recovering those an unclean shutdown may have torn. Invalid
/// bytes are cut off only at or above the recovery point, and only as a torn tail (no valid batch
/// after them): in the last segment, or in a sealed one whose roll left its sync to the log's
/// owner (`seal_sync.rs`) and the crash came first. Below the recovery point they fail the open
/// (`StorageError::Corrupt`) instead of truncating acknowledged data. A recovered sealed segment
/// may also have lost its unsynced tail whole, ending before the next segment starts: above the
/// recovery point that gap is the same cut. After a segment that a cut left ending short of the
/// next one the rest are deleted: nothing in them was acknowledged as durable, since a durable
/// append's sync comes after the seal syncs of every segment before it. A cut that leaves a
/// sealed segment ending where the next one starts removed no batch, only space past them that a
/// seal had cut and whose sync failed before a restart (prewritten or preallocated space, still on
/// the device); the segments after it are kept, and may hold acknowledged appends made after the
/// restart.
fn load_segments(
    storage: &dyn Storage,
    dir: &Path,
    base_offsets: &[Offset],
    config: &LogConfig,
    options: &LogOpenOptions,
    dense_from: Offset,
    report: &mut RecoveryReport,
) -> Result<Vec<(Segment, bool)>, StorageError> {
    let first_unflushed = base_offsets
        .partition_point(|base| *base <= options.recovery_point)
        .saturating_sub(1);
    // A segment from `dense_from` on was never rewritten by the cleaner (every segment of a log
    // never compacted: `dense_from` is 0 there), so it ends exactly where the next one starts.
    let never_cleaned = |base: Offset| base >= dense_from;
    // Each loaded segment, and whether recovery rebuilt its indexes.
    let mut segments: Vec<(Segment, bool)> = Vec::with_capacity(base_offsets.len());
    let mut previous_recovered = false;
    for (segment_index, base_offset) in base_offsets.iter().enumerate() {
        let recover = !options.had_clean_shutdown && segment_index >= first_unflushed;
        // The segment holding the recovery point is recovered from there: below it every byte
        // was synced.
        let mode = match recover {
            false => LoadMode::Trusted,
            true if segment_index == first_unflushed && options.recovery_point > *base_offset => {
                LoadMode::RecoverFrom(options.recovery_point)
            }
            true => LoadMode::Recover,
        };
        let is_last = segment_index + 1 == base_offsets.len();
        // The last segment is the active one, which the cleaner never touches.
        let dense = is_last || never_cleaned(*base_offset);
        // A sealed segment may have a torn tail only if its roll left the sync for later and the
        // cleaner never rewrote it (a cleaned segment is synced before its swap).
        let invalid_tail = match is_last || dense {
            true => InvalidTail::TruncateFrom(options.recovery_point),
            false => InvalidTail::Refuse,
        };
        let loaded = Segment::load_with(
            storage,
            dir,
            *base_offset,
            config,
            mode,
            invalid_tail,
            dense,
            options.now,
        )?;
        if !recover
            && !options.had_clean_shutdown
            && !is_last
            && loaded.segment.next_offset() == options.recovery_point
        {
            // Its batches were synced, but the roll that sealed it left the sync of its cut to
            // the owner, and a restart forgets a seal sync that failed: make the cut durable now,
            // before anything after it is acknowledged.
            loaded.segment.sync_length()?;
        }
        let truncated = loaded
            .recovery
            .as_ref()
            .is_some_and(|recovery| recovery.bytes_truncated > 0);
        if let Some(recovery) = &loaded.recovery {
            record_recovery(report, loaded.segment.log_path(), recovery);
        }
        if let Some((previous, _)) = segments.last() {
            let previous_dense = never_cleaned(previous.base_offset());
            let previous_end = previous.next_offset();
            if previous_recovered
                && previous_dense
                && previous_end < loaded.segment.base_offset()
                && previous_end >= options.recovery_point
            {
                // The previous segment lost its tail in a crash before its seal sync.
                drop(loaded);
                for later in &base_offsets[segment_index..] {
                    delete_segment_files(storage, dir, *later)?;
                    report.segments_deleted += 1;
                }
                break;
            }
            check_follows(previous, &loaded.segment, previous_dense)?;
        }
        previous_recovered = recover;
        let end = loaded.segment.next_offset();
        segments.push((loaded.segment, loaded.recovery.is_some()));
        let next_base = base_offsets.get(segment_index + 1);
        if truncated && next_base.is_some_and(|next_base| end < *next_base) {
            for later in &base_offsets[segment_index + 1..] {
                delete_segment_files(storage, dir, *later)?;
                report.segments_deleted += 1;
            }
            break;
        }
    }
    Ok(segments)
}

/// `next` starts at or after the previous segment's end, and exactly there when the previous
/// segment is dense (never rewritten by the cleaner: synced in full when it rolled, so a gap is
/// damage).
fn check_follows(
    previous: &Segment,
    next: &Segment,
    previous_dense: bool,
) -> Result<(), StorageError> {
    let end = previous.next_offset();
    let base = next.base_offset();
    let reason = if base < end {
        "overlaps the previous segment"
    } else if base > end && previous_dense {
        "leaves an offset gap after the previous segment, which the cleaner never rewrote"
    } else {
        return Ok(());
    };
    Err(StorageError::Corrupt {
        file: next.log_path().to_owned(),
        position: 0,
        reason: format!(
            "segment based at {base} {reason}, which ends at offset {end}; {}",
            crate::segment::recovery::recover_hint(next.log_path())
        ),
    })
}

fn record_recovery(report: &mut RecoveryReport, log_path: &Path, recovery: &SegmentRecovery) {
    report.segments_recovered += 1;
    report.bytes_truncated += recovery.bytes_truncated;
    if report.truncated_at.is_none()
        && let Some((position, reason)) = &recovery.truncated_at
    {
        report.truncated_at = Some((log_path.to_owned(), *position, reason.clone()));
    }
}

/// What the directory of a log closed cleanly shows without opening it: its live segments and
/// their `.log` files' bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClosedLogFiles {
    pub first_base_offset: Offset,
    pub active_base_offset: Offset,
    pub active_log_path: PathBuf,
    pub size_bytes: u64,
    pub segment_count: usize,
}

/// Lists `dir` and reads the length of each live segment's `.log`: a log's description without
/// opening it. `None` when the directory holds no segment or files an interrupted operation left
/// (an open has work to do there), or cannot be read.
pub(crate) fn closed_log_files(storage: &dyn Storage, dir: &Path) -> Option<ClosedLogFiles> {
    let names = storage.list_dir(dir).ok()?;
    let leftovers = names
        .iter()
        .filter_map(|name| SegmentFileName::parse(name))
        .any(|name| name.state != FileState::Live);
    if leftovers {
        return None;
    }
    let base_offsets = segment_base_offsets(&names);
    let (first, active) = (*base_offsets.first()?, *base_offsets.last()?);
    let log_path = |base| SegmentFileName::live(base, SegmentFileKind::Log).path_in(dir);
    let mut size_bytes = 0;
    for base in &base_offsets {
        size_bytes += storage.file_length(&log_path(*base)).ok()?;
    }
    Some(ClosedLogFiles {
        first_base_offset: first,
        active_base_offset: active,
        active_log_path: log_path(active),
        size_bytes,
        segment_count: base_offsets.len(),
    })
}

/// The names in `dir`, which is created (empty) when missing.
fn list_or_create(storage: &dyn Storage, dir: &Path) -> Result<Vec<String>, StorageError> {
    match storage.list_dir(dir) {
        Ok(names) => Ok(names),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            crate::segment::create_dir_all(storage, dir)?;
            Ok(Vec::new())
        }
        // Not a directory, say: reported as the creation finds it.
        Err(_) => {
            crate::segment::create_dir_all(storage, dir)?;
            list_names(storage, dir)
        }
    }
}

fn list_names(storage: &dyn Storage, dir: &Path) -> Result<Vec<String>, StorageError> {
    storage
        .list_dir(dir)
        .map_err(|source| StorageError::io("list directory", dir, source))
}

/// Base offsets of the live segments among `names`, sorted.
fn segment_base_offsets(names: &[String]) -> Vec<Offset> {
    let mut base_offsets: Vec<Offset> = names
        .iter()
        .filter_map(|name| SegmentFileName::parse(name))
        .filter(|name| name.kind == SegmentFileKind::Log && name.state == FileState::Live)
        .map(|name| name.base_offset)
        .collect();
    base_offsets.sort_unstable();
    base_offsets
}

/// Completes or rolls back what an interrupted deletion or compaction left (Kafka's
/// `LogLoader.removeTempFilesAndCollectSwapFiles` and swap completion):
/// - `.cleaned` files are removed; `.deleted` ones are left for the log's owner to unlink (their
///   segments' base offsets are returned);
/// - a `.swap` at or above the lowest `.cleaned` base offset is removed (incomplete split);
/// - any other `.swap` segment replaces the live segments it covers, then becomes live;
/// - index files without a `.log` are removed.
///
/// Returns how many files were touched, and the base offsets of the `.deleted` files kept.
fn sweep_leftovers(
    storage: &dyn Storage,
    dir: &Path,
    names: &[String],
) -> Result<(usize, Vec<Offset>), StorageError> {
    let parsed: Vec<SegmentFileName> = names
        .iter()
        .filter_map(|name| SegmentFileName::parse(name))
        .collect();
    let mut swept = 0;
    for name in parsed.iter().filter(|name| name.state == FileState::Cleaned) {
        crate::segment::remove_if_present(storage, &name.path_in(dir))?;
        swept += 1;
    }
    let mut kept_deleted: Vec<Offset> = parsed
        .iter()
        .filter(|name| name.state == FileState::Deleted)
        .map(|name| name.base_offset)
        .collect();
    kept_deleted.sort_unstable();
    kept_deleted.dedup();
    if parsed.iter().any(|name| name.state == FileState::Swap) {
        swept += complete_swaps(storage, dir, &parsed)?;
    }
    let names = if swept > 0 {
        list_names(storage, dir)?
    } else {
        names.to_vec()
    };
    swept += remove_orphan_indexes(storage, dir, &names)?;
    if swept > 0 {
        storage
            .sync_dir(dir)
            .map_err(|source| StorageError::io("fsync directory", dir, source))?;
    }
    Ok((swept, kept_deleted))
}

/// Renames each `.swap` file to its live name. The swap logs replace the live segments whose base
/// offsets fall in `[lowest swap base, highest swap next offset)` (Kafka's rule); those are
/// removed first, then the swaps are renamed.
fn complete_swaps(
    storage: &dyn Storage,
    dir: &Path,
    parsed: &[SegmentFileName],
) -> Result<usize, StorageError> {
    let mut touched = 0;
    // KAFKA-6264: a `.swap` at or above the lowest `.cleaned` base offset may be part of an
    // incomplete split; it is deleted and the live segments it would replace are kept.
    let min_cleaned = parsed
        .iter()
        .filter(|name| name.state == FileState::Cleaned)
        .map(|name| name.base_offset)
        .min();
    let mut swaps: Vec<&SegmentFileName> = Vec::new();
    for swap in parsed.iter().filter(|name| name.state == FileState::Swap) {
        if min_cleaned.is_some_and(|min_cleaned| swap.base_offset >= min_cleaned) {
            remove(storage, &swap.path_in(dir))?;
            touched += 1;
        } else {
            swaps.push(swap);
        }
    }
    let mut replaced: Option<(Offset, Offset)> = None;
    for swap_log in swaps
        .iter()
        .filter(|name| name.kind == SegmentFileKind::Log)
    {
        let next_offset = swap_next_offset(storage, &swap_log.path_in(dir), swap_log.base_offset)?;
        let (low, high) = replaced.unwrap_or((swap_log.base_offset, next_offset));
        replaced = Some((low.min(swap_log.base_offset), high.max(next_offset)));
    }
    if let Some((low, high)) = replaced {
        for live in parsed.iter().filter(|name| name.state == FileState::Live) {
            if live.base_offset >= low && live.base_offset < high {
                remove(storage, &live.path_in(dir))?;
                touched += 1;
            }
        }
    }
    for swap in swaps {
        let from = swap.path_in(dir);
        let to = swap.with_state(FileState::Live).path_in(dir);
        storage
            .rename(&from, &to)
            .map_err(|source| StorageError::io("rename", &from, source))?;
        touched += 1;
    }
    Ok(touched)
}

/// One past the last offset of the valid batches in a `.swap` log.
fn swap_next_offset(
    storage: &dyn Storage,
    path: &Path,
    base_offset: Offset,
) -> Result<Offset, StorageError> {
    let file = storage
        .open(path, crate::io::OpenMode::Existing)
        .map_err(|source| StorageError::io("open", path, source))?;
    let end = file
        .length_bytes()
        .map_err(|source| StorageError::io("stat", path, source))?;
    let mut scanner = LogScanner::new(file.as_ref(), path, 0, end);
    let mut next_offset = base_offset.next();
    while let ScanStep::Item { item, .. } = scanner.next_header()? {
        next_offset = next_offset.max(Offset((item.last_offset() + 1).max(0) as u64));
    }
    Ok(next_offset)
}

fn remove_orphan_indexes(
    storage: &dyn Storage,
    dir: &Path,
    names: &[String],
) -> Result<usize, StorageError> {
    let parsed: Vec<SegmentFileName> = names
        .iter()
        .filter_map(|name| SegmentFileName::parse(name))
        .collect();
    let mut removed = 0;
    for name in &parsed {
        if name.state != FileState::Live || name.kind == SegmentFileKind::Log {
            continue;
        }
        let log = SegmentFileName::live(name.base_offset, SegmentFileKind::Log);
        if !parsed.contains(&log) {
            remove(storage, &name.path_in(dir))?;
            removed += 1;
        }
    }
    Ok(removed)
}

fn delete_segment_files(
    storage: &dyn Storage,
    dir: &Path,
    base_offset: Offset,
) -> Result<(), StorageError> {
    for kind in [
        SegmentFileKind::Log,
        SegmentFileKind::Index,
        SegmentFileKind::TimeIndex,
        SegmentFileKind::TxnIndex,
    ] {
        let path = SegmentFileName::live(base_offset, kind).path_in(dir);
        if storage.exists(&path) {
            remove(storage, &path)?;
        }
    }
    Ok(())
}

fn remove(storage: &dyn Storage, path: &Path) -> Result<(), StorageError> {
    storage
        .remove_file(path)
        .map_err(|source| StorageError::io("remove", path, source))
}

/// A number no other opening of a log in this process has had.
pub(super) fn next_log_instance() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
