//! Where the engine reads the time: the system clock, or a caller's function (a simulation's
//! clock, so that an inline engine on the simulated disk runs the same way every time).

use std::fmt;
use std::sync::Arc;

use crate::types::TimestampMs;

/// The engine's clock (`EngineConfig::clock`): every "now" the engine's shards and cleaner use
/// (appends' roll rules and `LogAppendTime`, retention, deletion delays, compaction's horizons)
/// comes from it.
#[derive(Clone, Default)]
pub struct Clock {
    source: Option<Arc<dyn Fn() -> TimestampMs + Send + Sync>>,
}

impl Clock {
    /// The system's wall clock (the default).
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock that reads `now` (for example a test's counter).
    pub fn from_fn(now: impl Fn() -> TimestampMs + Send + Sync + 'static) -> Clock {
        Clock {
            source: Some(Arc::new(now)),
        }
    }

    /// The current time.
    pub fn now(&self) -> TimestampMs {
        match &self.source {
            Some(source) => source(),
            None => TimestampMs::now(),
        }
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            Some(_) => f.write_str("Clock::from_fn(..)"),
            None => f.write_str("Clock::system()"),
        }
    }
}

/// Equal when both are the system clock or both read the same function.
impl PartialEq for Clock {
    fn eq(&self, other: &Clock) -> bool {
        match (&self.source, &other.source) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    #[test]
    fn a_clock_from_a_function_reads_it_and_equals_only_its_clones() {
        let counter = Arc::new(AtomicI64::new(5));
        let reading = counter.clone();
        let clock = Clock::from_fn(move || TimestampMs(reading.load(Ordering::Relaxed)));
        assert_eq!(clock.now(), TimestampMs(5));
        counter.store(9, Ordering::Relaxed);
        assert_eq!(clock.clone().now(), TimestampMs(9));
        assert_eq!(clock, clock.clone());
        assert_ne!(clock, Clock::from_fn(|| TimestampMs(9)));
        assert_ne!(clock, Clock::system());
        assert_eq!(Clock::system(), Clock::default());
    }
}
