//! Storage with test hooks around every operation, and the waits for what those hooks see.

use std::sync::Arc;
use std::time::{Duration, Instant};

use seglog::io::hooked::{HookedStorage, StorageHooks};
use seglog::io::pio::PositionedIo;
use seglog::io::{Storage, storage_from_env};

/// The storage `SEGLOG_IO_BACKEND` names, with `hooks` around every operation.
pub fn hooked(hooks: Arc<dyn StorageHooks>) -> Arc<dyn Storage> {
    Arc::new(HookedStorage::new(storage_from_env(), hooks))
}

/// Positioned I/O, with `hooks` around every operation.
pub fn hooked_pio(hooks: Arc<dyn StorageHooks>) -> Arc<dyn Storage> {
    Arc::new(HookedStorage::new(Arc::new(PositionedIo), hooks))
}

/// Polls `done` every `every` until it holds or `limit` passed (a bound for something stuck,
/// not a timing); returns whether it held.
pub fn wait_every(every: Duration, limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() >= deadline {
            return done();
        }
        std::thread::sleep(every);
    }
    true
}

/// [`wait_every`] 10 ms.
pub fn wait_until(limit: Duration, done: impl FnMut() -> bool) -> bool {
    wait_every(Duration::from_millis(10), limit, done)
}
