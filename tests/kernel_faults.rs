//! Real-kernel fault tests (issue 7, item 3; `../shared/RELIABILITY.md` §5): power cuts with
//! `xfs_io -x -c shutdown` on loop-mounted ext4 and xfs (R01), `fsync`, write and read errors from
//! a FUSE fault file system (R09, R11, R12; `tests/kernel/faultfs.py`), writeback failing under a
//! full thin pool (R10), a full file system (R15), file descriptor and file size limits (R16,
//! R17), io_uring unavailable (R18) and failing `io_uring_enter` calls (R19).
//!
//! They need root, loop devices, `xfs_io`, `strace`, `prlimit` and FUSE, so they are `#[ignore]`d
//! in a plain `cargo test` and run only with `--ignored` and `SEGLOG_KERNEL_TESTS=1`
//! (`.ci/kernel-faults` installs the tools and runs them so, with `--test-threads=1`). Run so
//! without the variable, or where a tool or privilege is missing, a test prints
//! `SKIP: <test>: <why>` and returns; under `CI=true` it fails instead (`seglog::testing::skip`).
//!
//! The writer is this test binary run again as a child (`kernel_child_role`, chosen by
//! `SEGLOG_KERNEL_ROLE`), so it can be frozen, killed, or run under `strace` and `prlimit`. It
//! appends single-record batches with `Durability::Durable` and writes one line per answer to an
//! acknowledgement log kept outside the faulted file system. The oracle, after every fault: the
//! engine reopens by itself; every acknowledged record reads back with its value; every batch
//! served passes its CRC and continues the offsets; after a failed append no later append on that
//! partition is acknowledged within the same process. Each test prints one parseable line:
//! `kernel-faults: scenario=R.. iterations=N acked=N lost=N bad_crc=N ...`; R01 one more per write
//! path: `kernel-faults: scenario=R01 fs=.. writes=o_direct|page_cache cuts=N acked=N lost=N ...`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions};
use seglog::format::Batch;
use seglog::testing::skip;
use seglog::types::{Offset, TopicName};
use support::batches::value_batch;

mod support;

const ENABLE_ENV: &str = "SEGLOG_KERNEL_TESTS";
const ROLE_ENV: &str = "SEGLOG_KERNEL_ROLE";
const TOPIC: &str = "kernel";

// ---------------------------------------------------------------------------------------------
// Gating: skip visibly (a failure under CI=true) unless enabled, root, and the tools are there.

/// True when the kernel tests may run; otherwise says why `test` is skipped ([`skip`]: a failure
/// under `CI=true`).
fn enabled(test: &str, tools: &[&str]) -> bool {
    if std::env::var(ENABLE_ENV).as_deref() != Ok("1") {
        skip(
            test,
            format_args!(
                "set {ENABLE_ENV}=1 (needs root, loop devices, FUSE, xfs_io, strace; see .ci/kernel-faults)"
            ),
        );
        return false;
    }
    if !is_root() {
        skip(test, "not running as root");
        return false;
    }
    if let Some(tool) = tools.iter().find(|tool| !on_path(tool)) {
        skip(test, format_args!("`{tool}` is not installed"));
        return false;
    }
    true
}

fn is_root() -> bool {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with("Uid:"))
        .and_then(|line| line.split_whitespace().nth(2))
        == Some("0")
}

fn on_path(tool: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|dir| dir.join(tool).is_file())
}

/// Runs a command to completion; `Err` carries its stderr.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("{program}: {error}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(format!(
            "{program} {args:?}: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Loop-mounted file systems.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FsKind {
    Ext4,
    Xfs,
}

impl FsKind {
    fn name(self) -> &'static str {
        match self {
            FsKind::Ext4 => "ext4",
            FsKind::Xfs => "xfs",
        }
    }
}

/// How long an unmount may wait for a busy file system.
const UNMOUNT_WAIT_MAX: Duration = Duration::from_secs(120);

/// An image file on a loop device, mounted; unmounted and detached on drop.
struct LoopMount {
    image: PathBuf,
    loop_device: String,
    mount_point: PathBuf,
    mount_options: &'static str,
    mounted: bool,
}

impl LoopMount {
    /// Makes a file system of `kind` in a sparse image of `size_mib` in `work` and mounts it.
    fn create(work: &Path, kind: FsKind, size_mib: u64) -> Result<LoopMount, String> {
        LoopMount::create_with(work, kind, size_mib, &[])
    }

    /// As [`LoopMount::create`], with extra `mkfs` arguments.
    fn create_with(
        work: &Path,
        kind: FsKind,
        size_mib: u64,
        mkfs_args: &[&str],
    ) -> Result<LoopMount, String> {
        let image = work.join(format!("{}.img", kind.name()));
        File::create(&image)
            .and_then(|file| file.set_len(size_mib << 20))
            .map_err(|error| format!("image {}: {error}", image.display()))?;
        let image_arg = image.to_str().unwrap();
        let (mkfs, force) = match kind {
            FsKind::Ext4 => ("mkfs.ext4", "-F"),
            FsKind::Xfs => ("mkfs.xfs", "-f"),
        };
        let mut args = vec!["-q", force];
        args.extend_from_slice(mkfs_args);
        args.push(image_arg);
        run(mkfs, &args)?;
        let loop_device = run("losetup", &["-f", "--show", image_arg])?;
        let mount_point = work.join(format!("{}-mnt", kind.name()));
        fs::create_dir_all(&mount_point).map_err(|error| error.to_string())?;
        let mut mounted = LoopMount {
            image: image.clone(),
            loop_device,
            mount_point,
            // ext4: no timer-driven journal commit during a run, so a cut drops all unsynced work.
            mount_options: if kind == FsKind::Ext4 {
                "commit=60"
            } else {
                "defaults"
            },
            mounted: false,
        };
        mounted.mount()?;
        Ok(mounted)
    }

    fn mount(&mut self) -> Result<(), String> {
        run(
            "mount",
            &[
                "-o",
                self.mount_options,
                &self.loop_device,
                self.mount_point.to_str().unwrap(),
            ],
        )?;
        self.mounted = true;
        Ok(())
    }

    /// Unmounts, waiting while the file system is busy: a killed process's io_uring is torn
    /// down by the kernel after the process is reaped, and holds its files until then.
    fn unmount(&mut self) -> Result<(), String> {
        let mount_point = self.mount_point.to_str().unwrap().to_owned();
        let started = Instant::now();
        loop {
            match run("umount", &[&mount_point]) {
                Ok(_) => break,
                Err(error) if started.elapsed() > UNMOUNT_WAIT_MAX => return Err(error),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        self.mounted = false;
        if started.elapsed() > Duration::from_secs(1) {
            println!(
                "unmount of {mount_point} waited {} ms (busy)",
                started.elapsed().as_millis()
            );
        }
        Ok(())
    }

    /// The power cut: `FS_IOC_SHUTDOWN` without flushing the log (NOLOGFLUSH).
    fn shut_down(&self) -> Result<(), String> {
        run(
            "xfs_io",
            &["-x", "-c", "shutdown", self.mount_point.to_str().unwrap()],
        )
        .map(drop)
    }

    /// Unmount and mount again: the journal replays, as after a reboot.
    fn reboot(&mut self) -> Result<(), String> {
        self.unmount()?;
        self.mount()
    }

    fn data_dir(&self) -> PathBuf {
        self.mount_point.join("data")
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if self.mounted && self.unmount().is_err() {
            let _ = run("umount", &["-l", self.mount_point.to_str().unwrap()]);
        }
        let _ = run("losetup", &["-d", &self.loop_device]);
    }
}

// ---------------------------------------------------------------------------------------------
// The writer: this test binary run again as a child process.

/// What a writer child does; passed in environment variables.
#[derive(Debug, Clone)]
struct WriterSpec {
    data_dir: PathBuf,
    ack_log: PathBuf,
    /// Prefix of every value, unique per writer run.
    tag: String,
    partitions: u32,
    /// Records to send; 0: until killed.
    records: u64,
    value_bytes: usize,
    segment_bytes: u64,
    /// Stop after this many failed appends.
    errors_max: u64,
    /// Appends in flight at once (they share syncs: group commit).
    inflight: usize,
}

impl WriterSpec {
    fn new(data_dir: &Path, ack_log: &Path, tag: &str) -> WriterSpec {
        WriterSpec {
            data_dir: data_dir.to_owned(),
            ack_log: ack_log.to_owned(),
            tag: tag.to_owned(),
            partitions: 3,
            records: 0,
            value_bytes: 100,
            segment_bytes: 64 * 1024,
            errors_max: 100,
            inflight: 16,
        }
    }

    fn to_env(&self) -> Vec<(String, String)> {
        [
            ("DIR", self.data_dir.display().to_string()),
            ("ACKS", self.ack_log.display().to_string()),
            ("TAG", self.tag.clone()),
            ("PARTITIONS", self.partitions.to_string()),
            ("RECORDS", self.records.to_string()),
            ("VALUE_BYTES", self.value_bytes.to_string()),
            ("SEGMENT_BYTES", self.segment_bytes.to_string()),
            ("ERRORS_MAX", self.errors_max.to_string()),
            ("INFLIGHT", self.inflight.to_string()),
        ]
        .into_iter()
        .map(|(name, value)| (format!("SEGLOG_KERNEL_{name}"), value))
        .collect()
    }

    fn from_env() -> WriterSpec {
        let var = |name: &str| std::env::var(format!("SEGLOG_KERNEL_{name}")).unwrap();
        WriterSpec {
            data_dir: var("DIR").into(),
            ack_log: var("ACKS").into(),
            tag: var("TAG"),
            partitions: var("PARTITIONS").parse().unwrap(),
            records: var("RECORDS").parse().unwrap(),
            value_bytes: var("VALUE_BYTES").parse().unwrap(),
            segment_bytes: var("SEGMENT_BYTES").parse().unwrap(),
            errors_max: var("ERRORS_MAX").parse().unwrap(),
            inflight: var("INFLIGHT").parse().unwrap(),
        }
    }

    /// Starts the writer, wrapped by `wrapper` (e.g. `strace ...`), its output in `log`.
    fn spawn(&self, wrapper: &[&str], extra_env: &[(&str, &str)], log: &Path) -> Child {
        let exe = std::env::current_exe().unwrap();
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&exe);
                command
            }
            None => Command::new(&exe),
        };
        let output = File::create(log).unwrap();
        command
            .args([
                "kernel_child_role",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_ENV, "writer")
            .envs(self.to_env())
            .envs(extra_env.iter().copied())
            .stdin(Stdio::null())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .spawn()
            .unwrap()
    }

