//! Retention's deletion steps interrupted (issue 5, crash tests): for time, size and
//! log-start-offset retention (and a pass that rolls the active segment first), every storage
//! operation of a successful pass — `apply_retention`, then `delete_expired_files` once
//! `file.delete.delay.ms` has passed — is failed with EIO in turn, and separately the process is
//! killed (`abort`) just before it. Reopening the directory on plain storage must give the log
//! before the pass or the log after it: every batch CRC-valid, offsets dense, nothing lost from the
//! retained range, nothing duplicated. Segments go one at a time, oldest first, so an interrupted
//! pass that deletes several segments may also leave the log with only its oldest ones gone: the
//! before-log with a whole-segment prefix removed (a retention regression, never a gap).
//!
//! Also: a failed rename is finished before any later segment goes (else a reopen finds a gap), a
//! failed unlink is retried, and an engine whose retention rename fails keeps serving the
//! partition and reports the error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig};
use seglog::error::{ReadError, StorageError};
use seglog::format::Batch;
use seglog::format::batch::BatchIter;
use seglog::io::hooked::{StorageHooks, StorageOp};
use seglog::io::{Storage, storage_from_env};
use seglog::log::{LogOpenOptions, PartitionLog};
use seglog::types::{Offset, TimestampMs, TopicName};
use support::batches::{T0, keyed_batch};
use support::configs::{DELAY_MS, retention_config};
use support::crash::{AtStep, StepHooks, abort_at_each_step, every_op, spawn_child};
use support::dirs::{count_ending, names_ending};
use support::engines::{self, append, try_fetch_batches};
use support::hooks::hooked;
use support::logs::{self, open_options};

mod support;

const HOUR: i64 = 3_600_000;
/// Names the scenario, step and directory of a child process that is to abort (see
/// `child_process_aborting_at_one_step`).
const CHILD_ENV: &str = "SEGLOG_RETENTION_CRASH_CHILD";
const CHILD_TEST: &str = "child_process_aborting_at_one_step";

/// One retention pass over a freshly built log.
#[derive(Debug, Clone, Copy)]
enum Scenario {
    /// `retention.hours=10` at T0 + 25 h over 20 hourly batches: segments 0, 4 and 8 go.
    Time,
    /// `retention.bytes` = 9 batches over 20 batches: segments 0 and 4 go.
    Size,
    /// Opened with a log-start-offset checkpoint of 9: segments 0 and 4 lie below it and go.
    LogStart,
    /// `retention.ms=1000` long after 10 batches: the active segment is rolled, then 0, 4, 8 go.
    RollFirst,
}

const SCENARIOS: [Scenario; 4] = [
    Scenario::Time,
    Scenario::Size,
    Scenario::LogStart,
    Scenario::RollFirst,
];

impl Scenario {
    fn parse(name: &str) -> Scenario {
        *SCENARIOS
            .iter()
            .find(|scenario| format!("{scenario:?}") == name)
            .expect("a scenario name")
    }

    fn config(self) -> LogConfig {
        let size_limit = (9 * batch(0).len()).to_string();
        let setting = match self {
            Scenario::Time => Some(("retention.hours", "10")),
            Scenario::Size => Some(("retention.bytes", size_limit.as_str())),
            Scenario::LogStart => None,
            Scenario::RollFirst => Some(("retention.ms", "1000")),
        };
        config(setting)
    }

    fn batch_count(self) -> i64 {
        match self {
            Scenario::RollFirst => 10,
            _ => 20,
        }
    }

    fn log_start_checkpoint(self) -> Option<Offset> {
        match self {
            Scenario::LogStart => Some(Offset(9)),
            _ => None,
        }
    }

    fn now(self) -> TimestampMs {
        match self {
            Scenario::RollFirst => TimestampMs(T0 + 100 * HOUR),
            _ => TimestampMs(T0 + 25 * HOUR),
        }
    }

