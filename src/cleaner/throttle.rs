//! The cleaner's I/O rate limit (`log.cleaner.io.max.bytes.per.second`, Kafka's `Throttler`):
//! the cleaner reports the bytes it reads and writes, and sleeps whenever the rate over the
//! current window runs ahead of the limit.

use std::time::{Duration, Instant};

/// How long a window runs before the rate is checked.
const CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// A byte-rate limit over windows of `CHECK_INTERVAL`.
#[derive(Debug, Clone)]
pub struct Throttle {
    bytes_per_second: f64,
    window_start: Instant,
    bytes_in_window: u64,
}

impl Throttle {
    /// A limit of `bytes_per_second` (infinite or non-positive: no limit), from `now`.
    pub fn new(bytes_per_second: f64, now: Instant) -> Throttle {
        Throttle {
            bytes_per_second,
            window_start: now,
            bytes_in_window: 0,
        }
    }

    fn is_unlimited(&self) -> bool {
        !self.bytes_per_second.is_finite() || self.bytes_per_second <= 0.0
    }

    /// Counts `bytes` done by `now` and returns how long to pause so that the window's rate stays
    /// at the limit (zero while it does, and until a window has run `CHECK_INTERVAL`).
    pub fn pause_after(&mut self, bytes: u64, now: Instant) -> Duration {
        if self.is_unlimited() {
            return Duration::ZERO;
        }
        self.bytes_in_window = self.bytes_in_window.saturating_add(bytes);
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed < CHECK_INTERVAL {
            return Duration::ZERO;
        }
        let allowed = Duration::from_secs_f64(self.bytes_in_window as f64 / self.bytes_per_second);
        let pause = allowed.saturating_sub(elapsed);
        self.window_start = now + pause;
        self.bytes_in_window = 0;
        pause
    }

    /// Counts `bytes` and sleeps as long as [`Throttle::pause_after`] says.
    pub fn throttle(&mut self, bytes: u64) {
        let pause = self.pause_after(bytes, Instant::now());
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_ahead_of_the_rate_pauses_until_it_is_back_at_the_rate() {
        let start = Instant::now();
        let mut throttle = Throttle::new(1_000_000.0, start);
        assert_eq!(throttle.pause_after(400_000, start), Duration::ZERO);
        let pause = throttle.pause_after(100_000, start + Duration::from_millis(200));
        assert_eq!(
            pause,
            Duration::from_millis(300),
            "500 kB at 1 MB/s is 500 ms"
        );
    }

    #[test]
    fn a_window_at_or_below_the_rate_does_not_pause_and_restarts() {
        let start = Instant::now();
        let mut throttle = Throttle::new(1_000_000.0, start);
        let after = start + Duration::from_millis(500);
        assert_eq!(throttle.pause_after(100_000, after), Duration::ZERO);
        assert_eq!(
            throttle.pause_after(60_000, after + Duration::from_millis(50)),
            Duration::ZERO,
            "a new window is not judged before it has run its interval"
        );
        assert_eq!(
            throttle.pause_after(0, after + Duration::from_millis(100)),
            Duration::ZERO
        );
    }

    #[test]
    fn the_next_window_starts_after_the_pause() {
        let start = Instant::now();
        let mut throttle = Throttle::new(1_000_000.0, start);
        let first = throttle.pause_after(1_000_000, start + Duration::from_millis(100));
        assert_eq!(first, Duration::from_millis(900));
        let resumed = start + Duration::from_secs(1);
        assert_eq!(
            throttle.pause_after(200_000, resumed + Duration::from_millis(100)),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn no_limit_never_pauses() {
        let start = Instant::now();
        for rate in [f64::INFINITY, f64::MAX, 0.0] {
            let mut throttle = Throttle::new(rate, start);
            assert_eq!(
                throttle.pause_after(u64::MAX, start + Duration::from_secs(1)),
                Duration::ZERO
            );
        }
    }
}
