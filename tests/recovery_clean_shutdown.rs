//! Recovery and the clean-shutdown marker: a clean close then reopen does no recovery and
//! leaves every sealed file untouched, the marker is consumed at open (a crash after it is seen
//! as unclean), `PartitionLog::open` reports nothing for a clean log, a crashed partition
//! left unopened through a clean session is still recovered, whatever the marker says, and after
//! a crash each partition is recovered at its first use, answering before the others are.
//!
//! How: the data directory's own files (the marker, the checkpoints) are the engine's, so the
//! directory cases run the inline engine (`support::recovery::open_engine`: the engine's shard
//! code on the test's thread, over the backend `SEGLOG_IO_BACKEND` names, `segment.bytes` =
//! 1024, `index.interval.bytes` = 64): a log it wrote and closed, or one left as a crash leaves
//! it (`support::recovery::CrashedLog`) that it adopts, is reopened, and what it serves, whether
//! the marker is there, and what changed on disk are checked. Whether an open recovered is seen
//! through damage only a recovery finds: with a record byte flipped in the active segment's
//! first batch, which a valid batch follows in its sector, an open that trusts the files
//! succeeds (only a read of that batch fails its CRC check); so does an unclean open whose
//! recovery point is the log end (recovery starts there: the synced batches are not read
//! again). The partition-log case opens `PartitionLog` directly and reads its recovery report.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::fs;
use std::path::{Path, PathBuf};

use seglog::engine::{Durability, Engine};
use seglog::error::{ReadError, StorageError};
use seglog::log::RecoveryReport;
use support::dirs::flip_byte;
use support::recovery::*;

mod support;

/// A data directory the inline engine wrote and closed cleanly: the topic `events` of one
/// partition, in several segments, the active one holding at least three batches. Returns the
/// directory and the batches served before the close.
fn closed_by_the_engine() -> (tempfile::TempDir, Vec<StoredBatch>) {
    let (root, dir) = scratch_partition();
    let engine = open_engine(root.path());
    let topic = engine.create_topic(TOPIC, 1, config()).unwrap();
    let (mut end, mut bases) = (0, Vec::new());
    for n in 0u64.. {
        let count = 1 + n * 7 % 4;
        let info = engine.append(&topic, 0, batch(end, count), Durability::Written);
        assert_eq!(info.wait().unwrap().first_offset.0, end);
        bases.push(end);
        end += count;
        let logs = segment_logs(&dir);
        let active_base = base_of(logs.last().unwrap());
        let in_active = bases.iter().filter(|base| **base >= active_base).count();
        if n >= 30 && logs.len() >= 4 && in_active >= 3 {
            break;
        }
    }
    let batches = engine_batches(&engine).unwrap();
    assert_eq!(batches.len(), bases.len());
    engine.close().unwrap();
    assert!(root.path().join(CLEAN_SHUTDOWN_MARKER).exists());
    (root, batches)
}

/// Flips a record byte of the first batch of the active segment in `dir`, which a valid batch
/// follows in its sector; returns the active `.log` and the index of that batch in `batches`.
fn damage_the_active_segment(dir: &Path, batches: &[StoredBatch]) -> (PathBuf, usize) {
    let active_log = segment_logs(dir).pop().unwrap();
    let active_base = base_of(&active_log);
    let first = batches.iter().position(|b| b.base == active_base).unwrap();
    let two_batches = batches[first].bytes.len() + batches[first + 1].bytes.len();
    assert!(
        two_batches < 512,
        "the next batch starts in the same sector"
    );
    flip_byte(&active_log, 70, 0xff);
    (active_log, first)
}

#[test]
fn a_clean_close_then_reopen_does_no_recovery() {
    let (root, batches) = closed_by_the_engine();
    let dir = partition_dir(root.path());
    let segment_count = segment_logs(&dir).len();
    let (active_log, damaged) = damage_the_active_segment(&dir, &batches);
    let before = file_contents(&dir);
    let marker = root.path().join(CLEAN_SHUTDOWN_MARKER);

    let engine = open_engine(root.path());
    assert!(!marker.exists(), "the marker is consumed at open");
    // The files are trusted, not re-validated: the partition opens with its log end where it
    // was, and only a read of the damaged batch finds the damage (the engine checks CRCs on
    // reads); every other batch is served with identical bytes.
    let end = batches.last().unwrap().last + 1;
    let description = engine.describe_partition(TOPIC, 0).unwrap();
    assert_eq!(description.log_end_offset.0, end);
    assert_eq!(description.segment_count, segment_count);
    assert_eq!(description.offline, None);
    assert_serves_all_but(&engine, &batches, damaged, &active_log);
    // Sealed segments are untouched; the active `.log` too (its indexes are grown for appends).
    let active_stem = active_log.file_stem().unwrap().to_str().unwrap().to_owned();
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
    assert_engine_appends_at(&engine, end);
    assert_eq!(segment_logs(&dir).len(), segment_count, "the append rolled");
    engine.close().unwrap();
    assert!(marker.exists());

    // The marker is consumed at open: a crash now is seen as unclean. The next open recovers
    // from the recovery point the close checkpointed (the log end): the synced batches below it
    // are not read again, so the damage is found only by the read of its batch, as above.
    let engine = open_engine(root.path());
    assert!(!marker.exists(), "the marker is consumed at open");
    drop(engine);
    assert!(!marker.exists());
    let engine = open_engine(root.path());
    let description = engine.describe_partition(TOPIC, 0).unwrap();
    assert_eq!(description.log_end_offset.0, end + 2);
    assert_serves_all_but(&engine, &batches, damaged, &active_log);
}

