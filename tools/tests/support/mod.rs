//! Helpers shared by the `seglog` binary's test files: run the binary with arguments and stdin,
//! and read what it printed. (`cli.rs` keeps its own copies.)

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread;

pub fn seglog() -> Command {
    Command::new(env!("CARGO_BIN_EXE_seglog"))
}

/// Runs `seglog args...` with `input` on stdin and returns what it printed.
pub fn run_with_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut command = seglog();
    command.args(args);
    run_command_with_stdin(command, input)
}

/// Runs `command` with `input` on stdin (written from a thread, so a child that answers while
/// reading never deadlocks against us) and returns what it printed.
pub fn run_command_with_stdin(mut command: Command, input: &[u8]) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().unwrap();
    if let Err(error) = writer.join().unwrap() {
        assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
    }
    output
}

pub fn run(args: &[&str]) -> Output {
    run_with_stdin(args, b"")
}

pub fn stdout_lines(output: &Output) -> Vec<String> {
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

pub fn stderr_text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        stderr_text(output)
    );
}

/// Asserts that the command failed with exit code 1, printed nothing on stdout, and said
/// `message` on stderr.
pub fn assert_fails_with(output: &Output, message: &str) {
    assert_eq!(
        output.status.code(),
        Some(1),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        stderr_text(output)
    );
    assert!(output.stdout.is_empty(), "{:?}", stdout_lines(output));
    assert!(
        stderr_text(output).contains(message),
        "{message:?} in {}",
        stderr_text(output)
    );
}

pub fn path_arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `partition=P offset=O` -> (P, O).
pub fn parse_text_ack(line: &str) -> (u32, u64) {
    let (partition, offset) = line.split_once(' ').unwrap();
    (
        partition
            .strip_prefix("partition=")
            .unwrap()
            .parse()
            .unwrap(),
        offset.strip_prefix("offset=").unwrap().parse().unwrap(),
    )
}

/// `seglog topics describe --format json` of one topic, parsed.
pub fn describe_json(data: &Path, topic: &str) -> serde_json::Value {
    let output = run(&[
        "topics",
        "describe",
        "--dir",
        path_arg(data),
        "--topic",
        topic,
        "--format",
        "json",
    ]);
    assert_success(&output);
    let lines = stdout_lines(&output);
    assert_eq!(lines.len(), 1, "one JSON object per topic: {lines:?}");
    serde_json::from_str(&lines[0]).unwrap()
}

/// The values `consume` prints for a partition, in offset order.
pub fn consumed_values(data: &Path, topic: &str, partition: u32) -> Vec<String> {
    let partition = partition.to_string();
    let output = run(&[
        "consume",
        "--dir",
        path_arg(data),
        "--topic",
        topic,
        "--partition",
        &partition,
        "--format",
        "json",
    ]);
    assert_success(&output);
    stdout_lines(&output)
        .iter()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            record["value"].as_str().unwrap().to_owned()
        })
        .collect()
}
