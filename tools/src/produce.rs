//! `seglog produce`: appends lines read from stdin as records through the library's producer
//! (`seglog::producer`) and acknowledges each one with its partition and offset, in input order.
//!
//! Streaming: a thread reads stdin line by line; the main thread sends each line as a record
//! (`Producer::send`) and queues its future; an acknowledgement thread waits for the futures in
//! input order, prints each acknowledgement, and flushes its output whenever it has caught up
//! with the input. The producer batches the records per partition (Kafka's `batch.size`,
//! default 16 KiB, and `linger.ms`, default 5 ms) and keeps many appends in flight, so a line
//! typed alone is acknowledged about `linger.ms` later, while a file piped in is appended in full
//! batches. `--compression-type` compresses each batch (default: the topic's `compression.type`).
//!
//! Routing: a keyed record goes to Kafka's murmur2 partition; unkeyed lines go round-robin, one
//! line per partition in turn ([`KeyHashOrRoundRobin`], a custom partitioner), rather than the
//! producer's built-in sticky choice, so that lines spread evenly whatever the batch sizes.
//!
//! With `--durable` the producer's acks are `Durability::Durable`: the engine answers each batch
//! only after an `fdatasync` that covers it, and the appends in flight together share their
//! syncs (group commit) instead of one flush per record. Memory is bounded by the producer's
//! `buffer.memory` ([`BUFFER_MEMORY_BYTES`]) and the queue of unacknowledged futures
//! ([`ACKS_QUEUED_MAX`]); the main thread waits when either is full. If an append fails, the
//! records after it may have been written but are never acknowledged.

use std::io::{self, BufRead, BufWriter, Write};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

use anyhow::{Context, anyhow};
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, TopicMetadata};
use seglog::producer::{Partitioner, ProducerConfig, ProducerError, ProducerRecord, SendFuture};
use seglog::producer::{RoundRobin, partition_for_key};
use seglog::types::TopicName;
use serde::Serialize;

use crate::Outcome;
use crate::args::{OutputFormat, ProduceArgs};
use crate::engine_open::{open_engine, refuse_internal_topic, with_engine};
use crate::topic_config::parse_configs;

/// Lines read from stdin but not yet sent, at most.
const LINE_QUEUE_LINES: usize = 4096;
/// Records sent but not yet acknowledged, at most (a future each).
const ACKS_QUEUED_MAX: usize = 64 * 1024;
/// The producer's `buffer.memory`: bytes of batches open or in flight, at most (below the
/// engine's default `inflight_bytes_max` of 256 MiB).
const BUFFER_MEMORY_BYTES: usize = 64 * 1024 * 1024;
/// Appends in flight at most (below the engine's per-shard request queue of 4096, so an append is
/// not refused as `QueueFull`; the producer would retry it anyway).
const APPENDS_INFLIGHT_MAX: usize = 1024;

pub fn run(args: &ProduceArgs) -> anyhow::Result<Outcome> {
    let topic = TopicName::parse(&args.topic)
        .with_context(|| format!("invalid topic name {:?}", args.topic))?;
    refuse_internal_topic(&topic, "produce to")?;
    if let Some(cluster) = &args.cluster {
        return crate::cluster::produce(cluster, &topic, args);
    }
    let dir = args
        .dir
        .as_deref()
        .context("--dir or --cluster is required")?;
    let config = parse_configs(&args.configs)?;
    with_engine(open_engine(dir)?, |engine| {
        let metadata = ensure_topic(engine, &topic, args, config)?;
        let durability = if args.durable {
            Durability::Durable
        } else {
            Durability::Written
        };
        let settings = Settings {
            key_separator: args.key_separator.as_deref().map(str::as_bytes),
            null_marker: args.null_marker.as_deref().map(str::as_bytes),
            producer: producer_config(durability)
                .with_batch_size_bytes(args.batch_size as usize)
                .with_linger_ms(args.linger_ms)
                .with_compression(args.compression_type.unwrap_or(metadata.config.compression)),
            format: args.format,
        };
        let lines = spawn_line_reader()?;
        let mut out = BufWriter::new(io::stdout());
        produce(engine, &topic, &settings, &lines, &mut out)
    })?;
    Ok(Outcome::Clean)
}

/// The producer settings every run shares: the bounds above, routing, acks.
fn producer_config(acks: Durability) -> ProducerConfig {
    ProducerConfig::default()
        .with_buffer_memory_bytes(BUFFER_MEMORY_BYTES)
        // The acknowledgement thread always frees memory: wait for it as long as it takes.
        .with_block_ms_max(u64::MAX)
        .with_appends_inflight_max(APPENDS_INFLIGHT_MAX)
        .with_acks(acks)
        .with_partitioner(Some(Arc::new(KeyHashOrRoundRobin::default())))
}

