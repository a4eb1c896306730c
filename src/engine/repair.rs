//! Truncating a partition to its last valid batch, at the operator's request (`seglog recover`):
//! for a partition the engine does not open because of damage that recovery never cuts on its own
//! (invalid bytes in synced data, a batch with impossible offsets, segments that overlap or leave
//! a gap), since cutting there discards acknowledged records.
//!
//! [`PartitionRepair::open`] takes the data directory's lock, as the engine does (neither runs
//! while the other holds it), and reads the partition's segments in offset order, read-only,
//! checking what recovery checks: each batch's framing, CRC-32C and offsets (dense where the log
//! was never compacted), and that each segment starts where the one before ends. The first batch
//! that fails ends the valid data; [`Damage`] says where, why, and what truncating there discards,
//! file by file. [`PartitionRepair::truncate`] then removes the later segments (last first, so
//! that what remains is always a prefix of the log), cuts the damaged segment's `.log` at the
//! first invalid batch and removes its indexes (the next open rebuilds them), syncing each step:
//! the engine then opens the partition with every batch before the damage. Legacy-format data
//! (magic 0 or 1) is refused, as the engine refuses it: it is not damage.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::LogConfig;
use crate::error::{OpenError, StorageError};
use crate::format::file_name::{
    SegmentFileKind, SegmentFileName, partition_dir_name, segment_path,
};
use crate::format::{BatchPrefix, DecodeError};
use crate::io::sync_dir;
use crate::io::{OpenMode, Storage, StorageFile};
use crate::limits::BATCH_HEADER_UP_TO_MAGIC_BYTES;
use crate::segment::recovery::check_offsets;
use crate::segment::remove_if_present;
use crate::segment::scan::{LogScanner, ScanStep};
use crate::types::{Offset, TopicPartition};

use super::data_dir::lock_dir;
use crate::log::cleaned_end;

/// Where a partition's valid data ends, and what truncating it there discards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The `.log` holding the first invalid batch.
    pub file: PathBuf,
    /// Where that batch starts in it.
    pub position: u64,
    /// Why it is invalid.
    pub reason: String,
    /// The first offset of the partition's first segment: the valid data starts there.
    pub first_offset: Offset,
    /// The offset after the last valid batch: truncation keeps the offsets below it.
    pub valid_end_offset: Offset,
    /// What truncation removes, file by file in offset order.
    pub discarded: Vec<Discarded>,
}

/// Bytes of one segment's `.log` that truncation removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discarded {
    /// The segment's `.log` file.
    pub file: PathBuf,
    /// Where the removed bytes start (0 for a whole file).
    pub position: u64,
    /// How many bytes are removed, to the end of the file.
    pub bytes: u64,
    /// The whole segment goes (its `.log` and its indexes), not only the end of its `.log`.
    pub whole_file: bool,
    /// The first and last offsets of the batches among these bytes that still pass their CRC
    /// (past the damaged ones, skipped by the lengths their headers give): the records that
    /// truncation discards besides the damaged bytes. `None` if none reads.
    pub readable_offsets: Option<(Offset, Offset)>,
}

impl Damage {
    /// Every byte truncation removes.
    pub fn discarded_bytes(&self) -> u64 {
        self.discarded.iter().map(|discarded| discarded.bytes).sum()
    }

    /// The last offset of a batch past the damage that still passes its CRC, if any.
    pub fn last_readable_offset(&self) -> Option<Offset> {
        self.discarded
            .iter()
            .filter_map(|discarded| discarded.readable_offsets.map(|(_, last)| last))
            .max()
    }
}

/// One partition of a locked data directory, read, with the damage found in it.
#[derive(Debug)]
pub struct PartitionRepair {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    damage: Option<Damage>,
    /// The data directory's lock, released when the repair is dropped.
    _lock: File,
}

