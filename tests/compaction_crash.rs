//! Compaction's swap killed at every step (issue 5, crash tests): the process aborts
//! (`std::process::abort`, in a storage hook) just before each storage operation of a compaction
//! that groups several small cleaned segments into one, and the directory is reopened on plain
//! storage. The reopened log must be the log before the compaction, the log after it, or a mix of
//! the two group by group (each group swapped or not): every batch CRC-valid, offsets strictly
//! increasing, every record one of the log before, every record of the log after still there, no
//! `.cleaned` or `.swap` file left — and a compaction after the reopen reaches the log after.
//!
//! The same at the engine's level: the cleaner thread writes the `.cleaned` file, the owning
//! shard swaps it in; a kill at each rename, sync, directory sync and write of a cleaned file
//! reopens to an engine serving every key's latest value with offsets increasing.
//!
//! Each kill runs in a child process: this test binary run again with `CHILD_ENV` naming the
//! scenario, the step, a template directory (the log or engine built once by the parent, ready
//! for the compaction) and the directory to copy it into (the pattern of
//! `tests/retention_crash.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use seglog::cleaner::log_cleaner::CompactionOutcome;
use seglog::cleaner::offset_map::OffsetMap;
use seglog::config::LogConfig;
use seglog::engine::{Engine, EngineConfig};
use seglog::io::hooked::StorageOp;
use seglog::io::{Storage, storage_from_env};
use seglog::log::PartitionLog;
use seglog::types::{Offset, TimestampMs, TopicName};
use support::batches::{self, Row, T0, rows_from};
use support::configs::{compacted, small_segments, with_settings};
use support::crash::{AtStep, StepHooks, abort_at_each_step, every_op, spawn_child};
use support::dirs::{copy_dir, names_ending};
use support::engines::{self, append, fetch_batches};
use support::hooks::hooked;
use support::logs::{self, log_batches, open_options};

mod support;

/// Long enough that every tombstone survives both compactions: the latest record of every key,
/// tombstone or not, is in the log after.
const DELETE_RETENTION_MS: i64 = 24 * 3_600_000;
const CHILD_ENV: &str = "SEGLOG_COMPACTION_CRASH_CHILD";
const CHILD_TEST: &str = "child_process_aborting_at_one_step";
/// Records appended before the first compaction, and after it.
const FIRST_RECORDS: u32 = 30;
const SECOND_RECORDS: u32 = 12;
/// Records 0 to 11 have six keys, the later ones only the first three: keys 3 to 5 keep their
/// latest records (one a tombstone) early in the first cleaned group, the rest of which cleans
/// away — so a reopen completing its swap sees a `.swap` ending well before the group did.
const EARLY_RECORDS: u32 = 12;
const TOPIC: &str = "latest";
/// Partition 0 gets every record; partition 1 only the first ones, so the second compaction has
/// nothing to do there (its steps would only double the children), but a kill must not harm it.
const PARTITIONS: u32 = 2;

fn log_config() -> LogConfig {
    let delete_retention_ms = DELETE_RETENTION_MS.to_string();
    let settings = [("delete.retention.ms", delete_retention_ms.as_str())];
    with_settings(compacted(small_segments(600, 64)), &settings)
}

/// The `sequence`th record appended: key `k<sequence % 6>` (`% 3` from `EARLY_RECORDS` on), a
/// 55-byte value naming `sequence`, or a tombstone for every seventh.
fn record(sequence: u32) -> (Vec<u8>, Option<Vec<u8>>) {
    let keys = if sequence < EARLY_RECORDS { 6 } else { 3 };
    let key = vec![b'k', b'0' + (sequence % keys) as u8];
    let value =
        (sequence % 7 != 3).then(|| format!("value-{sequence:08}-{}", "x".repeat(40)).into_bytes());
    (key, value)
}

/// A one-record batch of `record(sequence)`.
fn keyed_batch(sequence: u32) -> Bytes {
    let (key, value) = record(sequence);
    batches::keyed_batch(Some(&key), value.as_deref(), T0)
}

/// The latest row of every key.
fn latest_per_key(rows: &[Row]) -> BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)> {
    rows.iter()
        .map(|(offset, key, value)| (key.clone(), (*offset, value.clone())))
        .collect()
}

