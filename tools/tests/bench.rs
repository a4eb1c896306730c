//! `seglog bench`: each workload runs briefly, writes the documented JSON keys with positive,
//! ordered figures and the record counts asked for; `--vs-disk` adds the disk's own rates;
//! `--histogram` and `--plot` write files that parse; bad arguments are usage errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::{assert_success, assert_usage_error, path_arg, run, verify, words};

/// `seglog bench --json FILE`, FILE in a fresh temporary directory; with FILE and the directory.
fn bench_command() -> (Command, PathBuf, tempfile::TempDir) {
    let temporary = tempfile::tempdir().unwrap();
    let json = temporary.path().join("bench.json");
    let mut command = support::seglog();
    command.args(["bench", "--json"]).arg(&json);
    (command, json, temporary)
}

/// Runs `command`, a `seglog bench` writing its JSON to `json`, which succeeds; returns the JSON
/// and the table it printed.
fn report_of(command: &mut Command, json: &Path) -> (Value, String) {
    let output = command.output().unwrap();
    assert_success(&output);
    let table = String::from_utf8(output.stdout).unwrap();
    let report = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    (report, table)
}

/// Runs `seglog bench --json FILE ARGS...` (`args` split at spaces) and returns the JSON it wrote.
fn bench(args: &str) -> Value {
    bench_json(&words(args))
}

/// Runs `seglog bench --json FILE args...` and returns the JSON it wrote.
fn bench_json(args: &[&str]) -> Value {
    bench_json_and_table(args).0
}

/// Runs `seglog bench --json FILE args...` and returns the JSON it wrote and the table it printed.
fn bench_json_and_table(args: &[&str]) -> (Value, String) {
    let (mut command, json, _temporary) = bench_command();
    // The ruler's fio jobs (`--vs-disk`) run a second each here, not the default five.
    command.args(["--ruler-seconds", "1"]).args(args);
    let (report, table) = report_of(&mut command, &json);
    assert!(table.contains("records/s"), "{table}");
    (report, table)
}

/// Runs `seglog bench --dir DIR args...` (DIR fresh, kept) and returns the JSON and the
/// directory.
fn bench_json_in_dir(args: &[&str]) -> (Value, tempfile::TempDir) {
    let (mut command, json, temporary) = bench_command();
    command
        .arg("--dir")
        .arg(temporary.path().join("data"))
        .args(args);
    (report_of(&mut command, &json).0, temporary)
}

/// A phase's throughput and latency figures are there, positive and ordered.
fn assert_phase(report: &Value, phase: &str) {
    assert_throughput(report, phase);
    assert_latency(report, phase);
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
    let report = bench("--workload append --duration 0.5");
    assert_phase(&report, "append");
    assert!(report.get("durable").is_none(), "{report:#}");
    assert!(report.get("disk").is_none(), "{report:#}");
    assert_eq!(report["config"]["workload"], "append");
    // The engine's default: `O_DIRECT`.
    assert_eq!(report["config"]["direct_io"], true);
    assert_machine(&report);
}

#[test]
fn direct_io_alone_is_on_and_off_stays_off() {
    let report = bench("--records 1000 --direct-io");
    assert_eq!(report["config"]["direct_io"], true);
    let report = bench("--records 1000 --direct-io off --vs-disk");
    assert_eq!(report["config"]["direct_io"], false);
}

#[test]
fn append_by_record_count_with_vs_disk_reports_disk_rates() {
    let report =
        bench("--records 2000 --partitions 2 --record-size 100 --batch-bytes 8192 --vs-disk");
    assert_phase(&report, "append");
    assert!(
        number(&report, &["disk", "write_mb_per_s"]) > 0.0,
        "{report:#}"
    );
    assert!(
        number(&report, &["disk", "read_mb_per_s"]) > 0.0,
        "{report:#}"
    );
    assert_eq!(report["config"]["records"], 2000);
    let disk = &report["disk"];
    assert!(["built-in", "fio"].contains(&disk["tool"].as_str().unwrap()));
    assert_eq!(disk["block_bytes"], 8192);
    assert_eq!(disk["sync_each"], false);
    assert_eq!(disk["queue_depth"], 2);
    // A record count has no phase length to match: the buffered write runs one second.
    assert_eq!(disk["write_buffered_seconds"], 1);
    let buffered = number(&report, &["disk", "write_buffered_mb_per_s"]);
    assert!(buffered > 0.0, "{report:#}");
    // The disk's best sequential write is the ruler's where fio measured it (a buffered write
    // of the run's pattern, unsynced, may run faster into the page cache), else the pattern's.
    let best_write = number(&report, &["disk", "write_mb_per_s"]);
    match report["disk"]["limits"].is_null() {
        true => assert!(best_write >= buffered, "{report:#}"),
        false => assert_eq!(
            best_write,
            number(&report, &["disk", "limits", "best_write_mb_per_s"])
        ),
    }
    let read_buffered = number(&report, &["disk", "read_buffered_mb_per_s"]);
    assert!(number(&report, &["disk", "read_mb_per_s"]) >= read_buffered);
    assert!(number(&report, &["disk", "random_read_iops"]) > 0.0);
    assert!(number(&report, &["disk", "memcpy_mb_per_s"]) > 0.0);
    assert!(number(&report, &["append", "vs_disk"]) > 0.0, "{report:#}");
}