    /// A writer of `tag` into `data_dir` whose acknowledgement log is `<work>/<tag>.acks`.
    fn in_work(data_dir: &Path, work: &Path, tag: &str) -> WriterSpec {
        WriterSpec::new(data_dir, &work.join(format!("{tag}.acks")), tag)
    }

    /// Runs the writer to its end, its output in `<work>/<tag>.out`; what it acknowledged.
    fn run_in(&self, work: &Path, wrapper: &[&str], extra_env: &[(&str, &str)]) -> AckLog {
        self.run_to_end(wrapper, extra_env, &work.join(format!("{}.out", self.tag)));
        AckLog::of(&self.ack_log)
    }

    /// Runs the writer to its end; panics (showing its output) if it did not exit cleanly.
    fn run_to_end(&self, wrapper: &[&str], extra_env: &[(&str, &str)], log: &Path) {
        let status = self.spawn(wrapper, extra_env, log).wait().unwrap();
        assert!(
            status.success(),
            "writer {} exited with {status}; its output:\n{}",
            self.tag,
            fs::read_to_string(log).unwrap_or_default()
        );
    }
}

/// `0` for a writer whose appends go through the page cache; otherwise they are the engine's
/// default `O_DIRECT` writes (`EngineConfig::direct_writes`; a file system that refuses them,
/// FUSE here, falls back to the page cache). R01 sets it for each cut, taking both paths in turn.
const DIRECT_WRITES_ENV: &str = "SEGLOG_KERNEL_DIRECT_WRITES";

/// The child side: runs a role when `SEGLOG_KERNEL_ROLE` names one; a no-op in a normal run.
#[test]
fn kernel_child_role() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("writer") {
        write_until_done(&WriterSpec::from_env());
    }
}

fn write_until_done(spec: &WriterSpec) {
    let mut acks = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.ack_log)
        .unwrap();
    let config = EngineConfig::default()
        .with_shard_count(1)
        .with_pin_shards(false)
        .with_cleaner_core(None)
        .with_direct_writes(std::env::var(DIRECT_WRITES_ENV).map_or(true, |value| value != "0"));
    let engine = match Engine::open(&spec.data_dir, config) {
        Ok(engine) => engine,
        Err(error) => {
            log_line(&mut acks, &format!("OPEN_ERROR {}", error_chain(&error)));
            return;
        }
    };
    let topic = match ensure_topic(&engine, spec) {
        Ok(topic) => topic,
        Err(error) => {
            log_line(&mut acks, &format!("OPEN_ERROR {error}"));
            return;
        }
    };
    let mut in_flight = VecDeque::new();
    let mut errors = 0;
    let mut sequence = 0u64;
    while spec.records == 0 || sequence < spec.records {
        let partition = (sequence % u64::from(spec.partitions)) as u32;
        let value = record_value(&spec.tag, sequence, spec.value_bytes);
        let pending = engine.append(&topic, partition, value_batch(&value), Durability::Durable);
        in_flight.push_back((partition, value, pending));
        sequence += 1;
        if in_flight.len() >= spec.inflight {
            errors += answer_oldest(&mut in_flight, &mut acks);
        }
        if errors >= spec.errors_max {
            break;
        }
    }
    while !in_flight.is_empty() {
        answer_oldest(&mut in_flight, &mut acks);
    }
    if let Err(error) = engine.close() {
        log_line(&mut acks, &format!("CLOSE_ERROR {}", error_chain(&error)));
    }
}

type InFlight = VecDeque<(
    u32,
    String,
    seglog::engine::Pending<seglog::log::AppendInfo, seglog::error::AppendError>,
)>;

/// Waits for the oldest append and logs its answer; returns 1 if it failed.
fn answer_oldest(in_flight: &mut InFlight, acks: &mut File) -> u64 {
    let (partition, value, pending) = in_flight.pop_front().unwrap();
    match pending.wait() {
        Ok(info) => {
            let offset = info.first_offset.0;
            let prefix = value.trim_end_matches('x');
            log_line(
                acks,
                &format!("ACK {partition} {offset} {} {prefix}", value.len()),
            );
            0
        }
        Err(error) => {
            log_line(acks, &format!("ERR {partition} {}", error_chain(&error)));
            1
        }
    }
}

/// Appends one line with a single `write`, so a frozen writer leaves whole lines only.
fn log_line(acks: &mut File, line: &str) {
    acks.write_all(format!("{line}\n").as_bytes()).unwrap();
}

fn ensure_topic(engine: &Engine, spec: &WriterSpec) -> Result<TopicName, String> {
    if let Some((topic, _)) = engine
        .list_topics()
        .into_iter()
        .find(|(name, _)| name.as_str() == TOPIC)
    {
        return Ok(topic);
    }
    let config = LogConfig::default()
        .with_segment_bytes(spec.segment_bytes)
        .with_segment_index_bytes(64 * 1024);
    engine
        .create_topic(TOPIC, spec.partitions, config)
        .map_err(|error| error_chain(&error))
}

/// An error and its sources on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text.replace('\n', " ")
}

/// `tag-sequence-` padded with `x` to `value_bytes`.
fn record_value(tag: &str, sequence: u64, value_bytes: usize) -> String {
    padded(&format!("{tag}-{sequence}-"), value_bytes)
}

fn padded(prefix: &str, value_bytes: usize) -> String {
    let mut value = prefix.to_owned();
    while value.len() < value_bytes {
        value.push('x');
    }
    value
}

// ---------------------------------------------------------------------------------------------
// The acknowledgement log and the oracle.

/// What writers answered, read from their acknowledgement logs.
#[derive(Debug, Default)]
struct AckLog {
    /// (partition, offset) -> value, for every acknowledged record.
    acked: BTreeMap<(u32, u64), String>,
    /// Error lines (`ERR`, `OPEN_ERROR`, `CLOSE_ERROR`).
    errors: Vec<String>,
    /// Acknowledgements of a partition after a failed append on it by the same writer.
    acks_after_error: Vec<String>,
    /// An offset acknowledged twice.
    duplicate_acks: Vec<String>,
}

