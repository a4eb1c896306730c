//! Issue 40, target 5: `seglog produce` of 20,000 keyed records over 4 partitions, default
//! configuration, under `strace -f -c`: the appends go through the shard's ring (`io_uring_enter`
//! present, fewer than 50 `pwrite*` calls); and with `io_uring_setup` refused (strace's fault
//! injection) the engine runs on positioned I/O and every record still reads back.
//!
//! Needs `strace` (Debian's package; `.ci/run` installs it). Without it each test prints
//! `SKIP: <test>: ...` and passes, except under `CI=true`, where it fails
//! (`seglog::testing::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use support::{assert_success, stdout_lines};

const RECORDS: usize = 20_000;
const PARTITIONS: usize = 4;

/// Whether `strace` runs; otherwise `test` is skipped (`SKIP:`; a failure under `CI=true`).
fn strace_available(test: &str) -> bool {
    let found = Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        seglog::testing::skip(test, "strace is not installed (.ci/run installs it)");
    }
    found
}

/// Tab-separated `key\tvalue` lines: 97 keys, one value per record.
fn keyed_records() -> String {
    (0..RECORDS)
        .map(|index| format!("key-{}\tvalue-{index}\n", index % 97))
        .collect()
}

/// Runs `seglog args...` under `strace -f` with `strace_args`, `input` on stdin; the engine picks
/// its own backend (no `SEGLOG_IO_BACKEND`).
fn under_strace(strace_args: &[&str], args: &[&str], input: &[u8]) -> Output {
    let mut command = Command::new("strace");
    command
        .arg("-f")
        .args(strace_args)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_seglog"))
        .args(args)
        .env_remove("SEGLOG_IO_BACKEND");
    support::run_command_with_stdin(command, input)
}

fn produce_args(dir: &Path) -> Vec<String> {
    let dir = dir.to_str().unwrap().to_owned();
    [
        "produce",
        "--dir",
        &dir,
        "--topic",
        "u",
        "--partitions",
        "4",
        "--key-separator",
        "\t",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `strace -c`'s call count for `syscall`, summed over its rows whose name starts so.
fn calls(summary: &str, syscall: &str) -> u64 {
    summary
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let name = fields.last()?;
            let calls = fields.get(3)?.parse::<u64>().ok()?;
            name.starts_with(syscall).then_some(calls)
        })
        .sum()
}

/// The values of every record of topic `u` in `dir`, read back by `seglog consume` (on the
/// backend the engine picks).
fn values_read_back(dir: &Path, strace_args: &[&str]) -> BTreeSet<String> {
    let dir = dir.to_str().unwrap();
    let mut values = BTreeSet::new();
    for partition in 0..PARTITIONS {
        let partition = partition.to_string();
        let args = [
            "consume",
            "--dir",
            dir,
            "--topic",
            "u",
            "--partition",
            &partition,
            "--format",
            "text",
        ];
        let output = under_strace(strace_args, &args, b"");
        assert_success(&output);
        for line in stdout_lines(&output) {
            let value = line
                .split_whitespace()
                .find_map(|field| field.strip_prefix("value="))
                .unwrap_or_else(|| panic!("no value in {line:?}"));
            values.insert(value.to_owned());
        }
    }
    values
}

fn every_value() -> BTreeSet<String> {
    (0..RECORDS).map(|index| format!("value-{index}")).collect()
}

/// `seglog produce` of the keyed records into a fresh data directory under `strace -f -c` with
/// `strace_args` besides: the directory, the run's output and strace's summary.
fn produce_under_strace(strace_args: &[&str]) -> (tempfile::TempDir, Output, String) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let summary = dir.path().join("strace-c.txt");
    let mut all_args = vec!["-c", "-o", summary.to_str().unwrap()];
    all_args.extend_from_slice(strace_args);
    let args = produce_args(&dir.path().join("data"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = under_strace(&all_args, &args, keyed_records().as_bytes());
    assert_success(&output);
    let summary = std::fs::read_to_string(&summary).unwrap();
    (dir, output, summary)
}

#[test]
fn produce_appends_through_the_ring_with_few_pwrites() {
    let test = "strace::produce_appends_through_the_ring_with_few_pwrites";
    if !strace_available(test) || !seglog::io::ring_tests_must_run(test) {
        return;
    }
    let (dir, _, summary) = produce_under_strace(&[]);
    assert!(calls(&summary, "io_uring_enter") > 0, "{summary}");
    assert!(calls(&summary, "pwrite") < 50, "{summary}");
    assert_eq!(
        values_read_back(&dir.path().join("data"), &[]),
        every_value()
    );
}

#[test]
fn with_io_uring_setup_refused_every_record_still_reads_back() {
    if !strace_available("strace::with_io_uring_setup_refused_every_record_still_reads_back") {
        return;
    }
    let refuse = ["-e", "inject=io_uring_setup:error=EPERM"];
    let (dir, output, summary) = produce_under_strace(&refuse);
    assert!(calls(&summary, "io_uring_setup") > 0, "{summary}");
    assert_eq!(calls(&summary, "io_uring_enter"), 0, "{summary}");
    assert_eq!(
        stdout_lines(&output).len(),
        RECORDS,
        "one acknowledgement a record"
    );
    let read_refused = ["-o", "/dev/null", "-e", "inject=io_uring_setup:error=EPERM"];
    assert_eq!(
        values_read_back(&dir.path().join("data"), &read_refused),
        every_value()
    );
}

#[test]
fn the_summary_parser_counts_calls_by_name() {
    let summary = "% time     seconds  usecs/call     calls    errors syscall\n\
                   ------ ----------- ----------- --------- --------- ----------------\n\
                    0.70    0.004847          49        97           io_uring_enter\n\
                    0.02    0.000137          27         5           pwrite64\n\
                    0.01    0.000100          20         2           pwritev2\n";
    assert_eq!(calls(summary, "io_uring_enter"), 97);
    assert_eq!(calls(summary, "pwrite"), 7);
    assert_eq!(calls(summary, "fdatasync"), 0);
}
