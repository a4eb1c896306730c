//! A shard's syncer: the threads ([`LANES`] per shard) that make the shard's written appends
//! durable and acknowledge them, so that the shard writes the next turn's appends while this
//! turn's `fdatasync` runs and the disk is not idle between group commits.
//!
//! The shard writes a turn's appends, then hands each partition that must sync to the syncer as a
//! [`SyncJob`]: the log's active `.log` file, the offset the sync covers, and the appends'
//! answers. A sync thread takes every job queued for it, syncs each file once (together, through
//! [`Storage::sync_data_many`]), answers the appends, and reports a [`SyncOutcome`] per job back
//! to the shard, which moves the log's recovery point (or fails the log).
//!
//! Invariants:
//! - a job is sent after its appends were written, so a sync that starts after the job was taken
//!   covers them: one `fdatasync` of a file serves every job queued for it;
//! - after a failed sync of a log, every later job of that log (the same partition, the same
//!   open) fails too, even when a later `fdatasync` returns success: nothing is acknowledged
//!   after a failed sync (Linux reports a lost write-back once per open file);
//! - a failed job is reported to the shard before its appends are answered, and the shard takes
//!   reports after a turn's requests, so an append sent on hearing of the failure is refused;
//! - for the same reason the shard never syncs a log's files itself while a job of that log may be
//!   queued here: it calls [`Syncer::settle`] first (before a flush, a close, a release);
//! - a roll leaves the sync of the segment it sealed to a job here (`log/seal_sync.rs`), sent
//!   before any job for the appends after it, on the same lane: a sync thread takes its jobs in
//!   order and answers them in order after syncing them, so no append in a newer segment is
//!   acknowledged as durable before the older segments are synced;
//! - the directory sync that retention's and `deleteRecords`' `.deleted` renames wait for is a
//!   job here too (`log/retention.rs`): its failure fails the log like a failed file sync.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::pending::Reply;
use super::wake::ShardWaker;
use crate::error::{AppendError, StorageError};
use crate::io::{Storage, StorageFile};
use crate::log::{AppendInfo, UnsyncedSeal};
use crate::metrics::SyncMetrics;
use crate::types::{Offset, TopicPartition};

/// The answers of one partition's written appends, with what each was given.
pub(crate) type WrittenAnswers = Vec<(Reply<AppendInfo, AppendError>, AppendInfo)>;

/// One partition's written appends, waiting for a sync of its active `.log`; or a sealed
/// segment's sync, or the directory sync after `.deleted` renames (see [`SyncKind`]).
pub(crate) struct SyncJob {
    pub tp: TopicPartition,
    /// Which open of the partition wrote them (the shard counts opens).
    pub generation: u64,
    /// The file to `fdatasync` (none for the renames' directory sync).
    pub file: Option<Arc<dyn StorageFile>>,
    /// The file's path (or the directory's) and the partition's directory, for errors.
    pub path: PathBuf,
    pub dir: PathBuf,
    /// The log end offset after the appends (or the sealed segment's end): what a successful
    /// sync makes durable.
    pub through: Offset,
    pub answers: WrittenAnswers,
    /// Bytes of the appends (for the metrics; 0 for a seal or the renames).
    pub bytes: u64,
    /// Set for the sync a roll left to the shard (`log/seal_sync.rs`): after the `.log`, the
    /// sealed segment's indexes and the partition directory are synced too; no appends wait.
    pub seal: Option<Box<UnsyncedSeal>>,
}

impl SyncJob {
    /// The job that syncs a sealed segment, for the lane of its partition's open.
    pub(crate) fn of_seal(tp: TopicPartition, generation: u64, seal: UnsyncedSeal) -> SyncJob {
        SyncJob {
            tp,
            generation,
            file: Some(Arc::clone(&seal.log_file)),
            path: seal.log_path.clone(),
            dir: seal.dir.clone(),
            through: seal.through,
            answers: Vec::new(),
            bytes: 0,
            seal: Some(Box::new(seal)),
        }
    }

    /// The job that syncs a partition's directory after `.deleted` renames (`log/retention.rs`).
    pub(crate) fn of_renames(tp: TopicPartition, generation: u64, dir: PathBuf) -> SyncJob {
        SyncJob {
            tp,
            generation,
            file: None,
            path: dir.clone(),
            dir,
            through: Offset(0),
            answers: Vec::new(),
            bytes: 0,
            seal: None,
        }
    }

