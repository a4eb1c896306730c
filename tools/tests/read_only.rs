//! The read commands never write (issue 41, item 6), run as a user runs them. They prove that:
//! `topics list|describe`, `consume --partition`, `groups list|describe` and `verify` refuse a
//! directory of other files (`foo-1/readme.txt` and a stray `zz-0/00000000000000000000.log` of
//! random bytes) naming it, and `dump` reports those files, each leaving every byte, size and
//! modification time as it was (the stray is neither adopted nor truncated); the writing commands
//! refuse that directory too before writing anything; on a missing or an empty directory the read
//! commands fail clearly and create nothing; on a real data directory (with a stray segment
//! directory) every read command changes nothing on disk; and they work on a data directory
//! mounted read-only, and while a running `seglog produce` holds the directory's lock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{
    RunningSeglog, assert_exit_code, assert_fails_with, assert_prints_line_starting,
    assert_success, assert_verify_finds_incomplete_batch, consume, dump, groups, json_lines,
    path_arg, produce, run, run_args, run_args_with_stdin, snapshot, stdout_lines,
    sum_over_partitions, text_values as values, topics, verify, with_dir, words,
};

const STRAY_LOG: &str = "00000000000000000000.log";
const STRAY_LOG_BYTES: usize = 3000;

/// `junk/foo-1/readme.txt` and `junk/zz-0/00000000000000000000.log` (3,000 random bytes): looks
/// like partition directories, holds no seglog data. Returns the directory and the stray's bytes.
fn directory_of_other_files(parent: &Path) -> (PathBuf, Vec<u8>) {
    let junk = parent.join("junk");
    fs::create_dir_all(junk.join("foo-1")).unwrap();
    fs::write(junk.join("foo-1").join("readme.txt"), "not a partition\n").unwrap();
    let mut random = fastrand::Rng::with_seed(41);
    let stray: Vec<u8> = (0..STRAY_LOG_BYTES).map(|_| random.u8(..)).collect();
    add_stray_segment(&junk, &stray);
    (junk, stray)
}

fn add_stray_segment(dir: &Path, bytes: &[u8]) {
    fs::create_dir_all(dir.join("zz-0")).unwrap();
    fs::write(dir.join("zz-0").join(STRAY_LOG), bytes).unwrap();
}

/// Every read command that takes `--dir`, reading topic `topic`.
fn read_commands(dir: &Path, topic: &str, group: &str) -> Vec<Vec<String>> {
    [
        ("topics list", String::new()),
        ("topics describe", String::new()),
        ("topics describe", format!("--topic {topic}")),
        ("consume", format!("--topic {topic} --partition 0")),
        ("groups list", String::new()),
        ("groups describe", String::new()),
        ("groups describe", format!("--group {group}")),
        ("verify", String::new()),
    ]
    .iter()
    .map(|(command, rest)| with_dir(command, dir, rest))
    .collect()
}

/// Each of `commands`, with `input` on stdin, fails saying `junk` is not a seglog data directory,
/// and changes nothing in it.
fn assert_each_refused_changing_nothing(junk: &Path, commands: &[Vec<String>], input: &[u8]) {
    let before = snapshot(junk);
    let refusal = format!("{} is not a seglog data directory", junk.display());
    for args in commands {
        assert_fails_with(&run_args_with_stdin(args, input), &refusal);
        assert_eq!(snapshot(junk), before, "{args:?} changed the directory");
    }
}

#[test]
fn read_commands_refuse_a_directory_of_other_files_and_create_truncate_or_adopt_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (junk, stray) = directory_of_other_files(dir.path());
    let before = snapshot(&junk);
    assert_each_refused_changing_nothing(&junk, &read_commands(&junk, "zz", "g"), b"");
    let stray_path = junk.join("zz-0").join(STRAY_LOG);
    let readme = junk.join("foo-1").join("readme.txt");
    let output = dump(&[&stray_path, &readme], &[]);
    assert_exit_code(&output, 1); // the stray holds no batch
    let lines = stdout_lines(&output);
    assert!(
        lines.contains(&format!(
            "Found {STRAY_LOG_BYTES} invalid bytes at the end of {STRAY_LOG}"
        )),
        "{lines:?}"
    );
    assert_eq!(snapshot(&junk), before, "dump changed the directory");
    assert_eq!(fs::read(&stray_path).unwrap(), stray, "the stray is intact");
    assert!(!junk.join("foo-0").exists() && !junk.join("seglog-topics").exists());
}

