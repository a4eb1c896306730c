//! Waiting, before a measured phase, for the memory the run just freed to be handed back to the
//! host. On a VM whose balloon reports free pages (virtio-balloon's free page reporting; the
//! count is `/sys/module/page_reporting/parameters/reported_kib`), what the guest frees — a
//! removed scratch file's page cache, a cache drop, the previous run's data directory — is
//! reported in passes about 2 s apart for as long as there is some, and while a pass runs every
//! `fdatasync` of the guest stalls (BENCHMARKS.md § `seglog bench`, `--settle`). A phase started
//! then measures the host's reclaim, not the engine: `group-commit`'s p99.9 right after a large
//! free was many times its settled one.
//!
//! [`Settles::wait`] polls the count until it has not moved for [`QUIET_TIME`] (longer than the
//! pause between passes), or gives up after [`WAIT_MAX`]. Where the count does not exist (no such
//! balloon, or not Linux) it returns at once.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

const REPORTED_KIB: &str = "/sys/module/page_reporting/parameters/reported_kib";
/// The count must stand still this long: the reporting worker waits 2 s between passes
/// (`PAGE_REPORTING_DELAY`), and a pass itself takes a while.
const QUIET_TIME: Duration = Duration::from_secs(4);
/// Freeing the largest scratch file (a quarter of the free space) takes about this long to
/// report here; past it the phase starts anyway and the wait says so.
const WAIT_MAX: Duration = Duration::from_secs(120);
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// One wait, before the named stage of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Settle {
    /// `disk`, `bare producers`, `engine`, `cold reads`.
    pub before: &'static str,
    pub waited: Duration,
    /// What the guest reported to the host during the wait.
    pub reported_kib: u64,
    /// `false` when the count still moved at [`WAIT_MAX`].
    pub settled: bool,
}

/// The run's waits, in order; empty where free page reporting does not exist or without `--settle`.
#[derive(Debug)]
pub struct Settles {
    pub waits: Vec<Settle>,
    pub enabled: bool,
}

impl Settles {
    pub fn new(enabled: bool) -> Settles {
        Settles {
            waits: Vec::new(),
            enabled,
        }
    }

    /// Waits for the reporting to settle before `before`, and records how long it took.
    pub fn wait(&mut self, before: &'static str) {
        if !self.enabled {
            return;
        }
        let path = Path::new(REPORTED_KIB);
        let read = || fs::read_to_string(path).ok()?.trim().parse::<u64>().ok();
        if let Some(settle) = wait_until_quiet(before, read, QUIET_TIME, WAIT_MAX, POLL_INTERVAL) {
            self.waits.push(settle);
        }
    }
}

/// Polls `read` until its value has not changed for `quiet`, or `max` passed; `None` when it
/// cannot be read at all.
fn wait_until_quiet(
    before: &'static str,
    mut read: impl FnMut() -> Option<u64>,
    quiet: Duration,
    max: Duration,
    poll: Duration,
) -> Option<Settle> {
    let started = Instant::now();
    let first = read()?;
    let mut last = first;
    let mut last_change = started;
    loop {
        let now = Instant::now();
        let settled = now.duration_since(last_change) >= quiet;
        if settled || now.duration_since(started) >= max {
            return Some(Settle {
                before,
                waited: now.duration_since(started),
                reported_kib: last.saturating_sub(first),
                settled,
            });
        }
        thread::sleep(poll);
        let value = read()?;
        if value != last {
            last = value;
            last_change = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_count_that_stands_still_settles_after_the_quiet_time() {
        let settle = wait_until_quiet("engine", || Some(7), 20 * MS, 1000 * MS, MS).unwrap();
        assert!(settle.settled);
        assert_eq!(settle.reported_kib, 0);
        assert!(settle.waited >= 20 * MS, "{:?}", settle.waited);
    }

    #[test]
    fn a_moving_count_is_waited_for_and_what_it_reported_is_counted() {
        let mut values = [0u64, 0, 1024, 1024, 4096].into_iter();
        let mut last = 0;
        let read = || {
            last = values.next().unwrap_or(last);
            Some(last)
        };
        let settle = wait_until_quiet("engine", read, 20 * MS, 1000 * MS, MS).unwrap();
        assert!(settle.settled);
        assert_eq!(settle.reported_kib, 4096);
    }

    #[test]
    fn a_count_that_never_stops_gives_up_at_the_maximum() {
        let mut value = 0;
        let read = || {
            value += 1;
            Some(value)
        };
        let settle = wait_until_quiet("engine", read, 50 * MS, 30 * MS, MS).unwrap();
        assert!(!settle.settled);
        assert!(settle.reported_kib > 0);
        assert!(settle.waited >= 30 * MS);
    }

    #[test]
    fn no_count_means_no_wait() {
        assert_eq!(
            wait_until_quiet("engine", || None, 20 * MS, 1000 * MS, MS),
            None
        );
    }
}
