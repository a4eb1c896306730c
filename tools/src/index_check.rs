//! Reading `.index` / `.timeindex` files without mapping or resizing them, and checking each entry
//! against the batches of the sibling `.log`.
//!
//! An index file is a flat array of fixed-size entries. A segment that is active, or whose log was
//! not closed cleanly, keeps the preallocated, zero-filled space after its entries: that tail is
//! split off and summarised ([`ZeroTail`]), not checked entry by entry.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;
use seglog::format::index_entry::{OffsetIndexEntry, TimeIndexEntry};

use crate::log_scan::LogLayout;

/// Size of one `.index` entry.
pub const OFFSET_ENTRY_BYTES: usize = 8;
/// Size of one `.timeindex` entry.
pub const TIME_ENTRY_BYTES: usize = 12;

/// A run of all-zero entries at the end of an index file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZeroTail {
    pub first_entry: usize,
    pub entry_count: usize,
    pub entry_bytes: usize,
}

impl ZeroTail {
    /// One line describing the tail.
    pub fn describe(&self) -> String {
        let start = self.first_entry * self.entry_bytes;
        let end = start + self.entry_count * self.entry_bytes;
        format!(
            "Zero-filled tail: {} entries from entry {} (bytes {start}..{end}) are all zeros: \
             preallocated space not trimmed (the segment is active or was not closed cleanly); \
             they are not entries",
            self.entry_count, self.first_entry
        )
    }
}

/// The raw bytes of an index file, split into real entries, a zero tail and leftover bytes.
#[derive(Debug, Clone)]
pub struct IndexBytes {
    pub bytes: Vec<u8>,
    /// Entries before the zero tail.
    pub entry_count: usize,
    pub zero_tail: Option<ZeroTail>,
    /// Bytes after the last whole entry (a file length that is not a multiple of the entry size).
    pub trailing_bytes: usize,
}

impl IndexBytes {
    /// Reads the file with `std::fs::read`: no mapping, no resizing.
    pub fn read(path: &Path, entry_bytes: usize) -> anyhow::Result<IndexBytes> {
        let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let whole_entries = bytes.len() / entry_bytes;
        let zero_entries = bytes[..whole_entries * entry_bytes]
            .chunks_exact(entry_bytes)
            .rev()
            .take_while(|entry| entry.iter().all(|byte| *byte == 0))
            .count();
        let zero_tail = (zero_entries > 0).then_some(ZeroTail {
            first_entry: whole_entries - zero_entries,
            entry_count: zero_entries,
            entry_bytes,
        });
        Ok(IndexBytes {
            trailing_bytes: bytes.len() % entry_bytes,
            entry_count: whole_entries - zero_entries,
            zero_tail,
            bytes,
        })
    }

    pub fn offset_entries(&self) -> impl Iterator<Item = OffsetIndexEntry> + '_ {
        (0..self.entry_count).filter_map(|index| OffsetIndexEntry::decode_at(&self.bytes, index))
    }

    pub fn time_entries(&self) -> impl Iterator<Item = TimeIndexEntry> + '_ {
        (0..self.entry_count).filter_map(|index| TimeIndexEntry::decode_at(&self.bytes, index))
    }

    /// A line about a length that is not a whole number of entries, if it is not.
    pub fn describe_trailing_bytes(&self, entry_bytes: usize) -> Option<String> {
        (self.trailing_bytes > 0).then(|| {
            format!(
                "file length {} is not a multiple of {entry_bytes}: the last {} bytes are not an entry",
                self.bytes.len(),
                self.trailing_bytes
            )
        })
    }
}

/// The `.log` next to an index file (same base name).
pub fn sibling_log(index_path: &Path) -> PathBuf {
    let stem = index_path
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.split('.').next())
        .unwrap_or_default();
    index_path.with_file_name(format!("{stem}.log"))
}

