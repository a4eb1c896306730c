//! Operation sequences on the simulated disk (`seglog::io::sim::SimStorage`): the engine in its
//! inline mode (`EngineConfig::inline`: the engine's own shard, syncer, file deleter, cleaner,
//! checkpoints, clean-shutdown marker and topic registry, run on this thread) in a temporary
//! directory (on tmpfs when `/dev/shm` exists), one topic of one partition with small segments,
//! driven through appends (written or durable, tombstones among them), flushes, DeleteRecords,
//! retention, compaction, checkpoints, clean restarts, fetches and point lookups, power cuts,
//! process deaths and injected I/O faults (misdirected writes among them), against an
//! acknowledgement log kept outside the disk. The engine's clock is the target's: it moves 1 ms
//! per operation, so that an input replays exactly.
//!
//! Input: bytes 0-7 = the simulator's seed, byte 8 = the settings: `cleanup.policy` (modulo 3:
//! delete, compact, compact+delete), the topic's `delete.retention.ms` (byte / 3 modulo 4: never,
//! 0, 3 or 20 ms) and the cleaner's dedupe buffer (byte / 12 modulo 2: 64 KiB, or 3 keys, so that
//! a compaction runs in several rounds); then up to 64 operations, each a tag byte (modulo 16)
//! and its arguments: append (tags 0-3; key byte: key = byte modulo 8, durable when byte / 8
//! modulo 4 is 3; value size 0-80; shape: records 1-3 = shape modulo 3 + 1; shape / 3 below 64 =
//! no tombstone, 64-79 = the last record a tombstone, 80 and up = every record a tombstone),
//! flush (4, 5), `flush_all` (6; a roll before the engine, which rolls only by `segment.bytes`),
//! DeleteRecords (7: a point between the log start and end), retention (8), compaction (9; in
//! delete-policy runs the engine must compact nothing), checkpoint (10), close and reopen (11),
//! fetch (12: offset, max bytes, up to the durable offset when max bytes is odd; then a point
//! lookup of that offset), power cut (13: `crash()` then reopen), `die_after(n)` (14), and a
//! fault (15: read, write or sync error, ENOSPC, short write, directory sync error, misdirected
//! write) on the nth operation of its kind. After the last operation the disk loses power once
//! more.
//!
//! A record is acknowledged when a flush (or a clean close) that followed its append succeeded,
//! when its durable append was answered, or when the partition reports a durable offset past it.
//! Invariants: no panic; the engine and the topic reopen after a power cut; after every reopen,
//! every acknowledged record is read back with its offset, key and value (a tombstone as a null
//! value), unless it is below the highest log start offset seen (retention, DeleteRecords), or a
//! compaction ran and a later record with its key is present, or a compaction ran and a
//! tombstone of its key at or after it is gone where the model allows its removal (it was in a
//! sealed segment when one compaction ran and a later compaction ran at or past that one's time +
//! `delete.retention.ms`; with the small dedupe buffer, the same compaction's later rounds count);
//! an acknowledged tombstone that is gone never leaves an older record of its key served (no
//! resurrection); every record served anywhere is the one written at its offset; every served
//! batch passes its CRC-32C; a fetch up to the durable offset serves nothing past it; an append
//! gets the log end offset; offsets strictly increase (densely from the log start without
//! compaction, except in a compacted topic after a misdirected write), and a point lookup finds a
//! record at every offset below the log end of a log never compacted nor misdirected into; after
//! a failed write or fsync of the partition it is reported offline and, until a reopen, no
//! durable append, flush or clean close succeeds; a delete-policy topic is never
//! compacted; after a power cut the topic exists and the log takes an append at its end and
//! makes it durable.
//!
//! What the compaction model predicts: the engine's cleaner (`Engine::compact`) cleans the sealed
//! segments below the partition's recovery point whose seal syncs were reported (the inline
//! engine settles its syncs in every call), from its first dirty offset (kept in
//! `cleaner-offset-checkpoint`) to that end. The target reads that end before each compaction
//! from the segment files in the partition's directory and the durable offset the engine
//! describes. A compaction that cleans nothing (no new dirty records) sets no delete horizon:
//! the model, which starts a tombstone's horizon at the first compaction that saw it sealed,
//! then allows its removal earlier than the engine can perform it, never later.
//!
//! Misdirected writes (R14 in docs/RELIABILITY.md, as `tests/sim_crash.rs` checks them; in
//! delete-policy runs only while `MISDIRECTED_WRITES_IN_COMPACTED_TOPICS` is off): once one
//! fired on the directory, acknowledged data may be destroyed, and an error from the library
//! (open, describe, read, an append refused as `Corrupt`, or the append after recovery) is
//! accepted as the report of it: the run starts over on a fresh directory. Wrong records,
//! bad-CRC batches, out-of-order offsets and acknowledged records missing from a log the library
//! serves without error still fail.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use seglog::config::LogConfig;
use seglog::engine::{
    Clock, ConsumerRecord, Durability, Engine, EngineConfig, FetchOptions, Isolation,
    PartitionDescription,
};
use seglog::error::{AppendError, StorageError, TopicError};
use seglog::format::batch::BatchIter;
use seglog::format::file_name::{FileState, SegmentFileKind, SegmentFileName, partition_dir_name};
use seglog::format::{BatchBuilder, NewRecord, Record};
use seglog::io::sim::{Fault, SimStorage};
use seglog::types::{Offset, TimestampMs, TopicName, TopicPartition};

