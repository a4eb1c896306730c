//! A shard: one thread that owns a group of partitions and is the only code that touches their
//! state, so the data path takes no locks.
//!
//! The loop: block until a request arrives, a sync thread reports, or a timer is due; drain what
//! else is queued (up to [`REQUESTS_PER_TURN_MAX`]), then run the turn in arrival order.
//! Consecutive appends are committed together: each partition's appends become one positioned
//! write; those that need no sync are answered, the others go to the shard's sync threads
//! ([`super::syncer`]), which sync and answer them while the shard writes the next turn (group
//! commit). Fetches that asked to wait for data are parked and answered when an append (or, for
//! durable data, a sync) gives them enough bytes or their deadline passes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};

use super::clock::Clock;
use super::deleter::FileDeleter;
use super::pending::Reply;
use super::syncer::{
    SyncJob, SyncKind, SyncOutcome, SyncReport, Syncer, WrittenAnswers, answer_written,
};
use super::topic_registry::TopicRegistry;
use super::wake::ShardWaker;
use super::{ConsumerRecord, consumer_record};
use super::{FetchOptions, Isolation, PartitionDescription};
use crate::cleaner::log_cleaner::{CleanableLog, CleanedGroup, SwapOutcome};
use crate::config::{CleanupPolicy, LogConfig};
use crate::error::{
    AppendError, DeleteRecordsError, FlushError, OpenError, ReadError, StorageError, TopicError,
    TruncateError,
};
use crate::format::file_name::partition_dir_name;
use crate::index::time_index::TimestampOffset;
use crate::io::{Storage, StorageFile, WriteMark};
use crate::log::{
    AppendInfo, AppendOutcome, CompactionOutcome, DigestBudget, DirSync, FetchData, LogOpenOptions,
    LogWriteMode, PartitionLog, RecordRead, RecoveryReport, RetentionOutcome, ValidatedBatches,
    closed_log_files,
};
use crate::metrics::ShardMetrics;
use crate::types::{Offset, TimestampMs, TopicName, TopicPartition};

/// Bound on the requests one turn takes from the queue, so a flood of appends cannot starve
/// parked fetches and timers.
pub(crate) const REQUESTS_PER_TURN_MAX: usize = 4096;

/// Partitions the periodic retention pass visits between two turns.
const RETENTION_PARTITIONS_PER_TURN: usize = 16;

/// How long an idle shard polls its queue before it sleeps.
const IDLE_SPIN: Duration = Duration::from_micros(50);

/// How often a shard sets its gauges (queue depth, open partitions and segments).
const GAUGES_INTERVAL: Duration = Duration::from_secs(1);

/// A request to a shard. Every request carries the channel its answer goes back on.
pub(crate) enum Request {
    Append {
        tp: TopicPartition,
        batches: ValidatedBatches,
        durable: bool,
        reply: Reply<AppendInfo, AppendError>,
    },
    /// An append whose batches the shard validates first ([`Engine::append_async`]); its bytes
    /// are already counted in flight.
    ValidateAndAppend {
        tp: TopicPartition,
        batches: bytes::Bytes,
        config: Box<LogConfig>,
        durable: bool,
        reply: Reply<AppendInfo, AppendError>,
    },
    Fetch {
        tp: TopicPartition,
        offset: Offset,
        options: FetchOptions,
        reply: Reply<FetchData, ReadError>,
    },
    FetchRecord {
        tp: TopicPartition,
        offset: Offset,
        reply: Reply<Option<ConsumerRecord>, ReadError>,
    },
    FetchByTimestamp {
        tp: TopicPartition,
        timestamp: TimestampMs,
        reply: Reply<Option<TimestampOffset>, ReadError>,
    },
    DeleteRecords {
        tp: TopicPartition,
        offset: Offset,
        reply: Reply<Offset, DeleteRecordsError>,
    },
    Truncate {
        tp: TopicPartition,
        truncation: Truncation,
        reply: Reply<Offset, TruncateError>,
    },
    Flush {
        tp: Option<TopicPartition>,
        reply: Reply<(), FlushError>,
    },
    Describe {
        tps: Vec<TopicPartition>,
        reply: Reply<Vec<PartitionDescription>, TopicError>,
    },
    DropPartitions {
        tps: Vec<TopicPartition>,
        reply: Reply<(), TopicError>,
    },
    /// The topic's configuration changed (the registry holds the new one already): the open
    /// logs of its partitions take it; the others read it from the registry when they open.
    AlterConfig {
        topic: TopicName,
        /// Boxed: every request's slot in the queue is as large as the largest request.
        config: Box<LogConfig>,
        reply: Reply<(), TopicError>,
    },
    Checkpoint {
        /// Wait for the syncs in flight first (an explicit checkpoint; the background one does
        /// not, so it never holds the shard up behind a seal sync).
        settle: bool,
        reply: Reply<Vec<PartitionCheckpoint>, FlushError>,
    },
    Retention {
        topic: Option<TopicName>,
        reply: Reply<Vec<PartitionRetention>, FlushError>,
    },
    /// The cleaner found these partitions (of every shard) due for retention from their files:
    /// the owned ones join the retention queue.
    RetainPartitions { tps: Vec<TopicPartition> },
    /// The cleaner asks for logs to clean: their sealed segments' facts.
    CleanableLogs {
        selection: CleanableSelection,
        /// Only logs whose `cleanup.policy` compacts (else every log: the scrubber's case).
        compacted_only: bool,
        reply: Reply<Vec<CleanableEntry>, FlushError>,
    },
    /// The cleaner hands over a cleaned group for the owner to swap in.
    SwapCleaned {
        tp: TopicPartition,
        group: CleanedGroup,
        reply: Reply<SwapOutcome, StorageError>,
    },
    Close {
        reply: Reply<ShardClosed, FlushError>,
    },
}

/// How [`Request::Truncate`] cuts a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Truncation {
    /// Remove every record at or after the offset.
    To(Offset),
    /// Remove every record and start over, empty, at the offset.
    FullyAndStartAt(Offset),
}

impl Request {
    /// Whether the shard answers it without waiting for the syncs in flight, which change only
    /// what is durable: reads of the log's records, and the background checkpoint.
    fn skips_settle(&self) -> bool {
        matches!(
            self,
            Request::Fetch { .. }
                | Request::FetchRecord { .. }
                | Request::FetchByTimestamp { .. }
                | Request::Checkpoint { settle: false, .. }
                | Request::RetainPartitions { .. }
                | Request::AlterConfig { .. }
        )
    }
}

/// One log the cleaner may clean, or why it could not be opened.
pub(crate) type CleanableEntry = (TopicPartition, Result<CleanableLog, StorageError>);

/// Which compacted logs the cleaner asks a shard for.
#[derive(Debug, Clone)]
pub(crate) enum CleanableSelection {
    /// The open ones (the periodic search for dirty logs opens nothing).
    Open,
    /// Every owned one (of `topic`, or all), opening those not open.
    Owned { topic: Option<TopicName> },
    /// This one, if open.
    One(TopicPartition),
    /// These (of every shard), opening those not open.
    Listed(Vec<TopicPartition>),
}

/// What a run of partition opens in one request (a describe, a topic's creation) carries from
/// one open to the next.
#[derive(Debug, Default)]
struct OpenRun {
    /// The partitions the run created, whose directories are left unsynced: the request syncs
    /// them all ([`Shard::sync_new_dirs`]) before it answers anything about them.
    dirs_due: Vec<TopicPartition>,
    /// The shard's open segment files, counted at the run's first open and kept since by its
    /// opens and releases: within one request nothing else opens a segment.
    open_files: Option<usize>,
    /// The next partitions to release, the least recently used last ([`Shard::evict_in_run`]).
    to_release: Vec<TopicPartition>,
}

/// A run of opens finds the least recently used partitions to release this share of the open
/// partitions at a time.
const RUN_RELEASE_SHARE: usize = 16;

/// A partition's offsets for the log directory's checkpoint files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionCheckpoint {
    pub tp: TopicPartition,
    pub recovery_point: Offset,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
    /// The active segment's `.log`: the only file that can hold unsynced appends.
    pub active_log_path: PathBuf,
    /// Bytes of the partition's segments, for a description of it while it is released.
    pub size_bytes: u64,
    /// Its segments, as `size_bytes`.
    pub segment_count: usize,
}

impl PartitionCheckpoint {
    fn of(tp: &TopicPartition, log: &PartitionLog) -> PartitionCheckpoint {
        PartitionCheckpoint {
            tp: tp.clone(),
            recovery_point: log.recovery_point(),
            log_start_offset: log.log_start_offset(),
            log_end_offset: log.log_end_offset(),
            active_log_path: log.active_log_path().to_owned(),
            size_bytes: log.size_bytes(),
            segment_count: log.segment_count(),
        }
    }
}

/// What a shard's close leaves: the offsets of every partition it closed cleanly, for the
/// checkpoints, and the partitions that were offline (with why), which keep the engine from
/// writing the clean-shutdown marker.
pub(crate) struct ShardClosed {
    pub checkpoints: Vec<PartitionCheckpoint>,
    pub offline: Vec<(TopicPartition, String)>,
}

/// Released partitions whose unsynced `.log` files are synced together at close, at most this
/// many files open at once.
const CLOSE_SYNC_FILES_MAX: usize = 128;

/// What a retention pass did to one partition.
#[derive(Debug)]
pub struct PartitionRetention {
    /// The partition.
    pub topic_partition: TopicPartition,
    /// What retention deleted, or why it failed.
    pub outcome: Result<RetentionOutcome, StorageError>,
}

/// What compaction did to one partition.
#[derive(Debug)]
pub struct PartitionCompaction {
    /// The partition.
    pub topic_partition: TopicPartition,
    /// What the cleaning rewrote, or why it failed.
    pub outcome: Result<CompactionOutcome, StorageError>,
}

