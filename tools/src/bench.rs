//! `seglog bench`: a load generator that runs producers and consumers as threads against an
//! embedded engine and reports throughput and latency percentiles.
//!
//! Workloads:
//! - `append`: producers append prebuilt batches as fast as they can (`Durability::Written`, or
//!   `Durable` with `--flush batch`), [`APPENDS_INFLIGHT`] appends in flight each;
//! - `group-commit`: 16 producers by default, every append `Durable`, one in flight each, so the
//!   engine's group commit shares each `fdatasync` between them;
//! - `fetch-hot`: producers append a data set first (`--records`, or for 30% of `--duration`),
//!   then consumers fetch it back, from the page cache, for the rest of the run (with `--records`,
//!   each consumer reads its partitions once);
//! - `tail`: producers and consumers run together; each record's value starts with the
//!   microsecond wall clock at which its batch was built, and a consumer's end-to-end latency is
//!   the time it decoded the record minus that stamp.
//!
//! With `--vs-disk` the run also measures what the disk does with the same pattern and no engine
//! logic: sequential `pwrite`s of `--batch-bytes` blocks to a scratch file for about a second
//! (each followed by `fdatasync` when appends are durable), then sequential 1 MiB `pread`s of it,
//! and prints the engine's MB/s as a fraction of those.
//!
//! The run prints a table on stdout; `--json FILE` writes every figure with the configuration and
//! the machine. A progress bar with live throughput goes to stderr when it is a terminal.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IsTerminal, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions, Isolation, Pending};
use seglog::error::AppendError;
use seglog::format::batch::BatchIter;
use seglog::format::{BatchBuilder, NewRecord};
use seglog::io::IoBackend;
use seglog::log::AppendInfo;
use seglog::types::{Offset, PartitionId, TopicName};
use serde_json::{Map, Value, json};

use crate::Outcome;
use crate::args::{BenchArgs, BenchBackend, FlushMode, Workload};

/// Appends in flight per producer in the `append`, `fetch-hot` and `tail` workloads.
const APPENDS_INFLIGHT: usize = 8;
/// The topic every run writes.
const TOPIC: &str = "seglog-bench";
/// Bytes a consumer asks for per fetch.
const FETCH_MAX_BYTES: u64 = 1024 * 1024;
/// How long `tail` consumers keep reading after the producers stopped, at most.
const TAIL_GRACE: Duration = Duration::from_secs(5);
/// Share of `--duration` that `fetch-hot` spends appending its data set.
const FETCH_HOT_APPEND_SHARE: f64 = 0.3;
/// How long `--vs-disk` writes.
const DISK_WRITE_TIME: Duration = Duration::from_secs(1);
/// The scratch file `--vs-disk` writes cannot grow past this.
const DISK_FILE_MAX_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// Block size of the `--vs-disk` read.
const DISK_READ_BLOCK: usize = 1024 * 1024;
const MB: f64 = 1_000_000.0;

pub fn run(args: &BenchArgs) -> anyhow::Result<Outcome> {
    let settings = Settings::from_args(args)?;
    // The temporary directory lives until the end of the run and is removed when dropped.
    let (dir, _temporary) = match &args.dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let temporary = tempfile::Builder::new()
                .prefix("seglog-bench-")
                .tempdir()
                .context("cannot create a temporary data directory")?;
            (temporary.path().to_path_buf(), Some(temporary))
        }
    };
    fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    let config = EngineConfig {
        pin_shards: false,
        backend: settings.backend,
        shard_count: args.shards.unwrap_or(EngineConfig::default().shard_count),
        ..EngineConfig::default()
    };
    let engine = Engine::open(&dir, config)
        .with_context(|| format!("cannot open data directory {}", dir.display()))?;
    let outcome = run_workload(&engine, &settings);
    let closed = engine.close().context("cannot close the data directory");
    let phases = outcome?;
    closed?;
    let disk = if args.vs_disk {
        Some(measure_disk(
            &dir,
            args.batch_bytes as usize,
            settings.durable_appends(),
        )?)
    } else {
        None
    };
    let report = Report {
        settings: &settings,
        phases,
        disk,
        dir: &dir,
    };
    let mut out = io::stdout().lock();
    report.print_table(&mut out)?;
    out.flush()?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.to_json())?;
        fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(Outcome::Clean)
}