    pub(crate) fn kind(&self) -> SyncKind {
        match (&self.file, &self.seal) {
            (None, _) => SyncKind::Renames,
            (Some(_), Some(_)) => SyncKind::Seal,
            (Some(_), None) => SyncKind::Appends,
        }
    }

    /// What the job syncs after its file (if it has one) synced.
    fn sync_after_file(&self, storage: &dyn Storage) -> Result<(), StorageError> {
        match (&self.seal, &self.file) {
            (Some(seal), _) => seal.sync_indexes_and_dir(storage),
            (None, None) => storage
                .sync_dir(&self.dir)
                .map_err(|source| StorageError::io("fsync directory", &self.dir, source)),
            (None, Some(_)) => Ok(()),
        }
    }
}

/// What a job made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncKind {
    /// Written appends, through the job's offset.
    Appends,
    /// A sealed segment (`log/seal_sync.rs`).
    Seal,
    /// The `.deleted` renames of retention or `deleteRecords` (`log/retention.rs`).
    Renames,
}

/// What became of one job, for the shard's bookkeeping (the appends are answered already).
#[derive(Debug)]
pub(crate) struct SyncOutcome {
    pub tp: TopicPartition,
    pub generation: u64,
    pub through: Offset,
    /// The sync's error, as text (`None`: synced).
    pub failure: Option<String>,
    pub kind: SyncKind,
}

/// What a sync thread reports to the shard.
pub(crate) enum SyncReport {
    Done(SyncOutcome),
    /// The thread panicked (in the storage layer): the jobs it held are answered `ShardFailed`
    /// (their answers were dropped), and the shard stops, as if it had panicked itself.
    Panicked,
}

enum Message {
    Job(SyncJob),
    /// Answered once every job sent before it is done and its outcome sent.
    Settle(Sender<()>),
}

/// Sync threads per shard. Each partition's jobs go to one of them (by its open), so that up to
/// this many partitions' syncs run at once and a slow sync of one does not hold the others: the
/// disk completes several concurrent `fdatasync`s faster than the same ones one after another.
const LANES: usize = 4;

/// A sync thread's way to the shard: each report wakes it.
#[derive(Clone)]
struct ReportSender {
    reports: Sender<SyncReport>,
    waker: Arc<ShardWaker>,
}

impl ReportSender {
    fn send(&self, report: SyncReport) {
        // The shard holds the receiver until its sync threads are joined.
        let _ = self.reports.send(report);
        self.waker.wake();
    }
}

/// An inline engine's lane: what a sync thread keeps, on the shard's thread.
struct InlineLane {
    storage: Arc<dyn Storage>,
    metrics: SyncMetrics,
    failed: HashMap<(TopicPartition, u64), String>,
    reports: ReportSender,
}

/// One sync thread and its queue.
struct Lane {
    messages: Sender<Message>,
    thread: JoinHandle<()>,
}

/// The shard's end of its sync threads (or, for an inline engine, of its one inline lane).
pub(crate) struct Syncer {
    lanes: Vec<Lane>,
    /// An inline engine's: jobs are synced and answered on the submitting thread.
    inline: Option<InlineLane>,
    reports: Receiver<SyncReport>,
    /// Jobs sent whose outcomes the shard has not taken yet.
    outstanding: usize,
    /// A sync thread panicked.
    panicked: bool,
}

