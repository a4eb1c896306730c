//! One partition of a data directory, read-only: its segments, offsets and batches, as the files
//! show them now, without the lock, recovery or any write.
//!
//! Sealed segments are read as they are. The last (active) segment is read up to its last whole,
//! CRC-valid batch: what lies after it — a torn tail, prewritten or reserved space, or a batch a
//! running engine is writing right now — is not part of the log yet, and is no error for a reader.
//! Positions come from the `.index` when it holds a usable entry (a few reads of 8 bytes), else
//! from a scan of batch headers from the start of the segment.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use seglog::format::Batch;
use seglog::format::file_name::{FileState, SegmentFileKind, SegmentFileName};
use seglog::format::index_entry::OffsetIndexEntry;
use seglog::io::StorageFile;
use seglog::segment::scan::{LogScanner, ScanStep};
use seglog::types::Offset;

use crate::data_dir::list_names;
use crate::log_scan::{describe_decode_error, unwritten_tail};
use crate::read_only::ReadOnlyFile;

/// Bytes of one `.index` entry.
const OFFSET_ENTRY_BYTES: u64 = 8;

/// One live segment of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentView {
    pub base_offset: u64,
    pub log_path: PathBuf,
    /// Where its readable batches end: the file's length for a sealed segment, the end of the last
    /// whole valid batch for the active one.
    pub end_position: u64,
}

/// What the files of one partition hold now.
#[derive(Debug, Clone)]
pub struct PartitionView {
    pub segments: Vec<SegmentView>,
    pub log_start_offset: u64,
    pub log_end_offset: u64,
    /// Offsets below this are durable, as far as the files tell: everything after a clean
    /// shutdown, else the recovery point last checkpointed.
    pub durable_offset: u64,
}

/// What the data directory's checkpoints say about a partition.
#[derive(Debug, Clone, Copy, Default)]
pub struct PartitionCheckpoints {
    pub log_start_offset: Option<Offset>,
    pub recovery_point: Option<Offset>,
    pub closed_cleanly: bool,
}

impl PartitionView {
    /// Reads the partition directory `dir` (a missing one is an empty log, as the engine would
    /// create it).
    pub fn load(dir: &Path, checkpoints: PartitionCheckpoints) -> anyhow::Result<PartitionView> {
        let mut segments = Vec::new();
        for base_offset in live_log_base_offsets(dir)? {
            let log_path =
                SegmentFileName::live(Offset(base_offset), SegmentFileKind::Log).path_in(dir);
            let end_position = file_length(&log_path)?;
            segments.push(SegmentView {
                base_offset,
                log_path,
                end_position,
            });
        }
        let mut log_end_offset = match segments.last_mut() {
            Some(active) => settle_active_segment(active)?,
            None => 0,
        };
        let first_base = segments.first().map_or(0, |segment| segment.base_offset);
        let log_start_offset = checkpoints
            .log_start_offset
            .map_or(0, |o| o.0)
            .max(first_base);
        // The files below the checkpointed start are gone: the engine starts the log over there.
        log_end_offset = log_end_offset.max(log_start_offset);
        let durable_offset = match checkpoints.closed_cleanly {
            true => log_end_offset,
            false => checkpoints
                .recovery_point
                .map_or(0, |o| o.0)
                .min(log_end_offset),
        };
        Ok(PartitionView {
            segments,
            log_start_offset,
            log_end_offset,
            durable_offset,
        })
    }

    /// Bytes of the readable batches of every segment.
    pub fn size_bytes(&self) -> u64 {
        self.segments
            .iter()
            .map(|segment| segment.end_position)
            .sum()
    }

    /// Whole, CRC-checked batches from the one holding `offset` (or the first after it, where
    /// compaction left a gap), about `max_bytes` of them and at least one; none at the log end.
    pub fn read_from(&self, offset: u64, max_bytes: u64) -> anyhow::Result<Vec<Batch>> {
        let first = self
            .segments
            .partition_point(|segment| segment.base_offset <= offset)
            .saturating_sub(1);
        for segment in self.segments.iter().skip(first) {
            let batches = read_segment_from(segment, offset, max_bytes)?;
            if !batches.is_empty() {
                return Ok(batches);
            }
        }
        Ok(Vec::new())
    }
}

/// Base offsets of the live `.log` files in `dir`, sorted; none if `dir` does not exist.
pub fn live_log_base_offsets(dir: &Path) -> anyhow::Result<Vec<u64>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut base_offsets: Vec<u64> = list_names(dir)?
        .iter()
        .filter_map(|name| SegmentFileName::parse(name))
        .filter(|parsed| parsed.state == FileState::Live && parsed.kind == SegmentFileKind::Log)
        .map(|parsed| parsed.base_offset.0)
        .collect();
    base_offsets.sort_unstable();
    Ok(base_offsets)
}