impl AckLog {
    /// The acknowledgements of one writer's log.
    fn of(path: &Path) -> AckLog {
        let mut acks = AckLog::default();
        acks.add_writer(path);
        acks
    }

    /// Adds the complete lines of one writer's log.
    fn add_writer(&mut self, path: &Path) {
        let text = fs::read_to_string(path).unwrap_or_default();
        let mut failed_partitions = Vec::new();
        // A line without its newline was being written when the writer stopped: not logged.
        let whole_lines = text
            .split_inclusive('\n')
            .filter(|line| line.ends_with('\n'));
        for line in whole_lines.map(str::trim_end) {
            let mut fields = line.splitn(5, ' ');
            let kind = fields.next();
            match (
                kind,
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
            ) {
                (Some("ACK"), Some(partition), Some(offset), Some(length), Some(prefix)) => {
                    let value = padded(prefix, length.parse().unwrap());
                    let partition: u32 = partition.parse().unwrap();
                    let key = (partition, offset.parse().unwrap());
                    if failed_partitions.contains(&partition) {
                        self.acks_after_error.push(line.to_owned());
                    }
                    if self.acked.insert(key, value).is_some() {
                        self.duplicate_acks.push(line.to_owned());
                    }
                }
                (Some("ERR"), Some(partition), ..) => {
                    failed_partitions.push(partition.parse().unwrap());
                    self.errors.push(line.to_owned());
                }
                _ => self.errors.push(line.to_owned()),
            }
        }
    }

    fn errors_with(&self, needle: &str) -> usize {
        self.errors
            .iter()
            .filter(|line| line.contains(needle))
            .count()
    }
}

/// What a reopened engine served.
#[derive(Debug, Default)]
struct Readback {
    /// (partition, offset) -> value.
    records: BTreeMap<(u32, u64), String>,
    /// Batches served that failed to decode (CRC, length or magic).
    bad_crc: u64,
    /// Batches whose base offset did not continue the previous batch.
    discontinuities: u64,
    /// Values served at more than one offset.
    duplicate_values: u64,
    /// Fetch or open errors (a partition reported failed instead of served).
    errors: Vec<String>,
}

impl Readback {
    /// Acknowledged records not served with their value.
    fn lost(&self, acks: &AckLog) -> Vec<String> {
        acks.acked
            .iter()
            .filter(|(key, value)| self.records.get(key) != Some(value))
            .map(|((partition, offset), value)| format!("{partition}@{offset}={value}"))
            .collect()
    }
}

/// Opens the engine on `data_dir` (recovery runs here), reads every partition, closes it.
fn read_back(data_dir: &Path) -> Readback {
    let mut readback = Readback::default();
    let config = EngineConfig::default()
        .with_shard_count(1)
        .with_pin_shards(false)
        .with_cleaner_core(None);
    let engine = match Engine::open(data_dir, config) {
        Ok(engine) => engine,
        Err(error) => {
            readback
                .errors
                .push(format!("open: {}", error_chain(&error)));
            return readback;
        }
    };
    for (topic, metadata) in engine.list_topics() {
        for partition in 0..metadata.partition_count {
            read_partition(&engine, &topic, partition, &mut readback);
        }
    }
    if let Err(error) = engine.close() {
        readback
            .errors
            .push(format!("close: {}", error_chain(&error)));
    }
    let mut seen = std::collections::HashSet::new();
    readback.duplicate_values = readback
        .records
        .values()
        .filter(|value| !seen.insert(value.as_str()))
        .count() as u64;
    readback
}

fn read_partition(engine: &Engine, topic: &TopicName, partition: u32, readback: &mut Readback) {
    let mut offset = Offset(0);
    let mut expected_base: Option<i64> = None;
    loop {
        let data = match engine
            .fetch(topic, partition, offset, FetchOptions::default())
            .wait()
        {
            Ok(data) => data,
            Err(error) => {
                let text = error_chain(&error);
                readback
                    .errors
                    .push(format!("fetch {partition}@{}: {text}", offset.0));
                return;
            }
        };
        if data.records.is_empty() {
            return;
        }
        let mut position = 0;
        while position < data.records.len() {
            let Ok(batch) = Batch::decode(&data.records.slice(position..), u64::MAX) else {
                readback.bad_crc += 1;
                return;
            };
            position += batch.size_bytes() as usize;
            if expected_base.is_some_and(|expected| expected != batch.base_offset()) {
                readback.discontinuities += 1;
            }
            expected_base = Some(batch.last_offset() + 1);
            for record in batch.records().unwrap() {
                let record_offset = (batch.base_offset() + i64::from(record.offset_delta)) as u64;
                let value = String::from_utf8_lossy(record.value.as_deref().unwrap_or_default());
                readback
                    .records
                    .insert((partition, record_offset), value.into_owned());
            }
            offset = Offset(batch.last_offset() as u64 + 1);
        }
    }
}

/// Checks the promise after a fault; prints and returns the summary figures.
fn check_promise(scenario: &str, acks: &AckLog, readback: &Readback, iterations: u64) {
    let lost = readback.lost(acks);
    println!(
        "kernel-faults: scenario={scenario} iterations={iterations} acked={} lost={} bad_crc={} \
         discontinuities={} duplicate_values={} acks_after_error={} errors={} read_errors={}",
        acks.acked.len(),
        lost.len(),
        readback.bad_crc,
        readback.discontinuities,
        readback.duplicate_values,
        acks.acks_after_error.len(),
        acks.errors.len(),
        readback.errors.len()
    );
    assert!(
        readback.errors.is_empty(),
        "{scenario}: the reopened engine failed: {:?}",
        readback.errors
    );
    assert!(
        lost.is_empty(),
        "{scenario}: acknowledged records lost: {:?}",
        &lost[..lost.len().min(10)]
    );
    assert_eq!(
        readback.bad_crc, 0,
        "{scenario}: a batch failing its CRC was served"
    );
    assert_dense_and_once(scenario, readback);
    assert!(
        acks.duplicate_acks.is_empty(),
        "{scenario}: an offset was acknowledged twice: {:?}",
        acks.duplicate_acks
    );
}

/// After a failed sync the partition acknowledges nothing more until reopened.
fn assert_no_ack_after_error(scenario: &str, acks: &AckLog) {
    assert!(
        acks.acks_after_error.is_empty(),
        "{scenario}: acknowledged after a failed append on the same partition: {:?}",
        &acks.acks_after_error[..acks.acks_after_error.len().min(10)]
    );
}

/// When the test is enabled and `tools` are there: the test's name again (for its messages), a
/// work directory named after the test's scenario (`r16` of `r16_…`), and the data directory in
/// it.
fn prepared(
    test: &'static str,
    tools: &[&str],
) -> Option<(&'static str, tempfile::TempDir, PathBuf)> {
    if !enabled(test, tools) {
        return None;
    }
    let work = work_dir(test.split('_').next().unwrap());
    let data_dir = work.path().join("data");
    Some((test, work, data_dir))
}

/// `strace` wrapping a writer: the calls of `syscall` logged to `log`, `inject` as it says.
fn strace(log: &Path, syscall: &str, inject: &str) -> Vec<String> {
    let log = log.to_str().unwrap();
    let trace = format!("trace={syscall}");
    ["strace", "-f", "-qq", "-o", log, "-e", &trace, "-e", inject]
        .map(str::to_owned)
        .to_vec()
}

fn work_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("seglog-kernel-{name}-"))
        .tempdir()
        .unwrap()
}

/// A small deterministic generator (xorshift64*), seeded from the clock and printed.
struct Random(u64);

impl Random {
    fn from_clock(test: &str) -> Random {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        println!("{test}: seed {seed}");
        Random(seed)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound
    }
}

// ---------------------------------------------------------------------------------------------
// R01: power cut during durable appends, on both write paths.

/// Power cuts per file system: `SEGLOG_KERNEL_POWER_CUTS`, default 50 (about 1 s each), taken
/// in turn on the `O_DIRECT` and the page-cache write path (25 each by default; 100 cuts over the
/// two file systems).
fn power_cut_iterations() -> u64 {
    std::env::var("SEGLOG_KERNEL_POWER_CUTS")
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(50)
}

#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r01_power_cut_on_ext4_loses_no_acknowledged_record() {
    power_cut_loop("r01_power_cut_on_ext4", FsKind::Ext4, 64);
}

#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r01_power_cut_on_xfs_loses_no_acknowledged_record() {
    power_cut_loop("r01_power_cut_on_xfs", FsKind::Xfs, 512);
}

