//! The engine under overload and faults (issue 3: bad input and faults): a full shard queue and
//! too many bytes in flight are typed errors, not unbounded memory; a shard whose thread panics
//! fails its partitions closed with `ShardFailed` while the process and the other shards keep
//! running; the handle is `Clone + Send + Sync`. The faults come from storage hooks that make
//! `fdatasync` block on a gate or panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig};
use seglog::error::{AppendError, EngineUnavailable};
use seglog::format::{BatchBuilder, NewRecord};
use seglog::io::hooked::{HookedStorage, StorageHooks, StorageOp};
use seglog::io::pio::PositionedIo;
use seglog::types::TopicName;

const SYNC_NORMAL: u8 = 0;
const SYNC_BLOCKS: u8 = 1;
const SYNC_PANICS: u8 = 2;

/// What `fdatasync` does, and a gate that blocked syncs wait on.
#[derive(Debug, Default)]
struct Faults {
    sync_mode: AtomicU8,
    /// (a sync is waiting, the gate is open)
    gate: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl Faults {
    fn sync(&self) {
        match self.sync_mode.load(Ordering::SeqCst) {
            SYNC_BLOCKS => {
                let mut gate = self.gate.lock().unwrap();
                gate.0 = true;
                self.changed.notify_all();
                while !gate.1 {
                    gate = self.changed.wait(gate).unwrap();
                }
            }
            SYNC_PANICS => panic!("injected fault: fdatasync panics"),
            _ => {}
        }
    }

    fn wait_until_a_sync_blocks(&self) {
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
    fn before(&self, op: StorageOp, _path: &Path) -> io::Result<()> {
        if op == StorageOp::SyncData {
            self.sync();
        }
        Ok(())
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
    faults.sync_mode.store(SYNC_BLOCKS, Ordering::SeqCst);
    let busy = engine.append(&topic, 0, batch("first"), Durability::Durable);
    faults.wait_until_a_sync_blocks();
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
    faults.sync_mode.store(SYNC_NORMAL, Ordering::SeqCst);
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
    faults.sync_mode.store(SYNC_BLOCKS, Ordering::SeqCst);
    let busy = engine.append(&topic, 0, batch("a"), Durability::Durable);
    faults.wait_until_a_sync_blocks();
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
    faults.sync_mode.store(SYNC_NORMAL, Ordering::SeqCst);
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
    faults.sync_mode.store(SYNC_PANICS, Ordering::SeqCst);
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
    faults.sync_mode.store(SYNC_NORMAL, Ordering::SeqCst);
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
