//! Command-line arguments of every subcommand (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "seglog",
    version,
    about = "Manage topics of, produce to, consume from, dump and verify seglog data directories (Kafka's partition storage format)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, list, describe, grow and delete topics (Kafka's `kafka-topics`).
    Topics(TopicsArgs),
    /// Append records read from stdin, one per line, and print each one's partition and offset.
    Produce(ProduceArgs),
    /// Print the records of one partition, from an offset to the end of the log; or, with
    /// --group, of every partition of the topic as a member of a consumer group.
    Consume(ConsumeArgs),
    /// List consumer groups and describe their committed offsets and lag
    /// (Kafka's `kafka-consumer-groups`).
    Groups(GroupsArgs),
    /// Run retention and compaction once, now, and print what they did.
    Clean(CleanArgs),
    /// Print .log, .index and .timeindex files like Kafka's kafka.tools.DumpLogSegments.
    Dump(DumpArgs),
    /// Check every batch and index entry of a data directory (or one partition directory), read-only.
    Verify(VerifyArgs),
    /// Run a load generator against an embedded engine and print throughput and latency
    /// percentiles.
    Bench(BenchArgs),
}

/// Output format of `produce` acknowledgements, `consume` records and `topics` listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Readable lines (`name=value` fields; `topics` uses Kafka's `Name: value` columns).
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Data directory (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// Topic to append to; created if it does not exist (with --partitions and --config).
    #[arg(long)]
    pub topic: String,
    /// Partition count used when the topic is created [default: 1]; an existing topic keeps its own.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub partitions: Option<u32>,
    /// Split each line at the first occurrence of this separator into key and value. Lines
    /// without it get a null key.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub key_separator: Option<String>,
    /// Format of the acknowledgement lines.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Acknowledge a record only once its batch is durable (fdatasync, shared by the appends in
    /// flight: group commit).
    #[arg(long)]
    pub durable: bool,
    /// A topic setting with Kafka's topic-config name, e.g. `segment.bytes=1048576`, used when the
    /// topic is created; repeatable. An existing topic keeps its own.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    pub configs: Vec<String>,
    /// Codec of the batches written (Kafka's `compression.type`: none, gzip, snappy, lz4, zstd)
    /// [default: the topic's `compression.type`].
    #[arg(long, value_name = "CODEC", value_parser = parse_compression)]
    pub compression_type: Option<seglog::format::Compression>,
    /// Send a batch that is not full this many milliseconds after its first line (Kafka's
    /// `linger.ms`).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(..=i32::MAX as u64))]
    pub linger_ms: u64,
    /// Close a partition's batch before it grows past this many bytes (Kafka's `batch.size`).
    #[arg(long, default_value_t = 16384, value_parser = clap::value_parser!(u64).range(..=i32::MAX as u64))]
    pub batch_size: u64,
}

fn parse_compression(name: &str) -> Result<seglog::format::Compression, String> {
    name.parse().map_err(|error| format!("{error}"))
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Topic to read.
    #[arg(long)]
    pub topic: String,
    /// Partition to read (required without --group).
    #[arg(long, required_unless_present = "group", conflicts_with = "group")]
    pub partition: Option<u32>,
    /// First offset to print (default: the log start offset).
    #[arg(long, conflicts_with_all = ["from_beginning", "group"])]
    pub offset: Option<u64>,
    /// Join this consumer group: consume every partition of the topic from the group's committed
    /// offsets (partitions without one from the log start offset, or as
    /// `auto.offset.reset` says), commit after each printed poll, and leave at the end of the log.
    #[arg(long)]
    pub group: Option<String>,
    /// A consumer setting with Kafka's consumer-config name, e.g. `auto.offset.reset=latest`;
    /// repeatable; with --group only.
    #[arg(
        long = "consumer-property",
        value_name = "KEY=VALUE",
        conflicts_with = "partition"
    )]
    pub consumer_properties: Vec<String>,
    /// Start at the log start offset (the default).
    #[arg(long)]
    pub from_beginning: bool,
    /// Stop after printing this many records.
    #[arg(long)]
    pub max_records: Option<u64>,
    /// Format of the record lines.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Consumer groups live in the process that runs them, so a data directory opened by this command has no live members: it shows what is durable, the offsets each group committed (every group is Empty), with each partition's log end offset and lag."
)]
pub struct GroupsArgs {
    #[command(subcommand)]
    pub command: GroupsCommand,
}

#[derive(Debug, Subcommand)]
pub enum GroupsCommand {
    /// Print the groups that have committed offsets, one per line.
    List(GroupListArgs),
    /// Print a group's committed offset, log end offset and lag per partition, like
    /// `kafka-consumer-groups --describe` (no live members: groups live in their own process).
    Describe(GroupDescribeArgs),
}