impl PartitionRepair {
    /// Locks the data directory `root` (`OpenError::Locked` while an engine has it open) and
    /// reads partition `tp`'s segments, changing nothing. `config` is the topic's: a compacted
    /// log may have offset gaps below its cleaned end.
    pub fn open(
        storage: Arc<dyn Storage>,
        root: &Path,
        tp: &TopicPartition,
        config: &LogConfig,
    ) -> Result<PartitionRepair, OpenError> {
        let lock = lock_dir(root)?;
        let dir = root.join(partition_dir_name(tp));
        if !storage.is_dir(&dir) {
            return Err(OpenError::NotAPartitionDirectory { path: dir });
        }
        let damage = find_damage(storage.as_ref(), &dir, config)?;
        Ok(PartitionRepair {
            storage,
            dir,
            damage,
            _lock: lock,
        })
    }

    /// The partition's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the valid data ends and what truncation would discard; `None` when every batch is
    /// valid (nothing to truncate).
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// Truncates the partition to its last valid batch, as [`PartitionRepair::damage`] describes,
    /// durably, then releases the lock. Returns what was discarded (`None`: nothing was).
    pub fn truncate(self) -> Result<Option<Damage>, StorageError> {
        let Some(damage) = self.damage else {
            return Ok(None);
        };
        let storage = self.storage.as_ref();
        for discarded in damage.discarded.iter().rev() {
            match discarded.whole_file {
                true => remove_segment(storage, &discarded.file)?,
                false => cut_segment(storage, &discarded.file, discarded.position)?,
            }
            sync_dir(storage, &self.dir)?;
        }
        Ok(Some(damage))
    }
}

/// The first invalid batch of the partition in `dir`, if any, with what truncating there
/// discards.
fn find_damage(
    storage: &dyn Storage,
    dir: &Path,
    config: &LogConfig,
) -> Result<Option<Damage>, StorageError> {
    let bases = crate::segment::live_segment_bases(storage, dir)?;
    let Some(first_offset) = bases.first().copied() else {
        return Ok(None);
    };
    // As `log/open.rs`: a compacted log may have gaps below its cleaned end (anywhere without
    // the record); the last segment is always dense.
    let compacts = config.cleanup_policy.compacts();
    let dense_from = cleaned_end::dense_from(
        storage,
        dir,
        compacts,
        storage.exists(&dir.join(cleaned_end::CLEANED_END_FILE)),
    )?
    .unwrap_or(Offset(u64::MAX));
    // The previous segment's end offset and whether it is dense.
    let mut previous: Option<(Offset, bool)> = None;
    for (index, base) in bases.iter().enumerate() {
        let dense = index + 1 == bases.len() || *base >= dense_from;
        let path = segment_path(dir, *base, SegmentFileKind::Log);
        let placement = previous.and_then(|(end, previous_dense)| {
            misplaced(*base, end, previous_dense).map(|reason| (0, reason, end))
        });
        let scanned = match placement {
            Some(misplaced) => Err(misplaced),
            None => first_invalid_batch(storage, &path, *base, dense)?,
        };
        match scanned {
            Ok(end) => previous = Some((end, dense)),
            Err((position, reason, valid_end_offset)) => {
                let cut = Cut {
                    position,
                    in_first_segment: index == 0,
                };
                return Ok(Some(Damage {
                    discarded: discarded_from(storage, dir, &bases[index..], cut)?,
                    file: path,
                    position,
                    reason,
                    first_offset,
                    valid_end_offset,
                }));
            }
        }
    }
    Ok(None)
}

/// Why a segment based at `base` cannot follow one ending at `end`, if it cannot (as
/// `log/open.rs` checks): it overlaps it, or leaves a gap after a dense one.
fn misplaced(base: Offset, end: Offset, previous_dense: bool) -> Option<String> {
    if base < end {
        return Some(format!(
            "the segment based at {base} overlaps the previous one, which ends at offset {end}"
        ));
    }
    (base > end && previous_dense).then(|| {
        format!(
            "the segment based at {base} leaves an offset gap after the previous one, which ends \
             at offset {end} and was never compacted"
        )
    })
}