fn file_length(path: &Path) -> anyhow::Result<u64> {
    let metadata =
        std::fs::metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    Ok(metadata.len())
}

/// Cuts the active segment's `end_position` to the end of its last whole valid batch; returns the
/// offset after that batch (the log end offset).
fn settle_active_segment(active: &mut SegmentView) -> anyhow::Result<u64> {
    let file = ReadOnlyFile::open(&active.log_path)?;
    let file_end = file.length()?;
    let hint = last_index_entry(&active.log_path, active.base_offset)?;
    let from_hint = match hint {
        Some(entry) if u64::from(entry.position) < file_end => {
            valid_end(&file, u64::from(entry.position), file_end)?
        }
        _ => None,
    };
    let (end_position, last_offset) = match from_hint {
        Some(end) => end,
        None => valid_end(&file, 0, file_end)?.unwrap_or((0, None)),
    };
    active.end_position = end_position;
    Ok(match last_offset {
        Some(last_offset) => u64::try_from(last_offset.saturating_add(1)).unwrap_or(0),
        None => active.base_offset,
    })
}

/// Scans whole batches (CRC checked) from `position` to the first invalid one or `end`; returns
/// where they end and the last offset of the last one (`None` if there is none). From a position
/// other than 0 (an index entry's), `None` when no valid batch starts there: the entry is stale.
fn valid_end(
    file: &ReadOnlyFile,
    position: u64,
    end: u64,
) -> anyhow::Result<Option<(u64, Option<i64>)>> {
    let path = file.path().to_owned();
    let mut scanner = LogScanner::new(file, &path, position, end);
    let mut last_offset = None;
    loop {
        let step = scanner
            .next_batch()
            .with_context(|| format!("cannot read {}", path.display()))?;
        match step {
            ScanStep::Item { item, .. } => last_offset = Some(item.last_offset()),
            ScanStep::End | ScanStep::Invalid { .. } if last_offset.is_none() && position > 0 => {
                return Ok(None);
            }
            ScanStep::End => return Ok(Some((end, last_offset))),
            ScanStep::Invalid { position, .. } => return Ok(Some((position, last_offset))),
        }
    }
}

/// The `.index` next to `log_path`, read entry by entry without mapping or resizing it.
struct OffsetIndexFile {
    file: ReadOnlyFile,
    base_offset: u64,
    entry_count: u64,
}

impl OffsetIndexFile {
    /// `None` when the segment has no `.index`.
    fn open(log_path: &Path, base_offset: u64) -> anyhow::Result<Option<OffsetIndexFile>> {
        let path = log_path.with_extension("index");
        if !path.exists() {
            return Ok(None);
        }
        let file = ReadOnlyFile::open(&path)?;
        let entry_count = file.length()? / OFFSET_ENTRY_BYTES;
        Ok(Some(OffsetIndexFile {
            file,
            base_offset,
            entry_count,
        }))
    }

    /// Entry `index`, `None` if it is one of the zero-filled entries of preallocated space (entry
    /// 0 may be all zeros and still be real).
    fn entry(&self, index: u64) -> anyhow::Result<Option<OffsetIndexEntry>> {
        let mut bytes = [0u8; OFFSET_ENTRY_BYTES as usize];
        let read = self
            .file
            .read_at(&mut bytes, index * OFFSET_ENTRY_BYTES)
            .with_context(|| format!("cannot read {}", self.file.path().display()))?;
        if read < bytes.len() || (index > 0 && bytes == [0; 8]) {
            return Ok(None);
        }
        Ok(OffsetIndexEntry::decode_at(&bytes, 0))
    }

    fn entry_offset(&self, entry: OffsetIndexEntry) -> u64 {
        self.base_offset + u64::from(entry.relative_offset)
    }

    /// The last real entry whose offset is at most `target`: entries increase, and the zero-filled
    /// ones all come after the real ones, so a binary search finds it.
    fn floor_entry(&self, target: u64) -> anyhow::Result<Option<OffsetIndexEntry>> {
        let (mut low, mut high) = (0, self.entry_count);
        let mut found = None;
        while low < high {
            let middle = low + (high - low) / 2;
            match self.entry(middle)? {
                Some(entry) if self.entry_offset(entry) <= target => {
                    found = Some(entry);
                    low = middle + 1;
                }
                _ => high = middle,
            }
        }
        Ok(found)
    }
}

/// The last real entry of the segment's `.index`, if any.
fn last_index_entry(log_path: &Path, base_offset: u64) -> anyhow::Result<Option<OffsetIndexEntry>> {
    match OffsetIndexFile::open(log_path, base_offset)? {
        Some(index) => index.floor_entry(u64::MAX),
        None => Ok(None),
    }
}