#[test]
fn group_commit_reports_durable_latency() {
    let report = bench("--workload group-commit --producers 4 --records 500 --batch-bytes 4096");
    assert_phase(&report, "durable");
    assert_throughput(&report, "append");
    assert_eq!(report["config"]["producers"], 4);
}

#[test]
fn group_commit_with_vs_disk_measures_the_same_producers_without_the_engine() {
    let (report, table) = bench_json_and_table(&words(
        "--workload group-commit --producers 4 --partitions 2 --records 500 --batch-bytes 4096 --vs-disk",
    ));
    let producers = &report["disk"]["producers"];
    assert_eq!(producers["producers"], 4, "{report:#}");
    assert_eq!(producers["files"], 2);
    assert_eq!(producers["block_bytes"], 4096);
    // The bare producers write as the engine does.
    assert_eq!(producers["direct"], report["config"]["direct_io"]);
    // A record count: the shortest time, not the phase's.
    assert_eq!(producers["seconds"], 2.0);
    assert!(number(&report, &["disk", "producers", "mb_per_s"]) > 0.0);
    let latency = |key: &str| number(&report, &["disk", "producers", "latency_us", key]);
    assert!(latency("p50") <= latency("p99") && latency("p99") <= latency("p999"));
    assert!(latency("p999") <= latency("max"));
    assert!(
        table.contains("the same producers with no engine (4 threads on 2 files"),
        "{table}"
    );
    // And grouped as group commit groups them at best, in each way a log finds space.
    for way in ["grow", "written_ahead", "overwrite"] {
        let grouped = &report["disk"]["grouped_producers"][way];
        assert_eq!(grouped["files"], 2, "{way}: {report:#}");
        assert_eq!(grouped["batches_per_file"], 2, "{way}");
        assert_eq!(grouped["direct"], report["config"]["direct_io"], "{way}");
        assert!(grouped["rounds"].as_u64().unwrap() > 0, "{way}");
        let latency = |key: &str| {
            number(
                &report,
                &["disk", "grouped_producers", way, "latency_us", key],
            )
        };
        assert!(latency("p50") <= latency("p999") && latency("p999") <= latency("max"));
        assert!(
            table.contains(&format!(
                "grouped with no engine, space {way} (2 files at once"
            )),
            "{table}"
        );
    }
}

#[test]
fn replicated_reports_the_cluster_beside_the_single_node_durable_appends() {
    let (mut command, json, temporary) = bench_command();
    let data = temporary.path().join("data");
    command
        .args(words("--workload replicated --records 2000"))
        .arg("--dir")
        .arg(&data);
    let (report, table) = report_of(&mut command, &json);
    // The preset's defaults: group-commit's producers, 1 KiB records in 64 KiB batches.
    assert_eq!(report["config"]["workload"], "replicated");
    assert_eq!(report["config"]["producers"], 16);
    assert_eq!(report["config"]["record_size"], 1024);
    assert_eq!(report["config"]["batch_bytes"], 65536);
    assert_eq!(report["config"]["records"], 2000);
    for phase in ["durable", "replicated"] {
        assert_phase(&report, phase);
        // Whole batches: at least the records asked for, at most one batch more per producer.
        let records = number(&report, &[phase, "records"]);
        assert!(
            (2000.0..2000.0 + 16.0 * 64.0).contains(&records),
            "{report:#}"
        );
        assert!(number(&report, &[phase, "latency_us", "count"]) >= 1.0);
    }
    assert_eq!(report["replicated"]["nodes"], 3);
    let ratio = number(&report, &["replicated", "vs_single_node"]);
    let expected =
        number(&report, &["replicated", "mb_per_s"]) / number(&report, &["durable", "mb_per_s"]);
    assert!(ratio > 0.0 && (ratio - expected).abs() < 1e-9, "{report:#}");
    assert!(table.contains("\nreplicated "), "{table}");
    assert!(table.contains("x the single-node durable"), "{table}");
    // Each node had its own directory under the data directory, and holds the topic.
    for node in 1..=3 {
        let node_dir = data.join(format!("replicated/node-{node}"));
        assert!(
            node_dir.join("node.json").is_file(),
            "{}",
            node_dir.display()
        );
        assert!(
            node_dir.join("log/seglog-bench-0").is_dir(),
            "{}",
            node_dir.display()
        );
    }
}

