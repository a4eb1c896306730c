//! Command-line arguments of every subcommand (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::bench::args::BenchArgs;

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
    /// Print the records of one partition, from an offset to the end of the log (with --follow,
    /// then as they arrive), read-only; or, with --group, of every partition of the topic as a
    /// member of a consumer group.
    Consume(ConsumeArgs),
    /// List, describe, delete consumer groups and reset their offsets
    /// (Kafka's `kafka-consumer-groups`).
    Groups(GroupsArgs),
    /// Run retention and compaction once, now, and print what they did.
    Clean(CleanArgs),
    /// Print .log, .index and .timeindex files like Kafka's kafka.tools.DumpLogSegments.
    Dump(DumpArgs),
    /// Check every batch and index entry of a data directory (or one partition directory), read-only.
    Verify(VerifyArgs),
    /// Truncate a partition that the engine does not open because of damage to its last valid
    /// batch: shows what that discards, then asks (stdin not a terminal: needs --yes).
    Recover(RecoverArgs),
    /// Run a load generator against an embedded engine and print throughput and latency
    /// percentiles.
    Bench(BenchArgs),
    /// Run a cluster node in the foreground until SIGTERM or SIGINT: its partitions replicated
    /// with Raft on every voter listed in --peers.
    Node(NodeArgs),
    /// Inspect a cluster of nodes.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Serve Kafka's wire protocol over a data directory until SIGTERM or SIGINT: a single-node
    /// broker that Kafka clients (kcat, librdkafka, kafka-python) produce to and consume from.
    Serve(ServeArgs),
    /// Print a shell's completion script for seglog, e.g. `seglog completions bash >
    /// /etc/bash_completion.d/seglog`.
    Completions(CompletionsArgs),
    /// Print seglog's man page (roff), e.g. `seglog man | man -l -`.
    Man,
    /// `bench --workload restart`'s child process: opens a data directory or appends to it
    /// without a sync, prints one JSON line, and waits to be killed.
    #[command(hide = true)]
    BenchRestartChild(crate::bench::restart::RestartChildArgs),
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The data directory (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// Address to listen on for Kafka clients. Plaintext and unauthenticated: keep it on
    /// loopback or a trusted network.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9092", value_parser = parse_address)]
    pub listen: String,
    /// A broker setting by Kafka's name (`node.id`, `advertised.listeners`,
    /// `auto.create.topics.enable`, `num.partitions`, `socket.request.max.bytes`,
    /// `connections.max.idle.ms`, `max.connections`), else a topic config (`retention.ms`, ...)
    /// for the topics the broker creates. Repeatable.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    pub configs: Vec<String>,
    /// Serve the engine's metrics in Prometheus' text format over HTTP on this address
    /// (`docs/METRICS.md`).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
}

#[derive(Debug, Args)]
pub struct NodeArgs {
    /// This node's id (one of --peers).
    #[arg(long)]
    pub id: u64,
    /// The node's directory: `node.json`, the engine's data directory `log/`, the Raft state
    /// `raft/` (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// Address to listen on for peers and clients.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_address)]
    pub listen: String,
    /// Every voter, this node included: `ID=HOST:PORT`, comma-separated.
    #[arg(long, value_name = "ID=HOST:PORT,...", value_parser = parse_peers)]
    pub peers: std::collections::BTreeMap<u64, String>,
    /// Join a running cluster: start no group of its own, wait for `cluster add-node`.
    #[arg(long)]
    pub join: bool,
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Per partition: its leader, term, commit index and each node's log end offset.
    Status(ClusterStatusArgs),
    /// Make a node started with `seglog node --join` a voter of every group (a learner first,
    /// caught up, then a voter).
    AddNode(AddNodeArgs),
    /// Remove a node from every group.
    RemoveNode(RemoveNodeArgs),
}

#[derive(Debug, Args)]
pub struct AddNodeArgs {
    /// Nodes of the cluster (comma-separated HOST:PORT).
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]")]
    pub cluster: String,
    /// The new node's id.
    #[arg(long)]
    pub id: u64,
    /// The new node's address (its --listen).
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_address)]
    pub address: String,
}

