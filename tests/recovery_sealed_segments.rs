//! Recovery of a partition log's sealed segments: a roll leaves the sealed segment's sync to the
//! log's owner (the engine's shards), so the recovery point moves only when the seal's sync is
//! reported; a sealed segment torn or cut short above the recovery point is a torn tail, cut
//! there with the later segments deleted; the same cut below the recovery point is damage and
//! fails the open; and a corrupt middle segment fails the
//! partition, naming the file and the position, with nothing truncated or deleted.
//!
//! How: a log closed cleanly over the backend `SEGLOG_IO_BACKEND` names
//! (`support::recovery::ClosedLog`: `segment.bytes` = 1024, so the log has several segments),
//! copied for every case, its second segment cut or corrupted, and the partition log reopened
//! directly as after a crash (no clean shutdown), from the recovery point the case names: what is
//! served, what is left on disk, and what the open says are checked against the case.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::path::PathBuf;

use seglog::io::storage_from_env;
use seglog::log::{LogWriteMode, PartitionLog};
use seglog::types::Offset;
use support::dirs::flip_byte;
use support::recovery::*;

mod support;

/// A roll leaves the recovery point where it was and hands the sealed segment's sync to the
/// owner; reporting it moves the recovery point to the segment's
/// end, and a flush syncs any seal the owner has not taken before the active segment.
#[test]
fn a_deferred_seal_moves_the_recovery_point_only_when_its_sync_is_reported() {
    let (_root, dir) = scratch_partition();
    let (mut opened, _) =
        open_partition_log_with(&dir, config(), LogWriteMode::default(), false, 0);
    let log = &mut opened;
    let rolls_until = |log: &mut PartitionLog| {
        let segments = log.segments().count();
        while log.segments().count() == segments {
            populate(log, 1);
        }
    };
    rolls_until(log);
    let before = log.recovery_point();
    let seals = log.take_unsynced_seals();
    assert_eq!(seals.len(), 1);
    let active_base = log.segments().last().unwrap().base_offset;
    assert_eq!(seals[0].through, active_base);
    assert!(before < active_base, "the roll synced nothing: {before}");
    assert!(log.take_unsynced_seals().is_empty(), "taken once");
    let result = seals[0].sync(&*storage_from_env());
    log.mark_seal_synced(seals[0].through, result).unwrap();
    assert_eq!(log.recovery_point(), active_base);

    rolls_until(log);
    populate(log, 1);
    log.flush().unwrap();
    assert!(log.take_unsynced_seals().is_empty(), "the flush synced it");
    assert_eq!(log.recovery_point(), log.log_end_offset());
    opened.close().unwrap();
}

/// How a crash before a roll's deferred seal sync can leave a sealed segment.
#[derive(Debug, Clone, Copy)]
enum SealCut {
    /// Its last batch written in part.
    TornBatch,
    /// Its last batch lost whole: the segment ends before the next one starts.
    LostBatch,
}

/// A copy of the closed log with its second segment cut as `cut`; returns the work directory,
/// the partition directory, the batches the cut segment keeps and the last one it had.
fn cut_sealed_segment(
    closed: &ClosedLog,
    cut: SealCut,
) -> (tempfile::TempDir, PathBuf, Vec<StoredBatch>, u64) {
    let (work, dir) = closed.copy();
    let logs = segment_logs(&dir);
    let (victim_base, next_base) = (base_of(&logs[1]), base_of(&logs[2]));
    let in_victim = closed.batches_in(victim_base, next_base);
    assert!(in_victim.len() >= 2);
    let last = in_victim[in_victim.len() - 1];
    let kept_bytes: usize = in_victim[..in_victim.len() - 1]
        .iter()
        .map(|b| b.bytes.len())
        .sum();
    let cut_bytes = match cut {
        SealCut::TornBatch => kept_bytes + last.bytes.len() / 2,
        SealCut::LostBatch => kept_bytes,
    };
    truncate_file(&logs[1], cut_bytes as u64);
    let kept: Vec<StoredBatch> = closed
        .batches
        .iter()
        .filter(|b| b.base < last.base)
        .cloned()
        .collect();
    (work, dir, kept, last.base)
}