#[derive(Debug, Args)]
pub struct GroupListArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Format of the group lines.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct GroupDescribeArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Group to describe (default: every group with committed offsets).
    #[arg(long)]
    pub group: Option<String>,
    /// Text like `kafka-consumer-groups --describe`, or one JSON object per group.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// Files to dump: `.log`, `.index` or `.timeindex` (space- or comma-separated).
    #[arg(long, required = true, num_args = 1.., value_delimiter = ',')]
    pub files: Vec<PathBuf>,
    /// Print each record's key and payload (implies --deep-iteration).
    #[arg(long)]
    pub print_data_log: bool,
    /// Print one line per record, not only per batch.
    #[arg(long)]
    pub deep_iteration: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Data directory, or a single partition directory.
    #[arg(long)]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct CleanArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Only this topic (default: every topic).
    #[arg(long)]
    pub topic: Option<String>,
}

#[derive(Debug, Args)]
pub struct TopicsArgs {
    #[command(subcommand)]
    pub command: TopicsCommand,
}

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// Create a topic with its partitions and configuration.
    Create(TopicCreateArgs),
    /// Print one line per topic: its name, partition count and non-default settings.
    List(TopicListArgs),
    /// Print a topic's settings and each partition's offsets, size and segment count.
    Describe(TopicDescribeArgs),
    /// Add partitions to a topic (a topic never shrinks).
    Alter(TopicAlterArgs),
    /// Delete a topic and all of its data.
    Delete(TopicDeleteArgs),
}

#[derive(Debug, Args)]
pub struct TopicCreateArgs {
    /// Data directory (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// Topic to create.
    #[arg(long)]
    pub topic: String,
    /// Number of partitions.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub partitions: u32,
    /// A topic setting with Kafka's topic-config name, e.g. `retention.ms=86400000`; repeatable.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    pub configs: Vec<String>,
}

#[derive(Debug, Args)]
pub struct TopicListArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Format of the topic lines.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct TopicDescribeArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Topic to describe (default: every topic).
    #[arg(long)]
    pub topic: Option<String>,
    /// Text like `kafka-topics --describe`, or one JSON object per topic.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct TopicAlterArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Topic to grow.
    #[arg(long)]
    pub topic: String,
    /// The new partition count, above the current one.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub partitions: u32,
}

#[derive(Debug, Args)]
pub struct TopicDeleteArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Topic to delete.
    #[arg(long)]
    pub topic: String,
}

/// What `bench` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Producers append batches as fast as they can, several appends in flight each.
    Append,
    /// Every append durable (fdatasync shared between producers), one in flight per producer.
    GroupCommit,
    /// Append a data set, then fetch it back from the page cache.
    FetchHot,
    /// Producers and consumers together: end-to-end latency.
    Tail,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Append => "append",
            Workload::GroupCommit => "group-commit",
            Workload::FetchHot => "fetch-hot",
            Workload::Tail => "tail",
        }
    }
}

/// When `bench` appends are synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FlushMode {
    /// Appends are acknowledged once written (the topic's flush policy syncs later).
    None,
    /// Every append is acknowledged once synced.
    Batch,
}

/// The engine's I/O backend for `bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchBackend {
    /// io_uring (an error if this process cannot create a ring).
    Uring,
    /// Positioned I/O: pread/pwrite/fdatasync.
    Pio,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to run.
    #[arg(long, value_enum, default_value_t = Workload::Append)]
    pub workload: Workload,
    /// Producer threads [default: 16 for group-commit, 2 otherwise].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub producers: Option<usize>,
    /// Consumer threads (fetch-hot, tail).
    #[arg(long, default_value_t = 2, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub consumers: usize,
    /// Partitions of the benchmark topic.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub partitions: u32,
    /// Bytes of each record's value (at least 8: tail stamps a clock in the first 8).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(8..=16 * 1024 * 1024))]
    pub record_size: u64,
    /// Bytes of each appended batch, at most (at least one record).
    #[arg(long, default_value_t = 64 * 1024, value_parser = clap::value_parser!(u64).range(128..=64 * 1024 * 1024))]
    pub batch_bytes: u64,
    /// `batch`: every append is acknowledged only once synced (group-commit always is).
    #[arg(long, value_enum, default_value_t = FlushMode::None)]
    pub flush: FlushMode,
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
    /// Data directory [default: a fresh temporary directory, removed afterwards].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write every figure, the configuration and the machine as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also measure the disk's own sequential write and read rates with the same block size, and
    /// print the engine's MB/s as a fraction of them.
    #[arg(long)]
    pub vs_disk: bool,
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
