//! `.index` and `.timeindex` entries (FORMAT.md § Offset index, § Time index; Kafka's
//! `OffsetIndex` and `TimeIndex`). Big-endian, no header, no checksum: indexes are rebuilt from
//! the `.log` whenever they cannot be trusted.

use crate::limits::{OFFSET_INDEX_ENTRY_BYTES, TIME_INDEX_ENTRY_BYTES};

/// One `.index` entry: the batch holding `base_offset + relative_offset` starts at `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetIndexEntry {
    /// The offset minus the segment's base offset.
    pub relative_offset: u32,
    /// The batch's byte position in the segment's `.log`.
    pub position: u32,
}

impl OffsetIndexEntry {
    /// The entry's 8 bytes: relative offset, then position.
    pub fn encode(&self) -> [u8; OFFSET_INDEX_ENTRY_BYTES] {
        let mut bytes = [0u8; OFFSET_INDEX_ENTRY_BYTES];
        bytes[..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        bytes[4..].copy_from_slice(&self.position.to_be_bytes());
        bytes
    }

    /// Decodes entry `entry_index` of `entries`; `None` past the end.
    pub fn decode_at(entries: &[u8], entry_index: usize) -> Option<OffsetIndexEntry> {
        let start = entry_index.checked_mul(OFFSET_INDEX_ENTRY_BYTES)?;
        let entry = entries.get(start..)?;
        let (relative_offset, rest) = entry.split_first_chunk::<4>()?;
        let position = rest.first_chunk::<4>()?;
        Some(OffsetIndexEntry {
            relative_offset: u32::from_be_bytes(*relative_offset),
            position: u32::from_be_bytes(*position),
        })
    }
}

/// One `.timeindex` entry: every record before `base_offset + relative_offset` has a timestamp of
/// at most `timestamp_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeIndexEntry {
    /// A timestamp in milliseconds: no record before the entry's offset has a later one.
    pub timestamp_ms: i64,
    /// The offset minus the segment's base offset.
    pub relative_offset: u32,
}

impl TimeIndexEntry {
    /// The entry's 12 bytes: timestamp, then relative offset.
    pub fn encode(&self) -> [u8; TIME_INDEX_ENTRY_BYTES] {
        let mut bytes = [0u8; TIME_INDEX_ENTRY_BYTES];
        bytes[..8].copy_from_slice(&self.timestamp_ms.to_be_bytes());
        bytes[8..].copy_from_slice(&self.relative_offset.to_be_bytes());
        bytes
    }

    /// Decodes entry `entry_index` of `entries`; `None` past the end.
    pub fn decode_at(entries: &[u8], entry_index: usize) -> Option<TimeIndexEntry> {
        let start = entry_index.checked_mul(TIME_INDEX_ENTRY_BYTES)?;
        let entry = entries.get(start..)?;
        let (timestamp_ms, rest) = entry.split_first_chunk::<8>()?;
        let relative_offset = rest.first_chunk::<4>()?;
        Some(TimeIndexEntry {
            timestamp_ms: i64::from_be_bytes(*timestamp_ms),
            relative_offset: u32::from_be_bytes(*relative_offset),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_big_endian() {
        let entry = OffsetIndexEntry {
            relative_offset: 1814,
            position: 39321,
        };
        assert_eq!(entry.encode(), [0, 0, 0x07, 0x16, 0, 0, 0x99, 0x99]);
        assert_eq!(OffsetIndexEntry::decode_at(&entry.encode(), 0), Some(entry));
        assert_eq!(OffsetIndexEntry::decode_at(&entry.encode(), 1), None);
        let time = TimeIndexEntry {
            timestamp_ms: 1,
            relative_offset: 2,
        };
        assert_eq!(time.encode(), [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2]);
        assert_eq!(TimeIndexEntry::decode_at(&time.encode(), 0), Some(time));
    }
}
