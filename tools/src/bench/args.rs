//! `seglog bench`'s arguments (clap derive).

use std::path::PathBuf;
use std::str::FromStr;

use clap::{Args, ValueEnum};
use seglog::format::compression::Compression;

/// What `bench` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Producers append batches as fast as they can, several appends in flight each.
    Append,
    /// Every append durable (fdatasync shared between producers), one in flight per producer.
    GroupCommit,
    /// Append a data set, then fetch it back from the page cache.
    FetchHot,
    /// Append a data set, drop it from the page cache, then fetch it back once from the disk.
    FetchCold,
    /// Append a data set, drop it from the page cache, then fetch single records at random
    /// offsets, one fetch in flight per consumer (consumers = queue depth).
    RandomFetch,
    /// Producers and consumers together: end-to-end latency.
    Tail,
    /// Appends spread over 10,000 partitions (unless --partitions).
    ManyPartitions,
    /// A compacted topic with small segments: append latency without, then with, compactions
    /// running in a loop on another thread.
    Compaction,
    /// Three seglog-raft nodes in this process: batches committed on a majority, one in
    /// flight per producer, beside the single-node durable group commit (`group-commit`).
    Replicated,
    /// The embedded append, then the same producers as Kafka-protocol connections to `seglog
    /// serve` in this process, then the data fetched back over the protocol.
    Serve,
    /// Restart after a crash: a data set written (--partitions x --restart-mb, then
    /// --restart-many-partitions holding --restart-many-records), then, for each, the open of a
    /// cleanly closed directory, of one whose process was killed (SIGKILL) with nothing unsynced,
    /// and of one killed after appending --restart-unsynced-mb without a sync. Each open runs in
    /// a child process after `sync` and the page cache dropped (drop_caches 3 where permitted,
    /// else posix_fadvise DONTNEED on every file); it reports seconds from `Engine::open` until
    /// `describe_topic` answered for every partition, the bytes it read (/proc/self/io), and the
    /// syncs it issued (under perf stat where perf runs: the sync system calls and the syncs
    /// submitted through io_uring; else under strace: the system calls only; else n/a).
    /// --records, --duration and --vs-disk do not apply.
    Restart,
    /// Topic creation: `create_topic` of --partitions (default 100,000) partitions, then
    /// `describe_topic`, `close`, a clean `Engine::open` and `describe_topic` again, each timed.
    /// Producers, records, --duration and --vs-disk do not apply.
    CreatePartitions,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Append => "append",
            Workload::GroupCommit => "group-commit",
            Workload::FetchHot => "fetch-hot",
            Workload::FetchCold => "fetch-cold",
            Workload::RandomFetch => "random-fetch",
            Workload::Tail => "tail",
            Workload::ManyPartitions => "many-partitions",
            Workload::Compaction => "compaction",
            Workload::Replicated => "replicated",
            Workload::Serve => "serve",
            Workload::Restart => "restart",
            Workload::CreatePartitions => "create-partitions",
        }
    }
}

/// When `bench` appends are synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushMode {
    /// Appends are acknowledged once written (the topic's flush policy syncs later).
    None,
    /// Every append is acknowledged once synced.
    Batch,
    /// Appends are acknowledged once written; the topic syncs every this many milliseconds
    /// (`flush.ms`).
    IntervalMs(u64),
}

impl FlushMode {
    pub fn name(self) -> String {
        match self {
            FlushMode::None => "none".to_owned(),
            FlushMode::Batch => "batch".to_owned(),
            FlushMode::IntervalMs(ms) => format!("interval:{ms}"),
        }
    }
}

/// `none`, `batch` or `interval:MS`.
fn parse_flush(value: &str) -> Result<FlushMode, String> {
    match value {
        "none" => Ok(FlushMode::None),
        "batch" => Ok(FlushMode::Batch),
        _ => value
            .strip_prefix("interval:")
            .and_then(|ms| ms.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(FlushMode::IntervalMs)
            .ok_or_else(|| format!("expected none, batch or interval:MS (MS > 0), got {value:?}")),
    }
}

/// The engine's I/O backend for `bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchBackend {
    /// io_uring (an error if this process cannot create a ring).
    Uring,
    /// Positioned I/O: pread/pwrite/fdatasync.
    Pio,
}

