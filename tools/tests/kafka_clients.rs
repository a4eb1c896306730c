//! `seglog serve` with Kafka clients that others wrote (issue 44). The `seglog` binary serves on
//! loopback; kafka-python (`kafka/tests/clients/kafka_python_roundtrip.py`), for each codec
//! (none, gzip, snappy, lz4, zstd), creates a topic of 3 partitions with its admin client,
//! produces 20,000 keyed records with `acks='all'` and consumes every one back exactly once, and
//! so does confluent-kafka (librdkafka, `confluent_kafka_roundtrip.py`), every delivery report OK;
//! a confluent-kafka consumer group of two members (`confluent_kafka_group.py`) consumes a topic
//! of 3 partitions exactly once across a rebalance, committing, and after a server restart two
//! new members resume from the commits with nothing re-read, and so does a kafka-python group
//! (`kafka_python_group.py`); an idempotent producer of each client (`idempotent_produce.py`)
//! keeps producing while the server is killed and restarted on its address, and every record is
//! stored once, in order;
//! kafka-python (`kafka_python_offsets.py`) finds offsets by timestamp, earliest and latest, and
//! deletes records; confluent-kafka's AdminClient (`confluent_kafka_configs.py`) alters a topic's
//! configs (SET, APPEND, `validate_only`, DELETE, refusals) and describes them back; kcat lists the metadata, produces lines and consumes them back. Then SIGTERM
//! stops the server with exit code 0, its engine closed with the clean-shutdown marker, and
//! `seglog verify` finds the files it wrote clean. An unknown `--config` is refused before the
//! server listens. A missing client prints `SKIP:` (a failure under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};
use support::{assert_success, path_arg, seglog};

/// How long the server may take to print its ready line: a guard against a hang.
const READY_WAIT: Duration = Duration::from_secs(30);
/// How long a client script may stay silent: a guard against a hang.
const SCRIPT_WAIT: Duration = Duration::from_secs(120);
/// kafka-python's script reports a missing package with this exit code.
const SCRIPT_SKIP_CODE: i32 = 77;
/// Kafka's codecs, each produced with and read back (kafka-python's `compression_type`).
const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

/// A running `seglog serve`; killed if still running when dropped.
struct Server {
    child: Child,
    address: String,
}

impl Server {
    fn start(dir: &Path) -> Server {
        Server::start_on(dir, "127.0.0.1:0")
    }

    fn start_on(dir: &Path, listen: &str) -> Server {
        let mut child = seglog()
            .args(["serve", "--dir", path_arg(dir), "--listen", listen])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let _ = sender.send(line.unwrap());
            }
        });
        let line = lines.recv_timeout(READY_WAIT).expect("the ready line");
        let address = line
            .strip_prefix("serving Kafka protocol on ")
            .unwrap_or_else(|| panic!("unexpected ready line {line:?}"))
            .to_owned();
        Server { child, address }
    }

    /// SIGTERM, then the exit code must be 0.
    fn stop(mut self) {
        let pid = Pid::from_child(&self.child);
        kill_process(pid, Signal::TERM).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "seglog serve exited with {status:?}");
    }

    /// SIGKILL: a crash.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kafka/tests/clients")
        .join(name)
}

fn verify_clean(dir: &Path) {
    let output = seglog()
        .args(["verify", "--dir", path_arg(dir)])
        .output()
        .unwrap();
    assert_success(&output);
}

