//! `seglog consume`: prints one partition's records from an offset up to the log end offset seen
//! when reading started (with `--follow`, then every record appended after, as it arrives, until
//! interrupted or `--max-records`); or, with `--group`, joins a consumer group and prints the
//! records of every partition of the topic from the group's committed offsets to the log end,
//! committing after each poll's records are printed (at least once: a record printed but not yet
//! committed when the command is killed is printed again by the next run).
//!
//! `--partition` only reads: the data directory is read read-only ([`DataDirView`]), without its
//! lock, so it works while another process appends to it and on a read-only file system; the
//! active segment is read up to its last whole valid batch (a torn tail, or a batch being written,
//! is left for later), and nothing is recovered or written. Records are read at most
//! [`FETCH_MAX_BYTES`] at a time, and printed as each read arrives. `--follow` reads the
//! partition's files again every [`FOLLOW_POLL_INTERVAL`] at the log end. `--group` commits, so
//! it opens the directory through the engine, which takes its lock and recovers it if needed.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::thread;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use seglog::config::TimestampType;
use seglog::engine::Engine;
use seglog::format::Batch;
use seglog::group::{
    AutoOffsetReset, Consumer, ConsumerConfig, ConsumerRecord, GroupCoordinator, PollOptions,
};
use seglog::types::{Offset, TopicName, TopicPartition};
use serde::Serialize;

use crate::Outcome;
use crate::args::{ConsumeArgs, Encoding};
use crate::console_format::{ConsoleRecord, RecordPrinter};
use crate::dir_view::DataDirView;
use crate::engine_open::{open_existing, with_engine};
use crate::partition_view::PartitionView;
use crate::record_view::{
    encoded, json_line, printable, record_offset, record_timestamp, text_line,
};

/// Bytes read from the log at a time; a read always returns at least one whole batch.
const FETCH_MAX_BYTES: u64 = 1024 * 1024;
/// How long `--follow` waits at the log end before it reads the partition's files again.
const FOLLOW_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long one poll of a group member waits for records.
const GROUP_POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// The most records one poll of a group member returns (and one commit covers).
const GROUP_POLL_RECORDS_MAX: usize = 500;

pub fn run(args: &ConsumeArgs) -> anyhow::Result<Outcome> {
    let topic = TopicName::parse(&args.topic)
        .with_context(|| format!("invalid topic name {:?}", args.topic))?;
    if let Some(cluster) = &args.cluster {
        let partition = args
            .partition
            .context("--partition is required with --cluster")?;
        crate::cluster::consume(cluster, &topic, partition, args)?;
        return Ok(Outcome::Clean);
    }
    let dir = args
        .dir
        .as_deref()
        .context("--dir or --cluster is required")?;
    match (&args.group, args.partition) {
        (Some(group), _) => with_engine(open_existing(dir)?, |engine| {
            consume_group(engine, &topic, group, args)
        })?,
        (None, Some(partition)) => consume_partition(topic, partition, args)?,
        (None, None) => bail!("--partition or --group is required"),
    }
    Ok(Outcome::Clean)
}

/// The data directory (`run` checked that there is one).
fn dir_of(args: &ConsumeArgs) -> &std::path::Path {
    args.dir.as_deref().unwrap_or(std::path::Path::new("."))
}

fn partition_count(engine: &Engine, topic: &TopicName, args: &ConsumeArgs) -> anyhow::Result<u32> {
    engine
        .list_topics()
        .into_iter()
        .find(|(name, _)| name == topic)
        .map(|(_, metadata)| metadata.partition_count)
        .with_context(|| format!("topic {topic} does not exist in {}", dir_of(args).display()))
}

/// `consume --partition`: reads the data directory read-only, without its lock.
fn consume_partition(topic: TopicName, partition: u32, args: &ConsumeArgs) -> anyhow::Result<()> {
    let view = DataDirView::open(dir_of(args))?;
    let topic_partition = TopicPartition { topic, partition };
    let files = view.partition(&topic_partition)?;
    let mut reader = PartitionReader {
        view,
        topic_partition,
        files,
    };
    print_records(&mut reader, args)
        .with_context(|| format!("cannot consume {}", reader.topic_partition))
}

/// Reads one partition's files (again, with `--follow`, to see what was appended since).
struct PartitionReader {
    view: DataDirView,
    topic_partition: TopicPartition,
    files: PartitionView,
}

impl PartitionReader {
    /// `--offset`, which must lie between the log start and end offsets, or the log start offset.
    fn first_offset(&self, requested: Option<u64>) -> anyhow::Result<u64> {
        let start = self.files.log_start_offset;
        let end = self.files.log_end_offset;
        match requested {
            None => Ok(start),
            Some(offset) if (start..=end).contains(&offset) => Ok(offset),
            Some(offset) => bail!(
                "offset {offset} is out of range: valid offsets are {start} to {end} \
                 (log start offset {start}, log end offset {end})"
            ),
        }
    }