    /// Builds the log in `dir` on `storage` (hooks not yet armed).
    /// (The log start checkpoint is given to the reopen after the appends: an empty log opened
    /// with it would start there.)
    fn build(self, storage: Arc<dyn Storage>, dir: &Path) -> PartitionLog {
        let mut log = open(storage.clone(), dir, self.config(), None);
        for offset in 0..self.batch_count() {
            let at = T0 + offset * HOUR;
            log.append(batch(offset), TimestampMs(at)).unwrap();
        }
        if self.log_start_checkpoint().is_none() {
            return log;
        }
        drop(log);
        open(storage, dir, self.config(), self.log_start_checkpoint())
    }

    /// The pass: retention now, then the unlinking of `.deleted` files once their delay passed.
    fn run_pass(self, log: &mut PartitionLog) -> Result<(), StorageError> {
        log.apply_retention(self.now())?;
        log.delete_expired_files(TimestampMs(self.now().0 + DELAY_MS))?;
        Ok(())
    }

    /// The pass again after a failure, as the engine's next retention turn would run it: every
    /// pending deletion is then driven to its end.
    fn retry_pass(self, log: &mut PartitionLog) -> Result<(), StorageError> {
        log.apply_retention(self.now())?;
        while let Some(due) = log.next_file_deletion() {
            log.delete_expired_files(due)?;
        }
        Ok(())
    }

    fn reopen(self, dir: &Path) -> PartitionLog {
        open(
            storage_from_env(),
            dir,
            self.config(),
            self.log_start_checkpoint(),
        )
    }
}

fn config(setting: Option<(&str, &str)>) -> LogConfig {
    retention_config(setting.as_slice())
}

/// Opened as after a crash: unclean, nothing known durable, so every batch is re-validated.
fn open(
    storage: Arc<dyn Storage>,
    dir: &Path,
    config: LogConfig,
    log_start_offset: Option<Offset>,
) -> PartitionLog {
    let options = LogOpenOptions {
        log_start_offset,
        ..open_options(false, 0, T0)
    };
    logs::open_log(storage, dir, "events", config, options)
}

/// One batch of one 200-byte record whose value names `offset`, stamped `T0 + offset hours`:
/// four batches (of 275 bytes) fill a 1100-byte segment.
fn batch(offset: i64) -> Bytes {
    stamped_batch(offset, T0 + offset * HOUR)
}

/// [`batch`] stamped `timestamp_ms`.
fn stamped_batch(offset: i64, timestamp_ms: i64) -> Bytes {
    let mut value = format!("record-{offset:06}-").into_bytes();
    value.resize(200, b'x');
    keyed_batch(Some(b"k"), Some(&value), timestamp_ms)
}

/// What a reader can see of a log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LogState {
    log_start_offset: u64,
    log_end_offset: u64,
    /// (base offset, record value) of every batch from the log start on.
    batches: Vec<(i64, Bytes)>,
}

impl LogState {
    /// Reads every batch from the log start to the log end, checking each CRC (by decoding) and
    /// that offsets are dense: no gap, no duplicate.
    fn read(log: &mut PartitionLog) -> LogState {
        let log_start_offset = log.log_start_offset().0;
        let log_end_offset = log.log_end_offset().0;
        let mut batches = Vec::new();
        let mut next = log_start_offset;
        while next < log_end_offset {
            let records = log.read(Offset(next), 1 << 20).unwrap().records;
            assert!(
                !records.is_empty(),
                "offset {next} below the log end reads nothing"
            );
            for batch in BatchIter::new(records, u64::MAX) {
                let batch = batch.expect("every batch decodes with a valid CRC");
                let base = batch.base_offset();
                assert!(
                    base as u64 <= next && next <= batch.last_offset() as u64,
                    "offsets are dense: expected {next}, found a batch at {base}"
                );
                let value = batch.records().unwrap()[0].value.clone().unwrap();
                batches.push((base, value));
                next = batch.last_offset() as u64 + 1;
            }
        }
        LogState {
            log_start_offset,
            log_end_offset,
            batches,
        }
    }

