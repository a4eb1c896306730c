//! The crash matrix over named failpoints (issue 7, R05, R06, R20): a workload that appends,
//! flushes, rolls, checkpoints, deletes records, applies retention and compacts passes every
//! point of `seglog::failpoint::NAMES`. For each point, the step fails with an injected error
//! (`return`), or the process aborts right there (a child process); the directory then reopens
//! and must keep the promise: every acknowledged record (flushed before its ack was written) is
//! there, or superseded by a later record of its key (compaction), or below the log start
//! offset (retention); every record read is the one written at its offset; offsets increase.
//!
//! The workload runs at two layers. Through the inline engine (`EngineConfig::inline`: the
//! shard's code on the test's thread), as an embedder drives it: appends, flushes, DeleteRecords,
//! retention and compaction requests, checkpoints and a clean close; it passes every point but
//! the two that only the partition log's own directory sync and unlink pass
//! ([`LOG_ONLY`]: the engine's shard hands those to its syncer and its file deleter). And on the
//! `PartitionLog` directly, with the same steps and an explicit roll, which passes every point
//! but the checkpoint file's: there the test keeps the recovery point and log start offset a
//! checkpoint would hold, and whether the log closed cleanly, in its acknowledgement file, and
//! reopens the log with them (`LogOpenOptions`). Each point is injected at each layer that
//! passes it.
//!
//! Runs only with `--features failpoints` (see Cargo.toml).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use seglog::cleaner::offset_map::OffsetMap;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine};
use seglog::failpoint::NAMES;
use seglog::format::Batch;
use seglog::io::storage_from_env;
use seglog::log::{LogOpenOptions, LogWriteMode, PartitionLog};
use seglog::types::{Offset, TimestampMs, TopicName};
use support::batches::{T0, keyed_batch, records_from, text};
use support::configs::{small_segments, with_settings};
use support::engines::{inline_config, try_fetch_batches};
use support::logs::{log_batches, try_open_log};

mod support;

const KEYS: u64 = 5;
const CHILD_ENV: &str = "SEGLOG_FAILPOINT_CHILD";
const TOPIC: &str = "matrix";

/// The points only the partition log's own steps pass: its directory sync after `.deleted`
/// renames and its unlink of `.deleted` files. The engine's shard takes both from its logs
/// (`take_renames_sync`, `take_expired_files`) and runs them on its syncer and its file deleter,
/// past neither point.
const LOG_ONLY: &[&str] = &["retention.before_dir_sync", "retention.before_unlink"];

fn topic() -> TopicName {
    TopicName::parse(TOPIC).unwrap()
}

fn config() -> LogConfig {
    let settings = [
        ("cleanup.policy", "compact,delete"),
        ("file.delete.delay.ms", "0"),
        ("delete.retention.ms", "0"),
        // The engine applies retention at the wall clock's time: no record from 2023 expires by
        // time, so that only DeleteRecords moves the log start, at either layer.
        ("retention.ms", "-1"),
    ];
    with_settings(small_segments(700, 64), &settings)
}

/// The record at offset `sequence`: key `k<sequence % KEYS>`, value `v<sequence>`.
fn record(sequence: u64) -> (String, String) {
    (format!("k{}", sequence % KEYS), format!("v{sequence:06}"))
}

fn batch(sequence: u64) -> bytes::Bytes {
    let (key, value) = record(sequence);
    keyed_batch(Some(key.as_bytes()), Some(value.as_bytes()), T0)
}

fn failed(error: impl std::fmt::Debug) -> String {
    format!("{error:?}")
}

/// Which layer a workload drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// The inline engine.
    Engine,
    /// The partition log, opened directly.
    Log,
}

impl Layer {
    const ALL: [Layer; 2] = [Layer::Engine, Layer::Log];

    fn parse(name: &str) -> Layer {
        *Layer::ALL
            .iter()
            .find(|layer| layer.name() == name)
            .unwrap()
    }