/// Why an `.index` entry does not point where it should, if it does not. An entry must name the
/// start of a batch whose last offset is the entry's offset, and entries must increase.
pub fn check_offset_entry(
    base_offset: i64,
    previous: Option<OffsetIndexEntry>,
    entry: OffsetIndexEntry,
    log: &LogLayout,
) -> Option<String> {
    let offset = base_offset + i64::from(entry.relative_offset);
    let position = u64::from(entry.position);
    let mut reasons = Vec::new();
    if let Some(previous) = previous {
        if entry.relative_offset <= previous.relative_offset {
            let previous_offset = base_offset + i64::from(previous.relative_offset);
            reasons.push(format!(
                "offset does not increase (previous entry: offset {previous_offset})"
            ));
        }
        if entry.position <= previous.position {
            reasons.push(format!(
                "position does not increase (previous entry: position {})",
                previous.position
            ));
        }
    }
    match log.batch_at(position) {
        Some(batch) if batch.last_offset == offset => {}
        Some(batch) => reasons.push(format!(
            "the batch at position {position} holds offsets {}..={}, so its last offset is {}, not {offset}",
            batch.base_offset, batch.last_offset, batch.last_offset
        )),
        None => reasons.push(missing_batch_reason(position, log)),
    }
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

fn missing_batch_reason(position: u64, log: &LogLayout) -> String {
    if position >= log.size_bytes {
        return format!(
            "position {position} is past the end of the log ({} bytes)",
            log.size_bytes
        );
    }
    match &log.stop {
        Some(stop) if position == stop.position => {
            format!(
                "the batch at position {position} cannot be read: {}",
                stop.reason
            )
        }
        Some(stop) if position > stop.position => format!(
            "position {position} is after unreadable bytes at position {} ({})",
            stop.position, stop.reason
        ),
        _ => format!("no batch starts at position {position}"),
    }
}

/// Why a `.timeindex` entry is wrong, if it is. Timestamps must increase, offsets must not
/// decrease and must be in the segment, and the entry must name the last offset of a batch whose
/// max timestamp is the entry's timestamp (what Kafka's `DumpLogSegments` checks).
pub fn check_time_entry(
    base_offset: i64,
    previous: Option<TimeIndexEntry>,
    entry: TimeIndexEntry,
    log: &LogLayout,
) -> Option<String> {
    let offset = base_offset + i64::from(entry.relative_offset);
    let next_offset = log.next_offset(base_offset);
    let mut reasons = Vec::new();
    if let Some(previous) = previous {
        if entry.timestamp_ms <= previous.timestamp_ms {
            reasons.push(format!(
                "timestamp does not increase (previous entry: timestamp {})",
                previous.timestamp_ms
            ));
        }
        if entry.relative_offset < previous.relative_offset {
            let previous_offset = base_offset + i64::from(previous.relative_offset);
            reasons.push(format!(
                "offset decreases (previous entry: offset {previous_offset})"
            ));
        }
    }
    if next_offset <= base_offset {
        reasons.push(format!(
            "offset {offset} is not in the segment, which holds no batches"
        ));
    } else if offset >= next_offset {
        let last_offset = next_offset - 1;
        reasons.push(format!(
            "offset {offset} is not in the segment, which holds offsets {base_offset}..={last_offset}"
        ));
    } else {
        match log.batch_ending_at(offset) {
            Some(batch) if batch.max_timestamp == entry.timestamp_ms => {}
            Some(batch) => reasons.push(format!(
                "the batch ending at offset {offset} (position {}) has max timestamp {}, not {}",
                batch.position, batch.max_timestamp, entry.timestamp_ms
            )),
            None => reasons.push(format!("no batch ends at offset {offset}")),
        }
    }
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::log_scan::BatchSpan;

    fn write_index(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.index");
        fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    fn entry(relative_offset: u32, position: u32) -> OffsetIndexEntry {
        OffsetIndexEntry {
            relative_offset,
            position,
        }
    }

    #[test]
    fn a_zero_filled_tail_is_split_from_the_entries() {
        let mut bytes = entry(3, 4200).encode().to_vec();
        bytes.extend(entry(9, 8400).encode());
        bytes.extend([0u8; 8 * 5]);
        bytes.extend([0u8; 3]);
        let (_dir, path) = write_index(&bytes);
        let index = IndexBytes::read(&path, OFFSET_ENTRY_BYTES).unwrap();
        assert_eq!(index.entry_count, 2);
        assert_eq!(
            index.zero_tail,
            Some(ZeroTail {
                first_entry: 2,
                entry_count: 5,
                entry_bytes: 8
            })
        );
        assert_eq!(index.trailing_bytes, 3);
        assert_eq!(
            index.offset_entries().collect::<Vec<_>>(),
            [entry(3, 4200), entry(9, 8400)]
        );
        assert_eq!(
            sibling_log(&path),
            path.with_file_name("00000000000000000100.log")
        );
    }

    #[test]
    fn offset_entries_must_name_a_batch_start_holding_their_offset_as_last() {
        let batch = |position, base_offset, last_offset| BatchSpan {
            position,
            base_offset,
            last_offset,
            max_timestamp: 10,
        };
        let log = LogLayout {
            size_bytes: 9000,
            batches: vec![
                batch(0, 100, 102),
                batch(4200, 103, 103),
                batch(8400, 104, 109),
            ],
            stop: None,
        };
        assert_eq!(check_offset_entry(100, None, entry(3, 4200), &log), None);
        assert_eq!(
            check_offset_entry(100, Some(entry(3, 4200)), entry(9, 8400), &log),
            None
        );
        let wrong_offset = check_offset_entry(100, None, entry(4, 4200), &log).unwrap();
        assert!(
            wrong_offset.contains("holds offsets 103..=103"),
            "{wrong_offset}"
        );
        let not_a_start = check_offset_entry(100, None, entry(3, 4201), &log).unwrap();
        assert_eq!(not_a_start, "no batch starts at position 4201");
        let past_end = check_offset_entry(100, None, entry(3, 9000), &log).unwrap();
        assert!(
            past_end.contains("past the end of the log (9000 bytes)"),
            "{past_end}"
        );
        let backwards =
            check_offset_entry(100, Some(entry(9, 8400)), entry(3, 4200), &log).unwrap();
        assert!(
            backwards.contains("offset does not increase")
                && backwards.contains("position does not increase")
        );
    }
}