fn assert_offsets_increase(rows: &[Row], context: &str) {
    assert!(
        rows.windows(2).all(|pair| pair[0].0 < pair[1].0),
        "{context}: offsets strictly increasing"
    );
}

/// Names of files in `dir` ending with `.cleaned` or `.swap`.
fn compaction_leftovers(dir: &Path) -> Vec<String> {
    [names_ending(dir, ".cleaned"), names_ending(dir, ".swap")].concat()
}

// ---- The partition log ----

/// Opened as after a crash: unclean, nothing known durable, every batch re-validated.
fn open_log(storage: Arc<dyn Storage>, dir: &Path) -> PartitionLog {
    let options = open_options(false, 0, T0);
    logs::open_log(storage, dir, TOPIC, log_config(), options)
}

/// Every record of the log from its log start, each batch decoded with its CRC checked.
fn log_rows(log: &mut PartitionLog) -> Vec<Row> {
    let start = log.log_start_offset().0;
    rows_from(&log_batches(log), start)
}

fn compact(log: &mut PartitionLog, first_dirty_offset: Offset) -> CompactionOutcome {
    let mut map = OffsetMap::new(64 * 1024).unwrap();
    log.compact(
        &mut map,
        first_dirty_offset,
        DELETE_RETENTION_MS,
        TimestampMs(T0),
    )
    .unwrap()
}

/// Appends `FIRST_RECORDS`, compacts them (each segment is cleaned on its own: they are full),
/// appends `SECOND_RECORDS`. Returns the log and the first dirty offset of the next compaction.
fn build_log(storage: Arc<dyn Storage>, dir: &Path) -> (PartitionLog, Offset) {
    let mut log = open_log(storage, dir);
    for sequence in 0..FIRST_RECORDS {
        log.append(keyed_batch(sequence), TimestampMs(T0)).unwrap();
    }
    let first = compact(&mut log, Offset(0));
    assert_eq!(
        first.segments_cleaned, first.segments_written,
        "full segments are not grouped"
    );
    for sequence in FIRST_RECORDS..FIRST_RECORDS + SECOND_RECORDS {
        log.append(keyed_batch(sequence), TimestampMs(T0)).unwrap();
    }
    (log, first.first_dirty_offset)
}

/// The second compaction of the built log, the one the kills interrupt.
fn compact_again(log: &mut PartitionLog, first_dirty_offset: Offset) -> CompactionOutcome {
    compact(log, first_dirty_offset)
}

/// A built log (`build_log`), closed: each run of the second compaction starts from a copy of it
/// (building it again in every child would cost each its fsyncs).
struct LogTemplate {
    dir: tempfile::TempDir,
    first_dirty_offset: Offset,
}

impl LogTemplate {
    fn new() -> LogTemplate {
        let dir = tempfile::tempdir().unwrap();
        let (log, first_dirty_offset) = build_log(storage_from_env(), dir.path());
        log.close().unwrap();
        LogTemplate {
            dir,
            first_dirty_offset,
        }
    }

    /// A copy of the template in `dir`, opened on `storage`.
    fn open_copy(template_dir: &Path, dir: &Path, storage: Arc<dyn Storage>) -> PartitionLog {
        copy_dir(template_dir, dir);
        open_log(storage, dir)
    }
}

/// The log before and after the second compaction, as a reopen sees them.
struct LogExpected {
    before: Vec<Row>,
    after: Vec<Row>,
}

impl LogExpected {
    fn new(template: &LogTemplate) -> LogExpected {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogTemplate::open_copy(template.dir.path(), dir.path(), storage_from_env());
        let before = log_rows(&mut log);
        let outcome = compact_again(&mut log, template.first_dirty_offset);
        assert!(
            outcome.segments_cleaned > outcome.segments_written && outcome.segments_written >= 2,
            "the second compaction groups small cleaned segments, in several groups: {outcome:?}"
        );
        let after = log_rows(&mut log);
        drop(log);
        assert_eq!(
            log_rows(&mut open_log(storage_from_env(), dir.path())),
            after,
            "a reopen sees the compaction"
        );
        assert_ne!(before, after);
        LogExpected { before, after }
    }