/// Every batch of `batches` is served through `engine` with identical bytes, but the one at
/// index `damaged`, whose read reports the damage in `active_log`.
fn assert_serves_all_but(
    engine: &Engine,
    batches: &[StoredBatch],
    damaged: usize,
    active_log: &Path,
) {
    for (index, batch) in batches.iter().enumerate() {
        match engine_batch_at(engine, batch.base) {
            Err(ReadError::Storage(StorageError::Corrupt { file, .. })) if index == damaged => {
                assert_eq!(file, active_log);
            }
            served => assert_eq!(served.unwrap().as_ref(), Some(batch)),
        }
    }
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
    let marker = work.path().join(CLEAN_SHUTDOWN_MARKER);
    assert!(!marker.exists());
    let engine = open_engine(work.path());
    engine.close().unwrap();
    assert!(marker.exists(), "session 2 closed cleanly");
    // (What saves it today: session 2's close opens, and so recovers, every partition an
    // unclean shutdown left unopened; and were it not to, the untrimmed, preallocated index of
    // the crashed active segment fails the index check, so the segment would be re-validated.)
    let engine = open_engine(work.path());
    assert!(!marker.exists(), "session 3 took the marker");
    assert_engine_serves(&engine, &crashed.batches[..crashed.batches.len() - 1]);
    assert_engine_appends_at(&engine, crashed.last().base);
    engine.close().unwrap();
}

/// The bytes of `log` at `position..position + length` (fewer at its end).
fn bytes_at(log: &Path, position: u64, length: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut bytes = vec![0u8; length];
    let read = fs::File::open(log)
        .unwrap()
        .read_at(&mut bytes, position)
        .unwrap();
    bytes.truncate(read);
    bytes
}

#[test]
fn after_a_crash_each_partition_is_recovered_on_first_use_and_served_before_the_others() {
    // Two partitions on two shards, each left by a crash with the first half of a batch past
    // its last one (a torn write). After the unclean open, describing partition 1 recovers it
    // (its torn bytes cut) and answers while partition 0's torn bytes are still on disk: no
    // partition waits for another's recovery. Partition 0 is recovered when it is first used.
    let root = tempfile::tempdir().unwrap();
    let config = support::engines::engine_config(2).with_default_topic_config(config());
    let engine = Engine::open(root.path(), config.clone()).unwrap();
    let topic = engine
        .create_topic(TOPIC, 2, config.default_topic_config.clone())
        .unwrap();
    for partition in 0..2 {
        for first in (0..12).step_by(3) {
            let appended = engine.append(&topic, partition, batch(first, 3), Durability::Durable);
            appended.wait().unwrap();
        }
    }
    let torn_at: Vec<(PathBuf, u64)> = (0..2)
        .map(|partition| {
            let described = engine.describe_partition(TOPIC, partition).unwrap();
            assert_eq!(described.segment_count, 1);
            let log = segment_logs(&root.path().join(format!("{TOPIC}-{partition}")))
                .pop()
                .unwrap();
            (log, described.size_bytes)
        })
        .collect();
    drop(engine);
    let torn = batch(12, 3);
    let torn = &torn[..torn.len() / 2];
    for (log, position) in &torn_at {
        use std::os::unix::fs::FileExt;
        let file = fs::OpenOptions::new().write(true).open(log).unwrap();
        file.write_all_at(torn, *position).unwrap();
    }
    let still_torn = |partition: usize| {
        let (log, position) = &torn_at[partition];
        bytes_at(log, *position, torn.len()) == torn
    };

    let engine = Engine::open(root.path(), config).unwrap();
    let described = engine.describe_partition(TOPIC, 1).unwrap();
    assert_eq!(described.log_end_offset.0, 12);
    assert!(
        !still_torn(1),
        "partition 1 was recovered before it answered"
    );
    assert!(
        still_torn(0),
        "partition 0 is not recovered before its first use"
    );
    let described = engine.describe_partition(TOPIC, 0).unwrap();
    assert_eq!(described.log_end_offset.0, 12);
    assert!(!still_torn(0), "partition 0 was recovered at its first use");
    engine.close().unwrap();
}