    fn name(self) -> &'static str {
        match self {
            Layer::Engine => "engine",
            Layer::Log => "log",
        }
    }

    /// The points this layer's workload passes.
    fn points(self) -> Vec<&'static str> {
        let passes = |name: &&str| match self {
            Layer::Engine => !LOG_ONLY.contains(name),
            Layer::Log => !name.starts_with("checkpoint."),
        };
        NAMES.iter().copied().filter(passes).collect()
    }

    fn workload(self, root: &Path, acks: &Path) -> Result<(), String> {
        let mut acks = Acks(std::fs::File::create_new(acks).unwrap());
        match self {
            Layer::Engine => engine_workload(root, &mut acks),
            Layer::Log => log_workload(root, &mut acks),
        }
    }

    /// Reopens what the workload left and checks the promise against the acknowledgements.
    /// Returns the number of records read.
    fn check(self, root: &Path, acks: &Path, case: &str) -> usize {
        let acked = Saved::read(acks).acked;
        let served = match self {
            Layer::Engine => engine_serves(root, case),
            Layer::Log => log_serves(root, acks, case),
        };
        served.check(acked, case)
    }

    /// Reopens what the workload left, compacts, and closes cleanly: the reopened directory
    /// takes the rest of the work.
    fn finish(self, root: &Path, acks: &Path, case: &str) {
        match self {
            Layer::Engine => {
                let engine = open_engine(root, case);
                for report in engine.compact(Some(TOPIC)).unwrap() {
                    let outcome = report.outcome.map(drop);
                    outcome.unwrap_or_else(|e| panic!("{case}: compaction after reopen: {e:?}"));
                }
                engine.close().unwrap();
            }
            Layer::Log => {
                let mut log = reopen_log(root, acks, case);
                let mut map = OffsetMap::new(64 * 1024).unwrap();
                log.compact(&mut map, Offset(0), 0, TimestampMs(T0))
                    .unwrap_or_else(|e| panic!("{case}: compaction after reopen: {e:?}"));
                let closed = (log.log_end_offset(), log.log_start_offset());
                log.close().unwrap();
                Acks::append_to(acks).closed(closed);
            }
        }
    }
}

/// The workload's acknowledgement file: `acked <end>` once every record below `end` is flushed;
/// for the log layer also what a checkpoint and a clean close would write in the directory,
/// `checkpoint <recovery point> <log start>` and `closed <log end> <log start>`.
struct Acks(std::fs::File);

impl Acks {
    fn append_to(acks: &Path) -> Acks {
        Acks(std::fs::OpenOptions::new().append(true).open(acks).unwrap())
    }

    fn line(&mut self, line: String) {
        writeln!(self.0, "{line}").unwrap();
        self.0.flush().unwrap();
    }

    fn acked(&mut self, end: u64) {
        self.line(format!("acked {end}"));
    }

    fn checkpoint(&mut self, log: &PartitionLog) {
        let (point, start) = (log.recovery_point(), log.log_start_offset());
        self.line(format!("checkpoint {} {}", point.0, start.0));
    }

    fn closed(&mut self, (end, start): (Offset, Offset)) {
        self.line(format!("closed {} {}", end.0, start.0));
    }
}

/// What the acknowledgement file says.
#[derive(Debug, Default)]
struct Saved {
    /// The highest acknowledged end offset.
    acked: u64,
    /// The last checkpoint's (or clean close's) recovery point and log start offset.
    checkpoint: Option<(u64, u64)>,
    /// Whether a clean close came after the last checkpoint.
    clean: bool,
}