    /// Panics unless `state` is the log before, after, or a group-by-group mix of the two.
    fn judge(&self, state: &[Row], context: &str) -> Judged {
        if state == self.before {
            return Judged::Before;
        }
        if state == self.after {
            return Judged::After;
        }
        assert_offsets_increase(state, context);
        assert!(
            state.iter().all(|row| self.before.contains(row)),
            "{context}: every record is one of the log before"
        );
        assert!(
            self.after.iter().all(|row| state.contains(row)),
            "{context}: every record of the log after is still there"
        );
        Judged::PartiallyCompacted
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    Before,
    PartiallyCompacted,
    After,
}

/// The second compaction on a copy of the template in `dir`, over storage with `hooks`.
fn compact_copy(
    template_dir: &Path,
    dir: &Path,
    first_dirty_offset: Offset,
    hooks: Arc<StepHooks>,
) {
    let mut log = LogTemplate::open_copy(template_dir, dir, hooked(hooks.clone()));
    hooks.arm();
    compact_again(&mut log, first_dirty_offset);
}

fn log_operations_in_compaction(template: &LogTemplate) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let hooks = StepHooks::new(usize::MAX, AtStep::Abort, every_op);
    let template_dir = template.dir.path();
    compact_copy(
        template_dir,
        dir.path(),
        template.first_dirty_offset,
        hooks.clone(),
    );
    hooks.operations()
}

fn run_log_child(child: &ChildSpec) {
    let hooks = StepHooks::new(child.step, AtStep::Abort, every_op);
    compact_copy(
        &child.template_dir,
        &child.dir,
        child.first_dirty_offset,
        hooks,
    );
}

#[test]
fn a_kill_at_any_step_of_a_grouping_compaction_reopens_to_before_after_or_a_mix() {
    let template = LogTemplate::new();
    let expected = LogExpected::new(&template);
    let steps = log_operations_in_compaction(&template);
    assert!(steps >= 20, "the compaction has many steps: {steps}");
    let mut judged = Vec::new();
    let killed = kill_at_each_step(
        Scenario::Log,
        &template.dir,
        template.first_dirty_offset,
        steps,
    );
    for (step, dir, abort) in killed {
        let context = format!("killed before operation {step} of {steps} ({abort})");
        let mut log = open_log(storage_from_env(), dir.path());
        assert_eq!(
            compaction_leftovers(dir.path()),
            Vec::<String>::new(),
            "{context}"
        );
        let state = log_rows(&mut log);
        judged.push(expected.judge(&state, &context));
        compact(&mut log, Offset(0));
        let compacted = log_rows(&mut log);
        assert_offsets_increase(&compacted, &context);
        assert_eq!(
            latest_per_key(&compacted),
            latest_per_key(&expected.after),
            "{context}: compacting again reaches every key's latest value"
        );
        assert_eq!(
            compacted, expected.after,
            "{context}: and exactly the log after"
        );
    }
    for kind in [Judged::Before, Judged::PartiallyCompacted, Judged::After] {
        assert!(
            judged.contains(&kind),
            "the steps span the compaction: {judged:?}"
        );
    }
}

// ---- The engine ----

fn engine_config() -> EngineConfig {
    engines::engine_config(1)
        // Only `Engine::compact` cleans: no background round moves the steps.
        .with_cleaner_backoff_ms(3_600_000)
        .with_cleaner_core(None)
        .with_retention_check_interval_ms(3_600_000)
}

/// The operations the engine-level kills count: renames, syncs and directory syncs, and writes
/// of cleaned files.
fn swap_op(op: StorageOp, path: &Path) -> bool {
    let name = path.to_string_lossy();
    let on_segment = [".cleaned", ".swap", ".log"]
        .iter()
        .any(|suffix| name.ends_with(suffix));
    match op {
        StorageOp::Rename | StorageOp::SyncData | StorageOp::SyncAll => on_segment,
        StorageOp::Write => name.ends_with(".cleaned"),
        StorageOp::SyncDir => true,
        _ => false,
    }
}