/// Returns the topic's metadata, creating the topic (with `--partitions`, default 1, and
/// `--config`) if the engine does not know it. An existing topic keeps its partition count and
/// settings; differing options are reported on stderr and ignored.
fn ensure_topic(
    engine: &Engine,
    topic: &TopicName,
    args: &ProduceArgs,
    config: LogConfig,
) -> anyhow::Result<TopicMetadata> {
    let existing = engine
        .list_topics()
        .into_iter()
        .find(|(name, _)| name == topic);
    if let Some((_, metadata)) = existing {
        let mut stderr = io::stderr();
        if let Some(requested) = args
            .partitions
            .filter(|requested| *requested != metadata.partition_count)
        {
            writeln!(
                stderr,
                "seglog: topic {topic} exists with {} partitions; --partitions {requested} is ignored",
                metadata.partition_count
            )?;
        }
        if !args.configs.is_empty() && config != metadata.config {
            writeln!(
                stderr,
                "seglog: topic {topic} exists with its own settings; --config is ignored \
                 (see `seglog topics describe`)"
            )?;
        }
        return Ok(metadata);
    }
    let partition_count = args.partitions.unwrap_or(1);
    engine
        .create_topic(topic.as_str(), partition_count, config.clone())
        .with_context(|| format!("cannot create topic {topic}"))?;
    Ok(TopicMetadata {
        partition_count,
        config,
    })
}

/// How lines become records and acknowledgements.
#[derive(Debug, Clone)]
struct Settings<'a> {
    key_separator: Option<&'a [u8]>,
    /// A value equal to it is sent as a null value.
    null_marker: Option<&'a [u8]>,
    producer: ProducerConfig,
    format: OutputFormat,
}

/// Kafka's murmur2 partition for a keyed record; round-robin for the others.
#[derive(Debug, Default)]
struct KeyHashOrRoundRobin {
    round_robin: Mutex<RoundRobin>,
}

impl Partitioner for KeyHashOrRoundRobin {
    fn partition(&self, _topic: &TopicName, key: Option<&[u8]>, partition_count: u32) -> u32 {
        let partition = match key {
            Some(key) => partition_for_key(key, partition_count),
            None => self
                .round_robin
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .next_partition(partition_count),
        };
        // The producer never asks about a topic without partitions.
        partition.unwrap_or(0)
    }
}

/// Sends every line `lines` delivers until it ends, writing each record's acknowledgement to
/// `out` in input order; returns the number of records acknowledged.
fn produce<W: Write + Send>(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings<'_>,
    lines: &Receiver<io::Result<Vec<u8>>>,
    out: &mut W,
) -> anyhow::Result<u64> {
    let producer = engine
        .producer(settings.producer.clone())
        .context("cannot start the producer")?;
    let format = settings.format;
    thread::scope(|scope| {
        let (sender, futures) = mpsc::sync_channel(ACKS_QUEUED_MAX);
        let acknowledger = thread::Builder::new()
            .name("produce-acks".to_owned())
            .spawn_scoped(scope, move || acknowledge(&futures, topic, format, out))
            .context("cannot start the acknowledgement thread")?;
        let sent = send_all(&producer, topic, settings, lines, &sender);
        drop(sender);
        // Sends every batch still open and waits for the answers the acknowledger waits for.
        let closed = producer.close().context("cannot close the producer");
        let acknowledged = acknowledger
            .join()
            .map_err(|_| anyhow!("the acknowledgement thread panicked"))?;
        // An append error comes first: it is the earliest failure in input order.
        let count = acknowledged?;
        sent?;
        closed?;
        Ok(count)
    })
}

