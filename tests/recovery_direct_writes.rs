//! Recovery of logs written with `O_DIRECT` (`LogWriteMode::direct_writes`) and of preallocated
//! logs: every batch is served and no padding is left after a close; a crash cuts only the last
//! block's padding and the space reserved ahead; a consumer reading past the page cache while
//! the writer appends reads every record; data found in the reserved space past the log end is
//! reported, not cut (a misdirected write, R14), as is a last block that does not read back as
//! sent; a truncation keeps the bytes below the cut; and preallocated segments hold only their
//! batches after a close and after a crash.
//!
//! How: a log in a directory on a disk that accepts `O_DIRECT` (`/var/tmp`, else the system's
//! temporary directory; a `SKIP:` line when it refuses), over the backend `SEGLOG_IO_BACKEND`
//! names, with 16 KiB segments (256 KiB preallocated ones) so that the active segment spans
//! several 4 KiB blocks; written, crashed (dropped without a close) or closed, sometimes with
//! bytes written where the log does not expect them, then reopened and checked against what it
//! served before.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::fs;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use seglog::config::LogConfig;
use seglog::error::{AppendError, StorageError};
use seglog::format::Batch;
use seglog::io::{IoBackend, ring_tests_must_run};
use seglog::log::{LogWriteMode, PartitionLog, RecoveryReport};
use seglog::testing::{current_test, skip};
use seglog::types::Offset;
use support::assert_matches;
use support::recovery::*;

mod support;

/// `O_DIRECT` writes (`EngineConfig::direct_writes`): segments of 16 KiB, so the active segment
/// spans several 4 KiB blocks and the log still rolls.
fn direct_config() -> LogConfig {
    config().with_segment_bytes(16 * 1024)
}

/// Appends written with `O_DIRECT`.
const DIRECT: LogWriteMode = LogWriteMode {
    direct_writes: true,
    prewrite_synced: true,
    producer_id_expiration_ms: seglog::log::PRODUCER_ID_EXPIRATION_MS_DEFAULT,
};

/// A scratch directory on a disk (tmpfs before Linux 6.6 has no `O_DIRECT`): `/var/tmp` when it
/// can, else the system's temporary directory. `None`, after a `SKIP:` line (a failure under
/// `CI=true`), when that file system refuses `O_DIRECT` too.
fn direct_scratch() -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let probe = dir.path().join("probe");
    fs::write(&probe, b"").unwrap();
    let direct = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    fs::remove_file(&probe).unwrap();
    match direct {
        Ok(_) => Some(dir),
        Err(error) => {
            let reason = format!("{} refuses O_DIRECT: {error}", dir.path().display());
            skip(&current_test("a recovery test of O_DIRECT writes"), reason);
            None
        }
    }
}

fn open_direct(dir: &Path, clean: bool, recovery_point: Offset) -> (PartitionLog, RecoveryReport) {
    open_partition_log_with(dir, direct_config(), DIRECT, clean, recovery_point.0)
}

/// A log written with `O_DIRECT` in a scratch directory, opened uncleanly from offset 0, holding
/// `batches` batches, flushed when `flush` says; `None` when the disk refuses `O_DIRECT` (after
/// a `SKIP:` line).
fn direct_log(batches: usize, flush: bool) -> Option<(tempfile::TempDir, PathBuf, PartitionLog)> {
    let root = direct_scratch()?;
    let dir = partition_dir(root.path());
    let (mut log, _) = open_direct(&dir, false, Offset(0));
    populate(&mut log, batches);
    if flush {
        log.flush().unwrap();
    }
    Some((root, dir, log))
}

/// Opens the log in `dir` with `preallocate=true` (256 KiB segments), from offset 0.
fn open_preallocated(dir: &Path, clean: bool) -> (PartitionLog, RecoveryReport) {
    let preallocating = config()
        .with_segment_bytes(256 * 1024)
        .with_preallocate(true);
    open_partition_log(dir, preallocating, clean, 0)
}

/// The active `.log` of `dir` opened for writing (a test's misdirected write), and its path.
fn active_for_writing(dir: &Path) -> (PathBuf, fs::File) {
    let active = segment_logs(dir).pop().unwrap();
    let file = fs::OpenOptions::new().write(true).open(&active).unwrap();
    (active, file)
}

