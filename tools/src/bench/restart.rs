//! `restart`: how long an open takes, what it reads and how many syncs it issues, after a clean
//! close and after a crash (issue 47).
//!
//! Two data sets, each in its own directory under the data directory: `restart-few`
//! (`--partitions` partitions, 4 by default, of `--restart-mb` MB each, `--record-size` records in
//! `--batch-bytes` batches) and `restart-many` (`--restart-many-partitions` partitions holding
//! `--restart-many-records` records of 100 bytes, one per batch). Each is written by this process
//! (its phase in the table) and closed cleanly. Then three opens, each in a child process (this
//! binary again, `seglog bench-restart-child`, hidden) after `sync` and the page cache dropped:
//!
//! 1. `clean`: the directory as the close left it (clean-shutdown marker, recovery points at the
//!    log end). The child is then killed (SIGKILL) once it reported, so that
//! 2. `unclean_synced` opens a directory whose process was killed with nothing unsynced: no
//!    marker, recovery points at the log end. This child is killed too; then a writer child opens
//!    the directory, appends `--restart-unsynced-mb` MB spread evenly over the partitions (the
//!    data set's records in batches of up to `--batch-bytes`), acknowledged once written (`Durability::Written`, no sync), prints what was acknowledged
//!    and is killed (SIGKILL);
//! 3. `unclean_unsynced` opens what it left, and checks that every acknowledged record is there
//!    (a killed process loses nothing the kernel accepted). Its child is killed as well: the
//!    data directory is left as after a crash.
//!
//! A child times `Engine::open` and `Engine::describe_topic` of the topic, which answers for
//! every partition: after a crash by opening (and recovering) each, after a clean close from
//! the checkpoints and a listing of each directory (it opens none), and reads its own `/proc/self/io` around
//! them: `read_bytes` (what the device was asked for, page-cache misses) and `rchar` (bytes
//! returned by read system calls, cached or not). Syncs are counted ([`SyncCounter`]) by running
//! the child under `perf stat` where perf runs (the kernel counts the sync system calls'
//! tracepoints and the `IORING_OP_FSYNC` requests submitted to io_uring, without stopping the
//! child), else under `strace -f -c --seccomp-bpf` (the sync system calls only, each one a
//! stop inside the figure's time; a sync through the ring is no system call), else not at all
//! (`n/a`).

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use clap::{Args, ValueEnum};
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig};
use seglog::format::{BatchBuilder, NewRecord};
use seglog::io::IoBackend;
use seglog::types::TopicName;
use serde_json::{Value, json};

use super::args::{BenchArgs, BenchBackend, DirectIo};
use super::cache::{CacheDrop, advise_dont_need};
use super::produce::append_phase;
use super::progress::{Limit, MB, Phase};
use super::settings::Settings;
use super::{SMALL_SEGMENT_INDEX_BYTES, TOPIC};

/// Bytes of each record of the `many` data set.
const MANY_RECORD_BYTES: usize = 100;
/// A one-record batch of the `many` data set: the record and its batch's headers.
const MANY_BATCH_BYTES: usize = MANY_RECORD_BYTES + 64;
/// The system calls counted as syncs (x86_64 and aarch64 names).
const SYNC_CALLS: [&str; 6] = [
    "fsync",
    "fdatasync",
    "msync",
    "sync_file_range",
    "syncfs",
    "sync",
];
/// The writer child's appends in flight.
const WRITER_INFLIGHT: usize = 64;

/// The three opens, in the order they run on each data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Clean,
    UncleanSynced,
    UncleanUnsynced,
}

impl Case {
    pub fn name(self) -> &'static str {
        match self {
            Case::Clean => "clean",
            Case::UncleanSynced => "unclean_synced",
            Case::UncleanUnsynced => "unclean_unsynced",
        }
    }
}