#[derive(Debug, Args)]
pub struct RemoveNodeArgs {
    /// Nodes of the cluster (comma-separated HOST:PORT).
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]")]
    pub cluster: String,
    /// The id of the node to remove.
    #[arg(long)]
    pub id: u64,
}

#[derive(Debug, Args)]
pub struct ClusterStatusArgs {
    /// The nodes to ask (comma-separated HOST:PORT).
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]")]
    pub cluster: String,
    /// Format of the lines.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

/// `HOST:PORT` with a numeric port.
fn parse_address(address: &str) -> Result<String, String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("{address:?} is not HOST:PORT"))?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("{address:?} is not HOST:PORT"));
    }
    Ok(address.to_string())
}

/// `ID=HOST:PORT,...`, each id once.
fn parse_peers(list: &str) -> Result<std::collections::BTreeMap<u64, String>, String> {
    let mut peers = std::collections::BTreeMap::new();
    for entry in list.split(',') {
        let (id, address) = entry
            .split_once('=')
            .ok_or_else(|| format!("{entry:?} is not ID=HOST:PORT"))?;
        let id: u64 = id.parse().map_err(|_| format!("{id:?} is not a node id"))?;
        let address = parse_address(address)?;
        if peers.insert(id, address).is_some() {
            return Err(format!("node {id} is listed twice"));
        }
    }
    Ok(peers)
}

/// Output format of `produce` acknowledgements, `consume` records, `topics` listings, `dump`
/// and `verify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Readable lines (`name=value` fields; `topics` and `dump` use Kafka's `name: value`).
    Text,
    /// One JSON object per line (`verify`: one in all).
    Json,
}

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Data directory (created if missing).
    #[arg(long, required_unless_present = "cluster", conflicts_with = "cluster")]
    pub dir: Option<PathBuf>,
    /// Produce to a cluster of `seglog node`s instead (any of its nodes, comma-separated
    /// HOST:PORT): each record is acknowledged once committed on a majority.
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]", conflicts_with_all = ["durable", "compression_type"])]
    pub cluster: Option<String>,
    /// With --cluster: give up (exit 1) on a record not committed within this many milliseconds.
    #[arg(long, default_value_t = 30_000, requires = "cluster")]
    pub request_timeout_ms: u64,
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
    /// A value equal to this is sent as a null value, a tombstone in a compacted topic (Kafka's
    /// console producer's `null.marker`).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new(), conflicts_with = "cluster")]
    pub null_marker: Option<String>,
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
    #[arg(long, required_unless_present = "cluster", conflicts_with = "cluster")]
    pub dir: Option<PathBuf>,
    /// Read committed records from a cluster of `seglog node`s instead (any live node of the
    /// comma-separated HOST:PORT list; one address: that node's own copy).
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]", conflicts_with_all = ["group", "follow"])]
    pub cluster: Option<String>,
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
    /// Stop after printing this many records (also `--max-messages`, Kafka's console consumer's
    /// name).
    #[arg(long, alias = "max-messages")]
    pub max_records: Option<u64>,
    /// At the end of the log, wait for new records (appended by any process, including one that
    /// holds the directory open) and print them as they arrive, until interrupted or
    /// --max-records (like Kafka's console consumer). Not with --group: a group's process holds
    /// the directory, so no other process can append while it follows.
    #[arg(long, conflicts_with = "group")]
    pub follow: bool,
    /// Format of the record lines: `text` (every field as `name=value`) or `json` [default: the
    /// value alone, as kafka-console-consumer prints it, with what --property adds].
    #[arg(long, value_enum)]
    pub format: Option<OutputFormat>,
    /// Without --format, what kafka-console-consumer's `--property` prints: `print.key`,
    /// `print.value`, `print.offset`, `print.partition`, `print.timestamp`, `print.headers`
    /// (`=true`/`=false`) and `key.separator` (default a tab); repeatable.
    #[arg(long = "property", value_name = "KEY=VALUE", conflicts_with = "format")]
    pub properties: Vec<String>,
    /// With --format json: how keys and values (and header values) are written, so that any
    /// bytes survive: `utf8` (invalid UTF-8 replaced by U+FFFD), `base64` or `hex`.
    #[arg(long, value_enum, default_value_t = Encoding::Utf8)]
    pub encoding: Encoding,
}