/// How the engine writes its active segments (`--direct-io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DirectIo {
    /// With `O_DIRECT` (`EngineConfig::direct_writes`, the engine's default).
    On,
    /// Through the page cache.
    Off,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to run.
    #[arg(long, value_enum, default_value_t = Workload::Append)]
    pub workload: Workload,
    /// Producer threads [default: 16 for group-commit and replicated, 2 otherwise].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub producers: Option<usize>,
    /// Consumer threads (fetch-hot, fetch-cold, random-fetch: the queue depth, tail).
    #[arg(long, default_value_t = 2, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub consumers: usize,
    /// Partitions of the benchmark topic [default: 10000 for many-partitions, 100000 for
    /// create-partitions, 4 otherwise; restart: of its first data set].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub partitions: Option<u32>,
    /// Bytes of each record's value (at least 8: tail stamps a clock in the first 8).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(8..=16 * 1024 * 1024))]
    pub record_size: u64,
    /// Bytes of each appended batch, at most (at least one record) [default: one record for
    /// random-fetch, 65536 otherwise].
    #[arg(long, value_parser = clap::value_parser!(u64).range(128..=64 * 1024 * 1024))]
    pub batch_bytes: Option<u64>,
    /// Send records one at a time through seglog's Producer (batch.size = --batch-bytes) with
    /// this linger.ms, instead of appending whole prebuilt batches; latency is then per record.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub linger_ms: Option<u64>,
    /// Keyed records, keys uniform over this many distinct keys [default: 1000 for compaction,
    /// unkeyed otherwise].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub key_space: Option<u64>,
    /// Codec of every appended batch (Kafka's `compression.type`): none, gzip, snappy, lz4 or
    /// zstd. `--compression` is an old spelling of it.
    #[arg(
        long,
        alias = "compression",
        value_name = "CODEC",
        default_value = "none",
        value_parser = parse_compression
    )]
    pub compression_type: Compression,
    /// `none`: appends are acknowledged once written; `batch`: every append is acknowledged only
    /// once synced (group-commit and replicated always are); `interval:MS`: acknowledged once written, the topic
    /// syncs every MS milliseconds (`flush.ms`).
    #[arg(long, value_name = "none|batch|interval:MS", default_value = "none", value_parser = parse_flush)]
    pub flush: FlushMode,
    /// Cap the offered load at this many records per second, all producers together, as
    /// kafka-producer-perf-test's `--throughput` (negative: no cap, the default). Each batch is
    /// due when the cap's schedule reaches its last record; latency is measured from that due
    /// time, not from the actual send, so a stalled producer's backlog counts (no coordinated
    /// omission).
    #[arg(long, value_name = "RECORDS_PER_S", allow_negative_numbers = true, value_parser = parse_throughput)]
    pub throughput: Option<f64>,
    /// Run for this many seconds [default: 3].
    #[arg(long, value_name = "SECS", conflicts_with = "records", value_parser = parse_seconds)]
    pub duration: Option<f64>,
    /// Append this many records (at least; whole batches) instead of running for a duration.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub records: Option<u64>,
    /// Engine shards [default: one per core].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub shards: Option<usize>,
    /// I/O backend [default: SEGLOG_IO_BACKEND, else io_uring where available].
    #[arg(long, value_enum)]
    pub backend: Option<BenchBackend>,
    /// Write the active segments with O_DIRECT (`EngineConfig::direct_writes`), appends skipping
    /// the page cache: `on` (the engine's default; also `--direct-io` alone) or `off`. Where the
    /// file system refuses O_DIRECT (tmpfs before Linux 6.6) the engine warns and writes through
    /// the page cache.
    #[arg(
        long,
        value_enum,
        value_name = "WHEN",
        num_args = 0..=1,
        default_value_t = DirectIo::On,
        default_missing_value = "on"
    )]
    pub direct_io: DirectIo,
    /// Read large ranges the page cache holds none of with O_DIRECT
    /// (`EngineConfig::direct_cold_reads`; io_uring backend).
    #[arg(long)]
    pub direct_reads: bool,
    /// Do not write zeros ahead of the appends of partitions whose syncs each cover little
    /// (`EngineConfig::prewrite_synced_logs`, on by default): each sync then grows the file.
    #[arg(long)]
    pub no_prewrite: bool,
    /// Sync a partition in the background once this many MiB were appended to it unsynced
    /// (`EngineConfig::background_sync_bytes`; 0: never).
    #[arg(long, value_name = "MIB", default_value_t = 0)]
    pub background_sync_mb: u64,
    /// The topic's `segment.bytes` [default: the engine's, 1 GiB].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(14..=i32::MAX as u64))]
    pub segment_bytes: Option<u64>,
    /// The topic's `retention.bytes` (per partition): segments beyond it are deleted while the
    /// workload runs. The engine then checks retention every second and unlinks a deleted
    /// segment's files at once (`file.delete.delay.ms` 0), so that deletions happen within the run.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(0..=i64::MAX as u64))]
    pub retention_bytes: Option<u64>,
    /// Data directory [default: a fresh temporary directory, removed afterwards].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write every figure, the configuration and the machine as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the full append-latency histogram (microseconds) in HdrHistogram's
    /// percentile-distribution text format to this file.
    #[arg(long, value_name = "FILE")]
    pub histogram: Option<PathBuf>,
    /// Also draw every phase's latency by percentile as an SVG plot in this file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// First measure the disk in a separate directory on the same file system, and print the
    /// engine's figures as a ratio of it: its limits with fio (the ruler, `--ruler-seconds`;
    /// "the disk's best sequential write" is the faster of fio's 1 MiB O_DIRECT and buffered
    /// writes at queue depth 16), and beside them the run's own pattern (writes of the batch
    /// size with the same sync policy, sequential and random reads; fio or a built-in loop).
    #[arg(long)]
    pub vs_disk: bool,
    /// With `--vs-disk`: how long each of the ruler's fio jobs runs (the disk's limits: 1 MiB
    /// sequential writes at queue depth 16, O_DIRECT and buffered, their final fsync inside;
    /// the sequential read; appends + fdatasync; random reads over the engine's files).
    #[arg(long, value_name = "SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub ruler_seconds: u64,
    /// Wait, before the disk's measurement, the bare producers, the engine and a cold read
    /// phase, for memory freed before to be handed back to the host (a VM's free page
    /// reporting; its passes stall every sync here). Off unless asked for.
    #[arg(long)]
    pub settle: bool,
    /// Serve the engine's metrics in Prometheus' text format over HTTP on this address while
    /// the bench runs (`docs/METRICS.md`).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// restart: megabytes (10^6 bytes) appended to each of the first data set's --partitions
    /// (default 4), records of --record-size in batches of --batch-bytes, the engine's default
    /// 1 GiB segments (4 x 500 MB: 2 GB, as in issue 47).
    #[arg(long, value_name = "MB", default_value_t = 500.0, value_parser = parse_megabytes)]
    pub restart_mb: f64,
    /// restart: partitions of the second data set (`segment.index.bytes` 65536, as
    /// many-partitions).
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub restart_many_partitions: u32,
    /// restart: records of 100 bytes, one per batch, appended round-robin over
    /// --restart-many-partitions (10 per partition by default).
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub restart_many_records: u64,
    /// restart: megabytes appended without a sync, spread evenly over each data set's
    /// partitions (its records, in batches of up to --batch-bytes), before the writing process
    /// is killed (SIGKILL).
    #[arg(long, value_name = "MB", default_value_t = 100.0, value_parser = parse_megabytes)]
    pub restart_unsynced_mb: f64,
}