/// What one open measured.
#[derive(Debug, Clone)]
pub struct RestartCase {
    pub case: Case,
    /// `few` or `many`.
    pub data_set: &'static str,
    pub partitions: u32,
    /// Bytes the data set's phase appended.
    pub data_bytes: u64,
    /// Bytes the writer appended without a sync before it was killed (0 but for
    /// `unclean_unsynced`).
    pub unsynced_bytes: u64,
    /// `Engine::open` until `describe_topic` answered for every partition.
    pub seconds: f64,
    /// `/proc/self/io` `read_bytes` of the child over that time: asked of the device.
    pub read_bytes: u64,
    /// `/proc/self/io` `rchar`: returned by read system calls, from the cache or not.
    pub rchar: u64,
    /// Syncs by system call (and `io_uring_fsync`, with perf), or None when not counted.
    pub syncs: Option<Vec<(String, u64)>>,
    /// Partitions described offline.
    pub offline: u64,
    /// `unclean_unsynced`: records the writer had acknowledged past the data set, and how many of
    /// them the open did not find.
    pub acknowledged_unsynced_records: Option<u64>,
    pub lost_records: Option<u64>,
}

impl RestartCase {
    pub fn syncs_total(&self) -> Option<u64> {
        self.syncs
            .as_ref()
            .map(|calls| calls.iter().map(|(_, count)| count).sum())
    }
}

/// The workload's figures.
#[derive(Debug, Clone)]
pub struct RestartFigures {
    pub cache_drop: CacheDrop,
    /// `perf` or `strace` when syncs were counted.
    pub syncs_counted_by: Option<&'static str>,
    pub cases: Vec<RestartCase>,
}

impl RestartFigures {
    /// Whether every acknowledged record came back.
    pub fn nothing_lost(&self) -> bool {
        self.cases
            .iter()
            .all(|case| case.lost_records.unwrap_or(0) == 0)
    }

