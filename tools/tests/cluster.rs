//! A three-node replicated cluster run as a user runs it: three `seglog node` processes on
//! loopback, driven by `seglog produce --cluster`, `seglog consume --cluster` and `seglog cluster
//! status`, and killed (SIGKILL), frozen (SIGSTOP), resumed (SIGCONT) and stopped (SIGTERM) as
//! an operator or a crash would. The tests prove that: every record a producer acknowledged
//! survives the SIGKILL of the leader, on each surviving node, at its acknowledged offset and
//! once, the producer carrying on with the new leader until every record is committed; the
//! killed node, restarted with the same arguments, catches up until the three copies hold the
//! same records in the same bytes, which `verify` finds clean; a follower frozen while the two
//! others commit catches up once it resumes; a single node of three acknowledges nothing; a node
//! refuses, without listening, an id missing from its peers, a directory of another node (or of
//! another peer set) and a malformed peer list; and SIGTERM stops each node with exit code 0,
//! its engine closed cleanly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use serde_json::Value;
use support::{assert_success, path_arg, seglog, segment_logs, stdout_lines};

/// The voters' node ids.
const IDS: [u64; 3] = [1, 2, 3];
/// The one topic the tests write, and its one partition.
const TOPIC: &str = "t";

/// How long a node may take to print that it listens.
const READY_WAIT: Duration = Duration::from_secs(30);
/// How long a node may take to exit after SIGTERM.
const STOP_WAIT: Duration = Duration::from_secs(10);
/// How long a node that refuses its arguments may take to exit.
const REFUSAL_WAIT: Duration = Duration::from_secs(10);
/// How long a condition on the cluster (a leader elected, copies caught up) may take to hold.
const CONDITION_WAIT: Duration = Duration::from_secs(60);
/// How long one command against the cluster may run before it is killed as hung: a guard against
/// a hang, never a measure of speed.
const COMMAND_WAIT: Duration = Duration::from_secs(60);
/// The longest pause between two acknowledgements of a running producer (a leader election
/// included) before it counts as hung.
const ACK_WAIT: Duration = Duration::from_secs(60);
/// Between two polls of a condition.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// A `seglog` child process: its stdout lines arrive on a channel as it prints them, its stderr
/// goes to a file (appended to, so a restarted node's file holds every run). Killed if still
/// running when dropped, so a test that fails part-way leaves no process behind.
struct Process {
    child: Child,
    lines: Receiver<String>,
    stderr: PathBuf,
}

impl Process {
    fn spawn(args: &[String], stdin: Stdio, stderr: &Path) -> Process {
        let stderr_file = File::options()
            .create(true)
            .append(true)
            .open(stderr)
            .unwrap();
        let mut child = seglog()
            .args(args)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(stderr_file)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        // Drains stdout to its end even once nobody listens, so the child never blocks on it.
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        Process {
            child,
            lines,
            stderr: stderr.to_owned(),
        }
    }

    /// The next line it prints; `Disconnected` once its stdout is closed.
    fn next_line(&self, wait: Duration) -> Result<String, RecvTimeoutError> {
        self.lines.recv_timeout(wait)
    }

    fn signal(&self, signal: Signal) {
        kill_process(Pid::from_child(&self.child), signal).unwrap();
    }

    /// Its exit status, if it exits before `deadline`.
    fn exit_before(&mut self, deadline: Instant) -> Option<ExitStatus> {
        exit_before(&mut self.child, deadline)
    }

