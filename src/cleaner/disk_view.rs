//! What a partition's directory shows without opening its log: the facts the cleaner's thread
//! uses to choose the partitions that may need retention or cleaning, so that the owning shard
//! opens only those. Every estimate errs toward "work to do" (sizes are file lengths, padding
//! included; a timestamp is never taken later than the segment's largest): the shard decides
//! exactly once the log is open.

use std::path::Path;

use super::retention_plan::{RetentionConfig, SegmentFacts, plan_retention};
use crate::config::{CleanupPolicy, LogConfig};
use crate::error::StorageError;
use crate::format::file_name::{SegmentFileKind, SegmentFileName};
use crate::io::{OpenMode, Storage, StorageFile};
use crate::limits::{BATCH_HEADER_BYTES, TIME_INDEX_ENTRY_BYTES};
use crate::types::{Offset, TimestampMs};

/// One live segment as its files show it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DiskSegment {
    base_offset: Offset,
    size_bytes: u64,
    modified_ms: i64,
}

/// Whether retention may delete a segment of the partition in `dir` now (time and size; a log
/// start offset above a segment is acted on when it moves, and at open).
pub fn retention_may_be_due(
    storage: &dyn Storage,
    dir: &Path,
    config: &LogConfig,
    now: TimestampMs,
) -> Result<bool, StorageError> {
    if config.cleanup_policy == CleanupPolicy::Compact {
        return Ok(false);
    }
    let segments = live_segments(storage, dir)?;
    let Some(first) = segments.first() else {
        return Ok(false);
    };
    let first_largest = oldest_timestamp_bound(storage, dir, first, segments.len() == 1)?;
    let facts: Vec<SegmentFacts> = segments
        .iter()
        .enumerate()
        .map(|(index, segment)| SegmentFacts {
            base_offset: segment.base_offset.0,
            size_bytes: segment.size_bytes,
            // Retention deletes a prefix: only the first segment's time decides.
            largest_timestamp_ms: if index == 0 { first_largest } else { None },
            modified_ms: segment.modified_ms,
        })
        .collect();
    let retention = RetentionConfig {
        delete_enabled: true,
        retention_ms: config.retention_ms,
        retention_bytes: config.retention_bytes,
    };
    Ok(plan_retention(&facts, 0, &retention, now.0).delete_count > 0)
}

/// The bytes of the sealed segments wholly below `first_dirty` (clean) and of the others
/// (dirty), as Kafka's dirty ratio counts them; the active (last) segment is never cleaned.
pub fn clean_and_dirty_bytes(
    storage: &dyn Storage,
    dir: &Path,
    first_dirty: Offset,
) -> Result<(u64, u64), StorageError> {
    let segments = live_segments(storage, dir)?;
    let (mut clean, mut dirty) = (0, 0);
    for pair in segments.windows(2) {
        let [segment, next] = pair else { continue };
        match next.base_offset <= first_dirty {
            true => clean += segment.size_bytes,
            false => dirty += segment.size_bytes,
        }
    }
    Ok((clean, dirty))
}

/// The live segments in `dir`, in offset order.
fn live_segments(storage: &dyn Storage, dir: &Path) -> Result<Vec<DiskSegment>, StorageError> {
    crate::segment::live_segment_bases(storage, dir)?
        .into_iter()
        .map(|base_offset| {
            let path = file_path(dir, base_offset, SegmentFileKind::Log);
            let file = open(storage, &path)?;
            Ok(DiskSegment {
                base_offset,
                size_bytes: file
                    .length_bytes()
                    .map_err(|source| StorageError::io("stat", &path, source))?,
                modified_ms: file
                    .modified_ms()
                    .map_err(|source| StorageError::io("stat", &path, source))?,
            })
        })
        .collect()
}

/// A timestamp no later than the segment's largest: a sealed segment's time index ends with its
/// largest (sealing forces it); for the active one, its first batch's largest. `Some(0)` where
/// neither can be read (as old as can be: the shard then looks).
fn oldest_timestamp_bound(
    storage: &dyn Storage,
    dir: &Path,
    segment: &DiskSegment,
    active: bool,
) -> Result<Option<i64>, StorageError> {
    let timestamp = match active {
        true => first_batch_max_timestamp(storage, dir, segment.base_offset)?,
        false => last_time_index_timestamp(storage, dir, segment.base_offset)?,
    };
    Ok(Some(timestamp.unwrap_or(0).max(0)))
}

fn last_time_index_timestamp(
    storage: &dyn Storage,
    dir: &Path,
    base_offset: Offset,
) -> Result<Option<i64>, StorageError> {
    let path = file_path(dir, base_offset, SegmentFileKind::TimeIndex);
    if !storage.exists(&path) {
        return Ok(None);
    }
    let file = open(storage, &path)?;
    let length = file
        .length_bytes()
        .map_err(|source| StorageError::io("stat", &path, source))?;
    let entry_bytes = TIME_INDEX_ENTRY_BYTES as u64;
    if length < entry_bytes || length % entry_bytes != 0 {
        return Ok(None);
    }
    let entry = file
        .read_to_vec(8, length - entry_bytes)
        .map_err(|source| StorageError::io("read", &path, source))?;
    Ok(entry
        .first_chunk::<8>()
        .map(|bytes| i64::from_be_bytes(*bytes)))
}

fn first_batch_max_timestamp(
    storage: &dyn Storage,
    dir: &Path,
    base_offset: Offset,
) -> Result<Option<i64>, StorageError> {
    let path = file_path(dir, base_offset, SegmentFileKind::Log);
    let header = open(storage, &path)?
        .read_to_vec(BATCH_HEADER_BYTES, 0)
        .map_err(|source| StorageError::io("read", &path, source))?;
    Ok(crate::format::BatchHeader::parse(&header)
        .ok()
        .map(|header| header.max_timestamp))
}

fn file_path(dir: &Path, base_offset: Offset, kind: SegmentFileKind) -> std::path::PathBuf {
    SegmentFileName::live(base_offset, kind).path_in(dir)
}

fn open(storage: &dyn Storage, path: &Path) -> Result<Box<dyn StorageFile>, StorageError> {
    storage
        .open(path, OpenMode::Existing)
        .map_err(|source| StorageError::io("open", path, source))
}