/// Scans the segment `path` based at `base`: `Ok(next offset)` when every batch is valid, else
/// `Err((position, reason, next offset before it))` for the first invalid one.
fn first_invalid_batch(
    storage: &dyn Storage,
    path: &Path,
    base: Offset,
    dense: bool,
) -> Result<Result<Offset, (u64, String, Offset)>, StorageError> {
    let (file, length) = open_log(storage, path)?;
    let mut scanner = LogScanner::new(file.as_ref(), path, 0, length);
    let mut next_offset = base;
    loop {
        let (position, batch) = match scanner.next_batch()? {
            ScanStep::Item { position, item } => (position, item),
            ScanStep::End => return Ok(Ok(next_offset)),
            ScanStep::Invalid {
                position,
                error:
                    DecodeError::UnsupportedMagic {
                        magic: magic @ (0 | 1),
                    },
            } => {
                return Err(StorageError::UnsupportedFormat {
                    file: path.to_owned(),
                    position,
                    magic,
                });
            }
            ScanStep::Invalid { position, error } => {
                return Ok(Err((position, error.to_string(), next_offset)));
            }
        };
        let header = batch.header();
        if let Err(reason) = check_offsets(header, base, next_offset, dense) {
            return Ok(Err((position, reason, next_offset)));
        }
        next_offset = Offset(header.last_offset() as u64).next();
    }
}

/// Where the valid data ends in the segment holding the first invalid batch.
#[derive(Debug, Clone, Copy)]
struct Cut {
    position: u64,
    /// The segment is the log's first: it stays, if need be empty, holding the log's base.
    in_first_segment: bool,
}

/// What truncating at `cut` in the first of `segments` removes: that segment's bytes from there
/// (the whole segment when the cut is at its start and it is not the log's first), and every
/// later segment.
fn discarded_from(
    storage: &dyn Storage,
    dir: &Path,
    segments: &[Offset],
    cut: Cut,
) -> Result<Vec<Discarded>, StorageError> {
    let mut discarded = Vec::with_capacity(segments.len());
    for (index, base) in segments.iter().enumerate() {
        let file = segment_path(dir, *base, SegmentFileKind::Log);
        let from = if index == 0 { cut.position } else { 0 };
        let (log, length) = open_log(storage, &file)?;
        let readable_offsets = readable_offsets(log.as_ref(), &file, from, length)?;
        let keeps_the_log_base = index == 0 && cut.in_first_segment;
        discarded.push(Discarded {
            whole_file: from == 0 && !keeps_the_log_base,
            bytes: length.saturating_sub(from),
            position: from,
            file,
            readable_offsets,
        });
    }
    Ok(discarded)
}

/// The first and last offsets of the batches between `from` and `end` that pass their CRC,
/// skipping an invalid one by the length its header gives while that header parses.
fn readable_offsets(
    file: &dyn StorageFile,
    path: &Path,
    from: u64,
    end: u64,
) -> Result<Option<(Offset, Offset)>, StorageError> {
    let mut offsets: Option<(Offset, Offset)> = None;
    let mut position = from;
    while position < end {
        let mut scanner = LogScanner::new(file, path, position, end);
        let skip_from = loop {
            match scanner.next_batch()? {
                ScanStep::Item { item, .. } => {
                    let header = item.header();
                    let first = Offset(header.base_offset.max(0) as u64);
                    let last = Offset(header.last_offset().max(0) as u64);
                    offsets = Some(match offsets {
                        Some((low, high)) => (low.min(first), high.max(last)),
                        None => (first, last),
                    });
                }
                ScanStep::End => return Ok(offsets),
                ScanStep::Invalid { position, .. } => break position,
            }
        };
        match claimed_size(file, path, skip_from, end)? {
            Some(size) => position = skip_from + size,
            None => break,
        }
    }
    Ok(offsets)
}

