//! Recovery and the clean-shutdown marker: a clean close then reopen does no recovery and
//! leaves every sealed file untouched, the marker is consumed at open (a crash after it is seen
//! as unclean), `PartitionLog::open` reports nothing for a clean log, and a crashed partition
//! left unopened through a clean session is still recovered, whatever the marker says.
//!
//! How: a log over the backend `SEGLOG_IO_BACKEND` names (`support::recovery`:
//! `segment.bytes` = 1024, `index.interval.bytes` = 64), closed cleanly or left as a crash
//! leaves it, then reopened: what it serves, what recovery reports, and what changed on disk.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::fs;

use seglog::log::RecoveryReport;
use support::recovery::*;

mod support;

#[test]
fn a_clean_close_then_reopen_does_no_recovery() {
    let closed = ClosedLog::new();
    let dir = closed.dir();
    let before = file_contents(&dir);
    let mut log_dir = reopen_serving(closed.root.path(), &closed.batches);
    assert!(log_dir.had_clean_shutdown());
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_eq!(log.segment_count(), closed.segment_count);
    assert!(log_dir.recovery_reports().is_empty());
    // Sealed segments are untouched; the active `.log` too (its indexes are grown for appends).
    let active = segment_logs(&dir).pop().unwrap();
    let active_stem = active.file_stem().unwrap().to_str().unwrap().to_owned();
    for (name, content) in &before {
        if name.starts_with(&active_stem) && !name.ends_with(".log") {
            continue;
        }
        assert_eq!(
            &fs::read(dir.join(name)).unwrap(),
            content,
            "{name} changed"
        );
    }
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_appends_at(log, closed.end());
    log_dir.close().unwrap();
    // The marker is consumed at open: a crash now would be seen as unclean.
    let log_dir = open_dir(closed.root.path());
    assert!(log_dir.had_clean_shutdown());
    drop(log_dir);
    let log_dir = open_dir(closed.root.path());
    assert!(!log_dir.had_clean_shutdown());
}

#[test]
fn partition_log_open_reports_nothing_for_a_clean_log() {
    // The same guarantee one level down, through `PartitionLog::open` directly.
    let (_root, dir) = scratch_partition();
    let (mut log, report) = open_partition_log(&dir, config(), false, 0);
    assert_eq!(report.bytes_truncated, 0);
    populate(&mut log, 25);
    let batches = served_batches(&mut log);
    let end = log.log_end_offset();
    log.close().unwrap();
    let (mut log, report) = open_partition_log(&dir, config(), true, end.0);
    assert_eq!(report, RecoveryReport::default());
    assert_serves(&mut log, &batches);
    assert_time_lookups(&mut log);
}

#[test]
fn a_crashed_partition_left_unopened_through_a_clean_session_is_still_recovered() {
    // Session 1 crashes with a corrupt last batch. Session 2 opens the directory but never the
    // partition, and closes cleanly, which writes the clean-shutdown marker. Session 3 must not
    // trust the partition's damaged tail because of that marker.
    let crashed = CrashedLog::new();
    let (work, _) = crashed.copy_flipping(70, 0x01);
    let log_dir = open_dir(work.path());
    assert!(!log_dir.had_clean_shutdown());
    log_dir.close().unwrap();
    // (What saves it today: the untrimmed, preallocated index of its active segment fails the
    // index check, so the segment is re-validated.)
    let mut log_dir = open_dir(work.path());
    assert!(log_dir.had_clean_shutdown());
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_serves(log, &crashed.batches[..crashed.batches.len() - 1]);
    assert_appends_at(log, crashed.last().base);
}
