//! The crash matrix over named failpoints (issue 7, R05, R06, R20): a workload that appends,
//! flushes, rolls, checkpoints, deletes records, applies retention and compacts passes every
//! point of `seglog::failpoint::NAMES`. For each point, the step fails with an injected error
//! (`return`), or the process aborts right there (a child process); the directory then reopens
//! and must keep the promise: every acknowledged record (flushed before its ack was written) is
//! there, or superseded by a later record of its key (compaction), or below the log start
//! offset (retention); every record read is the one written at its offset; offsets increase.
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
use seglog::failpoint::NAMES;
use seglog::io::{Storage, storage_from_env};
use seglog::log_dir::LogDir;
use seglog::types::{Offset, TimestampMs, TopicName};
use support::batches::{T0, keyed_batch, records_from, text};
use support::configs::{small_segments, with_settings};
use support::logs::log_batches;

mod support;

const KEYS: u64 = 5;
const CHILD_ENV: &str = "SEGLOG_FAILPOINT_CHILD";

fn topic() -> TopicName {
    TopicName::parse("matrix").unwrap()
}

fn config() -> LogConfig {
    let settings = [
        ("cleanup.policy", "compact,delete"),
        ("file.delete.delay.ms", "0"),
        ("delete.retention.ms", "0"),
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

fn workload(root: &Path, acks: &Path) -> Result<(), String> {
    let storage: Arc<dyn Storage> = storage_from_env();
    let mut dir = LogDir::open(root, storage, config()).map_err(|e| format!("{e:?}"))?;
    dir.create_topic(&topic(), 1)
        .map_err(|e| format!("{e:?}"))?;
    let mut acks = std::fs::File::create(acks).unwrap();
    let now = TimestampMs(T0);
    let mut sequence = 0;
    for round in 0..4 {
        let log = dir.partition(&topic(), 0).map_err(|e| format!("{e:?}"))?;
        for _ in 0..20 {
            log.append(batch(sequence), now)
                .map_err(|e| format!("{e:?}"))?;
            sequence += 1;
        }
        log.flush().map_err(|e| format!("{e:?}"))?;
        writeln!(acks, "acked {sequence}").unwrap();
        acks.flush().unwrap();
        if round == 1 {
            log.roll(now).map_err(|e| format!("{e:?}"))?;
            log.delete_records(Offset(10), now)
                .map_err(|e| format!("{e:?}"))?;
            log.apply_retention(now).map_err(|e| format!("{e:?}"))?;
            log.delete_expired_files(now)
                .map_err(|e| format!("{e:?}"))?;
        }
        if round == 2 {
            let mut map = OffsetMap::new(64 * 1024).unwrap();
            log.compact(&mut map, Offset(0), 0, now)
                .map_err(|e| format!("{e:?}"))?;
            log.delete_expired_files(now)
                .map_err(|e| format!("{e:?}"))?;
        }
        dir.checkpoint().map_err(|e| format!("{e:?}"))?;
    }
    dir.close().map_err(|e| format!("{e:?}"))
}

/// The highest acknowledged end offset the workload wrote.
fn acked_end(acks: &Path) -> u64 {
    std::fs::read_to_string(acks)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.strip_prefix("acked ")?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Reopens the directory and checks the promise against the acknowledgements. Returns the
/// number of records read.
fn check(root: &Path, acks: &Path, case: &str) -> usize {
    let acked = acked_end(acks);
    let storage: Arc<dyn Storage> = storage_from_env();
    let mut dir = LogDir::open(root, storage, config())
        .unwrap_or_else(|e| panic!("{case}: reopen failed: {e:?}"));
    let log = dir
        .partition(&topic(), 0)
        .unwrap_or_else(|e| panic!("{case}: reopen failed: {e:?}"));
    let log_start = log.log_start_offset().0;
    assert!(
        log_start <= 20,
        "{case}: log start {log_start} beyond any deletion"
    );
    // Every record served, those below the log start in its first batch too.
    let rows: Vec<(u64, String, String)> = records_from(&log_batches(log), 0)
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
    // Each key's latest acknowledged record at or above the log start: present, or superseded.
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
        log.log_end_offset().0 >= acked,
        "{case}: log end {} below the acknowledged {acked}",
        log.log_end_offset()
    );
    rows.len()
}

#[test]
fn the_workload_passes_every_failpoint() {
    let scenario = fail::FailScenario::setup();
    let hits: Arc<std::sync::Mutex<BTreeMap<&str, usize>>> = Arc::default();
    for name in NAMES {
        let hits = hits.clone();
        fail::cfg_callback(*name, move || {
            *hits.lock().unwrap().entry(name).or_default() += 1
        })
        .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    workload(&dir.path().join("data"), &dir.path().join("acks")).unwrap();
    scenario.teardown();
    let hits = hits.lock().unwrap();
    let missed: Vec<&&str> = NAMES
        .iter()
        .filter(|name| !hits.contains_key(*name))
        .collect();
    assert!(
        missed.is_empty(),
        "failpoints the workload never reached: {missed:?}"
    );
    check(
        &dir.path().join("data"),
        &dir.path().join("acks"),
        "no fault",
    );
}

#[test]
fn an_injected_error_at_any_named_step_reopens_keeping_every_acknowledged_record() {
    for name in NAMES {
        let scenario = fail::FailScenario::setup();
        fail::cfg(*name, "return").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (root, acks) = (dir.path().join("data"), dir.path().join("acks"));
        let outcome = workload(&root, &acks);
        scenario.teardown();
        let error = outcome.expect_err(name);
        assert!(error.contains(name), "{name}: failed elsewhere: {error}");
        check(&root, &acks, name);
        // And the reopened log takes the rest of the work.
        let storage: Arc<dyn Storage> = storage_from_env();
        let mut reopened = LogDir::open(&root, storage, config()).unwrap();
        let log = reopened.partition(&topic(), 0).unwrap();
        let mut map = OffsetMap::new(64 * 1024).unwrap();
        log.compact(&mut map, Offset(0), 0, TimestampMs(T0))
            .unwrap_or_else(|e| panic!("{name}: compaction after reopen: {e:?}"));
        reopened.close().unwrap();
        check(&root, &acks, name);
    }
}

/// Run as a child by the kill matrix: aborts the process at the failpoint named in the
/// environment.
#[test]
#[ignore = "run as a child process by a_crash_at_any_named_step_reopens_keeping_every_acknowledged_record"]
fn child_aborting_at_a_failpoint() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (name, dir) = spec.split_once('=').unwrap();
    let name: &'static str = NAMES.iter().find(|known| **known == name).unwrap();
    let _scenario = fail::FailScenario::setup();
    fail::cfg_callback(name, || std::process::abort()).unwrap();
    let dir = Path::new(dir);
    let _ = workload(&dir.join("data"), &dir.join("acks"));
    // Reaching the end means the point was never hit: exit normally, which the parent refuses.
}

#[test]
fn a_crash_at_any_named_step_reopens_keeping_every_acknowledged_record() {
    // Held to run alone: a child forked while another test holds a directory lock shares that
    // lock (flock) until it execs, which would fail that test's reopen with `Locked`.
    let _serial = fail::FailScenario::setup();
    let exe = std::env::current_exe().unwrap();
    for name in NAMES {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new(&exe)
            .args([
                "--exact",
                "child_aborting_at_a_failpoint",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_ENV, format!("{name}={}", dir.path().display()))
            .output()
            .unwrap();
        assert!(
            !status.status.success(),
            "{name}: the child ran past the failpoint: {}",
            String::from_utf8_lossy(&status.stdout)
        );
        check(&dir.path().join("data"), &dir.path().join("acks"), name);
    }
}