#[test]
fn replicated_refuses_linger() {
    let output = run(&words(
        "bench --workload replicated --linger-ms 5 --records 10",
    ));
    support::assert_fails_with(&output, "whole batches only");
}

#[test]
fn fetch_hot_reports_append_and_fetch() {
    let report = bench("--workload fetch-hot --duration 1");
    assert_throughput(&report, "append");
    assert_phase(&report, "fetch");
}

#[test]
fn vs_disk_writes_buffered_for_as_long_as_the_phase_runs() {
    let report = bench("--duration 2 --partitions 1 --producers 1 --vs-disk");
    assert_eq!(report["disk"]["write_buffered_seconds"], 2, "{report:#}");
    assert!(number(&report, &["append", "vs_disk"]) > 0.0, "{report:#}");
}

#[test]
fn fetch_hot_with_vs_disk_is_compared_with_memcpy() {
    let (report, table) =
        bench_json_and_table(&words("--workload fetch-hot --duration 1 --vs-disk"));
    assert!(table.contains("x single-core memcpy"), "{table}");
    let memcpy = number(&report, &["disk", "memcpy_mb_per_s"]);
    let fetch = number(&report, &["fetch", "mb_per_s"]);
    let ratio = number(&report, &["fetch", "vs_disk"]);
    assert!(
        (ratio - fetch / memcpy).abs() < 1e-6 * ratio.max(1.0),
        "{report:#}"
    );
}

#[test]
fn fetch_hot_by_record_count_reads_the_data_set_once() {
    let report = bench("--workload fetch-hot --records 3000 --consumers 3 --record-size 200");
    assert_phase(&report, "fetch");
    let count = number(&report, &["fetch", "latency_us", "count"]);
    assert!(count >= 1.0, "{report:#}");
}

#[test]
fn tail_reports_end_to_end_latency() {
    let report = bench("--workload tail --duration 0.5 --flush batch --backend pio");
    assert_throughput(&report, "durable");
    assert_latency(&report, "end_to_end");
    assert!(number(&report, &["end_to_end", "latency_us", "count"]) > 0.0);
    assert_eq!(report["machine"]["backend"], "pio");
}

