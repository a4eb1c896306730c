//! `dump --format json` and `verify --format json` (issue 45): their JSON parses with serde_json
//! and describes a directory the test writes. `dump`: each file's kind and base offset, every
//! batch with the same fields and values as Kafka's text lines (offsets, count, position, size,
//! CRC, codec, producer fields, timestamps), every record with `--print-data-log`, every index
//! entry pointing into a batch; after a flipped byte, the batch's `crc_valid` is false and a
//! problem names its position. `verify`: per partition what was checked and `ok`, and after the
//! flipped byte the problem with its file and position, `ok` false and exit status 1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use support::{assert_exit_code, assert_success, dump, json_lines, path_arg, run, stdout_lines};

const RECORDS: usize = 200;

/// A topic `t` of `partitions` partitions holding RECORDS keyed records `key-i:value-NNNN`,
/// gzip batches of at most 512 bytes, an index entry every 128 bytes; the data directory.
fn written(dir: &Path, partitions: &str) -> PathBuf {
    let data = dir.join("data");
    let create = [
        "--partitions",
        partitions,
        "--config",
        "index.interval.bytes=128",
    ];
    assert_success(&support::topics("create", &data, "t", &create));
    let input: String = (0..RECORDS)
        .map(|i| format!("key-{i}:value-{i:04}\n"))
        .collect();
    let extra = [
        "--key-separator",
        ":",
        "--compression-type",
        "gzip",
        "--batch-size",
        "512",
    ];
    assert_success(&support::produce(&data, "t", &extra, input.as_bytes()));
    data
}

fn first_log(partition: &Path) -> PathBuf {
    support::segment_logs(partition).remove(0)
}

/// `name: value` pairs of one of Kafka's batch lines.
fn text_fields(line: &str) -> BTreeMap<String, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .chunks(2)
        .map(|pair| (pair[0].trim_end_matches(':').to_owned(), pair[1].to_owned()))
        .collect()
}

/// The JSON lines of `type`.
fn of_type<'a>(lines: &'a [Value], line_type: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|line| line["type"] == line_type)
        .collect()
}

#[test]
fn dump_json_has_each_files_kind_and_the_text_lines_batches_records_and_entries() {
    let dir = tempfile::tempdir().unwrap();
    let data = written(dir.path(), "1");
    let log = first_log(&data.join("t-0"));
    let index = log.with_extension("index");
    let time_index = log.with_extension("timeindex");
    let lines = json_lines(&dump(
        &[&log, &index, &time_index],
        &["--format", "json", "--print-data-log"],
    ));
    let file = path_arg(&log);
    assert_eq!(lines[0]["type"], "file");
    assert_eq!(lines[0]["file"], file);
    assert_eq!(lines[0]["kind"], "log");
    assert_eq!(lines[0]["base_offset"], 0);

    // Every batch as the text dump has it, field by field.
    let text = stdout_lines(&dump(&[&log], &[]));
    let text_batches: Vec<_> = text
        .iter()
        .filter(|line| line.starts_with("baseOffset:"))
        .map(|line| text_fields(line))
        .collect();
    let batches = of_type(&lines, "batch");
    assert!(batches.len() > 2, "{lines:#?}");
    assert_eq!(batches.len(), text_batches.len());
    let names = [
        ("base_offset", "baseOffset"),
        ("last_offset", "lastOffset"),
        ("count", "count"),
        ("base_sequence", "baseSequence"),
        ("last_sequence", "lastSequence"),
        ("producer_id", "producerId"),
        ("producer_epoch", "producerEpoch"),
        ("partition_leader_epoch", "partitionLeaderEpoch"),
        ("is_transactional", "isTransactional"),
        ("is_control", "isControl"),
        ("position", "position"),
        ("max_timestamp", "CreateTime"),
        ("size", "size"),
        ("magic", "magic"),
        ("crc", "crc"),
        ("crc_valid", "isvalid"),
    ];
    for (batch, text_batch) in batches.iter().zip(&text_batches) {
        assert_eq!(batch["file"], file);
        for (json_name, text_name) in names {
            assert_eq!(
                batch[json_name].to_string(),
                text_batch[text_name],
                "{json_name}"
            );
        }
        assert_eq!(batch["compression"], "gzip");
        assert_eq!(batch["crc_valid"], true);
        assert_eq!(batch["timestamp_type"], "CreateTime");
    }
    // The batches tile the file, offsets dense from 0.
    let mut position = 0;
    let mut next_offset = 0;
    for batch in &batches {
        assert_eq!(batch["position"], position);
        assert_eq!(batch["base_offset"], next_offset);
        position += batch["size"].as_u64().unwrap();
        next_offset = batch["last_offset"].as_u64().unwrap() + 1;
    }
    assert_eq!(position, fs::metadata(&log).unwrap().len());

    // Every record in offset order, with its key and payload.
    let records = of_type(&lines, "record");
    assert_eq!(records.len() as u64, next_offset);
    for (offset, record) in records.iter().enumerate() {
        assert_eq!(record["offset"], offset);
        let payload = record["payload"].as_str().unwrap();
        assert!(
            payload.starts_with("value-") && payload.len() == 10,
            "{record}"
        );
        assert_eq!(record["value_size"], 10);
        assert!(
            record["key"].as_str().unwrap().starts_with("key-"),
            "{record}"
        );
    }

    // Every index entry points at a batch holding its offset; likewise every time entry.
    let batch_holding = |offset: u64| {
        batches.iter().find(|batch| {
            batch["base_offset"].as_u64().unwrap() <= offset
                && offset <= batch["last_offset"].as_u64().unwrap()
        })
    };
    let files = of_type(&lines, "file");
    let kinds: Vec<&Value> = files.iter().map(|file| &file["kind"]).collect();
    assert_eq!(kinds, ["log", "index", "timeindex"]);
    let entries = of_type(&lines, "offset_entry");
    assert!(!entries.is_empty(), "{lines:#?}");
    for entry in &entries {
        assert_eq!(entry["file"], path_arg(&index));
        let batch = batch_holding(entry["offset"].as_u64().unwrap()).unwrap();
        assert_eq!(batch["position"], entry["position"], "{entry}");
    }
    let time_entries = of_type(&lines, "time_entry");
    assert!(!time_entries.is_empty(), "{lines:#?}");
    for entry in &time_entries {
        let batch = batch_holding(entry["offset"].as_u64().unwrap()).unwrap();
        assert_eq!(batch["max_timestamp"], entry["timestamp"], "{entry}");
    }
    assert!(of_type(&lines, "problem").is_empty(), "{lines:#?}");
}