    /// This log with every batch below `start` gone and its log start moved there.
    fn starting_at(&self, start: u64) -> LogState {
        LogState {
            log_start_offset: start,
            log_end_offset: self.log_end_offset,
            batches: self
                .batches
                .iter()
                .filter(|(base, _)| *base as u64 >= start)
                .cloned()
                .collect(),
        }
    }
}

/// Which of the allowed states a reopened log is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    Before,
    /// Only the oldest of the segments the pass deletes are gone.
    OldestSegmentsGone,
    After,
}

/// The log before and after a successful pass (both as a reopen sees them), and the base
/// offsets of the segments the pass deletes.
#[derive(Debug)]
struct Expected {
    before: LogState,
    after: LogState,
    deleted_bases: Vec<u64>,
}

impl Expected {
    fn of(scenario: Scenario) -> Expected {
        let dir = tempfile::tempdir().unwrap();
        let log = scenario.build(storage_from_env(), dir.path());
        let bases_before: Vec<u64> = log.segments().map(|info| info.base_offset.0).collect();
        drop(log);
        let mut log = scenario.reopen(dir.path());
        let before = LogState::read(&mut log);
        scenario.run_pass(&mut log).unwrap();
        let after_in_memory = LogState::read(&mut log);
        let bases_after: Vec<u64> = log.segments().map(|info| info.base_offset.0).collect();
        drop(log);
        let after = LogState::read(&mut scenario.reopen(dir.path()));
        assert_eq!(
            after, after_in_memory,
            "{scenario:?}: a reopen sees the pass"
        );
        assert_eq!(
            deleted_file_count(dir.path()),
            0,
            "{scenario:?}: nothing left after the delay"
        );
        let deleted_bases = bases_before
            .into_iter()
            .filter(|base| !bases_after.contains(base))
            .collect::<Vec<_>>();
        assert!(
            deleted_bases.len() >= 2,
            "{scenario:?} deletes several segments: {deleted_bases:?}"
        );
        Expected {
            before,
            after,
            deleted_bases,
        }
    }

    /// Panics unless `reopened` is the before-log, the after-log, or the before-log with only
    /// its oldest deleted segments gone.
    fn judge(&self, reopened: &LogState, context: &str) -> Judged {
        if *reopened == self.before {
            return Judged::Before;
        }
        if *reopened == self.after {
            return Judged::After;
        }
        let start = reopened.log_start_offset;
        let between = self.before.log_start_offset < start && start < self.after.log_start_offset;
        assert!(
            between && self.deleted_bases.contains(&start),
            "{context}: log start {start} is neither before ({}) nor after ({}) nor a deleted \
             segment's base {:?}",
            self.before.log_start_offset,
            self.after.log_start_offset,
            self.deleted_bases
        );
        assert_eq!(
            *reopened,
            self.before.starting_at(start),
            "{context}: every batch from {start} on, as before"
        );
        Judged::OldestSegmentsGone
    }
}

fn deleted_file_count(dir: &Path) -> usize {
    count_ending(dir, ".deleted")
}

/// `scenario`'s log built in `dir` over storage whose hooks, armed, do `at_step` at operation
/// `step` of what follows.
fn armed(
    scenario: Scenario,
    dir: &Path,
    step: usize,
    at_step: AtStep,
) -> (PartitionLog, Arc<StepHooks>) {
    let hooks = StepHooks::new(step, at_step, every_op);
    let log = scenario.build(hooked(hooks.clone()), dir);
    hooks.arm();
    (log, hooks)
}

/// Runs `check` for every scenario, with what its pass must leave and how many operations the
/// pass performs, each on its own thread (most of the time goes to fsync).
fn for_each_scenario(check: impl Fn(Scenario, Expected, usize) + Sync) {
    std::thread::scope(|scope| {
        for scenario in SCENARIOS {
            let check = &check;
            scope.spawn(move || {
                let expected = Expected::of(scenario);
                check(scenario, expected, operations_in_pass(scenario))
            });
        }
    });
}

