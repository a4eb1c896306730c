//! The engine under overload and faults (issue 3: bad input and faults): a full shard queue and
//! too many bytes in flight are typed errors, not unbounded memory; a shard whose thread panics
//! fails its partitions closed with `ShardFailed` while the process and the other shards keep
//! running; the handle is `Clone + Send + Sync`; a shard writes and answers while its sync
//! threads hold a sync, fails what was written behind a failed sync, and never syncs a file (a
//! roll) while a sync thread may be syncing it. The faults come from storage hooks that make a write or `fdatasync` block
//! on a gate, or `fdatasync` panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions, Pending};
use seglog::error::{AppendError, EngineUnavailable};
use seglog::format::{BatchBuilder, NewRecord};
use seglog::io::hooked::{HookedStorage, StorageHooks, StorageOp};
use seglog::io::pio::PositionedIo;
use seglog::log::AppendInfo;
use seglog::types::{Offset, TopicName};

const NORMAL: u8 = 0;
const SYNC_BLOCKS: u8 = 1;
const SYNC_PANICS: u8 = 2;
/// A `.log` write blocks: the shard itself is held in its turn.
const WRITE_BLOCKS: u8 = 3;
/// The next `fdatasync` blocks, then fails with EIO; the ones after it succeed.
const SYNC_BLOCKS_THEN_FAILS_ONCE: u8 = 4;

/// What `fdatasync` and writes do, and a gate that blocked ones wait on.
#[derive(Debug, Default)]
struct Faults {
    mode: AtomicU8,
    /// (an operation is waiting, the gate is open)
    gate: Mutex<(bool, bool)>,
    changed: Condvar,
    /// Syncs in progress per file, and whether two of one file ever ran at once.
    syncing: Mutex<HashMap<PathBuf, usize>>,
    overlapped: AtomicBool,
    /// The name of the thread of each `fdatasync` of a `.log`.
    log_sync_threads: Mutex<Vec<String>>,
}

impl Faults {
    fn sync(&self) -> io::Result<()> {
        match self.mode.load(Ordering::SeqCst) {
            SYNC_BLOCKS => self.block(),
            SYNC_PANICS => panic!("injected fault: fdatasync panics"),
            SYNC_BLOCKS_THEN_FAILS_ONCE => {
                self.block();
                self.mode.store(NORMAL, Ordering::SeqCst);
                return Err(io::Error::from_raw_os_error(5));
            }
            _ => {}
        }
        Ok(())
    }

    fn write(&self) {
        if self.mode.load(Ordering::SeqCst) == WRITE_BLOCKS {
            self.block();
        }
    }

    fn block(&self) {
        let mut gate = self.gate.lock().unwrap();
        gate.0 = true;
        self.changed.notify_all();
        while !gate.1 {
            gate = self.changed.wait(gate).unwrap();
        }
    }

    fn wait_until_blocked(&self) {
        let mut gate = self.gate.lock().unwrap();
        while !gate.0 {
            gate = self
                .changed
                .wait_timeout(gate, Duration::from_secs(10))
                .unwrap()
                .0;
        }
    }