/// Sends each line as a record and queues its future for the acknowledgement thread, until the
/// input ends or the acknowledgement thread stops.
fn send_all(
    producer: &seglog::producer::Producer,
    topic: &TopicName,
    settings: &Settings<'_>,
    lines: &Receiver<io::Result<Vec<u8>>>,
    futures: &SyncSender<SendFuture>,
) -> anyhow::Result<()> {
    for line in lines {
        let line = line.context("cannot read stdin")?;
        let (key, value) = split_line(&line, settings.key_separator);
        let value = Some(value).filter(|value| Some(*value) != settings.null_marker);
        let future = producer
            .send(&ProducerRecord::new(topic, key, value))
            .with_context(|| format!("cannot send a record to {topic}"))?;
        if futures.send(future).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// Reads stdin on its own thread, one line (without its `\n` or `\r\n`) per message.
pub(crate) fn spawn_line_reader() -> anyhow::Result<Receiver<io::Result<Vec<u8>>>> {
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

/// One acknowledgement line.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Ack {
    pub partition: u32,
    pub offset: u64,
}

/// The acknowledgement thread: waits for each record's future in input order and prints its
/// acknowledgement, flushing whenever no further future is queued. Returns the records
/// acknowledged.
fn acknowledge<W: Write>(
    futures: &Receiver<SendFuture>,
    topic: &TopicName,
    format: OutputFormat,
    out: &mut W,
) -> anyhow::Result<u64> {
    let mut acknowledged = 0u64;
    loop {
        let future = match futures.try_recv() {
            Ok(future) => future,
            Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => {
                out.flush()?;
                match futures.recv() {
                    Ok(future) => future,
                    Err(_) => break,
                }
            }
        };
        let partition = future.partition();
        let metadata = future
            .wait()
            .map_err(|error| append_failure(topic, partition, error))?;
        let ack = Ack {
            partition: metadata.partition,
            offset: metadata.offset.0,
        };
        write_ack(out, ack, format)?;
        acknowledged += 1;
    }
    out.flush()?;
    Ok(acknowledged)
}

/// `cannot append to <topic>-<partition>: <the engine's reason>`.
fn append_failure(topic: &TopicName, partition: u32, error: ProducerError) -> anyhow::Error {
    let context = format!("cannot append to {topic}-{partition}");
    match error {
        ProducerError::Append { source, .. } => anyhow::Error::new(source).context(context),
        other => anyhow::Error::new(other).context(context),
    }
}

/// `key<separator>value` when the separator is given and present, else a null key.
pub(crate) fn split_line<'a>(
    line: &'a [u8],
    separator: Option<&[u8]>,
) -> (Option<&'a [u8]>, &'a [u8]) {
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

pub(crate) fn write_ack(
    out: &mut impl Write,
    ack: Ack,
    format: OutputFormat,
) -> anyhow::Result<()> {
    match format {
        OutputFormat::Text => writeln!(out, "partition={} offset={}", ack.partition, ack.offset)?,
        OutputFormat::Json => writeln!(out, "{}", serde_json::to_string(&ack)?)?,
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

/// The pipeline in-process, on an engine whose syncs can be counted: what `--durable` promises
/// (each acknowledgement after a sync that covers it, syncs shared by the appends in flight) and
/// what it does not without the flag.
#[cfg(test)]
mod engine_tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use seglog::engine::EngineConfig;
    use seglog::io::hooked::{HookedStorage, StorageHooks, StorageOp};
    use seglog::io::pio::PositionedIo;

    use super::*;

    /// Storage hooks under which group-commit syncs (`sync_data_many`) are counted and take 2 ms, as on
    /// a disk, so that appends queue up behind a sync in progress.
    #[derive(Debug, Default)]
    struct SlowSyncs {
        group_syncs: AtomicUsize,
    }

    impl StorageHooks for SlowSyncs {
        fn before(&self, op: StorageOp, _path: &Path) -> io::Result<()> {
            if op == StorageOp::SyncGroup {
                self.group_syncs.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(2));
            }
            Ok(())
        }
    }

    /// What one in-process `produce` run left behind.
    struct Run {
        acks: Vec<String>,
        appends: usize,
        group_syncs: usize,
        /// Each partition's (log end offset, durable offset) before the engine is closed.
        offsets_before_close: Vec<(u64, u64)>,
    }

    /// Produces `lines` (8 KiB values: one record per 16 KiB batch, so one append per record) to a
    /// fresh `partition_count`-partition topic and reports, before closing the engine, what the
    /// partitions hold.
    fn produce_in_process(
        record_count: usize,
        partition_count: u32,
        durability: Durability,
    ) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let slow = Arc::new(SlowSyncs::default());
        let storage = Arc::new(HookedStorage::new(Arc::new(PositionedIo), slow.clone()));
        let config = EngineConfig::default()
            .with_shard_count(1)
            .with_pin_shards(false);
        let engine = Engine::open_with_storage(dir.path(), config, storage).unwrap();
        let topic = engine
            .create_topic("t", partition_count, LogConfig::default())
            .unwrap();
        let (sender, lines) = mpsc::channel();
        let value = "v".repeat(8 * 1024);
        for index in 0..record_count {
            sender
                .send(Ok(format!("{index}:{value}").into_bytes()))
                .unwrap();
        }
        drop(sender);
        let settings = Settings {
            key_separator: Some(b":"),
            null_marker: None,
            producer: producer_config(durability),
            format: OutputFormat::Text,
        };
        let mut out = Vec::new();
        let acknowledged = produce(&engine, &topic, &settings, &lines, &mut out).unwrap();
        assert_eq!(acknowledged, record_count as u64);
        let group_syncs = slow.group_syncs.load(Ordering::SeqCst);
        let description = engine.describe_topic("t").unwrap();
        let offsets_before_close = description
            .partitions
            .iter()
            .map(|partition| (partition.log_end_offset.0, partition.durable_offset.0))
            .collect();
        engine.close().unwrap();
        Run {
            acks: String::from_utf8(out)
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect(),
            appends: record_count,
            group_syncs,
            offsets_before_close,
        }
    }

    /// The acknowledgements `produce` must print for keys `0..record_count`: murmur2 partitions,
    /// dense offsets, input order.
    fn expected_acks(record_count: usize, partition_count: u32) -> Vec<String> {
        let mut next_offset = vec![0u64; partition_count as usize];
        (0..record_count)
            .map(|index| {
                let key = index.to_string();
                let partition = partition_for_key(key.as_bytes(), partition_count).unwrap();
                let offset = next_offset[partition as usize];
                next_offset[partition as usize] += 1;
                format!("partition={partition} offset={offset}")
            })
            .collect()
    }

    #[test]
    fn durable_appends_in_flight_share_their_syncs_and_are_durable_before_close() {
        let run = produce_in_process(400, 1, Durability::Durable);
        assert_eq!(run.acks, expected_acks(400, 1));
        assert_eq!(
            run.offsets_before_close,
            [(400, 400)],
            "every acknowledged record is durable without a flush or close"
        );
        assert!(
            run.group_syncs * 4 <= run.appends,
            "{} syncs for {} durable appends: appends in flight share syncs",
            run.group_syncs,
            run.appends
        );
    }

    #[test]
    fn durable_acknowledgements_in_input_order_across_partitions() {
        let run = produce_in_process(300, 3, Durability::Durable);
        assert_eq!(run.acks, expected_acks(300, 3));
        for (log_end_offset, durable_offset) in &run.offsets_before_close {
            assert!(*log_end_offset > 0);
            assert_eq!(durable_offset, log_end_offset);
        }
    }

    #[test]
    fn written_acknowledgements_do_not_wait_for_a_sync() {
        let run = produce_in_process(100, 1, Durability::Written);
        assert_eq!(run.acks, expected_acks(100, 1));
        assert_eq!(run.group_syncs, 0);
        assert_eq!(
            run.offsets_before_close,
            [(100, 0)],
            "without --durable nothing is synced before close (flush policy: never)"
        );
    }

    #[test]
    fn compression_type_writes_every_batch_with_that_codec_and_acknowledges_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig::default()
            .with_shard_count(1)
            .with_pin_shards(false);
        let engine = Engine::open(dir.path(), config).unwrap();
        let topic = engine.create_topic("z", 2, LogConfig::default()).unwrap();
        let (sender, lines) = mpsc::channel();
        for index in 0..500 {
            let line = format!("{index}:{}", "compressible ".repeat(10));
            sender.send(Ok(line.into_bytes())).unwrap();
        }
        drop(sender);
        let settings = Settings {
            key_separator: Some(b":"),
            null_marker: None,
            producer: producer_config(Durability::Written)
                .with_compression(seglog::format::Compression::Zstd),
            format: OutputFormat::Text,
        };
        let mut out = Vec::new();
        assert_eq!(
            produce(&engine, &topic, &settings, &lines, &mut out).unwrap(),
            500
        );
        let acks: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(acks, expected_acks(500, 2));
        for partition in 0..2 {
            let data = engine
                .fetch(
                    &topic,
                    partition,
                    seglog::types::Offset(0),
                    seglog::engine::FetchOptions::default(),
                )
                .wait()
                .unwrap();
            let batches: Vec<_> = seglog::format::batch::BatchIter::new(data.records, u64::MAX)
                .map(Result::unwrap)
                .collect();
            assert!(!batches.is_empty());
            for batch in batches {
                let codec = batch.header().attributes.compression().unwrap();
                assert_eq!(codec, seglog::format::Compression::Zstd);
                batch.validate_records(|_| {}).unwrap();
            }
        }
        engine.close().unwrap();
    }
}