/// When a phase stops.
#[derive(Debug, Clone, Copy)]
enum Limit {
    Time(Duration),
    Records(u64),
}

/// The resolved configuration of a run.
#[derive(Debug)]
struct Settings {
    workload: Workload,
    producers: usize,
    consumers: usize,
    partitions: u32,
    record_size: usize,
    batch_bytes: usize,
    flush: FlushMode,
    limit: Limit,
    backend: IoBackend,
    backend_name: &'static str,
    shards: Option<usize>,
}

impl Settings {
    fn from_args(args: &BenchArgs) -> anyhow::Result<Settings> {
        let producers = args.producers.unwrap_or(match args.workload {
            Workload::GroupCommit => 16,
            _ => 2,
        });
        let limit = match (args.records, args.duration) {
            (Some(records), _) => Limit::Records(records),
            (None, Some(seconds)) => Limit::Time(Duration::from_secs_f64(seconds)),
            (None, None) => Limit::Time(Duration::from_secs(3)),
        };
        let (backend, backend_name) = match args.backend {
            Some(BenchBackend::Uring) => (IoBackend::IoUring, "uring"),
            Some(BenchBackend::Pio) => (IoBackend::PositionedIo, "pio"),
            None => (IoBackend::from_env(), "auto"),
        };
        if args.record_size as usize + 64 > args.batch_bytes as usize {
            bail!(
                "--batch-bytes {} cannot hold one record of --record-size {} (with its headers)",
                args.batch_bytes,
                args.record_size
            );
        }
        Ok(Settings {
            workload: args.workload,
            producers,
            consumers: args.consumers,
            partitions: args.partitions,
            record_size: args.record_size as usize,
            batch_bytes: args.batch_bytes as usize,
            flush: args.flush,
            limit,
            backend,
            backend_name,
            shards: args.shards,
        })
    }

    fn durable_appends(&self) -> bool {
        self.workload == Workload::GroupCommit || self.flush == FlushMode::Batch
    }

    fn durability(&self) -> Durability {
        if self.durable_appends() {
            Durability::Durable
        } else {
            Durability::Written
        }
    }

    fn appends_inflight(&self) -> usize {
        if self.workload == Workload::GroupCommit {
            1
        } else {
            APPENDS_INFLIGHT
        }
    }
}

/// What one phase measured.
#[derive(Debug)]
struct Phase {
    /// `append`, `durable`, `fetch` or `end_to_end`.
    name: &'static str,
    /// Records, bytes and seconds, for phases with a throughput.
    throughput: Option<(u64, u64, f64)>,
    latency: Histogram<u64>,
}

impl Phase {
    fn records_per_s(&self) -> Option<f64> {
        self.throughput
            .map(|(records, _, seconds)| records as f64 / seconds.max(1e-9))
    }

    fn mb_per_s(&self) -> Option<f64> {
        self.throughput
            .map(|(_, bytes, seconds)| bytes as f64 / MB / seconds.max(1e-9))
    }
}

/// Counters the workers bump and the progress bar reads.
#[derive(Debug, Default)]
struct Shared {
    /// Records appended (acknowledged).
    appended: AtomicU64,
    /// Records claimed by producers (a `--records` run stops claiming at the limit).
    claimed: AtomicU64,
    /// Records fetched.
    fetched: AtomicU64,
    producers_done: AtomicBool,
}

/// What one producer or consumer thread measured.
#[derive(Debug)]
struct WorkerStats {
    records: u64,
    bytes: u64,
    latency: Histogram<u64>,
}

fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).map_err(|error| anyhow!("histogram: {error}"))
}

fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

fn run_workload(engine: &Engine, settings: &Settings) -> anyhow::Result<Vec<Phase>> {
    let topic = engine
        .create_topic(TOPIC, settings.partitions, LogConfig::default())
        .with_context(|| format!("cannot create topic {TOPIC} (use a fresh --dir)"))?;
    let ack_name = if settings.durable_appends() {
        "durable"
    } else {
        "append"
    };
    match settings.workload {
        Workload::Append | Workload::GroupCommit => {
            let phase = append_phase(engine, &topic, settings, settings.limit, ack_name)?;
            Ok(vec![phase])
        }
        Workload::FetchHot => {
            let (append_limit, fetch_limit) = match settings.limit {
                Limit::Time(total) => (
                    Limit::Time(total.mul_f64(FETCH_HOT_APPEND_SHARE)),
                    Limit::Time(total.mul_f64(1.0 - FETCH_HOT_APPEND_SHARE)),
                ),
                Limit::Records(records) => (Limit::Records(records), Limit::Records(records)),
            };
            let append = append_phase(engine, &topic, settings, append_limit, ack_name)?;
            let fetch = fetch_hot_phase(engine, &topic, settings, fetch_limit)?;
            Ok(vec![append, fetch])
        }
        Workload::Tail => tail_phases(engine, &topic, settings, ack_name),
    }
}

