//! For tests and tools only: the one way a test says that it cannot run here.
//!
//! A test that lacks a tool, a privilege, a kernel feature or a file system it needs calls
//! [`skip`] and returns. Outside CI that prints one line, `SKIP: <test>: <reason>`, and the test
//! passes; under `CI=true` the same line is printed and the test fails, so a CI run cannot go
//! green by skipping (`.ci/run` also fails on any `SKIP:` line in its output).

use std::fmt::Display;
use std::io::Write;

/// The environment variable CI systems set; with the value `true`, [`skip`] fails the test.
pub const CI_ENV: &str = "CI";

/// Whether this process runs under CI (`CI=true`).
pub fn under_ci() -> bool {
    std::env::var(CI_ENV).is_ok_and(|value| value == "true")
}

/// Says that `test` cannot run here and why: writes `SKIP: <test>: <reason>` straight to stderr
/// (past the test harness's capture, so it shows in a plain `cargo test` run), then returns, and
/// the caller returns without checking anything.
///
/// # Panics
///
/// Under `CI=true`, after printing the line: a test that cannot run there fails.
pub fn skip(test: &str, reason: impl Display) {
    let line = format!("SKIP: {test}: {reason}");
    // Nothing more to say if stderr is gone.
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
    if under_ci() {
        panic!("{line} (under {CI_ENV}=true a test that cannot run fails)");
    }
}

/// The name of the running test: the test harness names each test's thread after it (threads a
/// test spawns are unnamed, and get `fallback`).
pub fn current_test(fallback: &str) -> String {
    std::thread::current().name().unwrap_or(fallback).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Set in the child run of `skip_prints_its_line_and_fails_only_under_ci`.
    const CHILD_ENV: &str = "SEGLOG_TESTING_SKIP_CHILD";

    #[test]
    fn skip_prints_its_line_and_fails_only_under_ci() {
        let name = "testing::tests::skip_prints_its_line_and_fails_only_under_ci";
        if std::env::var_os(CHILD_ENV).is_some() {
            skip("the child", "a reason");
            return;
        }
        for ci in [Some("true"), Some("1"), None] {
            let mut child = Command::new(std::env::current_exe().unwrap());
            child
                .args([name, "--exact", "--test-threads=1"])
                .env(CHILD_ENV, "1");
            match ci {
                Some(value) => child.env(CI_ENV, value),
                None => child.env_remove(CI_ENV),
            };
            let output = child.output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                stderr
                    .lines()
                    .any(|line| line == "SKIP: the child: a reason"),
                "CI={ci:?}: {stderr}"
            );
            assert_eq!(
                output.status.success(),
                ci != Some("true"),
                "CI={ci:?}: {stderr}"
            );
        }
    }

    #[test]
    fn the_test_name_is_the_harness_thread_name() {
        assert_eq!(
            current_test("unnamed"),
            "testing::tests::the_test_name_is_the_harness_thread_name"
        );
        let spawned = std::thread::spawn(|| current_test("unnamed"));
        assert_eq!(spawned.join().unwrap(), "unnamed");
    }
}