/// The write path of a power-cut writer (its `SEGLOG_KERNEL_DIRECT_WRITES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WritePath {
    /// The engine's default: the active segment written through an `O_DIRECT` descriptor.
    Direct,
    /// `direct_writes: false`: appends through the page cache.
    PageCache,
}

impl WritePath {
    const BOTH: [WritePath; 2] = [WritePath::Direct, WritePath::PageCache];

    /// The path of cut `iteration`: in turn, `O_DIRECT` first, so each path's writers reopen
    /// what the other path wrote before its cut.
    fn of_iteration(iteration: u64) -> WritePath {
        WritePath::BOTH[(iteration % 2) as usize]
    }

    fn name(self) -> &'static str {
        match self {
            WritePath::Direct => "o_direct",
            WritePath::PageCache => "page_cache",
        }
    }

    fn env_value(self) -> &'static str {
        match self {
            WritePath::Direct => "1",
            WritePath::PageCache => "0",
        }
    }
}

/// What the cuts on one write path came to.
#[derive(Debug, Default)]
struct PathCuts {
    cuts: u64,
    /// The acknowledgements of this path's writers.
    acks: AckLog,
    /// Cuts whose writer had acknowledged a record before it was frozen.
    cuts_after_an_ack: u64,
    /// Of those, the cuts whose frozen writer held a `.log` open with `O_DIRECT`.
    direct_log_open_after_an_ack: u64,
    /// Cuts whose frozen writer held a `.log` open with `O_DIRECT`, acknowledged or not.
    direct_log_open: u64,
}

/// Each iteration: a writer appends for 0.1–0.9 s, is frozen (SIGSTOP, then waited for until
/// stopped), the file system is shut down without flushing its log, the writer is killed, the
/// file system is unmounted and mounted again, and the reopened engine must serve every record
/// acknowledged so far. Only acknowledgements logged before the freeze exist. The writers take
/// the two write paths in turn (`SEGLOG_KERNEL_DIRECT_WRITES` is set per cut, whatever the
/// environment says); the frozen writer's open files show which path it took (a `.log` open with
/// `O_DIRECT` on the direct path, none on the page-cache path). One summary line per path:
/// `kernel-faults: scenario=R01 fs=.. writes=.. cuts=N acked=N lost=N ...`.
fn power_cut_loop(test: &str, kind: FsKind, size_mib: u64) {
    let mkfs = if kind == FsKind::Ext4 {
        "mkfs.ext4"
    } else {
        "mkfs.xfs"
    };
    if !enabled(test, &[mkfs, "xfs_io", "losetup", "mount", "umount"]) {
        return;
    }
    let work = work_dir(kind.name());
    let mut mount = match LoopMount::create(work.path(), kind, size_mib) {
        Ok(mount) => mount,
        Err(error) => {
            let reason = format!("cannot set up a loop-mounted {}: {error}", kind.name());
            skip(test, reason);
            return;
        }
    };
    let started = Instant::now();
    let mut random = Random::from_clock(test);
    let mut acks = AckLog::default();
    let mut paths = [PathCuts::default(), PathCuts::default()];
    let iterations = power_cut_iterations();
    for iteration in 0..iterations {
        let path = WritePath::of_iteration(iteration);
        let ack_log = work.path().join(format!("acks-{iteration}.log"));
        let spec = WriterSpec::new(&mount.data_dir(), &ack_log, &format!("i{iteration}"));
        let log = work.path().join(format!("writer-{iteration}.out"));
        let mut writer = spec.spawn(&[], &[(DIRECT_WRITES_ENV, path.env_value())], &log);
        std::thread::sleep(Duration::from_millis(100 + random.below(800)));
        freeze(&writer);
        let direct_log_open = holds_a_log_open_direct(writer.id(), &mount.mount_point);
        mount.shut_down().unwrap();
        writer.kill().unwrap();
        writer.wait().unwrap();
        acks.add_writer(&ack_log);
        let cut = &mut paths[path as usize];
        let acked_before = cut.acks.acked.len();
        cut.acks.add_writer(&ack_log);
        cut.cuts += 1;
        cut.direct_log_open += u64::from(direct_log_open);
        if cut.acks.acked.len() > acked_before {
            cut.cuts_after_an_ack += 1;
            cut.direct_log_open_after_an_ack += u64::from(direct_log_open);
        }
        mount.reboot().unwrap();
        let readback = read_back(&mount.data_dir());
        if !readback.errors.is_empty() || !readback.lost(&acks).is_empty() {
            println!(
                "{test}: iteration {iteration} ({}) failed; writer output:",
                path.name()
            );
            println!("{}", fs::read_to_string(&log).unwrap_or_default());
        }
        let scenario = format!(
            "R01 fs={} writes={} iteration={iteration}",
            kind.name(),
            path.name()
        );
        check_quietly(&scenario, &acks, &readback);
    }
    let readback = read_back(&mount.data_dir());
    for path in WritePath::BOTH {
        let cut = &paths[path as usize];
        println!(
            "kernel-faults: scenario=R01 fs={} writes={} cuts={} acked={} lost={} \
             cuts_after_an_ack={} o_direct_log_open_at_those_cuts={}",
            kind.name(),
            path.name(),
            cut.cuts,
            cut.acks.acked.len(),
            readback.lost(&cut.acks).len(),
            cut.cuts_after_an_ack,
            cut.direct_log_open_after_an_ack
        );
    }
    check_promise(
        &format!("R01 fs={}", kind.name()),
        &acks,
        &readback,
        iterations,
    );
    println!(
        "{test}: {iterations} power cuts in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        acks.errors.is_empty(),
        "a writer failed before the cut: {:?}",
        acks.errors
    );
    assert_no_ack_after_error("R01", &acks);
    for path in WritePath::BOTH {
        let cut = &paths[path as usize];
        if cut.cuts == 0 {
            continue;
        }
        assert!(
            cut.cuts_after_an_ack > 0,
            "R01 writes={}: no writer acknowledged a record in {} cuts: the path was not tried",
            path.name(),
            cut.cuts
        );
        match path {
            WritePath::Direct => assert_eq!(
                cut.direct_log_open_after_an_ack, cut.cuts_after_an_ack,
                "R01 writes=o_direct: a writer that had acknowledged records held no .log open \
                 with O_DIRECT when it was cut: its appends went through the page cache"
            ),
            WritePath::PageCache => assert_eq!(
                cut.direct_log_open, 0,
                "R01 writes=page_cache: a writer held a .log open with O_DIRECT"
            ),
        }
    }
}

/// Whether process `pid` holds a `.log` under `mount_point` open with `O_DIRECT` (its
/// `/proc/<pid>/fdinfo` flags, octal).
fn holds_a_log_open_direct(pid: u32, mount_point: &Path) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        let is_log = fs::read_link(fd.path()).is_ok_and(|target| {
            target.starts_with(mount_point) && target.extension().is_some_and(|ext| ext == "log")
        });
        let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
        let flags = fs::read_to_string(info)
            .unwrap_or_default()
            .lines()
            .find_map(|line| line.strip_prefix("flags:"))
            .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
            .unwrap_or(0);
        is_log && flags & libc::O_DIRECT as u32 != 0
    })
}

/// The same checks as [`check_promise`], without the summary line.
fn check_quietly(scenario: &str, acks: &AckLog, readback: &Readback) {
    let lost = readback.lost(acks);
    assert!(
        readback.errors.is_empty() && lost.is_empty() && readback.bad_crc == 0,
        "{scenario}: read errors {:?}, lost {:?}, bad_crc {}",
        readback.errors,
        &lost[..lost.len().min(10)],
        readback.bad_crc
    );
    assert_dense_and_once(scenario, readback);
}

/// Offsets read back are continuous and no record was written twice.
fn assert_dense_and_once(scenario: &str, readback: &Readback) {
    let (discontinuities, duplicates) = (readback.discontinuities, readback.duplicate_values);
    assert_eq!(discontinuities, 0, "{scenario}: offsets not continuous");
    assert_eq!(duplicates, 0, "{scenario}: a record was written twice");
}

/// SIGSTOP, then wait until the kernel reports the process stopped (not running, not in a
/// system call), so no acknowledgement can be logged while the shutdown is in flight.
fn freeze(child: &Child) {
    let pid = child.id().to_string();
    run("kill", &["-STOP", &pid]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !all_threads_stopped(child.id()) {
        assert!(Instant::now() < deadline, "writer {pid} did not stop");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// True when every thread of `pid` is in state `T` (stopped), none in a system call.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        let stat = fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        stat.rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            == Some('T')
    })
}