/// What a shard shares with the engine: read-mostly state set at open.
pub(crate) struct ShardContext {
    pub root: PathBuf,
    pub storage: Arc<dyn Storage>,
    pub topics: Arc<RwLock<TopicRegistry>>,
    pub inflight_bytes: Arc<AtomicU64>,
    pub had_clean_shutdown: bool,
    pub recovery_points: BTreeMap<TopicPartition, Offset>,
    pub log_start_offsets: BTreeMap<TopicPartition, Offset>,
    /// Which shard owns a partition (the engine's placement), to find this shard's partitions.
    pub owns: Box<dyn Fn(&TopicPartition) -> bool + Send>,
    /// Bound on this shard's open partitions; the least recently used is closed beyond it.
    pub open_partitions_max: usize,
    /// Bound on this shard's open segments (one descriptor and two index maps each).
    pub open_segments_max: usize,
    /// `EngineConfig::direct_writes`, given to every partition this shard opens.
    pub direct_writes: bool,
    /// `EngineConfig::sync_inline_when_idle`.
    pub sync_inline_when_idle: bool,
    /// `EngineConfig::prewrite_synced_logs`, given to every partition this shard opens.
    pub prewrite_synced_logs: bool,
    /// `EngineConfig::producer_id_expiration_ms`, likewise.
    pub producer_id_expiration_ms: i64,
    /// `EngineConfig::background_sync_bytes`.
    pub background_sync_bytes: u64,
    /// `EngineConfig::lookup_digest_bytes_max`, shared by every partition this shard opens.
    pub digest_budget: DigestBudget,
    /// `EngineConfig::clock`.
    pub clock: Clock,
    /// Partitions opened at the same time when a request names many unopened ones
    /// ([`Shard::open_partitions_together`]); 1: one at a time, on the shard's thread.
    pub open_threads: usize,
}

/// [`ShardContext::open_threads`] of a threaded engine. Opening a partition mostly waits on the
/// device (its directory, inodes, index pages, the bytes recovery checks), so several opens in
/// flight keep it busy.
pub(crate) const OPEN_THREADS: usize = 8;

/// A shard bounded to fewer open segment files opens one partition at a time: an open on a
/// thread of its own holds, besides its segments, that thread's ring and the descriptors of the
/// files it reads, out of the few the engine keeps in reserve.
const PARALLEL_OPENS_FILES_MIN: usize = 4096;

/// What opening one partition needs, gathered on the shard's thread.
struct PartitionOpen {
    tp: TopicPartition,
    dir: PathBuf,
    config: LogConfig,
    options: LogOpenOptions,
    /// The recovery point it had when it was released, if it was.
    evicted_recovery_point: Option<Offset>,
    /// Leave the sync of a directory the open creates to the caller ([`DirSync::Due`]).
    leave_dir_sync: bool,
}

type Opened = Result<(PartitionLog, RecoveryReport, DirSync), OpenError>;

impl PartitionOpen {
    fn run(self, storage: Arc<dyn Storage>) -> (PartitionOpen, Opened) {
        let (dir, tp, config) = (&self.dir, self.tp.clone(), self.config.clone());
        let opened = match self.leave_dir_sync {
            true => PartitionLog::open_leaving_dir_sync(storage, dir, tp, config, self.options),
            false => PartitionLog::open(storage, dir, tp, config, self.options)
                .map(|(log, report)| (log, report, DirSync::Done)),
        };
        (self, opened)
    }
}

/// Runs `opens` on up to `threads` threads of their own; returns each with its outcome, in no
/// particular order. Those a thread that could not start or that panicked did not run are
/// left out: the shard opens them itself when they are used.
fn open_in_parallel(
    storage: &Arc<dyn Storage>,
    opens: Vec<PartitionOpen>,
    threads: usize,
) -> Vec<(PartitionOpen, Opened)> {
    let queue = std::sync::Mutex::new(opens);
    let next = || {
        queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .filter_map(|index| {
                std::thread::Builder::new()
                    .name(format!("seglog-open-{index}"))
                    .spawn_scoped(scope, || {
                        crate::io::wait_for_reads_asleep();
                        std::iter::from_fn(next)
                            .map(|open| open.run(storage.clone()))
                            .collect::<Vec<_>>()
                    })
                    .ok()
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|handle| handle.join().ok())
            .flatten()
            .collect()
    })
}

struct PendingAppend {
    tp: TopicPartition,
    batches: ValidatedBatches,
    durable: bool,
    reply: Reply<AppendInfo, AppendError>,
}

struct ParkedFetch {
    tp: TopicPartition,
    offset: Offset,
    options: FetchOptions,
    deadline: Instant,
    reply: Reply<FetchData, ReadError>,
}

/// The appends of one partition once written (their writes behind maybe still in flight),
/// waiting for the writes and then the sync decision.
struct WrittenGroup {
    tp: TopicPartition,
    answers: WrittenAnswers,
    /// Done when the writes completed; `None` when they completed before the write returned.
    mark: Option<WriteMark>,
    /// The first offset of these appends: fetches read below it while they are written.
    first: Offset,
    /// The log end offset after these appends: what a sync for them covers.
    through: Offset,
    /// The appends wait for a sync (durable, or the flush policy).
    must_sync: bool,
    /// What the group appended, and when its write started (for the metrics).
    counts: AppendCounts,
    written_at: Instant,
    /// The appends are answered now and the log is synced in the background
    /// (`EngineConfig::background_sync_bytes`).
    background_sync: bool,
}

/// What woke the shard.
enum Wake {
    Request(Request),
    Synced(SyncReport),
    /// A timer, a completion of the ring, or nothing (a wake-up with nothing new).
    Timer,
}

/// Why a partition cannot be served.
enum LookupError {
    Unknown,
    Open(OpenError),
    /// Taken offline by a storage error (`PartitionLog::failure`) and closed since.
    Offline {
        dir: PathBuf,
        cause: String,
    },
}

/// A partition taken offline by a storage error and closed since (to bound open files, or at
/// close): it stays offline until the engine closes, so that no reopen in this process trusts
/// its unsynced bytes. Its offsets are only described; its checkpoint entry keeps what was
/// checkpointed before the failure.
struct OfflinePartition {
    checkpoint: PartitionCheckpoint,
    cause: String,
}

pub(crate) struct Shard {
    id: usize,
    context: ShardContext,
    receiver: Receiver<Request>,
    /// Woken by requests, sync reports and the ring's completions (`wake.rs`).
    waker: Arc<ShardWaker>,
    /// Whether the ring's completions wake the shard (`Storage::attach_waker`); if not, each
    /// turn completes its writes before the shard sleeps.
    completions_wake: bool,
    /// Written groups whose writes behind may still be in flight, in the order written.
    writing: Vec<WrittenGroup>,
    /// Syncs and answers durable appends while the shard goes on (see [`super::syncer`]).
    syncer: Syncer,
    /// Unlinks deleted segments' files while the shard goes on (see [`super::deleter`]).
    file_deleter: FileDeleter,
    /// Each open partition's generation: which open of it this is, so that the syncer's outcome
    /// for an earlier open is not applied to a later one.
    generations: BTreeMap<TopicPartition, u64>,
    opens: u64,
    partitions: BTreeMap<TopicPartition, PartitionLog>,
    /// When each open partition was last used (a turn counter), for eviction.
    last_used: BTreeMap<TopicPartition, u64>,
    use_counter: u64,
    /// Partitions opened (and so recovered if needed) since the engine opened.
    opened: BTreeSet<TopicPartition>,
    /// Offsets of partitions closed by eviction, for checkpoints and their next open.
    evicted: BTreeMap<TopicPartition, PartitionCheckpoint>,
    /// Partitions never opened whose open failed ([`Shard::forget_release_unopened`]).
    refused_opens: BTreeSet<TopicPartition>,
    /// Partitions offline after a storage error, closed since (see [`OfflinePartition`]).
    offline: BTreeMap<TopicPartition, OfflinePartition>,
    parked: Vec<ParkedFetch>,
    /// Partitions with `flush.ms` and unflushed data, and when their flush is due.
    flush_deadlines: BTreeMap<TopicPartition, TimestampMs>,
    /// Partitions the cleaner found due for retention, still to visit.
    retention_queue: std::collections::VecDeque<TopicPartition>,
    /// Partitions with `.deleted` files waiting for `file.delete.delay.ms`, and when.
    file_deletion_deadlines: BTreeMap<TopicPartition, TimestampMs>,
    /// The requests of one turn; empty between turns, kept so that a turn allocates none.
    turn_requests: Vec<Request>,
    metrics: ShardMetrics,
    /// When the gauges were last set ([`Shard::refresh_gauges`]).
    gauges_set: Instant,
}

impl Shard {
    pub(crate) fn new(
        id: usize,
        context: ShardContext,
        (receiver, waker): (Receiver<Request>, Arc<ShardWaker>),
        syncer: Syncer,
        file_deleter: FileDeleter,
    ) -> Shard {
        Shard {
            id,
            context,
            receiver,
            waker,
            completions_wake: false,
            writing: Vec::new(),
            syncer,
            file_deleter,
            generations: BTreeMap::new(),
            opens: 0,
            partitions: BTreeMap::new(),
            last_used: BTreeMap::new(),
            use_counter: 0,
            opened: BTreeSet::new(),
            evicted: BTreeMap::new(),
            refused_opens: BTreeSet::new(),
            offline: BTreeMap::new(),
            parked: Vec::new(),
            flush_deadlines: BTreeMap::new(),
            retention_queue: std::collections::VecDeque::new(),
            file_deletion_deadlines: BTreeMap::new(),
            turn_requests: Vec::new(),
            metrics: ShardMetrics::new(id),
            gauges_set: Instant::now(),
        }
    }

    /// Sets the gauges, at most every [`GAUGES_INTERVAL`]: they are sampled, not kept exact.
    fn refresh_gauges(&mut self) {
        let now = Instant::now();
        if now.saturating_duration_since(self.gauges_set) < GAUGES_INTERVAL {
            return;
        }
        self.gauges_set = now;
        let metrics = &self.metrics;
        metrics.queue_requests.set(self.receiver.len() as f64);
        let writing: u64 = self.writing.iter().map(|group| group.counts.bytes).sum();
        metrics.writing_bytes.set(writing as f64);
        let inflight = self.context.inflight_bytes.load(Ordering::Relaxed);
        metrics.inflight_bytes.set(inflight as f64);
        metrics.partitions_open.set(self.partitions.len() as f64);
        metrics.segments_open.set(self.open_segment_files() as f64);
        let failed = self
            .partitions
            .values()
            .filter(|log| log.failure().is_some())
            .count();
        let offline = failed + self.offline.len();
        metrics.partitions_offline.set(offline as f64);
    }