#[test]
fn writing_commands_refuse_a_directory_of_other_files_before_writing_anything() {
    let dir = tempfile::tempdir().unwrap();
    let (junk, _) = directory_of_other_files(dir.path());
    let commands = [
        with_dir("produce", &junk, "--topic zz"),
        with_dir("topics create", &junk, "--topic new"),
        with_dir("topics alter", &junk, "--topic zz --partitions 2"),
        with_dir("topics delete", &junk, "--topic foo"),
        with_dir("clean", &junk, ""),
        with_dir("consume", &junk, "--topic zz --group g"),
    ];
    assert_each_refused_changing_nothing(&junk, &commands, b"a record\n");
}

#[test]
fn read_commands_on_a_missing_or_an_empty_directory_fail_clearly_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    for args in read_commands(&missing, "t", "g") {
        let message = format!("data directory {} does not exist", missing.display());
        assert_fails_with(&run_args(&args), &message);
        assert!(!missing.exists(), "{args:?} created the directory");
    }
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    for args in read_commands(&empty, "t", "g") {
        let message = format!("data directory {} is empty", empty.display());
        assert_fails_with(&run_args(&args), &message);
        assert!(
            snapshot(&empty).is_empty(),
            "{args:?} wrote in the directory"
        );
    }
    // An empty directory is new to a writing command.
    let output = produce(&empty, "t", &[], b"a\n");
    assert_success(&output);
    assert_eq!(stdout_lines(&output), ["partition=0 offset=0"]);
}

/// A data directory with topic `t` (2 partitions of 20 records, several segments each) and group
/// `g`, which committed offsets for 5 of them; closed cleanly.
fn data_directory_with_a_group(parent: &Path) -> PathBuf {
    let data = parent.join("data");
    let input: String = (0..40).map(|i| format!("value-{i:02}\n")).collect();
    let extra = words("--partitions 2 --config segment.bytes=1024");
    assert_success(&produce(&data, "t", &extra, input.as_bytes()));
    let args = with_dir("consume", &data, "--topic t --group g --max-records 5");
    assert_success(&run_args(&args));
    data
}

#[test]
fn read_commands_on_a_data_directory_change_nothing_on_disk_and_leave_a_stray_segment_alone() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_directory_with_a_group(dir.path());
    let stray: Vec<u8> = (0..STRAY_LOG_BYTES).map(|i| (i * 7 % 251) as u8).collect();
    add_stray_segment(&data, &stray);
    let before = snapshot(&data);
    for args in read_commands(&data, "t", "g") {
        let output = run_args(&args);
        assert_eq!(snapshot(&data), before, "{args:?} changed the directory");
        if args[0] == "verify" {
            // The stray is not a segment.
            assert_exit_code(&output, 1);
            let stray_path = data.join("zz-0").join(STRAY_LOG);
            assert_prints_line_starting(
                &output,
                &format!("{}: position 0: ", stray_path.display()),
            );
        } else {
            assert_success(&output);
        }
    }
    let t0 = data.join("t-0");
    let files: Vec<PathBuf> = fs::read_dir(&t0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    assert_success(&dump(&files, &[]));
    assert_eq!(snapshot(&data), before, "dump changed the directory");
    assert_eq!(fs::read(data.join("zz-0").join(STRAY_LOG)).unwrap(), stray);

    let consumed = consume(&data, "t", 1, &[]);
    let expected: Vec<String> = (0..40)
        .filter(|i| i % 2 == 1)
        .map(|i| format!("value-{i:02}"))
        .collect();
    assert_eq!(
        values(&consumed),
        expected,
        "round-robin: odd lines in partition 1"
    );
}

/// A read-only bind mount of a directory, unmounted when dropped.
struct ReadOnlyMount {
    point: PathBuf,
}

impl ReadOnlyMount {
    /// Mounts `source` read-only at `point`; `None` (after `SKIP: reason`, or a failure under
    /// `CI=true`) where this process may not mount.
    fn new(source: &Path, point: &Path) -> Option<ReadOnlyMount> {
        fs::create_dir_all(point).unwrap();
        mount(&["--bind", path_arg(source), path_arg(point)])?;
        let mounted = ReadOnlyMount {
            point: point.to_owned(),
        };
        mount(&["-o", "remount,ro,bind", path_arg(point)])?;
        Some(mounted)
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.point).status();
    }
}

fn mount(args: &[&str]) -> Option<()> {
    let reason = match Command::new("mount").args(args).output() {
        Ok(output) if output.status.success() => return Some(()),
        Ok(output) => format!(
            "mount {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ),
        Err(error) => format!("cannot run mount: {error}"),
    };
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("a read-only mount is required under CI: {reason}");
    }
    println!("SKIP: {reason}");
    None
}

