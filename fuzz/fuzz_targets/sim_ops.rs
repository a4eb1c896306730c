//! Operation sequences on the simulated disk (`seglog::io::sim::SimStorage`): one partition of a
//! `LogDir` in a temporary directory (on tmpfs when `/dev/shm` exists) with small segments, driven
//! through appends (tombstones among them), flushes, rolls, DeleteRecords, retention, compaction,
//! checkpoints, clean restarts, fetches, power cuts, process deaths and injected I/O faults
//! (misdirected writes among them), against an acknowledgement log kept outside the disk.
//!
//! Input: bytes 0-7 = the simulator's seed, byte 8 = `cleanup.policy` (modulo 3: delete, compact,
//! compact+delete) and the `delete.retention.ms` every compaction uses (byte / 3 modulo 4: never,
//! 0, 3 or 20 ms; the clock moves 1 ms per operation), then up to 64 operations, each a tag byte
//! (modulo 16) and its arguments: append (key 0-7, value size 0-80, shape: records 1-3 = shape
//! modulo 3 + 1; shape / 3 below 64 = no tombstone, 64-79 = the last record a tombstone, 80 and
//! up = every record a tombstone), flush, roll, DeleteRecords (a point between the log start and
//! end), retention, compaction (a no-op in delete-policy runs), checkpoint, close and reopen,
//! fetch (offset, max bytes; then a point lookup of that offset), power cut (`crash()` then reopen), `die_after(n)`, and a fault
//! (read, write or sync error, ENOSPC, short write, directory sync error, misdirected write) on
//! the nth operation of its kind. After the last operation the disk loses power once more.
//! Inputs with an odd seed run the log as the engine's shards do, with
//! `LogConfig::deferred_seal_syncs`: rolls leave the sealed segment's sync to the owner, which
//! here syncs the seals taken so far at each checkpoint operation (and flushes and closes sync
//! any not taken first).
//!
//! A record is acknowledged when a flush (or a clean close) that followed its append succeeded.
//! Invariants: no panic; the directory and the partition reopen after a power cut; after every
//! reopen, every acknowledged record is read back with its offset, key and value (a tombstone as
//! a null value), unless it is below the highest log start offset seen (retention,
//! DeleteRecords), or a compaction ran and a later record with its key is present, or a
//! compaction ran and a tombstone of its key at or after it is gone where the model allows its
//! removal (it was in a sealed segment when one compaction ran and a later compaction ran at or
//! past that one's time + `delete.retention.ms`); an acknowledged tombstone that is gone never
//! leaves an older record of its key served (no resurrection); every record served anywhere is
//! the one written at its offset; every served batch passes its CRC-32C; offsets strictly
//! increase (densely from the log start without compaction, except in a compacted topic after a
//! misdirected write); after a failed write or fsync of the partition no flush succeeds until a
//! reopen; after a power cut the log takes an append at its end and makes it durable.
//!
//! Misdirected writes (R14 in docs/RELIABILITY.md, as `tests/sim_crash.rs` checks them; in
//! delete-policy runs only while `MISDIRECTED_WRITES_IN_COMPACTED_TOPICS` is off): once one
//! fired on the directory, acknowledged data may be destroyed, and an error from the library
//! (open, partition open, read, an append refused as `Corrupt`, or the append after recovery) is
//! accepted as the report of it: the run starts over on a fresh directory. Wrong records,
//! bad-CRC batches, out-of-order offsets and acknowledged records missing from a log the library
//! serves without error still fail.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use seglog::cleaner::offset_map::OffsetMap;
use seglog::config::LogConfig;
use seglog::error::{AppendError, PartitionError, StorageError};
use seglog::format::batch::BatchIter;
use seglog::format::{BatchBuilder, NewRecord, Record};
use seglog::io::sim::{Fault, SimStorage};
use seglog::log::{LogWriteMode, PartitionLog, RecordRead};
use seglog::log_dir::LogDir;
use seglog::types::{Offset, TimestampMs, TopicName};

const MAX_OPERATIONS: usize = 64;
const KEYS: u8 = 8;
const MAX_VALUE_BYTES: u8 = 80;
const T0: i64 = 1_700_000_000_000;
const TOPIC: &str = "sim";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Delete,
    Compact,
    CompactDelete,
}

/// Which records of an append are tombstones (null values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tombstones {
    None,
    Last,
    All,
}

