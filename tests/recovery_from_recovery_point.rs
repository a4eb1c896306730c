//! Recovery that starts at the recovery point's byte (issue 47): an unclean open finds the
//! position of the recovery point from the offset index and the batch headers after its last
//! entry below it, and re-validates only what lies past it; a recovery point the `.log` does
//! not show on a batch boundary (or an index entry pointing past the log or at no batch) is not
//! trusted, and the segment is recovered from its start.
//!
//! How: a partition log (`events-0`, `segment.bytes` 64 KiB so the active segment holds many
//! batches, `index.interval.bytes` 64) is written over the backend `SEGLOG_IO_BACKEND` names,
//! synced to a recovery point in its active segment, appended to past it without a sync and
//! dropped, then damaged as the case says. Each case is copied onto the simulated disk
//! (`seglog::io::sim`, every byte taken as durable) once per step: the reopen as after a crash
//! (no clean shutdown, from the recovery point) dies after 0, 1, 2, ... mutations, the disk
//! loses power (every unsynced change may be lost, kept, torn or zeroed), and the log is reopened
//! again as after a crash; until a reopen runs to its end without dying. Every reopen must serve
//! exactly the batches the case keeps (each record checked against its offset), answer lookups
//! by timestamp, take an append at its end, and a further unclean reopen must serve the same.
//! Whether the recovery started at the recovery point is seen through the bytes it read
//! (`StorageHooks::after_read`): the synced prefix is not read when it did.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use seglog::config::LogConfig;
use seglog::io::hooked::{HookedStorage, StorageHooks, StorageOp};
use seglog::io::sim::SimStorage;
use seglog::io::{Storage, storage_from_env};
use seglog::log::{LogWriteMode, PartitionLog, RecoveryReport};
use support::dirs::{copy_dir, scratch};
use support::recovery::*;

mod support;

/// Counts the bytes read from `.log` files.
#[derive(Debug, Default)]
struct ReadBytes(AtomicU64);

impl StorageHooks for ReadBytes {
    fn before(&self, _op: StorageOp, _path: &Path) -> std::io::Result<()> {
        Ok(())
    }

    fn after_read(&self, path: &Path, bytes: usize) {
        if path.extension().is_some_and(|extension| extension == "log") {
            self.0.fetch_add(bytes as u64, Ordering::SeqCst);
        }
    }
}

fn counted(inner: Arc<dyn Storage>) -> (Arc<dyn Storage>, Arc<ReadBytes>) {
    let reads = Arc::new(ReadBytes::default());
    let storage = Arc::new(HookedStorage::new(inner, reads.clone()));
    (storage, reads)
}

fn big_segments() -> LogConfig {
    config()
        .with_segment_bytes(64 * 1024)
        .with_segment_index_bytes(8 * 1024)
}

fn open(
    dir: &Path,
    recovery_point: u64,
    storage: Arc<dyn Storage>,
) -> Result<(PartitionLog, RecoveryReport), seglog::error::OpenError> {
    let mode = LogWriteMode::default();
    open_partition_on(dir, (big_segments(), mode), false, recovery_point, storage)
}

/// A log whose active segment holds many synced batches up to the recovery point, and a few
/// past it that no sync covered, as a crash leaves it.
struct Crashed {
    root: tempfile::TempDir,
    batches: Vec<StoredBatch>,
    recovery_point: u64,
    /// Position of the recovery point's batch boundary in the active `.log`.
    recovery_position: u64,
    active_log: PathBuf,
}

impl Crashed {
    fn new() -> Crashed {
        Crashed::appending(4)
    }

    /// [`Crashed::new`] with `batches` batches of three records past the recovery point.
    fn appending(batches: usize) -> Crashed {
        let (root, dir) = scratch_partition();
        let (mut log, _) = open_partition_log(&dir, big_segments(), false, 0);
        // Two segments, then most of a third.
        for n in 0u64.. {
            if log.segment_count() >= 3 && log.segments().last().unwrap().size_bytes >= 40_000 {
                break;
            }
            let first = log.log_end_offset().0;
            log.append(batch(first, 1 + n * 7 % 4), now()).unwrap();
        }
        // Closed (its producer snapshot at the log end, which an open replays from), reopened
        // as after a clean shutdown, appended to, and dropped as a crash drops it.
        let recovery_point = log.log_end_offset().0;
        log.close().unwrap();
        let (mut log, _) = open_partition_log(&dir, big_segments(), true, recovery_point);
        let active_log = segment_logs(&dir).pop().unwrap();
        let recovery_position = fs::metadata(&active_log).unwrap().len();
        for _ in 0..batches {
            let first = log.log_end_offset().0;
            log.append(batch(first, 3), now()).unwrap();
        }
        let batches = served_batches(&mut log);
        drop(log);
        Crashed {
            root,
            batches,
            recovery_point,
            recovery_position,
            active_log,
        }
    }

