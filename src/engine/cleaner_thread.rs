//! The cleaner thread: compaction off the shards' cores and below their priority.
//!
//! One thread per engine, named `seglog-cleaner`, scheduled `SCHED_IDLE` (nice 19 where the
//! policy cannot be set) with the idle I/O class, pinned to a configurable core, with its own
//! io_uring (rings are per thread) and an I/O rate limit (`log.cleaner.io.max.bytes.per.second`).
//! Every `log.cleaner.backoff.ms` it asks the shards for their open compacted logs' sealed
//! segments ([`Request::CleanableLogs`]), adds the closed ones whose files show enough dirty
//! bytes (the shards open those), picks the dirtiest log at or above its
//! `min.cleanable.dirty.ratio`, and cleans it: it reads the sealed segments and writes the
//! `.cleaned` files itself, and sends each cleaned group to the owning shard, which performs the
//! swap ([`Request::SwapCleaned`]) — the only step that changes the log, so partitions keep a
//! single writer. `Engine::compact` runs on the same thread, for every compacted partition.
//!
//! Every `log.retention.check.interval.ms` it reads every partition's files for segments that
//! retention would delete and hands the shards those partitions ([`Request::RetainPartitions`]):
//! a shard opens only a partition with work to do.
//!
//! The same thread runs the scrubber (`cleaner::scrub`) every `scrub_interval_ms` over the open
//! logs' sealed segments, and on request (`Engine::scrub`): CRCs and offset continuity checked,
//! corruption reported in [`CleanerStats::scrub`] and the log, nothing changed.
//!
//! A failure on one partition is logged, counted ([`CleanerStats`]) and retried after a backoff
//! that doubles with each failure; the other partitions are cleaned meanwhile. Progress (each
//! log's first dirty offset) is kept in a map the engine writes to `cleaner-offset-checkpoint`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};

use super::clock::Clock;
use super::pending::Reply;
use super::shard::{CleanableEntry, CleanableSelection, PartitionCompaction, Request};
use super::topic_registry::TopicRegistry;
use crate::cleaner::batch_cleaning::CleaningCandidate;
use crate::cleaner::disk_view::{clean_and_dirty_bytes, retention_may_be_due};
use crate::cleaner::log_cleaner::{CleanableLog, CompactionOutcome, LogCleaner, SwapOutcome};
use crate::cleaner::offset_map::OffsetMap;
use crate::cleaner::scrub::{CorruptSegment, ScrubOutcome, scrub_log};
use crate::cleaner::throttle::Throttle;
use crate::config::{CleanupPolicy, LogConfig};
use crate::error::{EngineUnavailable, FlushError, StorageError};
use crate::format::file_name::partition_dir_name;
use crate::io::Storage;
use crate::metrics::CleanerMetrics;
use crate::types::{Offset, TopicName, TopicPartition};

/// The longest wait before a failed partition is tried again.
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(600);
/// How long the cleaner waits before trying a full shard queue again.
const FULL_QUEUE_PAUSE: Duration = Duration::from_millis(1);

/// The cleaner's settings (from `EngineConfig`).
#[derive(Debug, Clone)]
pub(crate) struct CleanerSettings {
    /// `log.cleaner.backoff.ms`.
    pub backoff: Duration,
    /// `log.cleaner.io.max.bytes.per.second`.
    pub io_max_bytes_per_second: f64,
    /// How often the scrubber re-checks every open log's sealed segments (`None`: never).
    pub scrub_interval: Option<Duration>,
    /// The core the thread is pinned to, if any.
    pub core: Option<core_affinity::CoreId>,
    /// `log.retention.check.interval.ms`: how often every partition's files are checked for
    /// segments retention would delete.
    pub retention_interval: Duration,
    /// `EngineConfig::clock`.
    pub clock: Clock,
}

/// The data directory as the cleaner reads it: where the partitions are, and their configs.
pub(crate) struct CleanerView {
    pub root: PathBuf,
    pub topics: Arc<RwLock<TopicRegistry>>,
}