#[derive(Debug, Clone, Copy)]
enum Operation {
    Append {
        key: u8,
        value_bytes: u8,
        records: u8,
        tombstones: Tombstones,
    },
    Flush,
    Roll,
    DeleteRecords {
        point: u16,
    },
    ApplyRetention,
    Compact,
    Checkpoint,
    Reopen,
    Fetch {
        point: u16,
        max_bytes: u16,
    },
    Crash,
    DieAfter {
        mutations: u8,
    },
    Inject {
        fault: Fault,
        nth: u8,
    },
}

#[derive(Debug)]
struct Input {
    seed: u64,
    policy: Policy,
    /// The `delete.retention.ms` every compaction uses.
    delete_retention_ms: i64,
    operations: Vec<Operation>,
}

/// The choices of `delete.retention.ms` (byte 8 / 3, modulo 4).
const DELETE_RETENTIONS_MS: [i64; 4] = [i64::MAX, 0, 3, 20];

/// Whether compacted-topic runs inject misdirected writes too. On since the cleaned end
/// (`seglog-cleaned-end`) lets the engine hold the segments the cleaner never rewrote to dense
/// offsets (sim_ops findings S2-S5 of 2026-11-30, docs/RELIABILITY.md). A misdirected batch that
/// lands over earlier ones below the cleaned end is indistinguishable from compaction: the checker
/// allows the gap in a compacted topic after one.
const MISDIRECTED_WRITES_IN_COMPACTED_TOPICS: bool = true;

const FAULTS: [Fault; 7] = [
    Fault::ReadError,
    Fault::WriteError,
    Fault::NoSpace,
    Fault::ShortWrite,
    Fault::SyncError,
    Fault::DirSyncError,
    Fault::MisdirectedWrite,
];

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Input> {
        let seed = u64::from_le_bytes(<[u8; 8]>::arbitrary(u)?);
        let settings = u8::arbitrary(u)?;
        let policy = match settings % 3 {
            0 => Policy::Delete,
            1 => Policy::Compact,
            _ => Policy::CompactDelete,
        };
        let delete_retention_ms =
            DELETE_RETENTIONS_MS[usize::from(settings / 3) % DELETE_RETENTIONS_MS.len()];
        let mut operations = Vec::new();
        while operations.len() < MAX_OPERATIONS && !u.is_empty() {
            operations.push(operation(u)?);
        }
        Ok(Input {
            seed,
            policy,
            delete_retention_ms,
            operations,
        })
    }
}

fn operation(u: &mut Unstructured<'_>) -> arbitrary::Result<Operation> {
    Ok(match u8::arbitrary(u)? % 16 {
        0..=3 => {
            let key = u8::arbitrary(u)? % KEYS;
            let value_bytes = u8::arbitrary(u)? % (MAX_VALUE_BYTES + 1);
            let shape = u8::arbitrary(u)?;
            Operation::Append {
                key,
                value_bytes,
                records: shape % 3 + 1,
                tombstones: match shape / 3 {
                    0..64 => Tombstones::None,
                    64..80 => Tombstones::Last,
                    _ => Tombstones::All,
                },
            }
        }
        4 | 5 => Operation::Flush,
        6 => Operation::Roll,
        7 => Operation::DeleteRecords {
            point: u16::arbitrary(u)?,
        },
        8 => Operation::ApplyRetention,
        9 => Operation::Compact,
        10 => Operation::Checkpoint,
        11 => Operation::Reopen,
        12 => Operation::Fetch {
            point: u16::arbitrary(u)?,
            max_bytes: u16::arbitrary(u)?,
        },
        13 => Operation::Crash,
        14 => Operation::DieAfter {
            mutations: u8::arbitrary(u)? % 48,
        },
        _ => Operation::Inject {
            fault: FAULTS[usize::from(u8::arbitrary(u)?) % FAULTS.len()],
            nth: u8::arbitrary(u)? % 16 + 1,
        },
    })
}

/// The owner's part under `deferred_seal_syncs`: syncs the seals rolls left and the directory
/// that `.deleted` renames wait for, and reports them (a failure fails the log, as in the engine).
fn owner_syncs(sim: &SimStorage, log_dir: &mut LogDir, now: TimestampMs) {
    let Ok(log) = log_dir.partition(&topic(), 0) else {
        return;
    };
    for seal in log.take_unsynced_seals() {
        let result = seal.sync(sim);
        if log.mark_seal_synced(seal.through, result).is_err() {
            return;
        }
    }
    // The directory sync that `.deleted` renames wait for, then the renames that waited for it.
    if let Some(dir) = log.take_renames_sync() {
        let result = seglog::io::Storage::sync_dir(sim, &dir)
            .map_err(|source| StorageError::io("fsync directory", &dir, source));
        if log.mark_renames_synced(result).is_ok() {
            let _ = log.finish_pending_renames(now);
        }
    }
}