    pub fn print(&self, out: &mut impl Write) -> io::Result<()> {
        writeln!(
            out,
            "restart: each open in a child process after sync and the page cache dropped ({}); \
             seconds: Engine::open until describe_topic answered for every partition; read: the \
             child's /proc/self/io over that time (read_bytes: the device, rchar: read calls); \
             syncs: {}",
            self.cache_drop.name(),
            match self.syncs_counted_by {
                Some("perf") =>
                    "perf stat (the system calls fsync, fdatasync, msync, \
                                 sync_file_range, syncfs, sync and IORING_OP_FSYNC requests)",
                Some(_) =>
                    "strace -f -c (fsync, fdatasync, msync, sync_file_range, syncfs, sync; \
                            each one a stop inside the time; not syncs submitted through io_uring)",
                None => "n/a (neither perf nor strace runs here)",
            }
        )?;
        writeln!(
            out,
            "{:<18} {:>10} {:>10} {:>12} {:>9} {:>12} {:>12} {:>8}  syncs by call",
            "case",
            "partitions",
            "data MB",
            "unsynced MB",
            "seconds",
            "read MB",
            "rchar MB",
            "syncs"
        )?;
        for case in &self.cases {
            let syncs = case
                .syncs_total()
                .map_or_else(|| "n/a".to_owned(), |total| total.to_string());
            let by_call = case.syncs.as_ref().map_or_else(String::new, |calls| {
                calls
                    .iter()
                    .filter(|(_, count)| *count > 0)
                    .map(|(call, count)| format!("{call} {count}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            });
            writeln!(
                out,
                "{:<18} {:>10} {:>10.1} {:>12.1} {:>9.3} {:>12.1} {:>12.1} {:>8}  {by_call}",
                case.case.name(),
                case.partitions,
                case.data_bytes as f64 / MB,
                case.unsynced_bytes as f64 / MB,
                case.seconds,
                case.read_bytes as f64 / MB,
                case.rchar as f64 / MB,
                syncs,
            )?;
        }
        for case in &self.cases {
            if let (Some(acknowledged), Some(lost)) =
                (case.acknowledged_unsynced_records, case.lost_records)
            {
                writeln!(
                    out,
                    "{} ({} partitions): {acknowledged} records acknowledged unsynced before the \
                     SIGKILL, {}",
                    case.case.name(),
                    case.partitions,
                    match lost {
                        0 => "every one recovered".to_owned(),
                        lost => format!("{lost} LOST"),
                    }
                )?;
            }
            if case.offline > 0 {
                writeln!(
                    out,
                    "{} ({} partitions): {} partitions offline after the open",
                    case.case.name(),
                    case.partitions,
                    case.offline
                )?;
            }
        }
        Ok(())
    }

    pub fn to_json(&self) -> Value {
        let cases: Vec<Value> = self
            .cases
            .iter()
            .map(|case| {
                json!({
                    "case": case.case.name(),
                    "data_set": case.data_set,
                    "partitions": case.partitions,
                    "data_bytes": case.data_bytes,
                    "unsynced_bytes": case.unsynced_bytes,
                    "seconds": case.seconds,
                    "read_bytes": case.read_bytes,
                    "rchar": case.rchar,
                    "syncs": case.syncs_total(),
                    "syncs_by_call": case.syncs.as_ref().map(|calls| {
                        calls
                            .iter()
                            .map(|(call, count)| (call.clone(), json!(count)))
                            .collect::<serde_json::Map<String, Value>>()
                    }),
                    "offline_partitions": case.offline,
                    "acknowledged_unsynced_records": case.acknowledged_unsynced_records,
                    "lost_records": case.lost_records,
                })
            })
            .collect();
        json!({
            "cache_drop": self.cache_drop.name(),
            "syncs_counted_by": self.syncs_counted_by,
            "cases": cases,
        })
    }
}

/// One data set: its partitions, how it is written, and its directory.
struct DataSet {
    name: &'static str,
    phase: &'static str,
    settings: Settings,
    limit: Limit,
    topic_config: LogConfig,
    dir: PathBuf,
    /// The writer's batches, at most: `--batch-bytes` (its share of a partition, if less).
    unsynced_batch_bytes: usize,
}

fn data_sets(args: &BenchArgs, settings: &Settings, dir: &Path) -> Vec<DataSet> {
    let segment = |config: LogConfig| match settings.segment_bytes {
        Some(bytes) => config.with_segment_bytes(bytes),
        None => config,
    };
    let few = settings.clone();
    let few_bytes = f64::from(few.partitions) * args.restart_mb * MB;
    let few_records = (few_bytes / settings.record_size as f64).ceil().max(1.0) as u64;
    let mut many = settings.clone();
    many.partitions = args.restart_many_partitions;
    many.record_size = MANY_RECORD_BYTES;
    many.batch_bytes = MANY_BATCH_BYTES;
    many.linger_ms = None;
    many.key_space = None;
    vec![
        DataSet {
            name: "few",
            phase: "restart_data_few",
            settings: few,
            limit: Limit::Records(few_records),
            topic_config: segment(LogConfig::default()),
            dir: dir.join("restart-few"),
            unsynced_batch_bytes: settings.batch_bytes,
        },
        DataSet {
            name: "many",
            phase: "restart_data_many",
            settings: many,
            limit: Limit::Records(args.restart_many_records),
            topic_config: segment(
                LogConfig::default().with_segment_index_bytes(SMALL_SEGMENT_INDEX_BYTES),
            ),
            dir: dir.join("restart-many"),
            unsynced_batch_bytes: settings.batch_bytes,
        },
    ]
}

/// The engine configuration of every open of this workload, the bench's and the children's.
fn engine_config(backend: IoBackend, direct_io: bool, shards: Option<usize>) -> EngineConfig {
    EngineConfig::default()
        .with_pin_shards(false)
        .with_backend(backend)
        .with_direct_writes(direct_io)
        .with_shard_count(shards.unwrap_or(EngineConfig::default().shard_count))
}

/// Runs the workload under `dir`: the data sets' phases and the opens' figures.
pub fn restart(
    args: &BenchArgs,
    settings: &Settings,
    dir: &Path,
) -> anyhow::Result<(Vec<Phase>, RestartFigures)> {
    let counter = SyncCounter::find();
    let mut phases = Vec::new();
    let mut cases = Vec::new();
    let mut cache_drop = CacheDrop::DropCaches;
    for set in data_sets(args, settings, dir) {
        phases.push(write_data_set(&set, settings)?);
        let data_bytes = phases
            .last()
            .and_then(|phase: &Phase| phase.throughput)
            .map_or(0, |(_, bytes, _)| bytes);
        let mut measure = |case: Case, acknowledged: Option<&Acknowledged>| {
            cache_drop = drop_cache(&set.dir)?;
            let open = open_in_child(&set, args, counter)
                .with_context(|| format!("restart: the {} open of {}", case.name(), set.name))?;
            let (acknowledged_records, lost) = match acknowledged {
                Some(acknowledged) => (
                    Some(acknowledged.records),
                    Some(acknowledged.lost(&open.log_end_offsets)),
                ),
                None => (None, None),
            };
            anyhow::Ok(RestartCase {
                case,
                data_set: set.name,
                partitions: set.settings.partitions,
                data_bytes,
                unsynced_bytes: acknowledged.map_or(0, |acknowledged| acknowledged.bytes),
                seconds: open.seconds,
                read_bytes: open.read_bytes,
                rchar: open.rchar,
                syncs: open.syncs,
                offline: open.offline,
                acknowledged_unsynced_records: acknowledged_records,
                lost_records: lost,
            })
        };
        cases.push(measure(Case::Clean, None)?);
        cases.push(measure(Case::UncleanSynced, None)?);
        let acknowledged = write_unsynced_in_child(&set, args)
            .with_context(|| format!("restart: the unsynced writer of {}", set.name))?;
        cases.push(measure(Case::UncleanUnsynced, Some(&acknowledged))?);
    }
    let figures = RestartFigures {
        cache_drop,
        syncs_counted_by: counter.name(),
        cases,
    };
    Ok((phases, figures))
}

/// Creates the data set's topic, appends it, closes cleanly.
fn write_data_set(set: &DataSet, settings: &Settings) -> anyhow::Result<Phase> {
    fs::create_dir_all(&set.dir).with_context(|| format!("cannot create {}", set.dir.display()))?;
    let config = engine_config(settings.backend, settings.direct_io, settings.shards);
    let engine = Engine::open(&set.dir, config)
        .with_context(|| format!("cannot open data directory {}", set.dir.display()))?;
    let written = engine
        .create_topic(TOPIC, set.settings.partitions, set.topic_config.clone())
        .with_context(|| format!("cannot create topic {TOPIC} (use a fresh --dir)"))
        .and_then(|topic| append_phase(&engine, &topic, &set.settings, set.limit, set.phase));
    let closed = engine.close().context("cannot close the data directory");
    let phase = written?;
    closed?;
    Ok(phase)
}

/// `sync`, then the page cache dropped: `3` to `/proc/sys/vm/drop_caches` (pages, dentries and
/// inodes) where permitted, else `posix_fadvise(DONTNEED)` on every file of `dir`.
fn drop_cache(dir: &Path) -> anyhow::Result<CacheDrop> {
    rustix::fs::sync();
    if fs::write("/proc/sys/vm/drop_caches", "3").is_ok() {
        return Ok(CacheDrop::DropCaches);
    }
    advise_dont_need(dir)?;
    Ok(CacheDrop::Fadvise)
}

/// How the opens' syncs are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SyncCounter {
    /// `perf stat`: tracepoint counts kept by the kernel, the child never stopped; also the
    /// `IORING_OP_FSYNC` requests submitted to io_uring.
    Perf,
    /// `strace -f -c --seccomp-bpf`: every sync system call stops the child.
    Strace,
    None,
}

/// `perf stat`'s events: each sync system call's entry, then io_uring's submitted requests
/// (filtered to `IORING_OP_FSYNC`, opcode 3: one per file synced through the ring).
fn perf_events() -> Vec<String> {
    let mut events: Vec<String> = SYNC_CALLS
        .iter()
        .flat_map(|call| ["-e".to_owned(), format!("syscalls:sys_enter_{call}")])
        .collect();
    events.extend(
        [
            "-e",
            "io_uring:io_uring_submit_req",
            "--filter",
            "opcode == 3",
        ]
        .map(str::to_owned),
    );
    events
}

impl SyncCounter {
    /// The first that runs here: a probe of this program's `--help` under it.
    fn find() -> SyncCounter {
        let Ok(exe) = std::env::current_exe() else {
            return SyncCounter::None;
        };
        for counter in [SyncCounter::Perf, SyncCounter::Strace] {
            let Some(mut command) = counter.wrap(exe.as_os_str(), Path::new("/dev/null")) else {
                continue;
            };
            let probe = command
                .arg("--help")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if probe.is_ok_and(|status| status.success()) {
                return counter;
            }
        }
        SyncCounter::None
    }

    fn name(self) -> Option<&'static str> {
        match self {
            SyncCounter::Perf => Some("perf"),
            SyncCounter::Strace => Some("strace"),
            SyncCounter::None => None,
        }
    }

    /// `program` under the counter, its counts written to `output`; `None` for no counter.
    fn wrap(self, program: &std::ffi::OsStr, output: &Path) -> Option<Command> {
        let mut command = match self {
            SyncCounter::Perf => {
                let mut command = Command::new("perf");
                command
                    .args(["stat", "-x", ",", "-o"])
                    .arg(output)
                    .args(perf_events());
                command
            }
            SyncCounter::Strace => {
                let mut command = Command::new("strace");
                command
                    .args(["-f", "-c", "--seccomp-bpf", "-o"])
                    .arg(output)
                    .arg("-e")
                    .arg(format!("trace={}", SYNC_CALLS.join(",")));
                command
            }
            SyncCounter::None => return None,
        };
        command.arg("--").arg(program);
        Some(command)
    }

    /// The counts in `output`, by call.
    fn counts(self, output: &str) -> Option<Vec<(String, u64)>> {
        match self {
            SyncCounter::Perf => Some(perf_counts(output)),
            SyncCounter::Strace => Some(sync_calls(output)),
            SyncCounter::None => None,
        }
    }
}

/// The child's arguments for `set`.
fn child_command(set: &DataSet, args: &BenchArgs, mode: ChildMode) -> anyhow::Result<Command> {
    let exe = std::env::current_exe().context("cannot find this program to run it again")?;
    let mut command = Command::new(exe);
    command
        .arg("bench-restart-child")
        .arg("--mode")
        .arg(match mode {
            ChildMode::Open => "open",
            ChildMode::WriteUnsynced => "write-unsynced",
        })
        .arg("--dir")
        .arg(&set.dir)
        .arg("--partitions")
        .arg(set.settings.partitions.to_string())
        .arg("--record-size")
        .arg(set.settings.record_size.to_string())
        .arg("--batch-bytes")
        .arg(set.unsynced_batch_bytes.to_string())
        .arg("--direct-io")
        .arg(match args.direct_io {
            DirectIo::On => "on",
            DirectIo::Off => "off",
        });
    if let Some(backend) = args.backend {
        command.arg("--backend").arg(match backend {
            BenchBackend::Uring => "uring",
            BenchBackend::Pio => "pio",
        });
    }
    if let Some(shards) = args.shards {
        command.arg("--shards").arg(shards.to_string());
    }
    if mode == ChildMode::WriteUnsynced {
        let per_partition =
            args.restart_unsynced_mb * MB / f64::from(set.settings.partitions.max(1));
        command
            .arg("--unsynced-bytes")
            .arg((per_partition.ceil() as u64).max(1).to_string());
    }
    Ok(command)
}

/// What an open child reported.
struct Opened {
    seconds: f64,
    read_bytes: u64,
    rchar: u64,
    log_end_offsets: Vec<u64>,
    offline: u64,
    syncs: Option<Vec<(String, u64)>>,
}

fn open_in_child(set: &DataSet, args: &BenchArgs, counter: SyncCounter) -> anyhow::Result<Opened> {
    let child = child_command(set, args, ChildMode::Open)?;
    let counts = tempfile::NamedTempFile::new().context("cannot create the sync counts' file")?;
    let command = match counter.wrap(child.get_program(), counts.path()) {
        Some(mut wrapped) => {
            wrapped.args(child.get_args());
            wrapped
        }
        None => child,
    };
    // perf says on stderr that its child was killed, as the bench means it to be; the child
    // reports its own failures in its JSON line.
    let stderr = match counter {
        SyncCounter::Perf => Stdio::null(),
        SyncCounter::Strace | SyncCounter::None => Stdio::inherit(),
    };
    let report = run_until_reported(command, stderr)?;
    let numbers = |key: &str| {
        report[key]
            .as_array()
            .map(|values| values.iter().filter_map(Value::as_u64).collect::<Vec<_>>())
            .ok_or_else(|| anyhow!("the child's report has no {key}: {report}"))
    };
    let text = match counter {
        SyncCounter::None => String::new(),
        SyncCounter::Perf | SyncCounter::Strace => {
            fs::read_to_string(counts.path()).context("cannot read the sync counts")?
        }
    };
    let syncs = counter.counts(&text);
    Ok(Opened {
        seconds: report["seconds"].as_f64().unwrap_or(0.0),
        read_bytes: report["read_bytes"].as_u64().unwrap_or(0),
        rchar: report["rchar"].as_u64().unwrap_or(0),
        log_end_offsets: numbers("log_end_offsets")?,
        offline: report["offline"].as_u64().unwrap_or(0),
        syncs,
    })
}

/// `perf stat -x ,`'s counts: each of [`SYNC_CALLS`], then `io_uring_fsync` (0 for those not
/// listed or not counted).
fn perf_counts(output: &str) -> Vec<(String, u64)> {
    let count = |event: &str| -> u64 {
        output
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(',').collect();
                let value = fields.first()?.trim().parse::<u64>().ok()?;
                (fields.get(2)?.trim() == event).then_some(value)
            })
            .sum()
    };
    let mut counts: Vec<(String, u64)> = SYNC_CALLS
        .iter()
        .map(|call| {
            let event = format!("syscalls:sys_enter_{call}");
            ((*call).to_owned(), count(&event))
        })
        .collect();
    counts.push((
        "io_uring_fsync".to_owned(),
        count("io_uring:io_uring_submit_req"),
    ));
    counts
}