    /// Runs until the engine closes or is dropped.
    pub(crate) fn run(mut self) {
        self.completions_wake = self.context.storage.attach_waker(self.waker.eventfd());
        loop {
            let Some(wake) = self.next_wake() else {
                // The engine is gone: writes in flight land and are answered first.
                self.complete_writing();
                return;
            };
            let mut requests = std::mem::take(&mut self.turn_requests);
            match wake {
                Wake::Request(request) => requests.push(request),
                Wake::Synced(report) => {
                    let outcome = self.syncer.take_report(report);
                    self.apply_sync_outcomes(outcome.into_iter().collect());
                }
                Wake::Timer => {}
            }
            // Requests first, then reports: a sync failure reported before its callers heard
            // of it is applied before any request they sent on hearing it.
            requests.extend(self.receiver.try_iter().take(REQUESTS_PER_TURN_MAX));
            let outcomes = self.syncer.take_outcomes();
            self.apply_sync_outcomes(outcomes);
            self.finish_written();
            if self.syncer.panicked() {
                tracing::error!(
                    "shard {}: stopped after its sync thread panicked; its partitions fail with ShardFailed until the engine is reopened",
                    self.id
                );
                return;
            }
            let stopped = self.run_turn(requests.drain(..));
            self.turn_requests = requests;
            if stopped {
                return;
            }
            self.run_timers();
        }
    }

    /// An inline engine's turn, on the calling thread: runs every queued request, then lands
    /// every write, sync and parked fetch before it returns (an inline fetch never waits), and
    /// runs the timers. Returns true when the shard closed.
    pub(crate) fn drive_inline(&mut self) -> bool {
        loop {
            let requests: Vec<Request> = self
                .receiver
                .try_iter()
                .take(REQUESTS_PER_TURN_MAX)
                .collect();
            if requests.is_empty() {
                return false;
            }
            if self.run_turn(requests.into_iter()) {
                return true;
            }
            self.settle_syncs();
            self.serve_parked(&BTreeSet::new(), true);
            self.run_timers();
            self.settle_syncs();
        }
    }

    /// Lands the writes in flight and answers their appends: an inline shard's end when its engine
    /// is dropped without `close`.
    pub(crate) fn finish_writes(&mut self) {
        self.complete_writing();
    }

    /// Records what the syncer did: a synced log's recovery point moves (and fetches waiting for
    /// durable data are served), a log whose sync failed fails until it is reopened.
    fn apply_sync_outcomes(&mut self, outcomes: Vec<SyncOutcome>) {
        let mut touched = BTreeSet::new();
        let mut renames_synced = Vec::new();
        for outcome in outcomes {
            if self.generations.get(&outcome.tp) != Some(&outcome.generation) {
                continue;
            }
            let Some(log) = self.partitions.get_mut(&outcome.tp) else {
                continue;
            };
            let result = match outcome.failure {
                None => Ok(()),
                Some(cause) => Err(StorageError::Offline {
                    dir: log.dir().to_owned(),
                    cause,
                }),
            };
            // A failure was answered and logged by the syncer; the log now fails its appends.
            let _ = match outcome.kind {
                SyncKind::Appends => log.mark_flushed(outcome.through, result),
                SyncKind::Seal => log.mark_seal_synced(outcome.through, result),
                SyncKind::Renames => {
                    renames_synced.push(outcome.tp.clone());
                    log.mark_renames_synced(result)
                }
            };
            touched.insert(outcome.tp);
        }
        for tp in renames_synced {
            self.advance_file_deletions(tp, self.context.clock.now());
        }
        if !touched.is_empty() {
            self.serve_parked(&touched, false);
        }
    }

    /// Moves `tp`'s deleted segments along: renames those that wait (their directory sync goes
    /// to the syncer), hands the `.deleted` files whose delay has passed to the file deleter,
    /// and notes when the rest next need the shard.
    fn advance_file_deletions(&mut self, tp: TopicPartition, now: TimestampMs) {
        let Some(log) = self.partitions.get_mut(&tp) else {
            self.file_deletion_deadlines.remove(&tp);
            return;
        };
        if let Err(error) = log.finish_pending_renames(now) {
            tracing::error!(
                "shard {}: renaming deleted segments of {tp} failed: {error}",
                self.id
            );
        }
        self.file_deleter.delete(log.take_expired_files(now));
        self.after_segments_deleted(&tp);
    }

    /// Records when `tp`'s pending segments next need the shard, if they do.
    fn note_file_deletion(&mut self, tp: TopicPartition) {
        match self
            .partitions
            .get(&tp)
            .and_then(PartitionLog::next_file_deletion)
        {
            Some(due) => self.file_deletion_deadlines.insert(tp, due),
            None => self.file_deletion_deadlines.remove(&tp),
        };
    }

    /// Waits until the syncer has synced and answered every group handed to it, and records the
    /// outcomes. Called before the shard syncs, rolls, releases or closes a log itself, or answers
    /// a request about its state (see [`super::syncer`] for why).
    fn settle_syncs(&mut self) {
        self.complete_writing();
        // An outcome may send another job (the renames that waited for a renames sync).
        loop {
            let outcomes = self.syncer.settle();
            self.apply_sync_outcomes(outcomes);
            if self.syncer.is_idle() {
                return;
            }
        }
    }

    /// Polls the queue for [`IDLE_SPIN`] before the shard sleeps: a request that comes within it
    /// costs no wake-up (a futex wake and, in a VM, an inter-processor interrupt: tens of µs).
    fn spin_for_request(&self) -> Option<Request> {
        if !self.retention_queue.is_empty() {
            return None;
        }
        let started = Instant::now();
        loop {
            if let Ok(request) = self.receiver.try_recv() {
                return Some(request);
            }
            if started.elapsed() >= IDLE_SPIN
                || !self.syncer.reports().is_empty()
                || self.context.storage.completions_waiting()
            {
                return None;
            }
            crate::spin::pause(started);
        }
    }

    /// The next request, sync outcome or completion, polled for a moment and then waited for
    /// asleep until the next timer; `None` when the engine is gone.
    fn next_wake(&self) -> Option<Wake> {
        if let Some(request) = self.spin_for_request() {
            return Some(Wake::Request(request));
        }
        match self.receiver.try_recv() {
            Ok(request) => return Some(Wake::Request(request)),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => {}
        }
        // The sync threads end only with the shard, so their channel stays connected.
        if let Ok(report) = self.syncer.reports().try_recv() {
            return Some(Wake::Synced(report));
        }
        let storage = self.context.storage.as_ref();
        if storage.completions_waiting() {
            return Some(Wake::Timer);
        }
        let timeout = self.next_timeout();
        if timeout != Some(Duration::ZERO) {
            self.waker.sleep(timeout, || {
                self.receiver.is_empty()
                    && self.syncer.reports().is_empty()
                    && !storage.completions_waiting()
            });
        }
        Some(Wake::Timer)
    }

    fn next_timeout(&self) -> Option<Duration> {
        let now = Instant::now();
        let clock_now = self.context.clock.now();
        let at = |due: &TimestampMs| {
            let wait_ms = due.0.saturating_sub(clock_now.0).max(0);
            now + Duration::from_millis(wait_ms as u64)
        };
        let fetch_deadline = self.parked.iter().map(|fetch| fetch.deadline).min();
        let flush_deadline = self.flush_deadlines.values().min().map(at);
        let deletion_deadline = self.file_deletion_deadlines.values().min().map(at);
        if !self.retention_queue.is_empty() {
            return Some(Duration::ZERO);
        }
        let deadline = [fetch_deadline, flush_deadline, deletion_deadline]
            .into_iter()
            .flatten()
            .min()?;
        Some(deadline.saturating_duration_since(now))
    }

    /// Runs the requests in arrival order, committing consecutive appends together. Returns true
    /// when the shard closed.
    fn run_turn(&mut self, requests: impl Iterator<Item = Request>) -> bool {
        let mut appends = Vec::new();
        let mut touched = BTreeSet::new();
        for request in requests {
            match request {
                Request::Append {
                    tp,
                    batches,
                    durable,
                    reply,
                } => {
                    appends.push(PendingAppend {
                        tp,
                        batches,
                        durable,
                        reply,
                    });
                }
                Request::ValidateAndAppend {
                    tp,
                    batches,
                    config,
                    durable,
                    reply,
                } => {
                    let size_bytes = batches.len();
                    match ValidatedBatches::validate(batches, &config) {
                        Ok(batches) => appends.push(PendingAppend {
                            tp,
                            batches,
                            durable,
                            reply,
                        }),
                        Err(error) => {
                            self.release_inflight(size_bytes);
                            let _ = reply.send(Err(error));
                        }
                    }
                }
                other => {
                    self.commit_appends(std::mem::take(&mut appends), &mut touched);
                    self.complete_writing();
                    if !other.skips_settle() {
                        self.settle_syncs();
                    }
                    if self.handle(other) {
                        return true;
                    }
                }
            }
        }
        self.commit_appends(appends, &mut touched);
        self.serve_parked(&touched, false);
        false
    }

    fn handle(&mut self, request: Request) -> bool {
        match request {
            Request::Append { .. } | Request::ValidateAndAppend { .. } => {}
            Request::Fetch {
                tp,
                offset,
                options,
                reply,
            } => self.fetch(tp, offset, options, reply),
            Request::FetchRecord { tp, offset, reply } => {
                let _ = reply.send(self.fetch_record(&tp, offset));
            }
            Request::FetchByTimestamp {
                tp,
                timestamp,
                reply,
            } => {
                let result = self.fetch_by_timestamp(&tp, timestamp);
                let _ = reply.send(result);
            }
            Request::DeleteRecords { tp, offset, reply } => {
                let result = self.delete_records(&tp, offset);
                let _ = reply.send(result);
            }
            Request::Truncate {
                tp,
                truncation,
                reply,
            } => {
                let _ = reply.send(self.truncate(&tp, truncation));
            }
            Request::Flush { tp, reply } => {
                let result = self.flush(tp.as_ref());
                let _ = reply.send(result);
            }
            Request::Describe { tps, reply } => {
                let _ = reply.send(self.describe(&tps).map_err(TopicError::from));
            }
            Request::DropPartitions { tps, reply } => {
                self.drop_partitions(&tps);
                let _ = reply.send(Ok(()));
            }
            Request::AlterConfig {
                topic,
                config,
                reply,
            } => {
                let _ = reply.send(self.alter_config(&topic, &config));
            }
            Request::Checkpoint { reply, .. } => {
                let _ = reply.send(Ok(self.checkpoints()));
            }
            Request::Retention { topic, reply } => {
                let _ = reply.send(Ok(self.run_retention(topic.as_ref())));
            }
            Request::RetainPartitions { tps } => self.queue_retention(tps),
            Request::CleanableLogs {
                selection,
                compacted_only,
                reply,
            } => {
                let _ = reply.send(Ok(self.cleanable_logs(selection, compacted_only)));
            }
            Request::SwapCleaned { tp, group, reply } => {
                let _ = reply.send(self.swap_cleaned(&tp, &group));
            }
            Request::Close { reply } => {
                let _ = reply.send(self.close().map_err(FlushError::from));
                return true;
            }
        }
        false
    }