    fn read(&self, offset: u64) -> anyhow::Result<Vec<Batch>> {
        self.files.read_from(offset, FETCH_MAX_BYTES)
    }

    /// `--follow` at the log end: waits, reads the files again, and returns the offset to read
    /// next (past records that retention deleted meanwhile).
    fn wait_for_records(&mut self, next_offset: u64) -> anyhow::Result<u64> {
        thread::sleep(FOLLOW_POLL_INTERVAL);
        self.files = self.view.partition(&self.topic_partition)?;
        Ok(next_offset.max(self.files.log_start_offset))
    }
}

/// Prints from the first offset to the log end offset seen when reading started, or, with
/// `--follow`, on and on as records arrive; `--max-records` stops both.
fn print_records(reader: &mut PartitionReader, args: &ConsumeArgs) -> anyhow::Result<()> {
    let max_records = args.max_records.unwrap_or(u64::MAX);
    let printer = RecordPrinter::of(args)?;
    let partition = reader.topic_partition.partition;
    let mut next_offset = reader.first_offset(args.offset)?;
    let mut out = io::stdout().lock();
    let mut printed = 0u64;
    while printed < max_records {
        let batches = reader.read(next_offset)?;
        if batches.is_empty() {
            if !args.follow {
                return Ok(());
            }
            next_offset = reader.wait_for_records(next_offset)?;
            continue;
        }
        let fetched_from = next_offset;
        for batch in &batches {
            let remaining = max_records - printed;
            let to_print = BatchToPrint {
                batch,
                partition,
                from_offset: next_offset,
                max_records: remaining,
            };
            printed += print_batch(&mut out, &to_print, &printer)?;
            out.flush()?;
            let after = u64::try_from(batch.last_offset().saturating_add(1)).unwrap_or(0);
            next_offset = next_offset.max(after);
            if printed >= max_records {
                return Ok(());
            }
        }
        if next_offset == fetched_from {
            bail!("the log returned no batch past offset {next_offset}");
        }
    }
    Ok(())
}

/// A batch of a partition, and which of its records to print.
pub(crate) struct BatchToPrint<'a> {
    pub batch: &'a Batch,
    pub partition: u32,
    /// The first offset printed.
    pub from_offset: u64,
    /// The most records printed.
    pub max_records: u64,
}

/// Prints the batch's records at or after `from_offset`, at most `max_records`; returns how many
/// it printed.
pub(crate) fn print_batch(
    out: &mut impl Write,
    to_print: &BatchToPrint<'_>,
    printer: &RecordPrinter,
) -> anyhow::Result<u64> {
    let BatchToPrint {
        batch,
        partition,
        from_offset,
        max_records,
    } = *to_print;
    if batch.header().attributes.is_control() {
        // Transaction markers and other control records are not data: consumers never see them.
        return Ok(0);
    }
    let records = batch.records().with_context(|| {
        format!(
            "records of the batch at offset {} do not decode",
            batch.base_offset()
        )
    })?;
    let mut count = 0;
    for record in &records {
        let offset = record_offset(batch.header(), record);
        if offset < 0 || (offset as u64) < from_offset {
            continue;
        }
        if count >= max_records {
            break;
        }
        let line = match printer {
            RecordPrinter::Text => text_line(batch.header(), record),
            RecordPrinter::Json(encoding) => json_line(batch.header(), record, *encoding)?,
            RecordPrinter::Console(console) => console.line(&ConsoleRecord {
                partition,
                offset,
                timestamp: record_timestamp(batch.header(), record),
                log_append_time: batch.header().attributes.is_log_append_time(),
                key: record.key.as_ref(),
                value: record.value.as_ref(),
                headers: &record.headers,
            }),
        };
        writeln!(out, "{line}")?;
        count += 1;
    }
    Ok(count)
}

/// `consume --group`: a member of `group` subscribed to `topic`, printing until every partition's
/// position reaches the log end offset seen when it started (or `--max-records`).
fn consume_group(
    engine: &Engine,
    topic: &TopicName,
    group: &str,
    args: &ConsumeArgs,
) -> anyhow::Result<()> {
    partition_count(engine, topic, args)?;
    let log_end_offsets: BTreeMap<u32, Offset> = engine
        .describe_topic(topic.as_str())
        .with_context(|| format!("cannot describe topic {topic}"))?
        .partitions
        .iter()
        .map(|partition| (partition.partition, partition.log_end_offset))
        .collect();
    let coordinator =
        GroupCoordinator::open(engine).context("cannot open the group coordinator")?;
    let mut consumer = coordinator.consumer(group_config(group, &args.consumer_properties)?);
    consumer
        .subscribe(&[topic.as_str()])
        .with_context(|| format!("cannot join group {group}"))?;
    let printed = print_group_records(&mut consumer, &log_end_offsets, args);
    let closed = consumer
        .close()
        .with_context(|| format!("cannot leave group {group}"));
    printed.with_context(|| format!("cannot consume {topic} as group {group}"))?;
    closed
}