    fn open_gate(&self) {
        self.gate.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

impl StorageHooks for Faults {
    fn before(&self, op: StorageOp, path: &Path) -> io::Result<()> {
        match op {
            StorageOp::SyncData => {
                let mut syncing = self.syncing.lock().unwrap();
                let count = syncing.entry(path.to_owned()).or_default();
                *count += 1;
                if *count > 1 {
                    self.overlapped.store(true, Ordering::SeqCst);
                }
                drop(syncing);
                if path.extension().is_some_and(|extension| extension == "log") {
                    let thread = std::thread::current().name().unwrap_or("").to_owned();
                    self.log_sync_threads.lock().unwrap().push(thread);
                }
                self.sync()
            }
            StorageOp::Write => {
                self.write();
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn after(&self, op: StorageOp, path: &Path) {
        if op == StorageOp::SyncData
            && let Some(count) = self.syncing.lock().unwrap().get_mut(path)
        {
            *count -= 1;
        }
    }
}

fn batch(value: &str) -> Bytes {
    let mut builder = BatchBuilder::new(0);
    builder.push(&NewRecord {
        timestamp_ms: 1_700_000_000_000,
        key: None,
        value: Some(value.as_bytes()),
        headers: &[],
    });
    builder.build().unwrap()
}

fn open(dir: &Path, faults: &Arc<Faults>, config: EngineConfig) -> (Engine, TopicName) {
    let storage = Arc::new(HookedStorage::new(Arc::new(PositionedIo), faults.clone()));
    let engine = Engine::open_with_storage(
        dir,
        EngineConfig {
            shard_count: 1,
            pin_shards: false,
            ..config
        },
        storage,
    )
    .unwrap();
    let topic = engine.create_topic("t", 1, LogConfig::default()).unwrap();
    (engine, topic)
}

#[test]
fn engine_handles_are_clone_send_and_sync() {
    fn assert_handle<T: Clone + Send + Sync + 'static>() {}
    assert_handle::<Engine>();
}

#[test]
fn a_full_shard_queue_answers_queue_full_and_recovers_when_drained() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    let (engine, topic) = open(
        dir.path(),
        &faults,
        EngineConfig {
            queue_requests_max: 1,
            ..EngineConfig::default()
        },
    );
    faults.mode.store(WRITE_BLOCKS, Ordering::SeqCst);
    let busy = engine.append(&topic, 0, batch("first"), Durability::Durable);
    faults.wait_until_blocked();
    let queued = engine.append(&topic, 0, batch("second"), Durability::Written);
    let refused = engine
        .append(&topic, 0, batch("third"), Durability::Written)
        .wait();
    assert!(
        matches!(
            refused,
            Err(AppendError::Unavailable(EngineUnavailable::QueueFull {
                shard: 0
            }))
        ),
        "{refused:?}"
    );
    faults.mode.store(NORMAL, Ordering::SeqCst);
    faults.open_gate();
    assert!(busy.wait().unwrap().durable);
    queued.wait().unwrap();
    engine
        .append(&topic, 0, batch("fourth"), Durability::Written)
        .wait()
        .unwrap();
    engine.close().unwrap();
}

#[test]
fn bytes_in_flight_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    let limit_bytes = batch("x").len() as u64 * 3 / 2;
    let (engine, topic) = open(
        dir.path(),
        &faults,
        EngineConfig {
            inflight_bytes_max: limit_bytes,
            ..EngineConfig::default()
        },
    );
    faults.mode.store(WRITE_BLOCKS, Ordering::SeqCst);
    let busy = engine.append(&topic, 0, batch("a"), Durability::Durable);
    faults.wait_until_blocked();
    let queued = engine.append(&topic, 0, batch("b"), Durability::Written);
    let refused = engine
        .append(&topic, 0, batch("c"), Durability::Written)
        .wait();
    assert!(
        matches!(
            refused,
            Err(AppendError::Unavailable(
                EngineUnavailable::TooManyBytesInFlight { .. }
            ))
        ),
        "{refused:?}"
    );
    faults.mode.store(NORMAL, Ordering::SeqCst);
    faults.open_gate();
    busy.wait().unwrap();
    queued.wait().unwrap();
    engine
        .append(&topic, 0, batch("d"), Durability::Written)
        .wait()
        .unwrap();
    engine.close().unwrap();
}

#[test]
fn a_panicking_shard_fails_its_partitions_closed_and_the_process_keeps_running() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    let (engine, topic) = open(dir.path(), &faults, EngineConfig::default());
    engine
        .append(&topic, 0, batch("before"), Durability::Durable)
        .wait()
        .unwrap();
    faults.mode.store(SYNC_PANICS, Ordering::SeqCst);
    let failed = engine
        .append(&topic, 0, batch("boom"), Durability::Durable)
        .wait();
    assert!(
        matches!(
            failed,
            Err(AppendError::Unavailable(EngineUnavailable::ShardFailed {
                shard: 0
            }))
        ),
        "{failed:?}"
    );
    faults.mode.store(NORMAL, Ordering::SeqCst);
    let after = engine
        .append(&topic, 0, batch("after"), Durability::Written)
        .wait();
    assert!(
        matches!(
            after,
            Err(AppendError::Unavailable(
                EngineUnavailable::ShardFailed { .. }
            ))
        ),
        "{after:?}"
    );
    drop(engine);
    let engine = Engine::open(
        dir.path(),
        EngineConfig {
            shard_count: 1,
            pin_shards: false,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let info = engine
        .append(&topic, 0, batch("reopened"), Durability::Durable)
        .wait()
        .unwrap();
    assert!(
        info.durable,
        "the reopened engine serves the partition again"
    );
    engine.close().unwrap();
}

#[test]
fn a_shard_writes_and_answers_while_its_sync_threads_hold_a_sync() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    let (engine, topic) = open(dir.path(), &faults, through_sync_threads());
    faults.mode.store(SYNC_BLOCKS, Ordering::SeqCst);
    let durable = answered_later(engine.append(&topic, 0, batch("durable"), Durability::Durable));
    faults.wait_until_blocked();
    // The shard is not in the sync: it writes, answers and serves reads meanwhile.
    let written = engine
        .append(&topic, 0, batch("written"), Durability::Written)
        .wait()
        .unwrap();
    assert_eq!((written.first_offset, written.durable), (Offset(1), false));
    let fetched = engine
        .fetch(&topic, 0, Offset(0), FetchOptions::default())
        .wait()
        .unwrap();
    assert_eq!(fetched.log_end_offset, Offset(2));
    assert_eq!(fetched.durable_offset, Offset(0), "nothing is synced yet");
    let later = answered_later(engine.append(&topic, 0, batch("later"), Durability::Durable));
    std::thread::sleep(Duration::from_millis(50));
    assert!(!durable.0.load(Ordering::SeqCst) && !later.0.load(Ordering::SeqCst));
    faults.mode.store(NORMAL, Ordering::SeqCst);
    faults.open_gate();
    assert!(durable.1.join().unwrap().unwrap().durable);
    let later = later.1.join().unwrap().unwrap();
    assert_eq!((later.first_offset, later.durable), (Offset(2), true));
    let described = engine.describe_topic(topic.as_str()).unwrap();
    assert_eq!(described.partitions[0].durable_offset, Offset(3));
    engine.close().unwrap();
}

/// Every group-commit sync through the sync threads, even a lone one the shard would sync itself.
fn through_sync_threads() -> EngineConfig {
    EngineConfig {
        sync_inline_when_idle: false,
        ..EngineConfig::default()
    }
}

type Answer = Result<AppendInfo, AppendError>;

/// Waits for `pending` on a thread of its own: whether it was answered, and the answer.
fn answered_later(
    pending: Pending<AppendInfo, AppendError>,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<Answer>) {
    let answered = Arc::new(AtomicBool::new(false));
    let flag = answered.clone();
    let waiter = std::thread::spawn(move || {
        let answer = pending.wait();
        flag.store(true, Ordering::SeqCst);
        answer
    });
    (answered, waiter)
}

#[test]
fn after_a_failed_sync_the_appends_written_behind_it_fail_though_their_own_sync_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    let (engine, topic) = open(dir.path(), &faults, through_sync_threads());
    faults
        .mode
        .store(SYNC_BLOCKS_THEN_FAILS_ONCE, Ordering::SeqCst);
    let first = answered_later(engine.append(&topic, 0, batch("first"), Durability::Durable));
    faults.wait_until_blocked();
    // Written while the first sync is held, so queued for the sync thread before it fails.
    let behind = answered_later(engine.append(&topic, 0, batch("behind"), Durability::Durable));
    std::thread::sleep(Duration::from_millis(20));
    faults.open_gate();
    let first = first.1.join().unwrap();
    assert!(matches!(first, Err(AppendError::Storage(_))), "{first:?}");
    let behind = behind.1.join().unwrap();
    assert!(matches!(behind, Err(AppendError::Storage(_))), "{behind:?}");
    let after = engine
        .append(&topic, 0, batch("after"), Durability::Durable)
        .wait();
    assert!(after.is_err(), "the log stays failed: {after:?}");
    drop(engine);
}

/// A roll leaves the sync of the segment it seals to the sync threads: the append that rolls is
/// answered while a sync of that segment is held, the seal's sync queues behind the held one (one
/// file is never synced twice at once), and a durable append to the new segment is answered only
/// after both.
#[test]
fn a_roll_answers_at_once_and_its_seal_sync_runs_on_the_sync_threads_before_later_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    let storage = Arc::new(HookedStorage::new(Arc::new(PositionedIo), faults.clone()));
    let config = EngineConfig {
        shard_count: 1,
        pin_shards: false,
        ..through_sync_threads()
    };
    let engine = Engine::open_with_storage(dir.path(), config, storage).unwrap();
    // Room for one batch: the second append rolls.
    let segment_bytes = batch("first").len() as u64 + 8;
    let log_config = LogConfig {
        segment_bytes,
        ..LogConfig::default()
    };
    let topic = engine.create_topic("t", 1, log_config).unwrap();
    faults.mode.store(SYNC_BLOCKS, Ordering::SeqCst);
    let first = answered_later(engine.append(&topic, 0, batch("first"), Durability::Durable));
    faults.wait_until_blocked();
    let rolling = answered_later(engine.append(&topic, 0, batch("second"), Durability::Written));
    let rolled_while_held = wait_for_flag(&rolling.0, Duration::from_secs(30));
    let durable_after_roll =
        answered_later(engine.append(&topic, 0, batch("third"), Durability::Durable));
    std::thread::sleep(Duration::from_millis(50));
    let durable_answered_while_held = durable_after_roll.0.load(Ordering::SeqCst);
    faults.mode.store(NORMAL, Ordering::SeqCst);
    faults.open_gate();
    assert!(
        rolled_while_held,
        "the append that rolls does not wait for the held sync"
    );
    assert!(
        !durable_answered_while_held,
        "a durable append in the new segment waits for the sealed segment's sync"
    );
    assert!(first.1.join().unwrap().unwrap().durable);
    assert_eq!(rolling.1.join().unwrap().unwrap().first_offset, Offset(1));
    let durable = durable_after_roll.1.join().unwrap().unwrap();
    assert!(
        durable.durable && durable.first_offset == Offset(2),
        "{durable:?}"
    );
    let described = engine.describe_topic(topic.as_str()).unwrap();
    assert!(described.partitions[0].segment_count >= 2);
    assert!(!faults.overlapped.load(Ordering::SeqCst));
    engine.close().unwrap();
}

/// Whether `flag` was set within `limit` (a bound for a hung engine, not a timing).
fn wait_for_flag(flag: &AtomicBool, limit: Duration) -> bool {
    let started = std::time::Instant::now();
    while !flag.load(Ordering::SeqCst) && started.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(1));
    }
    flag.load(Ordering::SeqCst)
}

#[test]
fn a_lone_durable_append_is_synced_by_the_shard_unless_told_to_use_the_sync_threads() {
    for (config, expected) in [
        (EngineConfig::default(), "seglog-shard-0"),
        (through_sync_threads(), "seglog-sync-0."),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let faults = Arc::new(Faults::default());
        let (engine, topic) = open(dir.path(), &faults, config);
        faults.log_sync_threads.lock().unwrap().clear();
        let info = engine
            .append(&topic, 0, batch("lone"), Durability::Durable)
            .wait()
            .unwrap();
        assert!(info.durable);
        let threads = faults.log_sync_threads.lock().unwrap().clone();
        assert_eq!(threads.len(), 1, "{threads:?}");
        assert!(threads[0].starts_with(expected), "{threads:?}");
        engine.close().unwrap();
    }
}