/// How `consume --format json` writes record bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Encoding {
    /// As text; invalid UTF-8 is replaced by U+FFFD.
    Utf8,
    /// Standard base64 with padding.
    Base64,
    /// Lowercase hexadecimal, two digits per byte.
    Hex,
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
    /// Delete an empty group's committed offsets, like `kafka-consumer-groups --delete`.
    Delete(GroupDeleteArgs),
    /// Move a group's committed offsets on a topic, like `kafka-consumer-groups --reset-offsets`:
    /// each partition's new offset, clamped to its log start and end, is printed (`--dry-run`) or
    /// committed and printed (`--execute`).
    ResetOffsets(GroupResetArgs),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by"])))]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["dry_run", "execute"])))]
pub struct GroupResetArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Group whose offsets move.
    #[arg(long)]
    pub group: String,
    /// Topic whose partitions' offsets move (all of them).
    #[arg(long)]
    pub topic: String,
    /// To each partition's log start offset.
    #[arg(long)]
    pub to_earliest: bool,
    /// To each partition's log end offset.
    #[arg(long)]
    pub to_latest: bool,
    /// To this offset.
    #[arg(long, value_name = "OFFSET")]
    pub to_offset: Option<u64>,
    /// To the first offset whose record's timestamp is at or after this time (the log end where
    /// there is none): `YYYY-MM-DDTHH:mm:SS[.sss]`, UTC unless a zone (`Z`, `+hh:mm`) follows.
    #[arg(long, value_name = "DATETIME", value_parser = crate::reset_offsets::parse_datetime)]
    pub to_datetime: Option<i64>,
    /// By this many offsets from the committed one (negative: back).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub shift_by: Option<i64>,
    /// Print the new offsets without committing them.
    #[arg(long)]
    pub dry_run: bool,
    /// Commit the new offsets.
    #[arg(long)]
    pub execute: bool,
}

#[derive(Debug, Args)]
pub struct GroupDeleteArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Group to delete.
    #[arg(long)]
    pub group: String,
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
    /// `text`: Kafka's lines; `json`: JSON lines, streamed, one object per file, batch, record,
    /// index entry, note and problem, each with its `type` and `file`.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Data directory, or a single partition directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// `text`: one line per note and problem, then a summary; `json`: one JSON document (on one
    /// line) with `ok`, the totals, and per partition what was checked and each problem.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// Data directory (its lock is held while the command runs).
    #[arg(long)]
    pub dir: PathBuf,
    /// Topic of the partition.
    #[arg(long)]
    pub topic: String,
    /// The partition to truncate.
    #[arg(long)]
    pub partition: u32,
    /// Truncate without asking; needed when stdin is not a terminal.
    #[arg(long)]
    pub yes: bool,
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
    /// Add partitions to a topic (a topic never shrinks), or change its settings while its logs
    /// keep their data.
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
#[command(group(
    clap::ArgGroup::new("change")
        .required(true)
        .multiple(true)
        .args(["partitions", "configs", "delete_configs"])
))]
pub struct TopicAlterArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Topic to alter.
    #[arg(long)]
    pub topic: String,
    /// The new partition count, above the current one.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub partitions: Option<u32>,
    /// A setting to change, with Kafka's topic-config name, e.g. `retention.ms=86400000`
    /// (`kafka-configs --add-config`); repeatable.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    pub configs: Vec<String>,
    /// A setting to put back to its default (`kafka-configs --delete-config`); repeatable.
    #[arg(long = "delete-config", value_name = "KEY")]
    pub delete_configs: Vec<String>,
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