/// How many storage operations a successful pass of `scenario` performs.
fn operations_in_pass(scenario: Scenario) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, hooks) = armed(scenario, dir.path(), usize::MAX, AtStep::FailWithEio);
    scenario.run_pass(&mut log).unwrap();
    let count = hooks.operations();
    assert!(
        count >= 13,
        "{scenario:?}: two or more segments' three renames and three unlinks, and a directory \
         sync: {count}"
    );
    count
}

/// For each operation of `scenario`'s pass in turn (`steps` of them): the log built in a new
/// directory and its pass run failing that operation with EIO, which must be reported; then
/// `check(step, directory, log)`.
fn for_each_failed_pass(
    scenario: Scenario,
    steps: usize,
    mut check: impl FnMut(usize, &Path, PartitionLog),
) {
    for step in 1..=steps {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = armed(scenario, dir.path(), step, AtStep::FailWithEio);
        let result = scenario.run_pass(&mut log);
        assert!(
            result.is_err(),
            "{scenario:?}: the failed operation {step} of {steps} is reported"
        );
        check(step, dir.path(), log);
    }
}

/// The interrupted passes reopened both to the log before and to the log after. (Log-start
/// retention removes only records already below the log start: its before and after look the
/// same to a reader.)
fn assert_span_the_pass(scenario: Scenario, expected: &Expected, judged: &[Judged]) {
    let after_seen = judged.contains(&Judged::After) || expected.before == expected.after;
    assert!(
        judged.contains(&Judged::Before) && after_seen,
        "{scenario:?}: the steps span the pass: {judged:?}"
    );
}

#[test]
fn an_io_failure_at_any_step_of_a_retention_pass_reopens_to_before_or_after() {
    for_each_scenario(|scenario, expected, steps| {
        let mut judged = Vec::new();
        for_each_failed_pass(scenario, steps, |step, dir, log| {
            drop(log);
            let reopened = LogState::read(&mut scenario.reopen(dir));
            let context = format!("{scenario:?}, EIO at operation {step} of {steps}");
            judged.push(expected.judge(&reopened, &context));
        });
        assert_span_the_pass(scenario, &expected, &judged);
    });
}

#[test]
fn after_an_io_failure_at_any_step_the_next_pass_completes_the_deletion() {
    for_each_scenario(|scenario, expected, steps| {
        let mut fail_stopped = Vec::new();
        for_each_failed_pass(scenario, steps, |step, dir, mut log| {
            let context = format!("{scenario:?}, EIO at operation {step} of {steps}, then again");
            match scenario.retry_pass(&mut log) {
                Ok(()) => {
                    assert_eq!(LogState::read(&mut log), expected.after, "{context}");
                    drop(log);
                    assert_eq!(deleted_file_count(dir), 0, "{context}: no .deleted");
                    let reopened = LogState::read(&mut scenario.reopen(dir));
                    assert_eq!(reopened, expected.after, "{context}: a reopen sees it");
                }
                // A failed sync — sealing the rolled segment, or of the directory — stops the log
                // until it is reopened (RELIABILITY F8: fsyncgate applies to directories too);
                // the reopened log then finishes the pass.
                Err(StorageError::Offline { .. }) => {
                    fail_stopped.push(step);
                    drop(log);
                    let mut reopened = scenario.reopen(dir);
                    expected.judge(&LogState::read(&mut reopened), &context);
                    scenario.retry_pass(&mut reopened).unwrap();
                    assert_eq!(LogState::read(&mut reopened), expected.after, "{context}");
                }
                Err(error) => panic!("{context}: {error}"),
            }
        });
        // A failed sync, roll or rename stops the log; a failed unlink of a `.deleted` file
        // (garbage whichever way it went) does not, and the pass has an unlink per file.
        assert!(
            !fail_stopped.is_empty() && fail_stopped.len() < steps,
            "{scenario:?}: a failed rename or sync stops the log, a failed unlink does not: \
             {fail_stopped:?} of {steps}"
        );
    });
}

