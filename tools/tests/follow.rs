//! `consume --follow` (issue 41, item 7), run as a user runs it. It proves that a follower prints
//! the records another process appends after it started — a `seglog produce` that keeps the
//! directory open and locked, and one that appends and exits — each once it is appended, that
//! `--max-records` stops it, and that without `--max-records` it keeps waiting at the log end until
//! it is interrupted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use rustix::process::{Pid, Signal, kill_process};
use support::{RunningSeglog, assert_success, path_arg, stdout_lines, text_field};

fn produce(data: &Path, input: &str) {
    let output = support::produce(data, "t", &[], input.as_bytes());
    assert_success(&output);
    assert_eq!(stdout_lines(&output).len(), input.lines().count());
}

/// A data directory whose topic `t` holds `input`'s lines.
fn data_directory(parent: &Path, input: &str) -> PathBuf {
    let data = parent.join("data");
    produce(&data, input);
    data
}

fn follow(data: &Path, extra: &[&str]) -> RunningSeglog {
    let base = ["consume", "--dir", path_arg(data), "--topic", "t"];
    let text = ["--partition", "0", "--follow", "--format", "text"];
    RunningSeglog::spawn(&[&base[..], &text, extra].concat())
}

/// `offset=O ... value=V ...` -> (O, V).
fn offset_and_value(line: &str) -> (u64, String) {
    (
        text_field(line, "offset").parse().unwrap(),
        text_field(line, "value"),
    )
}

#[test]
fn consume_follow_prints_what_a_running_producer_appends_and_stops_at_max_records() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_directory(dir.path(), "a\nb\n");
    let mut follower = follow(&data, &["--max-records", "5"]);
    assert_eq!(offset_and_value(&follower.next_line()), (0, "a".to_owned()));
    assert_eq!(offset_and_value(&follower.next_line()), (1, "b".to_owned()));

    // The producer holds the directory (and its lock) while the follower reads it.
    let mut producer = RunningSeglog::spawn(&["produce", "--dir", path_arg(&data), "--topic", "t"]);
    for (offset, value) in [(2, "c"), (3, "d"), (4, "e")] {
        producer.write_line(value);
        assert_eq!(producer.next_line(), format!("partition=0 offset={offset}"));
        assert_eq!(
            offset_and_value(&follower.next_line()),
            (offset, value.to_owned())
        );
    }
    let status = follower.child.wait().unwrap();
    assert!(status.success(), "--max-records 5 stops it: {status:?}");
    assert!(follower.remaining_lines().is_empty());

    producer.write_line("f");
    assert_eq!(producer.next_line(), "partition=0 offset=5");
    assert!(producer.finish().success());
}

#[test]
fn consume_follow_keeps_waiting_at_the_log_end_until_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_directory(dir.path(), "a\n");
    let mut follower = follow(&data, &[]);
    assert_eq!(offset_and_value(&follower.next_line()), (0, "a".to_owned()));

    // Appended by a process that starts after the follower reached the log end, and exits.
    produce(&data, "b\nc\n");
    assert_eq!(offset_and_value(&follower.next_line()), (1, "b".to_owned()));
    assert_eq!(offset_and_value(&follower.next_line()), (2, "c".to_owned()));

    let pid = Pid::from_child(&follower.child);
    kill_process(pid, Signal::INT).unwrap();
    let status = follower.child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(Signal::INT.as_raw()),
        "still following when interrupted: {status:?}"
    );
}
