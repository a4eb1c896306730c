//! Recovery of the files an interrupted deletion or compaction leaves in a partition
//! directory: `.cleaned` leftovers are removed on open and `.deleted` ones left to the log's
//! owner, due for unlinking at once; a `.swap` segment replaces
//! the segment it covers, or the two it covers; and a `.swap` from an incomplete split (at or
//! above the lowest `.cleaned` base offset, Kafka's KAFKA-6264 rule) is discarded, the original
//! kept.
//!
//! How: a log closed cleanly over the backend `SEGLOG_IO_BACKEND` names
//! (`support::recovery::ClosedLog`: `segment.bytes` = 1024, so the log has several segments),
//! copied for every case, the leftover files written beside its segments, and the partition log
//! reopened directly after a clean shutdown, from the recovery point the close left: every
//! batch is served with identical bytes, lookups by timestamp agree with the records' own
//! timestamps, the leftovers are gone, and the segment count is what the swap leaves.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::fs;

use support::dirs::segment_file;
use support::recovery::*;

mod support;

#[test]
fn cleaned_leftovers_are_removed_on_open_and_deleted_ones_unlinked_when_due() {
    let closed = ClosedLog::new();
    let (_work, dir) = closed.copy();
    let before = file_names(&dir);
    let logs = segment_logs(&dir);
    let (first, second) = (base_of(&logs[0]), base_of(&logs[1]));
    let leftovers = [
        segment_file(&dir, first, ".log.deleted"),
        segment_file(&dir, first, ".index.deleted"),
        segment_file(&dir, 99_999, ".timeindex.deleted"),
        segment_file(&dir, second, ".log.cleaned"),
        segment_file(&dir, second, ".index.cleaned"),
    ];
    for (n, path) in leftovers.iter().enumerate() {
        fs::write(path, XorShift(n as u64 + 1).bytes(300)).unwrap();
    }
    let (mut log, report) = closed.reopen_serving(&dir, true);
    let (deleted, cleaned) = leftovers.split_at(3);
    for path in cleaned {
        assert!(!path.exists(), "{} must be removed", path.display());
    }
    assert!(
        deleted.iter().all(|path| path.exists()),
        "left to the owner"
    );
    assert_eq!(
        log.delete_expired_files(now()).unwrap(),
        2,
        "two segments' files"
    );
    for path in deleted {
        assert!(!path.exists(), "{} must be unlinked", path.display());
    }
    assert_eq!(log.segment_count(), closed.segment_count);
    assert_eq!(report.leftovers_swept, cleaned.len());
    assert_eq!(report.bytes_truncated, 0);
    log.close().unwrap();
    assert_eq!(file_names(&dir), before);
}

#[test]
fn a_swap_segment_replaces_the_segment_it_covers() {
    let closed = ClosedLog::new();
    let (_work, dir, logs) = closed.copy_listing();
    let base = base_of(&logs[1]);
    let swap = segment_file(&dir, base, ".log.swap");
    fs::copy(&logs[1], &swap).unwrap();
    let (log, report) = closed.reopen_serving(&dir, true);
    assert_eq!(log.segment_count(), closed.segment_count);
    assert!(!swap.exists());
    assert!(segment_file(&dir, base, ".log").exists());
    assert!(report.leftovers_swept >= 1);
}

#[test]
fn a_swap_segment_covering_two_segments_replaces_both() {
    let closed = ClosedLog::new();
    let (_work, dir, logs) = closed.copy_listing();
    let (base, next) = (base_of(&logs[1]), base_of(&logs[2]));
    // What a cleaner that merged segments 1 and 2 into one would leave.
    let mut merged = fs::read(&logs[1]).unwrap();
    merged.extend(fs::read(&logs[2]).unwrap());
    fs::write(segment_file(&dir, base, ".log.swap"), merged).unwrap();
    let (mut log, _) = closed.reopen_serving(&dir, true);
    assert_eq!(log.segment_count(), closed.segment_count - 1);
    for extension in [".log", ".index", ".timeindex"] {
        assert!(!segment_file(&dir, next, extension).exists());
    }
    assert!(!segment_file(&dir, base, ".log.swap").exists());
    let merged_info = log.segments().find(|s| s.base_offset.0 == base).unwrap();
    assert_eq!(merged_info.next_offset.0, base_of(&logs[3]));
    assert!(merged_info.offset_index_entries > 0);
    assert_appends_at(&mut log, closed.end());
}

#[test]
fn a_swap_from_an_incomplete_split_is_discarded() {
    // Kafka's KAFKA-6264 rule: a `.swap` whose base offset is at or above the lowest `.cleaned`
    // base offset may be part of an incomplete split and is deleted; the original stays.
    let closed = ClosedLog::new();
    let (_work, dir, logs) = closed.copy_listing();
    let base = base_of(&logs[1]);
    let in_segment = closed.batches_in(base, base_of(&logs[2]));
    let split_at = in_segment.len() / 2;
    let first_half: Vec<u8> = in_segment[..split_at]
        .iter()
        .flat_map(|b| b.bytes.to_vec())
        .collect();
    let second_half: Vec<u8> = in_segment[split_at..]
        .iter()
        .flat_map(|b| b.bytes.to_vec())
        .collect();
    let second_base = in_segment[split_at].base;
    fs::write(segment_file(&dir, base, ".log.cleaned"), first_half).unwrap();
    fs::write(segment_file(&dir, second_base, ".log.swap"), second_half).unwrap();
    let (mut log, _) = open_partition_log(&dir, config(), true, closed.recovery_point);
    assert_serves(&mut log, &closed.batches);
    assert_eq!(log.segment_count(), closed.segment_count);
    assert!(!segment_file(&dir, second_base, ".log.swap").exists());
    assert!(!segment_file(&dir, second_base, ".log").exists());
    assert!(!segment_file(&dir, base, ".log.cleaned").exists());
}
