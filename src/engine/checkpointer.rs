//! The background checkpoints: a thread, named `seglog-checkpointer`, that writes the
//! recovery-point and log-start-offset checkpoints every
//! `EngineConfig::recovery_point_checkpoint_interval_ms` (Kafka's
//! `log.flush.offset.checkpoint.interval.ms`). The recovery point on disk is where recovery
//! starts after a crash: without these writes it stays where the last explicit checkpoint or
//! close left it, and a crash makes the next open re-read every segment written since, and lets
//! it cut a torn-looking tail in any of them (`log/seal_sync.rs`).
//!
//! The thread holds a weak reference: it never keeps the engine open, and stops when the engine
//! closes or its last handle is dropped (its stop channel is dropped with it). Each round asks
//! the shards for their checkpoints without waiting for their syncs in flight (an older recovery
//! point is safe), so it never holds a shard up behind a seal sync.

use std::sync::Weak;
use std::time::Duration;

use crossbeam_channel::{RecvTimeoutError, Sender};

use super::{Engine, Inner};

/// Dropping it stops the thread (at its next wake-up at the latest).
pub(super) type Stop = Sender<()>;

/// Starts the thread for the engine behind `engine`, writing every `interval`.
pub(super) fn spawn(engine: Weak<Inner>, interval: Duration) -> std::io::Result<Stop> {
    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    std::thread::Builder::new()
        .name("seglog-checkpointer".to_owned())
        .spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                let Some(inner) = engine.upgrade() else {
                    return;
                };
                let engine = Engine { inner };
                if let Err(error) = engine.write_shard_checkpoints(false) {
                    log::warn!("background checkpoint failed: {error}");
                }
            }
        })?;
    Ok(stop)
}