/// `strace -c`'s call counts of each of [`SYNC_CALLS`] (0 for those not listed).
fn sync_calls(summary: &str) -> Vec<(String, u64)> {
    SYNC_CALLS
        .iter()
        .map(|call| {
            let count = summary
                .lines()
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let name = *fields.last()?;
                    let calls = fields.get(3)?.parse::<u64>().ok()?;
                    (name == *call).then_some(calls)
                })
                .sum();
            ((*call).to_owned(), count)
        })
        .collect()
}

/// What the writer acknowledged, by partition: the offset after its last acknowledged record.
struct Acknowledged {
    ends: Vec<u64>,
    records: u64,
    bytes: u64,
}

impl Acknowledged {
    /// Acknowledged records past each partition's log end after the open.
    fn lost(&self, log_end_offsets: &[u64]) -> u64 {
        self.ends
            .iter()
            .enumerate()
            .map(|(partition, end)| {
                let found = log_end_offsets.get(partition).copied().unwrap_or(0);
                end.saturating_sub(found)
            })
            .sum()
    }
}

fn write_unsynced_in_child(set: &DataSet, args: &BenchArgs) -> anyhow::Result<Acknowledged> {
    let writer = child_command(set, args, ChildMode::WriteUnsynced)?;
    let report = run_until_reported(writer, Stdio::inherit())?;
    let ends = report["acknowledged_ends"]
        .as_array()
        .map(|values| values.iter().filter_map(Value::as_u64).collect())
        .ok_or_else(|| anyhow!("the writer's report has no acknowledged_ends: {report}"))?;
    Ok(Acknowledged {
        ends,
        records: report["records"].as_u64().unwrap_or(0),
        bytes: report["bytes"].as_u64().unwrap_or(0),
    })
}

