//! The machine's own cross-core latency, measured beside the lookups: two threads hand one cache
//! line back and forth. An engine that answers on another thread (seglog's shard) pays a few such
//! transfers per request; the crates read on the caller's thread and do not. On the VMs measured
//! here the figure moves between ≈ 50 and ≈ 400 ns from one minute to the next (the host places
//! the two vCPUs near or far apart), so it is taken right before and right after each hot lookup
//! phase.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Round trips per measurement: ≈ 2–20 ms.
const ROUND_TRIPS: u64 = 50_000;

/// The mean time, in ns, for one thread to hand a cache line to another and get it back.
pub fn core_round_trip_ns() -> f64 {
    let line = AtomicU64::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for round_trip in 0..ROUND_TRIPS {
                wait_for(&line, 2 * round_trip + 1);
                line.store(2 * round_trip + 2, Ordering::Release);
            }
        });
        let started = Instant::now();
        for round_trip in 0..ROUND_TRIPS {
            line.store(2 * round_trip + 1, Ordering::Release);
            wait_for(&line, 2 * round_trip + 2);
        }
        started.elapsed().as_nanos() as f64 / ROUND_TRIPS as f64
    })
}

fn wait_for(line: &AtomicU64, value: u64) {
    while line.load(Ordering::Acquire) != value {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_takes_some_time_and_ends() {
        let round_trip_ns = core_round_trip_ns();
        assert!(round_trip_ns > 0.0 && round_trip_ns.is_finite());
    }
}