// ---------------------------------------------------------------------------------------------
// R15: the file system fills up during durable appends.

#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r15_disk_full_fails_appends_keeps_acknowledged_records_and_resumes() {
    let test = "r15_disk_full";
    let Some((work, mount, ballast, mut acks, enospc)) = full_ext4(test) else {
        return;
    };
    // Reopening on the still-full file system crashes the process (see the next test): give the
    // space back first.
    fs::remove_file(&ballast).unwrap();
    check_quietly("R15 full", &acks, &read_back(&mount.data_dir()));
    let resume = WriterSpec {
        records: 100,
        ..WriterSpec::in_work(&mount.data_dir(), work.path(), "resume")
    };
    let resumed = resume.run_in(work.path(), &[], &[]);
    assert_eq!(
        resumed.acked.len(),
        100,
        "produce did not resume after space was freed: {:?}",
        resumed.errors
    );
    acks.add_writer(&resume.ack_log);
    println!("{test}: ENOSPC errors surfaced: {enospc}");
    check_promise("R15", &acks, &read_back(&mount.data_dir()), 1);
}

#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r15_reopen_on_a_full_file_system_reports_instead_of_crashing() {
    let test = "r15_reopen_when_full";
    let Some((work, mount, _, acks, _)) = full_ext4(test) else {
        return;
    };
    let log = work.path().join("reopen.out");
    let status = WriterSpec {
        records: 1,
        ..WriterSpec::in_work(&mount.data_dir(), work.path(), "reopen")
    }
    .spawn(&[], &[], &log)
    .wait()
    .unwrap();
    println!(
        "{test}: acked {} before the disk filled; reopen on the full disk: {status}",
        acks.acked.len()
    );
    assert!(
        status.success(),
        "the engine crashed reopening a full file system ({status}); a storage error was \
         expected instead; output:\n{}",
        fs::read_to_string(&log).unwrap_or_default()
    );
}

/// [`small_ext4`] filled to ENOSPC: the ballast left to free, what the filling writer
/// acknowledged, and how many ENOSPC errors it met.
fn full_ext4(test: &str) -> Option<(tempfile::TempDir, LoopMount, PathBuf, AckLog, usize)> {
    let (work, mount) = small_ext4(test)?;
    let ballast = fill_with_ballast_left(&mount);
    let (acks, enospc) = fill_until_enospc(work.path(), &mount);
    Some((work, mount, ballast, acks, enospc))
}

/// A 16 MiB ext4 on a loop device, or `None` (printed) if it cannot be made.
fn small_ext4(test: &str) -> Option<(tempfile::TempDir, LoopMount)> {
    if !enabled(test, &["mkfs.ext4", "losetup", "mount", "umount"]) {
        return None;
    }
    let work = work_dir("r15");
    match LoopMount::create(work.path(), FsKind::Ext4, 16) {
        Ok(mount) => Some((work, mount)),
        Err(error) => {
            skip(
                test,
                format_args!("cannot set up a loop-mounted ext4: {error}"),
            );
            None
        }
    }
}

/// A 2 MiB file to delete later, when space must come back.
fn fill_with_ballast_left(mount: &LoopMount) -> PathBuf {
    let ballast = mount.mount_point.join("ballast");
    fs::write(&ballast, vec![0u8; 2 << 20]).unwrap();
    ballast
}

/// Appends 4 KB records until 30 appends failed; returns the acks and the ENOSPC count (> 0).
fn fill_until_enospc(work: &Path, mount: &LoopMount) -> (AckLog, usize) {
    let fill = WriterSpec {
        value_bytes: 4000,
        segment_bytes: 1 << 20,
        errors_max: 30,
        ..WriterSpec::in_work(&mount.data_dir(), work, "fill")
    };
    let acks = fill.run_in(work, &[], &[]);
    let enospc = acks.errors_with("os error 28");
    assert!(enospc > 0, "no ENOSPC surfaced: {:?}", acks.errors);
    (acks, enospc)
}

// ---------------------------------------------------------------------------------------------
// R16, R17: resource limits set in the writer child.

#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r16_open_file_limit_surfaces_emfile_without_corruption() {
    let Some((test, work, data_dir)) = prepared("r16_open_file_limit", &["prlimit"]) else {
        return;
    };
    let limited = WriterSpec {
        partitions: 200,
        records: 1000,
        errors_max: u64::MAX,
        ..WriterSpec::in_work(&data_dir, work.path(), "limited")
    };
    let limit = format!("--nofile={OPEN_FILES_LIMIT}:{OPEN_FILES_LIMIT}");
    let mut acks = limited.run_in(work.path(), &["prlimit", &limit, "--"], &[]);
    let emfile = acks.errors_with("os error 24");
    println!(
        "{test}: nofile={OPEN_FILES_LIMIT}: acked {} of 1000, EMFILE errors {emfile}, other errors {}",
        acks.acked.len(),
        acks.errors.len() - emfile
    );
    assert!(
        emfile == acks.errors.len(),
        "errors other than EMFILE: {:?}",
        acks.errors
    );
    resume_and_check("R16", &data_dir, work.path(), 200, &mut acks);
}

/// Low enough that the engine's partitions, rings and the harness do not all fit.
const OPEN_FILES_LIMIT: u32 = 40;

#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r17_file_size_limit_surfaces_efbig_without_corruption() {
    let Some((test, work, data_dir)) = prepared("r17_file_size_limit", &["prlimit", "bash"]) else {
        return;
    };
    let limited = WriterSpec {
        partitions: 1,
        segment_bytes: 1 << 20,
        errors_max: 20,
        ..WriterSpec::in_work(&data_dir, work.path(), "limited")
    };
    // SIGXFSZ ignored (inherited through exec), so a write past the limit fails with EFBIG.
    let limit = format!("--fsize={FILE_SIZE_LIMIT_BYTES}");
    let wrapper = [
        "bash",
        "-c",
        "trap '' XFSZ; exec \"$@\"",
        "bash",
        "prlimit",
        &limit,
        "--",
    ];
    let mut acks = limited.run_in(work.path(), &wrapper, &[]);
    let efbig = acks.errors_with("os error 27");
    println!("{test}: acked {}, EFBIG errors {efbig}", acks.acked.len());
    assert!(efbig > 0, "no EFBIG surfaced: {:?}", acks.errors);
    assert!(
        !acks.acked.is_empty(),
        "nothing acknowledged below the limit"
    );
    resume_and_check("R17", &data_dir, work.path(), 1, &mut acks);
}

/// 256 KiB: the `.log` reaches it after about 1,500 records; index files are preallocated to
/// 64 KiB and the acknowledgement log stays below it.
const FILE_SIZE_LIMIT_BYTES: u64 = 256 * 1024;

/// Reopens without the fault, checks the acknowledged records, appends again, checks again.
fn resume_and_check(
    scenario: &str,
    data_dir: &Path,
    work: &Path,
    partitions: u32,
    acks: &mut AckLog,
) {
    check_quietly(
        &format!("{scenario} after fault"),
        acks,
        &read_back(data_dir),
    );
    let resume = WriterSpec {
        partitions,
        records: u64::from(partitions) * 2,
        ..WriterSpec::in_work(data_dir, work, "resume")
    };
    let resumed = resume.run_in(work, &[], &[]);
    assert!(
        resumed.errors.is_empty() && resumed.acked.len() as u64 == resume.records,
        "{scenario}: appends did not resume without the fault: {:?}",
        resumed.errors
    );
    acks.add_writer(&resume.ack_log);
    check_promise(scenario, acks, &read_back(data_dir), 1);
}

// ---------------------------------------------------------------------------------------------
// R18, R19: io_uring refused or interrupted.