/// Starts `command` (a child, possibly under perf or strace), reads the JSON line its child prints, kills
/// that child (SIGKILL, by the pid it reported) and waits for `command` to end.
fn run_until_reported(mut command: Command, stderr: Stdio) -> anyhow::Result<Value> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("cannot start {:?}", command.get_program()))?;
    let line = read_report_line(&mut child);
    let report = match line {
        Ok(line) => serde_json::from_str::<Value>(&line)
            .with_context(|| format!("the child printed {line:?}, not its report")),
        Err(error) => Err(error),
    };
    let killed = match report
        .as_ref()
        .ok()
        .and_then(|report| report["pid"].as_i64())
    {
        Some(pid) => kill(pid),
        None => child.kill().context("cannot kill the child"),
    };
    let status = child.wait().context("cannot wait for the child")?;
    let report = report.with_context(|| format!("the child ended: {status}"))?;
    killed?;
    if let Some(error) = report["error"].as_str() {
        bail!("the child failed: {error}");
    }
    Ok(report)
}

fn read_report_line(child: &mut Child) -> anyhow::Result<String> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("the child has no stdout"))?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .context("cannot read the child's report")?;
    if line.trim().is_empty() {
        bail!("the child printed no report");
    }
    Ok(line)
}

fn kill(pid: i64) -> anyhow::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| anyhow!("the child reported pid {pid}"))?;
    rustix::process::kill_process(pid, rustix::process::Signal::KILL)
        .with_context(|| format!("cannot kill process {}", pid.as_raw_nonzero()))
}