    fn stderr_text(&self) -> String {
        fs::read(&self.stderr)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `child`'s exit status, if it exits before `deadline` (polled).
fn exit_before(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `seglog args...` with `input` on stdin and returns what it printed; a run still going
/// after `wait` is killed and fails the test.
fn run_bounded(args: &[String], input: &[u8], wait: Duration) -> Output {
    let mut child = seglog()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // A child that exits without reading all of its stdin breaks the pipe: not this test's concern.
    let writer = thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let stdout = read_to_end_in_thread(child.stdout.take().unwrap());
    let stderr = read_to_end_in_thread(child.stderr.take().unwrap());
    let status = exit_before(&mut child, Instant::now() + wait);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    writer.join().unwrap();
    let output = Output {
        status: status.unwrap_or_else(|| child.wait().unwrap()),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    assert!(
        status.is_some(),
        "seglog {args:?} still running after {wait:?}\nstdout:\n{}\nstderr:\n{}",
        tail(&String::from_utf8_lossy(&output.stdout), 20),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn read_to_end_in_thread(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// The last `count` lines of `text`.
fn tail(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| (*arg).to_owned()).collect()
}

/// `count` loopback addresses free right now: bound all at once (so they differ), read, released.
fn free_addresses(count: usize) -> Vec<String> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|listener| listener.local_addr().unwrap().to_string())
        .collect()
}

/// `1=ADDRESS,2=ADDRESS,...`: the `--peers` value of `(id, address)` pairs.
fn peers_value(peers: &[(u64, &str)]) -> String {
    peers
        .iter()
        .map(|(id, address)| format!("{id}={address}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The arguments of `seglog node`.
fn node_args(id: u64, dir: &Path, listen: &str, peers: &str) -> Vec<String> {
    let id = id.to_string();
    strings(&[
        "node",
        "--id",
        &id,
        "--dir",
        path_arg(dir),
        "--listen",
        listen,
        "--peers",
        peers,
    ])
}

/// One voter: its directory and address, and its process while it runs.
struct Node {
    id: u64,
    dir: PathBuf,
    address: String,
    process: Option<Process>,
}

/// Three voters on loopback, each in its own directory of one temporary directory.
struct Cluster {
    nodes: Vec<Node>,
    peers: String,
    temp: tempfile::TempDir,
}

impl Cluster {
    /// Three nodes' directories (created, empty), addresses and peer list; none started.
    fn configure() -> Cluster {
        let temp = tempfile::tempdir().unwrap();
        let addresses = free_addresses(IDS.len());
        let nodes: Vec<Node> = IDS
            .iter()
            .zip(addresses)
            .map(|(&id, address)| {
                let dir = temp.path().join(format!("node-{id}"));
                fs::create_dir(&dir).unwrap();
                Node {
                    id,
                    dir,
                    address,
                    process: None,
                }
            })
            .collect();
        let peers: Vec<(u64, &str)> = nodes
            .iter()
            .map(|node| (node.id, node.address.as_str()))
            .collect();
        let peers = peers_value(&peers);
        Cluster { nodes, peers, temp }
    }

    /// Three nodes, each listening.
    fn start() -> Cluster {
        let mut cluster = Cluster::configure();
        for id in IDS {
            cluster.start_node(id);
        }
        cluster
    }

    fn node(&self, id: u64) -> &Node {
        &self.nodes[usize::try_from(id - 1).unwrap()]
    }

    fn node_mut(&mut self, id: u64) -> &mut Node {
        &mut self.nodes[usize::try_from(id - 1).unwrap()]
    }

    fn address(&self, id: u64) -> &str {
        &self.node(id).address
    }

    /// The `--cluster` value naming the nodes `ids`.
    fn addresses(&self, ids: &[u64]) -> String {
        ids.iter()
            .map(|&id| self.address(id))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The `--cluster` value naming every node.
    fn all(&self) -> String {
        self.addresses(&IDS)
    }

    /// The node's `--dir`.
    fn dir(&self, id: u64) -> &Path {
        &self.node(id).dir
    }

    /// The node's engine data directory.
    fn log_dir(&self, id: u64) -> PathBuf {
        self.dir(id).join("log")
    }

    fn stderr_file(&self, id: u64) -> PathBuf {
        self.temp.path().join(format!("node-{id}.stderr"))
    }

    /// A file in the temporary directory, for a helper process's stderr.
    fn file(&self, name: &str) -> PathBuf {
        self.temp.path().join(name)
    }

    /// The node's own arguments: the ones it starts and restarts with.
    fn args(&self, id: u64) -> Vec<String> {
        node_args(id, self.dir(id), self.address(id), &self.peers)
    }

    /// Starts (or restarts, with the same arguments) the node and waits until it prints that
    /// it listens.
    fn start_node(&mut self, id: u64) {
        assert!(self.node(id).process.is_none(), "node {id} already runs");
        let process = Process::spawn(&self.args(id), Stdio::null(), &self.stderr_file(id));
        let ready = format!("node {id} listening on {}", self.address(id));
        match process.next_line(READY_WAIT) {
            Ok(line) => assert_eq!(line, ready, "node {id}'s first line"),
            Err(error) => panic!(
                "node {id} did not print {ready:?} within {READY_WAIT:?} ({error}); stderr:\n{}",
                process.stderr_text()
            ),
        }
        self.node_mut(id).process = Some(process);
    }

    fn process(&self, id: u64) -> &Process {
        let process = self.node(id).process.as_ref();
        process.unwrap_or_else(|| panic!("node {id} does not run"))
    }

    /// SIGKILL: the node dies at once, with no chance to close anything.
    fn kill(&mut self, id: u64) {
        let mut process = self.node_mut(id).process.take().unwrap();
        process.child.kill().unwrap();
        process.child.wait().unwrap();
    }

    /// SIGSTOP: the node stops running (no timer, no message) until it is resumed.
    fn freeze(&self, id: u64) {
        self.process(id).signal(Signal::STOP);
    }

    /// SIGCONT: a frozen node runs again.
    fn resume(&self, id: u64) {
        self.process(id).signal(Signal::CONT);
    }

    /// Sends SIGTERM to the nodes `ids` together and asserts that each exits with code 0
    /// within [`STOP_WAIT`].
    fn stop(&mut self, ids: &[u64]) {
        for &id in ids {
            self.process(id).signal(Signal::TERM);
        }
        let deadline = Instant::now() + STOP_WAIT;
        for &id in ids {
            let mut process = self.node_mut(id).process.take().unwrap();
            let status = process.exit_before(deadline);
            assert_eq!(
                status.map(|status| status.code()),
                Some(Some(0)),
                "node {id} exits with code 0 within {STOP_WAIT:?} of SIGTERM ({status:?}); \
                 stderr:\n{}",
                process.stderr_text()
            );
        }
    }
}

impl Drop for Cluster {
    /// Kills every node; after a failure, shows the end of what each node printed on stderr.
    fn drop(&mut self) {
        for node in &mut self.nodes {
            drop(node.process.take());
        }
        if thread::panicking() {
            for id in IDS {
                let stderr = fs::read(self.stderr_file(id)).unwrap_or_default();
                let stderr = String::from_utf8_lossy(&stderr);
                eprintln!("--- node {id} stderr, last lines:\n{}", tail(&stderr, 60));
            }
        }
    }
}

/// The ids of the nodes other than `id`.
fn others(id: u64) -> Vec<u64> {
    IDS.into_iter().filter(|&other| other != id).collect()
}

/// `record-<n>` for each `n` of `numbers`, a line each.
fn record_lines(numbers: Range<u64>) -> String {
    numbers.map(|n| format!("record-{n}\n")).collect()
}

/// The arguments `produce --cluster CLUSTER --topic t EXTRA...`.
fn produce_args(cluster: &str, extra: &[&str]) -> Vec<String> {
    let base = ["produce", "--cluster", cluster, "--topic", TOPIC];
    strings(&[&base[..], extra].concat())
}

/// The offset of a JSON acknowledgement `{"partition":0,"offset":O}`.
fn ack_offset(line: &str) -> u64 {
    let ack: Value = serde_json::from_str(line)
        .unwrap_or_else(|error| panic!("acknowledgement {line:?} is not JSON: {error}"));
    assert_eq!(ack["partition"], 0, "one partition: {line}");
    ack["offset"]
        .as_u64()
        .unwrap_or_else(|| panic!("offset in {line:?}"))
}

/// The records acknowledged at `offsets`, which acknowledge the lines `record-<first>`,
/// `record-<first + 1>`... in order: (offset, value) each. Asserts that the offsets increase, as
/// they do within a partition.
fn acknowledged_records(offsets: &[u64], first: u64) -> Vec<(u64, String)> {
    let backwards = offsets.windows(2).find(|pair| pair[0] >= pair[1]);
    assert_eq!(backwards, None, "acknowledged offsets strictly increasing");
    (first..)
        .zip(offsets)
        .map(|(n, &offset)| (offset, format!("record-{n}")))
        .collect()
}

/// Produces `record-<n>` for each `n` of `numbers` through `cluster`, which must acknowledge each:
/// the acknowledged records, (offset, value) each.
fn produce_records(cluster: &str, numbers: Range<u64>) -> Vec<(u64, String)> {
    let args = produce_args(cluster, &["--format", "json"]);
    let output = run_bounded(
        &args,
        record_lines(numbers.clone()).as_bytes(),
        COMMAND_WAIT,
    );
    assert_success(&output);
    let offsets: Vec<u64> = stdout_lines(&output)
        .iter()
        .map(|line| ack_offset(line))
        .collect();
    assert_eq!(
        offsets.len(),
        numbers.clone().count(),
        "an acknowledgement per record"
    );
    acknowledged_records(&offsets, numbers.start)
}

/// `cluster status --cluster CLUSTER --format json`'s object for t-0, if it printed one.
fn t0_status(output: &Output) -> Option<Value> {
    stdout_lines(output)
        .iter()
        .map(|line| {
            serde_json::from_str::<Value>(line)
                .unwrap_or_else(|error| panic!("status line {line:?} is not JSON: {error}"))
        })
        .find(|status| status["topic"] == TOPIC && status["partition"] == 0)
}

/// Polls `cluster status` of `cluster` until t-0's object satisfies `condition`, and returns it;
/// fails the test with the last status printed if that takes longer than [`CONDITION_WAIT`].
fn wait_for_status(cluster: &str, what: &str, condition: impl Fn(&Value) -> bool) -> Value {
    let args = strings(&[
        "cluster",
        "status",
        "--cluster",
        cluster,
        "--format",
        "json",
    ]);
    let deadline = Instant::now() + CONDITION_WAIT;
    loop {
        let output = run_bounded(&args, b"", COMMAND_WAIT);
        if output.status.success()
            && let Some(status) = t0_status(&output).filter(|status| condition(status))
        {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} within {CONDITION_WAIT:?}; the last `cluster status` exited {:?}\n\
             stdout:\n{}\nstderr:\n{}",
            output.status.code(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        thread::sleep(POLL_INTERVAL);
    }
}

/// The node that `cluster status` reports as t-0's leader, once it reports one.
fn leader_of_t0(cluster: &str) -> u64 {
    let status = wait_for_status(cluster, "leader of t-0", |status| {
        status["leader"].as_u64().is_some()
    });
    status["leader"].as_u64().unwrap()
}

/// Waits until `cluster status` reports t-0's log end offset on every node, the same on all three
/// and at least `end`.
fn wait_until_every_copy_reaches(cluster: &str, end: u64) {
    let what = format!("end offset of t-0 equal on the three nodes and at least {end}");
    wait_for_status(cluster, &what, |status| {
        let ends: Vec<Option<u64>> = IDS
            .iter()
            .map(|id| status["end_offsets"][id.to_string()].as_u64())
            .collect();
        ends.iter().all(|other| *other == ends[0]) && ends[0].is_some_and(|first| first >= end)
    });
}

/// (offset, value) of each record `consume --format json` printed, in order.
fn offsets_and_values(lines: &[String]) -> Vec<(u64, String)> {
    lines
        .iter()
        .map(|line| {
            let record: Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("record {line:?} is not JSON: {error}"));
            let offset = record["offset"].as_u64().unwrap();
            (offset, record["value"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// The JSON lines of t-0's records that the node at `address` serves from its own copy, once the
/// copy it serves reaches offset `last` (a follower learns that the leader committed a record
/// with the leader's next message, so its committed copy may lag the acknowledgement a little).
fn node_copy_through(address: &str, last: u64) -> Vec<String> {
    let base = ["consume", "--cluster", address, "--topic", TOPIC];
    let rest = ["--partition", "0", "--from-beginning", "--format", "json"];
    let args = strings(&[&base[..], &rest[..]].concat());
    let deadline = Instant::now() + CONDITION_WAIT;
    loop {
        let output = run_bounded(&args, b"", COMMAND_WAIT);
        let lines = stdout_lines(&output);
        let served = offsets_and_values(&lines);
        if output.status.success() && served.last().is_some_and(|(offset, _)| *offset >= last) {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "node {address} does not serve offset {last} of t-0 within {CONDITION_WAIT:?}: the \
             last `consume` exited {:?} with {} records, the last {:?}\nstderr:\n{}",
            output.status.code(),
            served.len(),
            served.last(),
            String::from_utf8_lossy(&output.stderr)
        );
        thread::sleep(POLL_INTERVAL);
    }
}

/// t-0's records read from the files of a stopped node's engine directory.
fn copy_in_files(log_dir: &Path) -> Vec<(u64, String)> {
    let output = support::consume(log_dir, TOPIC, 0, &["--format", "json"]);
    assert_success(&output);
    offsets_and_values(&stdout_lines(&output))
}

/// The bytes of t-0's `.log` files in `log_dir`, in name (base offset) order, one after the other.
fn t0_log_bytes(log_dir: &Path) -> Vec<u8> {
    segment_logs(&log_dir.join("t-0"))
        .iter()
        .flat_map(|log| fs::read(log).unwrap())
        .collect()
}

/// Asserts that `copy` (a node's records, in log order) has offsets strictly increasing, holds
/// each acknowledged record at its acknowledged offset, and holds each value at most once.
fn assert_holds_each_acknowledged_record_once(
    copy: &[(u64, String)],
    acknowledged: &[(u64, String)],
    node: &str,
) {
    let backwards = copy.windows(2).find(|pair| pair[0].0 >= pair[1].0);
    assert_eq!(backwards, None, "{node}: offsets strictly increasing");
    let by_offset: BTreeMap<u64, &str> = copy
        .iter()
        .map(|(offset, value)| (*offset, value.as_str()))
        .collect();
    for (offset, value) in acknowledged {
        assert_eq!(
            by_offset.get(offset).copied(),
            Some(value.as_str()),
            "{node}: the acknowledged record at offset {offset}"
        );
    }
    let mut seen = HashSet::new();
    for (offset, value) in copy {
        assert!(
            seen.insert(value),
            "{node}: {value} again at offset {offset}"
        );
    }
}

/// Asserts that two lists are equal, naming the first difference (not printing both whole).
fn assert_same<T: PartialEq + std::fmt::Debug>(left: &[T], right: &[T], what: &str) {
    let first_difference = left
        .iter()
        .zip(right)
        .position(|(l, r)| l != r)
        .or((left.len() != right.len()).then(|| left.len().min(right.len())));
    assert!(
        first_difference.is_none(),
        "{what}: lengths {} and {}, first difference at index {first_difference:?}: {:?} / {:?}",
        left.len(),
        right.len(),
        first_difference.and_then(|index| left.get(index)),
        first_difference.and_then(|index| right.get(index)),
    );
}

/// How many lines the producer of the first test is fed: 100,000 records.
const RECORDS: u64 = 100_000;
/// How many of them it is fed before the leader is killed; the rest follow the kill.
const FED_BEFORE_THE_KILL: u64 = 30_000;
/// How many acknowledgements it prints before the leader is killed.
const ACKNOWLEDGED_BEFORE_THE_KILL: usize = 20_000;

/// Writes the lines `record-<n>` of `numbers` to `stdin`, 1,000 a write.
fn write_records(stdin: &mut ChildStdin, numbers: Range<u64>) -> io::Result<()> {
    let mut start = numbers.start;
    while start < numbers.end {
        let end = (start + 1_000).min(numbers.end);
        stdin.write_all(record_lines(start..end).as_bytes())?;
        stdin.flush()?;
        start = end;
    }
    Ok(())
}

/// A thread that feeds the producer the lines `record-0`... `record-<RECORDS - 1>`: the first
/// [`FED_BEFORE_THE_KILL`] at once, the rest once `leader_killed` says the leader is dead (none if
/// the test failed before), then closes its stdin.
fn feed_records(mut stdin: ChildStdin, leader_killed: Receiver<()>) -> JoinHandle<io::Result<()>> {
    thread::spawn(move || {
        write_records(&mut stdin, 0..FED_BEFORE_THE_KILL)?;
        if leader_killed.recv().is_ok() {
            write_records(&mut stdin, FED_BEFORE_THE_KILL..RECORDS)?;
        }
        Ok(())
    })
}

/// The producer's next acknowledgement's offset.
fn next_ack(producer: &Process) -> u64 {
    match producer.next_line(ACK_WAIT) {
        Ok(line) => ack_offset(&line),
        Err(error) => panic!(
            "no acknowledgement within {ACK_WAIT:?} ({error}); produce's stderr:\n{}",
            producer.stderr_text()
        ),
    }
}

/// The offsets of the producer's acknowledgements not read yet, until it closes its stdout.
fn remaining_acks(producer: &Process) -> Vec<u64> {
    let mut offsets = Vec::new();
    loop {
        match producer.next_line(ACK_WAIT) {
            Ok(line) => offsets.push(ack_offset(&line)),
            Err(RecvTimeoutError::Disconnected) => return offsets,
            Err(RecvTimeoutError::Timeout) => panic!(
                "no acknowledgement within {ACK_WAIT:?} after {} more; produce's stderr:\n{}",
                offsets.len(),
                producer.stderr_text()
            ),
        }
    }
}

#[test]
fn acknowledged_records_survive_the_leaders_death_and_the_killed_node_catches_up() {
    let mut cluster = Cluster::start();
    let args = produce_args(&cluster.all(), &["--format", "json"]);
    let mut producer = Process::spawn(&args, Stdio::piped(), &cluster.file("produce.stderr"));
    let (leader_is_dead, leader_killed) = mpsc::channel();
    let writer = feed_records(producer.child.stdin.take().unwrap(), leader_killed);

    let mut offsets: Vec<u64> = (0..ACKNOWLEDGED_BEFORE_THE_KILL)
        .map(|_| next_ack(&producer))
        .collect();
    let leader = leader_of_t0(&cluster.all());
    cluster.kill(leader);
    leader_is_dead.send(()).unwrap();
    offsets.extend(remaining_acks(&producer));
    let status = producer.exit_before(Instant::now() + COMMAND_WAIT);
    assert!(
        status.is_some_and(|status| status.success()),
        "produce commits every record across the leader's death: {status:?}\nstderr:\n{}",
        producer.stderr_text()
    );
    writer.join().unwrap().unwrap();
    assert_eq!(
        offsets.len(),
        RECORDS as usize,
        "an acknowledgement per record"
    );
    let acknowledged = acknowledged_records(&offsets, 0);
    let last = acknowledged.last().unwrap().0;

    for survivor in others(leader) {
        let copy = offsets_and_values(&node_copy_through(cluster.address(survivor), last));
        let node = format!("surviving node {survivor}");
        assert_holds_each_acknowledged_record_once(&copy, &acknowledged, &node);
    }

    cluster.start_node(leader);
    wait_until_every_copy_reaches(&cluster.all(), last + 1);
    cluster.stop(&IDS);
    for id in IDS {
        assert_success(&support::verify(&cluster.log_dir(id)));
    }
    let copies: Vec<Vec<(u64, String)>> = IDS
        .iter()
        .map(|&id| copy_in_files(&cluster.log_dir(id)))
        .collect();
    let node = format!("the restarted node {leader}'s files");
    assert_holds_each_acknowledged_record_once(&copies[leader as usize - 1], &acknowledged, &node);
    let logs: Vec<Vec<u8>> = IDS
        .iter()
        .map(|&id| t0_log_bytes(&cluster.log_dir(id)))
        .collect();
    for id in [2, 3] {
        let index = id as usize - 1;
        let what = format!("t-0's records in the files of node 1 and node {id}");
        assert_same(&copies[0], &copies[index], &what);
        let what = format!("t-0's .log bytes of node 1 and node {id}");
        assert_same(&logs[0], &logs[index], &what);
    }
}

#[test]
fn a_frozen_follower_catches_up_after_it_resumes() {
    let cluster = Cluster::start();
    let mut acknowledged = produce_records(&cluster.all(), 0..5_000);
    let leader = leader_of_t0(&cluster.all());
    let follower = others(leader)[0];

    cluster.freeze(follower);
    // Through the two running nodes only: a frozen node accepts connections and never answers.
    let running = cluster.addresses(&others(follower));
    acknowledged.extend(produce_records(&running, 5_000..25_000));
    cluster.resume(follower);

    let last = acknowledged.last().unwrap().0;
    wait_until_every_copy_reaches(&cluster.all(), last + 1);
    let resumed = node_copy_through(cluster.address(follower), last);
    let leaders = node_copy_through(cluster.address(leader), last);
    let node = format!("resumed node {follower}");
    assert_holds_each_acknowledged_record_once(&offsets_and_values(&resumed), &acknowledged, &node);
    let what = format!("t-0 consumed from the resumed node {follower} and the leader {leader}");
    assert_same(&resumed, &leaders, &what);
}

/// The first offset `address` serves of t-0 (its copy's log start, for records).
fn first_served_offset(address: &str) -> Option<u64> {
    let base = [
        "consume",
        "--cluster",
        address,
        "--topic",
        TOPIC,
        "--partition",
        "0",
    ];
    let rest = ["--from-beginning", "--max-records", "1", "--format", "json"];
    let output = run_bounded(
        &strings(&[&base[..], &rest[..]].concat()),
        b"",
        COMMAND_WAIT,
    );
    let lines = stdout_lines(&output);
    offsets_and_values(&lines)
        .first()
        .map(|(offset, _)| *offset)
}

#[test]
fn a_follower_frozen_past_the_leaders_retention_restarts_from_its_log_start() {
    let cluster = Cluster::start();
    // A topic that keeps about 64 KiB: retention, through Raft, purges the rest.
    let create = produce_args(&cluster.all(), &["--config", "retention.bytes=65536"]);
    assert_success(&run_bounded(
        &create,
        record_lines(0..1).as_bytes(),
        COMMAND_WAIT,
    ));
    let leader = leader_of_t0(&cluster.all());
    let follower = others(leader)[0];

    cluster.freeze(follower);
    let running = cluster.addresses(&others(follower));
    let acknowledged = produce_records(&running, 1..100_000);
    let deadline = Instant::now() + CONDITION_WAIT;
    let leader_start = loop {
        let start = first_served_offset(cluster.address(leader)).unwrap_or(0);
        if start > 1 {
            break start;
        }
        assert!(
            Instant::now() < deadline,
            "the leader never applied its retention"
        );
        thread::sleep(POLL_INTERVAL);
    };
    cluster.resume(follower);

    let last = acknowledged.last().unwrap().0;
    wait_until_every_copy_reaches(&cluster.all(), last + 1);
    let resumed = offsets_and_values(&node_copy_through(cluster.address(follower), last));
    // It restarted from the leader's log start, not from what it held: its copy starts there or
    // later, and holds the acknowledged records at their offsets.
    assert!(
        resumed[0].0 >= leader_start,
        "{} < {leader_start}",
        resumed[0].0
    );
    let by_offset: BTreeMap<u64, String> = acknowledged.into_iter().collect();
    for (offset, value) in &resumed {
        assert_eq!(
            by_offset.get(offset),
            Some(value),
            "offset {offset} on node {follower}"
        );
    }
}

#[test]
fn a_minority_cannot_acknowledge_anything() {
    let mut cluster = Cluster::start();
    produce_records(&cluster.all(), 0..1);
    // The two followers die: the survivor is the leader, which must not commit alone.
    let survivor = leader_of_t0(&cluster.all());
    for id in others(survivor) {
        cluster.kill(id);
    }

    let args = produce_args(cluster.address(survivor), &["--request-timeout-ms", "3000"]);
    let output = run_bounded(&args, record_lines(1..11).as_bytes(), COMMAND_WAIT);
    assert!(
        !output.status.success(),
        "one node of three commits nothing: {:?}",
        output.status
    );
    assert_eq!(
        stdout_lines(&output),
        Vec::<String>::new(),
        "no acknowledgement"
    );
    assert!(!output.stderr.is_empty(), "an error on stderr");
}

/// Asserts that `seglog node` refused to run: a non-zero exit without listening (nothing on
/// stdout) and a one-line error on stderr; returns the error.
fn assert_refused(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "refused: {:?}", output.status);
    assert_eq!(
        stdout_lines(output),
        Vec::<String>::new(),
        "never listening"
    );
    assert_eq!(stderr.lines().count(), 1, "one line of error: {stderr:?}");
    stderr
}

/// Whether `text` holds `word` delimited by anything but letters and digits.
fn has_word(text: &str, word: &str) -> bool {
    text.split(|c: char| !c.is_alphanumeric())
        .any(|part| part == word)
}

#[test]
fn a_node_refuses_an_id_missing_from_peers_and_a_directory_of_another_node() {
    let mut cluster = Cluster::configure();
    let [stranger_address, missing_peer_address]: [String; 2] =
        free_addresses(2).try_into().unwrap();

    let stranger_dir = cluster.file("node-4");
    let stranger = node_args(4, &stranger_dir, &stranger_address, &cluster.peers);
    let error = assert_refused(&run_bounded(&stranger, b"", REFUSAL_WAIT));
    assert!(has_word(&error, "4"), "the error names id 4: {error:?}");

    cluster.start_node(1);
    cluster.stop(&[1]);
    let node_1_dir = cluster.dir(1).to_owned();
    let as_node_2 = node_args(2, &node_1_dir, cluster.address(2), &cluster.peers);
    assert_refused(&run_bounded(&as_node_2, b"", REFUSAL_WAIT));
    let other_peer_set = peers_value(&[
        (1, cluster.address(1)),
        (2, cluster.address(2)),
        (4, &missing_peer_address),
    ]);
    let with_other_peers = node_args(1, &node_1_dir, cluster.address(1), &other_peer_set);
    assert_refused(&run_bounded(&with_other_peers, b"", REFUSAL_WAIT));
    // The refusals left node 1's directory as it was: node 1 starts from it again.
    cluster.start_node(1);
    cluster.stop(&[1]);

    let malformed = format!("1=nohost,2={},3={}", cluster.address(2), cluster.address(3));
    let fresh_dir = cluster.file("fresh");
    let args = node_args(1, &fresh_dir, cluster.address(1), &malformed);
    let output = run_bounded(&args, b"", REFUSAL_WAIT);
    assert!(
        matches!(output.status.code(), Some(1 | 2)),
        "a malformed peer is an error (1) or a usage error (2): {:?}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        stdout_lines(&output),
        Vec::<String>::new(),
        "never listening"
    );
}

#[test]
fn nodes_stop_cleanly_on_sigterm() {
    let mut cluster = Cluster::start();
    produce_records(&cluster.all(), 0..10);
    cluster.stop(&IDS);
    for id in IDS {
        let log_dir = cluster.log_dir(id);
        assert_success(&support::verify(&log_dir));
        assert!(
            log_dir.join(".kafka_cleanshutdown").exists(),
            "node {id}'s engine closed cleanly"
        );
    }
}