/// What the cleaner has done since the engine opened, and which partitions it cannot clean.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanerStats {
    /// Logs cleaned (rounds that completed).
    pub logs_cleaned: u64,
    /// Sealed segments rewritten.
    pub segments_cleaned: u64,
    /// Bytes of the segments rewritten.
    pub bytes_before: u64,
    /// Bytes of the segments that replaced them.
    pub bytes_after: u64,
    /// Records in the segments rewritten.
    pub records_before: u64,
    /// How many of those records were kept.
    pub records_kept: u64,
    /// Cleanings that failed, over all partitions.
    pub failures: u64,
    /// Partitions whose last cleaning failed: Kafka's "uncleanable partitions".
    pub uncleanable: Vec<UncleanablePartition>,
    /// Whether the thread runs at the idle scheduling class (else at nice 19, else normal).
    pub priority: CleanerPriority,
    /// The thread's kernel id (its directory under `/proc/self/task`), once it started.
    pub thread_id: Option<u32>,
    /// What the scrubber has checked and found.
    pub scrub: ScrubStats,
}

/// The scrubber's totals since the engine opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrubStats {
    /// Passes over every open log.
    pub passes: u64,
    /// Sealed segments read and checked.
    pub segments_scrubbed: u64,
    /// Bytes of `.log` read.
    pub bytes_scrubbed: u64,
    /// Corrupt segments found, each once (the latest finding).
    pub corrupt: Vec<(TopicPartition, CorruptSegment)>,
}

/// A partition whose last cleaning failed, and when it is tried again.
#[derive(Debug, Clone, PartialEq)]
pub struct UncleanablePartition {
    /// The partition.
    pub topic_partition: TopicPartition,
    /// Failures in a row.
    pub failures: u32,
    /// The last cleaning's error, as one line.
    pub last_error: String,
    /// Time until the next attempt, as of the cleaner's last update of these stats (after each
    /// cleaning).
    pub retry_in: Duration,
}

/// The scheduling the cleaner thread obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CleanerPriority {
    /// Not started yet.
    #[default]
    Unknown,
    /// `SCHED_IDLE`.
    Idle,
    /// `SCHED_OTHER` at nice 19.
    Nice19,
    /// Neither could be set: normal priority.
    Normal,
}

/// A request to the cleaner.
pub(crate) enum CleanerRequest {
    /// Compact every partition of the compacted topics (of `topic`, or all) now.
    Compact {
        topic: Option<TopicName>,
        reply: Reply<Vec<PartitionCompaction>, FlushError>,
    },
    /// Scrub every partition (of `topic`, or all) now.
    Scrub {
        topic: Option<TopicName>,
        reply: Reply<Vec<(TopicPartition, ScrubOutcome)>, FlushError>,
    },
}

/// A shard as the cleaner reaches it.
#[derive(Clone)]
pub(crate) struct ShardLink {
    pub sender: super::wake::ShardSender,
    pub stopped: Arc<AtomicBool>,
    pub exit_drain: Receiver<Request>,
}

/// The engine's handle on the cleaner thread (or, for an inline engine, on the cleaner that runs
/// in the caller's `compact` and `scrub` calls).
pub(crate) struct CleanerHandle {
    sender: Mutex<Option<Sender<CleanerRequest>>>,
    /// An inline engine's cleaner and its dedupe map; `None` once stopped.
    inline: Mutex<Option<(Cleaner, OffsetMap)>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    pub stats: Arc<Mutex<CleanerStats>>,
    /// Each compacted partition's first dirty offset, for `cleaner-offset-checkpoint`.
    pub first_dirty_offsets: Arc<Mutex<BTreeMap<TopicPartition, Offset>>>,
}

impl CleanerHandle {
    /// Starts the cleaner thread with `map` as its dedupe buffer (one for the thread's life, as
    /// Kafka's cleaner threads keep theirs). `inline` (an inline engine's): no thread; `compact`
    /// and `scrub` run on their caller's thread, and nothing runs in the background.
    pub(crate) fn start(
        map: OffsetMap,
        settings: CleanerSettings,
        storage: Arc<dyn Storage>,
        (view, shards): (CleanerView, Vec<ShardLink>),
        (first_dirty_offsets, inline): (BTreeMap<TopicPartition, Offset>, bool),
    ) -> std::io::Result<CleanerHandle> {
        let (sender, requests) = crossbeam_channel::unbounded();
        let (cleaner, handle) = CleanerHandle::new(
            settings,
            storage,
            (view, shards),
            first_dirty_offsets,
            requests,
        );
        if inline {
            *handle.inline.lock().unwrap_or_else(PoisonError::into_inner) = Some((cleaner, map));
            return Ok(handle);
        }
        let thread = std::thread::Builder::new()
            .name("seglog-cleaner".to_owned())
            .spawn(move || cleaner.run(map))?;
        *handle.sender.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
        *handle.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        Ok(handle)
    }