/// What the child does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChildMode {
    /// Open the data directory, describe the topic, report.
    Open,
    /// Open it, append without a sync, report what was acknowledged.
    WriteUnsynced,
}

/// `seglog bench-restart-child`: one side of the `restart` workload, run by it (hidden). It prints
/// one JSON line, then waits to be killed (SIGKILL); it exits at once if its stdin closes.
#[derive(Debug, Args)]
pub struct RestartChildArgs {
    #[arg(long, value_enum)]
    pub mode: ChildMode,
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long)]
    pub partitions: u32,
    #[arg(long, default_value_t = 1024)]
    pub record_size: usize,
    #[arg(long, default_value_t = 65536)]
    pub batch_bytes: usize,
    #[arg(long, default_value_t = 0)]
    pub unsynced_bytes: u64,
    #[arg(long, value_enum)]
    pub backend: Option<BenchBackend>,
    #[arg(long)]
    pub shards: Option<usize>,
    #[arg(long, value_enum, default_value_t = DirectIo::On)]
    pub direct_io: DirectIo,
}

/// The child: never returns while its parent waits; exits when its stdin closes.
pub fn run_child(args: &RestartChildArgs) -> anyhow::Result<crate::Outcome> {
    super::raise_open_files_limit();
    let backend = match args.backend {
        Some(BenchBackend::Uring) => IoBackend::IoUring,
        Some(BenchBackend::Pio) => IoBackend::PositionedIo,
        None => IoBackend::from_env(),
    };
    let config = engine_config(backend, args.direct_io == DirectIo::On, args.shards);
    let report = match args.mode {
        ChildMode::Open => open_and_describe(&args.dir, config),
        ChildMode::WriteUnsynced => append_unsynced(args, config),
    };
    let mut report = report.unwrap_or_else(|error| json!({ "error": format!("{error:#}") }));
    report["pid"] = json!(std::process::id());
    let mut out = io::stdout().lock();
    writeln!(out, "{report}")?;
    out.flush()?;
    drop(out);
    // Killed here by the bench (SIGKILL): no close, no checkpoint, no clean-shutdown marker.
    let mut rest = Vec::new();
    let _ = io::stdin().read_to_end(&mut rest);
    std::process::exit(0);
}

