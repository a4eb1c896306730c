//! The library's logs reach the operator: `seglog` installs a `tracing` subscriber writing to
//! stderr, `warn` and above unless `RUST_LOG` says otherwise; stdout keeps only the command's
//! output.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use support::{
    assert_success, path_arg, produce, run_command_with_stdin, stderr_text, stdout_lines,
};

/// A data directory whose partition `t-0` ends in half a batch after an unclean shutdown: its
/// next open recovers it, cuts the torn tail and warns.
fn torn_data(dir: &Path) -> PathBuf {
    let data = dir.join("data");
    assert_success(&produce(&data, "t", &[], b"a\nb\nc\n"));
    fs::remove_file(data.join(".kafka_cleanshutdown")).unwrap();
    let log = data.join("t-0").join("00000000000000000000.log");
    let mut bytes = fs::read(&log).unwrap();
    let torn = bytes[..40].to_vec();
    bytes.extend_from_slice(&torn);
    fs::write(&log, &bytes).unwrap();
    data
}

/// `seglog produce` of one record into `t` with `RUST_LOG` set to `filter` (unset: `None`).
fn produce_with_filter(data: &Path, filter: Option<&str>) -> Output {
    let mut command = support::seglog();
    command.args(["produce", "--dir", path_arg(data), "--topic", "t"]);
    match filter {
        Some(filter) => command.env("RUST_LOG", filter),
        None => command.env_remove("RUST_LOG"),
    };
    run_command_with_stdin(command, b"d\n")
}

#[test]
fn a_library_warning_reaches_stderr_by_default_and_never_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let data = torn_data(dir.path());
    let output = produce_with_filter(&data, None);
    assert_success(&output);
    let stderr = stderr_text(&output);
    let warning = stderr
        .lines()
        .find(|line| line.contains("recovered t-0"))
        .unwrap_or_else(|| panic!("no recovery warning on stderr: {stderr:?}"));
    assert!(warning.contains("WARN"), "{warning}");
    let stdout = stdout_lines(&output);
    assert_eq!(stdout.len(), 1, "one acknowledgement: {stdout:?}");
    assert!(!stdout[0].contains("recovered"), "{stdout:?}");
}

#[test]
fn rust_log_off_silences_the_library_warning() {
    let dir = tempfile::tempdir().unwrap();
    let data = torn_data(dir.path());
    let output = produce_with_filter(&data, Some("off"));
    assert_success(&output);
    assert_eq!(stderr_text(&output), "", "nothing on stderr");
    assert_eq!(stdout_lines(&output).len(), 1, "one acknowledgement");
}
