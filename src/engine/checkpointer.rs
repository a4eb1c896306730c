//! The background checkpoints: a thread, named `seglog-checkpointer`, that writes the
//! recovery-point and log-start-offset checkpoints every
//! `EngineConfig::recovery_point_checkpoint_interval_ms` (Kafka's
//! `log.flush.offset.checkpoint.interval.ms`). The recovery point on disk is where recovery
//! starts after a crash: without these writes it stays where the last explicit checkpoint or
//! close left it, and a crash makes the next open re-read every segment written since, and lets
//! it cut a torn-looking tail in any of them (`log/seal_sync.rs`).
//!
//! The thread holds the engine by a weak reference, upgraded for the length of a round. The
//! user's last handle stops and joins it before letting go of the engine (`Engine::user`), so
//! dropping that handle releases the engine at once. Each round asks the shards for their
//! checkpoints without waiting for their syncs in flight (an older recovery point is safe), so it
//! never holds a shard up behind a seal sync.

use std::sync::Weak;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{RecvTimeoutError, Sender};

use super::{Engine, Inner};

/// The running thread.
#[derive(Debug)]
pub(super) struct Checkpointer {
    /// Dropping it stops the thread at its next wake-up or as soon as its round ends.
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Checkpointer {
    /// Starts the thread for the engine behind `engine`, writing every `interval`.
    pub(super) fn spawn(engine: Weak<Inner>, interval: Duration) -> std::io::Result<Checkpointer> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("seglog-checkpointer".to_owned())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    let Some(inner) = engine.upgrade() else {
                        return;
                    };
                    let engine = Engine { user: None, inner };
                    if let Err(error) = engine.write_shard_checkpoints(false) {
                        tracing::warn!("background checkpoint failed: {error}");
                    }
                }
            })?;
        Ok(Checkpointer { stop, thread })
    }

    /// Stops the thread and waits for it (its round, if one runs, ends first).
    pub(super) fn stop_and_join(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}
