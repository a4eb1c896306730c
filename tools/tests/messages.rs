//! Issue 41, item 11: the tool's error messages, one line each, every cause said once. They prove
//! that: a `--dir` that is a regular file (or lies under one) is named as "a file, not a
//! directory", by every command; a partition directory that is a file is named so, not as the
//! OS's "File exists" twice; an OS error under a partition's open (a segment that is a symbolic
//! link, refused with `ELOOP` whatever the user's privileges) is printed once, not three times;
//! and a partition the engine refuses to open because of damage prints its reason once (it used
//! to print it twice) and names the `seglog recover` command for that partition.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fs;

use support::{
    assert_exit_code, assert_fails_with_line, assert_success, damaged_partition, produce,
    run_args_with_stdin, stderr_text, topics, with_dir,
};

#[test]
fn a_dir_that_is_a_file_or_lies_under_one_is_named_a_file_not_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    fs::write(&file, b"not a data directory").unwrap();
    let expected = format!(
        "seglog: error: {} is a file, not a directory",
        file.display()
    );
    for dir in [file.clone(), file.join("sub")] {
        for args in [
            with_dir("produce", &dir, "--topic t"),
            with_dir("topics create", &dir, "--topic t"),
            with_dir("topics list", &dir, ""),
            with_dir("consume", &dir, "--topic t --partition 0"),
            with_dir("verify", &dir, ""),
        ] {
            assert_fails_with_line(&run_args_with_stdin(&args, b"v\n"), &expected);
        }
    }
    assert_eq!(fs::read(&file).unwrap(), b"not a data directory");
}

#[test]
fn a_partition_directory_that_is_a_file_is_named_a_file_not_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    assert_success(&produce(&data, "a", &[], b"v\n"));
    let in_the_way = data.join("t-0");
    fs::write(&in_the_way, b"").unwrap();
    let output = topics("create", &data, "t", &[]);
    assert_fails_with_line(
        &output,
        &format!(
            "seglog: error: cannot create topic t: {} is a file, not a directory",
            in_the_way.display()
        ),
    );
}

#[test]
fn an_os_error_opening_a_partition_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    assert_success(&produce(&data, "a", &[], b"v\n"));
    let segment = data.join("a-0").join("00000000000000000000.log");
    let moved = dir.path().join("moved.log");
    fs::rename(&segment, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &segment).unwrap();
    let output = produce(&data, "a", &[], b"w\n");
    assert_fails_with_line(
        &output,
        &format!(
            "seglog: error: cannot append to a-0: partition a-0 cannot be opened: open {}: Too \
             many levels of symbolic links (os error 40)",
            segment.display()
        ),
    );
}

#[test]
fn a_partition_refused_for_damage_says_so_once_and_names_the_recover_command() {
    let dir = tempfile::tempdir().unwrap();
    let damaged = damaged_partition(&dir.path().join("data"));
    let output = produce(&damaged.data, "t", &["--key-separator", ":"], b"k:v\n");
    assert_exit_code(&output, 1);
    assert!(output.stdout.is_empty());
    let stderr = stderr_text(&output);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let prefix = format!(
        "seglog: error: cannot append to t-0: partition t-0 cannot be opened: corrupt {} at \
         position {}: CRC-32C mismatch",
        damaged.file.display(),
        damaged.position
    );
    assert!(lines[0].starts_with(&prefix), "{prefix:?} starts {stderr}");
    assert_eq!(lines[0].matches("CRC-32C mismatch").count(), 1, "{stderr}");
    let hint = format!(
        "; to serve the batches before the damage, `seglog recover --dir {} --topic t \
         --partition 0` shows what truncating the partition to its last valid batch would \
         discard and, once confirmed, truncates it",
        damaged.data.display()
    );
    assert!(lines[0].ends_with(&hint), "{hint:?} ends {stderr}");
}