#[test]
fn bad_arguments_are_usage_errors() {
    for args in [
        "bench --workload sideways",
        "bench --duration 0",
        "bench --duration 1 --records 10",
        "bench --partitions 0",
        "bench --flush sometimes",
        "bench --flush interval:0",
        "bench --flush interval:soon",
    ] {
        assert_usage_error(&run(&words(args)));
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

#[test]
fn flush_interval_sets_the_topics_flush_ms() {
    let (report, temporary) = bench_json_in_dir(&words("--records 2000 --flush interval:50"));
    assert_eq!(report["config"]["flush"], "interval:50", "{report:#}");
    assert_throughput(&report, "append");
    let registry = std::fs::read_to_string(temporary.path().join("data/seglog-topics")).unwrap();
    assert!(registry.contains("flush.ms=50"), "{registry}");
}

#[test]
fn retention_bytes_deletes_segments_during_the_run() {
    let (report, temporary) = bench_json_in_dir(&words(
        "--duration 2.5 --partitions 1 --segment-bytes 1048576 --retention-bytes 2097152",
    ));
    assert_eq!(report["config"]["segment_bytes"], 1_048_576, "{report:#}");
    assert_eq!(report["config"]["retention_bytes"], 2_097_152, "{report:#}");
    assert_throughput(&report, "append");
    let data = temporary.path().join("data");
    let registry = std::fs::read_to_string(data.join("seglog-topics")).unwrap();
    assert!(registry.contains("segment.bytes=1048576"), "{registry}");
    assert!(registry.contains("retention.bytes=2097152"), "{registry}");
    let names: Vec<String> = std::fs::read_dir(data.join("seglog-bench-0"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.contains(&"00000000000000000000.log".to_owned()),
        "the first segment was deleted: {names:?}"
    );
    assert!(
        names.iter().all(|name| !name.ends_with(".deleted")),
        "every deleted segment's files were unlinked by the close: {names:?}"
    );
}

#[test]
fn fetch_cold_drops_the_page_cache_and_reads_every_record_once() {
    let report = bench("--workload fetch-cold --records 3000 --record-size 200 --batch-bytes 4096");
    assert_phase(&report, "fetch");
    assert_eq!(report["fetch"]["records"], report["append"]["records"]);
    assert!(number(&report, &["append", "records"]) >= 3000.0);
    let method = report["fetch"]["cache_drop"].as_str().unwrap();
    assert!(["drop_caches", "fadvise"].contains(&method), "{report:#}");
    assert!(number(&report, &["fetch", "fetches_per_s"]) > 0.0);
}

#[test]
fn fetch_cold_with_direct_reads_reads_every_record_once() {
    // 16 MiB over 4 partitions: each consumer's 1 MiB fetches find nothing cached, so on io_uring
    // they are read with O_DIRECT (the engine's `io::uring` tests check that they were).
    let report = bench("--workload fetch-cold --records 16000 --direct-reads");
    assert_throughput(&report, "fetch");
    assert_eq!(report["fetch"]["records"], report["append"]["records"]);
    assert_eq!(report["config"]["direct_cold_reads"], true);
}

#[test]
fn random_fetch_fetches_as_many_single_records_as_asked() {
    let report = bench("--workload random-fetch --records 400 --consumers 4 --record-size 100");
    // One record per batch by default: every append and every fetch is one record.
    assert_eq!(report["config"]["batch_bytes"], 164);
    assert_eq!(report["append"]["records"], 400);
    assert_eq!(report["fetch"]["records"], 400);
    assert_eq!(number(&report, &["fetch", "latency_us", "count"]), 400.0);
    assert_latency(&report, "fetch");
    assert!(number(&report, &["fetch", "fetches_per_s"]) > 0.0);
    assert!(report["fetch"]["cache_drop"].is_string(), "{report:#}");
}

#[test]
fn many_partitions_spreads_appends_over_every_partition() {
    // 500 partitions: the preset's 10,000 take minutes to create in a debug build.
    let (report, temporary) = bench_json_in_dir(&words(
        "--workload many-partitions --partitions 500 --records 1000 --record-size 100 --batch-bytes 164",
    ));
    assert_eq!(report["config"]["workload"], "many-partitions");
    assert_eq!(report["config"]["partitions"], 500);
    assert_eq!(report["append"]["records"], 1000);
    assert_latency(&report, "append");
    assert!(number(&report, &["machine", "open_partitions_max"]) >= 16.0);
    // Two producers, one record per batch, round-robin: every partition got records.
    let data = temporary.path().join("data");
    for partition in [0, 249, 499] {
        let dir = data.join(format!("seglog-bench-{partition}"));
        let log = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .find(|path| path.extension().is_some_and(|extension| extension == "log"))
            .unwrap();
        assert!(
            std::fs::metadata(log).unwrap().len() > 0,
            "{}",
            dir.display()
        );
    }
}

#[test]
fn compaction_reports_append_latency_without_and_with_compaction_running() {
    let report = bench(
        "--workload compaction --records 6000 --partitions 1 --record-size 1000 --key-space 50",
    );
    assert_eq!(report["config"]["key_space"], 50);
    assert_latency(&report, "append");
    assert_latency(&report, "append_during_compaction");
    assert!(number(&report, &["append", "records"]) >= 3000.0);
    assert!(number(&report, &["append_during_compaction", "records"]) >= 3000.0);
    // The first half sealed segments of 1 MiB; the compactions of the second half cleaned them.
    assert!(
        number(&report, &["compaction", "runs"]) >= 1.0,
        "{report:#}"
    );
    assert!(
        number(&report, &["compaction", "segments_cleaned"]) >= 1.0,
        "{report:#}"
    );
    let before = number(&report, &["compaction", "bytes_before"]);
    let after = number(&report, &["compaction", "bytes_after"]);
    assert!(before > 0.0 && after < before, "{report:#}");
    assert!(number(&report, &["compaction", "mb_per_s"]) > 0.0);
}

#[test]
fn linger_sends_records_through_the_producer_with_keys_and_compression() {
    let report = bench(
        "--linger-ms 1 --key-space 100 --compression-type lz4 --records 2000 --record-size 100 --batch-bytes 8192",
    );
    // Records go one at a time: exactly as many as asked, one latency each.
    assert_eq!(report["append"]["records"], 2000);
    assert_eq!(number(&report, &["append", "latency_us", "count"]), 2000.0);
    assert_latency(&report, "append");
    assert_eq!(report["config"]["linger_ms"], 1);
    assert_eq!(report["config"]["compression"], "lz4");
}

#[test]
fn every_codec_writes_batches_that_verify() {
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let args = words("--records 500 --record-size 100 --batch-bytes 4096");
        let (report, temporary) =
            bench_json_in_dir(&[&["--compression-type", codec][..], &args].concat());
        assert_eq!(report["config"]["compression"], codec);
        assert_throughput(&report, "append");
        let data = temporary.path().join("data");
        assert_success(&verify(&data));
    }
}

#[test]
fn compression_type_is_kafkas_flag_and_compression_its_old_spelling() {
    let args = "--records 500 --record-size 100 --batch-bytes 4096";
    let (report, table) = bench_json_and_table(&words(&format!("--compression-type lz4 {args}")));
    assert_eq!(report["config"]["compression"], "lz4");
    assert!(table.contains(" compression=lz4 "), "{table}");
    let report = bench(&format!("--compression gzip {args}"));
    assert_eq!(report["config"]["compression"], "gzip");
}

/// Throughput is an upper bound only: a loaded machine makes a run slower, never faster.
#[test]
fn throughput_caps_the_offered_load_of_all_producers_together() {
    let cap = 2000.0;
    let args =
        "--records 2000 --record-size 100 --batch-bytes 1024 --producers 4 --throughput 2000";
    let (report, table) = bench_json_and_table(&words(args));
    assert_eq!(report["append"]["records"], 2000);
    let achieved = number(&report, &["append", "records_per_s"]);
    assert!(achieved <= cap * 1.1, "{achieved} records/s: {report:#}");
    assert_eq!(
        number(&report, &["config", "throughput_records_per_s"]),
        cap
    );
    assert!(table.contains(" throughput=2000/s "), "{table}");
    assert_latency(&report, "append");
    // Through seglog's Producer, one record at a time, the same.
    let (report, _) = bench_json_and_table(&words(&format!("{args} --linger-ms 1")));
    let achieved = number(&report, &["append", "records_per_s"]);
    assert!(achieved <= cap * 1.1, "{achieved} records/s: {report:#}");
}

#[test]
fn a_negative_throughput_is_no_cap() {
    let (report, table) = bench_json_and_table(&words("--records 200 --throughput -1"));
    assert!(
        report["config"]["throughput_records_per_s"].is_null(),
        "{report:#}"
    );
    assert!(table.contains(" throughput=- "), "{table}");
}

#[test]
fn key_space_keys_are_drawn_from_that_many_keys() {
    let (_, temporary) = bench_json_in_dir(&words(
        "--key-space 3 --records 300 --record-size 16 --partitions 1",
    ));
    let data = temporary.path().join("data");
    let output = run(&[
        "consume",
        "--dir",
        path_arg(&data),
        "--topic",
        "seglog-bench",
        "--partition",
        "0",
        "--from-beginning",
        "--format",
        "json",
    ]);
    assert_success(&output);
    let lines = support::stdout_lines(&output);
    assert!(lines.len() >= 300);
    let keys: std::collections::BTreeSet<String> = lines
        .iter()
        .map(|line| {
            let record: Value = serde_json::from_str(line).unwrap();
            record["key"].as_str().unwrap().to_owned()
        })
        .collect();
    let expected: std::collections::BTreeSet<String> =
        ["key-0", "key-1", "key-2"].map(String::from).into();
    assert_eq!(keys, expected);
}

#[test]
fn histogram_file_is_a_percentile_distribution_of_every_append() {
    let temporary = tempfile::tempdir().unwrap();
    let histogram = temporary.path().join("append.hgrm");
    let args = words("--records 3000 --record-size 100 --batch-bytes 1024");
    let report = bench_json(&[&args[..], &["--histogram", path_arg(&histogram)]].concat());
    let text = std::fs::read_to_string(&histogram).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]
    );
    assert_eq!(lines.next(), Some(""));
    let rows: Vec<Vec<f64>> = lines
        .clone()
        .take_while(|line| !line.starts_with('#'))
        .map(|line| {
            line.split_whitespace()
                .map(|field| field.parse().unwrap())
                .collect()
        })
        .collect();
    assert!(rows.len() > 5, "{text}");
    for pair in rows.windows(2) {
        assert!(
            pair[0][0] <= pair[1][0] && pair[0][1] <= pair[1][1],
            "{text}"
        );
    }
    let last = rows.last().unwrap();
    assert_eq!(last.len(), 3, "{text}");
    assert_eq!(last[1], 1.0);
    let count = number(&report, &["append", "latency_us", "count"]);
    assert_eq!(last[2], count);
    assert_eq!(last[0], number(&report, &["append", "latency_us", "max"]));
    let footer: Vec<&str> = lines.filter(|line| line.starts_with("#[")).collect();
    assert_eq!(footer.len(), 3, "{text}");
    assert!(footer[1].starts_with("#[Max"), "{text}");
}

