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

use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions, Pending};
use seglog::error::{AppendError, EngineUnavailable};
use seglog::io::hooked::{StorageHooks, StorageOp};
use seglog::log::AppendInfo;
use seglog::types::{Offset, TopicName};
use support::batches::value_batch;
use support::engines::engine_config;
use support::hooks::{hooked_pio, wait_every};

mod support;

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

/// An engine of one shard with `config`, over positioned I/O with fresh `Faults`, and a topic
/// `t` of one partition with `log_config`, in a temporary directory.
fn faulty_with(config: EngineConfig, log_config: LogConfig) -> Faulty {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    let config = config.with_shard_count(1).with_pin_shards(false);
    let engine = Engine::open_with_storage(dir.path(), config, hooked_pio(faults.clone())).unwrap();
    let topic = engine.create_topic("t", 1, log_config).unwrap();
    Faulty {
        dir,
        faults,
        engine,
        topic,
    }
}

/// [`faulty_with`] Kafka's default topic configuration.
fn faulty(config: EngineConfig) -> Faulty {
    faulty_with(config, LogConfig::default())
}

struct Faulty {
    dir: tempfile::TempDir,
    faults: Arc<Faults>,
    engine: Engine,
    topic: TopicName,
}

impl Faulty {
    /// Appends `value` to the partition.
    fn append(&self, value: &str, durability: Durability) -> Pending<AppendInfo, AppendError> {
        let batch = value_batch(value);
        self.engine.append(&self.topic, 0, batch, durability)
    }

    /// Appends `value` and waits for the answer on a thread of its own.
    fn answered_later(&self, value: &str, durability: Durability) -> AnsweredLater {
        answered_later(self.append(value, durability))
    }

    fn set_mode(&self, mode: u8) {
        self.faults.mode.store(mode, Ordering::SeqCst);
    }

    /// Back to normal, and the gate opened.
    fn release(&self) {
        self.set_mode(NORMAL);
        self.faults.open_gate();
    }
}

#[test]
fn engine_handles_are_clone_send_and_sync() {
    fn assert_handle<T: Clone + Send + Sync + 'static>() {}
    assert_handle::<Engine>();
}

/// With `config`, a durable append held in its write and a second one queued behind it, a third
/// append is refused as `refused` says; once the write goes ahead the first two are answered and
/// a fourth append goes through.
fn assert_refused_behind_a_held_write(config: EngineConfig, refused: fn(&Answer) -> bool) {
    let faulty = faulty(config);
    faulty.set_mode(WRITE_BLOCKS);
    let busy = faulty.append("first", Durability::Durable);
    faulty.faults.wait_until_blocked();
    let queued = faulty.append("second", Durability::Written);
    let third = faulty.append("third", Durability::Written).wait();
    assert!(refused(&third), "{third:?}");
    faulty.release();
    assert!(busy.wait().unwrap().durable);
    queued.wait().unwrap();
    faulty.append("fourth", Durability::Written).wait().unwrap();
    faulty.engine.close().unwrap();
}

#[test]
fn a_full_shard_queue_answers_queue_full_and_recovers_when_drained() {
    let config = EngineConfig::default().with_queue_requests_max(1);
    assert_refused_behind_a_held_write(config, |answer| {
        matches!(
            answer,
            Err(AppendError::Unavailable(EngineUnavailable::QueueFull {
                shard: 0
            }))
        )
    });
}

#[test]
fn bytes_in_flight_are_bounded() {
    let config =
        EngineConfig::default().with_inflight_bytes_max(value_batch("x").len() as u64 * 3 / 2);
    assert_refused_behind_a_held_write(config, |answer| {
        matches!(
            answer,
            Err(AppendError::Unavailable(
                EngineUnavailable::TooManyBytesInFlight { .. }
            ))
        )
    });
}

/// Whether `answer` is `ShardFailed` for shard 0.
fn is_shard_failed(answer: &Answer) -> bool {
    matches!(
        answer,
        Err(AppendError::Unavailable(EngineUnavailable::ShardFailed {
            shard: 0
        }))
    )
}

#[test]
fn a_panicking_shard_fails_its_partitions_closed_and_the_process_keeps_running() {
    let faulty = faulty(EngineConfig::default());
    faulty.append("before", Durability::Durable).wait().unwrap();
    faulty.set_mode(SYNC_PANICS);
    let failed = faulty.append("boom", Durability::Durable).wait();
    assert!(is_shard_failed(&failed), "{failed:?}");
    faulty.set_mode(NORMAL);
    let after = faulty.append("after", Durability::Written).wait();
    assert!(is_shard_failed(&after), "{after:?}");
    let Faulty {
        dir, engine, topic, ..
    } = faulty;
    drop(engine);
    let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
    let reopened = engine.append(&topic, 0, value_batch("reopened"), Durability::Durable);
    assert!(
        reopened.wait().unwrap().durable,
        "the reopened engine serves the partition again"
    );
    engine.close().unwrap();
}

