//! Command-line arguments of every subcommand (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "seglog",
    version,
    about = "Produce to, consume from, dump and verify seglog data directories (Kafka's partition storage format)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Append records read from stdin, one per line, and print each one's partition and offset.
    Produce(ProduceArgs),
    /// Print the records of one partition, from an offset to the end of the log.
    Consume(ConsumeArgs),
    /// Print .log, .index and .timeindex files like Kafka's kafka.tools.DumpLogSegments.
    Dump(DumpArgs),
    /// Check every batch and index entry of a data directory (or one partition directory), read-only.
    Verify(VerifyArgs),
}

/// Output format of `produce` acknowledgements and `consume` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// One readable `name=value` line per item.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Data directory (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// Topic to append to; created if it does not exist.
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
    /// Flush (fdatasync) the partition before acknowledging each record.
    #[arg(long)]
    pub durable: bool,
    /// A log setting with Kafka's topic-config name, e.g. `segment.bytes=1048576`; repeatable.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    pub configs: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Topic to read.
    #[arg(long)]
    pub topic: String,
    /// Partition to read.
    #[arg(long)]
    pub partition: u32,
    /// First offset to print (default: the log start offset).
    #[arg(long, conflicts_with = "from_beginning")]
    pub offset: Option<u64>,
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