#[test]
fn plot_is_a_well_formed_svg_with_a_line_per_phase() {
    let temporary = tempfile::tempdir().unwrap();
    let plot = temporary.path().join("latency.svg");
    let args = words("--workload fetch-hot --records 1000 --record-size 100");
    bench_json(&[&args[..], &["--plot", path_arg(&plot)]].concat());
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<?xml"), "{svg}");
    assert!(svg.contains("<svg"), "{svg}");
    assert_well_formed(&svg);
    assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
}

/// Every element opened is closed in order (a small check of XML well-formedness: tags only).
fn assert_well_formed(xml: &str) {
    let mut open: Vec<&str> = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find('<') {
        let end = start + rest[start..].find('>').expect("an unclosed tag");
        let tag = &rest[start + 1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') || tag.ends_with('/') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(open.pop(), Some(name), "mismatched </{name}>");
        } else {
            open.push(tag.split_whitespace().next().unwrap());
        }
    }
    assert!(open.is_empty(), "unclosed elements: {open:?}");
    assert!(!rest.contains('>'), "text after the root element");
}

#[test]
fn new_options_refuse_bad_values() {
    for args in [
        "bench --compression-type brotli",
        "bench --throughput 0",
        "bench --throughput fast",
        "bench --key-space 0",
        "bench --linger-ms soon",
        "bench --workload fetch-lukewarm",
    ] {
        assert_usage_error(&run(&words(args)));
    }
}

