//! Recovery of a partition log's indexes: a sealed segment's `.index` or `.timeindex` deleted
//! or zero-filled (after a clean or an unclean shutdown), an index entry past the end of its
//! `.log`, entries naming offsets past the segment's data, and an empty time index beside a full
//! offset index are all rebuilt or not trusted; and entries follow Kafka's interval rule both on
//! append and when recovery rebuilds them.
//!
//! How: a log closed cleanly over the backend `SEGLOG_IO_BACKEND` names
//! (`support::recovery::ClosedLog`: `segment.bytes` = 1024, `index.interval.bytes` = 64, so
//! every index has entries), copied for every case, its index files damaged the way the case
//! says, and the partition log reopened directly (after a clean shutdown or, where the case says,
//! an unclean one, from the recovery point the close left): every batch is served with identical
//! bytes, lookups by timestamp agree
//! with the records' own timestamps, the rebuilt indexes hold the entries the appends wrote, and
//! new appends are indexed. Nothing may panic.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::fs;
use std::path::Path;

use seglog::config::LogConfig;
use seglog::types::TimestampMs;
use support::batches::keyed_batch;
use support::dirs::segment_file;
use support::recovery::*;

mod support;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IndexDamage {
    Delete,
    ZeroFill,
}

#[test]
fn deleted_or_zeroed_indexes_of_a_sealed_segment_are_rebuilt() {
    let closed = ClosedLog::new();
    let base = closed.sealed_base;
    let original_index = fs::read(segment_file(&closed.dir(), base, ".index")).unwrap();
    let original_time_index = fs::read(segment_file(&closed.dir(), base, ".timeindex")).unwrap();
    assert_eq!(original_index.len(), closed.sealed_entries.0 * 8);
    assert_eq!(original_time_index.len(), closed.sealed_entries.1 * 12);
    let targets: [&[&str]; 3] = [&[".index", ".timeindex"], &[".index"], &[".timeindex"]];
    for (damage, clean, damaged) in [IndexDamage::Delete, IndexDamage::ZeroFill]
        .into_iter()
        .flat_map(|damage| [true, false].map(|clean| (damage, clean)))
        .flat_map(|(damage, clean)| targets.map(|damaged| (damage, clean, damaged)))
    {
        let what = format!("{damage:?} {damaged:?}, clean reopen: {clean}");
        let (_work, dir) = closed.copy();
        for extension in damaged {
            let path = segment_file(&dir, base, extension);
            match damage {
                IndexDamage::Delete => fs::remove_file(&path).unwrap(),
                IndexDamage::ZeroFill => {
                    let length = fs::metadata(&path).unwrap().len() as usize;
                    fs::write(&path, vec![0u8; length]).unwrap();
                }
            }
        }
        let (log, report) = closed.reopen_serving(&dir, clean);
        let info = log.segments().find(|s| s.base_offset.0 == base).unwrap();
        assert_eq!(
            (info.offset_index_entries, info.time_index_entries),
            closed.sealed_entries,
            "rebuilt entry counts, {what}"
        );
        assert!(report.segments_recovered >= 1, "{what}");
        assert_eq!(report.bytes_truncated, 0, "{what}");
        log.close().unwrap();
        // The rebuilt indexes are the ones the appends wrote.
        assert_eq!(
            fs::read(segment_file(&dir, base, ".index")).unwrap(),
            original_index,
            "rebuilt .index, {what}"
        );
        assert_eq!(
            fs::read(segment_file(&dir, base, ".timeindex")).unwrap(),
            original_time_index,
            "rebuilt .timeindex, {what}"
        );
    }
}

#[test]
fn an_index_entry_past_the_end_of_its_log_is_rebuilt() {
    let closed = ClosedLog::new();
    let base = closed.sealed_base;
    let (_work, dir) = closed.copy();
    let index_path = segment_file(&dir, base, ".index");
    let original_index = fs::read(&index_path).unwrap();
    let log_size = fs::metadata(segment_file(&dir, base, ".log"))
        .unwrap()
        .len();
    let last_relative = u32::from_be_bytes(
        original_index[original_index.len() - 8..][..4]
            .try_into()
            .unwrap(),
    );
    let mut bogus = Vec::new();
    bogus.extend_from_slice(&(last_relative + 1).to_be_bytes());
    bogus.extend_from_slice(&(log_size as u32 + 100).to_be_bytes());
    append_to_file(&index_path, &bogus);
    let (mut log, _) = closed.reopen_serving(&dir, true);
    let info = log.segments().find(|s| s.base_offset.0 == base).unwrap();
    assert_eq!(info.offset_index_entries, closed.sealed_entries.0);
    assert_appends_at(&mut log, closed.end());
    log.close().unwrap();
    assert_eq!(fs::read(&index_path).unwrap(), original_index);
}

#[test]
fn index_entries_naming_offsets_past_the_segment_end_are_not_trusted() {
    // The last entry of the active segment's `.index` (or `.timeindex`) keeps its position but
    // names an offset beyond the segment's data. A trusted load must not keep it: appending
    // would otherwise need an index entry below it, and a time lookup would start too late.
    let closed = ClosedLog::new();
    let active_base = base_of(segment_logs(&closed.dir()).last().unwrap());
    for (extension, entry_bytes, relative_at) in [(".index", 8, 0), (".timeindex", 12, 8)] {
        let (_work, dir) = closed.copy();
        let path = segment_file(&dir, active_base, extension);
        let mut content = fs::read(&path).unwrap();
        assert!(
            content.len() >= entry_bytes,
            "the active {extension} has entries"
        );
        let at = content.len() - entry_bytes + relative_at;
        let relative = u32::from_be_bytes(content[at..at + 4].try_into().unwrap());
        content[at..at + 4].copy_from_slice(&(relative + 1000).to_be_bytes());
        fs::write(&path, content).unwrap();
        let (mut log, _) = closed.reopen_serving(&dir, true);
        populate(&mut log, 20);
        let batches = served_batches(&mut log);
        assert_eq!(batches.len(), closed.batches.len() + 20, "{extension}");
        assert_time_lookups(&mut log);
        log.close().unwrap();
    }
}