/// A progress bar on stderr, hidden when stderr is not a terminal.
fn progress_bar(limit: Limit, what: &str) -> ProgressBar {
    let (length, unit) = match limit {
        Limit::Time(duration) => (
            u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            "ms",
        ),
        Limit::Records(records) => (records, "records"),
    };
    let bar = ProgressBar::new(length.max(1));
    if !io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    let template = format!("{what:>8} [{{bar:40}}] {{pos}}/{{len}} {unit} {{msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Waits for `handles`, updating `bar` every 100 ms from `count` (records so far).
fn watch<T>(
    handles: Vec<thread::ScopedJoinHandle<'_, anyhow::Result<T>>>,
    bar: &ProgressBar,
    limit: Limit,
    started: Instant,
    count: impl Fn() -> u64,
) -> anyhow::Result<Vec<T>> {
    while !handles.iter().all(|handle| handle.is_finished()) {
        thread::sleep(Duration::from_millis(100));
        let records = count();
        let elapsed = started.elapsed();
        bar.set_position(match limit {
            Limit::Time(_) => u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            Limit::Records(_) => records,
        });
        bar.set_message(format!(
            "{:.0} records/s",
            records as f64 / elapsed.as_secs_f64().max(1e-9)
        ));
    }
    bar.finish_and_clear();
    handles
        .into_iter()
        .map(|handle| {
            handle
                .join()
                .map_err(|_| anyhow!("a benchmark thread panicked"))?
        })
        .collect()
}

fn merge(name: &'static str, stats: &[WorkerStats], seconds: Option<f64>) -> anyhow::Result<Phase> {
    let mut latency = new_histogram()?;
    let mut records = 0;
    let mut bytes = 0;
    for worker in stats {
        latency
            .add(&worker.latency)
            .map_err(|error| anyhow!("histogram: {error:?}"))?;
        records += worker.records;
        bytes += worker.bytes;
    }
    Ok(Phase {
        name,
        throughput: seconds.map(|seconds| (records, bytes, seconds)),
        latency,
    })
}

/// Builds one batch of about `batch_bytes` whose records' values are `record_size` bytes, each
/// starting with `stamp_us` (little-endian).
fn build_batch(settings: &Settings, stamp_us: u64) -> anyhow::Result<(Bytes, u64)> {
    let mut value = vec![b'x'; settings.record_size];
    let stamp = stamp_us.to_le_bytes();
    let stamped = stamp.len().min(value.len());
    value[..stamped].copy_from_slice(&stamp[..stamped]);
    let timestamp_ms = i64::try_from(stamp_us / 1000).unwrap_or(i64::MAX);
    let record = NewRecord {
        timestamp_ms,
        key: None,
        value: Some(&value),
        headers: &[],
    };
    let mut builder = BatchBuilder::with_capacity(0, settings.batch_bytes);
    while builder.records_count() == 0 || builder.size_bytes_with(&record) <= settings.batch_bytes {
        builder.push(&record);
    }
    let records = u64::try_from(builder.records_count()).unwrap_or(0);
    let batch = builder
        .build()
        .ok_or_else(|| anyhow!("an empty benchmark batch"))?;
    Ok((batch, records))
}

/// Whether a producer may append another batch of `records`; claims them if so.
fn claim(shared: &Shared, limit: Limit, started: Instant, records: u64) -> bool {
    match limit {
        Limit::Time(duration) => started.elapsed() < duration,
        Limit::Records(total) => shared.claimed.fetch_add(records, Ordering::AcqRel) < total,
    }
}

fn append_phase(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
    limit: Limit,
    name: &'static str,
) -> anyhow::Result<Phase> {
    let shared = Shared::default();
    let bar = progress_bar(limit, name);
    let started = Instant::now();
    let stats = thread::scope(|scope| {
        let handles = (0..settings.producers)
            .map(|producer| {
                let shared = &shared;
                scope.spawn(move || {
                    let (batch, records) = build_batch(settings, now_micros())?;
                    produce(
                        engine,
                        topic,
                        settings,
                        shared,
                        limit,
                        started,
                        producer,
                        || Ok((batch.clone(), records)),
                    )
                })
            })
            .collect();
        watch(handles, &bar, limit, started, || {
            shared.appended.load(Ordering::Relaxed)
        })
    })?;
    merge(name, &stats, Some(started.elapsed().as_secs_f64()))
}

/// An append in flight: when it was sent, its answer, its records and bytes.
type InFlight = (Instant, Pending<AppendInfo, AppendError>, u64, u64);

/// A producer's loop: appends the batches `next_batch` makes, round-robin over the partitions
/// starting at its own, with up to `appends_inflight` appends in flight, until `limit`.
#[allow(clippy::too_many_arguments)]
fn produce(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
    shared: &Shared,
    limit: Limit,
    started: Instant,
    producer: usize,
    mut next_batch: impl FnMut() -> anyhow::Result<(Bytes, u64)>,
) -> anyhow::Result<WorkerStats> {
    let mut stats = WorkerStats {
        records: 0,
        bytes: 0,
        latency: new_histogram()?,
    };
    let partitions = u64::from(settings.partitions);
    let mut next_partition = producer as u64 % partitions;
    let mut inflight = VecDeque::with_capacity(settings.appends_inflight());
    let durability = settings.durability();
    let finish = |(sent, pending, records, bytes): InFlight, stats: &mut WorkerStats| {
        pending.wait().context("append failed")?;
        stats.latency.saturating_record(micros(sent.elapsed()));
        stats.records += records;
        stats.bytes += bytes;
        shared.appended.fetch_add(records, Ordering::Relaxed);
        anyhow::Ok(())
    };
    loop {
        let (batch, records) = next_batch()?;
        if !claim(shared, limit, started, records) {
            break;
        }
        let partition = PartitionId::try_from(next_partition).unwrap_or(0);
        next_partition = (next_partition + 1) % partitions;
        let bytes = batch.len() as u64;
        let sent = Instant::now();
        let pending = engine.append(topic, partition, batch, durability);
        inflight.push_back((sent, pending, records, bytes));
        if inflight.len() >= settings.appends_inflight()
            && let Some(oldest) = inflight.pop_front()
        {
            finish(oldest, &mut stats)?;
        }
    }
    while let Some(oldest) = inflight.pop_front() {
        finish(oldest, &mut stats)?;
    }
    Ok(stats)
}

/// The partitions consumer `consumer` reads: every `consumers`-th one, or, with more consumers
/// than partitions, one partition shared with others.
fn consumer_partitions(settings: &Settings, consumer: usize) -> Vec<PartitionId> {
    let consumers = settings.consumers as u64;
    let partitions = u64::from(settings.partitions);
    let consumer = consumer as u64;
    if consumers > partitions {
        vec![PartitionId::try_from(consumer % partitions).unwrap_or(0)]
    } else {
        (0..partitions)
            .filter(|partition| partition % consumers == consumer)
            .filter_map(|partition| PartitionId::try_from(partition).ok())
            .collect()
    }
}

/// Records in the whole batches of a fetch result.
fn count_records(records: Bytes) -> anyhow::Result<u64> {
    let mut count = 0;
    for batch in BatchIter::new(records, u64::MAX) {
        let batch = batch.context("a fetched batch does not decode")?;
        count += u64::try_from(batch.header().records_count).unwrap_or(0);
    }
    Ok(count)
}

fn fetch_options(max_wait_ms: u64) -> FetchOptions {
    FetchOptions {
        max_bytes: FETCH_MAX_BYTES,
        min_bytes: 1,
        max_wait_ms,
        isolation: Isolation::LogEnd,
    }
}

fn fetch_hot_phase(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
    limit: Limit,
) -> anyhow::Result<Phase> {
    let shared = Shared::default();
    let bar = progress_bar(limit, "fetch");
    let started = Instant::now();
    let stats = thread::scope(|scope| {
        let handles = (0..settings.consumers)
            .map(|consumer| {
                let shared = &shared;
                scope.spawn(move || {
                    fetch_hot(engine, topic, settings, shared, limit, started, consumer)
                })
            })
            .collect();
        watch(handles, &bar, limit, started, || {
            shared.fetched.load(Ordering::Relaxed)
        })
    })?;
    merge("fetch", &stats, Some(started.elapsed().as_secs_f64()))
}

/// A `fetch-hot` consumer: reads its partitions in turn, a fetch each, from the start; at a
/// partition's end it starts over (timed run) or is done with it (`--records` run).
fn fetch_hot(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
    shared: &Shared,
    limit: Limit,
    started: Instant,
    consumer: usize,
) -> anyhow::Result<WorkerStats> {
    let mut stats = WorkerStats {
        records: 0,
        bytes: 0,
        latency: new_histogram()?,
    };
    let mut positions: Vec<(PartitionId, Offset, bool)> = consumer_partitions(settings, consumer)
        .into_iter()
        .map(|partition| (partition, Offset(0), false))
        .collect();
    loop {
        if let Limit::Time(duration) = limit
            && started.elapsed() >= duration
        {
            break;
        }
        if positions.iter().all(|(_, _, done)| *done) {
            break;
        }
        for (partition, offset, done) in positions.iter_mut().filter(|(_, _, done)| !*done) {
            let sent = Instant::now();
            let data = engine
                .fetch(topic, *partition, *offset, fetch_options(0))
                .wait()
                .context("fetch failed")?;
            stats.latency.saturating_record(micros(sent.elapsed()));
            let bytes = data.records.len() as u64;
            let records = count_records(data.records)?;
            stats.records += records;
            stats.bytes += bytes;
            shared.fetched.fetch_add(records, Ordering::Relaxed);
            *offset = Offset(offset.0 + records);
            if records == 0 || *offset >= data.log_end_offset {
                match limit {
                    Limit::Time(_) => *offset = data.log_start_offset,
                    Limit::Records(_) => *done = true,
                }
            }
        }
    }
    Ok(stats)
}

fn tail_phases(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
    ack_name: &'static str,
) -> anyhow::Result<Vec<Phase>> {
    let shared = Shared::default();
    let limit = settings.limit;
    let bar = progress_bar(limit, "tail");
    let started = Instant::now();
    let (producer_stats, seconds, consumer_stats) = thread::scope(|scope| {
        let consumers: Vec<_> = (0..settings.consumers)
            .map(|consumer| {
                let shared = &shared;
                scope.spawn(move || tail_consume(engine, topic, settings, shared, consumer))
            })
            .collect();
        let producers = (0..settings.producers)
            .map(|producer| {
                let shared = &shared;
                scope.spawn(move || {
                    produce(
                        engine,
                        topic,
                        settings,
                        shared,
                        limit,
                        started,
                        producer,
                        || build_batch(settings, now_micros()),
                    )
                })
            })
            .collect();
        let producer_stats = watch(producers, &bar, limit, started, || {
            shared.appended.load(Ordering::Relaxed)
        });
        let seconds = started.elapsed().as_secs_f64();
        shared.producers_done.store(true, Ordering::Release);
        let consumer_stats: anyhow::Result<Vec<WorkerStats>> = consumers
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .map_err(|_| anyhow!("a benchmark thread panicked"))?
            })
            .collect();
        (producer_stats, seconds, consumer_stats)
    });
    let append = merge(ack_name, &producer_stats?, Some(seconds))?;
    let end_to_end = merge("end_to_end", &consumer_stats?, None)?;
    Ok(vec![append, end_to_end])
}