#[test]
fn with_settle_the_engine_waits_for_freed_memory_to_be_reported_where_the_machine_reports_it() {
    let (mut command, json, _temporary) = bench_command();
    let (report, table) = report_of(command.args(["--settle", "--records", "100"]), &json);
    let waits = report["machine"]["page_reporting_waits"]
        .as_array()
        .unwrap();
    let reported = std::path::Path::new("/sys/module/page_reporting/parameters/reported_kib");
    if !reported.exists() {
        assert!(waits.is_empty(), "{report:#}");
        return;
    }
    assert_eq!(waits.len(), 1, "{report:#}");
    assert_eq!(waits[0]["before"], "engine", "{report:#}");
    // Settled means the count stood still for the quiet time (4 s), which the wait includes.
    if waits[0]["settled"] == true {
        assert!(waits[0]["seconds"].as_f64().unwrap() >= 4.0, "{report:#}");
    }
    assert!(table.contains("free page reporting: waited"), "{table}");
}

fn fio_installed() -> bool {
    std::process::Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

/// The ruler: fio's 1 MiB writes at queue depth 16, `O_DIRECT` and buffered with their final
/// fsync, are the disk's best sequential write, and the append phase (its final flush
/// included) is held to it.
#[test]
fn vs_disk_holds_appends_to_the_disks_best_sequential_write_measured_by_fio() {
    if !fio_installed() {
        seglog::testing::skip(
            "bench::vs_disk_holds_appends_to_the_disks_best_sequential_write_measured_by_fio",
            "fio is not installed, the ruler cannot be measured (.ci/run installs it)",
        );
        return;
    }
    let (report, table) = bench_json_and_table(&words("--records 2000 --vs-disk"));
    let limits = &report["disk"]["limits"];
    assert_eq!(limits["tool"], "fio", "{report:#}");
    assert_eq!(limits["seconds"], 1, "{report:#}");
    let buffered = number(limits, &["write_buffered_mb_per_s"]);
    let direct = number(limits, &["write_direct_mb_per_s"]);
    let best = number(limits, &["best_write_mb_per_s"]);
    assert!(buffered > 0.0 && direct > 0.0, "{report:#}");
    assert_eq!(best, buffered.max(direct), "{report:#}");
    assert_eq!(number(&report, &["disk", "write_mb_per_s"]), best);
    assert_eq!(report["disk"]["write_is_the_disk_limit"], true);
    assert!(
        number(limits, &["read_direct_mb_per_s"]) > 0.0,
        "{report:#}"
    );
    for block in ["4096", "65536"] {
        let append = &limits["append_fdatasync"][block];
        assert!(number(append, &["writes_per_s"]) > 0.0, "{report:#}");
        let p50 = number(append, &["fdatasync_us", "p50"]);
        let p999 = number(append, &["fdatasync_us", "p999"]);
        assert!(p50 > 0.0 && p50 <= p999, "{report:#}");
    }
    // 2,000 records are far too few for cold random reads: said, not measured.
    assert!(
        limits["random_read_4k_direct_per_s"]
            .as_object()
            .unwrap()
            .is_empty(),
        "{report:#}"
    );
    assert!(table.contains("random reads not measured"), "{table}");
    let append_mb = number(&report, &["append", "mb_per_s"]);
    let ratio = number(&report, &["append", "vs_disk"]);
    assert!((ratio - append_mb / best).abs() < 1e-9, "{report:#}");
    assert!(number(&report, &["append", "final_flush_seconds"]) >= 0.0);
    assert!(
        table.contains("x the disk's best sequential write"),
        "{table}"
    );
}

/// Without fio there is no ruler: the ratio is named as the run's own pattern's, never as the
/// disk's limit.
#[test]
fn without_fio_the_append_ratio_is_not_called_the_disks_limit() {
    let (mut command, json, temporary) = bench_command();
    command.args(["--records", "1000", "--vs-disk"]);
    let (report, table) = report_of(command.env("PATH", temporary.path()), &json);
    assert_eq!(report["disk"]["tool"], "built-in", "{report:#}");
    assert!(report["disk"]["limits"].is_null(), "{report:#}");
    assert_eq!(report["disk"]["write_is_the_disk_limit"], false);
    assert!(table.contains("fio is not installed"), "{table}");
    assert!(
        table.contains("x the run's own pattern's best write (not the disk's limit)"),
        "{table}"
    );
    assert!(
        !table.contains("the disk's best sequential write"),
        "{table}"
    );
}

/// A durable phase's appends were synced before they were answered: no final flush.
#[test]
fn only_a_non_durable_append_phase_ends_with_a_final_flush() {
    let written = bench("--records 1000");
    assert!(number(&written, &["append", "final_flush_seconds"]) >= 0.0);
    let durable = bench("--records 1000 --flush batch");
    assert!(
        durable["durable"]["final_flush_seconds"].is_null(),
        "{durable:#}"
    );
}

#[test]
fn without_settle_nothing_waits_for_freed_memory() {
    let report = bench("--records 100");
    let waits = report["machine"]["page_reporting_waits"]
        .as_array()
        .unwrap();
    assert!(waits.is_empty(), "{report:#}");
}

/// `restart`, tiny: every open of both data sets is reported with plausible figures, and every
/// record the killed writer acknowledged (written, not synced) is found by the open after it.
#[test]
fn restart_reports_each_open_of_both_data_sets_and_loses_no_acknowledged_record() {
    let (mut command, json, temporary) = bench_command();
    let data = temporary.path().join("data");
    command
        .args(words(
            "--workload restart --partitions 2 --restart-mb 1 --restart-many-partitions 40 \
             --restart-many-records 400 --restart-unsynced-mb 0.5 --record-size 200 --batch-bytes 4096",
        ))
        .arg("--dir")
        .arg(&data);
    let (report, table) = report_of(&mut command, &json);
    assert_eq!(report["config"]["workload"], "restart");
    assert_throughput(&report, "restart_data_few");
    assert_throughput(&report, "restart_data_many");
    assert_eq!(report["restart_data_many"]["records"], 400, "{report:#}");
    let restart = &report["restart"];
    let method = restart["cache_drop"].as_str().unwrap();
    assert!(["drop_caches", "fadvise"].contains(&method), "{report:#}");
    // Syncs are counted by perf where it runs, else by strace; with either installed (`.ci/run`
    // installs strace) they must be counted.
    let installed = |program: &str, flag: &str| {
        std::process::Command::new(program)
            .arg(flag)
            .output()
            .is_ok_and(|output| output.status.success())
    };
    let counted = match restart["syncs_counted_by"].as_str() {
        Some(counter) => {
            assert!(["perf", "strace"].contains(&counter), "{report:#}");
            true
        }
        None => {
            assert!(
                !installed("perf", "--version") && !installed("strace", "-V"),
                "perf or strace is installed but the syncs were not counted: {report:#}"
            );
            false
        }
    };
    let cases = restart["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6, "{report:#}");
    for (data_set, partitions) in [("few", 2), ("many", 40)] {
        for case in ["clean", "unclean_synced", "unclean_unsynced"] {
            let found: Vec<&Value> = cases
                .iter()
                .filter(|row| row["case"] == case && row["data_set"] == data_set)
                .collect();
            assert_eq!(found.len(), 1, "{case} of {data_set}: {report:#}");
            let row = found[0];
            assert_eq!(row["partitions"], partitions, "{row:#}");
            let seconds = number(row, &["seconds"]);
            assert!(seconds.is_finite() && seconds >= 0.0, "{row:#}");
            assert!(number(row, &["read_bytes"]) >= 0.0, "{row:#}");
            assert!(number(row, &["rchar"]) >= 0.0, "{row:#}");
            assert!(number(row, &["data_bytes"]) > 0.0, "{row:#}");
            assert_eq!(row["offline_partitions"], 0, "{row:#}");
            match counted {
                true => {
                    let total = number(row, &["syncs"]);
                    let by_call: f64 = row["syncs_by_call"]
                        .as_object()
                        .unwrap()
                        .values()
                        .map(|count| count.as_f64().unwrap())
                        .sum();
                    assert_eq!(total, by_call, "{row:#}");
                }
                false => assert!(row["syncs"].is_null(), "{row:#}"),
            }
            if case == "unclean_unsynced" {
                assert!(number(row, &["unsynced_bytes"]) > 0.0, "{row:#}");
                assert!(
                    number(row, &["acknowledged_unsynced_records"]) > 0.0,
                    "{row:#}"
                );
                assert_eq!(row["lost_records"], 0, "{row:#}");
            } else {
                assert_eq!(row["unsynced_bytes"], 0, "{row:#}");
                assert!(row["lost_records"].is_null(), "{row:#}");
            }
        }
        // Read back without the engine: the data set and every acknowledged unsynced record.
        let dir = data.join(format!("restart-{data_set}"));
        let output = run(&[
            "topics",
            "describe",
            "--dir",
            path_arg(&dir),
            "--topic",
            "seglog-bench",
            "--format",
            "json",
        ]);
        assert_success(&output);
        let described: Value = serde_json::from_slice(&output.stdout).unwrap();
        let log_end: f64 = described["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|partition| partition["log_end_offset"].as_f64().unwrap())
            .sum();
        let unsynced = cases
            .iter()
            .find(|row| row["case"] == "unclean_unsynced" && row["data_set"] == data_set)
            .unwrap();
        let written = number(&report, &[&format!("restart_data_{data_set}"), "records"]);
        let acknowledged = number(unsynced, &["acknowledged_unsynced_records"]);
        assert_eq!(log_end, written + acknowledged, "{described:#}");
        assert_success(&verify(&dir));
    }
    for case in ["clean", "unclean_synced", "unclean_unsynced"] {
        assert!(table.contains(&format!("\n{case} ")), "{table}");
    }
    assert!(table.contains("every one recovered"), "{table}");
}

#[test]
fn restart_refuses_vs_disk() {
    let output = run(&words("bench --workload restart --vs-disk"));
    support::assert_fails_with(&output, "--vs-disk");
}

/// `create-partitions`, tiny: every step is timed, positive, and the table names each; the topic
/// and its partitions are left in the data directory.
#[test]
fn create_partitions_times_each_step_and_leaves_every_partition() {
    let (mut command, json, temporary) = bench_command();
    let data = temporary.path().join("data");
    command
        .args(words(
            "--workload create-partitions --partitions 40 --shards 2",
        ))
        .arg("--dir")
        .arg(&data);
    let (report, table) = report_of(&mut command, &json);
    assert_eq!(report["config"]["workload"], "create-partitions");
    let figures = &report["create_partitions"];
    assert_eq!(figures["partitions"], 40, "{report:#}");
    assert_eq!(figures["shards"], 2, "{report:#}");
    for step in ["create", "describe", "close", "reopen", "describe_reopened"] {
        let seconds = number(figures, &["steps", step, "seconds"]);
        assert!(seconds > 0.0, "{step}: {report:#}");
        assert!(table.contains(step), "{table}");
    }
    let dirs = std::fs::read_dir(&data)
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| {
            let name = entry.file_name();
            name.to_string_lossy().starts_with("seglog-bench-")
        })
        .count();
    assert_eq!(dirs, 40);
}

#[test]
fn create_partitions_refuses_vs_disk() {
    let output = run(&words("bench --workload create-partitions --vs-disk"));
    support::assert_fails_with(&output, "--vs-disk");
}