#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r18_io_uring_setup_refused_falls_back_on_auto_and_fails_clearly_on_uring() {
    let Some((test, work, data_dir)) = prepared("r18_io_uring_unavailable", &["strace"]) else {
        return;
    };
    let strace_log = work.path().join("strace.out");
    let inject = "inject=io_uring_setup:error=EPERM";
    let strace = strace(&strace_log, "io_uring_setup", inject);
    let strace: Vec<&str> = strace.iter().map(String::as_str).collect();
    let mut acks = AckLog::default();
    let mut runs = 0;
    for (label, wrapper) in [("strace", &strace[..]), ("sysctl", &[][..])] {
        let _disabled = (label == "sysctl").then(IoUringDisabled::set);
        if label == "sysctl" && !_disabled.as_ref().is_some_and(|guard| guard.active) {
            skip(
                test,
                "kernel.io_uring_disabled cannot be set here: its sysctl part does not run",
            );
            continue;
        }
        let auto = expect_fallback(test, label, wrapper, &data_dir, work.path());
        acks.add_writer(&auto);
        expect_open_error(test, label, wrapper, &data_dir, work.path());
        runs += 2;
    }
    check_promise("R18", &acks, &read_back(&data_dir), runs);
}

/// With `SEGLOG_IO_BACKEND=auto` the writer runs on positioned I/O; returns its ack log.
fn expect_fallback(
    test: &str,
    label: &str,
    wrapper: &[&str],
    data_dir: &Path,
    work: &Path,
) -> PathBuf {
    let auto = WriterSpec {
        records: 300,
        ..WriterSpec::in_work(data_dir, work, &format!("{label}-auto"))
    };
    let acks = auto.run_in(work, wrapper, &[("SEGLOG_IO_BACKEND", "auto")]);
    assert!(
        acks.errors.is_empty() && acks.acked.len() == 300,
        "{test} ({label}): auto did not fall back: {:?}",
        acks.errors
    );
    println!("{test} ({label}): auto fell back to positioned I/O, 300 of 300 acknowledged");
    auto.ack_log
}

/// With `SEGLOG_IO_BACKEND=uring` opening fails with an error naming io_uring.
fn expect_open_error(test: &str, label: &str, wrapper: &[&str], data_dir: &Path, work: &Path) {
    let uring = WriterSpec {
        records: 10,
        ..WriterSpec::in_work(data_dir, work, &format!("{label}-uring"))
    };
    let acks = uring.run_in(work, wrapper, &[("SEGLOG_IO_BACKEND", "uring")]);
    assert!(
        acks.acked.is_empty()
            && acks.errors_with("OPEN_ERROR") == 1
            && acks.errors_with("io_uring") == 1,
        "{test} ({label}): uring did not fail clearly at open: acked {}, {:?}",
        acks.acked.len(),
        acks.errors
    );
    println!(
        "{test} ({label}): uring refused at open: {}",
        acks.errors[0]
    );
}

/// `kernel.io_uring_disabled=2` while alive; the previous value restored on drop (also when the
/// test fails). It affects the whole machine, so it is held only for two short writer runs.
struct IoUringDisabled {
    previous: String,
    active: bool,
}

const IO_URING_DISABLED: &str = "/proc/sys/kernel/io_uring_disabled";

impl IoUringDisabled {
    fn set() -> IoUringDisabled {
        let previous = fs::read_to_string(IO_URING_DISABLED).unwrap_or_default();
        let active = !previous.is_empty() && fs::write(IO_URING_DISABLED, "2").is_ok();
        IoUringDisabled {
            previous: previous.trim().to_owned(),
            active,
        }
    }
}

impl Drop for IoUringDisabled {
    fn drop(&mut self) {
        if self.active {
            fs::write(IO_URING_DISABLED, &self.previous).expect("restore kernel.io_uring_disabled");
        }
    }
}

#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r19_interrupted_io_uring_enter_loses_and_duplicates_no_acknowledgement() {
    let Some((test, work, data_dir)) = prepared("r19_io_uring_enter_errors", &["strace"]) else {
        return;
    };
    let mut acks = AckLog::default();
    for errno in ["EINTR", "EAGAIN", "EBUSY"] {
        let strace_log = work.path().join(format!("{errno}.strace"));
        let inject = format!("inject=io_uring_enter:error={errno}:when=3+5");
        let wrapper = strace(&strace_log, "io_uring_enter", &inject);
        let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
        // Writes are plain `pwrite`s and a lone file's sync a plain `fdatasync`: what goes
        // through the ring is a sync thread's syncs of several files at once. Sixteen partitions
        // on a shard's four sync threads, and small segments whose seals are synced with the
        // appends after them, make most syncs such groups, each an `io_uring_enter`. The appends
        // are `O_DIRECT` writes, the path whose syncs matter most to durable appends.
        let writer = WriterSpec {
            records: 600,
            errors_max: u64::MAX,
            partitions: 16,
            segment_bytes: 16 * 1024,
            ..WriterSpec::in_work(&data_dir, work.path(), errno)
        };
        let env = [("SEGLOG_IO_BACKEND", "uring"), (DIRECT_WRITES_ENV, "1")];
        let run_acks = writer.run_in(work.path(), &wrapper, &env);
        let injected = fs::read_to_string(&strace_log)
            .unwrap_or_default()
            .matches("(INJECTED)")
            .count();
        println!(
            "{test}: {errno}: injected {injected}, acked {} of 600, errors {}",
            run_acks.acked.len(),
            run_acks.errors.len()
        );
        assert!(injected > 0, "{errno}: strace injected nothing");
        acks.add_writer(&writer.ack_log);
        check_quietly(&format!("R19 {errno}"), &acks, &read_back(&data_dir));
    }
    check_promise("R19", &acks, &read_back(&data_dir), 3);
}

// ---------------------------------------------------------------------------------------------
// R09, R11: fsync and write errors from the FUSE fault file system (tests/kernel/faultfs.py).

const FAULTFS_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel/faultfs.py");
/// The Python that can import `mfusepy` (`.ci/kernel-faults` sets it to its venv's).
const FAULTFS_PYTHON_ENV: &str = "SEGLOG_FAULTFS_PYTHON";

/// faultfs mounted over a backing directory; unmounted and stopped on drop.
struct FaultFs {
    daemon: Child,
    mount_point: PathBuf,
    control: PathBuf,
    /// One line per fault injected.
    fired_log: PathBuf,
}

