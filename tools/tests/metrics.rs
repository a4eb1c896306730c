//! `--metrics-listen`: `seglog bench` and `seglog serve` serve the engine's metrics in
//! Prometheus' text format over HTTP (`docs/METRICS.md`); the append, sync and fetch counters
//! grow while a bench appends, syncs and fetches; an address already taken is an error, not a
//! panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::{assert_fails_with, path_arg, run};

/// A guard against a hang: how long a test waits for what it polls for.
const WAIT: Duration = Duration::from_secs(120);
/// Between two scrapes.
const POLL: Duration = Duration::from_millis(200);

/// The counters a bench of appends, durable syncs and fetches moves.
const COUNTERS: [&str; 3] = [
    "seglog_append_bytes_total",
    "seglog_syncs_total",
    "seglog_fetches_total",
];

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET /metrics` over HTTP/1.0; the body, or `None` while nothing answers.
fn scrape(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "{head}"
    );
    Some(body.to_owned())
}

/// Each sample's value summed over its labels (the shards), by metric name.
fn totals(body: &str) -> BTreeMap<String, f64> {
    let mut totals = BTreeMap::new();
    for line in body.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if let Ok(value) = value.parse::<f64>() {
            *totals.entry(name.to_owned()).or_insert(0.0) += value;
        }
    }
    totals
}

/// Kills the child when dropped (a failed assertion must not leave it running).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Killed {
    /// Fails with what it printed if the child has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.0.try_wait().unwrap() {
            let mut stderr = String::new();
            if let Some(mut pipe) = self.0.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            panic!("seglog exited early ({status}): {stderr}");
        }
    }
}

#[test]
fn bench_counters_of_appends_syncs_and_fetches_grow_between_scrapes() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    // `tail`: producers and consumers together; `--flush batch`: every append synced.
    let child = support::seglog()
        .args([
            "bench",
            "--workload",
            "tail",
            "--flush",
            "batch",
            "--duration",
            "600",
        ])
        .args(["--dir", path_arg(&dir.path().join("data"))])
        .args(["--metrics-listen", &listen])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut bench = Killed(child);
    let deadline = Instant::now() + WAIT;
    let mut first: Option<BTreeMap<String, f64>> = None;
    loop {
        assert!(
            Instant::now() < deadline,
            "no two scrapes with growing counters: {first:?}"
        );
        bench.assert_running();
        std::thread::sleep(POLL);
        let Some(body) = scrape(port) else {
            continue;
        };
        let now = totals(&body);
        if !COUNTERS.iter().all(|name| now.contains_key(*name)) {
            continue;
        }
        match &first {
            None => first = Some(now),
            Some(before) => {
                if COUNTERS.iter().all(|name| now[*name] > before[*name]) {
                    for name in COUNTERS {
                        assert!(body.contains(&format!("# TYPE {name} counter")), "{body}");
                    }
                    return;
                }
            }
        }
    }
}

#[test]
fn serve_exposes_the_engine_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = support::seglog()
        .args(["serve", "--dir", path_arg(&dir.path().join("data"))])
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", &listen])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut server = Killed(child);
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = sender.send(line.unwrap());
        }
    });
    let ready = lines.recv_timeout(WAIT).expect("the ready line");
    assert!(ready.starts_with("serving Kafka protocol on "), "{ready}");
    let deadline = Instant::now() + WAIT;
    let body = loop {
        assert!(Instant::now() < deadline, "no metrics on {listen}");
        server.assert_running();
        if let Some(body) = scrape(port) {
            break body;
        }
        std::thread::sleep(POLL);
    };
    for name in ["seglog_append_bytes_total", "seglog_partitions_open"] {
        assert!(
            body.contains(&format!("\n{name}{{shard=\"0\"}} ")),
            "{name}: {body}"
        );
    }
    assert!(body.contains("# HELP seglog_syncs_total"), "{body}");
}

#[test]
fn a_metrics_address_in_use_is_an_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let output = run(&[
        "bench",
        "--duration",
        "1",
        "--dir",
        path_arg(&dir.path().join("data")),
        "--metrics-listen",
        &listen,
    ]);
    assert_fails_with(&output, &format!("cannot serve metrics on {listen}"));
}