    /// Why `tp` is offline, if it was closed offline (see [`OfflinePartition`]).
    fn offline_lookup(&self, tp: &TopicPartition) -> Option<LookupError> {
        self.offline.get(tp).map(|offline| LookupError::Offline {
            dir: self.context.root.join(partition_dir_name(tp)),
            cause: offline.cause.clone(),
        })
    }

    /// The log of `tp`, opened (and recovered) on first use. Opening beyond
    /// `open_partitions_max` partitions or `open_segments_max` open segments first closes the
    /// least recently used partitions, so file descriptors and index maps stay bounded however
    /// many partitions the shard owns.
    fn partition(&mut self, tp: &TopicPartition) -> Result<&mut PartitionLog, LookupError> {
        self.partition_with(tp, None)
    }

    /// [`Shard::partition`], as one of a run of opens in one request ([`OpenRun`]).
    fn partition_with(
        &mut self,
        tp: &TopicPartition,
        mut run: Option<&mut OpenRun>,
    ) -> Result<&mut PartitionLog, LookupError> {
        if let Some(offline) = self.offline_lookup(tp) {
            return Err(offline);
        }
        if !self.partitions.contains_key(tp) {
            // Counted once per run of opens (kept between requests, the count would drift:
            // reads open sealed segments and rolls add one); outside a run, only when needed.
            let counted = run.as_ref().and_then(|run| run.open_files);
            let mut open_files = match (counted, run.is_some()) {
                (Some(counted), _) => counted,
                (None, true) => self.open_segment_files(),
                (None, false) => self.open_segment_files_for_bounds(),
            };
            if self.full_for_one_more(open_files) {
                self.settle_syncs();
            }
            while self.full_for_one_more(open_files) {
                let released = match run.as_deref_mut() {
                    Some(run) => self.evict_in_run(run),
                    None => self.evict_least_recently_used(),
                };
                match released {
                    Some(closed) => open_files -= closed,
                    None => break,
                }
            }
            let open = self.partition_open(tp, run.is_some())?;
            let (open, opened) = open.run(self.context.storage.clone());
            let dirs_due = run.as_mut().map(|run| &mut run.dirs_due);
            let log = self
                .finish_open(&open, opened, dirs_due)
                .inspect_err(|_| self.forget_release_unopened(tp))?;
            if let Some(run) = run {
                run.open_files = Some(open_files + log.open_segment_files());
            }
            self.adopt(tp, log);
        }
        self.use_counter += 1;
        match self.last_used.get_mut(tp) {
            Some(last_used) => *last_used = self.use_counter,
            None => {
                self.last_used.insert(tp.clone(), self.use_counter);
            }
        }
        self.partitions.get_mut(tp).ok_or(LookupError::Unknown)
    }

    /// Descriptors this shard's open partitions hold on their segments' `.log` files.
    fn open_segment_files(&self) -> usize {
        self.partitions
            .values()
            .map(PartitionLog::open_segment_files)
            .sum()
    }

    /// [`Shard::open_segment_files`] where a bound may be passed, else the most the open
    /// partitions can hold (which passes none). Counted on each open, not kept: reads open
    /// sealed segments and rolls add one, so a count kept between opens would drift; summed only
    /// when needed, as a sum over thousands of open partitions at each open adds up.
    fn open_segment_files_for_bounds(&self) -> usize {
        let most = self.partitions.len() * PartitionLog::OPEN_SEGMENT_FILES_MAX;
        match self.full_for_one_more(most) {
            true => self.open_segment_files(),
            false => most,
        }
    }

    /// Whether opening one more partition (its active segment, and room for its sealed ones)
    /// would pass a bound, with `open_files` segment descriptors open now. An active segment
    /// written with `O_DIRECT` holds two.
    fn full_for_one_more(&self, open_files: usize) -> bool {
        !self.partitions.is_empty() && self.past_bounds(self.partitions.len(), open_files)
    }

    /// Whether one more partition opened beside `partitions` open ones holding `open_files`
    /// segment descriptors would pass a bound.
    fn past_bounds(&self, partitions: usize, open_files: usize) -> bool {
        let active_files = if self.context.direct_writes { 2 } else { 1 };
        partitions >= self.context.open_partitions_max.max(1)
            || open_files + active_files + crate::log::SEALED_OPEN_MAX
                > self.context.open_segments_max
    }

    /// Releases the least recently used open partition (files closed, maps dropped, nothing
    /// synced); its next open in this process trusts its files. Returns how many segments it
    /// held open (in descriptors), `None` if no partition is open.
    fn evict_least_recently_used(&mut self) -> Option<usize> {
        let tp = self
            .last_used
            .iter()
            .min_by_key(|(_, used)| **used)
            .map(|(tp, _)| tp.clone())?;
        self.evict(tp)
    }

    /// [`Shard::evict_least_recently_used`] within a run of opens: the least recently used
    /// partitions are found a batch at a time (a [`RUN_RELEASE_SHARE`]th of the open partitions),
    /// not by a scan per release. One used again since its batch was found is released anyway.
    fn evict_in_run(&mut self, run: &mut OpenRun) -> Option<usize> {
        loop {
            if run.to_release.is_empty() {
                let count = (self.context.open_partitions_max / RUN_RELEASE_SHARE).max(1);
                run.to_release = self.least_recently_used(count);
            }
            let tp = run.to_release.pop()?;
            if self.last_used.contains_key(&tp) {
                return self.evict(tp);
            }
        }
    }

    /// The `count` least recently used open partitions, the least recently used last.
    fn least_recently_used(&self, count: usize) -> Vec<TopicPartition> {
        let mut by_use: Vec<(u64, &TopicPartition)> = self
            .last_used
            .iter()
            .map(|(tp, used)| (*used, tp))
            .collect();
        if by_use.len() > count {
            by_use.select_nth_unstable(count);
            by_use.truncate(count);
        }
        by_use.sort_unstable_by(|a, b| b.cmp(a));
        by_use.into_iter().map(|(_, tp)| tp.clone()).collect()
    }

    /// Releases `tp` ([`Shard::evict_least_recently_used`]).
    fn evict(&mut self, tp: TopicPartition) -> Option<usize> {
        self.last_used.remove(&tp);
        self.flush_deadlines.remove(&tp);
        let mut log = self.partitions.remove(&tp)?;
        // No read of a released log remains to wait for: its `.deleted` files may go now.
        self.file_deleter
            .delete(log.take_expired_files(TimestampMs(i64::MAX)));
        self.file_deletion_deadlines.remove(&tp);
        let closed = log.open_segment_files();
        self.metrics.partitions_evicted.increment(1);
        let checkpoint = PartitionCheckpoint::of(&tp, &log);
        match log.release() {
            Ok(()) => {
                self.evicted.insert(tp, checkpoint);
            }
            Err(error) => {
                tracing::error!(
                    "shard {}: {tp} closed to bound open files stays offline: {error}",
                    self.id
                );
                self.take_offline(tp, checkpoint, &error);
            }
        }
        Some(closed)
    }

    /// Keeps `tp`, closed after `error`, offline until the engine closes.
    fn take_offline(
        &mut self,
        tp: TopicPartition,
        checkpoint: PartitionCheckpoint,
        error: &StorageError,
    ) {
        let cause = error.cause();
        self.offline
            .insert(tp, OfflinePartition { checkpoint, cause });
    }

    /// Takes an opened partition in: open, newest, and its leftover `.deleted` files (a crash
    /// before their unlink) handed to the deleter.
    fn adopt(&mut self, tp: &TopicPartition, log: PartitionLog) {
        self.partitions.insert(tp.clone(), log);
        self.opens += 1;
        self.generations.insert(tp.clone(), self.opens);
        self.opened.insert(tp.clone());
        self.evicted.remove(tp);
        self.note_file_deletion(tp.clone());
    }

    /// Opens, at the same time on threads of their own ([`ShardContext::open_threads`]), those of
    /// `tps` not open, released, offline or unknown, as many as the bounds on open partitions
    /// and segments take without a release; the rest open one at a time when used. Each is
    /// answered for as soon as its own open is done: none waits for another's recovery. The
    /// directories of those it creates join `run`'s.
    fn open_partitions_together(&mut self, tps: &[TopicPartition], run: &mut OpenRun) {
        if self.context.open_threads <= 1
            || self.context.open_segments_max < PARALLEL_OPENS_FILES_MIN
        {
            return;
        }
        // In rounds: each takes what the bounds allow were every partition to hold its most
        // files, and the next counts again what the opened ones hold.
        let mut rest = tps;
        while !rest.is_empty() {
            let (opens, taken) = self.opens_within_bounds(rest);
            rest = &rest[taken..];
            if opens.len() < 2 {
                return;
            }
            let threads = self.context.open_threads.min(opens.len());
            for (open, opened) in open_in_parallel(&self.context.storage, opens, threads) {
                // A failed open is left for the request's own, which reports it.
                if let Ok(log) = self.finish_open(&open, opened, Some(&mut run.dirs_due)) {
                    self.adopt(&open.tp, log);
                }
            }
        }
    }