impl FaultFs {
    fn start(work: &Path) -> Result<FaultFs, String> {
        let python = std::env::var(FAULTFS_PYTHON_ENV).unwrap_or_else(|_| "python3".into());
        run(&python, &["-c", "import mfusepy"])
            .map_err(|_| format!("{python} cannot import mfusepy (set {FAULTFS_PYTHON_ENV})"))?;
        let backing = work.join("backing");
        let mount_point = work.join("fuse-mnt");
        let control = work.join("rules.json");
        let fired_log = work.join("fired.log");
        for dir in [&backing, &mount_point] {
            fs::create_dir_all(dir).map_err(|error| error.to_string())?;
        }
        fs::write(&control, "[]").map_err(|error| error.to_string())?;
        let log = File::create(work.join("faultfs.out")).map_err(|error| error.to_string())?;
        let daemon = Command::new(&python)
            .args([
                FAULTFS_SCRIPT.as_ref(),
                backing.as_os_str(),
                mount_point.as_os_str(),
            ])
            .arg(&control)
            .env("FAULTFS_DIRECT_IO", "0")
            .env("FAULTFS_FIRED_LOG", &fired_log)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|error| error.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|error| format!("{python} {FAULTFS_SCRIPT}: {error}"))?;
        let mut faultfs = FaultFs {
            daemon,
            mount_point,
            control,
            fired_log,
        };
        faultfs.wait_until_mounted(work)?;
        Ok(faultfs)
    }

    fn wait_until_mounted(&mut self, work: &Path) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let wanted = format!(" {} ", self.mount_point.display());
        loop {
            let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            if mounts.lines().any(|line| line.contains(&wanted)) {
                return Ok(());
            }
            let exited = self.daemon.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let output = fs::read_to_string(work.join("faultfs.out")).unwrap_or_default();
                return Err(format!("faultfs did not mount ({exited:?}): {output}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Replaces the rules; the daemon re-reads them on every operation (and its counters
    /// follow each rule's position in the list).
    fn set_rules(&self, rules: &str) {
        let staged = self.control.with_extension("tmp");
        fs::write(&staged, rules).unwrap();
        fs::rename(&staged, &self.control).unwrap();
    }

    fn data_dir(&self) -> PathBuf {
        self.mount_point.join("data")
    }

    /// Faults injected so far (by this and earlier mounts on the same work directory).
    fn fired(&self) -> usize {
        fs::read_to_string(&self.fired_log)
            .unwrap_or_default()
            .lines()
            .count()
    }
}

impl Drop for FaultFs {
    fn drop(&mut self) {
        let mount_point = self.mount_point.to_str().unwrap();
        if run("fusermount3", &["-u", mount_point]).is_err() {
            let _ = run("umount", &["-l", mount_point]);
        }
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r09_fsync_eio_fails_pending_acks_and_acks_nothing_more_until_reopened() {
    // The 41st sync of a .log fails once; later syncs succeed again (fsyncgate): the engine must
    // not take a later success as proof.
    let rules = r#"[{"op": "fsync", "path": "*.log", "errno": "EIO", "after": 40, "times": 1}]"#;
    fuse_fault_scenario("r09_fsync_eio", "R09", rules, AppendsFail::Yes);
}

#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r11_write_eio_leaves_no_hole_and_no_acknowledged_loss() {
    // Partition 1's log fails three writes in a row after its fifth. Three, because one failure
    // can be absorbed legally: the kernel sends a buffered FUSE write in pieces, ending one at a
    // partly written page it does not hold in full (write 3000 bytes at 3100: 996 at 3100, then
    // 2004 at 4096), and a failed later piece makes the call return a short count, whose rest is
    // written again (by `write_all_at`, and by io_uring itself for a write through the ring). The
    // CI machine once saw a single fault absorbed that way. Three reach the append as EIO.
    let rules =
        r#"[{"op": "write", "path": "*/kernel-1/*.log", "errno": "EIO", "after": 5, "times": 3}]"#;
    fuse_fault_scenario("r11_write_eio", "R11 write=EIO", rules, AppendsFail::Yes);
}

/// A short write (the daemon writes half and says so) is a legal partial write: the engine may
/// write the rest and acknowledge, or fail the append; either way no hole and no loss.
#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r11_short_write_leaves_no_hole_and_no_acknowledged_loss() {
    let rules = r#"[{"op": "write", "path": "*.log", "mode": "short", "after": 40, "times": 1}]"#;
    fuse_fault_scenario(
        "r11_short_write",
        "R11 write=short",
        rules,
        AppendsFail::Maybe,
    );
}

/// When the test is enabled and `fusermount3` is there: a work directory and the fault file
/// system mounted in it; `None` after a `SKIP:` line when it cannot start.
fn started_faultfs(test: &str) -> Option<(tempfile::TempDir, FaultFs)> {
    if !enabled(test, &["fusermount3"]) {
        return None;
    }
    let work = work_dir("fuse");
    match FaultFs::start(work.path()) {
        Ok(faultfs) => Some((work, faultfs)),
        Err(error) => {
            skip(test, error);
            None
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AppendsFail {
    Yes,
    Maybe,
}

/// A writer runs under `rules`: at least one append fails, no partition acknowledges after its
/// failure; with the rules cleared the engine reopens, serves every acknowledged record, and
/// appends again.
fn fuse_fault_scenario(test: &str, scenario: &str, rules: &str, appends_fail: AppendsFail) {
    let Some((work, faultfs)) = started_faultfs(test) else {
        return;
    };
    faultfs.set_rules(rules);
    let writer = WriterSpec {
        records: 600,
        errors_max: u64::MAX,
        ..WriterSpec::in_work(&faultfs.data_dir(), work.path(), "fault")
    };
    let mut acks = writer.run_in(work.path(), &[], &[]);
    faultfs.set_rules("[]");
    if faultfs.fired() == 0 {
        let acks = std::fs::read_to_string(&writer.ack_log).unwrap_or_default();
        let out = std::fs::read_to_string(work.path().join("fault.out")).unwrap_or_default();
        let tail = |text: &str| text.lines().take(3).collect::<Vec<_>>().join(" | ");
        panic!(
            "{scenario}: faultfs injected nothing; the writer's last acks: {}; its output: {}",
            tail(&acks),
            tail(&out)
        );
    }
    let failed: std::collections::BTreeSet<&str> = acks
        .errors
        .iter()
        .filter_map(|line| line.strip_prefix("ERR "))
        .filter_map(|line| line.split(' ').next())
        .collect();
    println!(
        "{test}: acked {} of 600, failed appends {} on partitions {failed:?}; first error: {:?}",
        acks.acked.len(),
        acks.errors.len(),
        acks.errors.first()
    );
    if appends_fail == AppendsFail::Yes {
        assert!(!acks.errors.is_empty(), "{scenario}: no append failed");
    }
    assert_no_ack_after_error(scenario, &acks);
    resume_and_check(scenario, &faultfs.data_dir(), work.path(), 3, &mut acks);
}

/// A latent sector error: reads of bytes [8192, 12288) of partition 0's first segment fail.
/// That partition reports a storage error (today the whole partition fails to open, rather than
/// only the fetches of that range), the others are served in full, and once the fault is gone
/// everything acknowledged is still there: nothing was truncated.
#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r12_read_error_on_a_sealed_segment_is_reported_and_truncates_nothing() {
    let test = "r12_read_eio";
    let Some((work, faultfs)) = started_faultfs(test) else {
        return;
    };
    let data_dir = faultfs.data_dir();
    let writer = WriterSpec {
        records: 1500,
        ..WriterSpec::in_work(&data_dir, work.path(), "write")
    };
    let mut acks = writer.run_in(work.path(), &[], &[]);
    assert!(acks.errors.is_empty(), "writer failed: {:?}", acks.errors);
    // A fresh mount, so that reads reach the daemon instead of the page cache.
    drop(faultfs);
    let faultfs = FaultFs::start(work.path()).unwrap();
    faultfs.set_rules(
        r#"[{"op": "read", "path": "*/kernel-0/00000000000000000000.log", "errno": "EIO",
             "offset_lo": 8192, "offset_hi": 12288}]"#,
    );
    let readback = read_back(&data_dir);
    let fired = faultfs.fired();
    let served_elsewhere = acks
        .acked
        .iter()
        .filter(|((partition, _), _)| *partition != 0)
        .filter(|(key, value)| readback.records.get(key) == Some(value))
        .count();
    let acked_elsewhere = acks
        .acked
        .keys()
        .filter(|(partition, _)| *partition != 0)
        .count();
    println!(
        "{test}: faults injected {fired}; read errors {:?}; partitions 1-2 served {served_elsewhere} of {acked_elsewhere}",
        readback.errors
    );
    assert!(fired > 0, "R12: faultfs injected nothing");
    assert_eq!(readback.bad_crc, 0, "R12: a bad batch was served");
    assert!(
        readback
            .errors
            .iter()
            .any(|error| error.starts_with("fetch 0@")),
        "R12: the unreadable range was not reported: {:?}",
        readback.errors
    );
    assert_eq!(
        served_elsewhere, acked_elsewhere,
        "R12: other partitions not served"
    );
    drop(faultfs);
    let faultfs = FaultFs::start(work.path()).unwrap();
    resume_and_check("R12", &faultfs.data_dir(), work.path(), 3, &mut acks);
}

// ---------------------------------------------------------------------------------------------
// R10: writeback fails (the loop image sits on a full tmpfs: a thin pool out of space); the
// engine is reopened without a remount, while the page cache still holds the lost bytes.

/// A tmpfs mount, unmounted on drop (after what is mounted inside it).
struct Tmpfs {
    mount_point: PathBuf,
}

impl Tmpfs {
    fn mount(work: &Path, size_mib: u64) -> Result<Tmpfs, String> {
        let mount_point = work.join("tmpfs");
        fs::create_dir_all(&mount_point).map_err(|error| error.to_string())?;
        let size = format!("size={size_mib}m");
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &size,
                "tmpfs",
                mount_point.to_str().unwrap(),
            ],
        )?;
        Ok(Tmpfs { mount_point })
    }

    /// Writes a file until the tmpfs is full.
    fn fill(&self) {
        let mut filler = File::create(self.mount_point.join("filler")).unwrap();
        let chunk = vec![0u8; 1 << 20];
        while filler.write_all(&chunk).is_ok() {}
    }

    fn free(&self) {
        fs::remove_file(self.mount_point.join("filler")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let mount_point = self.mount_point.to_str().unwrap();
        if run("umount", &[mount_point]).is_err() {
            let _ = run("umount", &["-l", mount_point]);
        }
    }
}

/// Two losses are possible here; the engine answers for the second:
/// 1. Platform: ext4 (1 KiB blocks) on a loop device over a full tmpfs returned 0 from
///    `fdatasync` for appends whose blocks then read back as zeros after the remount (the raw
///    file, before any reopen, holds zeros there; dmesg: "failed to convert unwritten extents
///    to written extents -- potential data loss"): 1-15 acknowledged records lost per run,
///    reported, not asserted (the device did not honour a successful flush).
/// 2. Engine (F8, page-cache trap): a reopen without remount must not accept the unsynced tail
///    that only the page cache holds: recovery drops the segment's cached pages first, so the
///    appends acknowledged after the reopen survive the remount (asserted: 0 lost).
#[test]
#[ignore = "real kernel: root, mounts, a sysctl; run by .ci/kernel-faults (--ignored, SEGLOG_KERNEL_TESTS=1)"]
fn r10_reopen_after_writeback_failure_reads_the_device_not_the_page_cache() {
    let test = "r10_page_cache_trap";
    if !enabled(
        test,
        &[
            "mkfs.ext4",
            "losetup",
            "mount",
            "umount",
            "e2fsck",
            "debugfs",
        ],
    ) {
        return;
    }
    let work = work_dir("r10");
    let tmpfs = match Tmpfs::mount(work.path(), 48) {
        Ok(tmpfs) => tmpfs,
        Err(error) => {
            skip(test, format_args!("cannot mount a tmpfs: {error}"));
            return;
        }
    };
    // Inode tables and journal written now, so that only data writeback needs new tmpfs pages.
    let lazy_off = ["-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard"];
    let mut inner = LoopMount::create_with(&tmpfs.mount_point, FsKind::Ext4, 256, &lazy_off)
        .expect("inner ext4 on the tmpfs");
    // Keep the inner file system writable after errors, so the reopen can act on what it reads;
    // and give its journal real tmpfs pages (mkfs zeroed it by punching holes), so that only
    // data writeback fails, not the journal.
    inner.mount_options = "commit=60,errors=continue";
    inner.unmount().unwrap();
    rewrite_journal_blocks(&inner.image).unwrap();
    inner.mount().unwrap();
    let data_dir = inner.data_dir();
    let spec = |tag: &str, records: u64| WriterSpec {
        partitions: 1,
        records,
        value_bytes: 1000,
        segment_bytes: 8 << 20,
        errors_max: 20,
        ..WriterSpec::new(&data_dir, &work.path().join(format!("{tag}.acks")), tag)
    };
    let mut acks = AckLog::default();
    let before = spec("before", 300);
    before.run_to_end(&[], &[], &work.path().join("before.out"));
    acks.add_writer(&before.ack_log);

    // The pool fills while the writer runs.
    let failing = spec("failing", 20_000);
    let mut writer = failing.spawn(&[], &[], &work.path().join("failing.out"));
    wait_for_ack_lines(&failing.ack_log, 50);
    tmpfs.fill();
    assert!(writer.wait().unwrap().success(), "the writer crashed");
    acks.add_writer(&failing.ack_log);
    print_answer_runs(test, &failing.ack_log);
    println!(
        "{test}: with the pool full: {} errors, first {:?}",
        acks.errors.len(),
        acks.errors.first()
    );

    // Reopen on the same kernel, no remount, the pool still full.
    let reopened = read_back(&data_dir);
    println!(
        "{test}: reopened without remount, pool full: served {} records; errors {:?}",
        reopened.records.len(),
        reopened.errors
    );
    // Space back, reopen again without remount: the page cache still shows the unsynced tail;
    // recovery must read what the device holds, so the next append lands after durable data.
    tmpfs.free();
    let last_acked = acks
        .acked
        .keys()
        .map(|(_, offset)| *offset)
        .max()
        .unwrap_or(0);
    let after = spec("after", 100);
    after.run_to_end(&[], &[], &work.path().join("after.out"));
    let mut after_acks = AckLog::default();
    after_acks.add_writer(&after.ack_log);
    print_answer_runs(test, &after.ack_log);
    let first_after = after_acks.acked.keys().map(|(_, offset)| *offset).min();

    // The real reboot: what the device holds.
    inner.reboot().unwrap();
    let readback = read_back(&data_dir);
    let lost_before_error = readback.lost(&acks).len();
    let lost_after_reopen = readback.lost(&after_acks).len();
    println!(
        "kernel-faults: scenario=R10 iterations=1 acked={} lost={} bad_crc={} \
         lost_acked_before_the_failed_sync={lost_before_error} lost_acked_after_reopen={lost_after_reopen} \
         last_acked_before={last_acked} first_offset_after_reopen={first_after:?} served_after_remount={}",
        acks.acked.len() + after_acks.acked.len(),
        lost_before_error + lost_after_reopen,
        readback.bad_crc,
        readback.records.len()
    );
    assert_eq!(readback.bad_crc, 0, "R10: a bad batch was served");
    assert_no_ack_after_error("R10", &acks);
    assert!(
        first_after.is_some(),
        "R10: the partition reopened after the failure took no append, so nothing was checked"
    );
    assert_eq!(
        lost_after_reopen, 0,
        "R10: records acknowledged after a reopen without remount were lost at the remount: \
         the reopen trusted the page cache (first offset after reopen {first_after:?}, last \
         acknowledged before {last_acked})"
    );
    // Records acknowledged before the failed sync can still be lost here, and are not the
    // engine's to keep: their `fdatasync` returned 0, and the device then lost them (ext4 logs
    // "failed to convert unwritten extents ... potential data loss" when the tmpfs under the loop
    // device fills). The promise assumes a device that honours a successful flush; this one does
    // not, so the count is reported (`lost_acked_before_the_failed_sync`), not asserted.
    if lost_before_error > 0 {
        println!(
            "R10: the device lost {lost_before_error} records whose fdatasync had returned 0 \
             (a flush it did not honour)"
        );
    }
}

/// Reads and writes back the blocks of the ext4 journal (inode 8) in `image`, so a sparse image
/// on a tmpfs holds them in memory.
fn rewrite_journal_blocks(image: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let image_arg = image.to_str().unwrap();
    let stats = run("debugfs", &["-R", "stats", image_arg])?;
    let block_bytes: u64 = stats
        .lines()
        .find_map(|line| line.strip_prefix("Block size:"))
        .and_then(|size| size.trim().parse().ok())
        .ok_or("no block size in debugfs stats")?;
    let journal = run("debugfs", &["-R", "stat <8>", image_arg])?;
    let extents = journal
        .split("EXTENTS:")
        .nth(1)
        .ok_or("no journal extents")?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .map_err(|error| error.to_string())?;
    // Each extent reads "(logical-range):first-last".
    for physical in extents
        .split_whitespace()
        .filter_map(|e| e.split(':').nth(1))
    {
        let (first, last) = physical
            .trim_end_matches(',')
            .split_once('-')
            .ok_or("extent")?;
        let first: u64 = first.parse().map_err(|_| "extent start")?;
        let last: u64 = last.parse().map_err(|_| "extent end")?;
        let mut buffer = vec![0u8; ((last - first + 1) * block_bytes) as usize];
        let position = first * block_bytes;
        file.read_exact_at(&mut buffer, position)
            .and_then(|()| file.write_all_at(&buffer, position))
            .and_then(|()| file.sync_all())
            .map_err(|error| error.to_string())?;
    }
    Ok(())
}

/// Prints a writer's answers as runs: `ACK x120 (offsets 0..119), ERR x3 (...), ...`.
fn print_answer_runs(test: &str, ack_log: &Path) {
    let text = fs::read_to_string(ack_log).unwrap_or_default();
    let mut runs: Vec<(String, usize, String, String)> = Vec::new();
    for line in text.lines() {
        let kind = line.split(' ').next().unwrap_or("").to_owned();
        let detail: String = match kind.as_str() {
            "ACK" => line.split(' ').nth(2).unwrap_or("").to_owned(),
            _ => line.chars().take(160).collect(),
        };
        match runs.last_mut() {
            Some(run) if run.0 == kind => {
                run.1 += 1;
                run.3 = detail;
            }
            _ => runs.push((kind, 1, detail.clone(), detail)),
        }
    }
    for (kind, count, first, last) in runs {
        println!("{test}: {kind} x{count}: first {first} last {last}");
    }
}

fn wait_for_ack_lines(ack_log: &Path, lines: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while fs::read_to_string(ack_log)
        .unwrap_or_default()
        .lines()
        .count()
        < lines
    {
        assert!(Instant::now() < deadline, "the writer acknowledged nothing");
        std::thread::sleep(Duration::from_millis(5));
    }
}