impl Saved {
    fn read(acks: &Path) -> Saved {
        let mut saved = Saved::default();
        for line in std::fs::read_to_string(acks).unwrap_or_default().lines() {
            let words: Vec<&str> = line.split(' ').collect();
            let numbers: Vec<u64> = words[1..].iter().map(|n| n.parse().unwrap()).collect();
            match words[0] {
                "acked" => saved.acked = saved.acked.max(numbers[0]),
                "checkpoint" | "closed" => {
                    saved.checkpoint = Some((numbers[0], numbers[1]));
                    saved.clean = words[0] == "closed";
                }
                other => panic!("unknown line {other}"),
            }
        }
        saved
    }
}

fn engine_workload(root: &Path, acks: &mut Acks) -> Result<(), String> {
    let engine = Engine::open(root, inline_config(config())).map_err(failed)?;
    let topic = engine.create_topic(TOPIC, 1, config()).map_err(failed)?;
    let mut sequence = 0;
    for round in 0..4 {
        for _ in 0..20 {
            let appended = engine.append(&topic, 0, batch(sequence), Durability::Written);
            appended.wait().map_err(failed)?;
            sequence += 1;
        }
        engine.flush(&topic, 0).wait().map_err(failed)?;
        acks.acked(sequence);
        if round == 1 {
            let deleted = engine.delete_records(&topic, 0, Offset(10));
            deleted.wait().map_err(failed)?;
            for report in engine.apply_retention(Some(TOPIC)).map_err(failed)? {
                report.outcome.map_err(failed)?;
            }
        }
        if round == 2 {
            for report in engine.compact(Some(TOPIC)).map_err(failed)? {
                report.outcome.map_err(failed)?;
            }
        }
        engine.checkpoint().map_err(failed)?;
    }
    engine.close().map_err(failed)
}

fn log_workload(root: &Path, acks: &mut Acks) -> Result<(), String> {
    let options = LogOpenOptions {
        had_clean_shutdown: false,
        recovery_point: Offset(0),
        log_start_offset: None,
        now: TimestampMs(T0),
        mode: LogWriteMode::default(),
    };
    let (mut log, _) = open_log(root, options).map_err(failed)?;
    let now = TimestampMs(T0);
    let mut sequence = 0;
    for round in 0..4 {
        for _ in 0..20 {
            log.append(batch(sequence), now).map_err(failed)?;
            sequence += 1;
        }
        log.flush().map_err(failed)?;
        acks.acked(sequence);
        if round == 1 {
            log.roll(now).map_err(failed)?;
            log.delete_records(Offset(10), now).map_err(failed)?;
            log.apply_retention(now).map_err(failed)?;
            log.delete_expired_files(now).map_err(failed)?;
        }
        if round == 2 {
            let mut map = OffsetMap::new(64 * 1024).unwrap();
            log.compact(&mut map, Offset(0), 0, now).map_err(failed)?;
            log.delete_expired_files(now).map_err(failed)?;
        }
        acks.checkpoint(&log);
    }
    let closed = (log.log_end_offset(), log.log_start_offset());
    log.close().map_err(failed)?;
    acks.closed(closed);
    Ok(())
}

/// Opens the partition log in `root`'s partition directory, as a data directory would.
fn open_log(
    root: &Path,
    options: LogOpenOptions,
) -> Result<(PartitionLog, seglog::log::RecoveryReport), seglog::error::OpenError> {
    let dir = root.join(format!("{TOPIC}-0"));
    try_open_log(storage_from_env(), &dir, TOPIC, config(), options)
}

/// Reopens the log layer's partition as a data directory would: from the last checkpoint the
/// acknowledgement file holds, after a clean shutdown if the log closed after it.
fn reopen_log(root: &Path, acks: &Path, case: &str) -> PartitionLog {
    let saved = Saved::read(acks);
    let (recovery_point, log_start) = saved.checkpoint.unwrap_or_default();
    let options = LogOpenOptions {
        had_clean_shutdown: saved.clean,
        recovery_point: Offset(recovery_point),
        log_start_offset: saved.checkpoint.map(|_| Offset(log_start)),
        now: TimestampMs(T0),
        mode: LogWriteMode::default(),
    };
    let (log, _) =
        open_log(root, options).unwrap_or_else(|e| panic!("{case}: reopen failed: {e:?}"));
    log
}

