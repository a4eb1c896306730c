//! `compaction`: a compacted topic with small segments and keyed records. The first half of the
//! run appends with no compaction running (the baseline, and the dirty data); the second half
//! appends while another thread calls `Engine::compact` on the topic in a loop. Both halves'
//! foreground append latencies and the MB/s compacted (segment bytes before cleaning, per second
//! spent compacting) come from the same run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use seglog::config::{CleanupPolicy, LogConfig};
use seglog::engine::Engine;
use seglog::types::TopicName;

use super::produce::append_phase;
use super::progress::{MB, Phase};
use super::settings::Settings;

/// `segment.bytes` of the compacted topic: small, so that segments seal and get cleaned.
pub const COMPACTION_SEGMENT_BYTES: u64 = 1024 * 1024;
/// Pause after a compaction that cleaned nothing, before asking again.
const IDLE_PAUSE: Duration = Duration::from_millis(10);

/// What the compacting thread did.
#[derive(Debug, Clone, Default)]
pub struct CompactionFigures {
    /// `Engine::compact` calls.
    pub runs: u64,
    pub segments_cleaned: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Time spent inside `Engine::compact`.
    pub seconds: f64,
}

impl CompactionFigures {
    /// Bytes of the segments cleaned (before cleaning) per second spent compacting.
    pub fn mb_per_s(&self) -> f64 {
        self.bytes_before as f64 / MB / self.seconds.max(1e-9)
    }
}

/// The compacted topic's configuration.
pub fn topic_config() -> LogConfig {
    LogConfig::default()
        .with_cleanup_policy(CleanupPolicy::Compact)
        .with_segment_bytes(COMPACTION_SEGMENT_BYTES)
        .with_segment_index_bytes(super::SMALL_SEGMENT_INDEX_BYTES)
        .with_min_cleanable_dirty_ratio(0.0)
}

pub fn compaction_phases(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
) -> anyhow::Result<(Vec<Phase>, CompactionFigures)> {
    let half = settings.limit.share(0.5);
    let quiet = append_phase(engine, topic, settings, half, settings.ack_name())?;
    let name = if settings.durable_appends() {
        "durable_during_compaction"
    } else {
        "append_during_compaction"
    };
    let stop = AtomicBool::new(false);
    let (busy, figures) = thread::scope(|scope| {
        let compactor = scope.spawn(|| compact_until(engine, topic, &stop));
        let busy = append_phase(engine, topic, settings, half, name);
        stop.store(true, Ordering::Release);
        let figures = compactor
            .join()
            .map_err(|_| anyhow!("the compacting thread panicked"))
            .and_then(|figures| figures);
        (busy, figures)
    });
    Ok((vec![quiet, busy?], figures?))
}

/// Compacts `topic` again and again (at least once) until `stop`.
fn compact_until(
    engine: &Engine,
    topic: &TopicName,
    stop: &AtomicBool,
) -> anyhow::Result<CompactionFigures> {
    let mut figures = CompactionFigures::default();
    loop {
        let started = Instant::now();
        let reports = engine
            .compact(Some(topic.as_str()))
            .context("compaction failed")?;
        figures.seconds += started.elapsed().as_secs_f64();
        figures.runs += 1;
        let mut cleaned = 0;
        for report in reports {
            let outcome = report
                .outcome
                .with_context(|| format!("compaction of {:?} failed", report.topic_partition))?;
            cleaned += outcome.segments_cleaned as u64;
            figures.bytes_before += outcome.bytes_before;
            figures.bytes_after += outcome.bytes_after;
        }
        figures.segments_cleaned += cleaned;
        if stop.load(Ordering::Acquire) {
            return Ok(figures);
        }
        if cleaned == 0 {
            thread::sleep(IDLE_PAUSE);
        }
    }
}
