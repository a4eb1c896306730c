//! The inline engine (`EngineConfig::inline`): one shard, run on the threads that call the
//! engine instead of a shard thread of its own. A request is queued as for a threaded shard, then
//! the caller drives the shard ([`Shard::drive_inline`]) until the queue is empty, under a lock
//! (one caller at a time), so its answer is ready when the call returns. The shard's code is the
//! threaded one's; only who runs it differs. No background thread runs: syncs and unlinks happen
//! in the turn (`Syncer::inline`, `FileDeleter::inline`), the cleaner works in `compact` and
//! `scrub` calls, and checkpoints are written by `checkpoint` and `close`. On a simulated disk a
//! run is therefore a deterministic sequence of operations, which the crash model needs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::shard::Shard;

/// An inline engine's shard, shared by its senders.
pub(crate) struct InlineShard {
    /// `None` once the shard closed or panicked.
    shard: Mutex<Option<Shard>>,
    /// Set when the shard stopped serving: later requests are dropped (`ShardFailed`).
    stopped: Arc<AtomicBool>,
}

impl std::fmt::Debug for InlineShard {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("InlineShard")
            .finish_non_exhaustive()
    }
}

impl InlineShard {
    pub(crate) fn new(shard: Shard, stopped: Arc<AtomicBool>) -> InlineShard {
        InlineShard {
            shard: Mutex::new(Some(shard)),
            stopped,
        }
    }

    /// Runs the queued requests on this thread (after any other caller's turn).
    pub(crate) fn drive(&self) {
        let mut guard = self.shard.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(shard) = guard.as_mut() else {
            return;
        };
        let turn = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shard.drive_inline()));
        let closed = match turn {
            Ok(closed) => closed,
            Err(_) => {
                tracing::error!(
                    "the inline shard panicked; its partitions fail with ShardFailed until the engine is reopened"
                );
                true
            }
        };
        if closed {
            guard.take();
            self.stopped.store(true, Ordering::Release);
        }
    }
}

impl Drop for InlineShard {
    /// The engine dropped without `close`: writes in flight land and are answered, as a shard
    /// thread does when its engine goes; no clean shutdown.
    fn drop(&mut self) {
        let shard = self
            .shard
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut shard) = shard {
            shard.finish_writes();
        }
    }
}
