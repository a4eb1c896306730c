//! Helpers shared by the `seglog` binary's test files: run the binary with arguments and stdin
//! (its common commands spelled once: `produce`, `consume`, `topics`, `verify`, `dump`), read
//! what it printed, and check it.

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

/// `args` split at spaces: a command line's arguments written as one string.
pub fn words(args: &str) -> Vec<&str> {
    args.split_whitespace().collect()
}

/// The arguments `COMMAND... --dir DIR REST...`, each of `command` and `rest` split at spaces.
pub fn with_dir(command: &str, dir: &Path, rest: &str) -> Vec<String> {
    [words(command), vec!["--dir", path_arg(dir)], words(rest)]
        .concat()
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Runs `seglog args...`.
pub fn run_args(args: &[String]) -> Output {
    run_args_with_stdin(args, b"")
}

/// Runs `seglog args...` with `input` on stdin.
pub fn run_args_with_stdin(args: &[String], input: &[u8]) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_with_stdin(&args, input)
}

pub fn path_arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `seglog produce --dir DATA --topic TOPIC EXTRA...` with `input` on stdin.
pub fn produce(data: &Path, topic: &str, extra: &[&str], input: &[u8]) -> Output {
    let mut args = vec!["produce", "--dir", path_arg(data), "--topic", topic];
    args.extend_from_slice(extra);
    run_with_stdin(&args, input)
}

/// `seglog consume --dir DATA --topic TOPIC --partition PARTITION EXTRA...`, in `--format text`
/// (every field) unless `EXTRA` names a format or a `--property`.
pub fn consume(data: &Path, topic: &str, partition: u32, extra: &[&str]) -> Output {
    let partition = partition.to_string();
    let base = ["consume", "--dir", path_arg(data), "--topic", topic];
    let chosen = extra
        .iter()
        .any(|arg| *arg == "--format" || *arg == "--property");
    let format: &[&str] = if chosen { &[] } else { &["--format", "text"] };
    run(&[&base[..], &["--partition", &partition], format, extra].concat())
}

/// `seglog topics COMMAND --dir DATA --topic TOPIC EXTRA...`.
pub fn topics(command: &str, data: &Path, topic: &str, extra: &[&str]) -> Output {
    let mut args = vec!["topics", command, "--dir", path_arg(data), "--topic", topic];
    args.extend_from_slice(extra);
    run(&args)
}

/// `seglog topics create` of `topic` with a `--config` for each of `configs`, which succeeds.
pub fn create_topic(data: &Path, topic: &str, configs: &[&str]) {
    let configs: Vec<&str> = configs
        .iter()
        .flat_map(|config| ["--config", config])
        .collect();
    assert_success(&topics("create", data, topic, &configs));
}

/// `seglog verify --dir DIR`.
pub fn verify(dir: &Path) -> Output {
    run(&["verify", "--dir", path_arg(dir)])
}

/// `seglog dump EXTRA... --files FILES...`.
pub fn dump(files: &[&Path], extra: &[&str]) -> Output {
    let mut args = vec!["dump"];
    args.extend_from_slice(extra);
    args.push("--files");
    args.extend(files.iter().map(|file| path_arg(file)));
    run(&args)
}

/// The value of `name=value` in a line `consume` printed as text.
pub fn text_field(line: &str, name: &str) -> String {
    let prefix = format!("{name}=");
    line.split(' ')
        .find_map(|part| part.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("{name} in {line:?}"))
        .to_owned()
}

/// The values `consume` printed as text, in order.
pub fn text_values(output: &Output) -> Vec<String> {
    stdout_lines(output)
        .iter()
        .map(|line| text_field(line, "value"))
        .collect()
}

/// Asserts that the command exited with `code`.
pub fn assert_exit_code(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        stderr_text(output)
    );
}

/// Asserts that a line the command printed on stdout starts with `prefix`.
pub fn assert_prints_line_starting(output: &Output, prefix: &str) {
    let lines = stdout_lines(output);
    assert!(
        lines.iter().any(|line| line.starts_with(prefix)),
        "{prefix:?} in {lines:#?}"
    );
}

/// Asserts that `seglog verify` of `dir` fails naming an incomplete batch at `position` of `log`.
pub fn assert_verify_finds_incomplete_batch(dir: &Path, log: &Path, position: u64) {
    let output = verify(dir);
    assert_exit_code(&output, 1);
    let problem = format!("{}: position {position}: incomplete batch", log.display());
    assert_prints_line_starting(&output, &problem);
}

