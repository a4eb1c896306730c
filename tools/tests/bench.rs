//! `seglog bench`: each workload runs briefly, writes the documented JSON keys with positive,
//! ordered figures, `--vs-disk` adds the disk's own rates, and bad arguments are usage errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::{assert_success, path_arg, run};

/// Runs `seglog bench --json FILE args...` and returns the JSON it wrote.
fn bench_json(args: &[&str]) -> Value {
    let temporary = tempfile::tempdir().unwrap();
    let json = temporary.path().join("bench.json");
    let mut all = vec!["bench", "--json", path_arg(&json)];
    all.extend_from_slice(args);
    let output = run(&all);
    assert_success(&output);
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.contains("records/s"), "{table}");
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

fn number(report: &Value, path: &[&str]) -> f64 {
    let mut value = report;
    for key in path {
        value = &value[*key];
    }
    value
        .as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number in {report:#}"))
}

fn assert_throughput(report: &Value, phase: &str) {
    assert!(
        number(report, &[phase, "records_per_s"]) > 0.0,
        "{report:#}"
    );
    assert!(number(report, &[phase, "mb_per_s"]) > 0.0, "{report:#}");
}

fn assert_latency(report: &Value, phase: &str) {
    let p50 = number(report, &[phase, "latency_us", "p50"]);
    let p99 = number(report, &[phase, "latency_us", "p99"]);
    let p999 = number(report, &[phase, "latency_us", "p999"]);
    let max = number(report, &[phase, "latency_us", "max"]);
    assert!(p50 > 0.0, "{report:#}");
    assert!(p50 <= p99 && p99 <= p999 && p999 <= max, "{report:#}");
}

fn assert_machine(report: &Value) {
    assert!(number(report, &["machine", "cores"]) >= 1.0, "{report:#}");
    assert!(report["machine"]["backend"].is_string(), "{report:#}");
}

#[test]
fn append_by_duration_reports_append_throughput_and_latency() {
    let report = bench_json(&["--workload", "append", "--duration", "0.5"]);
    assert_throughput(&report, "append");
    assert_latency(&report, "append");
    assert!(report.get("durable").is_none(), "{report:#}");
    assert!(report.get("disk").is_none(), "{report:#}");
    assert_eq!(report["config"]["workload"], "append");
    assert_machine(&report);
}

#[test]
fn append_by_record_count_with_vs_disk_reports_disk_rates() {
    let report = bench_json(&[
        "--records",
        "2000",
        "--partitions",
        "2",
        "--record-size",
        "100",
        "--batch-bytes",
        "8192",
        "--vs-disk",
    ]);
    assert_throughput(&report, "append");
    assert_latency(&report, "append");
    assert!(
        number(&report, &["disk", "write_mb_per_s"]) > 0.0,
        "{report:#}"
    );
    assert!(
        number(&report, &["disk", "read_mb_per_s"]) > 0.0,
        "{report:#}"
    );
    assert_eq!(report["config"]["records"], 2000);
}

#[test]
fn group_commit_reports_durable_latency() {
    let report = bench_json(&[
        "--workload",
        "group-commit",
        "--producers",
        "4",
        "--records",
        "500",
        "--batch-bytes",
        "4096",
    ]);
    assert_latency(&report, "durable");
    assert_throughput(&report, "durable");
    assert_throughput(&report, "append");
    assert_eq!(report["config"]["producers"], 4);
}

#[test]
fn fetch_hot_reports_append_and_fetch() {
    let report = bench_json(&["--workload", "fetch-hot", "--duration", "1"]);
    assert_throughput(&report, "append");
    assert_throughput(&report, "fetch");
    assert_latency(&report, "fetch");
}

#[test]
fn fetch_hot_by_record_count_reads_the_data_set_once() {
    let report = bench_json(&[
        "--workload",
        "fetch-hot",
        "--records",
        "3000",
        "--consumers",
        "3",
        "--record-size",
        "200",
    ]);
    assert_throughput(&report, "fetch");
    assert_latency(&report, "fetch");
    let count = number(&report, &["fetch", "latency_us", "count"]);
    assert!(count >= 1.0, "{report:#}");
}

#[test]
fn tail_reports_end_to_end_latency() {
    let report = bench_json(&[
        "--workload",
        "tail",
        "--duration",
        "0.5",
        "--flush",
        "batch",
        "--backend",
        "pio",
    ]);
    assert_throughput(&report, "durable");
    assert_latency(&report, "end_to_end");
    assert!(number(&report, &["end_to_end", "latency_us", "count"]) > 0.0);
    assert_eq!(report["machine"]["backend"], "pio");
}

#[test]
fn bad_arguments_are_usage_errors() {
    for args in [
        &["bench", "--workload", "sideways"][..],
        &["bench", "--duration", "0"][..],
        &["bench", "--duration", "1", "--records", "10"][..],
        &["bench", "--partitions", "0"][..],
        &["bench", "--flush", "sometimes"][..],
    ] {
        let output = run(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}");
        assert!(!output.stderr.is_empty(), "{args:?}");
    }
}

#[test]
fn a_batch_smaller_than_a_record_is_refused() {
    let output = run(&["bench", "--record-size", "4096", "--batch-bytes", "1024"]);
    support::assert_fails_with(&output, "cannot hold one record");
}

#[test]
fn an_explicit_dir_is_used_and_kept() {
    let temporary = tempfile::tempdir().unwrap();
    let data = temporary.path().join("data");
    let output = run(&["bench", "--records", "100", "--dir", path_arg(&data)]);
    assert_success(&output);
    assert!(data.join("seglog-bench-0").is_dir());
}