#[test]
fn direct_writes_serve_every_batch_and_leave_no_padding_after_close() {
    let Some((_root, dir, mut log)) = direct_log(600, false) else {
        return;
    };
    assert!(log.segment_count() > 3, "the log rolled");
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    let end = log.log_end_offset();
    log.close().unwrap();
    assert_eq!(
        log_file_bytes(&dir),
        payload,
        "the .log files hold the batches, no padding"
    );
    let (mut log, report) = open_direct(&dir, true, end);
    assert_eq!(report, RecoveryReport::default());
    assert_serves(&mut log, &batches);
    assert_time_lookups(&mut log);
    assert_appends_at(&mut log, end.0);
}

/// Every batch from `offset` to the log end, read in fetches of 1 MiB, checked record by record.
/// Returns the offset after the last one.
fn consume(log: &mut PartitionLog, mut offset: u64) -> u64 {
    while offset < log.log_end_offset().0 {
        let mut rest = log.read(Offset(offset), 1024 * 1024).unwrap().records;
        assert!(
            !rest.is_empty(),
            "a fetch at {offset} below the log end is empty"
        );
        while !rest.is_empty() {
            let batch = Batch::decode(&rest, u64::MAX).unwrap();
            assert_eq!(batch.base_offset() as u64, offset, "batches in order");
            check_records(&batch);
            offset = batch.last_offset() as u64 + 1;
            rest = rest.slice(batch.size_bytes() as usize..);
        }
    }
    offset
}

#[test]
fn a_consumer_catching_up_past_the_page_cache_while_the_o_direct_writer_appends_reads_every_record()
{
    // Both options on: large cold reads go through windows read past the page cache (io_uring's
    // `direct_cold_reads`; some of this consumer's reads do) while the active segment is
    // appended to through its O_DIRECT descriptor. That a window read before such an append is
    // not served after it is pinned by `io::uring`'s own test of an O_DIRECT descriptor's write.
    let Some(root) = direct_scratch() else {
        return;
    };
    let test = "recovery_direct_writes::a_consumer_catching_up_past_the_page_cache_while_the_o_direct_writer_appends_reads_every_record";
    if !ring_tests_must_run(test) {
        return;
    }
    let storage = IoBackend::IoUring
        .storage_with_direct_cold_reads(true)
        .unwrap();
    let dir = partition_dir(root.path());
    let config = config()
        .with_segment_bytes(64 * 1024 * 1024)
        .with_index_interval_bytes(4096);
    let (mut log, _) = open_partition_on(&dir, (config, DIRECT), false, 0, storage).unwrap();
    let append = |log: &mut PartitionLog, batches: usize| {
        for _ in 0..batches {
            let first = log.log_end_offset().0;
            log.append(batch(first, 100), now()).unwrap();
        }
    };
    append(&mut log, 400); // about 2.6 MB
    let mut offset = 0;
    for _ in 0..6 {
        offset = consume(&mut log, offset);
        append(&mut log, 60);
    }
    assert_eq!(consume(&mut log, offset), log.log_end_offset().0);
}

#[test]
fn a_crash_under_direct_writes_cuts_only_the_padding() {
    let Some((_root, dir, mut log)) = direct_log(250, true) else {
        return;
    };
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    let end = log.log_end_offset();
    drop(log); // a crash: the active segment keeps its zero padding and reserved space
    let active = segment_logs(&dir).pop().unwrap();
    let padded = fs::metadata(&active).unwrap().len();
    assert!(
        padded.is_multiple_of(4096),
        "the active .log ends on a block"
    );
    // The last block's padding, then the blocks reserved ahead of the writes (`fallocate`,
    // which read as zeros).
    let padding = log_file_bytes(&dir) - payload;
    assert!(padding > 0, "{padding} bytes past the batches");
    let tail = fs::read(&active).unwrap();
    let past_batches = &tail[tail.len() - padding as usize..];
    assert!(
        past_batches.iter().all(|byte| *byte == 0),
        "zeros past the batches"
    );
    let (mut log, report) = open_direct(&dir, false, Offset(0));
    assert_eq!(report.bytes_truncated, padding);
    assert_eq!(report.segments_deleted, 0);
    assert_serves(&mut log, &batches);
    assert_appends_at(&mut log, end.0);
}

