//! `seglog produce`: appends lines read from stdin as records and acknowledges each one with its
//! partition and offset, in input order, as soon as it is appended.
//!
//! Streaming: a thread reads stdin line by line; the main loop waits for one line, then takes
//! every further line already read (without waiting) and appends them together, one batch per
//! partition (split at Kafka's default `batch.size` of 16 KiB). A line typed alone is therefore
//! appended and acknowledged at once, while a file piped in is appended in batches.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufRead, Write};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver};
use std::thread;

use anyhow::Context;
use seglog::config::LogConfig;
use seglog::format::{BatchBuilder, NewRecord};
use seglog::io::pio::PositionedIo;
use seglog::log_dir::LogDir;
use seglog::partitioner::{RoundRobin, partition_for_key};
use seglog::types::{TimestampMs, TopicName};
use serde::Serialize;

use crate::Outcome;
use crate::args::{OutputFormat, ProduceArgs};

/// Kafka's default producer `batch.size`: a coalesced batch closes before growing past this.
const BATCH_TARGET_BYTES: u64 = 16 * 1024;
/// Lines read from stdin but not yet appended, at most.
const LINE_QUEUE_LINES: usize = 4096;
/// Limits on the lines appended together.
const CHUNK_MAX_LINES: usize = 1000;
const CHUNK_MAX_BYTES: usize = 1024 * 1024;

pub fn run(args: &ProduceArgs) -> anyhow::Result<Outcome> {
    let topic = TopicName::parse(&args.topic)
        .with_context(|| format!("invalid topic name {:?}", args.topic))?;
    let config = log_config(&args.configs)?;
    let batch_limit_bytes = BATCH_TARGET_BYTES.min(config.max_message_bytes);
    let mut log_dir = LogDir::open(&args.dir, Arc::new(PositionedIo), config)
        .with_context(|| format!("cannot open data directory {}", args.dir.display()))?;
    let appended = produce_into(&mut log_dir, topic, args, batch_limit_bytes);
    // Close (clean shutdown) even after an error, so the next open need not recover; the first
    // error is the one reported.
    let closed = log_dir.close().context("cannot close the data directory");
    appended.and(closed)?;
    Ok(Outcome::Clean)
}

/// Creates the topic if needed, then appends stdin to it.
fn produce_into(
    log_dir: &mut LogDir,
    topic: TopicName,
    args: &ProduceArgs,
    batch_limit_bytes: u64,
) -> anyhow::Result<()> {
    let partition_count = ensure_topic(log_dir, &topic, args.partitions)?;
    let mut producer = Producer {
        log_dir,
        topic,
        router: Router {
            partition_count,
            round_robin: RoundRobin::default(),
        },
        key_separator: args.key_separator.as_deref().map(str::as_bytes),
        batch_limit_bytes,
        durable: args.durable,
    };
    producer.stream_stdin(args.format)
}

/// The default log configuration with each `KEY=VALUE` applied (Kafka's topic-config names).
fn log_config(settings: &[String]) -> anyhow::Result<LogConfig> {
    let mut config = LogConfig::default();
    for setting in settings {
        let (key, value) = setting
            .split_once('=')
            .with_context(|| format!("--config {setting:?} is not KEY=VALUE"))?;
        config.set(key.trim(), value.trim())?;
    }
    Ok(config)
}

/// Creates the topic if it has no partition on disk; returns its partition count.
fn ensure_topic(
    log_dir: &mut LogDir,
    topic: &TopicName,
    requested: Option<u32>,
) -> anyhow::Result<u32> {
    let existing = log_dir.partition_count(topic)?;
    if existing > 0 {
        if let Some(requested) = requested.filter(|requested| *requested != existing) {
            writeln!(
                io::stderr(),
                "seglog: topic {topic} exists with {existing} partitions; --partitions {requested} is ignored"
            )?;
        }
        return Ok(existing);
    }
    let partition_count = requested.unwrap_or(1);
    log_dir
        .create_topic(topic, partition_count)
        .with_context(|| format!("cannot create topic {topic}"))?;
    Ok(partition_count)
}