impl Syncer {
    /// Starts the sync threads of shard `shard_id`.
    pub(crate) fn start(
        shard_id: usize,
        storage: Arc<dyn Storage>,
        waker: Arc<ShardWaker>,
    ) -> std::io::Result<Syncer> {
        let (report_sender, reports) = crossbeam_channel::unbounded();
        let report_sender = ReportSender {
            reports: report_sender,
            waker,
        };
        let metrics = SyncMetrics::new(shard_id);
        let mut lanes = Vec::with_capacity(LANES);
        for lane in 0..LANES {
            let (messages, inbox) = crossbeam_channel::unbounded();
            let storage = storage.clone();
            let metrics = metrics.clone();
            let reports = report_sender.clone();
            let thread = std::thread::Builder::new()
                .name(format!("seglog-sync-{shard_id}.{lane}"))
                .spawn(move || {
                    let run = || run(storage.as_ref(), &inbox, &reports, &metrics);
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).is_err() {
                        tracing::error!("shard {shard_id}: sync thread {lane} panicked");
                        reports.send(SyncReport::Panicked);
                    }
                })?;
            lanes.push(Lane { messages, thread });
        }
        Ok(Syncer {
            lanes,
            inline: None,
            reports,
            outstanding: 0,
            panicked: false,
        })
    }

    /// A syncer without threads, for an inline engine: each job is synced and answered in
    /// [`Syncer::submit`], in submission order, with the same rules as a sync thread's.
    pub(crate) fn inline(storage: Arc<dyn Storage>, waker: Arc<ShardWaker>) -> Syncer {
        let (reports_sender, reports) = crossbeam_channel::unbounded();
        Syncer {
            lanes: Vec::new(),
            inline: Some(InlineLane {
                storage,
                metrics: SyncMetrics::new(0),
                failed: HashMap::new(),
                reports: ReportSender {
                    reports: reports_sender,
                    waker,
                },
            }),
            reports,
            outstanding: 0,
            panicked: false,
        }
    }

    /// Hands a written group to the sync thread of its partition's open.
    pub(crate) fn submit(&mut self, job: SyncJob) {
        if let Some(lane) = &mut self.inline {
            sync_jobs(
                lane.storage.as_ref(),
                vec![job],
                &mut lane.failed,
                &lane.reports,
                &lane.metrics,
            );
            self.outstanding += 1;
            return;
        }
        let Some(lane) = self.lanes.get(job.generation as usize % LANES) else {
            return fail_job(job);
        };
        match lane.messages.send(Message::Job(job)) {
            Ok(()) => self.outstanding += 1,
            // The thread is gone (it panicked): answer here rather than never.
            Err(crossbeam_channel::SendError(Message::Job(job))) => fail_job(job),
            Err(_) => {}
        }
    }

    /// Where the reports arrive, for the shard to wait on beside its requests.
    pub(crate) fn reports(&self) -> &Receiver<SyncReport> {
        &self.reports
    }

    /// The outcome a report carries, counted as taken.
    pub(crate) fn take_report(&mut self, report: SyncReport) -> Option<SyncOutcome> {
        match report {
            SyncReport::Done(outcome) => {
                self.outstanding = self.outstanding.saturating_sub(1);
                Some(outcome)
            }
            SyncReport::Panicked => {
                self.panicked = true;
                None
            }
        }
    }

    /// The outcomes that have arrived.
    pub(crate) fn take_outcomes(&mut self) -> Vec<SyncOutcome> {
        let reports: Vec<SyncReport> = self.reports.try_iter().collect();
        reports
            .into_iter()
            .filter_map(|report| self.take_report(report))
            .collect()
    }

    /// Whether every job sent has been reported (and the report taken).
    pub(crate) fn is_idle(&self) -> bool {
        self.outstanding == 0
    }

    /// Whether a sync thread panicked: the shard must stop.
    pub(crate) fn panicked(&self) -> bool {
        self.panicked
    }

    /// Waits until every job sent so far is synced and answered; returns their outcomes.
    pub(crate) fn settle(&mut self) -> Vec<SyncOutcome> {
        if self.outstanding == 0 {
            return Vec::new();
        }
        if self.inline.is_some() {
            let outcomes = self.take_outcomes();
            self.outstanding = 0;
            return outcomes;
        }
        let (done, settled) = crossbeam_channel::bounded(self.lanes.len());
        let asked = self
            .lanes
            .iter()
            .filter(|lane| lane.messages.send(Message::Settle(done.clone())).is_ok())
            .count();
        drop(done);
        for _ in 0..asked {
            let _ = settled.recv();
        }
        let outcomes = self.take_outcomes();
        // A lane that panicked reports none of its jobs: nothing is left to wait for either way.
        self.outstanding = 0;
        outcomes
    }
}

impl Drop for Syncer {
    /// Lets the threads finish the jobs queued, then joins them.
    fn drop(&mut self) {
        for lane in std::mem::take(&mut self.lanes) {
            drop(lane.messages);
            let _ = lane.thread.join();
        }
    }
}

/// A sync thread: takes every message queued, syncs the jobs' files once each, answers.
fn run(
    storage: &dyn Storage,
    inbox: &Receiver<Message>,
    reports: &ReportSender,
    metrics: &SyncMetrics,
) {
    // Logs (partition, open) whose sync failed: their later jobs fail too.
    let mut failed: HashMap<(TopicPartition, u64), String> = HashMap::new();
    while let Ok(first) = inbox.recv() {
        let mut jobs = Vec::new();
        let mut settles = Vec::new();
        for message in std::iter::once(first).chain(inbox.try_iter()) {
            match message {
                Message::Job(job) => jobs.push(job),
                Message::Settle(done) => settles.push(done),
            }
        }
        sync_jobs(storage, jobs, &mut failed, reports, metrics);
        for done in settles {
            let _ = done.send(());
        }
    }
}