fn config(policy: Policy) -> LogConfig {
    let mut config = LogConfig {
        segment_bytes: 700,
        segment_index_bytes: 96,
        index_interval_bytes: 64,
        retention_ms: -1,
        retention_bytes: 2_000,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    };
    let policy = match policy {
        Policy::Delete => "delete",
        Policy::Compact => "compact",
        Policy::CompactDelete => "compact,delete",
    };
    if let Err(error) = config.set("cleanup.policy", policy) {
        panic!("cleanup.policy={policy}: {error}");
    }
    config
}

/// One directory per process, emptied before each input.
fn work_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let made = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        };
        made.unwrap_or_else(|error| panic!("temporary directory: {error}"))
    })
    .path()
}

fn empty(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.unwrap_or_else(|error| panic!("remove {path:?}: {error}"));
    }
}

fn topic() -> TopicName {
    TopicName::parse(TOPIC).unwrap_or_else(|error| panic!("topic name: {error}"))
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    key: Vec<u8>,
    /// `None`: a tombstone.
    value: Option<Vec<u8>>,
}

fn rec_of(record: Record) -> Rec {
    Rec {
        key: record.key.map(|key| key.to_vec()).unwrap_or_default(),
        value: record.value.map(|value| value.to_vec()),
    }
}

/// A compaction the target ran: at `now_ms`, over the sealed segments below `sealed_end`.
#[derive(Debug, Clone, Copy)]
struct Compaction {
    now_ms: i64,
    sealed_end: u64,
}

/// Why a check after a reopen failed.
#[derive(Debug)]
enum Failure {
    /// The library returned an error (open, read, append): a report, acceptable after a
    /// misdirected write.
    Reported(String),
    /// The library served something that breaks the promise: never acceptable.
    Broken(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Reported(error) => write!(f, "reported: {error}"),
            Failure::Broken(error) => write!(f, "{error}"),
        }
    }
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
    /// Every compaction started on this partition, in order: when a tombstone may be removed.
    compactions: Vec<Compaction>,
}

struct Run {
    sim: SimStorage,
    root: PathBuf,
    /// The input's simulator seed; a fresh directory after a reported corruption derives its own.
    seed: u64,
    /// Fresh directories started after reported corruptions.
    restarts: u64,
    policy: Policy,
    delete_retention_ms: i64,
    log_dir: Option<LogDir>,
    model: Model,
    map: OffsetMap,
    now: i64,
    appended: u64,
    /// A compaction ran (maybe part-way): superseded keys may be gone, offsets may have gaps.
    compacted: bool,
    /// A write or fsync of the partition failed since the last reopen: no flush may succeed.
    partition_failed: bool,
    /// An append failed with `Corrupt`: the library reported damage (after a misdirected write,
    /// the promise; without one, a false report).
    damage_reported: Option<String>,
    /// `SIM_OPS_TRACE` is set: the operations, the checks and the simulator's trace go to stderr
    /// (for replaying a finding: `cargo fuzz run sim_ops <input>`).
    trace: bool,
    /// Rolls defer their seal syncs (odd seeds; `LogConfig::deferred_seal_syncs`).
    deferred_seal_syncs: bool,
}

fn trace_requested() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("SIM_OPS_TRACE").is_some())
}

fuzz_target!(|input: Input| {
    let root = work_dir().to_owned();
    empty(&root);
    let mut run = Run::start(root, &input);
    for operation in &input.operations {
        run.note(&format!("{operation:?}"));
        run.apply(*operation);
        if run.sim.is_dead() || run.log_dir.is_none() {
            run.crash_and_check("the process died");
        }
    }
    run.crash_and_check("the final power cut");
});

impl Run {
    fn start(root: PathBuf, input: &Input) -> Run {
        let sim = SimStorage::new(&root, input.seed)
            .unwrap_or_else(|error| panic!("simulated disk: {error}"));
        let map = OffsetMap::new(64 * 1024).unwrap_or_else(|error| panic!("offset map: {error}"));
        let mut run = Run {
            sim,
            root,
            seed: input.seed,
            restarts: 0,
            policy: input.policy,
            delete_retention_ms: input.delete_retention_ms,
            log_dir: None,
            model: Model::default(),
            map,
            now: T0,
            appended: 0,
            compacted: false,
            partition_failed: false,
            damage_reported: None,
            trace: trace_requested(),
            deferred_seal_syncs: input.seed % 2 == 1,
        };
        run.sim.set_trace(run.trace);
        run.note(&format!(
            "seed {} {:?} delete.retention.ms {} deferred seal syncs {}",
            input.seed, input.policy, input.delete_retention_ms, run.deferred_seal_syncs
        ));
        run.create_topic();
        run
    }