#[test]
fn a_shard_writes_and_answers_while_its_sync_threads_hold_a_sync() {
    let faulty = faulty(through_sync_threads());
    let (engine, topic) = (&faulty.engine, &faulty.topic);
    faulty.set_mode(SYNC_BLOCKS);
    let durable = faulty.answered_later("durable", Durability::Durable);
    faulty.faults.wait_until_blocked();
    // The shard is not in the sync: it writes, answers and serves reads meanwhile.
    let written = faulty
        .append("written", Durability::Written)
        .wait()
        .unwrap();
    assert_eq!((written.first_offset, written.durable), (Offset(1), false));
    let fetched = engine
        .fetch(topic, 0, Offset(0), FetchOptions::default())
        .wait()
        .unwrap();
    assert_eq!(fetched.log_end_offset, Offset(2));
    assert_eq!(fetched.durable_offset, Offset(0), "nothing is synced yet");
    let later = faulty.answered_later("later", Durability::Durable);
    std::thread::sleep(Duration::from_millis(50));
    assert!(!durable.0.load(Ordering::SeqCst) && !later.0.load(Ordering::SeqCst));
    faulty.release();
    assert!(durable.1.join().unwrap().unwrap().durable);
    let later = later.1.join().unwrap().unwrap();
    assert_eq!((later.first_offset, later.durable), (Offset(2), true));
    let described = engine.describe_topic(topic.as_str()).unwrap();
    assert_eq!(described.partitions[0].durable_offset, Offset(3));
    faulty.engine.close().unwrap();
}

/// Every group-commit sync through the sync threads, even a lone one the shard would sync itself.
fn through_sync_threads() -> EngineConfig {
    EngineConfig::default().with_sync_inline_when_idle(false)
}

type Answer = Result<AppendInfo, AppendError>;

/// Whether an append was answered, and the thread that waits for the answer.
type AnsweredLater = (Arc<AtomicBool>, std::thread::JoinHandle<Answer>);

/// Waits for `pending` on a thread of its own: whether it was answered, and the answer.
fn answered_later(pending: Pending<AppendInfo, AppendError>) -> AnsweredLater {
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
    let faulty = faulty(through_sync_threads());
    faulty.set_mode(SYNC_BLOCKS_THEN_FAILS_ONCE);
    let first = faulty.answered_later("first", Durability::Durable);
    faulty.faults.wait_until_blocked();
    // Written while the first sync is held, so queued for the sync thread before it fails.
    let behind = faulty.answered_later("behind", Durability::Durable);
    std::thread::sleep(Duration::from_millis(20));
    faulty.faults.open_gate();
    let first = first.1.join().unwrap();
    assert!(matches!(first, Err(AppendError::Storage(_))), "{first:?}");
    let behind = behind.1.join().unwrap();
    assert!(matches!(behind, Err(AppendError::Storage(_))), "{behind:?}");
    let after = faulty.append("after", Durability::Durable).wait();
    assert!(after.is_err(), "the log stays failed: {after:?}");
}

/// A roll leaves the sync of the segment it seals to the sync threads: the append that rolls is
/// answered while a sync of that segment is held, the seal's sync queues behind the held one (one
/// file is never synced twice at once), and a durable append to the new segment is answered only
/// after both.
#[test]
fn a_roll_answers_at_once_and_its_seal_sync_runs_on_the_sync_threads_before_later_syncs() {
    // Room for one batch: the second append rolls.
    let log_config = LogConfig::default().with_segment_bytes(value_batch("first").len() as u64 + 8);
    let faulty = faulty_with(through_sync_threads(), log_config);
    faulty.set_mode(SYNC_BLOCKS);
    let first = faulty.answered_later("first", Durability::Durable);
    faulty.faults.wait_until_blocked();
    let rolling = faulty.answered_later("second", Durability::Written);
    // A bound for a hung engine, not a timing.
    let rolled = || rolling.0.load(Ordering::SeqCst);
    let rolled_while_held = wait_every(Duration::from_millis(1), Duration::from_secs(30), rolled);
    let durable_after_roll = faulty.answered_later("third", Durability::Durable);
    std::thread::sleep(Duration::from_millis(50));
    let durable_answered_while_held = durable_after_roll.0.load(Ordering::SeqCst);
    faulty.release();
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
    let described = faulty.engine.describe_topic("t").unwrap();
    assert!(described.partitions[0].segment_count >= 2);
    assert!(!faulty.faults.overlapped.load(Ordering::SeqCst));
    faulty.engine.close().unwrap();
}

#[test]
fn a_lone_durable_append_is_synced_by_the_shard_unless_told_to_use_the_sync_threads() {
    for (config, expected) in [
        (EngineConfig::default(), "seglog-shard-0"),
        (through_sync_threads(), "seglog-sync-0."),
    ] {
        let faulty = faulty(config);
        faulty.faults.log_sync_threads.lock().unwrap().clear();
        let info = faulty.append("lone", Durability::Durable).wait().unwrap();
        assert!(info.durable);
        let threads = faulty.faults.log_sync_threads.lock().unwrap().clone();
        assert_eq!(threads.len(), 1, "{threads:?}");
        assert!(threads[0].starts_with(expected), "{threads:?}");
        faulty.engine.close().unwrap();
    }
}
