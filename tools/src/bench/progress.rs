//! What every phase shares: its stop condition, the counters its threads bump, the progress bar
//! that reads them, and how per-thread figures merge into one phase.

use std::io::{self, IsTerminal};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::anyhow;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;

pub const MB: f64 = 1_000_000.0;

/// When a phase stops.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    Time(Duration),
    Records(u64),
}

impl Limit {
    /// `share` of this limit (at least one record).
    pub fn share(self, share: f64) -> Limit {
        match self {
            Limit::Time(duration) => Limit::Time(duration.mul_f64(share)),
            Limit::Records(records) => Limit::Records(((records as f64 * share) as u64).max(1)),
        }
    }

    pub fn expired(self, started: Instant) -> bool {
        matches!(self, Limit::Time(duration) if started.elapsed() >= duration)
    }
}

/// What one phase measured.
#[derive(Debug)]
pub struct Phase {
    /// `append`, `durable`, `fetch`, `end_to_end`, `append_during_compaction`, ...
    pub name: &'static str,
    /// Records, bytes and seconds, for phases with a throughput: from the phase's start to the
    /// last worker's own end (not to when the progress poll saw it), the final flush included.
    pub throughput: Option<(u64, u64, f64)>,
    /// A non-durable append phase's final `flush_all` (everything it wrote synced), in seconds:
    /// part of `throughput`'s seconds, so that the phase counts the same work as the disk's
    /// buffered write with its final fsync.
    pub final_flush_s: Option<f64>,
    /// The CPU time the whole process (engine, producers, the kernel's io_uring workers) used
    /// during an append phase, user and system, in seconds.
    pub cpu_s: Option<f64>,
    /// One value per operation (append, record sent, fetch, record consumed), in microseconds.
    pub latency: Histogram<u64>,
}

impl Phase {
    pub fn records(&self) -> Option<u64> {
        self.throughput.map(|(records, _, _)| records)
    }

    pub fn records_per_s(&self) -> Option<f64> {
        self.throughput
            .map(|(records, _, seconds)| records as f64 / seconds.max(1e-9))
    }

    /// An append phase's CPU time per GB (10^9 bytes) appended.
    pub fn cpu_seconds_per_gb(&self) -> Option<f64> {
        let (_, bytes, _) = self.throughput?;
        Some(self.cpu_s? / (bytes as f64 / 1e9).max(1e-9))
    }

    pub fn mb_per_s(&self) -> Option<f64> {
        self.throughput
            .map(|(_, bytes, seconds)| bytes as f64 / MB / seconds.max(1e-9))
    }

    /// Operations (the latency samples) per second.
    pub fn operations_per_s(&self) -> Option<f64> {
        self.throughput
            .map(|(_, _, seconds)| self.latency.len() as f64 / seconds.max(1e-9))
    }

    /// Whether this phase acknowledges appends (its MB/s compares with the disk's writes).
    pub fn is_append(&self) -> bool {
        self.name.starts_with("append") || self.name.starts_with("durable")
    }
}

/// Counters the workers bump and the progress bar reads.
#[derive(Debug, Default)]
pub struct Shared {
    /// Records appended (acknowledged).
    pub appended: AtomicU64,
    /// Records (or fetches) claimed by workers: a `--records` run stops claiming at the limit.
    pub claimed: AtomicU64,
    /// Records fetched.
    pub fetched: AtomicU64,
    pub producers_done: AtomicBool,
    /// `--throughput`: the producers' offered load, all together, at most (records per second).
    pub records_per_s_cap: Option<f64>,
    /// Records the capped schedule has handed out: the next batch is due when the schedule
    /// reaches its last record.
    pub scheduled: AtomicU64,
}

impl Shared {
    /// Counters for producers whose offered load is capped at `records_per_s_cap` (None: none).
    pub fn paced(records_per_s_cap: Option<f64>) -> Shared {
        Shared {
            records_per_s_cap,
            ..Shared::default()
        }
    }