    fn new(
        settings: CleanerSettings,
        storage: Arc<dyn Storage>,
        (view, shards): (CleanerView, Vec<ShardLink>),
        first_dirty_offsets: BTreeMap<TopicPartition, Offset>,
        requests: Receiver<CleanerRequest>,
    ) -> (Cleaner, CleanerHandle) {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(CleanerStats::default()));
        let first_dirty_offsets = Arc::new(Mutex::new(first_dirty_offsets));
        let cleaner = Cleaner {
            settings,
            storage,
            view,
            shards,
            requests,
            stop: stop.clone(),
            stats: stats.clone(),
            first_dirty_offsets: first_dirty_offsets.clone(),
            retries: BTreeMap::new(),
            metrics: CleanerMetrics::new(),
        };
        let handle = CleanerHandle {
            sender: Mutex::new(None),
            inline: Mutex::new(None),
            stop,
            thread: Mutex::new(None),
            stats,
            first_dirty_offsets,
        };
        (cleaner, handle)
    }

    /// Sends a request and waits for its answer (`Closed` if the cleaner stopped).
    pub(crate) fn call<T>(
        &self,
        request: impl FnOnce(Reply<T, FlushError>) -> CleanerRequest,
    ) -> Result<T, FlushError> {
        let (reply, receiver) = oneshot::channel();
        let mut inline = self.inline.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((cleaner, map)) = inline.as_mut() {
            cleaner.handle(request(reply), map);
        } else {
            drop(inline);
            let sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
            let sender = sender.as_ref().ok_or(EngineUnavailable::Closed)?;
            sender
                .send(request(reply))
                .map_err(|_| EngineUnavailable::Closed)?;
        }
        futures_executor::block_on(receiver).map_err(|_| EngineUnavailable::Closed)?
    }

    /// Stops the thread (a cleaning under way stops at its next group) and waits for it.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.inline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    /// A copy of the stats as the cleaner thread last updated them.
    pub(crate) fn stats(&self) -> CleanerStats {
        self.stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A partition whose cleaning failed: when it may be tried again.
struct Retry {
    failures: u32,
    at: Instant,
    last_error: String,
}

struct Cleaner {
    settings: CleanerSettings,
    storage: Arc<dyn Storage>,
    view: CleanerView,
    shards: Vec<ShardLink>,
    requests: Receiver<CleanerRequest>,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<CleanerStats>>,
    first_dirty_offsets: Arc<Mutex<BTreeMap<TopicPartition, Offset>>>,
    retries: BTreeMap<TopicPartition, Retry>,
    metrics: CleanerMetrics,
}

/// Why the cleaner could not get an answer from a shard.
#[derive(Debug)]
enum CallError {
    ShardFailed(usize),
    Stopping,
}

impl Cleaner {
    fn run(mut self, mut map: OffsetMap) {
        let priority = lower_priority();
        lower_io_priority();
        if let Some(core) = self.settings.core {
            super::pin_current_thread(core);
        }
        let thread_id = current_thread_id();
        self.update_stats(|stats| {
            stats.priority = priority;
            stats.thread_id = thread_id;
        });
        let mut next_check = Instant::now() + self.settings.backoff;
        let mut next_retention = Instant::now() + self.settings.retention_interval;
        let mut next_scrub = self
            .settings
            .scrub_interval
            .map(|every| Instant::now() + every);
        while !self.stopping() {
            let due = next_scrub.map_or(next_check, |scrub| scrub.min(next_check));
            let due = due.min(next_retention);
            match self
                .requests
                .recv_timeout(due.saturating_duration_since(Instant::now()))
            {
                Ok(request) => self.handle(request, &mut map),
                Err(RecvTimeoutError::Timeout) => {
                    if Instant::now() >= next_retention {
                        self.find_retention_due();
                        next_retention = Instant::now() + self.settings.retention_interval;
                    }
                    if Instant::now() >= next_check {
                        self.clean_dirty_logs(&mut map);
                        next_check = Instant::now() + self.settings.backoff;
                    }
                    if let (Some(due), Some(every)) = (next_scrub, self.settings.scrub_interval)
                        && Instant::now() >= due
                    {
                        let _ = self.scrub(CleanableSelection::Open);
                        next_scrub = Some(Instant::now() + every);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Answers a request to compact or scrub now.
    fn handle(&mut self, request: CleanerRequest, map: &mut OffsetMap) {
        match request {
            CleanerRequest::Compact { topic, reply } => {
                let _ = reply.send(self.compact_all(topic, map));
            }
            CleanerRequest::Scrub { topic, reply } => {
                let _ = reply.send(self.scrub(CleanableSelection::Owned { topic }));
            }
        }
    }

    /// Scrubs the logs of `selection` (every cleanup policy), recording what it found.
    fn scrub(
        &mut self,
        selection: CleanableSelection,
    ) -> Result<Vec<(TopicPartition, ScrubOutcome)>, FlushError> {
        let logs = self.logs(selection, false).map_err(call_error)?;
        let storage = self.storage.clone();
        let mut throttle = Throttle::new(self.settings.io_max_bytes_per_second, Instant::now());
        let mut count_bytes = |bytes| throttle.throttle(bytes);
        let mut outcomes = Vec::with_capacity(logs.len());
        for (tp, log) in logs {
            if self.stopping() {
                break;
            }
            let Ok(log) = log else {
                continue;
            };
            let outcome = scrub_log(storage.as_ref(), &log, &mut count_bytes);
            for corrupt in &outcome.corrupt {
                tracing::error!("scrubber: {tp}: {}", corrupt.reason);
            }
            let corrupt = outcome.corrupt.len() as u64;
            self.metrics.scrub_corrupt_segments.increment(corrupt);
            outcomes.push((tp, outcome));
        }
        self.update_stats(|stats| {
            stats.scrub.passes += 1;
            for (tp, outcome) in &outcomes {
                stats.scrub.segments_scrubbed += outcome.segments_scrubbed;
                stats.scrub.bytes_scrubbed += outcome.bytes_scrubbed;
                for corrupt in &outcome.corrupt {
                    stats.scrub.corrupt.retain(|(seen_tp, seen)| {
                        seen_tp != tp || seen.base_offset != corrupt.base_offset
                    });
                    stats.scrub.corrupt.push((tp.clone(), corrupt.clone()));
                }
            }
        });
        Ok(outcomes)
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Sends the shards the partitions whose files show segments retention would delete: the
    /// shards open only those.
    fn find_retention_due(&self) {
        let now = self.settings.clock.now();
        let due: Vec<TopicPartition> = self
            .partitions_where(|config| config.cleanup_policy != CleanupPolicy::Compact)
            .into_iter()
            .filter(|(tp, config)| {
                let dir = self.view.root.join(partition_dir_name(tp));
                // A partition whose files cannot be read is the shard's to report.
                retention_may_be_due(self.storage.as_ref(), &dir, config, now).unwrap_or(true)
            })
            .map(|(tp, _)| tp)
            .collect();
        if due.is_empty() {
            return;
        }
        // A full or stopped shard misses this pass; the next one finds the partitions again.
        for shard in &self.shards {
            let _ = shard
                .sender
                .try_send(Request::RetainPartitions { tps: due.clone() });
        }
    }

    /// Every partition whose topic's config satisfies `wanted`, with that config.
    fn partitions_where(
        &self,
        wanted: impl Fn(&LogConfig) -> bool,
    ) -> Vec<(TopicPartition, LogConfig)> {
        let topics = self
            .view
            .topics
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        topics
            .partitions()
            .filter_map(|tp| {
                let config = topics.partition_config(&tp)?;
                wanted(config).then(|| (tp, config.clone()))
            })
            .collect()
    }

    /// The compacted partitions not in `open` whose files show a dirty share at or above their
    /// `min.cleanable.dirty.ratio` (an upper bound: the shard's facts decide).
    fn dirty_closed_partitions(&self, open: &[TopicPartition]) -> Vec<TopicPartition> {
        self.partitions_where(|config| config.cleanup_policy.compacts())
            .into_iter()
            .filter(|(tp, _)| !open.contains(tp) && self.may_retry(tp))
            .filter(|(tp, config)| {
                let dir = self.view.root.join(partition_dir_name(tp));
                let first_dirty = self.first_dirty_offset(tp);
                clean_and_dirty_bytes(self.storage.as_ref(), &dir, first_dirty).is_ok_and(
                    |(clean_bytes, dirty_bytes)| {
                        CleaningCandidate {
                            id: (),
                            clean_bytes,
                            dirty_bytes,
                            min_cleanable_ratio: config.min_cleanable_dirty_ratio,
                        }
                        .is_cleanable()
                    },
                )
            })
            .map(|(tp, _)| tp)
            .collect()
    }

    /// Cleans, dirtiest first, each compacted log whose dirty share reached its
    /// `min.cleanable.dirty.ratio`, skipping partitions waiting out a failure's backoff: the open
    /// ones from the shards' facts, the closed ones first estimated from their files (the shards
    /// open only those that may need it).
    fn clean_dirty_logs(&mut self, map: &mut OffsetMap) {
        let Ok(mut logs) = self.cleanable_logs(CleanableSelection::Open) else {
            return;
        };
        let open: Vec<TopicPartition> = logs.iter().map(|(tp, _)| tp.clone()).collect();
        let closed = self.dirty_closed_partitions(&open);
        if !closed.is_empty() {
            let Ok(reopened) = self.cleanable_logs(CleanableSelection::Listed(closed)) else {
                return;
            };
            logs.extend(reopened);
        }
        let now = self.settings.clock.now();
        let mut dirtiest: f64 = 0.0;
        let mut candidates: Vec<(TopicPartition, CleanableLog, f64)> = logs
            .into_iter()
            .filter_map(|(tp, log)| log.ok().map(|log| (tp, log)))
            .filter(|(tp, _)| self.may_retry(tp))
            .filter_map(|(tp, log)| {
                let first_dirty = self.first_dirty_offset(&tp);
                let (clean_bytes, dirty_bytes) = log.cleanable_bytes(first_dirty, now);
                let candidate = CleaningCandidate {
                    id: (),
                    clean_bytes,
                    dirty_bytes,
                    min_cleanable_ratio: log.config.min_cleanable_dirty_ratio,
                };
                dirtiest = dirtiest.max(candidate.ratio());
                candidate
                    .is_cleanable()
                    .then(|| (tp, log, candidate.ratio()))
            })
            .collect();
        self.metrics.dirty_ratio.set(dirtiest);
        candidates.sort_by(|a, b| b.2.total_cmp(&a.2));
        for (tp, log, _) in candidates {
            if self.stopping() {
                return;
            }
            let _ = self.clean_log(&tp, log, map);
        }
    }

    /// Compacts every compacted partition (of `topic`, or all), opening those not open.
    fn compact_all(
        &mut self,
        topic: Option<TopicName>,
        map: &mut OffsetMap,
    ) -> Result<Vec<PartitionCompaction>, FlushError> {
        let logs = self
            .cleanable_logs(CleanableSelection::Owned { topic })
            .map_err(call_error)?;
        let mut reports = Vec::with_capacity(logs.len());
        for (tp, log) in logs {
            let outcome = match log {
                Ok(log) => self.clean_log(&tp, log, map),
                Err(error) => Err(error),
            };
            reports.push(PartitionCompaction {
                topic_partition: tp,
                outcome,
            });
        }
        Ok(reports)
    }

    /// Cleans one log in rounds (each with the log's fresh segments) while the map fills, records
    /// its progress, and notes a failure for the retry backoff.
    #[tracing::instrument(name = "compaction", level = "info", skip_all,
        fields(topic = %tp.topic, partition = tp.partition))]
    fn clean_log(
        &mut self,
        tp: &TopicPartition,
        log: CleanableLog,
        map: &mut OffsetMap,
    ) -> Result<CompactionOutcome, StorageError> {
        let first_dirty = self.first_dirty_offset(tp);
        let result = self.clean_in_rounds(tp, log, map, first_dirty);
        match &result {
            Ok(outcome) => {
                self.metrics.read_bytes.increment(outcome.bytes_before);
                self.metrics.written_bytes.increment(outcome.bytes_after);
                self.retries.remove(tp);
                if !outcome.stale {
                    self.first_dirty_offsets
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(tp.clone(), outcome.first_dirty_offset);
                }
                self.update_stats(|stats| {
                    stats.logs_cleaned += u64::from(!outcome.stale);
                    stats.segments_cleaned += outcome.segments_cleaned as u64;
                    stats.bytes_before += outcome.bytes_before;
                    stats.bytes_after += outcome.bytes_after;
                    stats.records_before += outcome.records_before;
                    stats.records_kept += outcome.records_kept;
                });
            }
            Err(error) => self.note_failure(tp, error),
        }
        self.publish_retries();
        result
    }

    fn clean_in_rounds(
        &mut self,
        tp: &TopicPartition,
        mut log: CleanableLog,
        map: &mut OffsetMap,
        first_dirty: Offset,
    ) -> Result<CompactionOutcome, StorageError> {
        let mut total = CompactionOutcome {
            first_dirty_offset: first_dirty,
            ..CompactionOutcome::default()
        };
        let mut throttle = Throttle::new(self.settings.io_max_bytes_per_second, Instant::now());
        loop {
            let round = self.clean_round(tp, &log, map, &mut throttle, total.first_dirty_offset)?;
            let progressed = round.first_dirty_offset > total.first_dirty_offset;
            total.segments_cleaned += round.segments_cleaned;
            total.segments_written += round.segments_written;
            total.bytes_before += round.bytes_before;
            total.bytes_after += round.bytes_after;
            total.records_before += round.records_before;
            total.records_kept += round.records_kept;
            total.map_full = round.map_full;
            total.stale = round.stale;
            if round.stale || !round.map_full || !progressed {
                if !round.stale {
                    total.first_dirty_offset = round.first_dirty_offset;
                }
                return Ok(total);
            }
            total.first_dirty_offset = round.first_dirty_offset;
            match self.cleanable_logs(CleanableSelection::One(tp.clone())) {
                Ok(mut logs) => match logs.pop() {
                    Some((_, fresh)) => log = fresh?,
                    None => return Ok(total),
                },
                Err(_) => return Ok(total),
            }
        }
    }

    fn clean_round(
        &mut self,
        tp: &TopicPartition,
        log: &CleanableLog,
        map: &mut OffsetMap,
        throttle: &mut Throttle,
        first_dirty: Offset,
    ) -> Result<CompactionOutcome, StorageError> {
        let storage = self.storage.clone();
        let mut count_bytes = |bytes| throttle.throttle(bytes);
        let mut cleaner = LogCleaner {
            storage: storage.as_ref(),
            map,
            throttle: &mut count_bytes,
        };
        cleaner.clean(log, first_dirty, self.settings.clock.now(), |group| {
            if self.stopping() {
                return Ok(SwapOutcome::Stale);
            }
            let group = group.clone();
            let tp = tp.clone();
            let request = |reply| Request::SwapCleaned { tp, group, reply };
            match self.call(shard_of(&self.shards, log), request) {
                Ok(result) => result,
                Err(_) => Ok(SwapOutcome::Stale),
            }
        })
    }

    /// Every shard's compacted logs for `selection`.
    fn cleanable_logs(
        &self,
        selection: CleanableSelection,
    ) -> Result<Vec<CleanableEntry>, CallError> {
        self.logs(selection, true)
    }

    /// Every shard's logs for `selection` (only the compacted ones if `compacted_only`).
    fn logs(
        &self,
        selection: CleanableSelection,
        compacted_only: bool,
    ) -> Result<Vec<CleanableEntry>, CallError> {
        let mut logs = Vec::new();
        for shard in 0..self.shards.len() {
            let selection = selection.clone();
            let request = |reply| Request::CleanableLogs {
                selection,
                compacted_only,
                reply,
            };
            match self.call(shard, request)? {
                Ok(found) => logs.extend(found),
                Err(_) => return Err(CallError::ShardFailed(shard)),
            }
        }
        Ok(logs)
    }

    /// Sends a request to `shard` and waits for its answer, retrying while its queue is full.
    fn call<T, E>(
        &self,
        shard: usize,
        request: impl FnOnce(Reply<T, E>) -> Request,
    ) -> Result<Result<T, E>, CallError> {
        let link = self
            .shards
            .get(shard)
            .ok_or(CallError::ShardFailed(shard))?;
        let (reply, receiver) = oneshot::channel();
        let mut request = request(reply);
        loop {
            if link.stopped.load(Ordering::Acquire) {
                return Err(CallError::ShardFailed(shard));
            }
            match link.sender.try_send(request) {
                Ok(()) => break,
                Err(TrySendError::Full(returned)) => {
                    if self.stopping() {
                        return Err(CallError::Stopping);
                    }
                    request = returned;
                    std::thread::sleep(FULL_QUEUE_PAUSE);
                }
                Err(TrySendError::Disconnected(_)) => return Err(CallError::ShardFailed(shard)),
            }
        }
        // A shard that stopped meanwhile never reads the request: drop it, cancelling the reply.
        if link.stopped.load(Ordering::Acquire) {
            link.exit_drain.try_iter().for_each(drop);
        }
        futures_executor::block_on(receiver).map_err(|_| CallError::ShardFailed(shard))
    }

    fn first_dirty_offset(&self, tp: &TopicPartition) -> Offset {
        self.first_dirty_offsets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tp)
            .copied()
            .unwrap_or_default()
    }

    fn may_retry(&self, tp: &TopicPartition) -> bool {
        self.retries
            .get(tp)
            .is_none_or(|retry| Instant::now() >= retry.at)
    }

    fn note_failure(&mut self, tp: &TopicPartition, error: &StorageError) {
        tracing::error!("cleaner: compaction of {tp} failed: {error}");
        let failures = self.retries.get(tp).map_or(1, |retry| retry.failures + 1);
        let backoff = self
            .settings
            .backoff
            .saturating_mul(1 << failures.saturating_sub(1).min(16))
            .min(RETRY_BACKOFF_MAX);
        self.retries.insert(
            tp.clone(),
            Retry {
                failures,
                at: Instant::now() + backoff,
                last_error: error.to_string(),
            },
        );
        self.update_stats(|stats| stats.failures += 1);
    }

    fn publish_retries(&self) {
        let now = Instant::now();
        let uncleanable = self
            .retries
            .iter()
            .map(|(tp, retry)| UncleanablePartition {
                topic_partition: tp.clone(),
                failures: retry.failures,
                last_error: retry.last_error.clone(),
                retry_in: retry.at.saturating_duration_since(now),
            })
            .collect();
        self.update_stats(|stats| stats.uncleanable = uncleanable);
    }

    fn update_stats(&self, update: impl FnOnce(&mut CleanerStats)) {
        update(&mut self.stats.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

fn call_error(error: CallError) -> FlushError {
    match error {
        CallError::ShardFailed(shard) => EngineUnavailable::ShardFailed { shard }.into(),
        CallError::Stopping => EngineUnavailable::Closed.into(),
    }
}

/// The shard that owns the log (the engine's placement, by the log's topic and partition).
fn shard_of(shards: &[ShardLink], log: &CleanableLog) -> usize {
    super::shard_for(&log.topic_partition, shards.len())
}

/// Puts the calling thread in the idle scheduling class, else at nice 19.
fn lower_priority() -> CleanerPriority {
    use thread_priority::ThreadPriority;
    use thread_priority::unix::{
        NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
        thread_native_id,
    };
    let thread = thread_native_id();
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    if set_thread_priority_and_policy(thread, ThreadPriority::Min, idle).is_ok() {
        return CleanerPriority::Idle;
    }
    // For the normal policy the minimum priority is nice 19.
    let other = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other);
    if set_thread_priority_and_policy(thread, ThreadPriority::Min, other).is_ok() {
        return CleanerPriority::Nice19;
    }
    tracing::warn!("cleaner: could not lower its priority; it runs at normal priority");
    CleanerPriority::Normal
}

/// Puts the calling thread's I/O in the idle class (`ioprio_set`), so that the disk serves it
/// only when nothing else waits (where the I/O scheduler honours classes; `SCHED_IDLE` implies
/// it there too, but only for the thread's own system calls, and unseen by `ioprio_get`).
fn lower_io_priority() {
    let this_thread = ioprio::Target::Process(ioprio::Pid::from_raw(0));
    let idle = ioprio::Priority::new(ioprio::Class::Idle);
    if let Err(error) = ioprio::set_priority(this_thread, idle) {
        tracing::warn!("cleaner: could not set the idle I/O class: {error}");
    }
}

/// The calling thread's kernel id, from `/proc/thread-self` (`<pid>/task/<tid>`).
fn current_thread_id() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}