fn describe(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The Python that runs the client scripts: `SEGLOG_KAFKA_PYTHON` (CI's venv), else `python3`.
fn python() -> String {
    std::env::var("SEGLOG_KAFKA_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Runs a client script with `args`; `None` after a `SKIP:` line when Python or the packages it
/// needs are missing. Panics if the script fails.
fn run_python(test: &str, script_name: &str, args: &[&str]) -> Option<()> {
    let python = python();
    let run = Command::new(&python)
        .arg(script(script_name))
        .args(args)
        .output();
    let output = match run {
        Ok(output) => output,
        Err(error) => {
            seglog::testing::skip(test, format!("{python} cannot run: {error}"));
            return None;
        }
    };
    if output.status.code() == Some(SCRIPT_SKIP_CODE) {
        let why = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        let install = "pip install kafka-python confluent-kafka python-snappy lz4 zstandard";
        seglog::testing::skip(test, format!("{args:?}: {why} ({install})"));
        return None;
    }
    assert!(output.status.success(), "{args:?}: {}", describe(&output));
    Some(())
}

#[test]
fn kafka_python_creates_produces_with_acks_all_and_consumes_everything() {
    let test = "kafka_python_creates_produces_with_acks_all_and_consumes_everything";
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    for codec in CODECS {
        let topic = format!("roundtrip-{codec}");
        let args = [server.address.as_str(), topic.as_str(), codec];
        run_python(test, "kafka_python_roundtrip.py", &args);
    }
    server.stop();
    verify_clean(dir.path());
}

#[test]
fn confluent_kafka_creates_produces_with_acks_all_and_consumes_everything() {
    let test = "confluent_kafka_creates_produces_with_acks_all_and_consumes_everything";
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    for codec in CODECS {
        let topic = format!("librdkafka-{codec}");
        let args = [server.address.as_str(), topic.as_str(), codec];
        run_python(test, "confluent_kafka_roundtrip.py", &args);
    }
    server.stop();
    verify_clean(dir.path());
}

/// A group's first phase (a rebalance, commits), a server restart, then its second phase (the
/// group resumes from its commits), each run by `script_name`.
fn group_resumes_after_restart(test: &str, script_name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("consumed.json");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let server = Server::start(&data);
    let args = [
        server.address.as_str(),
        "grouped",
        "first",
        path_arg(&state),
    ];
    if run_python(test, script_name, &args).is_none() {
        return;
    }
    server.stop();
    let server = Server::start(&data);
    let args = [
        server.address.as_str(),
        "grouped",
        "second",
        path_arg(&state),
    ];
    run_python(test, script_name, &args);
    server.stop();
    verify_clean(&data);
}

#[test]
fn confluent_kafka_group_consumes_once_across_a_rebalance_and_a_restart() {
    group_resumes_after_restart(
        "confluent_kafka_group_consumes_once_across_a_rebalance_and_a_restart",
        "confluent_kafka_group.py",
    );
}

#[test]
fn kafka_python_group_consumes_once_across_a_rebalance_and_a_restart() {
    group_resumes_after_restart(
        "kafka_python_group_consumes_once_across_a_rebalance_and_a_restart",
        "kafka_python_group.py",
    );
}

/// A loopback address no one listens on now, for a server that must come back at the same one.
fn free_loopback_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// An idempotent producer of `client` (`idempotent_produce.py`) keeps producing while the
/// server is killed once half its records were acknowledged and started again on the same
/// address; the script then finds every record stored once, in order.
fn idempotent_produce_survives_a_server_crash(test: &str, client: &str) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let listen = free_loopback_address();
    let server = Server::start_on(&data, &listen);
    let python = python();
    let spawned = Command::new(&python)
        .arg(script("idempotent_produce.py"))
        .args([client, server.address.as_str(), "idempotent"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut producer = match spawned {
        Ok(child) => child,
        Err(error) => return seglog::testing::skip(test, format!("{python} cannot run: {error}")),
    };
    let stdout = producer.stdout.take().unwrap();
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = sender.send(line.unwrap());
        }
    });
    let mut printed = Vec::new();
    while let Ok(line) = lines.recv_timeout(SCRIPT_WAIT) {
        let half = line == "half acknowledged";
        printed.push(line);
        if half {
            break;
        }
    }
    if printed.last().map(String::as_str) != Some("half acknowledged") {
        let output = producer.wait_with_output().unwrap();
        if output.status.code() == Some(SCRIPT_SKIP_CODE) {
            return seglog::testing::skip(test, format!("{client}: {printed:?}"));
        }
        panic!("no half line: {printed:?}\n{}", describe(&output));
    }
    server.kill();
    let server = Server::start_on(&data, &listen);
    let output = producer.wait_with_output().unwrap();
    printed.extend(lines.try_iter());
    assert!(
        output.status.success(),
        "{printed:?}\n{}",
        describe(&output)
    );
    server.stop();
    verify_clean(&data);
}

#[test]
fn confluent_kafka_idempotent_produce_survives_a_server_crash_without_duplicates() {
    idempotent_produce_survives_a_server_crash(
        "confluent_kafka_idempotent_produce_survives_a_server_crash_without_duplicates",
        "confluent-kafka",
    );
}

#[test]
fn kafka_python_idempotent_produce_survives_a_server_crash_without_duplicates() {
    idempotent_produce_survives_a_server_crash(
        "kafka_python_idempotent_produce_survives_a_server_crash_without_duplicates",
        "kafka-python",
    );
}

#[test]
fn kafka_python_finds_offsets_by_time_and_deletes_records() {
    let test = "kafka_python_finds_offsets_by_time_and_deletes_records";
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let args = [server.address.as_str(), "offsets"];
    if run_python(test, "kafka_python_offsets.py", &args).is_none() {
        return;
    }
    server.stop();
    verify_clean(dir.path());
}

#[test]
fn confluent_kafka_alters_and_describes_a_topics_configs() {
    let test = "confluent_kafka_alters_and_describes_a_topics_configs";
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let args = [server.address.as_str(), "configs"];
    if run_python(test, "confluent_kafka_configs.py", &args).is_none() {
        return;
    }
    server.stop();
    verify_clean(dir.path());
}

#[test]
fn kcat_lists_produces_and_consumes() {
    let test = "kcat_lists_produces_and_consumes";
    if Command::new("kcat").arg("-V").output().is_err() {
        seglog::testing::skip(test, "kcat is not installed (apt-get install kcat)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let broker = server.address.as_str();
    let mut producer = Command::new("kcat")
        .args(["-b", broker, "-P", "-t", "lines", "-K", ":"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    producer
        .stdin
        .take()
        .unwrap()
        .write_all(b"a:one\nb:two\nc:three\n")
        .unwrap();
    assert!(producer.wait().unwrap().success());

    let listed = Command::new("kcat")
        .args(["-b", broker, "-L"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listing.contains("topic \"lines\" with 1 partitions"),
        "{}",
        describe(&listed)
    );
    assert!(listing.contains("leader 0"), "{listing}");

    let consumed = Command::new("kcat")
        .args(["-b", broker, "-C", "-t", "lines", "-o", "beginning", "-e"])
        .args(["-f", "%k=%s@%o\n"])
        .output()
        .unwrap();
    assert!(consumed.status.success(), "{}", describe(&consumed));
    let lines = String::from_utf8_lossy(&consumed.stdout);
    assert_eq!(lines, "a=one@0\nb=two@1\nc=three@2\n");
    server.stop();
    verify_clean(dir.path());
}

#[test]
fn sigterm_stops_serve_with_the_engine_closed_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.stop();
    assert!(dir.path().join(".kafka_cleanshutdown").exists());
}

#[test]
fn serve_refuses_an_unknown_setting_before_listening() {
    let dir = tempfile::tempdir().unwrap();
    let output = seglog()
        .args([
            "serve",
            "--dir",
            path_arg(dir.path()),
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--config", "no.such.setting=1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(
        output.stdout.is_empty(),
        "no ready line: {}",
        describe(&output)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no.such.setting"), "{stderr}");
}
