//! The machine's own cross-core latency, measured beside the lookups: two threads hand one cache
//! line back and forth. An engine that answers on another thread (seglog's shard) pays a few such
//! transfers per request; the crates read on the caller's thread and do not. On shared VMs the
//! figure moves from one minute to the next (the host places the two vCPUs near or far apart),
//! so it is taken right before and right after each hot lookup phase.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Round trips per measurement.
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

/// The guest's count of memory handed back to the host by free page reporting (virtio-balloon).
const REPORTED_KIB: &str = "/sys/module/page_reporting/parameters/reported_kib";
/// The count stands still this long when reporting is done (its passes are ≈ 2 s apart).
const REPORTING_QUIET: Duration = Duration::from_secs(4);
const REPORTING_WAIT_MAX: Duration = Duration::from_secs(120);

/// Waits until memory freed before (the previous engine's removed files, a cache drop) has been
/// handed back to the host, and returns how long that took (`None` where the machine does not
/// report free pages). On this VM each reporting pass stalls every `fdatasync`, so a phase
/// started before it ends is charged for what the engine before it freed (seglog's
/// `seglog bench --settle` waits the same way, BENCHMARKS.md § `seglog bench`).
pub fn settle_page_reporting() -> Option<Duration> {
    let read = || {
        std::fs::read_to_string(REPORTED_KIB)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    };
    let started = Instant::now();
    let mut last = read()?;
    let mut last_change = started;
    while last_change.elapsed() < REPORTING_QUIET && started.elapsed() < REPORTING_WAIT_MAX {
        std::thread::sleep(Duration::from_millis(100));
        let now = read()?;
        if now != last {
            last = now;
            last_change = Instant::now();
        }
    }
    Some(started.elapsed())
}

/// The time, in ms summed over the vCPUs, the host ran something else while this guest's vCPUs
/// had work (`steal` in `/proc/stat`); `None` where the kernel does not count it.
pub fn steal_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks = steal_ticks(stat.lines().next()?)?;
    Some(ticks as f64 * 1000.0 / USER_HZ)
}

/// `/proc/stat`'s unit: `USER_HZ`, 100 per second on x86-64 and arm64 whatever the kernel's own
/// tick rate (`sysconf(_SC_CLK_TCK)`).
const USER_HZ: f64 = 100.0;

/// The `steal` field of `/proc/stat`'s `cpu` line: user, nice, system, idle, iowait, irq,
/// softirq, steal.
fn steal_ticks(cpu_line: &str) -> Option<u64> {
    let mut fields = cpu_line.split_whitespace();
    (fields.next()? == "cpu").then_some(())?;
    fields.nth(7)?.parse().ok()
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
    fn steal_is_the_eighth_figure_of_the_cpu_line() {
        assert_eq!(
            steal_ticks("cpu  801892 0 391555 1733706 92998 0 9299 2220 0 0"),
            Some(2220)
        );
        assert_eq!(
            steal_ticks("cpu0 383140 0 184266 919184 29897 0 538 1084 0 0"),
            None
        );
        assert_eq!(steal_ticks("cpu  1 2 3"), None);
        assert!(steal_ms().is_some_and(|ms| ms >= 0.0), "counted on Linux");
    }

    #[test]
    fn a_round_trip_takes_some_time_and_ends() {
        let round_trip_ns = core_round_trip_ns();
        assert!(round_trip_ns > 0.0 && round_trip_ns.is_finite());
    }
}