/// A `tail` consumer: follows its partitions from the start, recording each record's end-to-end
/// latency, until the producers stopped and everything appended was read (or [`TAIL_GRACE`]).
fn tail_consume(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
    shared: &Shared,
    consumer: usize,
) -> anyhow::Result<WorkerStats> {
    let mut stats = WorkerStats {
        records: 0,
        bytes: 0,
        latency: new_histogram()?,
    };
    let mut positions: Vec<(PartitionId, Offset)> = consumer_partitions(settings, consumer)
        .into_iter()
        .map(|partition| (partition, Offset(0)))
        .collect();
    let mut stopped_at: Option<Instant> = None;
    loop {
        let mut caught_up = true;
        let mut progressed = false;
        for (partition, offset) in &mut positions {
            let data = engine
                .fetch(topic, *partition, *offset, fetch_options(0))
                .wait()
                .context("fetch failed")?;
            let now_us = now_micros();
            stats.bytes += data.records.len() as u64;
            for batch in BatchIter::new(data.records, u64::MAX) {
                let batch = batch.context("a fetched batch does not decode")?;
                for record in batch.records().context("a fetched batch does not decode")? {
                    if let Some(stamp) = record
                        .value
                        .as_deref()
                        .and_then(|value| value.get(..8))
                        .and_then(|stamp| <[u8; 8]>::try_from(stamp).ok())
                    {
                        let latency = now_us.saturating_sub(u64::from_le_bytes(stamp));
                        stats.latency.saturating_record(latency.max(1));
                    }
                    stats.records += 1;
                    progressed = true;
                }
                let next = u64::try_from(batch.last_offset()).unwrap_or(0) + 1;
                *offset = Offset(offset.0.max(next));
            }
            if *offset < data.log_end_offset {
                caught_up = false;
            }
        }
        if shared.producers_done.load(Ordering::Acquire) {
            let stopped = *stopped_at.get_or_insert_with(Instant::now);
            if caught_up || stopped.elapsed() > TAIL_GRACE {
                break;
            }
        }
        if !progressed {
            thread::sleep(Duration::from_micros(50));
        }
    }
    shared.fetched.fetch_add(stats.records, Ordering::Relaxed);
    Ok(stats)
}

