//! Recovery of logs that prewrite the space past their end (`LogWriteMode::prewrite_synced`, on by
//! default): a log synced in small steps prewrites stamped zeros ahead and holds only its batches
//! after a crash and after a close; nothing is prewritten with large syncs or when told not to;
//! a prewrite that landed over synced batches, data written into or past the prewritten space,
//! and an append over such data (whole or only its zero bytes) are reported, not cut as a torn
//! tail (misdirected writes, R14; `sim_ops` findings F8, F12, F16, F17); an append that ends
//! inside a stamp leaves the segment to seal and reopen; and a prewrite refused for a full disk
//! lets the append go ahead without it.
//!
//! How: a log over the backend `SEGLOG_IO_BACKEND` names (1 MiB segments) written by a lone
//! durable writer's pattern (a sync after each batch), crashed (dropped without a close) or
//! closed, sometimes with bytes written where the log does not expect them or storage hooks that
//! misplace or refuse a write, then reopened and checked against what it served before.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use seglog::format::Batch;
use seglog::io::Storage;
use seglog::io::hooked::StorageHooks;
use seglog::io::storage_from_env;
use seglog::log::{LogWriteMode, PartitionLog, RecoveryReport};
use seglog::types::Offset;
use support::batches::keyed_batch;
use support::hooks::hooked;
use support::recovery::*;

mod support;

/// Appends `batches` batches, syncing after each (a lone durable writer's pattern).
fn populate_synced(log: &mut PartitionLog, batches: usize) {
    for _ in 0..batches {
        populate(log, 1);
        log.flush().unwrap();
    }
}

#[test]
fn a_log_synced_in_small_steps_prewrites_ahead_and_holds_only_its_batches_after_a_crash_and_close()
{
    let (_root, dir) = scratch_partition();
    assert!(LogWriteMode::default().prewrite_synced, "on by default");
    let open = |clean: bool| try_open_plain(&dir, clean).unwrap();
    let (mut log, _) = open(false);
    populate_synced(&mut log, 50);
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    let active = segment_logs(&dir).pop().unwrap();
    let length = fs::metadata(&active).unwrap().len();
    assert!(
        length > payload && length >= 128 * 1024,
        "prewritten ahead of the {payload} bytes of batches: the file holds {length}"
    );
    let tail = fs::read(&active).unwrap().split_off(payload as usize);
    let stamps = tail
        .windows(8)
        .filter(|window| window == b"SGLGPRE1")
        .count();
    assert!(
        stamps >= 100,
        "stamped zeros (FORMAT.md §7.5): {stamps} stamps"
    );
    drop(log); // a crash: the prewritten space stays
    let mut log = reopened_after_crash(open, length - payload, &batches);
    populate_synced(&mut log, 20);
    let payload = payload_bytes(&served_batches(&mut log));
    assert!(
        log_file_bytes(&dir) > payload,
        "prewriting again after reopening"
    );
    assert_close_keeps_only_batches(log, &dir, open, "close cut the prewritten space");
}