/// Every record appended to `partition`: (offset, key, value).
fn appended_rows(partition: u32) -> Vec<Row> {
    let count = match partition {
        0 => FIRST_RECORDS + SECOND_RECORDS,
        _ => FIRST_RECORDS,
    };
    (0..count)
        .map(|sequence| {
            let (key, value) = record(sequence);
            (u64::from(sequence), key, value)
        })
        .collect()
}

fn append_to_engine(
    engine: &Engine,
    topic: &TopicName,
    partitions: std::ops::Range<u32>,
    sequences: std::ops::Range<u32>,
) {
    for sequence in sequences {
        for partition in partitions.clone() {
            append(engine, topic, partition, keyed_batch(sequence));
        }
    }
}

/// Creates the topic, appends, compacts, appends more, flushes: ready for a second compaction.
fn build_engine(storage: Arc<dyn Storage>, dir: &Path) -> Engine {
    let engine = Engine::open_with_storage(dir, engine_config(), storage).unwrap();
    let topic = engine
        .create_topic(TOPIC, PARTITIONS, log_config())
        .unwrap();
    append_to_engine(&engine, &topic, 0..PARTITIONS, 0..FIRST_RECORDS);
    for report in engine.compact(None).unwrap() {
        report.outcome.unwrap();
    }
    let second = FIRST_RECORDS..FIRST_RECORDS + SECOND_RECORDS;
    append_to_engine(&engine, &topic, 0..1, second);
    engine.flush_all().unwrap();
    engine
}

fn engine_rows(engine: &Engine, partition: u32) -> Vec<Row> {
    let topic = TopicName::parse(TOPIC).unwrap();
    rows_from(&fetch_batches(engine, &topic, partition), 0)
}

/// A built engine directory (`build_engine`), closed: each run of the second compaction starts
/// from a copy of it.
fn engine_template() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    build_engine(storage_from_env(), dir.path())
        .close()
        .unwrap();
    dir
}

fn open_engine_copy(template_dir: &Path, dir: &Path, storage: Arc<dyn Storage>) -> Engine {
    copy_dir(template_dir, dir);
    Engine::open_with_storage(dir, engine_config(), storage).unwrap()
}

/// A copy of the engine template in `dir` over storage with `hooks`, which are then armed.
fn armed_engine_copy(template_dir: &Path, dir: &Path, hooks: Arc<StepHooks>) -> Engine {
    let engine = open_engine_copy(template_dir, dir, hooked(hooks.clone()));
    hooks.arm();
    engine
}

fn engine_operations_in_compaction(template_dir: &Path) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let hooks = StepHooks::new(usize::MAX, AtStep::Abort, swap_op);
    let engine = armed_engine_copy(template_dir, dir.path(), hooks.clone());
    let reports = engine.compact(None).unwrap();
    let operations = hooks.operations();
    let outcomes: Vec<_> = reports
        .into_iter()
        .map(|report| (report.topic_partition.partition, report.outcome.unwrap()))
        .collect();
    let grouped = outcomes.iter().any(|(partition, outcome)| {
        *partition == 0 && outcome.segments_cleaned > outcome.segments_written
    });
    assert!(
        grouped,
        "the engine's second compaction groups partition 0's segments: {outcomes:?}"
    );
    engine.close().unwrap();
    operations
}

fn run_engine_child(child: &ChildSpec) {
    let hooks = StepHooks::new(child.step, AtStep::Abort, swap_op);
    let engine = armed_engine_copy(&child.template_dir, &child.dir, hooks);
    let _ = engine.compact(None);
}

/// Every partition of the reopened engine serves each key's latest value, offsets increasing,
/// only records appended, no `.cleaned` or `.swap` file left.
fn check_engine_partitions(engine: &Engine, root: &Path, context: &str) {
    for partition in 0..PARTITIONS {
        let context = format!("{context}, partition {partition}");
        let rows = engine_rows(engine, partition);
        let appended = appended_rows(partition);
        assert_offsets_increase(&rows, &context);
        assert!(
            rows.iter().all(|row| appended.contains(row)),
            "{context}: every record is one appended"
        );
        assert_eq!(
            latest_per_key(&rows),
            latest_per_key(&appended),
            "{context}: every key's latest value"
        );
        let partition_dir = root.join(format!("{TOPIC}-{partition}"));
        assert_eq!(
            compaction_leftovers(&partition_dir),
            Vec::<String>::new(),
            "{context}"
        );
    }
}