/// What `--vs-disk` measured, in MB/s.
#[derive(Debug, Clone, Copy)]
struct DiskFigures {
    write_mb_per_s: f64,
    read_mb_per_s: f64,
}

/// Sequential `pwrite`s of `block_bytes` to a scratch file in `dir` for about
/// [`DISK_WRITE_TIME`] (with `fdatasync` after each when `sync_each`), then 1 MiB `pread`s of it.
fn measure_disk(dir: &Path, block_bytes: usize, sync_each: bool) -> anyhow::Result<DiskFigures> {
    let path = dir.join("seglog-bench-disk.tmp");
    let result = measure_disk_file(&path, block_bytes, sync_each);
    let removed = fs::remove_file(&path);
    let figures = result?;
    removed.with_context(|| format!("cannot remove {}", path.display()))?;
    Ok(figures)
}

fn measure_disk_file(
    path: &Path,
    block_bytes: usize,
    sync_each: bool,
) -> anyhow::Result<DiskFigures> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let block = vec![b'd'; block_bytes];
    let started = Instant::now();
    let mut written = 0u64;
    while started.elapsed() < DISK_WRITE_TIME && written < DISK_FILE_MAX_BYTES {
        file.write_all_at(&block, written)?;
        if sync_each {
            file.sync_data()?;
        }
        written += block_bytes as u64;
    }
    if !sync_each {
        file.sync_data()?;
    }
    let write_seconds = started.elapsed().as_secs_f64();
    let read_mb_per_s = read_back(&file, written)?;
    Ok(DiskFigures {
        write_mb_per_s: written as f64 / MB / write_seconds.max(1e-9),
        read_mb_per_s,
    })
}