#[test]
fn an_empty_time_index_beside_a_full_offset_index_still_finds_timestamps() {
    // A sealed segment whose `.timeindex` is empty while its `.index` has entries (Kafka leaves
    // this when a time index was lost below the recovery point). Its largest timestamp, here in
    // its first batch, must still be known, or lookups by time skip the segment.
    let (_root, dir) = scratch_partition();
    let (mut log, _) = open_partition_log(&dir, config(), false, 0);
    for n in 0..30i64 {
        let timestamp = if n == 0 { T0 + 10_000 } else { T0 + n };
        let batch = keyed_batch(None, Some(&[7u8; 100]), timestamp);
        log.append(batch, now()).unwrap();
    }
    assert!(log.segment_count() >= 2);
    let spike = |log: &mut seglog::log::PartitionLog| {
        log.read_by_timestamp(TimestampMs(T0 + 5_000))
            .unwrap()
            .map(|found| (found.timestamp.0, found.offset.0))
    };
    assert_eq!(spike(&mut log), Some((T0 + 10_000, 0)));
    log.close().unwrap();
    truncate_file(&segment_file(&dir, 0, ".timeindex"), 0);
    assert!(fs::metadata(segment_file(&dir, 0, ".index")).unwrap().len() > 0);
    let (mut log, _) = open_partition_log(&dir, config(), true, 0);
    assert_eq!(spike(&mut log), Some((T0 + 10_000, 0)));
}

/// The `(relative offset, position)` entries of a `.index` file and the `(timestamp, relative
/// offset)` entries of a `.timeindex` file.
type OffsetEntries = Vec<(u32, u32)>;

type TimeEntries = Vec<(i64, u32)>;

fn index_entries(dir: &Path, base: u64) -> (OffsetEntries, TimeEntries) {
    let index = fs::read(segment_file(dir, base, ".index")).unwrap();
    let time_index = fs::read(segment_file(dir, base, ".timeindex")).unwrap();
    let offsets = entries(&index, 8, |key| u32::from_be_bytes(key.try_into().unwrap()));
    let times = entries(&time_index, 12, |key| {
        i64::from_be_bytes(key.try_into().unwrap())
    });
    (offsets, times)
}

/// The entries of an index file of `width`-byte entries: a key (every byte but the last four,
/// read by `key`) and a 4-byte value.
fn entries<K>(bytes: &[u8], width: usize, key: impl Fn(&[u8]) -> K) -> Vec<(K, u32)> {
    let entries = bytes.chunks_exact(width);
    entries
        .map(|entry| {
            let (key_bytes, value) = entry.split_at(width - 4);
            (
                key(key_bytes),
                u32::from_be_bytes(value.try_into().unwrap()),
            )
        })
        .collect()
}

#[test]
fn index_entries_follow_kafkas_interval_rule_on_append_and_on_rebuild() {
    // Kafka indexes an append when *more than* `index.interval.bytes` were written since the last
    // entry. With batches of exactly the interval's size, that is every second batch from the
    // third on, both when appending and when a rebuild walks the `.log`.
    let (_root, dir) = scratch_partition();
    let fixed_size_batch = |offset: u64| {
        let key = key(offset);
        keyed_batch(
            Some(key.as_bytes()),
            Some(&[offset as u8; 20]),
            timestamp(offset),
        )
    };
    let size = fixed_size_batch(0).len() as u64;
    assert!((0..10).all(|offset| fixed_size_batch(offset).len() as u64 == size));
    let config = LogConfig::default()
        .with_index_interval_bytes(size)
        .with_segment_index_bytes(4096);
    let (mut log, _) = open_partition_log(&dir, config.clone(), false, 0);
    for offset in 0..10 {
        log.append(fixed_size_batch(offset), now()).unwrap();
    }
    log.close().unwrap();
    let expected_offsets: Vec<(u32, u32)> = [2u32, 4, 6, 8]
        .iter()
        .map(|offset| (*offset, offset * size as u32))
        .collect();
    // Time entries go with the offset entries, each the largest timestamp so far and the first
    // offset holding it, appended only when it grew; closing adds the segment's largest.
    let mut expected_times: Vec<(i64, u32)> = Vec::new();
    for offset in [2u64, 4, 6, 8, 9] {
        let largest = (0..=offset).map(timestamp).max().unwrap();
        let first_at_largest = (0..=offset).find(|o| timestamp(*o) == largest).unwrap();
        if expected_times
            .last()
            .is_none_or(|(last, _)| largest > *last)
        {
            expected_times.push((largest, first_at_largest as u32));
        }
    }
    assert_eq!(
        expected_times.len(),
        4,
        "offsets 4 and 9 are late: no new maximum"
    );
    assert_eq!(
        index_entries(&dir, 0),
        (expected_offsets.clone(), expected_times.clone())
    );
    // Rebuilt by an unclean open, the same entries (the final one again added at close).
    let (log, report) = open_partition_log(&dir, config, false, 0);
    assert_eq!(report.segments_recovered, 1);
    log.close().unwrap();
    assert_eq!(index_entries(&dir, 0), (expected_offsets, expected_times));
}