/// Where to start scanning `segment` for `target`: the position of the index's last entry at or
/// below it, if a batch holding that entry's offset starts there, else 0.
fn scan_start(segment: &SegmentView, file: &ReadOnlyFile, target: u64) -> anyhow::Result<u64> {
    let Some(index) = OffsetIndexFile::open(&segment.log_path, segment.base_offset)? else {
        return Ok(0);
    };
    let Some(entry) = index.floor_entry(target)? else {
        return Ok(0);
    };
    let position = u64::from(entry.position);
    if position >= segment.end_position {
        return Ok(0);
    }
    let mut scanner = LogScanner::new(file, &segment.log_path, position, segment.end_position);
    let expected_last = i64::try_from(index.entry_offset(entry)).unwrap_or(i64::MAX);
    match scanner.next_header()? {
        ScanStep::Item { item, .. } if item.last_offset() == expected_last => Ok(position),
        _ => Ok(0),
    }
}

/// The position of the first batch of `segment` whose last offset is at least `target` (the end
/// position if there is none), found from headers alone.
fn batch_position(segment: &SegmentView, file: &ReadOnlyFile, target: u64) -> anyhow::Result<u64> {
    let start = scan_start(segment, file, target)?;
    let mut scanner = LogScanner::new(file, &segment.log_path, start, segment.end_position);
    let target = i64::try_from(target).unwrap_or(i64::MAX);
    loop {
        match scanner.next_header()? {
            ScanStep::Item { position, item } if item.last_offset() >= target => {
                return Ok(position);
            }
            ScanStep::Item { .. } => {}
            ScanStep::End => return Ok(segment.end_position),
            // Reading from here reports what is wrong.
            ScanStep::Invalid { position, .. } => return Ok(position),
        }
    }
}

/// Whole batches of `segment` from the one holding `offset`, about `max_bytes` of them.
fn read_segment_from(
    segment: &SegmentView,
    offset: u64,
    max_bytes: u64,
) -> anyhow::Result<Vec<Batch>> {
    let file = ReadOnlyFile::open(&segment.log_path)?;
    let start = batch_position(segment, &file, offset)?;
    let mut scanner = LogScanner::new(&file, &segment.log_path, start, segment.end_position);
    let mut batches = Vec::new();
    let mut bytes = 0;
    while batches.is_empty() || bytes < max_bytes {
        match scanner.next_batch()? {
            ScanStep::Item { item, .. } => {
                bytes += item.size_bytes();
                batches.push(item);
            }
            ScanStep::End => break,
            ScanStep::Invalid { position, error } => {
                let unread = segment.end_position - position;
                if unwritten_tail(&file, position, unread)?.is_some() {
                    break;
                }
                bail!(
                    "{}: position {position}: {}",
                    segment.log_path.display(),
                    describe_decode_error(&error)
                );
            }
        }
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use seglog::config::LogConfig;
    use seglog::engine::{Durability, Engine, EngineConfig};
    use seglog::format::{BatchBuilder, NewRecord};

    use super::*;

    /// A partition of 100 one-record batches with an index entry for each; returns its directory.
    fn indexed_partition(root: &Path) -> PathBuf {
        let engine = Engine::open(root, EngineConfig::default()).unwrap();
        let mut config = LogConfig::default();
        config.set("index.interval.bytes", "1").unwrap();
        let topic = engine.create_topic("t", 1, config).unwrap();
        for value in 0..100u32 {
            let mut batch = BatchBuilder::new(0);
            let value = format!("{value:02}");
            batch.push(&NewRecord {
                timestamp_ms: 1,
                key: None,
                value: Some(value.as_bytes()),
                headers: &[],
            });
            let batch = batch.build().unwrap();
            engine
                .append(&topic, 0, batch, Durability::Written)
                .wait()
                .unwrap();
        }
        engine.close().unwrap();
        root.join("t-0")
    }

    #[test]
    fn the_index_starts_the_search_at_the_batch_sought_and_reads_begin_there() {
        let root = tempfile::tempdir().unwrap();
        let dir = indexed_partition(root.path());
        let view = PartitionView::load(&dir, PartitionCheckpoints::default()).unwrap();
        assert_eq!((view.log_start_offset, view.log_end_offset), (0, 100));
        let segment = &view.segments[0];
        let file = ReadOnlyFile::open(&segment.log_path).unwrap();
        let start = scan_start(segment, &file, 50).unwrap();
        let batches = read_segment_from(segment, 50, 1).unwrap();
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].base_offset(), 50);
        let batch_bytes = batches[0].size_bytes();
        assert_eq!(
            start,
            50 * batch_bytes,
            "one entry per batch, all of one size"
        );
        assert_eq!(view.read_from(99, 1).unwrap()[0].base_offset(), 99);
        assert!(view.read_from(100, 1).unwrap().is_empty());
    }
}