#[test]
fn read_commands_work_on_a_data_directory_mounted_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_directory_with_a_group(dir.path());
    let expected: Vec<Output> = read_commands(&data, "t", "g")
        .iter()
        .map(|args| run_args(args))
        .collect();
    let point = dir.path().join("read-only");
    let Some(_mount) = ReadOnlyMount::new(&data, &point) else {
        return;
    };
    let probe = fs::write(point.join("probe"), b"x").unwrap_err();
    assert_eq!(probe.kind(), std::io::ErrorKind::ReadOnlyFilesystem);

    for (args, expected) in read_commands(&point, "t", "g").iter().zip(&expected) {
        let output = run_args(args);
        assert_success(&output);
        assert_success(expected);
        if args[0] == "verify" {
            assert_eq!(
                stdout_lines(&output).last(),
                stdout_lines(expected).last(),
                "{args:?}"
            );
        } else {
            assert_eq!(output.stdout, expected.stdout, "{args:?}");
        }
    }
    assert_eq!(values(&consume(&point, "t", 0, &[])).len(), 20);
    let log = point.join("t-0").join("00000000000000000000.log");
    assert_success(&dump(&[&log], &[]));
}

#[test]
fn read_commands_read_a_data_directory_while_a_running_producer_holds_its_lock() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_directory_with_a_group(dir.path());
    let mut producer = RunningSeglog::producer(&data, "live");
    producer.produce_one_at_a_time(&["a", "b", "c"], 0);
    let output = topics("create", &data, "other", &[]);
    assert_fails_with(&output, "is locked by another seglog instance");

    let output = run(&["topics", "list", "--dir", path_arg(&data)]);
    assert_success(&output);
    let topic_lines: Vec<String> = stdout_lines(&output)
        .iter()
        .map(|line| line.split('\t').take(2).collect::<Vec<_>>().join("\t"))
        .collect();
    assert_eq!(
        topic_lines,
        [
            "__consumer_offsets\tPartitionCount: 1",
            "live\tPartitionCount: 1",
            "t\tPartitionCount: 2"
        ]
    );
    let output = topics("describe", &data, "live", &[]);
    assert_success(&output);
    assert!(
        stdout_lines(&output)[1].contains("\tLogStartOffset: 0\tLogEndOffset: 3\t"),
        "{:?}",
        stdout_lines(&output)
    );
    let output = consume(&data, "live", 0, &[]);
    assert_success(&output);
    assert_eq!(values(&output), ["a", "b", "c"]);
    assert_groups_readable(&data);
    assert_success(&verify(&data));

    assert!(producer.finish().success());
}

/// `groups list` and `describe` read group `g`, which committed 5 offsets.
fn assert_groups_readable(data: &Path) {
    let output = groups("list", data, &[]);
    assert_success(&output);
    assert_eq!(stdout_lines(&output), ["g"]);
    let described = json_lines(&groups("describe", data, &words("--group g --format json")));
    assert_eq!(sum_over_partitions(&described[0], "current_offset"), 5);
}

#[test]
fn read_commands_stop_at_the_last_whole_batch_of_a_torn_active_segment_and_leave_it_torn() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let output = produce(&data, "t", &[], b"a\nb\nc\n");
    assert_success(&output);
    // A crash in the middle of the next append: no clean-shutdown marker, half a batch at the end.
    fs::remove_file(data.join(".kafka_cleanshutdown")).unwrap();
    let log = data.join("t-0").join(STRAY_LOG);
    let mut bytes = fs::read(&log).unwrap();
    let whole_bytes = bytes.len();
    let torn: Vec<u8> = bytes[..40].to_vec();
    bytes.extend_from_slice(&torn);
    fs::write(&log, &bytes).unwrap();
    let before = snapshot(&data);

    let output = consume(&data, "t", 0, &[]);
    assert_success(&output);
    assert_eq!(values(&output), ["a", "b", "c"]);
    let output = topics("describe", &data, "t", &[]);
    assert_success(&output);
    let partition_line = &stdout_lines(&output)[1];
    let expected = format!("\tLogEndOffset: 3\tDurableOffset: 3\tSizeBytes: {whole_bytes}\t");
    assert!(partition_line.contains(&expected), "{partition_line}");
    // verify reports the torn tail.
    assert_verify_finds_incomplete_batch(&data, &log, whole_bytes as u64);
    assert_eq!(
        snapshot(&data),
        before,
        "the torn tail is left for recovery"
    );
}