const MAX_OPERATIONS: usize = 64;
const KEYS: u8 = 8;
const MAX_VALUE_BYTES: u8 = 80;
const T0: i64 = 1_700_000_000_000;
const TOPIC: &str = "sim";
/// The cleaner's dedupe buffer: ample, or room for 3 keys (4 slots of 24 bytes at Kafka's load
/// factor 0.9), fewer than the 8 keys the appends use, so that a compaction runs in rounds.
const DEDUPE_BUFFER_BYTES: [usize; 2] = [64 * 1024, 4 * 24];

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
        durable: bool,
        value_bytes: u8,
        records: u8,
        tombstones: Tombstones,
    },
    Flush,
    FlushAll,
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
    /// The topic's `delete.retention.ms`.
    delete_retention_ms: i64,
    /// The cleaner's dedupe buffer holds fewer keys than the appends use.
    small_dedupe_buffer: bool,
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
        let small_dedupe_buffer = (settings / 12) % 2 == 1;
        let mut operations = Vec::new();
        while operations.len() < MAX_OPERATIONS && !u.is_empty() {
            operations.push(operation(u)?);
        }
        Ok(Input {
            seed,
            policy,
            delete_retention_ms,
            small_dedupe_buffer,
            operations,
        })
    }
}

fn operation(u: &mut Unstructured<'_>) -> arbitrary::Result<Operation> {
    Ok(match u8::arbitrary(u)? % 16 {
        0..=3 => {
            let key_byte = u8::arbitrary(u)?;
            let value_bytes = u8::arbitrary(u)? % (MAX_VALUE_BYTES + 1);
            let shape = u8::arbitrary(u)?;
            Operation::Append {
                key: key_byte % KEYS,
                durable: (key_byte / KEYS) % 4 == 3,
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
        6 => Operation::FlushAll,
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

fn topic_config(policy: Policy, delete_retention_ms: i64) -> LogConfig {
    let mut config = LogConfig::default()
        .with_segment_bytes(700)
        .with_segment_index_bytes(96)
        .with_index_interval_bytes(64)
        .with_retention_ms(-1)
        .with_retention_bytes(2_000)
        .with_file_delete_delay_ms(0)
        .with_delete_retention_ms(u64::try_from(delete_retention_ms).unwrap_or(u64::MAX));
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

/// The engine's clock: the target moves it 1 ms per operation (one input at a time per process).
static NOW_MS: AtomicI64 = AtomicI64::new(T0);

/// The inline engine's settings shared by every input (its defaults read `/proc` once).
fn base_engine_config() -> &'static EngineConfig {
    static CONFIG: OnceLock<EngineConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        EngineConfig::default()
            .with_inline(true)
            .with_pin_shards(false)
            .with_cleaner_core(None)
            .with_clock(Clock::from_fn(|| {
                TimestampMs(NOW_MS.load(Ordering::Relaxed))
            }))
    })
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

fn rec_of_consumer(record: &ConsumerRecord) -> Rec {
    Rec {
        key: record
            .key
            .as_ref()
            .map(|key| key.to_vec())
            .unwrap_or_default(),
        value: record.value.as_ref().map(|value| value.to_vec()),
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
    /// The library returned an error (open, describe, read, append): a report, acceptable after
    /// a misdirected write.
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
    /// The highest log start offset the engine reported: records below may be gone.
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
    small_dedupe_buffer: bool,
    engine: Option<Engine>,
    topic: TopicName,
    model: Model,
    appended: u64,
    /// A compaction ran (maybe part-way): superseded keys may be gone, offsets may have gaps.
    compacted: bool,
    /// A write or fsync of the partition failed since the last reopen: the partition is offline,
    /// and no flush may succeed.
    partition_failed: bool,
    /// An append failed with `Corrupt`: the library reported damage (after a misdirected write,
    /// the promise; without one, a false report).
    damage_reported: Option<String>,
    /// `SIM_OPS_TRACE` is set: the operations, the checks and the simulator's trace go to stderr
    /// (for replaying a finding: `cargo fuzz run sim_ops <input>`).
    trace: bool,
}

fn trace_requested() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("SIM_OPS_TRACE").is_some())
}

fuzz_target!(|input: Input| {
    let root = work_dir().to_owned();
    empty(&root);
    NOW_MS.store(T0, Ordering::Relaxed);
    let mut run = Run::start(root, &input);
    for operation in &input.operations {
        run.note(&format!("{operation:?}"));
        run.apply(*operation);
        if run.sim.is_dead() || run.engine.is_none() {
            run.crash_and_check("the process died");
        }
    }
    run.crash_and_check("the final power cut");
});

/// Partition 0 of the topic as the engine describes it.
fn describe(engine: &Engine) -> Result<PartitionDescription, String> {
    let description = engine
        .describe_topic(TOPIC)
        .map_err(|error| error.to_string())?;
    description
        .partitions
        .into_iter()
        .next()
        .ok_or_else(|| "the topic has no partition".to_owned())
}

impl Run {
    fn start(root: PathBuf, input: &Input) -> Run {
        let sim = SimStorage::new(&root, input.seed)
            .unwrap_or_else(|error| panic!("simulated disk: {error}"));
        let mut run = Run {
            sim,
            root,
            seed: input.seed,
            restarts: 0,
            policy: input.policy,
            delete_retention_ms: input.delete_retention_ms,
            small_dedupe_buffer: input.small_dedupe_buffer,
            engine: None,
            topic: topic(),
            model: Model::default(),
            appended: 0,
            compacted: false,
            partition_failed: false,
            damage_reported: None,
            trace: trace_requested(),
        };
        run.sim.set_trace(run.trace);
        run.note(&format!(
            "seed {} {:?} delete.retention.ms {} small dedupe buffer {}",
            input.seed, input.policy, input.delete_retention_ms, input.small_dedupe_buffer
        ));
        run.create_topic();
        run
    }

    /// Opens the engine on the (fresh) directory and creates the topic.
    fn create_topic(&mut self) {
        let engine = self.open().unwrap_or_else(|error| {
            panic!("the engine does not open on a fresh directory: {error}")
        });
        let config = topic_config(self.policy, self.delete_retention_ms);
        if let Err(error) = engine.create_topic(TOPIC, 1, config) {
            panic!("create topic on a fresh directory: {error}");
        }
        self.engine = Some(engine);
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
        drop(self.engine.take());
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

    /// Opens the inline engine on the simulated disk, with this run's clock.
    fn open(&self) -> Result<Engine, String> {
        let config = base_engine_config()
            .clone()
            .with_default_topic_config(topic_config(self.policy, self.delete_retention_ms))
            .with_cleaner_dedupe_buffer_bytes(
                DEDUPE_BUFFER_BYTES[usize::from(self.small_dedupe_buffer)],
            );
        let storage = Arc::new(self.sim.clone());
        Engine::open_with_storage(&self.root, config, storage).map_err(|error| error.to_string())
    }

    fn note(&self, what: &str) {
        if self.trace {
            eprintln!("sim_ops: {what}");
        }
    }

    /// Moves the engine's clock 1 ms.
    fn tick(&mut self) -> TimestampMs {
        TimestampMs(NOW_MS.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn apply(&mut self, operation: Operation) {
        self.tick();
        match operation {
            Operation::Reopen => self.reopen(),
            Operation::Crash => self.crash_and_check("a power cut"),
            Operation::DieAfter { mutations } => self.sim.die_after(u64::from(mutations)),
            Operation::Inject {
                fault: Fault::MisdirectedWrite,
                ..
            } if self.policy != Policy::Delete && !MISDIRECTED_WRITES_IN_COMPACTED_TOPICS => {}
            Operation::Inject { fault, nth } => self.sim.schedule(fault, u64::from(nth)),
            _ => self.on_engine(operation),
        }
    }

    /// An operation through the engine; marks the partition failed when it failed (or the
    /// partition went offline) because a write or fsync of the partition failed, and takes what
    /// the engine then describes: its log start offset, and its durable offset (a promise).
    fn on_engine(&mut self, operation: Operation) {
        let Some(engine) = self.engine.take() else {
            return;
        };
        let faults_before = self.sim.faults_fired().len();
        let before = describe(&engine);
        let outcome = self.step(&engine, operation, before.as_ref().ok());
        let fired = self.sim.faults_fired().split_off(faults_before);
        let after = describe(&engine);
        let offline = !after
            .as_ref()
            .is_ok_and(|description| description.offline.is_none());
        // A partition that did not open before the operation had no log to fail: its next open
        // recovers it again.
        if before.is_ok()
            && (outcome.is_err() || offline)
            && fired
                .iter()
                .any(|(fault, path)| fails_partition(*fault, path))
        {
            self.partition_failed = true;
        }
        if let Ok(after) = &after {
            self.note(&format!("then: {after:?}"));
            assert!(
                !self.partition_failed || after.offline.is_some(),
                "a write or fsync of the partition failed and it is not offline: {after:?}"
            );
            self.model.log_start_floor = self.model.log_start_floor.max(after.log_start_offset.0);
            self.model.acked_end = self.model.acked_end.max(after.durable_offset.0);
        }
        if let Some(error) = self.damage_reported.take() {
            drop(engine);
            return self.on_reported("an append", &error);
        }
        self.engine = Some(engine);
    }

    fn step(
        &mut self,
        engine: &Engine,
        operation: Operation,
        before: Option<&PartitionDescription>,
    ) -> Result<(), ()> {
        let topic = self.topic.clone();
        // Where an append lands: the log end, unless the partition is offline (it refuses).
        let online_end = before
            .filter(|description| description.offline.is_none())
            .map(|description| description.log_end_offset.0);
        let (start, end) = before.map_or((0, 0), |description| {
            (description.log_start_offset.0, description.log_end_offset.0)
        });
        match operation {
            Operation::Append {
                key,
                durable,
                value_bytes,
                records,
                tombstones,
            } => {
                let durability = match durable {
                    true => Durability::Durable,
                    false => Durability::Written,
                };
                let shape = (key, value_bytes, records, tombstones);
                let offline = before.is_some_and(|description| description.offline.is_some());
                self.append(engine, (online_end, offline), shape, durability)
            }
            Operation::Flush => {
                let result = engine.flush(&topic, 0).wait();
                self.flushed(result.is_ok(), before);
                result.map_err(drop)
            }
            Operation::FlushAll => {
                let result = engine.flush_all();
                self.flushed(result.is_ok(), before);
                result.map_err(drop)
            }
            Operation::DeleteRecords { point } => {
                let target = between(start, end, point);
                engine
                    .delete_records(&topic, 0, Offset(target))
                    .wait()
                    .map(drop)
                    .map_err(drop)
            }
            Operation::ApplyRetention => match engine.apply_retention(Some(TOPIC)) {
                Ok(passes) if passes.iter().all(|pass| pass.outcome.is_ok()) => Ok(()),
                _ => Err(()),
            },
            Operation::Compact => {
                if self.policy != Policy::Delete {
                    self.compacted = true;
                    let sealed_end = before.map_or(u64::MAX, |description| {
                        self.sealed_end(description.durable_offset.0)
                    });
                    self.model.compactions.push(Compaction {
                        now_ms: NOW_MS.load(Ordering::Relaxed),
                        sealed_end,
                    });
                    self.note(&format!("compaction below {sealed_end}"));
                }
                match engine.compact(Some(TOPIC)) {
                    Ok(reports) => {
                        // A `cleanup.policy=delete` log is never compacted (recovery then holds its
                        // offsets dense, as `tests/sim_crash.rs`'s Delete regime assumes).
                        assert!(
                            self.policy != Policy::Delete || reports.is_empty(),
                            "the engine compacted a delete-policy topic: {reports:?}"
                        );
                        match reports.iter().all(|report| report.outcome.is_ok()) {
                            true => Ok(()),
                            false => Err(()),
                        }
                    }
                    Err(_) => Err(()),
                }
            }
            Operation::Checkpoint => engine.checkpoint().map_err(drop),
            Operation::Fetch { point, max_bytes } => {
                self.fetch(engine, between(start, end, point), max_bytes, end);
                Ok(())
            }
            Operation::Reopen
            | Operation::Crash
            | Operation::DieAfter { .. }
            | Operation::Inject { .. } => Ok(()),
        }
    }

    /// After a flush answered: a success acknowledges everything appended before it; after a
    /// failed write or fsync of the partition none may succeed until a reopen.
    fn flushed(&mut self, succeeded: bool, before: Option<&PartitionDescription>) {
        if !succeeded {
            return;
        }
        assert!(
            !self.partition_failed,
            "a flush succeeded after a failed write or fsync of the partition"
        );
        if let Some(before) = before {
            self.model.acked_end = self.model.acked_end.max(before.log_end_offset.0);
        }
    }

    /// A fetch from `from` (up to the durable offset when `max_bytes` is odd), then a point
    /// lookup of `from`: whatever they serve is what was written there.
    fn fetch(&mut self, engine: &Engine, from: u64, max_bytes: u16, end: u64) {
        let options = FetchOptions {
            max_bytes: u64::from(max_bytes),
            min_bytes: 1,
            max_wait_ms: 0,
            isolation: match max_bytes % 2 {
                1 => Isolation::Durable,
                _ => Isolation::LogEnd,
            },
        };
        if let Ok(data) = engine.fetch(&self.topic, 0, Offset(from), options).wait() {
            let served = check_batches(&data.records, self.dense())
                .unwrap_or_else(|error| panic!("fetch at {from}: {error}"));
            for (offset, record) in served.iter().filter(|(offset, _)| *offset >= from) {
                self.check_served(*offset, record);
            }
            if options.isolation == Isolation::Durable
                && let Some(last) = batch_last_offset(&data.records)
            {
                assert!(
                    last < data.durable_offset.0,
                    "a fetch up to the durable offset {} served a batch ending at {last}",
                    data.durable_offset
                );
            }
        }
        match engine.fetch_record(&self.topic, 0, Offset(from)).wait() {
            Ok(Some(record)) => {
                assert!(
                    record.offset.0 == from,
                    "lookup of {from} found offset {}",
                    record.offset
                );
                self.check_served(from, &rec_of_consumer(&record));
            }
            // In a log never compacted (nor misdirected into), every offset below the log end
            // holds a record.
            Ok(None) => assert!(
                from >= end || self.compacted || self.misdirected(),
                "lookup of {from} found nothing in a dense log ending at {end}"
            ),
            Err(_) => {}
        }
    }

    /// The end of the sealed segments the cleaner may clean now: the partition's segment files
    /// (read from the real directory, not through the simulated disk, so that no operation is
    /// counted), each segment's end being the next one's base offset, up to the durable offset.
    fn sealed_end(&self, durable_offset: u64) -> u64 {
        let tp = TopicPartition {
            topic: self.topic.clone(),
            partition: 0,
        };
        let dir = self.root.join(partition_dir_name(&tp));
        let mut bases: Vec<u64> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| SegmentFileName::parse(entry.file_name().to_str()?))
            .filter(|name| name.kind == SegmentFileKind::Log && name.state == FileState::Live)
            .map(|name| name.base_offset.0)
            .collect();
        bases.sort_unstable();
        bases
            .iter()
            .skip(1)
            .copied()
            .filter(|base| *base <= durable_offset)
            .max()
            .unwrap_or(0)
    }

    /// Appends a batch of `shape`; `at` is the log end it must get (`None`: unknown, the
    /// partition is `offline` or was not described).
    fn append(
        &mut self,
        engine: &Engine,
        (at, offline): (Option<u64>, bool),
        (key, value_bytes, records, tombstones): (u8, u8, u8, Tombstones),
        durability: Durability,
    ) -> Result<(), ()> {
        let mut builder = BatchBuilder::new(0);
        let mut written = Vec::new();
        let now = NOW_MS.load(Ordering::Relaxed);
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
                timestamp_ms: now,
                key: Some(&key),
                value: value.as_deref(),
                headers: &[],
            });
            written.push(Rec { key, value });
        }
        let Some(batch) = builder.build() else {
            panic!("a batch of {records} records built empty");
        };
        if let Some(first) = at {
            // Whatever lands is at these offsets, even if the append fails part-way.
            for (index, record) in written.iter().enumerate() {
                self.model
                    .written
                    .insert(first + index as u64, record.clone());
            }
        }
        match engine.append(&self.topic, 0, batch, durability).wait() {
            Ok(info) => {
                match at {
                    Some(at) => assert_eq!(
                        info.first_offset.0, at,
                        "an append got offset {} where the log ended at {at}",
                        info.first_offset
                    ),
                    // The partition did not open for the description before (a fault), and
                    // opened for the append.
                    None => {
                        assert!(
                            !offline,
                            "an offline partition took an append at {}",
                            info.first_offset
                        );
                        for (index, record) in written.into_iter().enumerate() {
                            self.model
                                .written
                                .insert(info.first_offset.0 + index as u64, record);
                        }
                    }
                }
                if durability == Durability::Durable {
                    assert!(info.durable, "a durable append answered not durable");
                    assert!(
                        !self.partition_failed,
                        "a durable append succeeded after a failed write or fsync of the partition"
                    );
                    self.model.acked_end = self.model.acked_end.max(info.last_offset.0 + 1);
                }
                Ok(())
            }
            Err(error) => {
                if let AppendError::Storage(StorageError::Corrupt { .. }) = &error {
                    self.damage_reported = Some(error.to_string());
                }
                Err(())
            }
        }
    }

    /// A clean close and a reopen on the same "kernel" (no power cut); a failure on the way is
    /// followed by a power cut.
    fn reopen(&mut self) {
        let Some(engine) = self.engine.take() else {
            return;
        };
        let before = describe(&engine);
        let closed = engine.close();
        drop(engine);
        if closed.is_ok() {
            assert!(
                !self.partition_failed,
                "a clean close succeeded after a failed write or fsync of the partition"
            );
            if let Ok(before) = &before {
                self.model.acked_end = self.model.acked_end.max(before.log_end_offset.0);
            }
        }
        if self.sim.is_dead() {
            return;
        }
        let Ok(engine) = self.open() else {
            return;
        };
        self.partition_failed = false;
        let faults_before = self.sim.faults_fired().len();
        if let Err(failure) = self.check_log(&engine, false) {
            // Pending faults and the process's death still apply after a restart; after a
            // misdirected write, an error is the report the promise asks for (the power cut that
            // follows checks the directory again).
            let faulted = self.sim.faults_fired().len() > faults_before || self.sim.is_dead();
            let reported = matches!(failure, Failure::Reported(_)) && self.misdirected();
            assert!(faulted || reported, "after a clean restart: {failure}");
            return;
        }
        self.engine = Some(engine);
    }

    /// A power cut, a reopen, the checks, and an append that must succeed.
    fn crash_and_check(&mut self, why: &str) {
        drop(self.engine.take());
        if let Err(error) = self.sim.crash() {
            panic!("simulated power cut: {error}");
        }
        self.partition_failed = false;
        let engine = match self.open() {
            Ok(engine) => engine,
            Err(error) => {
                return self.on_reported(why, &format!("the engine does not reopen: {error}"));
            }
        };
        match self.check_recovered(&engine, why) {
            Ok(()) => self.engine = Some(engine),
            Err(Failure::Reported(error)) => {
                drop(engine);
                self.on_reported(why, &error);
            }
            Err(Failure::Broken(error)) => panic!("after {why}: {error}"),
        }
    }

    /// The checks of an engine reopened after a power cut.
    fn check_recovered(&mut self, engine: &Engine, why: &str) -> Result<(), Failure> {
        match engine.describe_topic(TOPIC) {
            Ok(_) => {}
            // `create_topic` returned only once the topic was durable.
            Err(error @ TopicError::UnknownTopic { .. }) if !self.misdirected() => {
                return Err(Failure::Broken(format!(
                    "the topic is gone with records acknowledged below {}: {error}",
                    self.model.acked_end
                )));
            }
            Err(error) => {
                return Err(Failure::Reported(format!(
                    "the topic does not reopen: {error}"
                )));
            }
        }
        self.check_log(engine, true)?;
        self.append_after_reopen(engine, why)
    }

    /// Reads the whole log and checks it against the model; forgets what was written past the log
    /// end. After a power cut (`after_crash`), what survived is the new durable state (the disk
    /// holds nothing else, and recovery synced its repairs).
    fn check_log(&mut self, engine: &Engine, after_crash: bool) -> Result<(), Failure> {
        let description = describe(engine)
            .map_err(|error| Failure::Reported(format!("describe the partition: {error}")))?;
        if let Some(cause) = &description.offline {
            return Err(Failure::Reported(format!(
                "the partition is offline: {cause}"
            )));
        }
        let (log_start, log_end) = (description.log_start_offset.0, description.log_end_offset.0);
        let served = read_all(engine, &self.topic, log_start, log_end, self.dense())?;
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
    /// `delete.retention.ms`, and a later compaction ran at or past the horizon — or, with the
    /// small dedupe buffer, a later round of the same compaction (each round cleans every sealed
    /// segment below what it mapped, at the same time). (A compaction that failed before reaching
    /// it, cleaned nothing, or whose work a power cut undid, only makes the real horizon later:
    /// the model allows more, never less.)
    fn tombstone_removable(&self, offset: u64) -> bool {
        let mut horizon: Option<i64> = None;
        for compaction in &self.model.compactions {
            if offset >= compaction.sealed_end {
                continue;
            }
            match horizon {
                None => {
                    let set = compaction.now_ms.saturating_add(self.delete_retention_ms);
                    if self.small_dedupe_buffer && compaction.now_ms >= set {
                        return true;
                    }
                    horizon = Some(set);
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
    fn append_after_reopen(&mut self, engine: &Engine, why: &str) -> Result<(), Failure> {
        let end = describe(engine)
            .map_err(|error| Failure::Reported(format!("describe the partition: {error}")))?
            .log_end_offset;
        self.tick();
        let shape = (0, 8, 1, Tombstones::None);
        if self
            .append(engine, (Some(end.0), false), shape, Durability::Written)
            .is_err()
        {
            return Err(Failure::Reported(format!(
                "the reopened log refuses an append at {end}"
            )));
        }
        if let Err(error) = engine.flush(&self.topic, 0).wait() {
            return Err(Failure::Reported(format!(
                "the reopened log does not flush: {error}"
            )));
        }
        let options = FetchOptions {
            max_bytes: 1 << 16,
            ..FetchOptions::default()
        };
        let data = engine
            .fetch(&self.topic, 0, end, options)
            .wait()
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
        self.model.acked_end = end.0 + 1;
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

/// Every record of the log, read batch by batch from the log start through the engine's fetch.
/// An error from the library is a report; what it serves is checked.
fn read_all(
    engine: &Engine,
    topic: &TopicName,
    start: u64,
    end: u64,
    dense: bool,
) -> Result<Vec<(u64, Rec)>, Failure> {
    let mut served: Vec<(u64, Rec)> = Vec::new();
    let mut offset = start;
    let options = FetchOptions {
        max_bytes: 1024,
        ..FetchOptions::default()
    };
    while offset < end {
        let data = engine
            .fetch(topic, 0, Offset(offset), options)
            .wait()
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
        if last < offset {
            return Err(Failure::Broken(format!(
                "a read at {offset} served batches ending at {last}"
            )));
        }
        for (record_offset, record) in batch_records {
            if record_offset < offset {
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
        offset = last + 1;
    }
    if let (true, Some((first, _))) = (dense, served.first())
        && *first != start
    {
        return Err(Failure::Broken(format!(
            "the first record served is {first}, not the log start {start}"
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