    /// [`Shared::claim`] for a producer about to send `records`: when the send is due, or None
    /// once the phase is over. Uncapped, it is due now. Capped, records fall due at the cap's
    /// rate from `started`, all producers together, and a batch when its last record does: the
    /// phase cannot run faster than the cap. A batch due past a time limit is not sent.
    pub fn claim_send(&self, limit: Limit, started: Instant, records: u64) -> Option<Instant> {
        if !self.claim(limit, started, records) {
            return None;
        }
        let Some(records_per_s) = self.records_per_s_cap else {
            return Some(Instant::now());
        };
        let scheduled = self.scheduled.fetch_add(records, Ordering::AcqRel) + records;
        let due = Duration::try_from_secs_f64(scheduled as f64 / records_per_s)
            .ok()
            .and_then(|after| started.checked_add(after))?;
        match limit {
            Limit::Time(duration) if due.saturating_duration_since(started) >= duration => None,
            Limit::Time(_) | Limit::Records(_) => Some(due),
        }
    }

    /// Whether a worker may go on with `records` more; claims them if so.
    pub fn claim(&self, limit: Limit, started: Instant, records: u64) -> bool {
        match limit {
            Limit::Time(duration) => started.elapsed() < duration,
            Limit::Records(total) => self.claimed.fetch_add(records, Ordering::AcqRel) < total,
        }
    }
}

/// Sleeps until `due` (at once if it has passed).
pub fn sleep_until(due: Instant) {
    let ahead = due.saturating_duration_since(Instant::now());
    if !ahead.is_zero() {
        thread::sleep(ahead);
    }
}

/// What one producer or consumer thread measured.
#[derive(Debug)]
pub struct WorkerStats {
    pub records: u64,
    pub bytes: u64,
    pub latency: Histogram<u64>,
    /// When the worker finished its last operation ([`WorkerStats::finished_now`]).
    pub finished: Option<Instant>,
}

impl WorkerStats {
    pub fn new() -> anyhow::Result<WorkerStats> {
        Ok(WorkerStats {
            records: 0,
            bytes: 0,
            latency: new_histogram()?,
            finished: None,
        })
    }

    /// These figures, stamped with the time the worker finished: a phase's rate runs to the
    /// last worker's stamp, not to when [`watch`]'s poll noticed it.
    pub fn finished_now(mut self) -> WorkerStats {
        self.finished = Some(Instant::now());
        self
    }
}

/// Seconds from `started` to the last worker's end (to now for workers that did not stamp it).
/// The CPU time this process has used so far (every thread, user and system), in seconds.
pub fn process_cpu_seconds() -> f64 {
    let time = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    time.tv_sec as f64 + time.tv_nsec as f64 / 1e9
}

pub fn phase_seconds(started: Instant, stats: &[WorkerStats]) -> f64 {
    let last = stats
        .iter()
        .map(|worker| worker.finished.unwrap_or_else(Instant::now))
        .max()
        .unwrap_or_else(Instant::now);
    last.saturating_duration_since(started).as_secs_f64()
}

pub fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).map_err(|error| anyhow!("histogram: {error}"))
}

pub fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