    /// The opens of those of `tps` not open, released, offline or unknown, from the first on,
    /// as many as the bounds take; and how many of `tps` were looked at.
    fn opens_within_bounds(&self, tps: &[TopicPartition]) -> (Vec<PartitionOpen>, usize) {
        let open_files = self.open_segment_files_for_bounds();
        let mut opens = Vec::new();
        for (looked_at, tp) in tps.iter().enumerate() {
            let taken = opens.len();
            let files = open_files + taken * PartitionLog::OPEN_SEGMENT_FILES_MAX;
            if self.past_bounds(self.partitions.len() + taken, files) {
                return (opens, looked_at);
            }
            if self.partitions.contains_key(tp)
                || self.evicted.contains_key(tp)
                || self.offline_lookup(tp).is_some()
            {
                continue;
            }
            if let Ok(open) = self.partition_open(tp, true) {
                opens.push(open);
            }
        }
        (opens, tps.len())
    }

    /// What opening `tp` needs: its configuration, checkpointed offsets and directory. With
    /// `leave_dir_sync`, the open leaves the sync of a directory it creates to its caller.
    fn partition_open(
        &self,
        tp: &TopicPartition,
        leave_dir_sync: bool,
    ) -> Result<PartitionOpen, LookupError> {
        let config = {
            let topics = self
                .context
                .topics
                .read()
                .map_err(|_| LookupError::Unknown)?;
            topics
                .partition_config(tp)
                .cloned()
                .ok_or(LookupError::Unknown)?
        };
        let evicted = self.evicted.get(tp);
        let options = LogOpenOptions {
            had_clean_shutdown: self.context.had_clean_shutdown || self.opened.contains(tp),
            recovery_point: evicted
                .map(|checkpoint| checkpoint.recovery_point)
                .or_else(|| self.context.recovery_points.get(tp).copied())
                .unwrap_or_default(),
            log_start_offset: evicted
                .map(|checkpoint| checkpoint.log_start_offset)
                .or_else(|| self.context.log_start_offsets.get(tp).copied()),
            now: self.context.clock.now(),
            mode: LogWriteMode {
                direct_writes: self.context.direct_writes,
                prewrite_synced: self.context.prewrite_synced_logs,
                producer_id_expiration_ms: self.context.producer_id_expiration_ms,
            },
        };
        Ok(PartitionOpen {
            tp: tp.clone(),
            dir: self.context.root.join(partition_dir_name(tp)),
            config,
            options,
            evicted_recovery_point: evicted.map(|checkpoint| checkpoint.recovery_point),
            leave_dir_sync,
        })
    }

    /// The opened log, limited to the recovery point it had when released, if it was. A
    /// directory its open created and left unsynced joins `dirs_due`.
    fn finish_open(
        &self,
        open: &PartitionOpen,
        opened: Opened,
        dirs_due: Option<&mut Vec<TopicPartition>>,
    ) -> Result<PartitionLog, LookupError> {
        let (mut log, report, dir_sync) = opened.map_err(LookupError::Open)?;
        if dir_sync == DirSync::Due
            && let Some(dirs_due) = dirs_due
        {
            dirs_due.push(open.tp.clone());
        }
        if let Some(recovery_point) = open.evicted_recovery_point {
            log.limit_recovery_point(recovery_point);
        }
        log.set_digest_budget(self.context.digest_budget.clone());
        if report.bytes_truncated > 0 || report.segments_deleted > 0 {
            tracing::warn!("shard {}: recovered {}: {report:?}", self.id, open.tp);
        }
        Ok(log)
    }

    /// Writes every partition's appends (one write each; `O_DIRECT` writes on io_uring are left
    /// in flight, writes behind) and answers, or hands to a sync, the groups whose writes are
    /// done: the others are answered when their completions wake the shard
    /// ([`Shard::finish_written`]), while it takes the next requests.
    fn commit_appends(
        &mut self,
        appends: Vec<PendingAppend>,
        touched: &mut BTreeSet<TopicPartition>,
    ) {
        if appends.is_empty() {
            return;
        }
        let now = self.context.clock.now();
        let mut groups: BTreeMap<TopicPartition, Vec<PendingAppend>> = BTreeMap::new();
        for append in appends {
            self.release_inflight(append.batches.size_bytes());
            groups.entry(append.tp.clone()).or_default().push(append);
        }
        for (tp, group) in groups {
            if !self.partitions.contains_key(&tp) {
                // Opening it may release a partition with writes in flight: they land first.
                self.complete_writing();
            }
            let group = self.write_group(tp.clone(), group, now);
            // Before any sync of the appends: a seal's sync comes first on its lane.
            self.submit_deferred_syncs(&tp);
            if let Some(group) = group {
                self.metrics.append_records.increment(group.counts.records);
                self.metrics.append_batches.increment(group.counts.batches);
                self.metrics.append_bytes.increment(group.counts.bytes);
                touched.insert(tp);
                self.writing.push(group);
            }
        }
        match self.completions_wake {
            true => self.finish_written(),
            false => self.complete_writing(),
        }
        self.note_flush_deadlines(touched);
    }

    /// Answers, or hands to a sync, the written groups whose writes completed, in the order
    /// written; a group whose write failed is answered with the error (its log failed). Serves
    /// the fetches parked on their partitions.
    fn finish_written(&mut self) {
        if self.writing.is_empty() {
            return;
        }
        self.context.storage.reap_completions();
        // In the order written; a later group may be done before an earlier one of another
        // partition (one of the same partition never is: its mark comes after the earlier one's).
        let (mut done, still): (Vec<_>, Vec<_>) = std::mem::take(&mut self.writing)
            .into_iter()
            .partition(|group| group.mark.as_ref().is_none_or(WriteMark::is_done));
        self.writing = still;
        if done.is_empty() {
            return;
        }
        let mut touched = BTreeSet::new();
        let now = Instant::now();
        for group in &mut done {
            let seconds = now
                .saturating_duration_since(group.written_at)
                .as_secs_f64();
            self.metrics.write_seconds.record(seconds);
            touched.insert(group.tp.clone());
            self.check_written(group);
        }
        let syncing = done.iter().filter(|group| group.must_sync).count();
        let inline = syncing == 1
            && self.context.sync_inline_when_idle
            && self.syncer.is_idle()
            && self.receiver.is_empty();
        for group in done {
            self.hand_over(group, inline);
        }
        self.serve_parked(&touched, false);
    }

    /// Waits for every write behind in flight and finishes their groups. Called before the shard
    /// does anything but append: a request about a log's state, a timer, an open that may release
    /// a partition, the end.
    fn complete_writing(&mut self) {
        if self.writing.is_empty() {
            return;
        }
        self.context.storage.complete_writes();
        self.finish_written();
    }

    /// Checks a done group's writes: a failure (or an earlier one of its log) answers its appends
    /// with the error and leaves it nothing to do.
    fn check_written(&mut self, group: &mut WrittenGroup) {
        let Some(log) = self.partitions.get_mut(&group.tp) else {
            return;
        };
        if let Err(error) = log.check_written(group.mark.as_ref()) {
            let dir = log.dir().to_owned();
            answer_written(std::mem::take(&mut group.answers), Some(Err(error)), &dir);
            group.must_sync = false;
            group.background_sync = false;
        }
    }

    /// Answers a written group that need not sync; syncs one that must here when `inline` (the
    /// sync threads hold nothing of it, so no sync of its file runs meanwhile), else gives it to
    /// the sync threads. A group whose log is due a background sync is answered at once and its
    /// log given to the sync threads without answers.
    fn hand_over(&mut self, mut group: WrittenGroup, inline: bool) {
        let dir = self.context.root.join(partition_dir_name(&group.tp));
        if group.must_sync
            && inline
            && let Some(log) = self.partitions.get_mut(&group.tp)
        {
            let started = Instant::now();
            let result = log.flush();
            let seconds = started.elapsed().as_secs_f64();
            let appends = group.answers.len();
            self.metrics
                .sync
                .record(1, seconds, group.counts.bytes, appends);
            return answer_written(group.answers, Some(result), &dir);
        }
        if group.background_sync {
            answer_written(std::mem::take(&mut group.answers), None, &dir);
        }
        let log = self.partitions.get(&group.tp);
        let generation = self.generations.get(&group.tp).copied();
        let sync = group.must_sync || group.background_sync;
        match (sync, log, generation) {
            (true, Some(log), Some(generation)) => self.syncer.submit(SyncJob {
                file: Some(log.active_log_file()),
                path: log.active_log_path().to_owned(),
                through: group.through,
                tp: group.tp,
                generation,
                dir,
                answers: group.answers,
                bytes: group.counts.bytes,
                seal: None,
            }),
            _ => answer_written(group.answers, None, &dir),
        }
    }

    /// One partition's appends as one write. `None` when they all failed (already answered).
    fn write_group(
        &mut self,
        tp: TopicPartition,
        group: Vec<PendingAppend>,
        now: TimestampMs,
    ) -> Option<WrittenGroup> {
        let unknown = || AppendError::UnknownPartition {
            topic: tp.topic.to_string(),
            partition: tp.partition,
        };
        let background_sync_bytes = self.context.background_sync_bytes;
        let log = match self.partition(&tp) {
            Ok(log) => log,
            Err(LookupError::Offline { dir, cause }) => {
                let offline = || StorageError::Offline {
                    dir: dir.clone(),
                    cause: cause.clone(),
                };
                answer_all(group, offline().into(), |_| offline().into());
                return None;
            }
            Err(error) => {
                answer_all(group, lookup_error_into(&tp, error), |_| unknown());
                return None;
            }
        };
        let first = log.log_end_offset();
        let batches: Vec<ValidatedBatches> =
            group.iter().map(|append| append.batches.clone()).collect();
        let started = Instant::now();
        match log.append_validated_behind(&batches, now) {
            Ok(outcomes) => {
                let (answers, durable_requested, counts) = answer_refused(group, outcomes);
                if answers.is_empty() {
                    return None;
                }
                let must_sync = durable_requested || log.flush_due(now);
                let background_sync = !must_sync && log.take_background_sync(background_sync_bytes);
                Some(WrittenGroup {
                    tp,
                    answers,
                    counts,
                    written_at: started,
                    mark: log.write_mark(),
                    first,
                    through: log.log_end_offset(),
                    must_sync,
                    background_sync,
                })
            }
            Err(error) => {
                let dir = log.dir().to_owned();
                let cause = error.to_string();
                answer_all(group, error, |_| {
                    AppendError::Storage(StorageError::Offline {
                        dir: dir.clone(),
                        cause: cause.clone(),
                    })
                });
                None
            }
        }
    }