/// The tool's defaults (start at the log start offset, commit explicitly), then the properties.
fn group_config(group: &str, properties: &[String]) -> anyhow::Result<ConsumerConfig> {
    let mut config = ConsumerConfig::new(group);
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    config.enable_auto_commit = false;
    for property in properties {
        let (key, value) = property
            .split_once('=')
            .with_context(|| format!("--consumer-property {property:?} is not KEY=VALUE"))?;
        config
            .set(key.trim(), value.trim())
            .with_context(|| format!("invalid --consumer-property {property:?}"))?;
    }
    Ok(config)
}

fn print_group_records(
    consumer: &mut Consumer,
    log_end_offsets: &BTreeMap<u32, Offset>,
    args: &ConsumeArgs,
) -> anyhow::Result<()> {
    let max_records = args.max_records.unwrap_or(u64::MAX);
    let printer = RecordPrinter::of(args)?;
    let mut printed = 0u64;
    let mut out = io::stdout().lock();
    // Every poll either prints records (moving positions towards the log end offsets, which do
    // not move: the engine's lock keeps other writers out) or is one of the polls that take the
    // assignment; so the loop reaches the end.
    while printed < max_records && !caught_up(consumer, log_end_offsets)? {
        let remaining = usize::try_from(max_records - printed).unwrap_or(usize::MAX);
        let options = PollOptions {
            max_records: remaining.min(GROUP_POLL_RECORDS_MAX),
            max_bytes: FETCH_MAX_BYTES,
            timeout: GROUP_POLL_TIMEOUT,
        };
        let records = consumer.poll_with(options)?;
        for record in &records {
            let line = match &printer {
                RecordPrinter::Text => group_text_line(record),
                RecordPrinter::Json(encoding) => {
                    serde_json::to_string(&JsonGroupRecord::of(record, *encoding))?
                }
                RecordPrinter::Console(console) => console.line(&ConsoleRecord {
                    partition: record.partition,
                    offset: i64::try_from(record.offset.0).unwrap_or(i64::MAX),
                    timestamp: record.timestamp.0,
                    log_append_time: record.timestamp_type == TimestampType::LogAppendTime,
                    key: record.key.as_ref(),
                    value: record.value.as_ref(),
                    headers: &record.headers,
                }),
            };
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        if !records.is_empty() {
            consumer.commit_sync()?;
            printed += records.len() as u64;
        }
    }
    Ok(())
}

/// Whether the member owns every partition and has read each to its log end offset.
fn caught_up(
    consumer: &mut Consumer,
    log_end_offsets: &BTreeMap<u32, Offset>,
) -> anyhow::Result<bool> {
    let assignment = consumer.assignment();
    if assignment.len() < log_end_offsets.len() {
        return Ok(false);
    }
    for tp in &assignment {
        let end = log_end_offsets
            .get(&tp.partition)
            .copied()
            .unwrap_or(Offset(0));
        if consumer.position(tp)? < end {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `partition=1 offset=5 timestamp=.. key=k value=v headers=[h=x]`: the partitionless line with
/// the partition first.
fn group_text_line(record: &ConsumerRecord) -> String {
    let mut line = format!(
        "partition={} offset={} timestamp={} key={} value={} headers=[",
        record.partition,
        record.offset,
        record.timestamp,
        nullable_text(record.key.as_ref()),
        nullable_text(record.value.as_ref()),
    );
    for (index, header) in record.headers.iter().enumerate() {
        let separator = if index == 0 { "" } else { "," };
        let value = nullable_text(header.value.as_ref());
        // Writing to a String cannot fail.
        let _ = write!(line, "{separator}{}={value}", header.key);
    }
    line.push(']');
    line
}

fn nullable_text(bytes: Option<&Bytes>) -> Cow<'_, str> {
    bytes.map_or(Cow::Borrowed("null"), printable)
}

/// One JSON header of a group record line.
#[derive(Debug, Serialize)]
struct JsonGroupHeader<'a> {
    key: &'a str,
    value: Option<Cow<'a, str>>,
}

/// One JSON record line of `consume --group`: the partitionless line with the partition first.
#[derive(Debug, Serialize)]
struct JsonGroupRecord<'a> {
    partition: u32,
    offset: u64,
    timestamp: i64,
    key: Option<Cow<'a, str>>,
    value: Option<Cow<'a, str>>,
    headers: Vec<JsonGroupHeader<'a>>,
}

impl<'a> JsonGroupRecord<'a> {
    fn of(record: &'a ConsumerRecord, encoding: Encoding) -> JsonGroupRecord<'a> {
        let encode = |bytes| encoded(bytes, encoding);
        JsonGroupRecord {
            partition: record.partition,
            offset: record.offset.0,
            timestamp: record.timestamp.0,
            key: record.key.as_ref().map(encode),
            value: record.value.as_ref().map(encode),
            headers: record
                .headers
                .iter()
                .map(|header| JsonGroupHeader {
                    key: &header.key,
                    value: header.value.as_ref().map(encode),
                })
                .collect(),
        }
    }
}