/// Reads stdin on its own thread, one line (without its `\n` or `\r\n`) per message.
fn spawn_line_reader() -> anyhow::Result<Receiver<io::Result<Vec<u8>>>> {
    let (sender, receiver) = mpsc::sync_channel(LINE_QUEUE_LINES);
    thread::Builder::new()
        .name("stdin-lines".to_owned())
        .spawn(move || {
            let mut input = io::stdin().lock();
            loop {
                let mut line = Vec::new();
                let message = match input.read_until(b'\n', &mut line) {
                    Ok(0) => return,
                    Ok(_) => Ok(strip_line_end(line)),
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                    Err(error) => Err(error),
                };
                let failed = message.is_err();
                if sender.send(message).is_err() || failed {
                    return;
                }
            }
        })
        .context("cannot start the stdin reader thread")?;
    Ok(receiver)
}

fn strip_line_end(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    line
}

/// Waits for one line, then takes the lines already read, up to the chunk limits. `None` at the
/// end of the input.
fn next_chunk(lines: &Receiver<io::Result<Vec<u8>>>) -> anyhow::Result<Option<Vec<Vec<u8>>>> {
    let Ok(first) = lines.recv() else {
        return Ok(None);
    };
    let first = first.context("cannot read stdin")?;
    let mut chunk_bytes = first.len();
    let mut chunk = vec![first];
    while chunk.len() < CHUNK_MAX_LINES && chunk_bytes < CHUNK_MAX_BYTES {
        let Ok(line) = lines.try_recv() else { break };
        let line = line.context("cannot read stdin")?;
        chunk_bytes += line.len();
        chunk.push(line);
    }
    Ok(Some(chunk))
}

/// Kafka's partitioner: murmur2 of the key, round-robin for records without one.
struct Router {
    partition_count: u32,
    round_robin: RoundRobin,
}

impl Router {
    fn partition_for(&mut self, key: Option<&[u8]>) -> anyhow::Result<u32> {
        let partition = match key {
            Some(key) => partition_for_key(key, self.partition_count),
            None => self.round_robin.next_partition(self.partition_count),
        };
        partition.context("the topic has no partitions")
    }
}

/// Where a record of a chunk went: its batch, and its index in that batch.
#[derive(Debug, Clone, Copy)]
struct Placement {
    batch: usize,
    index_in_batch: u64,
}

/// A batch being filled for one partition.
struct PendingBatch {
    partition: u32,
    builder: BatchBuilder,
}

/// One acknowledgement line.
#[derive(Debug, Clone, Copy, Serialize)]
struct Ack {
    partition: u32,
    offset: u64,
}

struct Producer<'a> {
    log_dir: &'a mut LogDir,
    topic: TopicName,
    router: Router,
    key_separator: Option<&'a [u8]>,
    batch_limit_bytes: u64,
    durable: bool,
}

