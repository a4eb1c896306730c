//! Index files of arbitrary bytes: `OffsetIndex`/`TimeIndex::open_existing`, their checks and
//! lookups, and the pure search functions over the same bytes.
//!
//! Input: byte 0 picks the index kind and the segment's base offset, bytes 1-4 the `.log` size
//! the offset index is checked against, bytes 5-12 a lookup target; the rest is the file.
//!
//! Invariants: no panic; a length that is not a whole number of entries is refused; on an index
//! that passes its check, a lookup returns the greatest entry at or below the target (a linear
//! scan agrees) and never a position at or past the `.log` size; on any index, lookups return an
//! entry of the file or the segment's start; the pure search agrees with a linear scan whenever
//! the keys are sorted.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use seglog::format::index_entry::{OffsetIndexEntry, TimeIndexEntry};
use seglog::index::search::{greatest_at_most, least_at_least};
use seglog::index::time_index::TimestampOffset;
use seglog::index::{OffsetIndex, TimeIndex};
use seglog::types::{Offset, TimestampMs};

const BASE_OFFSETS: [u64; 4] = [0, 1000, 1 << 40, i64::MAX as u64 - 8];

struct Input<'a> {
    time_index: bool,
    base_offset: Offset,
    log_size_bytes: u64,
    target: i64,
    file: &'a [u8],
}

fn split(data: &[u8]) -> Option<Input<'_>> {
    let (header, file) = data.split_at_checked(13)?;
    let mut log_size = [0u8; 4];
    log_size.copy_from_slice(&header[1..5]);
    let mut target = [0u8; 8];
    target.copy_from_slice(&header[5..13]);
    Some(Input {
        time_index: header[0] & 1 == 1,
        base_offset: Offset(BASE_OFFSETS[usize::from(header[0] >> 1) % BASE_OFFSETS.len()]),
        log_size_bytes: u64::from(u32::from_be_bytes(log_size)),
        target: i64::from_be_bytes(target),
        file,
    })
}

fn index_path() -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        };
        let dir = dir.unwrap_or_else(|error| panic!("temporary directory: {error}"));
        let path = dir.path().join("fuzz.index");
        (dir, path)
    });
    path
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = split(data) else { return };
    check_pure_search(input.file, input.target);
    let path = index_path();
    std::fs::write(path, input.file).unwrap_or_else(|error| panic!("write index: {error}"));
    if input.time_index {
        check_time_index(path, &input);
    } else {
        check_offset_index(path, &input);
    }
});

fn offset_entries(file: &[u8]) -> Vec<OffsetIndexEntry> {
    (0..file.len() / 8)
        .filter_map(|index| OffsetIndexEntry::decode_at(file, index))
        .collect()
}

fn time_entries(file: &[u8]) -> Vec<TimeIndexEntry> {
    (0..file.len() / 12)
        .filter_map(|index| TimeIndexEntry::decode_at(file, index))
        .collect()
}

fn check_pure_search(file: &[u8], target: i64) {
    let offset_keys: Vec<i64> = offset_entries(file)
        .iter()
        .map(|entry| i64::from(entry.relative_offset))
        .collect();
    let time_keys: Vec<i64> = time_entries(file)
        .iter()
        .map(|entry| entry.timestamp_ms)
        .collect();
    for (keys, entry_bytes) in [(offset_keys, 8), (time_keys, 12)] {
        let greatest = greatest_at_most(keys.len(), entry_bytes, target, |i| keys[i]);
        let least = least_at_least(keys.len(), target, |i| keys[i]);
        if let Some(found) = greatest {
            assert!(found < keys.len() && keys[found] <= target);
        }
        if let Some(found) = least {
            assert!(found < keys.len() && keys[found] >= target);
        }
        if keys.is_sorted() {
            assert_eq!(greatest, keys.iter().rposition(|key| *key <= target));
            assert_eq!(least, keys.iter().position(|key| *key >= target));
        }
    }
}

fn check_offset_index(path: &Path, input: &Input<'_>) {
    let opened = OffsetIndex::open_existing(path, input.base_offset);
    let index = match opened {
        Ok(index) => index,
        Err(_) => {
            assert!(
                !input.file.len().is_multiple_of(8),
                "a whole-entry index was refused"
            );
            return;
        }
    };
    assert!(
        input.file.len().is_multiple_of(8),
        "a partial entry was accepted"
    );
    let entries = offset_entries(input.file);
    assert_eq!(index.entry_count(), entries.len());
    let base = input.base_offset.0;
    let target = Offset(base.saturating_add(input.target as u64 & 0xffff_ffff));
    let found = index.lookup(target);
    let in_file = entries.iter().any(|entry| {
        found.offset.0 == base + u64::from(entry.relative_offset)
            && found.position == entry.position
    });
    assert!(in_file || (found.offset.0 == base && found.position == 0));
    if index.check(input.log_size_bytes).is_ok() {
        assert!(found.position == 0 || u64::from(found.position) < input.log_size_bytes);
        let relative = target.0 - base;
        let expected = entries
            .iter()
            .rev()
            .find(|entry| u64::from(entry.relative_offset) <= relative);
        match expected {
            Some(entry) => assert_eq!(
                (found.offset.0, found.position),
                (base + u64::from(entry.relative_offset), entry.position)
            ),
            None => assert_eq!((found.offset.0, found.position), (base, 0)),
        }
    }
    let below = index.lookup(Offset(base.saturating_sub(1)));
    assert!(below.offset.0 == base && below.position == 0 || base == 0);
}

fn check_time_index(path: &Path, input: &Input<'_>) {
    let index = match TimeIndex::open_existing(path, input.base_offset) {
        Ok(index) => index,
        Err(_) => {
            assert!(
                !input.file.len().is_multiple_of(12),
                "a whole-entry index was refused"
            );
            return;
        }
    };
    assert!(
        input.file.len().is_multiple_of(12),
        "a partial entry was accepted"
    );
    let entries = time_entries(input.file);
    assert_eq!(index.entry_count(), entries.len());
    let base = input.base_offset.0;
    let found = index.lookup(TimestampMs(input.target));
    let start = TimestampOffset {
        timestamp: TimestampMs::NONE,
        offset: input.base_offset,
    };
    let as_found = |entry: &TimeIndexEntry| TimestampOffset {
        timestamp: TimestampMs(entry.timestamp_ms),
        offset: Offset(base + u64::from(entry.relative_offset)),
    };
    assert!(found == start || entries.iter().any(|entry| as_found(entry) == found));
    let next_offset = Offset(base + u64::from(input.log_size_bytes as u32));
    if index.check(next_offset).is_ok() {
        assert!(found == start || found.offset < next_offset.max(input.base_offset.next()));
        let expected = entries
            .iter()
            .rev()
            .find(|entry| entry.timestamp_ms <= input.target);
        assert_eq!(found, expected.map_or(start, as_found));
    }
}