fn open_engine(root: &Path, case: &str) -> Engine {
    Engine::open(root, inline_config(config()))
        .unwrap_or_else(|e| panic!("{case}: reopen failed: {e:?}"))
}

/// What a reopened partition serves.
struct Served {
    log_start: u64,
    log_end: u64,
    batches: Vec<Batch>,
}

impl Served {
    /// Checks the promise against the acknowledged end `acked`; returns the number of records.
    fn check(&self, acked: u64, case: &str) -> usize {
        let log_start = self.log_start;
        assert!(
            log_start <= 20,
            "{case}: log start {log_start} beyond any deletion"
        );
        // Every record served, those below the log start in its first batch too.
        let rows: Vec<(u64, String, String)> = records_from(&self.batches, 0)
            .into_iter()
            .map(|(at, record)| (at, text(&record.key), text(&record.value)))
            .collect();
        assert!(
            rows.windows(2).all(|pair| pair[0].0 < pair[1].0),
            "{case}: offsets must increase"
        );
        for (at, key, value) in &rows {
            assert_eq!(
                (key, value),
                (&record(*at).0, &record(*at).1),
                "{case}: record at {at}"
            );
        }
        // Each key's latest acknowledged record at or above the log start: present, or
        // superseded.
        let mut latest_acked: BTreeMap<String, u64> = BTreeMap::new();
        for sequence in log_start..acked {
            latest_acked.insert(record(sequence).0, sequence);
        }
        for (key, sequence) in latest_acked {
            let kept = rows
                .iter()
                .any(|(at, row_key, _)| *row_key == key && *at >= sequence);
            assert!(kept, "{case}: acknowledged record {sequence} of {key} lost");
        }
        assert!(
            self.log_end >= acked,
            "{case}: log end {} below the acknowledged {acked}",
            self.log_end
        );
        rows.len()
    }
}

/// What the engine's partition serves after a reopen.
fn engine_serves(root: &Path, case: &str) -> Served {
    let engine = open_engine(root, case);
    let partition = engine.describe_partition(TOPIC, 0).unwrap();
    assert_eq!(partition.offline, None, "{case}: offline after reopen");
    let (log_start, log_end) = (partition.log_start_offset.0, partition.log_end_offset.0);
    let batches = try_fetch_batches(&engine, &topic(), 0, log_start)
        .unwrap_or_else(|e| panic!("{case}: fetch after reopen: {e:?}"));
    Served {
        log_start,
        log_end,
        batches,
    }
}

/// What the log layer's partition serves after a reopen.
fn log_serves(root: &Path, acks: &Path, case: &str) -> Served {
    let mut log = reopen_log(root, acks, case);
    Served {
        log_start: log.log_start_offset().0,
        log_end: log.log_end_offset().0,
        batches: log_batches(&mut log),
    }
}

/// Runs `layer`'s workload with every point counting its passes; returns the counts.
fn count_passes(layer: Layer, dir: &Path) -> BTreeMap<&'static str, usize> {
    let scenario = fail::FailScenario::setup();
    let hits: Arc<std::sync::Mutex<BTreeMap<&'static str, usize>>> = Arc::default();
    for name in NAMES {
        let hits = hits.clone();
        fail::cfg_callback(*name, move || {
            *hits.lock().unwrap().entry(name).or_default() += 1
        })
        .unwrap();
    }
    let outcome = layer.workload(&dir.join("data"), &dir.join("acks"));
    scenario.teardown();
    outcome.unwrap_or_else(|e| panic!("{layer:?}: {e}"));
    hits.lock().unwrap().clone()
}