fn parse_megabytes(text: &str) -> Result<f64, String> {
    let megabytes: f64 = text
        .parse()
        .map_err(|error| format!("{text:?} is not a number of megabytes: {error}"))?;
    if megabytes.is_finite() && megabytes > 0.0 && megabytes <= 1e7 {
        Ok(megabytes)
    } else {
        Err(format!(
            "{text:?}: the size must be above 0 and at most 10,000,000 MB"
        ))
    }
}

fn parse_compression(text: &str) -> Result<Compression, String> {
    Compression::from_str(text)
        .map_err(|_| format!("{text:?}: the codec must be one of none, gzip, snappy, lz4, zstd"))
}

/// A cap in records per second; negative (Kafka's -1) is no cap.
fn parse_throughput(text: &str) -> Result<f64, String> {
    let records_per_s: f64 = text
        .parse()
        .map_err(|error| format!("{text:?} is not a number of records per second: {error}"))?;
    if records_per_s.is_finite() && records_per_s != 0.0 {
        Ok(records_per_s)
    } else {
        Err(format!(
            "{text:?}: the cap must be a positive number of records per second (negative: none)"
        ))
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|error| format!("{text:?} is not a number of seconds: {error}"))?;
    if seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0 {
        Ok(seconds)
    } else {
        Err(format!(
            "{text:?}: the duration must be above 0 and at most 86400 seconds"
        ))
    }
}