/// The size the batch header at `position` gives, if it parses and fits before `end`.
fn claimed_size(
    file: &dyn StorageFile,
    path: &Path,
    position: u64,
    end: u64,
) -> Result<Option<u64>, StorageError> {
    let bytes = file
        .read_to_vec(BATCH_HEADER_UP_TO_MAGIC_BYTES, position)
        .map_err(|source| StorageError::io("read", path, source))?;
    let size = BatchPrefix::parse(&bytes)
        .ok()
        .map(|prefix| prefix.size_bytes());
    Ok(size.filter(|size| *size > 0 && position + size <= end))
}

fn open_log(
    storage: &dyn Storage,
    path: &Path,
) -> Result<(Box<dyn StorageFile>, u64), StorageError> {
    let file = storage
        .open(path, OpenMode::Existing)
        .map_err(|source| StorageError::io("open", path, source))?;
    let length = file
        .length_bytes()
        .map_err(|source| StorageError::io("stat", path, source))?;
    Ok((file, length))
}

/// The files of the segment whose `.log` is `log_path`, each of its kinds.
fn segment_files(log_path: &Path, kinds: &[SegmentFileKind]) -> Vec<PathBuf> {
    let parsed = log_path
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(SegmentFileName::parse);
    let (Some(parsed), Some(dir)) = (parsed, log_path.parent()) else {
        return Vec::new();
    };
    kinds
        .iter()
        .map(|kind| SegmentFileName::live(parsed.base_offset, *kind).path_in(dir))
        .collect()
}

/// Removes a segment whole: its indexes, then its `.log`.
fn remove_segment(storage: &dyn Storage, log_path: &Path) -> Result<(), StorageError> {
    let kinds = [
        SegmentFileKind::TxnIndex,
        SegmentFileKind::TimeIndex,
        SegmentFileKind::Index,
        SegmentFileKind::Log,
    ];
    for path in segment_files(log_path, &kinds) {
        remove_if_present(storage, &path)?;
    }
    Ok(())
}

/// Cuts the `.log` at `position`, durably, and removes its indexes (entries may point past the
/// cut; the next open rebuilds them from the `.log`).
fn cut_segment(storage: &dyn Storage, log_path: &Path, position: u64) -> Result<(), StorageError> {
    let file = storage
        .open(log_path, OpenMode::Existing)
        .map_err(|source| StorageError::io("open", log_path, source))?;
    file.set_length_bytes(position)
        .and_then(|()| file.sync_all())
        .map_err(|source| StorageError::io("truncate", log_path, source))?;
    for path in segment_files(
        log_path,
        &[SegmentFileKind::Index, SegmentFileKind::TimeIndex],
    ) {
        remove_if_present(storage, &path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_must_start_where_the_previous_ends_unless_that_one_was_compacted() {
        assert_eq!(misplaced(Offset(10), Offset(10), true), None);
        assert_eq!(misplaced(Offset(12), Offset(10), false), None);
        assert_eq!(
            misplaced(Offset(9), Offset(10), false).as_deref(),
            Some("the segment based at 9 overlaps the previous one, which ends at offset 10")
        );
        assert_eq!(
            misplaced(Offset(12), Offset(10), true).as_deref(),
            Some(
                "the segment based at 12 leaves an offset gap after the previous one, which ends \
                 at offset 10 and was never compacted"
            )
        );
    }

    #[test]
    fn the_damage_adds_up_what_each_file_discards() {
        let discarded = |bytes, readable_offsets| Discarded {
            file: PathBuf::from("t-0/00000000000000000000.log"),
            position: 0,
            bytes,
            whole_file: true,
            readable_offsets,
        };
        let damage = Damage {
            file: PathBuf::from("t-0/00000000000000000000.log"),
            position: 0,
            reason: "CRC-32C mismatch".to_owned(),
            first_offset: Offset(0),
            valid_end_offset: Offset(0),
            discarded: vec![
                discarded(100, Some((Offset(1), Offset(4)))),
                discarded(50, None),
                discarded(70, Some((Offset(5), Offset(9)))),
            ],
        };
        assert_eq!(damage.discarded_bytes(), 220);
        assert_eq!(damage.last_readable_offset(), Some(Offset(9)));
    }
}