#[test]
fn a_log_prewrites_nothing_unsynced_with_large_syncs_or_when_told_not_to() {
    let large = config().with_segment_bytes(64 * 1024 * 1024);
    type Case = (&'static str, LogWriteMode, fn(&mut PartitionLog));
    let prewrite_off = LogWriteMode {
        prewrite_synced: false,
        ..LogWriteMode::default()
    };
    let cases: [Case; 3] = [
        ("never synced", LogWriteMode::default(), |log| {
            populate(log, 200)
        }),
        ("syncs of 200 KiB", LogWriteMode::default(), |log| {
            for _ in 0..4 {
                append_bytes(log, 200 * 1024);
                log.flush().unwrap();
            }
        }),
        ("prewrite_synced off", prewrite_off, |log| {
            populate_synced(log, 50)
        }),
    ];
    for (case, mode, fill) in cases {
        let (_root, dir) = scratch_partition();
        let (mut log, _) = open_partition_log_with(&dir, large.clone(), mode, false, 0);
        fill(&mut log);
        let payload = payload_bytes(&served_batches(&mut log));
        assert_eq!(
            log_file_bytes(&dir),
            payload,
            "{case}: the file holds its batches"
        );
    }
}

/// Appends batches of 200 records (about 10 KiB) until `bytes` more are in the log.
fn append_bytes(log: &mut PartitionLog, bytes: u64) {
    let target = log.size_bytes() + bytes;
    while log.size_bytes() < target {
        let first = log.log_end_offset().0;
        log.append(batch(first, 200), now()).unwrap();
    }
}

/// A log synced in small steps, crashed: its active `.log` and the bytes of its batches.
fn crashed_prewriting_log(dir: &Path) -> (PathBuf, u64) {
    let mut log = open_plain(dir, false);
    populate_synced(&mut log, 50);
    let payload = payload_bytes(&served_batches(&mut log));
    drop(log);
    (segment_logs(dir).pop().unwrap(), payload)
}

/// What [`prewriting_log`] gives.
type PrewritingLog = (PartitionLog, Vec<StoredBatch>, u64, PathBuf, fs::File);

/// A log synced in small steps, so prewritten past its batches; its batches, their bytes in
/// all, its active `.log`, and that file opened for writing (a test's misdirected write).
fn prewriting_log(dir: &Path) -> PrewritingLog {
    let mut log = open_plain(dir, false);
    populate_synced(&mut log, 50);
    let batches = served_batches(&mut log);
    let payload = payload_bytes(&batches);
    let active = segment_logs(dir).pop().unwrap();
    let file = fs::OpenOptions::new().write(true).open(&active).unwrap();
    (log, batches, payload, active, file)
}

fn open_plain(dir: &Path, clean: bool) -> PartitionLog {
    try_open_plain(dir, clean).unwrap().0
}

/// The log in `dir` (1 MiB segments, recovery point 0), after a clean or an unclean shutdown.
fn try_open_plain(dir: &Path, clean: bool) -> Result<(PartitionLog, RecoveryReport), String> {
    try_open_on(storage_from_env(), dir, clean)
}

/// [`try_open_plain`] through `storage`.
fn try_open_on(
    storage: Arc<dyn Storage>,
    dir: &Path,
    clean: bool,
) -> Result<(PartitionLog, RecoveryReport), String> {
    let config = config().with_segment_bytes(1024 * 1024);
    open_partition(dir, config, clean, 0, storage).map_err(|error| error.to_string())
}

/// A scratch directory and a prewriting log in it ([`prewriting_log`]).
fn prewriting() -> (tempfile::TempDir, PrewritingLog) {
    let (root, dir) = scratch_partition();
    let log = prewriting_log(&dir);
    (root, log)
}

/// Asserts that `error` reports bytes found where only prewritten space belongs.
fn assert_reports_data_in_prewritten_space(error: &str) {
    assert!(
        error.contains("where only prewritten space belongs"),
        "reported, not cut: {error}"
    );
}

#[test]
fn a_prewrite_that_landed_over_synced_batches_is_reported_not_cut_as_a_torn_tail() {
    let (_root, dir) = scratch_partition();
    let (active, payload) = crashed_prewriting_log(&dir);
    // A misdirected prewrite: stamped zeros meant for past the batches land on all of them.
    let mut bytes = fs::read(&active).unwrap();
    let prewritten = bytes[payload as usize..].to_vec();
    bytes[..payload as usize].copy_from_slice(&prewritten[..payload as usize]);
    fs::write(&active, &bytes).unwrap();
    let error = try_open_plain(&dir, false).unwrap_err();
    assert!(
        error.contains("prewritten space stamped for position"),
        "reported, not cut: {error}"
    );
    assert_eq!(fs::read(&active).unwrap(), bytes, "nothing was cut");
}

#[test]
fn data_in_the_prewritten_space_is_reported_when_the_segment_stops_being_active() {
    let (_root, (log, batches, payload, active, file)) = prewriting();
    // A misdirected write of the first batch lands past the log end, in the prewritten space.
    file.write_all_at(&batches[0].bytes, payload + 4096)
        .unwrap();
    assert_reports_data_in_prewritten_space(&log.close().unwrap_err().to_string());
    assert!(
        fs::metadata(&active).unwrap().len() > payload + 4096,
        "nothing was cut"
    );
}

/// F12 (`sim_ops`): a misdirected write lands at the end of the prewritten space and past it,
/// growing the file; its batch, acknowledged by the next sync, is then only there. Cutting the
/// space when the segment stops being active would leave prewritten space where the batch
/// belongs, which reads as a torn tail after a crash: the whole file past the log end is checked
/// before the cut, not only the space prewritten.
#[test]
fn data_written_past_the_prewritten_space_is_reported_when_the_segment_stops_being_active() {
    let (_root, (log, batches, _, active, file)) = prewriting();
    let length = fs::metadata(&active).unwrap().len();
    file.write_all_at(&batches[0].bytes, length).unwrap();
    assert_reports_data_in_prewritten_space(&log.close().unwrap_err().to_string());
    assert_eq!(
        fs::metadata(&active).unwrap().len(),
        length + batches[0].bytes.len() as u64,
        "nothing was cut"
    );
}

/// F8 (`sim_ops`): a misdirected write lands just past the log end, in the prewritten space, and
/// the next append is written over part of it: what is left of the landed batch no longer
/// passes its CRC, and after a crash its records would read as a torn tail. The append checks
/// the space it overwrites first: reported, the log failed, nothing written there.
#[test]
fn an_append_over_data_in_the_prewritten_space_is_refused_and_reported() {
    let (_root, (mut log, batches, payload, active, file)) = prewriting();
    file.write_all_at(&batches[0].bytes, payload + 100).unwrap();
    let landed = fs::read(&active).unwrap();
    let error = log.append(batch(log.log_end_offset().0, 10), now());
    assert_reports_data_in_prewritten_space(&error.unwrap_err().to_string());
    assert_eq!(
        fs::read(&active).unwrap(),
        landed,
        "nothing written over it"
    );
    assert!(log.flush().is_err(), "the log failed");
}

/// F16 (`sim_ops`): the same, with the next append overwriting only the first bytes of the
/// landed batch, zeros (the top of its base offset), so the space it overwrote read as
/// prewritten. The check reads far enough past the append's end to see the bytes after them
/// whole: reported.
#[test]
fn an_append_over_the_zero_bytes_of_data_in_the_prewritten_space_is_refused_and_reported() {
    let (_root, (mut log, batches, payload, _, file)) = prewriting();
    let append = batch(log.log_end_offset().0, 10);
    let landed = batches[0].bytes.clone();
    assert_eq!(
        &landed[..8],
        &[0u8; 8],
        "a base offset of 0: eight zero bytes"
    );
    file.write_all_at(&landed, payload + append.len() as u64 - 3)
        .unwrap();
    assert_reports_data_in_prewritten_space(&log.append(append, now()).unwrap_err().to_string());
    assert!(log.flush().is_err(), "the log failed");
}

/// A one-record batch of exactly `size_bytes` (its value padded to fit).
fn batch_of_size(size_bytes: usize) -> Bytes {
    (0..size_bytes)
        .map(|value_bytes| keyed_batch(None, Some(&vec![7u8; value_bytes]), T0))
        .find(|batch| batch.len() == size_bytes)
        .unwrap()
}

#[test]
fn an_append_that_ends_inside_a_stamp_leaves_the_segment_to_seal_and_reopen() {
    let (_root, dir) = scratch_partition();
    let mut log = open_plain(&dir, false);
    log.append(batch_of_size(300), now()).unwrap();
    log.flush().unwrap(); // small syncs: the next append prewrites past its end
    let prewrite_start = log.size_bytes() + 400;
    log.append(batch_of_size(400), now()).unwrap();
    log.flush().unwrap();
    // Stamps lie every 512 bytes from the prewrite's start: end 7 bytes into the second one.
    let stamp_start = prewrite_start + 512;
    log.append(
        batch_of_size((stamp_start + 7 - log.size_bytes()) as usize),
        now(),
    )
    .unwrap();
    assert_eq!(log.size_bytes(), stamp_start + 7);
    log.roll(now()).unwrap(); // seals: checks the space past the end, then cuts it
    log.close().unwrap();
    let mut log = open_plain(&dir, true);
    assert_eq!(log.log_end_offset(), Offset(3));
    assert_eq!(log.size_bytes(), stamp_start + 7);
    for offset in 0..3 {
        let fetched = log.read(Offset(offset), 1).unwrap().records;
        let batch = Batch::decode(&fetched, u64::MAX).unwrap();
        assert_eq!(batch.base_offset(), offset as i64);
    }
}

/// A log in a scratch directory over storage with `hooks`, holding one batch synced (small
/// syncs: the next append prewrites first).
fn synced_once_over(hooks: Arc<dyn StorageHooks>) -> (tempfile::TempDir, PathBuf, PartitionLog) {
    let (root, dir) = scratch_partition();
    let (mut log, _) = try_open_on(hooked(hooks), &dir, false).unwrap();
    populate_synced(&mut log, 1);
    (root, dir, log)
}

/// Once armed with `(position, bytes)`, puts `bytes` at `position` of the `.log` next written,
/// beside that write: a prewrite that also landed where the append after it goes.
#[derive(Debug, Default)]
struct PrewriteLandsAlsoAt {
    armed: std::sync::Mutex<Option<(u64, Vec<u8>)>>,
}

impl seglog::io::hooked::StorageHooks for PrewriteLandsAlsoAt {
    fn before(&self, op: seglog::io::hooked::StorageOp, path: &Path) -> std::io::Result<()> {
        let log = path.extension().is_some_and(|ext| ext == "log");
        if log
            && matches!(op, seglog::io::hooked::StorageOp::Write)
            && let Some((position, bytes)) = self.armed.lock().unwrap().take()
        {
            let file = fs::OpenOptions::new().write(true).open(path)?;
            file.write_all_at(&bytes, position)?;
        }
        Ok(())
    }
}

/// F17 (`sim_ops`): an append prewrites the space past its end first, then writes its batches,
/// and the prewrite landed in the wrong place, over where the batches then went; the check of the
/// space an append overwrites ran before the prewrite and saw nothing. It runs after it now: the
/// stamp away from its position is reported and nothing is written.
#[test]
fn an_append_whose_prewrite_landed_where_its_batches_go_is_refused() {
    use seglog::format::prewrite::prewrite_bytes;
    let hooks = Arc::new(PrewriteLandsAlsoAt::default());
    let (_root, dir, mut log) = synced_once_over(hooks.clone());
    let end = log_file_bytes(&dir);
    *hooks.armed.lock().unwrap() = Some((end, prewrite_bytes(end + 100_000, 32)));
    let error = log
        .append(batch(log.log_end_offset().0, 10), now())
        .unwrap_err()
        .to_string();
    assert!(hooks.armed.lock().unwrap().is_none(), "the prewrite ran");
    assert!(
        error.contains("a write landed in the wrong place"),
        "reported: {error}"
    );
    assert!(log.flush().is_err(), "the log failed");
}

/// Fails the next write to a `.log` with `ENOSPC`, once armed.
#[derive(Debug, Default)]
struct FullDiskOnce {
    armed: std::sync::atomic::AtomicBool,
}

impl seglog::io::hooked::StorageHooks for FullDiskOnce {
    fn before(&self, op: seglog::io::hooked::StorageOp, path: &Path) -> std::io::Result<()> {
        let log = path.extension().is_some_and(|ext| ext == "log");
        let write = matches!(op, seglog::io::hooked::StorageOp::Write);
        if log && write && self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }
}

#[test]
fn a_prewrite_refused_for_a_full_disk_leaves_the_append_to_go_ahead_without_it() {
    let hooks = Arc::new(FullDiskOnce::default());
    let (_root, dir, mut log) = synced_once_over(hooks.clone());
    hooks.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    populate_synced(&mut log, 1);
    assert!(
        !hooks.armed.load(std::sync::atomic::Ordering::SeqCst),
        "the prewrite was refused"
    );
    let batches = served_batches(&mut log);
    assert_eq!(batches.len(), 2, "the append went ahead");
    assert_eq!(
        log_file_bytes(&dir),
        payload_bytes(&batches),
        "nothing prewritten"
    );
    populate_synced(&mut log, 3); // and prewriting resumes
    assert!(log_file_bytes(&dir) > payload_bytes(&served_batches(&mut log)));
    let batches = served_batches(&mut log);
    log.close().unwrap();
    assert_serves(&mut open_plain(&dir, true), &batches);
}