    fn below_recovery_point(&self) -> Vec<StoredBatch> {
        let batches = self.batches.iter();
        batches
            .filter(|batch| batch.last < self.recovery_point)
            .cloned()
            .collect()
    }

    fn active_index(&self) -> PathBuf {
        self.active_log.with_extension("index")
    }

    /// The active offset index's entries (preallocated: up to the first zero one).
    fn index_entries(&self) -> Vec<(u32, u32)> {
        let bytes = fs::read(self.active_index()).unwrap();
        let entries = bytes.chunks_exact(8).map(|entry| {
            let relative = u32::from_be_bytes(entry[..4].try_into().unwrap());
            let position = u32::from_be_bytes(entry[4..].try_into().unwrap());
            (relative, position)
        });
        entries.take_while(|(_, position)| *position > 0).collect()
    }

    fn active_base(&self) -> u64 {
        base_of(&self.active_log)
    }

    /// Index (in the offset index) of the last entry below the recovery point.
    fn last_entry_below(&self) -> usize {
        let below = |(relative, _): &(u32, u32)| {
            self.active_base() + u64::from(*relative) < self.recovery_point
        };
        let entries = self.index_entries();
        let count = entries.iter().take_while(|entry| below(entry)).count();
        assert!(
            count >= 4,
            "the active segment has index entries below the recovery point"
        );
        count - 1
    }

    fn write_index_entry(&self, entry_index: usize, entry: (u32, u32)) {
        let mut bytes = fs::read(self.active_index()).unwrap();
        let at = entry_index * 8;
        bytes[at..at + 4].copy_from_slice(&entry.0.to_be_bytes());
        bytes[at + 4..at + 8].copy_from_slice(&entry.1.to_be_bytes());
        fs::write(self.active_index(), bytes).unwrap();
    }
}

/// Power cuts per step, each with its own seed (the simulator picks per file whether unsynced
/// changes are lost, kept, torn or zeroed, and keeps, truncates or zeroes each index).
const SEEDS_PER_STEP: u64 = 4;

/// Reopens a copy of `case` (a data directory) on the simulated disk, dying after 0, 1, 2, ...
/// mutations, with a power cut after each death; every reopen that completes must serve
/// `expected`. Returns how many steps the reopen had and the bytes of `.log` files it read.
fn reopen_at_every_step(case: &Path, recovery_point: u64, expected: &[StoredBatch]) -> (u64, u64) {
    for mutations in 0u64.. {
        assert!(mutations < 500, "the recovery ends");
        let mut completed = None;
        for seed in 0..SEEDS_PER_STEP {
            completed = reopen_dying_after(case, recovery_point, expected, (mutations, seed));
        }
        if let Some(read) = completed {
            return (mutations, read);
        }
    }
    unreachable!()
}

/// One step of [`reopen_at_every_step`]: the bytes read when the reopen ran to its end.
fn reopen_dying_after(
    case: &Path,
    recovery_point: u64,
    expected: &[StoredBatch],
    (mutations, seed): (u64, u64),
) -> Option<u64> {
    let work = scratch();
    copy_dir(case, work.path());
    let dir = partition_dir(work.path());
    let sim = SimStorage::new(work.path(), mutations * SEEDS_PER_STEP + seed).unwrap();
    sim.die_after(mutations);
    let (storage, reads) = counted(Arc::new(sim.clone()));
    let opened = open(&dir, recovery_point, storage);
    if let Ok((mut log, _)) = opened
        && !sim.is_dead()
    {
        // The open ran to its end: from here on the process lives.
        sim.die_after(u64::MAX);
        let read = reads.0.load(Ordering::SeqCst);
        assert_serves(&mut log, expected);
        assert_time_lookups(&mut log);
        drop(log);
        check_reopened(&sim, &dir, recovery_point, expected, mutations);
        return Some(read);
    }
    sim.crash().unwrap();
    check_reopened(&sim, &dir, recovery_point, expected, mutations);
    None
}

/// After a power cut, the log reopened as after a crash serves `expected`, takes an append at
/// its end and a flush, and serves the same after another power cut and unclean reopen.
fn check_reopened(
    sim: &SimStorage,
    dir: &Path,
    recovery_point: u64,
    expected: &[StoredBatch],
    mutations: u64,
) {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let opened = open(dir, recovery_point, storage.clone());
    let (mut log, _) = opened.unwrap_or_else(|error| {
        panic!("the reopen after dying after {mutations} mutations failed: {error}")
    });
    assert_serves(&mut log, expected);
    assert_time_lookups(&mut log);
    let end = log.log_end_offset().0;
    assert_appends_at(&mut log, end);
    let mut more = expected.to_vec();
    more.extend(
        served_batches(&mut log)
            .into_iter()
            .filter(|b| b.base >= end),
    );
    log.flush().unwrap();
    drop(log);
    // The flushed appends survive a power cut: the files they are in have durable names.
    sim.crash().unwrap();
    let (mut log, _) = open(dir, end + 2, storage).unwrap();
    assert_serves(&mut log, &more);
}