/// A write the device put past the log end, in the last block's padding or the space reserved
/// ahead (a misdirected write, R14), would be cut with that space when the segment stops being
/// active, leaving its own place a hole that reads as a torn tail: the roll reports it instead.
#[test]
fn data_in_the_reserved_space_past_the_log_end_is_reported_not_cut() {
    let Some((_root, dir, mut log)) = direct_log(40, true) else {
        return;
    };
    let (active, file) = active_for_writing(&dir);
    let file_bytes = fs::metadata(&active).unwrap().len();
    let payload = payload_bytes(&served_batches(&mut log));
    assert!(
        file_bytes >= payload + 8192,
        "space reserved past the log end"
    );
    // A batch's bytes landed 4 KiB past the log end's block instead of at their own place.
    let landed_at = (payload / 4096 + 1) * 4096;
    file.write_all_at(&[0xab; 512], landed_at).unwrap();
    file.sync_all().unwrap();
    assert_matches!(
        log.roll(now()).unwrap_err(),
        StorageError::Corrupt { position, .. } if position == landed_at
    );
    assert_eq!(
        fs::metadata(&active).unwrap().len(),
        file_bytes,
        "nothing was cut"
    );
}

/// R14 on `O_DIRECT`: the first append after a sync reads the last block written back. Had that
/// block's write landed elsewhere, the device would hold older bytes there, and the append would
/// rewrite the block over the only evidence; it is refused instead, nothing written.
#[test]
fn an_append_after_a_sync_refuses_a_last_block_that_does_not_read_back_as_sent() {
    let Some((_root, dir, mut log)) = direct_log(3, true) else {
        return;
    };
    let payload = payload_bytes(&served_batches(&mut log));
    // The last batch's final bytes, as if the write that carried them had landed elsewhere.
    let (_, file) = active_for_writing(&dir);
    file.write_all_at(&[0xab; 16], payload - 16).unwrap();
    let end = log.log_end_offset();
    assert_matches!(
        log.append(batch(end.0, 1), now()).unwrap_err(),
        AppendError::Storage(StorageError::Corrupt { position, .. })
            if (payload - 16..payload).contains(&position)
    );
    assert_eq!(log.log_end_offset(), end, "nothing appended");
}

/// R14 on a preallocated log written through the page cache: an append into the reserved space
/// first checks it holds zeros, so a write that landed there is reported, not overwritten.
#[test]
fn an_append_into_reserved_space_that_holds_data_is_refused() {
    let Some(root) = direct_scratch() else {
        return;
    };
    let dir = partition_dir(root.path());
    let (mut log, _) = open_preallocated(&dir, false);
    populate(&mut log, 3);
    let payload = payload_bytes(&served_batches(&mut log));
    let (active, file) = active_for_writing(&dir);
    assert!(
        fs::metadata(&active).unwrap().len() > payload + 512,
        "space reserved"
    );
    file.write_all_at(&[0xab; 512], payload + 8).unwrap();
    let end = log.log_end_offset();
    assert_matches!(
        log.append(batch(end.0, 1), now()).unwrap_err(),
        AppendError::Storage(StorageError::Corrupt { position, .. }) if position == payload + 8
    );
    assert_eq!(log.log_end_offset(), end, "nothing appended");
}

#[test]
fn truncation_under_direct_writes_keeps_the_bytes_below_the_cut() {
    let Some((_root, dir, mut log)) = direct_log(120, false) else {
        return;
    };
    let batches = served_batches(&mut log);
    // Cut inside the active segment, at a batch whose start is not on a block boundary.
    let active_base = log.segments().last().unwrap().base_offset;
    let keep = batches
        .iter()
        .position(|batch| batch.base > active_base.0 + 5)
        .unwrap();
    log.truncate_to(Offset(batches[keep].base)).unwrap();
    populate(&mut log, 60);
    let after = served_batches(&mut log);
    assert_eq!(after[..keep], batches[..keep]);
    let end = log.log_end_offset();
    log.close().unwrap();
    let (mut log, report) = open_direct(&dir, true, end);
    assert_eq!(report, RecoveryReport::default());
    assert_serves(&mut log, &after);
}

#[test]
fn preallocated_segments_hold_only_their_batches_after_close_and_after_a_crash() {
    let Some(root) = direct_scratch() else {
        return;
    };
    let dir = partition_dir(root.path());
    let open = |clean: bool| open_preallocated(&dir, clean);
    let (mut log, _) = open(false);
    populate(&mut log, 200);
    let active = segment_logs(&dir).pop().unwrap();
    let reserved = fs::metadata(&active).unwrap().len();
    assert!(
        reserved >= 64 * 1024,
        "the active .log is preallocated: {reserved} bytes"
    );
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    assert!(payload < reserved);
    log.flush().unwrap();
    drop(log); // a crash: the reserved zeros stay
    let mut log = reopened_after_crash(open, reserved - payload, &batches);
    populate(&mut log, 100);
    assert_close_keeps_only_batches(log, &dir, open, "close cut the reservation");
}