fn open_and_describe(dir: &Path, config: EngineConfig) -> anyhow::Result<Value> {
    // This program's own pages, dropped from the cache with the rest, read now: the code the
    // open runs for the first time is not counted as read by the open.
    fs::read("/proc/self/exe").context("cannot read this program's executable")?;
    let before = proc_io()?;
    let started = Instant::now();
    let engine = Engine::open(dir, config)
        .with_context(|| format!("cannot open data directory {}", dir.display()))?;
    let description = engine
        .describe_topic(TOPIC)
        .context("cannot describe the topic")?;
    let seconds = started.elapsed().as_secs_f64();
    let after = proc_io()?;
    let log_end_offsets: Vec<u64> = description
        .partitions
        .iter()
        .map(|partition| partition.log_end_offset.0)
        .collect();
    let offline = description
        .partitions
        .iter()
        .filter(|partition| partition.offline.is_some())
        .count();
    // The engine is not closed: the bench kills this process.
    std::mem::forget(engine);
    Ok(json!({
        "seconds": seconds,
        "read_bytes": after.read_bytes.saturating_sub(before.read_bytes),
        "rchar": after.rchar.saturating_sub(before.rchar),
        "log_end_offsets": log_end_offsets,
        "offline": offline,
    }))
}

/// `/proc/self/io`'s read counters.
struct ProcIo {
    read_bytes: u64,
    rchar: u64,
}