/// Reopens `crashed` with `recovery_point` checkpointed, dying at every step: the recovery
/// point is not trusted, so the segment is read from its start, and every batch comes back.
fn assert_recovered_from_the_segment_start(crashed: &Crashed, recovery_point: u64) {
    let (steps, read) = reopen_at_every_step(crashed.root.path(), recovery_point, &crashed.batches);
    assert_eq!(steps, 0, "the reopen writes and syncs nothing");
    let size = crashed.recovery_position;
    assert!(
        read >= size,
        "recovered from the segment's start: read {read} of {size}"
    );
}

#[test]
fn a_torn_batch_right_after_the_recovery_point_is_cut_at_every_step() {
    let crashed = Crashed::new();
    // The first batch past the recovery point is torn in its middle; nothing follows it.
    let torn = crashed
        .batches
        .iter()
        .find(|b| b.base == crashed.recovery_point);
    let torn_bytes = torn.unwrap().bytes.len() as u64;
    truncate_file(
        &crashed.active_log,
        crashed.recovery_position + torn_bytes / 2,
    );
    let expected = crashed.below_recovery_point();
    let (steps, read) =
        reopen_at_every_step(crashed.root.path(), crashed.recovery_point, &expected);
    assert_eq!(steps, 1, "the reopen cuts the torn batch and syncs nothing");
    let size = crashed.recovery_position;
    assert!(
        read < size / 2,
        "the recovery read {read} bytes of a {size}-byte synced active segment"
    );
}

#[test]
fn a_recovery_point_past_the_index_s_entries_is_found_by_walking_headers_at_every_step() {
    let crashed = Crashed::new();
    // The crash lost the index's last pages: only the first half of its entries below the
    // recovery point are left.
    let entries = crashed.index_entries();
    for entry_index in crashed.last_entry_below() / 2..entries.len() {
        crashed.write_index_entry(entry_index, (0, 0));
    }
    let (steps, read) = reopen_at_every_step(
        crashed.root.path(),
        crashed.recovery_point,
        &crashed.batches,
    );
    assert_eq!(steps, 0, "the reopen writes and syncs nothing");
    // Headers only, from the last entry left: less than the segment's bytes, which a recovery
    // from the start reads whole.
    let size = fs::metadata(&crashed.active_log).unwrap().len();
    assert!(read < size, "the walk read {read} bytes of {size}");
}

#[test]
fn an_index_entry_past_the_log_is_not_trusted_and_everything_is_recovered_at_every_step() {
    let crashed = Crashed::new();
    let last = crashed.last_entry_below();
    let (relative, _) = crashed.index_entries()[last];
    let past_the_log = fs::metadata(&crashed.active_log).unwrap().len() as u32 + 4096;
    crashed.write_index_entry(last, (relative, past_the_log));
    assert_recovered_from_the_segment_start(&crashed, crashed.recovery_point);
}

#[test]
fn an_index_entry_at_no_batch_is_not_trusted_and_everything_is_recovered_at_every_step() {
    let crashed = Crashed::new();
    let last = crashed.last_entry_below();
    let (relative, position) = crashed.index_entries()[last];
    crashed.write_index_entry(last, (relative, position + 1));
    assert_recovered_from_the_segment_start(&crashed, crashed.recovery_point);
}

#[test]
fn a_recovery_point_inside_a_batch_is_not_trusted_and_everything_is_recovered_at_every_step() {
    let crashed = Crashed::new();
    // A batch of several records below the recovery point, in the active segment.
    let inside = crashed
        .batches
        .iter()
        .rev()
        .find(|b| b.last > b.base && b.last < crashed.recovery_point)
        .unwrap();
    assert!(inside.base > crashed.active_base());
    assert_recovered_from_the_segment_start(&crashed, inside.base + 1);
}

#[test]
fn a_recovery_point_in_a_sealed_segment_whose_seal_was_not_synced_at_every_step() {
    // Appends past the recovery point rolled the segment holding it; the crash came before the
    // roll's seal sync (left to the log's owner), so the recovery point is in a sealed segment.
    let crashed = Crashed::appending(200);
    let logs = segment_logs(&crashed.active_log.with_file_name(""));
    let holding = logs
        .iter()
        .rposition(|log| base_of(log) <= crashed.recovery_point)
        .unwrap();
    assert!(holding + 1 < logs.len(), "the segment holding it is sealed");
    assert!(base_of(&logs[holding]) < crashed.recovery_point);
    let (steps, _) = reopen_at_every_step(
        crashed.root.path(),
        crashed.recovery_point,
        &crashed.batches,
    );
    assert!(
        steps >= 1,
        "the reopen syncs the seal the crash lost: {steps}"
    );
}

