//! `verify` finds what opening the log refuses (issue 41, item 9), run as a user runs it. It
//! proves that: with a middle segment removed, `verify` exits 1 naming the offset gap and the
//! segment after it, where the engine refuses to open the partition, while the gaps compaction
//! leaves between segments stay accepted; and segment files whose names the log ignores
//! (`123.log`, `00000000000000000abc.log`) are reported, each by name, as is a producer-id block
//! file that does not parse.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use seglog::engine::{Engine, EngineConfig, FetchOptions};
use seglog::types::{Offset, TopicName};
use support::{
    assert_exit_code, assert_prints_line_starting, assert_success, create_topic, path_arg, run,
    segment_logs as logs, stdout_lines, verify,
};

/// Produces `input` to a new topic created with `configs`.
fn produce(data: &Path, topic: &str, configs: &[&str], input: &str) {
    create_topic(data, topic, configs);
    let output = support::produce(data, topic, &["--key-separator", ":"], input.as_bytes());
    assert_success(&output);
}

fn base_offset(log: &Path) -> u64 {
    log.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

#[test]
fn verify_names_the_offset_gap_a_missing_middle_segment_leaves_which_the_engine_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let values: String = (0..200).map(|i| format!("value-{i:04}\n")).collect();
    produce(&data, "t", &["segment.bytes=1024"], &values);
    // A compacted topic whose cleaning leaves gaps between segments, which are not findings.
    let keyed: String = (0..200).map(|i| format!("key-{}:v{i}\n", i % 5)).collect();
    let configs = ["cleanup.policy=compact", "segment.bytes=1024"];
    produce(&data, "latest", &configs, &keyed);
    assert_success(&run(&[
        "clean",
        "--dir",
        path_arg(&data),
        "--topic",
        "latest",
    ]));
    let output = verify(&data);
    assert_success(&output);
    assert!(stdout_lines(&output).last().unwrap().starts_with("OK "));

    let logs = logs(&data.join("t-0"));
    assert!(logs.len() >= 3, "{logs:?}");
    let (missing, next) = (&logs[1], &logs[2]);
    for extension in ["log", "index", "timeindex"] {
        fs::remove_file(missing.with_extension(extension)).unwrap();
    }
    let output = verify(&data);
    assert_exit_code(&output, 1);
    let gap = format!(
        "{}: position 0: offset gap: offsets {} to {} are in no segment",
        next.display(),
        base_offset(missing),
        base_offset(next) - 1
    );
    assert_prints_line_starting(&output, &gap);
    let lines = stdout_lines(&output);
    assert!(
        lines.last().unwrap().starts_with("FAILED 1 problems"),
        "{lines:?}"
    );

    assert_engine_refuses_t0(&data, "leaves an offset gap");
}

/// The engine opens `data` but refuses to open partition `t-0` at its first use, saying
/// `reason`. (After a clean shutdown a describe answers from the checkpoints without opening it.)
fn assert_engine_refuses_t0(data: &Path, reason: &str) {
    let config = EngineConfig::default().with_pin_shards(false);
    let engine = Engine::open(data, config).unwrap();
    let topic = TopicName::parse("t").unwrap();
    let fetched = engine.fetch(&topic, 0, Offset(0), FetchOptions::default());
    let refused = fetched.wait().unwrap_err();
    assert!(refused.to_string().contains(reason), "{refused}");
    let refused = engine.describe_partition("t", 0).unwrap_err();
    assert!(refused.to_string().contains(reason), "{refused}");
    engine.close().unwrap();
}

#[test]
fn verify_reports_each_misnamed_segment_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    produce(&data, "t", &[], "a\nb\n");
    let partition = data.join("t-0");
    let log = partition.join("00000000000000000000.log");
    let misnamed = [
        partition.join("123.log"),
        partition.join("00000000000000000abc.log"),
        partition.join("00000000000000000abc.index"),
    ];
    for name in &misnamed {
        fs::copy(&log, name).unwrap();
    }
    let output = verify(&data);
    assert_exit_code(&output, 1);
    for name in &misnamed {
        assert_prints_line_starting(
            &output,
            &format!("{}: misnamed segment file", name.display()),
        );
    }
    let lines = stdout_lines(&output);
    let summary = lines.last().unwrap();
    assert!(
        summary.starts_with("FAILED 3 problems in 1 segments, "),
        "{summary}"
    );
}

/// Issue 41, item 3: a checkpoint whose copies are all corrupt is reported (the engine would
/// open every partition through full recovery), and one valid copy is enough.
#[test]
fn verify_reports_a_checkpoint_with_no_valid_copy_and_accepts_one_valid_copy() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    produce(&data, "t", &[], "a\nb\n");
    let copies = [
        "recovery-point-offset-checkpoint.0",
        "recovery-point-offset-checkpoint.1",
    ]
    .map(|name| data.join(name));
    let present: Vec<&PathBuf> = copies.iter().filter(|copy| copy.exists()).collect();
    assert!(!present.is_empty(), "the engine writes checkpoint copies");
    fs::write(present[0], b"seglog-checkpoint 1 7 00000000\n0\n0\n").unwrap();
    if present.len() == 1 {
        assert_exit_code(&verify(&data), 1);
    } else {
        assert_success(&verify(&data));
        fs::write(present[1], b"torn").unwrap();
    }
    let output = verify(&data);
    assert_exit_code(&output, 1);
    let reported = format!(
        "{}: no valid copy (",
        data.join("recovery-point-offset-checkpoint").display()
    );
    assert_prints_line_starting(&output, &reported);
}

/// A producer-id block file that does not parse is reported (the engine would refuse to hand
/// out producer ids); a valid one is accepted.
#[test]
fn verify_reports_a_producer_id_block_file_that_does_not_parse() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    produce(&data, "t", &[], "a\n");
    let block = data.join("seglog-producer-ids");
    fs::write(&block, b"1\n1000 1999\n").unwrap();
    assert_success(&verify(&data));
    fs::write(&block, b"1\n1999 1000\n").unwrap();
    let output = verify(&data);
    assert_exit_code(&output, 1);
    assert_prints_line_starting(&output, &format!("{}: producer-id block", block.display()));
}
