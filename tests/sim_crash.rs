//! The durability promise (docs/RELIABILITY.md) checked on the simulated disk
//! (`seglog::io::sim`) at thousands of crash points per run: random appends, flushes, rolls,
//! retention, record deletion, compaction, checkpoints, clean closes and fetches run against a
//! data directory (`LogDir`, one partition) until the simulated process dies at a random mutation
//! (or a scheduled fault fires); then the disk loses power (`SimStorage::crash`: unsynced bytes
//! dropped, kept, torn at sectors or zero-filled; unsynced directory entries reverted or kept;
//! index files kept, truncated or zeroed), the directory is reopened and checked against an
//! acknowledgement log:
//! - the directory and the partition reopen without help;
//! - every acknowledged record (its append followed by a successful flush) is read back with its
//!   offset, key and value — unless retention moved the log start past it, or (compacted topic) a
//!   later record with its key is present;
//! - every record served is the one written at that offset; every batch passes its CRC; offsets
//!   strictly increase (and are dense without compaction); no duplicates;
//! - after an injected write or fsync failure on the partition, no flush succeeds until reopen;
//! - the reopened log accepts an append at its log end offset and makes it durable.
//!
//! Each cycle is one crash point; a run chains cycles on one directory (recovery of recovered
//! directories included). Counts are printed (`--nocapture`); `SIM_SEED=<seed>` replays one run
//! with the simulator's trace on stderr. The `#[ignore = "bug: …"]` tests at the end fail on
//! library bugs the simulator found (docs/RELIABILITY.md). Issue 7, item 1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use seglog::cleaner::offset_map::OffsetMap;
use seglog::config::LogConfig;
use seglog::error::{PartitionError, ReadError};
use seglog::format::batch::BatchIter;
use seglog::format::file_name::{SegmentFileKind, segment_path};
use seglog::format::{BatchBuilder, NewRecord};
use seglog::io::Storage;
use seglog::io::sim::{CrashMode, Fault, SimRng, SimStorage};
use seglog::log::{LogWriteMode, PartitionLog};
use seglog::log_dir::LogDir;
use seglog::types::{Offset, TimestampMs, TopicName};
use support::dirs::scratch;

mod support;

const T0: i64 = 1_700_000_000_000;
const TOPIC: &str = "sim";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Regime {
    /// `cleanup.policy=delete`: retention by size and DeleteRecords move the log start.
    Delete,
    /// `cleanup.policy=compact`: compaction drops superseded keys.
    Compact,
}

/// What a run injects besides the process death.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Faults {
    None,
    /// One read, write or fsync error, ENOSPC or short write per cycle.
    Errors,
    /// One failed directory fsync per cycle.
    DirSyncErrors,
    /// One misdirected write per cycle: acknowledged data may be destroyed; the promise then is
    /// that it is reported, never served wrong, and never silently dropped.
    Misdirected,
}

fn config(regime: Regime) -> LogConfig {
    let mut config = LogConfig {
        segment_bytes: 700,
        segment_index_bytes: 96,
        index_interval_bytes: 64,
        retention_ms: -1,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    };
    match regime {
        Regime::Delete => config.retention_bytes = 2_000,
        Regime::Compact => config.set("cleanup.policy", "compact").unwrap(),
    }
    config
}

/// A run's configuration: its regime's, and by seed one of the three write paths: through the
/// page cache (prewriting the space ahead of the appends while the syncs are small, the
/// default), `O_DIRECT` (aligned blocks, the tail block rewritten, space reserved ahead, padding
/// and reservation cut when a segment stops being active), or preallocated `.log` files
/// (`fallocate`, no prewrite). Misdirected writes run on all three (R14): prewritten space is
/// stamped with its positions, and padding and reservations are checked for data before they
/// are cut, so a misdirected write that landed there is reported, not cut away.
fn config_for_seed(regime: Regime, seed: u64) -> LogConfig {
    let mut config = config(regime);
    config.preallocate = seed % 3 == 2;
    config
}

/// A run's write mode, by seed (see [`config_for_seed`]), with or without deferred seal syncs.
fn mode_for_seed(seed: u64, deferred_seal_syncs: bool) -> LogWriteMode {
    LogWriteMode {
        direct_writes: seed % 3 == 1,
        prewrite_synced: seed.is_multiple_of(3),
        deferred_seal_syncs,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    key: Vec<u8>,
    value: Vec<u8>,
}

/// The acknowledgement log and what was written, kept outside the simulated disk.
#[derive(Debug, Default)]
struct Model {
    /// The record each append (successful or not) put at each offset.
    written: BTreeMap<u64, Rec>,
    /// Every offset below this is acknowledged durable.
    acked_end: u64,
    /// The highest log start offset the log reported: records below may be gone.
    log_start_floor: u64,
}

/// Counts over a run.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    crash_points: u64,
    acked_records_checked: u64,
    records_served: u64,
    faults_fired: u64,
    reported_corruptions: u64,
}

struct Run {
    rng: SimRng,
    seed: u64,
    regime: Regime,
    faults: Faults,
    sim: SimStorage,
    dir: tempfile::TempDir,
    model: Model,
    tally: Tally,
    now: i64,
    map: OffsetMap,
    trace: bool,
    /// Rolls leave their seal's sync to the test, as the engine's shard takes it
    /// (`LogWriteMode::deferred_seal_syncs`): the test syncs taken seals at random later steps.
    deferred_seals: bool,
}