#[test]
fn an_unclean_open_of_a_large_synced_active_segment_does_not_read_it() {
    // 8 MiB of batches in one active segment, all synced (a clean close's recovery point),
    // reopened without the clean-shutdown marker; then 64 KiB more appended without a sync.
    let config = LogConfig::default()
        .with_segment_bytes(64 * 1024 * 1024)
        .with_index_interval_bytes(4096);
    let (_root, dir) = scratch_partition();
    let mode = LogWriteMode::default();
    let open_with = |recovery_point: u64, storage: Arc<dyn Storage>| {
        let options = (config.clone(), mode);
        open_partition_on(&dir, options, false, recovery_point, storage).unwrap()
    };
    let (mut log, _) = open_with(0, storage_from_env());
    let value = vec![7u8; 16 * 1024];
    while log.segments().last().unwrap().size_bytes < 8 * 1024 * 1024 {
        let first = log.log_end_offset().0;
        let records = [support::batches::record(
            timestamp(first),
            None,
            Some(&value),
        )];
        log.append(support::batches::batch_at(first as i64, &records), now())
            .unwrap();
    }
    assert_eq!(log.segment_count(), 1);
    let synced_end = log.log_end_offset().0;
    log.close().unwrap();
    let active_log = segment_logs(&dir).pop().unwrap();
    let synced_bytes = fs::metadata(&active_log).unwrap().len();

    let (storage, reads) = counted(storage_from_env());
    let (mut log, report) = open_with(synced_end, storage);
    assert_eq!(report.bytes_truncated, 0);
    assert_eq!(log.log_end_offset().0, synced_end);
    let read = reads.0.load(Ordering::SeqCst);
    assert!(
        read <= 1024 * 1024,
        "an unclean open of {synced_bytes} synced bytes read {read}"
    );

    // Past the recovery point: what lies there is read, the synced prefix still not.
    for _ in 0..4 {
        let first = log.log_end_offset().0;
        let records = [support::batches::record(
            timestamp(first),
            None,
            Some(&value),
        )];
        log.append(support::batches::batch_at(first as i64, &records), now())
            .unwrap();
    }
    let end = log.log_end_offset();
    drop(log);
    let unsynced = fs::metadata(&active_log).unwrap().len() - synced_bytes;
    let (storage, reads) = counted(storage_from_env());
    let (mut log, report) = open_with(synced_end, storage);
    assert_eq!(report.bytes_truncated, 0);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(
        log.recovery_point().0,
        synced_end,
        "recovery validates the unsynced bytes and leaves their sync to the next flush"
    );
    let read = reads.0.load(Ordering::SeqCst);
    assert!(
        read <= 1024 * 1024 + unsynced,
        "an unclean open with {unsynced} unsynced bytes after {synced_bytes} synced read {read}"
    );
    log.flush().unwrap();
    assert_eq!(
        log.recovery_point(),
        end,
        "the flush covers what recovery kept"
    );
}

#[test]
fn segments_rolled_after_the_recovery_point_get_durable_names_before_appends_to_them() {
    // Synced to a recovery point, then rolled twice by appends whose seal syncs (with the
    // directory's) the process died before taking. A restart reopens it from the recovery
    // point, appends and flushes; a power cut must keep every flushed record, so the reopen
    // made the rolled segments' names durable.
    let (template, template_dir) = scratch_partition();
    let (mut log, _) = open_partition_log(&template_dir, big_segments(), false, 0);
    for _ in 0..20 {
        let first = log.log_end_offset().0;
        log.append(batch(first, 3), now()).unwrap();
    }
    log.close().unwrap();
    for seed in 0..16 {
        let work = scratch();
        copy_dir(template.path(), work.path());
        let dir = partition_dir(work.path());
        let sim = SimStorage::new(work.path(), seed).unwrap();
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let (mut log, _) = open(&dir, 0, storage.clone()).unwrap();
        let recovery_point = log.log_end_offset().0;
        while log.segment_count() < 3 {
            let first = log.log_end_offset().0;
            log.append(batch(first, 3), now()).unwrap();
        }
        drop(log);
        let (mut log, _) = open(&dir, recovery_point, storage.clone()).unwrap();
        assert_eq!(log.segment_count(), 3);
        let end = log.log_end_offset().0;
        assert_appends_at(&mut log, end);
        log.flush().unwrap();
        let flushed = served_batches(&mut log);
        drop(log);
        sim.crash().unwrap();
        let (mut log, _) = open(&dir, recovery_point, storage).unwrap();
        assert_serves(&mut log, &flushed);
    }
}