#[test]
fn a_kill_at_any_step_of_a_retention_pass_reopens_to_before_or_after() {
    for_each_scenario(|scenario, expected, steps| {
        let spawn = |step: usize| {
            spawn_child(CHILD_TEST, CHILD_ENV, |dir| {
                format!("{scenario:?}:{step}:{}", dir.display())
            })
        };
        let mut judged = Vec::new();
        for (step, dir, _) in abort_at_each_step(steps, spawn, &format!("{scenario:?}")) {
            let reopened = LogState::read(&mut scenario.reopen(dir.path()));
            let context = format!("{scenario:?}, killed before operation {step}");
            judged.push(expected.judge(&reopened, &context));
        }
        assert_span_the_pass(scenario, &expected, &judged);
    });
}

/// The child side of `a_kill_at_any_step_of_a_retention_pass_reopens_to_before_or_after`: builds
/// the scenario's log in the directory it is given and aborts before the given operation of the
/// pass (`scenario:step:dir` in `SEGLOG_RETENTION_CRASH_CHILD`).
#[test]
#[ignore = "run only as a child process by a_kill_at_any_step_of_a_retention_pass_reopens_to_before_or_after"]
fn child_process_aborting_at_one_step() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        // Run by `cargo test -- --ignored` rather than by the parent: nothing to do.
        return;
    };
    let mut parts = spec.splitn(3, ':');
    let scenario = Scenario::parse(parts.next().unwrap());
    let step: usize = parts.next().unwrap().parse().unwrap();
    let dir = Path::new(parts.next().unwrap());
    let (mut log, _) = armed(scenario, dir, step, AtStep::Abort);
    let _ = scenario.run_pass(&mut log);
    panic!("{scenario:?}: the pass ended before operation {step}");
}

/// Hooks that fail, once, the first operation `op` on a path ending with `suffix`.
#[derive(Debug)]
struct FailOnce {
    op: StorageOp,
    suffix: &'static str,
    fired: AtomicBool,
}