    /// Gives the sync threads the segments `tp`'s rolls sealed, on the lane of its later syncs.
    /// Hands the syncer what `tp`'s log left for it: the seals of its rolls, then the directory
    /// sync its `.deleted` renames wait for.
    fn submit_deferred_syncs(&mut self, tp: &TopicPartition) {
        let (Some(log), Some(generation)) = (
            self.partitions.get_mut(tp),
            self.generations.get(tp).copied(),
        ) else {
            return;
        };
        for seal in log.take_unsynced_seals() {
            self.metrics.segments_rolled.increment(1);
            self.syncer
                .submit(SyncJob::of_seal(tp.clone(), generation, seal));
        }
        if let Some(dir) = log.take_renames_sync() {
            self.syncer
                .submit(SyncJob::of_renames(tp.clone(), generation, dir));
        }
    }

    fn note_flush_deadlines(&mut self, touched: &BTreeSet<TopicPartition>) {
        for tp in touched {
            match self
                .partitions
                .get(tp)
                .and_then(PartitionLog::flush_deadline)
            {
                Some(due) => self.flush_deadlines.insert(tp.clone(), due),
                None => self.flush_deadlines.remove(tp),
            };
        }
    }

    fn release_inflight(&self, size_bytes: usize) {
        self.context
            .inflight_bytes
            .fetch_sub(size_bytes as u64, Ordering::AcqRel);
    }

    fn fetch(
        &mut self,
        tp: TopicPartition,
        offset: Offset,
        options: FetchOptions,
        reply: Reply<FetchData, ReadError>,
    ) {
        let started = Instant::now();
        let result = self.read(&tp, offset, &options);
        let seconds = started.elapsed().as_secs_f64();
        self.metrics.read_seconds.record(seconds);
        let waits = options.max_wait_ms > 0;
        match result {
            Ok(data) if waits && (data.records.len() as u64) < options.min_bytes => {
                let deadline = Instant::now() + Duration::from_millis(options.max_wait_ms);
                self.metrics.fetch_waits.increment(1);
                self.parked.push(ParkedFetch {
                    tp,
                    offset,
                    options,
                    deadline,
                    reply,
                });
            }
            result => answer_fetch(&self.metrics, reply, result),
        }
    }

    /// `partition`, its errors as a read's.
    fn readable_partition(&mut self, tp: &TopicPartition) -> Result<&mut PartitionLog, ReadError> {
        self.partition(tp)
            .map_err(|error| lookup_error_into::<ReadError>(tp, error))
    }

    /// The record at `offset`, read and decoded here (`PartitionLog::read_record`): the caller
    /// receives one record, not a batch to walk. `None` where the log holds no data record at
    /// `offset` (compacted away, a control batch, or the log end).
    fn fetch_record(
        &mut self,
        tp: &TopicPartition,
        offset: Offset,
    ) -> Result<Option<ConsumerRecord>, ReadError> {
        let log = self.readable_partition(tp)?;
        match log.read_record(offset)? {
            RecordRead::Found(header, record) => Ok(consumer_record(tp, &header, record)),
            RecordRead::PastEnd | RecordRead::Absent => Ok(None),
            RecordRead::Invalid(source) => Err(ReadError::InvalidRecord {
                topic: tp.topic.to_string(),
                partition: tp.partition,
                offset,
                source,
            }),
        }
    }

    fn read(
        &mut self,
        tp: &TopicPartition,
        offset: Offset,
        options: &FetchOptions,
    ) -> Result<FetchData, ReadError> {
        // Appends whose writes are not checked yet are not served (a parked fetch is served
        // while later appends of its partition are written).
        let checked_end = self
            .writing
            .iter()
            .find(|group| group.tp == *tp)
            .map(|group| group.first);
        let log = self.readable_partition(tp)?;
        let data = log.read(offset, options.max_bytes)?;
        let visible_end = match options.isolation {
            Isolation::LogEnd => checked_end,
            Isolation::Durable => {
                let durable = data.durable_offset;
                Some(checked_end.map_or(durable, |end| end.min(durable)))
            }
        };
        Ok(match visible_end {
            Some(end) => data.trim_to(end),
            None => data,
        })
    }

    /// Answers parked fetches on `touched` partitions that now have enough bytes, and every
    /// parked fetch whose deadline passed (or all, with `expire_all`).
    fn serve_parked(&mut self, touched: &BTreeSet<TopicPartition>, expire_all: bool) {
        let now = Instant::now();
        let parked = std::mem::take(&mut self.parked);
        for fetch in parked {
            if fetch.reply.is_closed() {
                continue;
            }
            let expired = expire_all || fetch.deadline <= now;
            if !expired && !touched.contains(&fetch.tp) {
                self.parked.push(fetch);
                continue;
            }
            let result = self.read(&fetch.tp, fetch.offset, &fetch.options);
            let enough = result.as_ref().map_or(true, |data| {
                data.records.len() as u64 >= fetch.options.min_bytes
            });
            if enough || expired {
                answer_fetch(&self.metrics, fetch.reply, result);
            } else {
                self.parked.push(fetch);
            }
        }
    }