/// Asserts that the command failed with exit code 1, printed nothing on stdout and exactly `line`
/// on stderr.
pub fn assert_fails_with_line(output: &Output, line: &str) {
    assert_exit_code(output, 1);
    assert!(output.stdout.is_empty(), "{:?}", stdout_lines(output));
    assert_eq!(stderr_text(output), format!("{line}\n"));
}

/// Asserts a usage error: exit code 2, nothing on stdout, a message on stderr.
pub fn assert_usage_error(output: &Output) {
    assert_exit_code(output, 2);
    assert!(output.stdout.is_empty(), "{:?}", stdout_lines(output));
    assert!(!output.stderr.is_empty());
}

/// The `.log` files of a partition directory, in base offset order.
pub fn segment_logs(partition: &Path) -> Vec<std::path::PathBuf> {
    let mut logs: Vec<std::path::PathBuf> = std::fs::read_dir(partition)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
        .collect();
    logs.sort();
    logs
}

/// The JSON objects a command that succeeded printed, one a line.
pub fn json_lines(output: &Output) -> Vec<serde_json::Value> {
    assert_success(output);
    stdout_lines(output)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// `seglog groups COMMAND --dir DATA EXTRA...`.
pub fn groups(command: &str, data: &Path, extra: &[&str]) -> Output {
    run(&[&["groups", command, "--dir", path_arg(data)][..], extra].concat())
}

/// The sum of `field` over the partitions of a group `groups describe --format json` printed.
pub fn sum_over_partitions(group: &serde_json::Value, field: &str) -> u64 {
    group["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|partition| partition[field].as_u64().unwrap())
        .sum()
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
    let output = topics("describe", data, topic, &["--format", "json"]);
    assert_success(&output);
    let lines = stdout_lines(&output);
    assert_eq!(lines.len(), 1, "one JSON object per topic: {lines:?}");
    serde_json::from_str(&lines[0]).unwrap()
}

/// The values `consume` prints for a partition, in offset order.
pub fn consumed_values(data: &Path, topic: &str, partition: u32) -> Vec<String> {
    let output = consume(data, topic, partition, &["--format", "json"]);
    assert_success(&output);
    stdout_lines(&output)
        .iter()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            record["value"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// One entry under a directory: a directory, or a file with its bytes; both with their size and
/// modification time, so that any write, truncation, creation or removal shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryState {
    pub is_dir: bool,
    pub size_bytes: u64,
    pub modified: std::time::SystemTime,
    pub contents: Vec<u8>,
}

/// Every entry under `root` (not `root` itself), by path.
pub fn snapshot(root: &Path) -> std::collections::BTreeMap<std::path::PathBuf, EntryState> {
    let mut entries = std::collections::BTreeMap::new();
    add_entries(root, &mut entries);
    entries
}

fn add_entries(
    dir: &Path,
    entries: &mut std::collections::BTreeMap<std::path::PathBuf, EntryState>,
) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        let state = EntryState {
            is_dir: metadata.is_dir(),
            size_bytes: metadata.len(),
            modified: metadata.modified().unwrap(),
            contents: match metadata.is_file() {
                true => std::fs::read(&path).unwrap(),
                false => Vec::new(),
            },
        };
        if metadata.is_dir() {
            add_entries(&path, entries);
        }
        entries.insert(path, state);
    }
}

/// How long a test waits for a line from a running `seglog` before it gives up: a guard against
/// a hang, far above what any step takes, never a measure of speed.
pub const LINE_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// A `seglog` child process whose stdout lines arrive on a channel as it prints them.
pub struct RunningSeglog {
    pub child: std::process::Child,
    pub stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl RunningSeglog {
    pub fn spawn(args: &[&str]) -> RunningSeglog {
        RunningSeglog::spawn_with_stderr(args, Stdio::inherit())
    }

    /// Like `spawn`, with its stderr discarded.
    pub fn spawn_quiet(args: &[&str]) -> RunningSeglog {
        RunningSeglog::spawn_with_stderr(args, Stdio::null())
    }

    fn spawn_with_stderr(args: &[&str], stderr: Stdio) -> RunningSeglog {
        let mut child = seglog()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                if sender.send(line.unwrap()).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        RunningSeglog {
            child,
            stdin,
            lines,
        }
    }

    /// `seglog produce --dir DATA --topic TOPIC`, its stderr discarded.
    pub fn producer(data: &Path, topic: &str) -> RunningSeglog {
        RunningSeglog::spawn_quiet(&["produce", "--dir", path_arg(data), "--topic", topic])
    }

    /// Writes each of `values` as a line, one at a time, and checks that each is acknowledged
    /// in partition 0, at the offsets from `first_offset` on, before it writes the next: the
    /// acknowledgement comes while stdin is still open. (`next_line` gives up, and the child is
    /// killed, if none comes.)
    pub fn produce_one_at_a_time(&mut self, values: &[&str], first_offset: u64) {
        for (offset, value) in (first_offset..).zip(values) {
            self.write_line(value);
            assert_eq!(self.next_line(), format!("partition=0 offset={offset}"));
        }
    }

    /// The next line it prints.
    pub fn next_line(&self) -> String {
        self.lines
            .recv_timeout(LINE_WAIT)
            .unwrap_or_else(|error| panic!("no line from seglog within {LINE_WAIT:?}: {error}"))
    }

    /// The lines it printed that were not read yet, once its stdout is closed.
    pub fn remaining_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            match self.lines.recv_timeout(LINE_WAIT) {
                Ok(line) => lines.push(line),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return lines,
                Err(error) => panic!("seglog's stdout still open after {LINE_WAIT:?}: {error}"),
            }
        }
    }

    /// Writes `line` and a newline to its stdin.
    pub fn write_line(&mut self, line: &str) {
        self.write(&format!("{line}\n"));
    }

    /// Writes `text` to its stdin.
    pub fn write(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Closes its stdin and waits for it to exit.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.child.wait().unwrap()
    }
}