impl Producer<'_> {
    /// Appends stdin's lines until its end, printing acknowledgements as it goes.
    fn stream_stdin(&mut self, format: OutputFormat) -> anyhow::Result<()> {
        let lines = spawn_line_reader()?;
        let mut out = io::stdout().lock();
        while let Some(chunk) = next_chunk(&lines)? {
            let acks = self.append_chunk(&chunk)?;
            write_acks(&mut out, &acks, format)?;
        }
        Ok(())
    }

    /// Appends the chunk's lines and returns their acknowledgements, in input order.
    fn append_chunk(&mut self, chunk: &[Vec<u8>]) -> anyhow::Result<Vec<Ack>> {
        let timestamp_ms = TimestampMs::now().0;
        let mut batches: Vec<PendingBatch> = Vec::new();
        let mut filling: BTreeMap<u32, usize> = BTreeMap::new();
        let mut placements = Vec::with_capacity(chunk.len());
        for line in chunk {
            let (key, value) = split_line(line, self.key_separator);
            let partition = self.router.partition_for(key)?;
            let record = NewRecord {
                timestamp_ms,
                key,
                value: Some(value),
                headers: &[],
            };
            let batch = self.batch_for(&mut batches, &mut filling, partition, &record);
            let builder = &mut batches[batch].builder;
            placements.push(Placement {
                batch,
                index_in_batch: u64::try_from(builder.records_count())?,
            });
            builder.push(&record);
        }
        let first_offsets = self.append_batches(batches)?;
        Ok(placements
            .iter()
            .map(|placement| {
                let (partition, first_offset) = first_offsets[placement.batch];
                Ack {
                    partition,
                    offset: first_offset + placement.index_in_batch,
                }
            })
            .collect())
    }

    /// The batch of `partition` that `record` goes into: the one being filled, unless the record
    /// would grow it past the batch limit; then a new one.
    fn batch_for(
        &self,
        batches: &mut Vec<PendingBatch>,
        filling: &mut BTreeMap<u32, usize>,
        partition: u32,
        record: &NewRecord<'_>,
    ) -> usize {
        if let Some(&index) = filling.get(&partition)
            && batches[index].builder.size_bytes_with(record) as u64 <= self.batch_limit_bytes
        {
            return index;
        }
        batches.push(PendingBatch {
            partition,
            builder: BatchBuilder::new(0),
        });
        filling.insert(partition, batches.len() - 1);
        batches.len() - 1
    }

    /// Appends each batch on its own (one batch per append keeps every index entry on a batch
    /// boundary), then flushes the partitions written when `--durable`. Returns each batch's
    /// partition and first offset.
    fn append_batches(&mut self, batches: Vec<PendingBatch>) -> anyhow::Result<Vec<(u32, u64)>> {
        let mut first_offsets = Vec::with_capacity(batches.len());
        let mut written = BTreeSet::new();
        for batch in batches {
            let tp = format!("{}-{}", self.topic, batch.partition);
            let bytes = batch
                .builder
                .build()
                .context("internal error: an empty batch")?;
            let log = self.log_dir.partition(&self.topic, batch.partition)?;
            let appended = log
                .append(bytes, TimestampMs::now())
                .with_context(|| format!("cannot append to {tp}"))?;
            first_offsets.push((batch.partition, appended.first_offset.0));
            written.insert(batch.partition);
        }
        if self.durable {
            for partition in written {
                let log = self.log_dir.partition(&self.topic, partition)?;
                log.flush()
                    .with_context(|| format!("cannot flush {}-{partition}", self.topic))?;
            }
        }
        Ok(first_offsets)
    }
}

/// `key<separator>value` when the separator is given and present, else a null key.
fn split_line<'a>(line: &'a [u8], separator: Option<&[u8]>) -> (Option<&'a [u8]>, &'a [u8]) {
    let found = separator.and_then(|separator| {
        line.windows(separator.len())
            .position(|window| window == separator)
            .map(|at| (&line[..at], &line[at + separator.len()..]))
    });
    match found {
        Some((key, value)) => (Some(key), value),
        None => (None, line),
    }
}

fn write_acks(out: &mut impl Write, acks: &[Ack], format: OutputFormat) -> anyhow::Result<()> {
    for ack in acks {
        match format {
            OutputFormat::Text => {
                writeln!(out, "partition={} offset={}", ack.partition, ack.offset)?
            }
            OutputFormat::Json => writeln!(out, "{}", serde_json::to_string(ack)?)?,
        }
        out.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_splits_at_the_first_separator_or_has_a_null_key() {
        assert_eq!(
            split_line(b"k:v:w", Some(b":")),
            (Some(&b"k"[..]), &b"v:w"[..])
        );
        assert_eq!(
            split_line(b"k=>v", Some(b"=>")),
            (Some(&b"k"[..]), &b"v"[..])
        );
        assert_eq!(split_line(b":v", Some(b":")), (Some(&b""[..]), &b"v"[..]));
        assert_eq!(
            split_line(b"no separator", Some(b":")),
            (None, &b"no separator"[..])
        );
        assert_eq!(split_line(b"k:v", None), (None, &b"k:v"[..]));
    }

    #[test]
    fn line_ends_are_stripped_but_inner_carriage_returns_kept() {
        assert_eq!(strip_line_end(b"a\r\n".to_vec()), b"a");
        assert_eq!(strip_line_end(b"a\n".to_vec()), b"a");
        assert_eq!(strip_line_end(b"a\rb".to_vec()), b"a\rb");
        assert_eq!(strip_line_end(b"\n".to_vec()), b"");
    }
}