#[test]
fn the_workload_passes_every_failpoint() {
    let mut passed_by_any = Vec::new();
    for layer in Layer::ALL {
        let dir = tempfile::tempdir().unwrap();
        let hits = count_passes(layer, dir.path());
        let missed: Vec<&str> = layer
            .points()
            .into_iter()
            .filter(|name| !hits.contains_key(name))
            .collect();
        assert!(
            missed.is_empty(),
            "{layer:?}: failpoints the workload never reached: {missed:?}"
        );
        if layer == Layer::Engine {
            let passed: Vec<&&str> = LOG_ONLY
                .iter()
                .filter(|name| hits.contains_key(*name))
                .collect();
            assert!(
                passed.is_empty(),
                "the engine passes {passed:?}: not log-only any more"
            );
        }
        passed_by_any.extend(hits.keys().copied());
        layer.check(
            &dir.path().join("data"),
            &dir.path().join("acks"),
            "no fault",
        );
    }
    let unlisted: Vec<&&str> = NAMES
        .iter()
        .filter(|name| !passed_by_any.contains(name))
        .collect();
    assert!(unlisted.is_empty(), "no layer passes {unlisted:?}");
    assert!(
        LOG_ONLY.iter().all(|name| NAMES.contains(name)),
        "LOG_ONLY names failpoints that exist"
    );
}

#[test]
fn an_injected_error_at_any_named_step_reopens_keeping_every_acknowledged_record() {
    for layer in Layer::ALL {
        for name in layer.points() {
            let case = format!("{layer:?}, {name}");
            let scenario = fail::FailScenario::setup();
            fail::cfg(name, "return").unwrap();
            let dir = tempfile::tempdir().unwrap();
            let (root, acks) = (dir.path().join("data"), dir.path().join("acks"));
            let outcome = layer.workload(&root, &acks);
            scenario.teardown();
            let error = outcome.expect_err(&case);
            assert!(error.contains(name), "{case}: failed elsewhere: {error}");
            layer.check(&root, &acks, &case);
            layer.finish(&root, &acks, &case);
            layer.check(&root, &acks, &case);
        }
    }
}

/// Run as a child by the kill matrix: aborts the process at the failpoint named in the
/// environment, in the workload of the layer named there.
#[test]
#[ignore = "run as a child process by a_crash_at_any_named_step_reopens_keeping_every_acknowledged_record"]
fn child_aborting_at_a_failpoint() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (layer, spec) = spec.split_once(':').unwrap();
    let (name, dir) = spec.split_once('=').unwrap();
    let name: &'static str = NAMES.iter().find(|known| **known == name).unwrap();
    let _scenario = fail::FailScenario::setup();
    fail::cfg_callback(name, || std::process::abort()).unwrap();
    let dir = Path::new(dir);
    let _ = Layer::parse(layer).workload(&dir.join("data"), &dir.join("acks"));
    // Reaching the end means the point was never hit: exit normally, which the parent refuses.
}

#[test]
fn a_crash_at_any_named_step_reopens_keeping_every_acknowledged_record() {
    // Held to run alone: a child forked while another test holds a directory lock shares that
    // lock (flock) until it execs, which would fail that test's reopen with `Locked`.
    let _serial = fail::FailScenario::setup();
    let exe = std::env::current_exe().unwrap();
    for layer in Layer::ALL {
        for name in layer.points() {
            let case = format!("{layer:?}, {name}");
            let dir = tempfile::tempdir().unwrap();
            let spec = format!("{}:{name}={}", layer.name(), dir.path().display());
            let status = Command::new(&exe)
                .args([
                    "--exact",
                    "child_aborting_at_a_failpoint",
                    "--ignored",
                    "--nocapture",
                ])
                .env(CHILD_ENV, spec)
                .output()
                .unwrap();
            assert!(
                !status.status.success(),
                "{case}: the child ran past the failpoint: {}",
                String::from_utf8_lossy(&status.stdout)
            );
            layer.check(&dir.path().join("data"), &dir.path().join("acks"), &case);
        }
    }
}