fn proc_io() -> anyhow::Result<ProcIo> {
    let text = fs::read_to_string("/proc/self/io").context("cannot read /proc/self/io")?;
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.trim().parse::<u64>().ok())
            .ok_or_else(|| anyhow!("/proc/self/io has no {name}"))
    };
    Ok(ProcIo {
        read_bytes: field("read_bytes")?,
        rchar: field("rchar")?,
    })
}

/// Appends `unsynced_bytes` to every partition (batches of at most `batch_bytes`),
/// `Durability::Written`, never synced.
fn append_unsynced(args: &RestartChildArgs, config: EngineConfig) -> anyhow::Result<Value> {
    let engine = Engine::open(&args.dir, config)
        .with_context(|| format!("cannot open data directory {}", args.dir.display()))?;
    let topic = TopicName::parse(TOPIC)?;
    let batch_bytes = args
        .batch_bytes
        .min(usize::try_from(args.unsynced_bytes).unwrap_or(usize::MAX));
    let batch = unsynced_batch(args.record_size, batch_bytes)?;
    let batch_length = batch.len() as u64;
    // Whole batches, as near the share as they come (at least one).
    let batches_per_partition = (args.unsynced_bytes / batch_length.max(1)).max(1);
    let mut ends = vec![0u64; args.partitions as usize];
    let mut records = 0u64;
    let mut bytes = 0u64;
    let mut inflight = std::collections::VecDeque::with_capacity(WRITER_INFLIGHT);
    let mut finish = |(partition, pending): (usize, seglog::engine::Pending<_, _>)| {
        let info: seglog::log::AppendInfo = pending.wait().context("append failed")?;
        if let Some(end) = ends.get_mut(partition) {
            *end = (*end).max(info.last_offset.0 + 1);
        }
        records += info.record_count;
        bytes += batch_length;
        anyhow::Ok(())
    };
    for _ in 0..batches_per_partition {
        for partition in 0..args.partitions {
            let pending = engine.append(&topic, partition, batch.clone(), Durability::Written);
            inflight.push_back((partition as usize, pending));
            if inflight.len() >= WRITER_INFLIGHT
                && let Some(oldest) = inflight.pop_front()
            {
                finish(oldest)?;
            }
        }
    }
    while let Some(oldest) = inflight.pop_front() {
        finish(oldest)?;
    }
    // Not closed, not flushed: the bench kills this process.
    std::mem::forget(engine);
    Ok(json!({
        "acknowledged_ends": ends,
        "records": records,
        "bytes": bytes,
    }))
}

/// One batch of records of `record_size` bytes, at most `batch_bytes` (at least one record).
fn unsynced_batch(record_size: usize, batch_bytes: usize) -> anyhow::Result<Bytes> {
    let value = vec![b'u'; record_size];
    let timestamp_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(i64::MAX);
    let record = NewRecord {
        timestamp_ms,
        key: None,
        value: Some(&value),
        headers: &[],
    };
    let mut builder = BatchBuilder::with_capacity(0, batch_bytes);
    loop {
        if builder.records_count() > 0 && builder.size_bytes_with(&record) > batch_bytes {
            break;
        }
        builder.push(&record);
    }
    builder
        .build()
        .ok_or_else(|| anyhow!("an empty benchmark batch"))
}