    /// Flushes partitions whose `flush.ms` came due and expires parked fetches.
    fn run_timers(&mut self) {
        self.refresh_gauges();
        let now = self.context.clock.now();
        if self.next_timeout() == Some(Duration::ZERO) {
            // A timer is due: what it does sees the log with every write landed.
            self.complete_writing();
        }
        let due: Vec<TopicPartition> = self
            .flush_deadlines
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(tp, _)| tp.clone())
            .collect();
        if !due.is_empty() {
            self.settle_syncs();
        }
        for tp in &due {
            self.flush_deadlines.remove(tp);
            let started = Instant::now();
            let flushed = self.partitions.get_mut(tp).map(PartitionLog::flush);
            if flushed.is_some() {
                let seconds = started.elapsed().as_secs_f64();
                self.metrics.sync.record(1, seconds, 0, 0);
            }
            if let Some(Err(error)) = flushed {
                tracing::error!("shard {}: flush.ms sync of {tp} failed: {error}", self.id);
            }
        }
        let touched = due.into_iter().collect();
        self.serve_parked(&touched, false);
        // Retention's roll leaves its seal's sync to the sync threads, and a sync job holds its
        // own descriptor of a segment retention deletes: no need to wait for the syncs here.
        self.run_queued_retention();
        self.delete_expired_files(now);
    }

    /// Applies retention now to this shard's partitions (of `topic`, or all), opening each in
    /// turn. A failure on one partition is logged and reported, and never stops the others.
    fn run_retention(&mut self, topic: Option<&TopicName>) -> Vec<PartitionRetention> {
        self.owned_partitions(topic)
            .into_iter()
            .map(|tp| self.retain_partition(tp))
            .collect()
    }

    /// Queues the owned partitions of `tps`, which the cleaner found due for retention from their
    /// files: `run_queued_retention` works through them a few at a time between turns.
    fn queue_retention(&mut self, tps: Vec<TopicPartition>) {
        for tp in tps {
            if (self.context.owns)(&tp) && !self.retention_queue.contains(&tp) {
                self.retention_queue.push_back(tp);
            }
        }
    }

    fn run_queued_retention(&mut self) {
        for _ in 0..RETENTION_PARTITIONS_PER_TURN {
            let Some(tp) = self.retention_queue.pop_front() else {
                return;
            };
            let _ = self.retain_partition(tp);
        }
    }

    /// This shard's partitions (of `topic`, or all).
    fn owned_partitions(&self, topic: Option<&TopicName>) -> Vec<TopicPartition> {
        let topics = self
            .context
            .topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        topics
            .partitions()
            .filter(|tp| (self.context.owns)(tp) && topic.is_none_or(|topic| &tp.topic == topic))
            .collect()
    }

    fn retain_partition(&mut self, tp: TopicPartition) -> PartitionRetention {
        let now = self.context.clock.now();
        let outcome = match self.partition(&tp) {
            Ok(log) => log.apply_retention(now),
            Err(LookupError::Open(error)) => Err(open_error_into_storage(&tp, error)),
            Err(LookupError::Offline { dir, cause }) => Err(StorageError::Offline { dir, cause }),
            Err(LookupError::Unknown) => Ok(RetentionOutcome::default()),
        };
        self.after_segments_deleted(&tp);
        match &outcome {
            Ok(retained) => {
                let metrics = &self.metrics;
                let segments = retained.segments_deleted as u64;
                metrics.retention_segments_deleted.increment(segments);
                metrics
                    .retention_bytes_deleted
                    .increment(retained.bytes_deleted);
            }
            Err(error) => tracing::error!("shard {}: retention of {tp} failed: {error}", self.id),
        }
        PartitionRetention {
            topic_partition: tp,
            outcome,
        }
    }

    /// Hands the `.deleted` files whose `file.delete.delay.ms` has passed to the file deleter.
    fn delete_expired_files(&mut self, now: TimestampMs) {
        let due: Vec<TopicPartition> = self
            .file_deletion_deadlines
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in due {
            self.advance_file_deletions(tp, now);
        }
    }

    fn fetch_by_timestamp(
        &mut self,
        tp: &TopicPartition,
        timestamp: TimestampMs,
    ) -> Result<Option<TimestampOffset>, ReadError> {
        let log = self.readable_partition(tp)?;
        log.read_by_timestamp(timestamp)
    }

    fn delete_records(
        &mut self,
        tp: &TopicPartition,
        offset: Offset,
    ) -> Result<Offset, DeleteRecordsError> {
        let now = self.context.clock.now();
        let log = self
            .partition(tp)
            .map_err(|error| lookup_error_into::<DeleteRecordsError>(tp, error))?;
        let deleted = log.delete_records(offset, now);
        self.after_segments_deleted(tp);
        deleted
    }

    /// Cuts `tp`'s log (after the writes and syncs in flight settled: every append above the cut
    /// was answered) and answers the fetches parked on it that now point past its end. Returns
    /// the new log end offset.
    fn truncate(
        &mut self,
        tp: &TopicPartition,
        truncation: Truncation,
    ) -> Result<Offset, TruncateError> {
        let now = self.context.clock.now();
        let log = self
            .partition(tp)
            .map_err(|error| lookup_error_into::<TruncateError>(tp, error))?;
        match truncation {
            Truncation::To(offset) if offset < log.log_start_offset() => {
                return Err(TruncateError::BelowLogStart {
                    requested: offset,
                    log_start_offset: log.log_start_offset(),
                });
            }
            Truncation::To(offset) => log.truncate_to(offset)?,
            Truncation::FullyAndStartAt(offset) => log.truncate_fully_and_start_at(offset, now)?,
        }
        let log_end_offset = log.log_end_offset();
        self.after_segments_deleted(tp);
        self.serve_parked(&BTreeSet::from([tp.clone()]), false);
        Ok(log_end_offset)
    }

    /// After retention or `deleteRecords` took segments out of `tp`'s log: the syncer gets the
    /// seal of a roll they made and the directory sync their renames wait for, and the shard
    /// notes when the `.deleted` files may go.
    fn after_segments_deleted(&mut self, tp: &TopicPartition) {
        self.submit_deferred_syncs(tp);
        self.note_file_deletion(tp.clone());
    }

    /// Syncs `tp` (every partition of the shard if `None`). An offline partition answers its
    /// failure, whether or not it has anything left to sync.
    fn flush(&mut self, tp: Option<&TopicPartition>) -> Result<(), FlushError> {
        let tps: Vec<TopicPartition> = match tp {
            Some(tp) => vec![tp.clone()],
            None => self
                .partitions
                .keys()
                .chain(self.offline.keys())
                .cloned()
                .collect(),
        };
        let mut first_error = None;
        for tp in tps {
            if let Some(LookupError::Offline { dir, cause }) = self.offline_lookup(&tp) {
                first_error.get_or_insert(StorageError::Offline { dir, cause });
                continue;
            }
            let Some(log) = self.partitions.get_mut(&tp) else {
                continue;
            };
            if log.failure().is_none() && log.recovery_point() >= log.log_end_offset() {
                continue;
            }
            if let Err(error) = log.flush() {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), |error| Err(error.into()))
    }

    /// Each of `tps`' offsets, opening those not open. The partitions this creates (a topic's
    /// creation) have their files created first and their directories synced together after,
    /// before the answer: a failed sync takes its partition offline and fails the request.
    fn describe(
        &mut self,
        tps: &[TopicPartition],
    ) -> Result<Vec<PartitionDescription>, StorageError> {
        let mut run = OpenRun::default();
        let described = self.describe_opening(tps, &mut run);
        let synced = self.sync_new_dirs(&run.dirs_due);
        let descriptions = described?;
        synced?;
        Ok(descriptions)
    }

    fn describe_opening(
        &mut self,
        tps: &[TopicPartition],
        run: &mut OpenRun,
    ) -> Result<Vec<PartitionDescription>, StorageError> {
        for tp in tps {
            self.release_unopened(tp);
        }
        self.open_partitions_together(tps, run);
        let mut descriptions = Vec::with_capacity(tps.len());
        for tp in tps {
            if let Some(released) = self.released_description(tp) {
                descriptions.push(released);
                continue;
            }
            let log = match self.partition_with(tp, Some(run)) {
                Ok(log) => log,
                Err(LookupError::Unknown) => continue,
                Err(LookupError::Open(error)) => return Err(open_error_into_storage(tp, error)),
                Err(LookupError::Offline { cause, .. }) => {
                    descriptions.push(self.offline_description(tp, cause));
                    continue;
                }
            };
            descriptions.push(PartitionDescription {
                partition: tp.partition,
                log_start_offset: log.log_start_offset(),
                log_end_offset: log.log_end_offset(),
                durable_offset: log.recovery_point(),
                size_bytes: log.size_bytes(),
                segment_count: log.segment_count(),
                offline: log.failure().map(str::to_owned),
            });
        }
        Ok(descriptions)
    }

    /// Syncs the directories of the partitions `tps` just created, together
    /// ([`Storage::sync_dirs_many`]). Each whose sync failed goes offline (open, or released
    /// since); the first failure is returned.
    fn sync_new_dirs(&mut self, tps: &[TopicPartition]) -> Result<(), StorageError> {
        if tps.is_empty() {
            return Ok(());
        }
        let dirs: Vec<PathBuf> = tps
            .iter()
            .map(|tp| self.context.root.join(partition_dir_name(tp)))
            .collect();
        let paths: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        let results = self.context.storage.sync_dirs_many(&paths);
        assert_eq!(results.len(), tps.len());
        let mut first_error = None;
        for ((tp, dir), result) in tps.iter().zip(&dirs).zip(results) {
            if let Err(source) = result {
                let error = StorageError::io("fsync directory", dir, source);
                tracing::error!("shard {}: new partition {tp} is offline: {error}", self.id);
                self.fail_new_partition(tp, &error);
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Takes `tp`, whose new directory's sync failed, offline: in its log if it is open, else
    /// (released to bound open files) as an offline partition.
    fn fail_new_partition(&mut self, tp: &TopicPartition, error: &StorageError) {
        if let Some(log) = self.partitions.get_mut(tp) {
            log.fail_dir_sync(error);
        } else if let Some(checkpoint) = self.evicted.remove(tp) {
            self.take_offline(tp.clone(), checkpoint, error);
        }
    }

    /// After a clean shutdown, takes a partition not yet opened in this process as released,
    /// from its checkpoints and its directory's listing ([`closed_log_files`]): described without
    /// opening a file, and opened (its files trusted) on first use. Not where the open has work
    /// to do: no checkpoint or segment yet, leftovers of an interrupted operation, a log start
    /// above the log end, an active segment starting past it.
    fn release_unopened(&mut self, tp: &TopicPartition) {
        if !self.context.had_clean_shutdown
            || self.partitions.contains_key(tp)
            || self.evicted.contains_key(tp)
            || self.offline.contains_key(tp)
            || self.opened.contains(tp)
            || self.refused_opens.contains(tp)
        {
            return;
        }
        let Some(&log_end_offset) = self.context.recovery_points.get(tp) else {
            return;
        };
        let known = self
            .context
            .topics
            .read()
            .is_ok_and(|topics| topics.partition_config(tp).is_some());
        let dir = self.context.root.join(partition_dir_name(tp));
        let Some(files) = known
            .then(|| closed_log_files(self.context.storage.as_ref(), &dir))
            .flatten()
        else {
            return;
        };
        let checkpointed_start = self.context.log_start_offsets.get(tp).copied();
        let log_start_offset = checkpointed_start
            .unwrap_or_default()
            .max(files.first_base_offset);
        if log_start_offset > log_end_offset || files.active_base_offset > log_end_offset {
            return;
        }
        let checkpoint = PartitionCheckpoint {
            tp: tp.clone(),
            recovery_point: log_end_offset,
            log_start_offset,
            log_end_offset,
            active_log_path: files.active_log_path,
            size_bytes: files.size_bytes,
            segment_count: files.segment_count,
        };
        self.evicted.insert(tp.clone(), checkpoint);
    }

    /// A partition never opened in this process whose open failed is not described from its
    /// checkpoints ([`Shard::release_unopened`]): its next describe tries the open again, and
    /// reports why it fails.
    fn forget_release_unopened(&mut self, tp: &TopicPartition) {
        if !self.opened.contains(tp) {
            self.evicted.remove(tp);
            self.refused_opens.insert(tp.clone());
        }
    }

    /// A partition released to bound open files, as it was when released: nothing changes its
    /// files until it is opened again, so describing it needs no open (which would release
    /// another). `None` unless it is released.
    fn released_description(&self, tp: &TopicPartition) -> Option<PartitionDescription> {
        let released = self.evicted.get(tp)?;
        Some(PartitionDescription {
            partition: tp.partition,
            log_start_offset: released.log_start_offset,
            log_end_offset: released.log_end_offset,
            durable_offset: released.recovery_point,
            size_bytes: released.size_bytes,
            segment_count: released.segment_count,
            offline: None,
        })
    }

    /// An offline, closed partition as its checkpoint knows it (its files are not read again).
    fn offline_description(&self, tp: &TopicPartition, cause: String) -> PartitionDescription {
        let checkpoint = self.offline.get(tp).map(|offline| &offline.checkpoint);
        let offset =
            |of: fn(&PartitionCheckpoint) -> Offset| checkpoint.map(of).unwrap_or_default();
        PartitionDescription {
            partition: tp.partition,
            log_start_offset: offset(|c| c.log_start_offset),
            log_end_offset: offset(|c| c.log_end_offset),
            durable_offset: offset(|c| c.recovery_point),
            size_bytes: 0,
            segment_count: 0,
            offline: Some(cause),
        }
    }

    /// Gives the open logs of `topic`'s partitions `config`, and moves their `flush.ms` timers
    /// to the new policy. Closed, released and offline partitions read the registry when they
    /// open.
    fn alter_config(&mut self, topic: &TopicName, config: &LogConfig) -> Result<(), TopicError> {
        let open: BTreeSet<TopicPartition> = self
            .partitions
            .keys()
            .filter(|tp| tp.topic == *topic)
            .cloned()
            .collect();
        for tp in &open {
            if let Some(log) = self.partitions.get_mut(tp) {
                log.set_config(config.clone())?;
            }
        }
        self.note_flush_deadlines(&open);
        Ok(())
    }

    fn drop_partitions(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            self.partitions.remove(tp);
            self.flush_deadlines.remove(tp);
            self.last_used.remove(tp);
            self.evicted.remove(tp);
            self.offline.remove(tp);
            self.opened.remove(tp);
        }
        let dropped: BTreeSet<&TopicPartition> = tps.iter().collect();
        for fetch in std::mem::take(&mut self.parked) {
            if dropped.contains(&fetch.tp) {
                let error = ReadError::UnknownPartition {
                    topic: fetch.tp.topic.to_string(),
                    partition: fetch.tp.partition,
                };
                let _ = fetch.reply.send(Err(error));
            } else {
                self.parked.push(fetch);
            }
        }
    }

    /// The partitions' offsets for the checkpoint files; none for an offline partition, whose
    /// entry keeps what was checkpointed before its failure: the device is suspect, so the next
    /// open re-validates everything written since.
    fn checkpoints(&self) -> Vec<PartitionCheckpoint> {
        let open = self
            .partitions
            .iter()
            .filter(|(_, log)| !log.is_failed())
            .map(|(tp, log)| PartitionCheckpoint::of(tp, log));
        open.chain(self.evicted.values().cloned()).collect()
    }

    /// The compacted logs of `selection`, as the cleaner sees them.
    fn cleanable_logs(
        &mut self,
        selection: CleanableSelection,
        compacted_only: bool,
    ) -> Vec<CleanableEntry> {
        let candidates: Vec<TopicPartition> = match &selection {
            CleanableSelection::Open => self.partitions.keys().cloned().collect(),
            CleanableSelection::Owned { topic } => self.owned_partitions(topic.as_ref()),
            CleanableSelection::One(tp) => self
                .partitions
                .get(tp)
                .map(|_| tp.clone())
                .into_iter()
                .collect(),
            CleanableSelection::Listed(tps) => tps
                .iter()
                .filter(|tp| (self.context.owns)(tp))
                .cloned()
                .collect(),
        };
        let compacted: Vec<TopicPartition> = {
            let topics = self
                .context
                .topics
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            candidates
                .into_iter()
                .filter(|tp| {
                    topics.partition_config(tp).is_some_and(|config| {
                        !compacted_only || config.cleanup_policy != CleanupPolicy::Delete
                    })
                })
                .collect()
        };
        let mut logs = Vec::with_capacity(compacted.len());
        for tp in compacted {
            let log = match self.partition(&tp) {
                Ok(log) if log.is_failed() => continue,
                Ok(log) => Ok(log.cleanable_log()),
                Err(LookupError::Unknown | LookupError::Offline { .. }) => continue,
                Err(LookupError::Open(error)) => Err(open_error_into_storage(&tp, error)),
            };
            logs.push((tp, log));
        }
        logs
    }

    /// Swaps a cleaned group into its log, if the log is open and still holds the group's
    /// segments unchanged; a log closed since answers `Stale` (it is not reopened for this).
    fn swap_cleaned(
        &mut self,
        tp: &TopicPartition,
        group: &CleanedGroup,
    ) -> Result<SwapOutcome, StorageError> {
        let Some(log) = self.partitions.get_mut(tp) else {
            return Ok(SwapOutcome::Stale);
        };
        let outcome = log.swap_in_cleaned(group, self.context.clock.now());
        if let Some(due) = log.next_file_deletion() {
            self.file_deletion_deadlines.insert(tp.clone(), due);
        }
        if let Err(error) = &outcome {
            tracing::error!(
                "shard {}: swapping a cleaned segment into {tp} failed: {error}",
                self.id
            );
        }
        outcome
    }

    /// Closes every partition cleanly but those offline, which keep the offsets their last
    /// successful syncs reached. After an unclean shutdown, partitions not opened since are
    /// opened (and so recovered) first: the clean-shutdown marker the engine then writes, when
    /// no partition is offline, covers them too.
    fn close(&mut self) -> Result<ShardClosed, StorageError> {
        self.settle_syncs();
        self.serve_parked(&BTreeSet::new(), true);
        if !self.context.had_clean_shutdown {
            self.recover_unopened()?;
        }
        // The open partitions close first: the released ones' syncs then open their files
        // within the descriptors those held.
        for (tp, log) in std::mem::take(&mut self.partitions) {
            let mut checkpoint = PartitionCheckpoint::of(&tp, &log);
            match log.close() {
                Ok(()) => {
                    checkpoint.recovery_point = checkpoint.log_end_offset;
                    self.evicted.insert(tp, checkpoint);
                }
                Err(error) => self.take_offline(tp, checkpoint, &error),
            }
        }
        self.sync_evicted();
        // The offline partitions' checkpoint entries keep their values from before the failure.
        let offline = std::mem::take(&mut self.offline);
        Ok(ShardClosed {
            checkpoints: std::mem::take(&mut self.evicted).into_values().collect(),
            offline: offline
                .into_iter()
                .map(|(tp, partition)| (tp, partition.cause))
                .collect(),
        })
    }

    /// Syncs released partitions that hold unsynced appends, so that the clean-shutdown marker
    /// the engine writes is true of them too: their active `.log` files, a group at a time. A
    /// partition whose sync fails goes offline.
    fn sync_evicted(&mut self) {
        let unsynced: Vec<TopicPartition> = self
            .evicted
            .values()
            .filter(|checkpoint| checkpoint.recovery_point < checkpoint.log_end_offset)
            .map(|checkpoint| checkpoint.tp.clone())
            .collect();
        let files_max = CLOSE_SYNC_FILES_MAX
            .min(self.context.open_segments_max)
            .max(1);
        for group in unsynced.chunks(files_max) {
            for (tp, result) in group.iter().zip(self.sync_active_logs(group)) {
                match result {
                    Ok(()) => {
                        if let Some(checkpoint) = self.evicted.get_mut(tp) {
                            checkpoint.recovery_point = checkpoint.log_end_offset;
                        }
                    }
                    Err(error) => {
                        if let Some(checkpoint) = self.evicted.remove(tp) {
                            self.take_offline(tp.clone(), checkpoint, &error);
                        }
                    }
                }
            }
        }
    }

    /// Opens and syncs together the active `.log` files of the released partitions `tps`.
    fn sync_active_logs(&self, tps: &[TopicPartition]) -> Vec<Result<(), StorageError>> {
        let storage = self.context.storage.as_ref();
        let paths: Vec<&Path> = tps
            .iter()
            .map(|tp| self.evicted[tp].active_log_path.as_path())
            .collect();
        let opened: Vec<Result<Box<dyn StorageFile>, StorageError>> = paths
            .iter()
            .map(|path| {
                storage
                    .open(path, crate::io::OpenMode::Existing)
                    .map_err(|source| StorageError::io("open", path, source))
            })
            .collect();
        let files: Vec<&dyn StorageFile> = opened.iter().flatten().map(AsRef::as_ref).collect();
        let mut synced = storage.sync_data_many(&files).into_iter();
        opened
            .into_iter()
            .zip(paths)
            .map(|(file, path)| {
                file?;
                match synced.next() {
                    Some(Ok(())) => Ok(()),
                    Some(Err(source)) => Err(StorageError::io("fdatasync", path, source)),
                    None => Err(StorageError::io("fdatasync", path, unanswered())),
                }
            })
            .collect()
    }

    fn recover_unopened(&mut self) -> Result<(), StorageError> {
        let owned: Vec<TopicPartition> = {
            let topics = self
                .context
                .topics
                .read()
                .map_err(|_| StorageError::Offline {
                    dir: self.context.root.clone(),
                    cause: "a thread panicked holding the topic registry".to_owned(),
                })?;
            topics
                .partitions()
                .filter(|tp| (self.context.owns)(tp) && !self.opened.contains(tp))
                .collect()
        };
        for tp in &owned {
            if let Err(LookupError::Open(error)) = self.partition(tp) {
                return Err(open_error_into_storage(tp, error));
            }
        }
        Ok(())
    }
}

/// Answers every append of `group` with an error: the first with `first_error`, the rest with
/// `later_error`.
fn answer_all(
    group: Vec<PendingAppend>,
    first_error: AppendError,
    later_error: impl Fn(&PendingAppend) -> AppendError,
) {
    let mut first = Some(first_error);
    for append in group {
        let error = first.take().unwrap_or_else(|| later_error(&append));
        let _ = append.reply.send(Err(error));
    }
}

/// A sync that the storage did not answer (it answers each file it was given).
fn unanswered() -> std::io::Error {
    std::io::Error::other("the storage gave no result for this file's sync")
}

fn open_error_into_storage(tp: &TopicPartition, error: OpenError) -> StorageError {
    match error {
        OpenError::Storage(error) => error,
        other => StorageError::Corrupt {
            file: PathBuf::from(partition_dir_name(tp)),
            position: 0,
            reason: other.to_string(),
        },
    }
}

/// Turns a lookup failure into the operation's error type.
trait FromLookup {
    fn unknown(tp: &TopicPartition) -> Self;
    fn open(tp: &TopicPartition, error: OpenError) -> Self;
    fn storage(error: StorageError) -> Self;
}

macro_rules! impl_from_lookup {
    ($error:ident) => {
        impl FromLookup for $error {
            fn unknown(tp: &TopicPartition) -> Self {
                $error::UnknownPartition {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                }
            }
            fn open(tp: &TopicPartition, error: OpenError) -> Self {
                $error::PartitionOpen {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                    source: Box::new(error),
                }
            }
            fn storage(error: StorageError) -> Self {
                $error::Storage(error)
            }
        }
    };
}

impl_from_lookup!(AppendError);
impl_from_lookup!(ReadError);
impl_from_lookup!(DeleteRecordsError);
impl_from_lookup!(TruncateError);

/// Answers the appends refused one by one (they wrote nothing) and returns the others' answers,
/// with whether one of them waits for a sync. A duplicate is answered with its group, so no
/// sooner than the writes before it, and after a sync when it asks for one and its original was
/// not synced yet.
/// Answers a fetch, counting it.
fn answer_fetch(
    metrics: &ShardMetrics,
    reply: Reply<FetchData, ReadError>,
    result: Result<FetchData, ReadError>,
) {
    metrics.fetches.increment(1);
    if let Ok(data) = &result {
        metrics.fetch_bytes.increment(data.records.len() as u64);
    }
    let _ = reply.send(result);
}

fn answer_refused(
    group: Vec<PendingAppend>,
    outcomes: Vec<AppendOutcome>,
) -> (WrittenAnswers, bool, AppendCounts) {
    let mut durable_requested = false;
    let mut answers = Vec::with_capacity(outcomes.len());
    let mut counts = AppendCounts::default();
    for (append, outcome) in group.into_iter().zip(outcomes) {
        match outcome {
            Ok(info) => {
                durable_requested |= append.durable && !info.durable;
                if !info.duplicate {
                    counts.records += info.record_count;
                    counts.batches += info.batch_count as u64;
                    counts.bytes += append.batches.size_bytes() as u64;
                }
                answers.push((append.reply, info));
            }
            Err(error) => {
                let _ = append.reply.send(Err(error));
            }
        }
    }
    (answers, durable_requested, counts)
}

/// What a partition's group appended (duplicates not counted), for the metrics.
#[derive(Debug, Default, Clone, Copy)]
struct AppendCounts {
    records: u64,
    batches: u64,
    bytes: u64,
}

fn lookup_error_into<E: FromLookup>(tp: &TopicPartition, error: LookupError) -> E {
    match error {
        LookupError::Unknown => E::unknown(tp),
        LookupError::Open(error) => E::open(tp, error),
        LookupError::Offline { dir, cause } => E::storage(StorageError::Offline { dir, cause }),
    }
}