/// Syncs the files of `jobs` (each once, skipping failed logs), then answers each job and reports
/// its outcome.
fn sync_jobs(
    storage: &dyn Storage,
    jobs: Vec<SyncJob>,
    failed: &mut HashMap<(TopicPartition, u64), String>,
    reports: &ReportSender,
    metrics: &SyncMetrics,
) {
    let mut files: Vec<&dyn StorageFile> = Vec::new();
    let mut file_of_job = Vec::with_capacity(jobs.len());
    for job in &jobs {
        if failed.contains_key(&(job.tp.clone(), job.generation)) {
            file_of_job.push(None);
            continue;
        }
        let Some(file) = job.file.as_deref() else {
            file_of_job.push(None);
            continue;
        };
        let same = |other: &&dyn StorageFile| std::ptr::addr_eq(*other, file);
        let index = files.iter().position(same).unwrap_or_else(|| {
            files.push(file);
            files.len() - 1
        });
        file_of_job.push(Some(index));
    }
    let started = Instant::now();
    let mut results: Vec<Option<std::io::Result<()>>> = storage
        .sync_data_many(&files)
        .into_iter()
        .map(Some)
        .collect();
    if !files.is_empty() {
        let bytes = jobs.iter().map(|job| job.bytes).sum();
        let appends = jobs.iter().map(|job| job.answers.len()).sum();
        metrics.record(files.len(), started.elapsed().as_secs_f64(), bytes, appends);
    }
    for (job, file_index) in jobs.into_iter().zip(file_of_job) {
        let key = (job.tp.clone(), job.generation);
        let result = if let Some(cause) = failed.get(&key) {
            Err(StorageError::Offline {
                dir: job.dir.clone(),
                cause: cause.clone(),
            })
        } else {
            match file_index.and_then(|index| results[index].take()) {
                Some(Err(source)) => Err(StorageError::io("fdatasync", &job.path, source)),
                // Synced, for this job or an earlier one of the same file (whose failure would
                // have failed the log above), or no file to sync.
                _ => job.sync_after_file(storage),
            }
        };
        let failure = result.as_ref().err().map(ToString::to_string);
        let kind = job.kind();
        if let Some(cause) = &failure {
            tracing::error!("sync of {} failed: {cause}", job.path.display());
            failed.entry(key).or_insert_with(|| cause.clone());
        }
        let outcome = SyncOutcome {
            tp: job.tp,
            generation: job.generation,
            through: job.through,
            failure,
            kind,
        };
        // A failure reaches the shard before any caller hears of it: an append the caller
        // sends on hearing finds the log offline (the shard takes reports after requests).
        let failed_now = outcome.failure.is_some();
        if failed_now {
            reports.send(SyncReport::Done(outcome));
            answer_written(job.answers, Some(result), &job.dir);
        } else {
            answer_written(job.answers, Some(result), &job.dir);
            reports.send(SyncReport::Done(outcome));
        }
    }
}

/// Answers a job that could not reach the syncer: as failed, so nothing waits for ever.
fn fail_job(job: SyncJob) {
    let error = StorageError::Offline {
        dir: job.dir.clone(),
        cause: "the sync thread stopped before this sync".to_owned(),
    };
    answer_written(job.answers, Some(Err(error)), &job.dir);
}

/// Answers one partition's written appends: with their infos (durable when `synced` is
/// `Some(Ok)`), or, when the sync failed, with an error for every append — the first with the
/// sync's error, the rest with [`StorageError::Offline`]: nothing is acknowledged after a
/// failed sync.
pub(crate) fn answer_written(
    answers: WrittenAnswers,
    synced: Option<Result<(), StorageError>>,
    dir: &std::path::Path,
) {
    match synced {
        None => {
            for (reply, info) in answers {
                let _ = reply.send(Ok(info));
            }
        }
        Some(Ok(())) => {
            for (reply, info) in answers {
                let _ = reply.send(Ok(AppendInfo {
                    durable: true,
                    ..info
                }));
            }
        }
        Some(Err(error)) => {
            let cause = error.to_string();
            let mut first = Some(AppendError::Storage(error));
            for (reply, _) in answers {
                let later = || {
                    AppendError::Storage(StorageError::Offline {
                        dir: dir.to_path_buf(),
                        cause: cause.clone(),
                    })
                };
                let _ = reply.send(Err(first.take().unwrap_or_else(later)));
            }
        }
    }
}