fn read_back(file: &File, length: u64) -> anyhow::Result<f64> {
    let mut buffer = vec![0u8; DISK_READ_BLOCK];
    let started = Instant::now();
    let mut position = 0u64;
    while position < length {
        let read = file.read_at(&mut buffer, position)?;
        if read == 0 {
            break;
        }
        position += read as u64;
    }
    Ok(position as f64 / MB / started.elapsed().as_secs_f64().max(1e-9))
}

/// Percentiles the table prints, with their JSON names.
const PERCENTILES: [(&str, &str, f64); 5] = [
    ("p50", "p50", 50.0),
    ("p90", "p90", 90.0),
    ("p99", "p99", 99.0),
    ("p99.9", "p999", 99.9),
    ("p99.99", "p9999", 99.99),
];

struct Report<'a> {
    settings: &'a Settings,
    phases: Vec<Phase>,
    disk: Option<DiskFigures>,
    dir: &'a Path,
}

impl Report<'_> {
    fn print_table(&self, out: &mut impl Write) -> io::Result<()> {
        let settings = self.settings;
        writeln!(
            out,
            "workload={} producers={} consumers={} partitions={} record_size={} batch_bytes={} backend={}",
            settings.workload.name(),
            settings.producers,
            settings.consumers,
            settings.partitions,
            settings.record_size,
            settings.batch_bytes,
            settings.backend_name,
        )?;
        write!(out, "{:<11} {:>12} {:>10}", "phase", "records/s", "MB/s")?;
        for (label, _, _) in PERCENTILES {
            write!(out, " {label:>9}")?;
        }
        writeln!(out, " {:>9}  (latency us)", "max")?;
        for phase in &self.phases {
            let records = phase
                .records_per_s()
                .map_or_else(|| "-".to_owned(), |value| format!("{value:.0}"));
            let mb = phase
                .mb_per_s()
                .map_or_else(|| "-".to_owned(), |value| format!("{value:.1}"));
            write!(out, "{:<11} {records:>12} {mb:>10}", phase.name)?;
            for (_, _, quantile) in PERCENTILES {
                write!(out, " {:>9}", phase.latency.value_at_percentile(quantile))?;
            }
            writeln!(out, " {:>9}", phase.latency.max())?;
        }
        if let Some(disk) = self.disk {
            writeln!(
                out,
                "disk: write {:.1} MB/s, read {:.1} MB/s (no engine, same pattern)",
                disk.write_mb_per_s, disk.read_mb_per_s
            )?;
            for phase in &self.phases {
                let versus = match phase.name {
                    "append" | "durable" => disk.write_mb_per_s,
                    "fetch" => disk.read_mb_per_s,
                    _ => continue,
                };
                if let Some(mb) = phase.mb_per_s() {
                    writeln!(
                        out,
                        "{}: {mb:.1} MB/s = {:.2} x the disk's {versus:.1} MB/s",
                        phase.name,
                        mb / versus.max(1e-9)
                    )?;
                }
            }
        }
        Ok(())
    }

    fn to_json(&self) -> Value {
        let settings = self.settings;
        let mut root = Map::new();
        let (duration_s, records) = match settings.limit {
            Limit::Time(duration) => (Some(duration.as_secs_f64()), None),
            Limit::Records(records) => (None, Some(records)),
        };
        root.insert(
            "config".into(),
            json!({
                "workload": settings.workload.name(),
                "producers": settings.producers,
                "consumers": settings.consumers,
                "partitions": settings.partitions,
                "record_size": settings.record_size,
                "batch_bytes": settings.batch_bytes,
                "flush": match settings.flush { FlushMode::None => "none", FlushMode::Batch => "batch" },
                "duration_s": duration_s,
                "records": records,
                "shards": settings.shards,
                "backend": settings.backend_name,
            }),
        );
        let mut machine = Map::new();
        if let Ok(cores) = thread::available_parallelism() {
            machine.insert("cores".into(), json!(cores.get()));
        }
        if let Ok(kernel) = fs::read_to_string("/proc/sys/kernel/osrelease") {
            machine.insert("kernel".into(), json!(kernel.trim()));
        }
        machine.insert("backend".into(), json!(settings.backend_name));
        if let Some(fs_type) = file_system_type(self.dir) {
            machine.insert("fs_type".into(), json!(fs_type));
        }
        root.insert("machine".into(), Value::Object(machine));
        for phase in &self.phases {
            let mut object = Map::new();
            if let (Some(records), Some(mb)) = (phase.records_per_s(), phase.mb_per_s()) {
                object.insert("records_per_s".into(), json!(records));
                object.insert("mb_per_s".into(), json!(mb));
            }
            let mut latency = Map::new();
            for (_, key, quantile) in PERCENTILES {
                latency.insert(
                    key.into(),
                    json!(phase.latency.value_at_percentile(quantile)),
                );
            }
            latency.insert("max".into(), json!(phase.latency.max()));
            latency.insert("count".into(), json!(phase.latency.len()));
            object.insert("latency_us".into(), Value::Object(latency));
            if phase.name == "durable"
                && let (Some(records), Some(mb)) = (phase.records_per_s(), phase.mb_per_s())
            {
                // Durable appends are appends too: their throughput is also `append`'s.
                root.insert(
                    "append".into(),
                    json!({"records_per_s": records, "mb_per_s": mb}),
                );
            }
            root.insert(phase.name.into(), Value::Object(object));
        }
        if let Some(disk) = self.disk {
            root.insert(
                "disk".into(),
                json!({
                    "write_mb_per_s": disk.write_mb_per_s,
                    "read_mb_per_s": disk.read_mb_per_s,
                }),
            );
        }
        Value::Object(root)
    }
}

/// The file system type of the mount that holds `dir` (longest mount point prefix in
/// `/proc/mounts`), if it can be told.
fn file_system_type(dir: &Path) -> Option<String> {
    let dir: PathBuf = fs::canonicalize(dir).ok()?;
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _device = fields.next()?;
            let mount_point = fields.next()?;
            let fs_type = fields.next()?;
            dir.starts_with(mount_point)
                .then(|| (mount_point.len(), fs_type.to_owned()))
        })
        .max_by_key(|(length, _)| *length)
        .map(|(_, fs_type)| fs_type)
}
