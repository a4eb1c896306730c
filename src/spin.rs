//! The pause of a polling loop: a thread that expects an answer within microseconds (a shard
//! waiting for requests, a caller for its answer, a read for its completion from the device)
//! checks for it without sleeping, so the answer does not wait for the thread to be woken: a futex
//! wake and, in a VM, a halted vCPU started again by the host, tens of microseconds.

use std::time::{Duration, Instant};

/// How long a polling thread checks without leaving the CPU before it yields between checks: an
/// answer due within microseconds is seen at once rather than after a `sched_yield` round trip
/// through the kernel. Past it, each check yields first, so a thread that has work on this CPU
/// gets it.
const BUSY_POLL: Duration = Duration::from_micros(10);

/// One pause of a polling loop that began at `started`.
pub(crate) fn pause(started: Instant) {
    if started.elapsed() < BUSY_POLL {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}