    /// Opens the (fresh) directory and creates the topic.
    fn create_topic(&mut self) {
        let mut log_dir = self
            .open()
            .unwrap_or_else(|error| panic!("a fresh directory does not open: {error}"));
        if let Err(error) = log_dir.create_topic(&topic(), 1) {
            panic!("create topic on a fresh directory: {error}");
        }
        self.log_dir = Some(log_dir);
    }

    /// Whether a misdirected write fired on this directory: acknowledged data may be destroyed.
    fn misdirected(&self) -> bool {
        self.sim
            .faults_fired()
            .iter()
            .any(|(fault, _)| *fault == Fault::MisdirectedWrite)
    }

    /// Whether the log's offsets must be dense: no compaction ran, and, in a compacted topic, no
    /// misdirected write fired (it can leave a gap there that nothing tells from a compacted one;
    /// a log with `cleanup.policy=delete` holds its offsets dense whatever happens).
    fn dense(&self) -> bool {
        !self.compacted && (self.policy == Policy::Delete || !self.misdirected())
    }

    /// The library reported an error where the promise needs success: acceptable only after a
    /// misdirected write (the report is the promise then). The run goes on over a fresh
    /// directory on a fresh simulated disk, as `tests/sim_crash.rs` does.
    fn on_reported(&mut self, why: &str, error: &str) {
        assert!(self.misdirected(), "after {why}: {error}");
        self.note(&format!(
            "after {why}: reported after a misdirected write: {error}; a fresh directory"
        ));
        drop(self.log_dir.take());
        empty(&self.root);
        self.restarts += 1;
        let seed = self
            .seed
            .wrapping_add(self.restarts.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        self.sim = SimStorage::new(&self.root, seed)
            .unwrap_or_else(|error| panic!("simulated disk: {error}"));
        self.sim.set_trace(self.trace);
        self.model = Model::default();
        self.compacted = false;
        self.partition_failed = false;
        self.create_topic();
    }

    fn open(&self) -> Result<LogDir, String> {
        let mode = LogWriteMode {
            deferred_seal_syncs: self.deferred_seal_syncs,
            ..LogWriteMode::default()
        };
        let storage = Arc::new(self.sim.clone());
        LogDir::open_with(&self.root, storage, config(self.policy), mode)
            .map_err(|error| error.to_string())
    }

    fn note(&self, what: &str) {
        if self.trace {
            eprintln!("sim_ops: {what}");
        }
    }

    fn tick(&mut self) -> TimestampMs {
        self.now += 1;
        TimestampMs(self.now)
    }

    fn apply(&mut self, operation: Operation) {
        match operation {
            Operation::Checkpoint => {
                if let Some(log_dir) = self.log_dir.as_mut() {
                    owner_syncs(&self.sim, log_dir, TimestampMs(self.now));
                    let _ = log_dir.checkpoint();
                }
            }
            Operation::Reopen => self.reopen(),
            Operation::Crash => self.crash_and_check("a power cut"),
            Operation::DieAfter { mutations } => self.sim.die_after(u64::from(mutations)),
            Operation::Inject {
                fault: Fault::MisdirectedWrite,
                ..
            } if self.policy != Policy::Delete && !MISDIRECTED_WRITES_IN_COMPACTED_TOPICS => {}
            Operation::Inject { fault, nth } => self.sim.schedule(fault, u64::from(nth)),
            _ => self.on_partition(operation),
        }
    }

    /// An operation on the partition; marks the partition failed when it failed because a write
    /// or fsync of the partition failed.
    fn on_partition(&mut self, operation: Operation) {
        let Some(mut log_dir) = self.log_dir.take() else {
            return;
        };
        let log = match log_dir.partition(&topic(), 0) {
            Ok(log) => log,
            // A fault or the process's death while opening it: the next power cut recovers.
            Err(_) => return,
        };
        let faults_before = self.sim.faults_fired().len();
        let outcome = self.step(log, operation);
        let fired = self.sim.faults_fired().split_off(faults_before);
        if outcome.is_err()
            && fired
                .iter()
                .any(|(fault, path)| fails_partition(*fault, path))
        {
            self.partition_failed = true;
        }
        self.model.log_start_floor = self.model.log_start_floor.max(log.log_start_offset().0);
        if let Some(error) = self.damage_reported.take() {
            drop(log_dir);
            return self.on_reported("an append", &error);
        }
        self.log_dir = Some(log_dir);
    }

    fn step(&mut self, log: &mut PartitionLog, operation: Operation) -> Result<(), ()> {
        let now = self.tick();
        match operation {
            Operation::Append {
                key,
                value_bytes,
                records,
                tombstones,
            } => self.append(log, key, value_bytes, records, tombstones, now),
            Operation::Flush => {
                let through = log.log_end_offset().0;
                let result = log.flush();
                if result.is_ok() {
                    assert!(
                        !self.partition_failed,
                        "a flush succeeded after a failed write or fsync of the partition"
                    );
                    self.model.acked_end = self.model.acked_end.max(through);
                }
                result.map_err(drop)
            }
            Operation::Roll => log.roll(now).map_err(drop),
            Operation::DeleteRecords { point } => {
                let target = between(log.log_start_offset().0, log.log_end_offset().0, point);
                log.delete_records(Offset(target), now).map(drop).map_err(drop)
            }
            Operation::ApplyRetention => log.apply_retention(now).map(drop).map_err(drop),
            // A `cleanup.policy=delete` log is never compacted (recovery then holds its offsets
            // dense, as `tests/sim_crash.rs`'s Delete regime assumes): no compaction there.
            Operation::Compact if self.policy == Policy::Delete => Ok(()),
            Operation::Compact => {
                self.compacted = true;
                let sealed_end = log
                    .cleanable_log()
                    .sealed
                    .last()
                    .map_or(0, |segment| segment.next_offset.0);
                self.model.compactions.push(Compaction {
                    now_ms: now.0,
                    sealed_end,
                });
                log.compact(&mut self.map, Offset(0), self.delete_retention_ms, now)
                    .map(drop)
                    .map_err(drop)
            }
            Operation::Fetch { point, max_bytes } => {
                let from = between(log.log_start_offset().0, log.log_end_offset().0, point);
                if let Ok(data) = log.read(Offset(from), u64::from(max_bytes)) {
                    let served = check_batches(&data.records, self.dense())
                        .unwrap_or_else(|error| panic!("fetch at {from}: {error}"));
                    for (offset, record) in served.iter().filter(|(offset, _)| *offset >= from) {
                        self.check_served(*offset, record);
                    }
                }
                // The point lookup of the same offset serves the record written there, if any.
                if let Ok(RecordRead::Found(header, record)) = log.read_record(Offset(from)) {
                    let offset = header.base_offset + i64::from(record.offset_delta);
                    assert!(
                        offset == from as i64,
                        "lookup of {from} found offset {offset}"
                    );
                    self.check_served(from, &rec_of(record));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn append(
        &mut self,
        log: &mut PartitionLog,
        key: u8,
        value_bytes: u8,
        records: u8,
        tombstones: Tombstones,
        now: TimestampMs,
    ) -> Result<(), ()> {
        let mut builder = BatchBuilder::new(0);
        let mut written = Vec::new();
        for index in 0..records {
            self.appended += 1;
            let key = format!("key-{key}").into_bytes();
            let tombstone = match tombstones {
                Tombstones::None => false,
                Tombstones::Last => index + 1 == records,
                Tombstones::All => true,
            };
            let stamp = self.appended.to_be_bytes();
            let value: Option<Vec<u8>> = (!tombstone).then(|| {
                (0..usize::from(value_bytes))
                    .map(|i| stamp[i % stamp.len()].wrapping_add((i / stamp.len()) as u8))
                    .collect()
            });
            builder.push(&NewRecord {
                timestamp_ms: now.0,
                key: Some(&key),
                value: value.as_deref(),
                headers: &[],
            });
            written.push(Rec { key, value });
        }
        let Some(batch) = builder.build() else {
            panic!("a batch of {records} records built empty");
        };
        if !log.is_failed() {
            // Whatever lands is at these offsets, even if the append fails part-way.
            let first = log.log_end_offset().0;
            for (index, record) in written.into_iter().enumerate() {
                self.model.written.insert(first + index as u64, record);
            }
        }
        log.append(batch, now).map(drop).map_err(|error| {
            if let AppendError::Storage(StorageError::Corrupt { .. }) = &error {
                self.damage_reported = Some(error.to_string());
            }
        })
    }

    /// A clean close and a reopen on the same "kernel" (no power cut); a failure on the way is
    /// followed by a power cut.
    fn reopen(&mut self) {
        let Some(mut log_dir) = self.log_dir.take() else {
            return;
        };
        let end = log_dir
            .partition(&topic(), 0)
            .map(|log| log.log_end_offset().0);
        if log_dir.close().is_ok()
            && let Ok(end) = end
        {
            assert!(
                !self.partition_failed,
                "a clean close succeeded after a failed write or fsync of the partition"
            );
            self.model.acked_end = self.model.acked_end.max(end);
        }
        if self.sim.is_dead() {
            return;
        }
        let Ok(mut log_dir) = self.open() else {
            return;
        };
        self.partition_failed = false;
        let faults_before = self.sim.faults_fired().len();
        let checked = match log_dir.partition(&topic(), 0) {
            Ok(log) => self.check_log(log, false),
            Err(error) => Err(Failure::Reported(format!(
                "the partition does not reopen: {error}"
            ))),
        };
        if let Err(failure) = checked {
            // Pending faults and the process's death still apply after a restart; after a
            // misdirected write, an error is the report the promise asks for (the power cut that
            // follows checks the directory again).
            let faulted = self.sim.faults_fired().len() > faults_before || self.sim.is_dead();
            let reported = matches!(failure, Failure::Reported(_)) && self.misdirected();
            assert!(faulted || reported, "after a clean restart: {failure}");
            return;
        }
        self.log_dir = Some(log_dir);
    }

    /// A power cut, a reopen, the checks, and an append that must succeed.
    fn crash_and_check(&mut self, why: &str) {
        drop(self.log_dir.take());
        if let Err(error) = self.sim.crash() {
            panic!("simulated power cut: {error}");
        }
        self.partition_failed = false;
        let mut log_dir = match self.open() {
            Ok(log_dir) => log_dir,
            Err(error) => {
                return self.on_reported(why, &format!("the directory does not reopen: {error}"));
            }
        };
        match self.check_recovered(&mut log_dir, why) {
            Ok(()) => self.log_dir = Some(log_dir),
            Err(Failure::Reported(error)) => {
                drop(log_dir);
                self.on_reported(why, &error);
            }
            Err(Failure::Broken(error)) => panic!("after {why}: {error}"),
        }
    }

    /// The checks of a directory reopened after a power cut.
    fn check_recovered(&mut self, log_dir: &mut LogDir, why: &str) -> Result<(), Failure> {
        let log = match log_dir.partition(&topic(), 0) {
            Ok(log) => log,
            Err(PartitionError::UnknownPartition { .. }) if self.model.acked_end == 0 => {
                // The topic's creation was never made durable: nothing was acknowledged.
                self.model = Model::default();
                self.compacted = false;
                if let Err(error) = log_dir.create_topic(&topic(), 1) {
                    return Err(Failure::Reported(format!(
                        "create the topic again: {error}"
                    )));
                }
                return Ok(());
            }
            // Acknowledged records in a partition the directory no longer knows: silently lost.
            Err(error @ PartitionError::UnknownPartition { .. }) => {
                return Err(Failure::Broken(format!(
                    "the partition is gone with records acknowledged below {}: {error}",
                    self.model.acked_end
                )));
            }
            Err(error) => {
                return Err(Failure::Reported(format!(
                    "the partition does not reopen: {error}"
                )));
            }
        };
        self.check_log(log, true)?;
        self.append_after_reopen(log, why)
    }

    /// Reads the whole log and checks it against the model; forgets what was written past the log
    /// end. After a power cut (`after_crash`), what survived is the new durable state (the disk
    /// holds nothing else, and recovery synced its repairs).
    fn check_log(&mut self, log: &mut PartitionLog, after_crash: bool) -> Result<(), Failure> {
        let served = read_all(log, self.dense())?;
        let (log_start, log_end) = (log.log_start_offset().0, log.log_end_offset().0);
        for (offset, record) in &served {
            self.check_served(*offset, record);
        }
        let served: BTreeMap<u64, &Rec> = served.iter().map(|(o, r)| (*o, r)).collect();
        if let Err(lost) = self.check_acked(&served, log_start, log_end) {
            // R14's residual limit (RELIABILITY.md): a batch whose misdirected copy a later
            // misdirected write landed over survives nowhere, and synced bytes a misdirected
            // write damaged, the rest of it cut away by a power cut, read as a torn tail. Taken
            // as reported: the run goes on over a fresh directory.
            let residual = if self.sim.misdirected_over_misdirected() {
                Some("a misdirected write landed over an earlier one's landing")
            } else if self.sim.misdirected_landing_cut() {
                Some("a power cut cut away the rest of a misdirected write over synced bytes")
            } else {
                None
            };
            return Err(match residual {
                Some(why) => Failure::Reported(format!("{lost} ({why})")),
                None => Failure::Broken(lost),
            });
        }
        self.check_no_resurrection(&served, log_start)
            .map_err(Failure::Broken)?;
        self.note(&format!(
            "checked: log {log_start}..{log_end}, {} records served, acknowledged below {}, \
             log start floor {}",
            served.len(),
            self.model.acked_end,
            self.model.log_start_floor
        ));
        self.model.written.split_off(&log_end);
        if after_crash {
            self.model.acked_end = log_end;
        }
        self.model.log_start_floor = self.model.log_start_floor.min(log_end);
        for compaction in &mut self.model.compactions {
            compaction.sealed_end = compaction.sealed_end.min(log_end);
        }
        Ok(())
    }

    fn check_served(&self, offset: u64, record: &Rec) {
        assert!(
            self.model.written.get(&offset) == Some(record),
            "offset {offset} serves a record never written there: {record:?}"
        );
    }

    /// Every acknowledged record at or above the log start floor is served, unless a compaction
    /// ran and it is superseded: by a later served record of its key, or by a tombstone of its
    /// key (itself included) that is gone and that the model lets compaction remove.
    fn check_acked(
        &self,
        served: &BTreeMap<u64, &Rec>,
        start: u64,
        end: u64,
    ) -> Result<(), String> {
        let acked_end = self.model.acked_end;
        if end < acked_end {
            return Err(format!(
                "log end {end} is below the acknowledged end {acked_end}"
            ));
        }
        let floor = self.model.log_start_floor.min(acked_end);
        for (offset, record) in self.model.written.range(floor..acked_end) {
            if served.contains_key(offset) {
                continue;
            }
            let superseded = self.compacted
                && (served
                    .range(offset + 1..)
                    .any(|(_, later)| later.key == record.key)
                    || self.model.written.range(*offset..end).any(|(at, later)| {
                        later.key == record.key
                            && later.value.is_none()
                            && !served.contains_key(at)
                            && self.tombstone_removable(*at)
                    }));
            if !superseded {
                return Err(format!(
                    "acknowledged offset {offset} ({record:?}) is lost (log {start}..{end}, \
                     acknowledged below {acked_end}, log start floor {floor})"
                ));
            }
        }
        Ok(())
    }

    /// Whether compaction may have removed a tombstone at `offset` (the latest of its key): the
    /// first compaction that saw it in a sealed segment set its delete horizon to its time plus
    /// `delete.retention.ms`, and a later compaction ran at or past the horizon. (A compaction
    /// that failed before reaching it, or whose work a power cut undid, only makes the real
    /// horizon later: the model allows more, never less.)
    fn tombstone_removable(&self, offset: u64) -> bool {
        let mut horizon: Option<i64> = None;
        for compaction in &self.model.compactions {
            if offset >= compaction.sealed_end {
                continue;
            }
            match horizon {
                None => {
                    horizon = Some(compaction.now_ms.saturating_add(self.delete_retention_ms));
                }
                Some(horizon) if compaction.now_ms >= horizon => return true,
                Some(_) => {}
            }
        }
        false
    }

    /// A superseded value is never resurrected: when an acknowledged tombstone at or above the
    /// log start is gone (compaction removed it), no record of its key below it is served.
    fn check_no_resurrection(
        &self,
        served: &BTreeMap<u64, &Rec>,
        start: u64,
    ) -> Result<(), String> {
        let acked_end = self.model.acked_end.max(start);
        let gone_tombstones = self
            .model
            .written
            .range(start..acked_end)
            .filter(|(offset, record)| record.value.is_none() && !served.contains_key(*offset));
        for (tombstone, deleted) in gone_tombstones {
            if let Some((older, record)) = served
                .range(..tombstone)
                .find(|(_, record)| record.key == deleted.key)
            {
                return Err(format!(
                    "offset {older} serves {record:?}, superseded by the acknowledged tombstone at \
                     {tombstone}, which is gone: a resurrected value"
                ));
            }
        }
        Ok(())
    }

    /// The reopened log takes an append at its log end and makes it durable. An error from the
    /// library is a report; what it serves must be the append, at the old log end.
    fn append_after_reopen(&mut self, log: &mut PartitionLog, why: &str) -> Result<(), Failure> {
        let end = log.log_end_offset();
        let now = self.tick();
        if self.append(log, 0, 8, 1, Tombstones::None, now).is_err() {
            return Err(Failure::Reported(format!(
                "the reopened log refuses an append at {end}"
            )));
        }
        if let Err(error) = log.flush() {
            return Err(Failure::Reported(format!(
                "the reopened log does not flush: {error}"
            )));
        }
        let data = log
            .read(end, 1 << 16)
            .map_err(|error| Failure::Reported(format!("read the new append at {end}: {error}")))?;
        let served = check_batches(&data.records, self.dense())
            .unwrap_or_else(|error| panic!("after {why}: the new append: {error}"));
        let first = served.iter().find(|(offset, _)| *offset >= end.0);
        assert_eq!(
            first.map(|(offset, _)| *offset),
            Some(end.0),
            "after {why}: the append is not at the old log end"
        );
        if let Some((offset, record)) = first {
            self.check_served(*offset, record);
        }
        self.model.acked_end = log.log_end_offset().0;
        Ok(())
    }
}

/// `low + point` folded into `low..=high`.
fn between(low: u64, high: u64, point: u16) -> u64 {
    low + u64::from(point) % (high.saturating_sub(low) + 1)
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

/// Every record of the log, read batch by batch from the log start. An error from the library is
/// a report; what it serves is checked.
fn read_all(log: &mut PartitionLog, dense: bool) -> Result<Vec<(u64, Rec)>, Failure> {
    let mut served: Vec<(u64, Rec)> = Vec::new();
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    while offset < end {
        let data = log
            .read(offset, 1024)
            .map_err(|error| Failure::Reported(format!("read at {offset}: {error}")))?;
        if data.records.is_empty() {
            if dense {
                return Err(Failure::Broken(format!(
                    "nothing served at {offset} below the log end {end}"
                )));
            }
            // Compaction removed every record from `offset` to the end (the read moves on to later
            // segments until one holds a batch at or past `offset`).
            break;
        }
        let batch_records = check_batches(&data.records, dense).map_err(Failure::Broken)?;
        let Some(last) = batch_last_offset(&data.records) else {
            return Err(Failure::Broken(format!("no batch served at {offset}")));
        };
        if last < offset.0 {
            return Err(Failure::Broken(format!(
                "a read at {offset} served batches ending at {last}"
            )));
        }
        for (record_offset, record) in batch_records {
            if record_offset < offset.0 {
                continue;
            }
            if let Some((previous, _)) = served.last()
                && (record_offset <= *previous || (dense && record_offset != previous + 1))
            {
                return Err(Failure::Broken(format!(
                    "offset {record_offset} served after offset {previous}"
                )));
            }
            served.push((record_offset, record));
        }
        offset = Offset(last + 1);
    }
    if let (true, Some((first, _))) = (dense, served.first())
        && *first != log.log_start_offset().0
    {
        return Err(Failure::Broken(format!(
            "the first record served is {first}, not the log start {}",
            log.log_start_offset()
        )));
    }
    Ok(served)
}

fn batch_last_offset(records: &Bytes) -> Option<u64> {
    BatchIter::new(records.clone(), u64::MAX)
        .filter_map(Result::ok)
        .map(|batch| batch.last_offset() as u64)
        .last()
}

/// Checks served bytes: whole batches, each passing its CRC-32C, offsets strictly increasing
/// (dense when `dense`). Returns the records with their offsets.
fn check_batches(records: &Bytes, dense: bool) -> Result<Vec<(u64, Rec)>, String> {
    let mut served = Vec::new();
    let mut previous_last: Option<i64> = None;
    let mut position = 0usize;
    for batch in BatchIter::new(records.clone(), u64::MAX) {
        let batch = batch.map_err(|error| format!("a served batch does not decode: {error}"))?;
        let size = batch.size_bytes() as usize;
        let bytes = records
            .get(position..position + size)
            .ok_or("a batch is longer than what was served")?;
        position += size;
        let stored_crc = u32::from_be_bytes([bytes[17], bytes[18], bytes[19], bytes[20]]);
        if crc32c::crc32c(&bytes[21..]) != stored_crc {
            return Err(format!(
                "batch at {} served with a bad CRC",
                batch.base_offset()
            ));
        }
        if let Some(previous) = previous_last
            && (batch.base_offset() <= previous || (dense && batch.base_offset() != previous + 1))
        {
            return Err(format!(
                "batch at {} follows a batch ending at {previous}",
                batch.base_offset()
            ));
        }
        previous_last = Some(batch.last_offset());
        let mut previous_record: Option<u64> = None;
        for record in batch.records().map_err(|error| error.to_string())? {
            let offset = (batch.base_offset() + i64::from(record.offset_delta)) as u64;
            if previous_record.is_some_and(|previous| offset <= previous)
                || offset > batch.last_offset() as u64
            {
                return Err(format!("record offset {offset} out of order in its batch"));
            }
            previous_record = Some(offset);
            served.push((offset, rec_of(record)));
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