/// A crash before a roll's deferred seal sync finished can leave a sealed segment torn or cut
/// short, with later segments after it: above the recovery point that is a torn tail like the
/// active segment's. Recovery cuts it there and deletes the later segments (which can hold no
/// acknowledged durable record), and the log serves everything before the cut and takes appends.
#[test]
fn a_sealed_segment_torn_or_cut_short_above_the_recovery_point_is_cut_and_later_ones_deleted() {
    let closed = ClosedLog::new();
    for cut in [SealCut::TornBatch, SealCut::LostBatch] {
        let (_work, dir, kept, cut_at) = cut_sealed_segment(&closed, cut);
        let (mut opened, _) =
            open_partition_log_with(&dir, config(), LogWriteMode::default(), false, 0);
        let log = &mut opened;
        assert_eq!(log.log_end_offset(), Offset(cut_at), "{cut:?}");
        assert_serves(log, &kept);
        assert_eq!(
            segment_logs(&dir).len(),
            2,
            "{cut:?}: the later segments are deleted"
        );
        populate(log, 3);
        assert_eq!(served_batches(log).len(), kept.len() + 3);
        opened.close().unwrap();
    }
}

/// The same cut is damage to synced data below the recovery point: the partition refuses to
/// open and nothing is deleted.
#[test]
fn a_sealed_segment_cut_below_the_recovery_point_fails() {
    let closed = ClosedLog::new();
    for cut in [SealCut::TornBatch, SealCut::LostBatch] {
        // The recovery point of the checkpoint the clean close wrote: the log end.
        let recovery_point = closed.end();
        let (_work, dir, _, _) = cut_sealed_segment(&closed, cut);
        let before = segment_logs(&dir);
        let storage = storage_from_env();
        let opened = open_partition_on(
            &dir,
            (config(), LogWriteMode::default()),
            false,
            recovery_point,
            storage,
        );
        let opened = opened.map(|_| ());
        assert!(opened.is_err(), "{cut:?}, {recovery_point}: {opened:?}");
        assert_eq!(segment_logs(&dir), before, "{cut:?}: nothing deleted");
    }
}

/// A bad batch in a segment that later segments follow is damage to data that was synced when
/// the segment rolled, not a torn write: the partition refuses to open (naming the file and the
/// position) and no file is truncated or deleted (RELIABILITY.md, the promise; R13).
#[test]
fn a_corrupt_middle_segment_fails_the_partition_and_nothing_is_truncated() {
    let closed = ClosedLog::new();
    // Recovery must start at offset 0: no clean shutdown, no recovery point.
    let (_work, dir) = closed.copy();
    let logs = segment_logs(&dir);
    assert_eq!(logs.len(), closed.segment_count);
    let victim = &logs[1];
    let in_victim = closed.batches_in(base_of(victim), base_of(&logs[2]));
    assert!(in_victim.len() >= 3);
    // Corrupt the second batch of the segment, in its records.
    let bad_position = in_victim[0].bytes.len();
    flip_byte(victim, bad_position as u64 + 70, 0xff);
    let before = file_contents(&dir);

    let error = match open_partition(&dir, config(), false, 0, storage_from_env()) {
        Ok(_) => panic!("a corrupt sealed segment must not open"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains(&victim.file_name().unwrap().to_string_lossy().into_owned()),
        "the error names the file: {error}"
    );
    assert!(
        error.contains(&bad_position.to_string()),
        "and the position: {error}"
    );
    let after = file_contents(&dir);
    let logs_only = |files: &[(String, Vec<u8>)]| -> Vec<(String, Vec<u8>)> {
        files
            .iter()
            .filter(|(name, _)| name.ends_with(".log"))
            .cloned()
            .collect()
    };
    assert_eq!(
        logs_only(&after),
        logs_only(&before),
        "no segment truncated or deleted"
    );
}