fn topic() -> TopicName {
    TopicName::parse(TOPIC).unwrap()
}

impl Run {
    fn new(seed: u64, regime: Regime, faults: Faults) -> Run {
        let dir = scratch();
        let sim = SimStorage::new(dir.path(), seed).unwrap();
        Run {
            rng: SimRng::new(seed.wrapping_mul(31).wrapping_add(7)),
            seed,
            regime,
            faults,
            sim,
            dir,
            model: Model::default(),
            tally: Tally::default(),
            now: T0,
            map: OffsetMap::new(64 * 1024).unwrap(),
            trace: false,
            deferred_seals: false,
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn config(&self) -> LogConfig {
        config_for_seed(self.regime, self.seed)
    }

    fn storage(&self) -> Arc<dyn Storage> {
        Arc::new(self.sim.clone())
    }

    fn note(&self, what: &str) {
        if self.trace {
            eprintln!("test: {what}");
        }
    }

    fn fail(&self, cycle: u64, what: &str) -> ! {
        panic!(
            "seed {} ({:?}, {:?}) cycle {cycle}: {what}",
            self.seed, self.regime, self.faults
        )
    }

    fn open(&self) -> Result<LogDir, String> {
        let mode = mode_for_seed(self.seed, self.deferred_seals);
        LogDir::open_with(self.root(), self.storage(), self.config(), mode)
            .map_err(|e| e.to_string())
    }

    /// One crash point: a workload until the process dies (or a budget ends), a power cut, a
    /// reopen and the checks.
    fn cycle(&mut self, cycle: u64) {
        self.note(&format!("cycle {cycle}"));
        let mut log_dir = match self.open() {
            Ok(log_dir) => log_dir,
            Err(error) => self.fail(cycle, &format!("the directory does not reopen: {error}")),
        };
        self.ensure_partition(&mut log_dir, cycle);
        self.sim.die_after(self.rng.between(1, 90));
        self.schedule_fault();
        let faults_before = self.sim.stats().faults_injected;
        self.workload(log_dir, cycle);
        self.tally.faults_fired += self.sim.stats().faults_injected - faults_before;
        self.note("crash");
        self.sim.crash().unwrap();
        self.tally.crash_points += 1;
        self.check_after_crash(cycle);
    }

    fn ensure_partition(&mut self, log_dir: &mut LogDir, cycle: u64) {
        match log_dir.partition(&topic(), 0) {
            Ok(_) => {}
            Err(PartitionError::UnknownPartition { .. }) if self.model.acked_end == 0 => {
                // The topic's creation was never made durable: nothing was acknowledged.
                self.model = Model::default();
                log_dir.create_topic(&topic(), 1).unwrap();
            }
            Err(error) => self.fail(cycle, &format!("the partition does not reopen: {error}")),
        }
    }

    fn schedule_fault(&mut self) {
        let rng = &mut self.rng;
        match self.faults {
            Faults::None => {}
            Faults::Errors => {
                let fault = match rng.below(5) {
                    0 => Fault::ReadError,
                    1 => Fault::WriteError,
                    2 => Fault::NoSpace,
                    3 => Fault::ShortWrite,
                    _ => Fault::SyncError,
                };
                let nth = rng.between(1, 12);
                self.sim.schedule(fault, nth);
            }
            Faults::DirSyncErrors => {
                let nth = rng.between(1, 6);
                self.sim.schedule(Fault::DirSyncError, nth);
            }
            Faults::Misdirected => {
                let nth = rng.between(1, 12);
                self.sim.schedule(Fault::MisdirectedWrite, nth);
            }
        }
    }

    fn tick(&mut self) -> TimestampMs {
        self.now += 1;
        TimestampMs(self.now)
    }

    /// Random operations until one fails because the process died, or 70 steps.
    fn workload(&mut self, mut log_dir: LogDir, cycle: u64) {
        // Set once a write or sync failed on the partition: no flush may succeed afterwards.
        let mut partition_failed = false;
        let faults_at_start = self.sim.faults_fired().len();
        for _ in 0..70 {
            if self.sim.is_dead() {
                break;
            }
            let faults_before = self.sim.faults_fired().len();
            let roll = self.rng.below(100);
            if roll < 2 {
                // A clean close and reopen in the same "kernel".
                let end = log_dir
                    .partition(&topic(), 0)
                    .map(|log| log.log_end_offset());
                if log_dir.close().is_ok()
                    && let Ok(end) = end
                {
                    self.model.acked_end = self.model.acked_end.max(end.0);
                }
                let failed_fault = self.sim.faults_fired()[faults_at_start..]
                    .iter()
                    .any(|(fault, path)| fails_partition(*fault, path));
                if failed_fault {
                    // A restart without power loss after a failed fsync would read the lost
                    // bytes from the page cache: `restart_after_a_failed_fsync_*` below.
                    return;
                }
                match self.open() {
                    Ok(reopened) => log_dir = reopened,
                    Err(_) => return,
                }
                if log_dir.partition(&topic(), 0).is_err() {
                    return;
                }
                continue;
            }
            if roll < 5 {
                let _ = log_dir.checkpoint();
                continue;
            }
            let Ok(log) = log_dir.partition(&topic(), 0) else {
                return;
            };
            let outcome = self.step(log, roll, cycle, partition_failed);
            let fired = self.sim.faults_fired().split_off(faults_before);
            if outcome.is_err()
                && fired
                    .iter()
                    .any(|(fault, path)| fails_partition(*fault, path))
            {
                partition_failed = true;
            }
            let log_start = log.log_start_offset().0;
            self.model.log_start_floor = self.model.log_start_floor.max(log_start);
        }
        drop(log_dir);
    }

    /// One operation on the partition. `Err` when it failed.
    fn step(
        &mut self,
        log: &mut PartitionLog,
        roll: u64,
        cycle: u64,
        partition_failed: bool,
    ) -> Result<(), ()> {
        let now = self.tick();
        self.note(&format!(
            "op {roll} on log {}..{} acked {}",
            log.log_start_offset(),
            log.log_end_offset(),
            self.model.acked_end
        ));
        if self.deferred_seals && self.rng.below(4) == 0 {
            // The owner syncs the seals taken so far, as a shard's sync thread does some time
            // after the roll (always before a later sync of the log reports).
            for seal in log.take_unsynced_seals() {
                let result = seal.sync(&self.sim);
                log.mark_seal_synced(seal.through, result).map_err(drop)?;
            }
            // And the directory sync that `.deleted` renames wait for; then the renames that
            // waited for it.
            if let Some(dir) = log.take_renames_sync() {
                let result = self.sim.sync_dir(&dir).map_err(|source| {
                    seglog::error::StorageError::io("fsync directory", &dir, source)
                });
                log.mark_renames_synced(result).map_err(drop)?;
                log.finish_pending_renames(now).map_err(drop)?;
            }
        }
        match roll {
            5..45 => self.append(log, now),
            45..62 => {
                let through = log.log_end_offset().0;
                let result = log.flush();
                if result.is_ok() {
                    if partition_failed {
                        self.fail(cycle, "a flush succeeded after a failed write or fsync");
                    }
                    self.model.acked_end = self.model.acked_end.max(through);
                }
                result.map_err(drop)
            }
            62..69 => log.roll(now).map_err(drop),
            69..74 => match self.regime {
                Regime::Delete => log.apply_retention(now).map(drop).map_err(drop),
                Regime::Compact => log
                    .compact(&mut self.map, Offset(0), i64::MAX, now)
                    .map(drop)
                    .map_err(drop),
            },
            74..77 if self.regime == Regime::Delete => {
                let (start, end) = (log.log_start_offset().0, log.log_end_offset().0);
                let target = self.rng.between(start, end);
                log.delete_records(Offset(target), now)
                    .map(drop)
                    .map_err(drop)
            }
            _ => {
                self.fetch(log, cycle);
                Ok(())
            }
        }
    }

    fn append(&mut self, log: &mut PartitionLog, now: TimestampMs) -> Result<(), ()> {
        let mut batches = Vec::new();
        let mut records = Vec::new();
        for _ in 0..self.rng.between(1, 2) {
            let mut builder = BatchBuilder::new(0);
            for _ in 0..self.rng.between(1, 3) {
                let key = format!("key-{}", self.rng.below(8)).into_bytes();
                let length = self.rng.between(4, 60) as usize;
                let fill = self.rng.next_u64() as u8;
                let value: Vec<u8> = (0..length).map(|i| fill.wrapping_add(i as u8)).collect();
                builder.push(&NewRecord {
                    timestamp_ms: now.0,
                    key: Some(&key),
                    value: Some(&value),
                    headers: &[],
                });
                records.push(Rec { key, value });
            }
            batches.extend_from_slice(&builder.build().unwrap());
        }
        if !log.is_failed() {
            // Whatever lands is at these offsets, even if the append fails part-way.
            let first = log.log_end_offset().0;
            for (index, record) in records.into_iter().enumerate() {
                self.model.written.insert(first + index as u64, record);
            }
        }
        log.append(Bytes::from(batches), now)
            .map(drop)
            .map_err(drop)
    }

    /// Reads from a random offset; whatever is served must be what was written there.
    fn fetch(&mut self, log: &mut PartitionLog, cycle: u64) {
        let (start, end) = (log.log_start_offset().0, log.log_end_offset().0);
        let from = self.rng.between(start, end);
        if let Ok(data) = log.read(Offset(from), self.rng.between(1, 2_000)) {
            let regime = self.regime;
            let served =
                check_batches(&data.records, regime).unwrap_or_else(|e| self.fail(cycle, &e));
            for (offset, record) in served {
                if offset >= from {
                    self.check_served(offset, &record, cycle);
                }
            }
        }
    }

    fn check_served(&mut self, offset: u64, record: &Rec, cycle: u64) {
        self.tally.records_served += 1;
        if self.model.written.get(&offset) != Some(record) {
            self.fail(
                cycle,
                &format!("offset {offset} serves a record never written there"),
            );
        }
    }

    fn check_after_crash(&mut self, cycle: u64) {
        let mut log_dir = match self.open() {
            Ok(log_dir) => log_dir,
            Err(error) => {
                return self.on_reported(cycle, &format!("the directory does not reopen: {error}"));
            }
        };
        let log = match log_dir.partition(&topic(), 0) {
            Ok(log) => log,
            Err(PartitionError::UnknownPartition { .. }) if self.model.acked_end == 0 => return,
            Err(error) => {
                return self.on_reported(cycle, &format!("the partition does not reopen: {error}"));
            }
        };
        let served = match read_all(log, self.regime) {
            Ok(served) => served,
            Err(error) => return self.on_reported(cycle, &error),
        };
        let log_end = log.log_end_offset().0;
        let log_start = log.log_start_offset().0;
        for (offset, record) in &served {
            self.check_served(*offset, record, cycle);
        }
        self.check_acked(&served, log_start, log_end, cycle);
        // What survived is now durable (recovery synced it); later appends reuse the offsets past
        // the log end.
        self.model.written.split_off(&log_end);
        self.model.acked_end = log_end;
        self.model.log_start_floor = self.model.log_start_floor.min(log_end);
        self.append_after_reopen(log_dir, cycle);
    }

    /// A misdirected write may destroy acknowledged data: reporting it is the promise. Anything
    /// else failing to reopen is a broken promise.
    fn on_reported(&mut self, cycle: u64, error: &str) {
        if self.faults != Faults::Misdirected {
            self.fail(cycle, error);
        }
        self.tally.reported_corruptions += 1;
        self.note(&format!("reported: {error}"));
        // Start over on a fresh directory: this one is reported broken.
        let fresh = Run::new(self.rng.next_u64(), self.regime, self.faults);
        fresh.sim.set_trace(self.trace);
        self.sim = fresh.sim;
        self.dir = fresh.dir;
        self.model = Model::default();
    }

    fn check_acked(&mut self, served: &[(u64, Rec)], log_start: u64, log_end: u64, cycle: u64) {
        if log_end < self.model.acked_end {
            self.fail(
                cycle,
                &format!(
                    "log end {log_end} is below the acknowledged end {}",
                    self.model.acked_end
                ),
            );
        }
        let served: BTreeMap<u64, &Rec> = served.iter().map(|(o, r)| (*o, r)).collect();
        let floor = self.model.log_start_floor.min(self.model.acked_end);
        for (offset, record) in self.model.written.range(floor..self.model.acked_end) {
            self.tally.acked_records_checked += 1;
            if served.contains_key(offset) {
                continue;
            }
            let superseded = self.regime == Regime::Compact
                && served
                    .range(offset + 1..)
                    .any(|(_, later)| later.key == record.key);
            if !superseded {
                self.fail(
                    cycle,
                    &format!(
                        "acknowledged offset {offset} is lost (log {log_start}..{log_end}, acked below {})",
                        self.model.acked_end
                    ),
                );
            }
        }
    }

    /// The reopened log takes an append at its log end and makes it durable.
    fn append_after_reopen(&mut self, mut log_dir: LogDir, cycle: u64) {
        let log = log_dir.partition(&topic(), 0).unwrap();
        let end = log.log_end_offset();
        let now = self.tick();
        if self.append(log, now).is_err() || log.flush().is_err() {
            self.fail(cycle, "the reopened log refuses an append");
        }
        let data = log.read(end, 1 << 16).unwrap();
        let served =
            check_batches(&data.records, self.regime).unwrap_or_else(|e| self.fail(cycle, &e));
        if served.first().map(|(offset, _)| *offset) != Some(end.0) {
            self.fail(cycle, "the append after reopen is not at the old log end");
        }
        self.model.acked_end = log.log_end_offset().0;
        drop(log_dir);
    }
}

/// Whether `fault` on `path` must fail the partition: a failed write or fsync of a segment file,
/// or a failed fsync of the partition's directory.
fn fails_partition(fault: Fault, path: &Path) -> bool {
    let segment_file = path.extension().is_some_and(|extension| extension == "log");
    let write_or_sync = !matches!(fault, Fault::ReadError | Fault::MisdirectedWrite);
    let partition_dir = path
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with(TOPIC));
    (segment_file && write_or_sync) || (partition_dir && fault == Fault::DirSyncError)
}

/// Every record of the log, read batch by batch from the log start.
fn read_all(log: &mut PartitionLog, regime: Regime) -> Result<Vec<(u64, Rec)>, String> {
    let mut served = Vec::new();
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    while offset < end {
        let data = log
            .read(offset, 4096)
            .map_err(|e: ReadError| e.to_string())?;
        if data.records.is_empty() {
            return Err(format!(
                "nothing served at {offset} below the log end {end}"
            ));
        }
        let batch_records = check_batches(&data.records, regime)?;
        let last = batch_last_offset(&data.records);
        served.extend(batch_records.into_iter().filter(|(o, _)| *o >= offset.0));
        offset = Offset(last + 1);
    }
    if let (Regime::Delete, Some((first, _))) = (regime, served.first())
        && *first != log.log_start_offset().0
    {
        return Err(format!(
            "the first record served is {first}, not the log start {}",
            log.log_start_offset()
        ));
    }
    Ok(served)
}

fn batch_last_offset(records: &Bytes) -> u64 {
    BatchIter::new(records.clone(), u64::MAX)
        .filter_map(Result::ok)
        .map(|batch| batch.last_offset() as u64)
        .last()
        .unwrap_or(0)
}

/// Checks served bytes: whole batches, each passing its CRC-32C, offsets strictly increasing
/// (dense without compaction). Returns the records with their offsets.
fn check_batches(records: &Bytes, regime: Regime) -> Result<Vec<(u64, Rec)>, String> {
    let mut served = Vec::new();
    let mut previous_last: Option<i64> = None;
    let mut position = 0usize;
    for batch in BatchIter::new(records.clone(), u64::MAX) {
        let batch = batch.map_err(|e| format!("a served batch does not decode: {e}"))?;
        let bytes = &records[position..position + batch.size_bytes() as usize];
        position += bytes.len();
        let stored_crc = u32::from_be_bytes(bytes[17..21].try_into().unwrap());
        if crc32c::crc32c(&bytes[21..]) != stored_crc {
            return Err(format!(
                "batch at {} served with a bad CRC",
                batch.base_offset()
            ));
        }
        if let Some(previous) = previous_last {
            let dense = batch.base_offset() == previous + 1;
            if batch.base_offset() <= previous || (regime == Regime::Delete && !dense) {
                return Err(format!(
                    "batch at {} follows a batch ending at {previous}",
                    batch.base_offset()
                ));
            }
        }
        previous_last = Some(batch.last_offset());
        let mut previous_record: Option<u64> = None;
        for record in batch.records().map_err(|e| e.to_string())? {
            let offset = (batch.base_offset() + i64::from(record.offset_delta)) as u64;
            if previous_record.is_some_and(|previous| offset <= previous) {
                return Err(format!("record offsets go backwards at {offset}"));
            }
            previous_record = Some(offset);
            served.push((
                offset,
                Rec {
                    key: record.key.map(|key| key.to_vec()).unwrap_or_default(),
                    value: record.value.map(|value| value.to_vec()).unwrap_or_default(),
                },
            ));
        }
    }
    if position != records.len() {
        return Err(format!(
            "{} bytes served past the last whole batch",
            records.len() - position
        ));
    }
    Ok(served)
}

/// Runs `seeds` runs of `cycles` crash points each; returns the tally.
fn run_many(seeds: std::ops::Range<u64>, cycles: u64, regime: Regime, faults: Faults) -> Tally {
    run_many_with(seeds, cycles, regime, faults, false)
}

fn run_many_with(
    seeds: std::ops::Range<u64>,
    cycles: u64,
    regime: Regime,
    faults: Faults,
    deferred_seals: bool,
) -> Tally {
    let mut total = Tally::default();
    // SIM_SEED=<seed> replays one run with the simulator's trace on stderr.
    let only: Option<u64> = std::env::var("SIM_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok());
    for seed in seeds.filter(|seed| only.is_none_or(|only| only == *seed)) {
        let mut run = Run::new(seed, regime, faults);
        run.sim.set_trace(only.is_some());
        run.trace = only.is_some();
        run.deferred_seals = deferred_seals;
        for cycle in 0..cycles {
            run.cycle(cycle);
        }
        total.crash_points += run.tally.crash_points;
        total.acked_records_checked += run.tally.acked_records_checked;
        total.records_served += run.tally.records_served;
        total.faults_fired += run.tally.faults_fired;
        total.reported_corruptions += run.tally.reported_corruptions;
    }
    println!("{regime:?}/{faults:?}: {total:?}");
    total
}

#[test]
fn acknowledged_records_survive_crashes_with_retention() {
    let tally = run_many(0..100, 40, Regime::Delete, Faults::None);
    assert_eq!(tally.crash_points % 40, 0);
    assert!(tally.acked_records_checked > 10_000, "{tally:?}");
}

#[test]
fn acknowledged_keys_survive_crashes_with_compaction() {
    let tally = run_many(1_000..1_160, 20, Regime::Compact, Faults::None);
    assert_eq!(tally.crash_points % 20, 0);
    assert!(tally.acked_records_checked > 10_000, "{tally:?}");
}

#[test]
fn failed_writes_and_fsyncs_are_never_acknowledged_and_lose_nothing_acknowledged() {
    let delete = run_many(2_000..2_040, 40, Regime::Delete, Faults::Errors);
    let compact = run_many(3_000..3_080, 20, Regime::Compact, Faults::Errors);
    assert_eq!(delete.crash_points + compact.crash_points, 3_200);
    assert!(delete.faults_fired + compact.faults_fired > 1_000);
}

/// Rolls that leave the sealed segment's sync for later (the engine's way): a crash before it
/// leaves a torn tail in a segment that later segments follow, which recovery cuts off (deleting
/// those segments) without losing an acknowledged record.
#[test]
fn acknowledged_records_survive_crashes_between_a_roll_and_its_seal_sync() {
    let delete = run_many_with(5_000..5_100, 40, Regime::Delete, Faults::None, true);
    let compact = run_many_with(5_500..5_580, 20, Regime::Compact, Faults::None, true);
    assert!(delete.acked_records_checked > 10_000, "{delete:?}");
    assert!(compact.acked_records_checked > 5_000, "{compact:?}");
}

#[test]
fn failed_seal_syncs_are_never_acknowledged_and_lose_nothing_acknowledged() {
    let errors = run_many_with(6_000..6_040, 40, Regime::Delete, Faults::Errors, true);
    let dir_errors = run_many_with(
        6_500..6_540,
        40,
        Regime::Delete,
        Faults::DirSyncErrors,
        true,
    );
    assert!(
        errors.faults_fired + dir_errors.faults_fired > 500,
        "{errors:?} {dir_errors:?}"
    );
}

#[test]
fn failed_directory_fsyncs_fail_the_partition_and_lose_nothing_acknowledged() {
    run_many(4_000..4_040, 40, Regime::Delete, Faults::DirSyncErrors);
}

/// A log directory with one partition on a fresh simulated disk, holding `records` records
/// (values from 0) flushed.
fn fresh(seed: u64, records: u8) -> (tempfile::TempDir, SimStorage, LogDir) {
    let dir = scratch();
    let sim = SimStorage::new(dir.path(), seed).unwrap();
    let mut log_dir = reopen(dir.path(), &sim);
    log_dir.create_topic(&topic(), 1).unwrap();
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert!(append_and_flush(log, 0, records), "a small sync");
    (dir, sim, log_dir)
}

/// The data directory `dir` on `sim`, `cleanup.policy=delete`.
fn reopen(dir: &Path, sim: &SimStorage) -> LogDir {
    LogDir::open(dir, Arc::new(sim.clone()), config(Regime::Delete)).unwrap()
}

fn one_record(value: u8) -> Bytes {
    let mut builder = BatchBuilder::new(0);
    builder.push(&NewRecord {
        timestamp_ms: T0,
        key: Some(b"k"),
        value: Some(&[value; 40]),
        headers: &[],
    });
    builder.build().unwrap()
}

/// Appends `count` records (values `first..`) and flushes; returns the flush outcome.
fn append_and_flush(log: &mut PartitionLog, first: u8, count: u8) -> bool {
    for value in first..first + count {
        if log.append(one_record(value), TimestampMs(T0)).is_err() {
            return false;
        }
    }
    log.flush().is_ok()
}

/// The values of every record from the log start, or the error that stopped the read.
fn values(log: &mut PartitionLog) -> Result<Vec<u8>, String> {
    Ok(read_all(log, Regime::Delete)?
        .into_iter()
        .map(|(_, record)| record.value[0])
        .collect())
}

/// R04 under a failed directory fsync: the roll created the new segment but could not make its
/// name durable. Either no later flush succeeds, or what it acknowledged survives a power cut.
#[test]
fn a_failed_directory_fsync_in_a_roll_never_loses_acknowledged_records() {
    let (dir, sim, mut log_dir) = fresh(1, 3);
    let log = log_dir.partition(&topic(), 0).unwrap();
    sim.schedule(Fault::DirSyncError, 1);
    assert!(log.roll(TimestampMs(T0)).is_err());
    let acknowledged = append_and_flush(log, 3, 3);
    drop(log_dir);
    sim.crash_with(CrashMode::DropVolatile).unwrap();
    let mut log_dir = reopen(dir.path(), &sim);
    let served = values(log_dir.partition(&topic(), 0).unwrap()).unwrap();
    let expected: Vec<u8> = if acknowledged {
        (0..6).collect()
    } else {
        (0..3).collect()
    };
    assert!(
        served.starts_with(&expected),
        "acknowledged {expected:?}, served {served:?} after the power cut"
    );
}

/// R10, the page-cache trap: a flush fails, the process restarts without a power cut and
/// recovers; the bytes the failed fsync lost are still in the page cache. Recovery must read the
/// device (or otherwise not trust those bytes): records acknowledged after the restart survive a
/// later power cut, and the log has no hole.
#[test]
fn restart_after_a_failed_fsync_reads_the_device_not_the_page_cache() {
    let (dir, sim, mut log_dir) = fresh(2, 2);
    sim.schedule(Fault::SyncError, 1);
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert!(!append_and_flush(log, 2, 2), "the flush fails");
    drop(log_dir);
    // A new process on the same kernel: no power cut, so the page cache still holds the bytes.
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let mut log_dir = LogDir::open(dir.path(), storage.clone(), config(Regime::Delete)).unwrap();
    let log = log_dir.partition(&topic(), 0).unwrap();
    let end_before = log.log_end_offset().0 as u8;
    assert!(
        append_and_flush(log, end_before, 2),
        "the reopened log acknowledges"
    );
    let acknowledged = log.log_end_offset().0;
    drop(log_dir);
    sim.crash_with(CrashMode::DropVolatile).unwrap();
    let mut log_dir = LogDir::open(dir.path(), storage, config(Regime::Delete)).unwrap();
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert!(
        log.log_end_offset().0 >= acknowledged,
        "acknowledged records lost"
    );
    let served = values(log).unwrap();
    assert_eq!(
        served.len() as u64,
        log.log_end_offset().0,
        "a hole in the offsets"
    );
}

/// R10 at a seal: a roll cuts the active segment's prewritten space and its fsync fails, so the
/// cut never reaches the device though the file reads as cut. Recovery after the restart must
/// take the length from the device too (fuzz finding, `sim_ops`): else the segment keeps the
/// prewritten space on disk, the next roll seals it so, and after a power cut a sealed segment
/// ends in stamps, which no recovery may cut.
#[test]
fn restart_after_a_failed_fsync_of_a_seal_cuts_the_prewritten_space_again() {
    let (dir, sim, mut log_dir) = fresh(3, 2);
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert!(
        append_and_flush(log, 2, 1),
        "a small sync after a small sync"
    );
    let prewritten = |log: &PartitionLog| {
        let info = log.segments().last().unwrap();
        let path = segment_path(log.dir(), info.base_offset, SegmentFileKind::Log);
        std::fs::metadata(path).unwrap().len() > info.size_bytes
    };
    assert!(prewritten(log), "the space past the batches is prewritten");
    sim.schedule(Fault::SyncError, 1);
    assert!(log.roll(TimestampMs(T0)).is_err(), "the seal's fsync fails");
    drop(log_dir);
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let mut log_dir = LogDir::open(dir.path(), storage.clone(), config(Regime::Delete)).unwrap();
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_eq!(log.log_end_offset(), Offset(3));
    log.roll(TimestampMs(T0)).unwrap();
    assert!(append_and_flush(log, 3, 2), "the reopened log acknowledges");
    drop(log_dir);
    sim.crash_with(CrashMode::DropVolatile).unwrap();
    let mut log_dir = LogDir::open(dir.path(), storage, config(Regime::Delete)).unwrap();
    let served = values(log_dir.partition(&topic(), 0).unwrap()).unwrap();
    assert_eq!(served, (0..5).collect::<Vec<u8>>());
}

/// R14: a write that lands at the wrong place may destroy acknowledged records; the engine must
/// then report it (open, recovery or read fails), never serve wrong records and never drop
/// acknowledged ones silently.
#[test]
fn misdirected_writes_are_reported_never_served_and_never_silently_drop_records() {
    let tally = run_many(5_000..5_100, 20, Regime::Delete, Faults::Misdirected);
    assert_eq!(tally.crash_points % 20, 0);
}

/// A deferred-seal log whose first segment (offsets 0-2, every batch synced, the space past them
/// prewritten) was sealed by a roll whose seal sync failed; then the process restarted on the
/// same kernel (no power cut), with the recovery point checkpointed at the segment's end.
fn restarted_after_a_failed_deferred_seal_sync(
    seed: u64,
) -> (tempfile::TempDir, SimStorage, LogDir) {
    let dir = scratch();
    let sim = SimStorage::new(dir.path(), seed).unwrap();
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let mut log_dir = open_deferred(dir.path(), storage.clone());
    log_dir.create_topic(&topic(), 1).unwrap();
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert!(append_and_flush(log, 0, 2), "a small sync");
    assert!(
        append_and_flush(log, 2, 1),
        "a small sync after a small sync"
    );
    log.roll(TimestampMs(T0)).unwrap();
    let seals = log.take_unsynced_seals();
    assert_eq!(seals.len(), 1, "the roll left its seal to the owner");
    sim.schedule(Fault::SyncError, 1);
    let result = seals[0].sync(&sim);
    assert!(result.is_err(), "the seal's fsync fails");
    assert!(log.mark_seal_synced(seals[0].through, result).is_err());
    // The recovery point stays at the roll: every batch below it was synced before the roll.
    assert_eq!(log.recovery_point(), Offset(3));
    log_dir.checkpoint().unwrap();
    assert!(
        log_dir.close().is_err(),
        "the failed log does not close cleanly"
    );
    let log_dir = open_deferred(dir.path(), storage);
    (dir, sim, log_dir)
}

/// Seal syncs left to the owner, as the engine's shards take them.
const DEFERRED: LogWriteMode = LogWriteMode {
    direct_writes: false,
    prewrite_synced: true,
    deferred_seal_syncs: true,
};

fn open_deferred(dir: &Path, storage: Arc<dyn Storage>) -> LogDir {
    LogDir::open_with(dir, storage, config(Regime::Delete), DEFERRED).unwrap()
}

/// What a power cut leaves of the log in `dir`, read back in full.
fn values_after_a_power_cut(dir: &Path, sim: &SimStorage) -> Result<Vec<u8>, String> {
    sim.crash_with(CrashMode::DropVolatile).unwrap();
    let mut log_dir = open_deferred(dir, Arc::new(sim.clone()));
    let log = log_dir
        .partition(&topic(), 0)
        .map_err(|error| error.to_string())?;
    values(log)
}

/// R10 at a deferred seal (fuzz findings S8, S9 of `sim_ops`, 2026-12-05): the failed seal sync
/// lost the seal's cut of the prewritten space, which the device still holds while the restarted
/// process trusts the cut file in the page cache. The restart must make the cut durable before
/// it acknowledges anything after the segment: a power cut after appends acknowledged in the next
/// segment must keep them (S8: the cut was found again and the next segment deleted with them).
#[test]
fn restart_after_a_failed_deferred_seal_sync_keeps_the_next_segments_acknowledged_appends() {
    let (dir, sim, mut log_dir) = restarted_after_a_failed_deferred_seal_sync(4);
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert_eq!(log.log_end_offset(), Offset(3));
    assert!(append_and_flush(log, 3, 2), "the reopened log acknowledges");
    drop(log_dir);
    assert_eq!(
        values_after_a_power_cut(dir.path(), &sim),
        Ok((0..5).collect::<Vec<u8>>())
    );
}

/// The same once the recovery point has moved past the segment (S9): a cut found below it would
/// be damage to synced data, so the segment must never be found uncut.
#[test]
fn restart_after_a_failed_deferred_seal_sync_leaves_no_uncut_segment_below_the_recovery_point() {
    let (dir, sim, mut log_dir) = restarted_after_a_failed_deferred_seal_sync(5);
    let log = log_dir.partition(&topic(), 0).unwrap();
    assert!(append_and_flush(log, 3, 2), "the reopened log acknowledges");
    log.roll(TimestampMs(T0)).unwrap();
    for seal in log.take_unsynced_seals() {
        let result = seal.sync(&sim);
        log.mark_seal_synced(seal.through, result).unwrap();
    }
    assert!(append_and_flush(log, 5, 1));
    assert_eq!(log.recovery_point(), Offset(6));
    log_dir.checkpoint().unwrap();
    drop(log_dir);
    assert_eq!(
        values_after_a_power_cut(dir.path(), &sim),
        Ok((0..6).collect::<Vec<u8>>())
    );
}

/// A one-record batch: `key` with `value`, or a tombstone (`None`).
fn keyed_record(key: &[u8], value: Option<&[u8]>) -> Bytes {
    let mut builder = BatchBuilder::new(0);
    builder.push(&NewRecord {
        timestamp_ms: T0,
        key: Some(key),
        value,
        headers: &[],
    });
    builder.build().unwrap()
}

/// Appends `batch`, flushes and rolls, syncing the seal as the owner does.
fn append_flush_roll(log: &mut PartitionLog, sim: &SimStorage, batch: Bytes, now: i64) {
    log.append(batch, TimestampMs(now)).unwrap();
    log.flush().unwrap();
    log.roll(TimestampMs(now)).unwrap();
    for seal in log.take_unsynced_seals() {
        let result = seal.sync(sim);
        log.mark_seal_synced(seal.through, result).unwrap();
    }
}

/// Fuzz finding S10 (`sim_ops`, 2026-12-05), as a resurrection: DeleteRecords takes two segments
/// out of the log; the first is renamed `.deleted` and its directory sync left to the owner, who
/// has not taken it, so the second keeps its live name meanwhile. Compaction then removes the
/// tombstone that deleted the second one's value, and its swap makes that durable. A power cut
/// before the log start offset was checkpointed must not bring the value back: the swap first
/// makes the deletions durable.
#[test]
fn a_compaction_swap_never_outlives_a_deletion_that_a_crash_could_undo() {
    let dir = scratch();
    let sim = SimStorage::new(dir.path(), 6).unwrap();
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let config = config(Regime::Compact);
    let mut log_dir =
        LogDir::open_with(dir.path(), storage.clone(), config.clone(), DEFERRED).unwrap();
    log_dir.create_topic(&topic(), 1).unwrap();
    let log = log_dir.partition(&topic(), 0).unwrap();
    append_flush_roll(log, &sim, keyed_record(b"z", Some(b"0")), T0);
    append_flush_roll(log, &sim, keyed_record(b"k", Some(b"deleted")), T0);
    append_flush_roll(log, &sim, keyed_record(b"k", None), T0);
    append_flush_roll(log, &sim, keyed_record(b"y", Some(b"3")), T0);
    log.delete_records(Offset(1), TimestampMs(T0)).unwrap();
    log.delete_records(Offset(2), TimestampMs(T0)).unwrap();
    assert_eq!(log.log_start_offset(), Offset(2));
    // Two rounds: the first starts the tombstone's `delete.retention.ms` (0), the second removes
    // it.
    let mut map = OffsetMap::new(64 * 1024).unwrap();
    log.compact(&mut map, Offset(0), 0, TimestampMs(T0 + 1))
        .unwrap();
    log.compact(&mut map, Offset(0), 0, TimestampMs(T0 + 2))
        .unwrap();
    drop(log_dir);
    sim.crash_with(CrashMode::DropVolatile).unwrap();

    let mut log_dir = LogDir::open_with(dir.path(), storage, config, DEFERRED).unwrap();
    let served = read_all(log_dir.partition(&topic(), 0).unwrap(), Regime::Compact).unwrap();
    assert!(
        served.iter().all(|(_, record)| record.key != b"k"),
        "the value the tombstone deleted is back: {served:?}"
    );
}

/// Misdirected writes on the `O_DIRECT` and preallocated paths that the check before a cut (of
/// the last block's padding and the reserved blocks) did not catch, found by a sweep of seeds
/// 5000-5599: a landing in the reservation that later appends overwrote (preallocated: checked
/// now before a page-cache append overwrites reserved space), and a landing in the tail block's
/// own padding that its rewrite overwrote (`O_DIRECT`: the last block is read back before the
/// first append after a sync).
#[test]
fn misdirected_writes_on_padded_and_reserved_logs_are_always_reported() {
    for seed in [5105, 5173, 5210, 5228, 5273, 5336, 5348, 5453] {
        run_many(seed..seed + 1, 20, Regime::Delete, Faults::Misdirected);
    }
}