#[test]
fn a_kill_at_any_step_of_an_engine_compaction_reopens_to_every_latest_value() {
    let template = engine_template();
    let steps = engine_operations_in_compaction(template.path());
    assert!(
        steps >= 10,
        "the engine's compaction has many steps: {steps}"
    );
    let mut aborts = Vec::new();
    for (step, dir, abort) in kill_at_each_step(Scenario::Engine, &template, Offset(0), steps) {
        let context = format!("engine killed before operation {step} of {steps} ({abort})");
        let engine = Engine::open(dir.path(), engine_config()).unwrap();
        check_engine_partitions(&engine, dir.path(), &context);
        for report in engine.compact(None).unwrap() {
            assert!(
                report.outcome.is_ok(),
                "{context}: compacting again: {report:?}"
            );
        }
        check_engine_partitions(&engine, dir.path(), &format!("{context}, compacted again"));
        engine.close().unwrap();
        aborts.push(abort);
    }
    let cleaner_writing = aborts.iter().any(|abort| {
        abort.contains("op=Write")
            && abort.contains(".cleaned ")
            && abort.contains("thread=seglog-cleaner")
    });
    let shard_swapping = aborts.iter().any(|abort| {
        abort.contains("op=Rename")
            && abort.contains(".swap ")
            && abort.contains("thread=seglog-shard")
    });
    assert!(
        cleaner_writing && shard_swapping,
        "kills in the cleaner thread's write and in the shard's swap: {aborts:#?}"
    );
}

// ---- Children ----

#[derive(Debug, Clone, Copy)]
enum Scenario {
    Log,
    Engine,
}

/// What a child is to do, passed in `CHILD_ENV` as `scenario:step:first dirty:template:dir`.
#[derive(Debug)]
struct ChildSpec {
    scenario: String,
    step: usize,
    first_dirty_offset: Offset,
    template_dir: PathBuf,
    dir: PathBuf,
}

impl ChildSpec {
    fn parse(spec: &str) -> ChildSpec {
        let mut parts = spec.splitn(5, ':');
        let mut next = || parts.next().unwrap().to_owned();
        ChildSpec {
            scenario: next(),
            step: next().parse().unwrap(),
            first_dirty_offset: Offset(next().parse().unwrap()),
            template_dir: PathBuf::from(next()),
            dir: PathBuf::from(next()),
        }
    }
}

/// Runs a child aborting before each operation `1..=steps` of the scenario's compaction of a
/// copy of `template`, a few at a time; returns each step's directory and the child's account
/// of the operation it aborted before.
fn kill_at_each_step(
    scenario: Scenario,
    template: &tempfile::TempDir,
    first_dirty_offset: Offset,
    steps: usize,
) -> Vec<(usize, tempfile::TempDir, String)> {
    let spawn = |step: usize| {
        spawn_child(CHILD_TEST, CHILD_ENV, |dir| {
            let template = template.path().display();
            let first_dirty = first_dirty_offset.0;
            format!(
                "{scenario:?}:{step}:{first_dirty}:{template}:{}",
                dir.display()
            )
        })
    };
    abort_at_each_step(steps, spawn, &format!("{scenario:?}"))
}

/// The child side of the kill tests: copies the template into the directory it is given and
/// aborts before the given operation of the compaction (`CHILD_ENV`, see `ChildSpec`).
#[test]
#[ignore = "run only as a child process by the kill tests of this file"]
fn child_process_aborting_at_one_step() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        // Run by `cargo test -- --ignored` rather than by a parent: nothing to do.
        return;
    };
    let child = ChildSpec::parse(&spec);
    match child.scenario.as_str() {
        "Log" => run_log_child(&child),
        "Engine" => run_engine_child(&child),
        other => panic!("unknown scenario {other}"),
    }
    panic!("{child:?}: the compaction ended before the step");
}