/// Flips the last byte of the log's second batch (inside its records: the CRC no longer
/// matches); returns the batch's position.
fn flip_second_batch(log: &Path) -> u64 {
    let lines = json_lines(&dump(&[log], &["--format", "json"]));
    let batch = of_type(&lines, "batch")[1];
    let position = batch["position"].as_u64().unwrap();
    let size = batch["size"].as_u64().unwrap();
    let mut bytes = fs::read(log).unwrap();
    bytes[(position + size - 1) as usize] ^= 0x40;
    fs::write(log, bytes).unwrap();
    position
}

/// `seglog verify --dir DATA --format json`: its output and the one JSON document it printed.
fn verify_json(data: &Path) -> (std::process::Output, Value) {
    let output = run(&["verify", "--dir", path_arg(data), "--format", "json"]);
    let lines = stdout_lines(&output);
    assert_eq!(lines.len(), 1, "one document: {lines:#?}");
    let report = serde_json::from_str(&lines[0]).unwrap();
    (output, report)
}

/// The partition of `report` whose directory is `dir`.
fn partition<'a>(report: &'a Value, dir: &Path) -> &'a Value {
    let partitions = report["partitions"].as_array().unwrap();
    let found = partitions.iter().find(|p| p["dir"] == path_arg(dir));
    found.unwrap_or_else(|| panic!("no {} in {report:#}", dir.display()))
}

#[test]
fn verify_json_reports_each_partition_and_names_a_flipped_byte_with_exit_status_1() {
    let dir = tempfile::tempdir().unwrap();
    let data = written(dir.path(), "2");
    let (output, report) = verify_json(&data);
    assert_success(&output);
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["problem_count"], 0);
    assert_eq!(report["records"], RECORDS);
    assert_eq!(report["partitions"].as_array().unwrap().len(), 2);
    let mut records = 0;
    for name in ["t-0", "t-1"] {
        let checked = partition(&report, &data.join(name));
        assert_eq!(checked["ok"], true, "{report:#}");
        assert_eq!(checked["segments"], 1, "{report:#}");
        assert!(checked["batches"].as_u64().unwrap() >= 1, "{report:#}");
        assert!(
            checked["index_entries"].as_u64().unwrap() >= 1,
            "{report:#}"
        );
        assert!(checked["problems"].as_array().unwrap().is_empty());
        records += checked["records"].as_u64().unwrap();
    }
    assert_eq!(records, RECORDS as u64);

    let log = first_log(&data.join("t-0"));
    let position = flip_second_batch(&log);
    let (output, report) = verify_json(&data);
    assert_exit_code(&output, 1);
    assert_eq!(report["ok"], false, "{report:#}");
    assert_eq!(report["problem_count"], 1, "{report:#}");
    let damaged = partition(&report, &data.join("t-0"));
    assert_eq!(damaged["ok"], false, "{report:#}");
    let problem = &damaged["problems"][0];
    assert_eq!(problem["file"], path_arg(&log));
    assert_eq!(problem["position"], position);
    let reason = problem["reason"].as_str().unwrap();
    assert!(reason.contains("CRC-32C mismatch"), "{reason}");
    assert_eq!(partition(&report, &data.join("t-1"))["ok"], true);
    assert!(
        report["problems"].as_array().unwrap().is_empty(),
        "{report:#}"
    );

    // dump --format json: the batch's CRC is invalid, and the problem is at its position.
    let output = dump(&[&log], &["--format", "json"]);
    assert_exit_code(&output, 1);
    let lines: Vec<Value> = stdout_lines(&output)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let batches = of_type(&lines, "batch");
    assert_eq!(batches[1]["crc_valid"], false, "{lines:#?}");
    let problems = of_type(&lines, "problem");
    assert_eq!(problems.len(), 1, "{lines:#?}");
    assert_eq!(problems[0]["position"], position);
}

#[test]
fn text_stays_the_default_format_of_dump_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let data = written(dir.path(), "1");
    let output = support::verify(&data);
    assert_success(&output);
    assert!(stdout_lines(&output).last().unwrap().starts_with("OK "));
    let log = first_log(&data.join("t-0"));
    let lines = stdout_lines(&dump(&[&log], &[]));
    assert_eq!(lines[0], format!("Dumping {}", log.display()));
    assert_eq!(lines[1], "Log starting offset: 0");
    assert!(lines[2].starts_with("baseOffset: 0 "), "{lines:#?}");
}