impl FailOnce {
    fn new(op: StorageOp, suffix: &'static str) -> Arc<FailOnce> {
        Arc::new(FailOnce {
            op,
            suffix,
            fired: AtomicBool::new(false),
        })
    }

    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl StorageHooks for FailOnce {
    fn before(&self, op: StorageOp, path: &Path) -> io::Result<()> {
        if op == self.op
            && path.to_string_lossy().ends_with(self.suffix)
            && !self.fired.swap(true, Ordering::SeqCst)
        {
            return Err(io::Error::from_raw_os_error(5));
        }
        Ok(())
    }
}

fn live_log_files(dir: &Path) -> Vec<String> {
    names_ending(dir, ".log")
}

/// A failed rename takes the log offline (which name the device holds is unknown): it serves
/// nothing until reopened, and the reopened log, whose live files are still a suffix, finishes
/// the deletion with no gap.
#[test]
fn a_failed_rename_takes_the_log_offline_and_the_reopened_log_finds_no_gap() {
    let scenario = Scenario::Time;
    let expected = Expected::of(scenario);
    let dir = tempfile::tempdir().unwrap();
    let hooks = FailOnce::new(StorageOp::Rename, "00000000000000000004.log");
    let mut log = scenario.build(hooked(hooks.clone()), dir.path());
    assert!(
        log.apply_retention(scenario.now()).is_err(),
        "the failed rename is reported"
    );
    assert!(hooks.fired());
    assert!(
        matches!(
            log.read(log.log_start_offset(), 1 << 20),
            Err(ReadError::Storage(StorageError::Offline { .. }))
        ),
        "the offline log serves nothing"
    );
    drop(log);
    let mut reopened = scenario.reopen(dir.path());
    expected.judge(
        &LogState::read(&mut reopened),
        "reopened after the failed rename",
    );
    // Two hours later segment [12, 16) expires too; segments 4 and 8 must go before it does.
    let later = TimestampMs(scenario.now().0 + 2 * HOUR);
    reopened.apply_retention(later).unwrap();
    assert_eq!(reopened.log_start_offset(), Offset(16));
    assert_eq!(
        live_log_files(dir.path()),
        [format!("{:020}.log", 16)],
        "no segment below the log start keeps its live name"
    );
    drop(reopened);
    let reopened = LogState::read(&mut scenario.reopen(dir.path()));
    assert_eq!(reopened, expected.before.starting_at(16));
}

#[test]
fn a_failed_unlink_of_deleted_files_is_retried_by_the_next_call() {
    let scenario = Scenario::Time;
    let dir = tempfile::tempdir().unwrap();
    let hooks = FailOnce::new(StorageOp::RemoveFile, "00000000000000000004.log.deleted");
    let mut log = scenario.build(hooked(hooks.clone()), dir.path());
    let outcome = log.apply_retention(scenario.now()).unwrap();
    assert_eq!(outcome.segments_deleted, 3);
    assert_eq!(deleted_file_count(dir.path()), 9);
    let due = TimestampMs(scenario.now().0 + DELAY_MS);
    assert!(
        log.delete_expired_files(due).is_err(),
        "the failed unlink is reported"
    );
    assert!(hooks.fired());
    assert!(
        log.next_file_deletion().is_some(),
        "the files that stayed are still scheduled"
    );
    let retry_at = log.next_file_deletion().unwrap();
    log.delete_expired_files(retry_at).unwrap();
    assert_eq!(
        deleted_file_count(dir.path()),
        0,
        "every .deleted file is gone without a reopen"
    );
    assert_eq!(log.next_file_deletion(), None);
}

fn engine_config() -> EngineConfig {
    engines::engine_config(1)
}

/// Eight batches from 2023 (two segments), then eight stamped now (two segments).
fn fill_engine_partition(engine: &Engine, topic: &TopicName) {
    for offset in 0..16 {
        let record = match offset {
            0..8 => batch(offset),
            _ => stamped_batch(offset, TimestampMs::now().0),
        };
        append(engine, topic, 0, record);
    }
}

/// The base offsets of every batch from `from` to the log end, fetched a segment at a time.
fn fetch_offsets(engine: &Engine, topic: &TopicName, from: u64) -> Result<Vec<i64>, ReadError> {
    let batches = try_fetch_batches(engine, topic, 0, from)?;
    Ok(batches.iter().map(Batch::base_offset).collect())
}

/// In the engine, the partition whose rename failed goes offline: its fetches and appends fail,
/// close writes no clean-shutdown marker, and the reopened engine serves the retained records and
/// finishes the deletion.
#[test]
fn an_engine_whose_retention_rename_fails_takes_the_partition_offline_until_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = FailOnce::new(StorageOp::Rename, "00000000000000000004.log");
    let engine =
        Engine::open_with_storage(dir.path(), engine_config(), hooked(hooks.clone())).unwrap();
    let topic = engine
        .create_topic("aging", 1, config(Some(("retention.hours", "24"))))
        .unwrap();
    fill_engine_partition(&engine, &topic);
    let reports = engine.apply_retention(Some("aging")).unwrap();
    assert!(hooks.fired());
    assert!(
        matches!(reports[0].outcome, Err(StorageError::Io { .. })),
        "the failure is reported: {:?}",
        reports[0].outcome
    );
    assert!(matches!(
        fetch_offsets(&engine, &topic, 8),
        Err(ReadError::Storage(StorageError::Offline { .. }))
    ));
    assert!(
        engine
            .append(&topic, 0, batch(16), Durability::Written)
            .wait()
            .is_err(),
        "appends are refused"
    );
    assert!(
        engine.close().is_err(),
        "close reports the offline partition"
    );
    assert!(!dir.path().join(".kafka_cleanshutdown").exists());
    let engine = Engine::open(dir.path(), engine_config()).unwrap();
    assert_eq!(
        fetch_offsets(&engine, &topic, 8).unwrap(),
        (8..16).collect::<Vec<_>>(),
        "the reopened engine serves the retained records"
    );
    let again = engine.apply_retention(Some("aging")).unwrap();
    assert!(again[0].outcome.is_ok(), "{:?}", again[0].outcome);
    engine.close().unwrap();
    assert_eq!(
        live_log_files(&dir.path().join("aging-0")),
        [8, 12].map(|base| format!("{base:020}.log")),
        "the segment whose rename failed went on the next pass"
    );
}