/// A progress bar on stderr, hidden when stderr is not a terminal.
pub fn progress_bar(limit: Limit, what: &str) -> ProgressBar {
    let (length, unit) = match limit {
        Limit::Time(duration) => (
            u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            "ms",
        ),
        Limit::Records(records) => (records, "records"),
    };
    let bar = ProgressBar::new(length.max(1));
    if !io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    let template = format!("{what:>8} [{{bar:40}}] {{pos}}/{{len}} {unit} {{msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Waits for `handles`, updating `bar` every 100 ms from `count` (records so far).
pub fn watch<T>(
    handles: Vec<thread::ScopedJoinHandle<'_, anyhow::Result<T>>>,
    bar: &ProgressBar,
    limit: Limit,
    started: Instant,
    count: impl Fn() -> u64,
) -> anyhow::Result<Vec<T>> {
    while !handles.iter().all(|handle| handle.is_finished()) {
        thread::sleep(PROGRESS_INTERVAL);
        show_progress(bar, limit, started, count());
    }
    bar.finish_and_clear();
    join_all(handles)
}

/// How often [`watch`] updates the progress bar.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// Shows on `bar` how far a phase that started at `started` got, `records` so far.
pub fn show_progress(bar: &ProgressBar, limit: Limit, started: Instant, records: u64) {
    let elapsed = started.elapsed();
    bar.set_position(match limit {
        Limit::Time(_) => u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        Limit::Records(_) => records,
    });
    bar.set_message(format!(
        "{:.0} records/s",
        records as f64 / elapsed.as_secs_f64().max(1e-9)
    ));
}

pub fn join_all<T>(
    handles: Vec<thread::ScopedJoinHandle<'_, anyhow::Result<T>>>,
) -> anyhow::Result<Vec<T>> {
    handles
        .into_iter()
        .map(|handle| {
            handle
                .join()
                .map_err(|_| anyhow!("a benchmark thread panicked"))?
        })
        .collect()
}

pub fn merge(
    name: &'static str,
    stats: &[WorkerStats],
    seconds: Option<f64>,
) -> anyhow::Result<Phase> {
    let mut latency = new_histogram()?;
    let mut records = 0;
    let mut bytes = 0;
    for worker in stats {
        latency
            .add(&worker.latency)
            .map_err(|error| anyhow!("histogram: {error:?}"))?;
        records += worker.records;
        bytes += worker.bytes;
    }
    Ok(Phase {
        name,
        throughput: seconds.map(|seconds| (records, bytes, seconds)),
        final_flush_s: None,
        cpu_s: None,
        latency,
    })
}

/// A phase run as tasks on an async runtime: its clock, CPU count, counters and progress bar,
/// started together.
pub struct TaskPhase {
    name: &'static str,
    pub limit: Limit,
    pub started: Instant,
    pub shared: std::sync::Arc<Shared>,
    bar: ProgressBar,
    cpu_started: f64,
}

impl TaskPhase {
    /// A phase whose producers' offered load is capped at `records_per_s_cap` (None: no cap;
    /// [`Shared::claim_send`]).
    pub fn start(name: &'static str, limit: Limit, records_per_s_cap: Option<f64>) -> TaskPhase {
        TaskPhase {
            name,
            limit,
            bar: progress_bar(limit, name),
            started: Instant::now(),
            cpu_started: process_cpu_seconds(),
            shared: std::sync::Arc::new(Shared::paced(records_per_s_cap)),
        }
    }

    /// Waits for the phase's tasks, updating the bar as [`watch`] does for threads, and merges
    /// their figures, the process's CPU time included.
    pub async fn finish(
        self,
        tasks: Vec<JoinHandle<anyhow::Result<WorkerStats>>>,
    ) -> anyhow::Result<Phase> {
        while !tasks.iter().all(JoinHandle::is_finished) {
            tokio::time::sleep(PROGRESS_INTERVAL).await;
            let done = self.shared.appended.load(Ordering::Relaxed);
            show_progress(&self.bar, self.limit, self.started, done);
        }
        self.bar.finish_and_clear();
        let mut stats = Vec::with_capacity(tasks.len());
        for task in tasks {
            let finished = task.await;
            stats.push(
                finished.map_err(|error| anyhow!("a task of {} failed: {error}", self.name))??,
            );
        }
        let seconds = phase_seconds(self.started, &stats);
        let mut phase = merge(self.name, &stats, Some(seconds))?;
        phase.cpu_s = Some(process_cpu_seconds() - self.cpu_started);
        Ok(phase)
    }
}