impl Drop for RunningSeglog {
    /// A test that fails part-way leaves no process behind.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A partition the engine refuses to open: topic `t`, partition 0 of `data`, 30 records
/// `value-<n>` keyed `k<n>`, one a batch, in segments of at most 600 bytes; one byte in the
/// middle of the fourth batch of the second segment flipped (a CRC mismatch among valid batches,
/// not a torn tail), and the clean-shutdown marker and recovery-point checkpoint removed, so that
/// the next open re-validates every segment and refuses that one.
pub struct DamagedPartition {
    pub data: std::path::PathBuf,
    /// The damaged segment's `.log`.
    pub file: std::path::PathBuf,
    /// Where the damaged batch starts in it.
    pub position: u64,
    /// The damaged segment's length.
    pub file_bytes: u64,
    /// The damaged batch's offset: the partition's valid data ends below it.
    pub offset: u64,
    /// How many records the partition held.
    pub records: u64,
}

pub fn damaged_partition(data: &Path) -> DamagedPartition {
    let records = 30u64;
    let input: String = (0..records).map(|n| format!("k{n}:value-{n}\n")).collect();
    let extra = words("--key-separator : --config segment.bytes=600 --linger-ms 0 --batch-size 1");
    assert_success(&produce(data, "t", &extra, input.as_bytes()));
    let logs = segment_logs(&data.join("t-0"));
    assert!(logs.len() >= 3, "several segments: {logs:?}");
    let file = logs[1].clone();
    let mut bytes = std::fs::read(&file).unwrap();
    let batches = batch_starts(&bytes);
    assert!(batches.len() >= 5, "{batches:?}");
    let position = batches[3];
    let offset = u64::from_be_bytes(bytes[position..position + 8].try_into().unwrap());
    // A byte of the last record's value, inside the batch, covered by its CRC.
    let end = batches[4];
    bytes[end - 2] ^= 0x55;
    std::fs::write(&file, &bytes).unwrap();
    std::fs::remove_file(data.join(".kafka_cleanshutdown")).unwrap();
    // Without the recovery-point checkpoint (Kafka's file and seglog's copies) every segment is
    // recovered, and so checked.
    for name in ["", ".0", ".1"].map(|copy| format!("recovery-point-offset-checkpoint{copy}")) {
        let _ = std::fs::remove_file(data.join(name));
    }
    assert!(!data.join("recovery-point-offset-checkpoint").exists());
    DamagedPartition {
        data: data.to_owned(),
        file,
        position: position as u64,
        file_bytes: bytes.len() as u64,
        offset,
        records,
    }
}

/// Where each batch of a `.log` starts: its 8-byte base offset, then its 4-byte length.
pub fn batch_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut position = 0;
    while position + 12 <= bytes.len() {
        starts.push(position);
        let length = i32::from_be_bytes(bytes[position + 8..position + 12].try_into().unwrap());
        position += 12 + length as usize;
    }
    starts
}
