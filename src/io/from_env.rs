//! For tests and tools only: the storage a test runs on, chosen by `SEGLOG_IO_BACKEND`, and the
//! rule for tests that ask for io_uring where the runner may have none.

use std::sync::Arc;

use super::{IoBackend, Storage, pio, uring};

/// The environment variable that says a test run has no io_uring: with `1`, the part of a test
/// that asks for the ring is skipped ([`crate::testing::skip`]: a `SKIP:` line, and a failure
/// under `CI=true`) instead of failing for want of a ring ([`ring_tests_must_run`]). The
/// library's own backend choice never reads it.
pub const NO_IO_URING_ENV: &str = "SEGLOG_NO_IO_URING";

/// For tests and tools only: whether `part` (a test, or the part of one that asks for the ring)
/// runs on io_uring. `false` when `SEGLOG_NO_IO_URING=1` says this runner has no io_uring, after
/// a `SKIP: <part>: ...` line ([`crate::testing::skip`]); `true` when this process can create a
/// ring.
///
/// # Panics
///
/// When this process cannot create a ring and `SEGLOG_NO_IO_URING=1` does not say so, with the
/// reason the ring could not be created: a test that asks for the ring fails rather than passing
/// without it. Under `CI=true` also where `SEGLOG_NO_IO_URING=1`: a skip fails there.
pub fn ring_tests_must_run(part: &str) -> bool {
    if no_io_uring_declared() {
        say_ring_skipped(part);
        return false;
    }
    require_ring();
    true
}

/// For tests and tools only: the storage `SEGLOG_IO_BACKEND` names (see [`IoBackend::from_env`]).
/// `pio` is positioned I/O; `uring`, and `auto` or unset, ask for the ring under the rule of
/// [`ring_tests_must_run`]: positioned I/O, with a `SKIP:` line once per process, where
/// `SEGLOG_NO_IO_URING=1`.
///
/// # Panics
///
/// When the ring is asked for and this process cannot create one, unless `SEGLOG_NO_IO_URING=1`
/// says so; never falls back to positioned I/O silently. Under `CI=true` also where
/// `SEGLOG_NO_IO_URING=1` (the skip fails there).
pub fn storage_from_env() -> Arc<dyn Storage> {
    if IoBackend::from_env() == IoBackend::PositionedIo {
        return Arc::new(pio::PositionedIo);
    }
    if no_io_uring_declared() {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            say_ring_skipped("storage_from_env (this process runs on positioned I/O)")
        });
        return Arc::new(pio::PositionedIo);
    }
    require_ring();
    Arc::new(uring::UringIo::default())
}

/// Whether `SEGLOG_NO_IO_URING=1`.
fn no_io_uring_declared() -> bool {
    std::env::var(NO_IO_URING_ENV).is_ok_and(|value| value == "1")
}

/// `SKIP: <part>: ...` ([`crate::testing::skip`]: a failure under `CI=true`).
fn say_ring_skipped(part: &str) {
    crate::testing::skip(
        part,
        format_args!("its io_uring part: {NO_IO_URING_ENV}=1 says this runner has no io_uring"),
    );
}

/// Panics with the probe's reason when this process cannot create a ring (for tests and tools).
fn require_ring() {
    if let Err(error) = uring::UringIo::probe() {
        panic!(
            "io_uring is asked for but this process cannot create a ring ({error}); set \
             {NO_IO_URING_ENV}=1 to skip the ring where the runner has no io_uring"
        );
    }
}
