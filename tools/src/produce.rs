//! `seglog produce`: appends lines read from stdin as records through the engine and
//! acknowledges each one with its partition and offset, in input order.
//!
//! Streaming: a thread reads stdin line by line; the main thread waits for one line, then takes
//! every further line already read (without waiting), builds their batches (one per partition,
//! split at Kafka's default `batch.size` of 16 KiB) and submits each batch as one engine append,
//! without waiting for the answers. An acknowledgement thread waits for the answers in submission
//! order and prints each chunk's acknowledgements (in input order) as soon as its appends are
//! answered, flushing its output. A line typed alone is therefore appended and acknowledged at
//! once, while a file piped in is appended in batches, many of them in flight together.
//!
//! With `--durable` the appends ask for `Durability::Durable`: the engine answers each one only
//! after an `fdatasync` that covers it, and the appends in flight together share their syncs
//! (group commit) instead of one flush per record. The appends in flight are bounded
//! ([`INFLIGHT_APPENDS_MAX`], [`INFLIGHT_BYTES_MAX`]); the main thread waits when the bound is
//! reached. If an append fails, the records after it may have been written but are never
//! acknowledged.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufWriter, Write};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread;

use anyhow::{Context, anyhow, bail};
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, Pending, TopicMetadata};
use seglog::error::AppendError;
use seglog::format::{BatchBuilder, NewRecord};
use seglog::log::AppendInfo;
use seglog::partitioner::{RoundRobin, partition_for_key};
use seglog::types::{TimestampMs, TopicName};
use serde::Serialize;

use crate::Outcome;
use crate::args::{OutputFormat, ProduceArgs};
use crate::engine_open::{open_engine, with_engine};
use crate::topic_config::parse_configs;

/// Kafka's default producer `batch.size`: a coalesced batch closes before growing past this.
const BATCH_TARGET_BYTES: u64 = 16 * 1024;
/// Lines read from stdin but not yet appended, at most.
const LINE_QUEUE_LINES: usize = 4096;
/// Limits on the lines appended together.
const CHUNK_MAX_LINES: usize = 1000;
const CHUNK_MAX_BYTES: usize = 1024 * 1024;
/// Appends submitted to the engine but not yet acknowledged, at most (below the engine's
/// per-shard request queue of 4096, so a submission is never refused as `QueueFull`)...
const INFLIGHT_APPENDS_MAX: usize = 1024;
/// ...and their bytes, at most (below the engine's default `inflight_bytes_max` of 256 MiB).
/// A single chunk above either bound is still submitted, alone.
const INFLIGHT_BYTES_MAX: u64 = 64 * 1024 * 1024;

pub fn run(args: &ProduceArgs) -> anyhow::Result<Outcome> {
    let topic = TopicName::parse(&args.topic)
        .with_context(|| format!("invalid topic name {:?}", args.topic))?;
    let config = parse_configs(&args.configs)?;
    with_engine(open_engine(&args.dir)?, |engine| {
        let metadata = ensure_topic(engine, &topic, args, config)?;
        let settings = Settings {
            key_separator: args.key_separator.as_deref().map(str::as_bytes),
            // The engine refuses an append larger than either setting.
            batch_limit_bytes: BATCH_TARGET_BYTES
                .min(metadata.config.max_message_bytes)
                .min(metadata.config.segment_bytes),
            durability: if args.durable {
                Durability::Durable
            } else {
                Durability::Written
            },
            format: args.format,
        };
        let lines = spawn_line_reader()?;
        let mut out = BufWriter::new(io::stdout());
        produce(
            engine,
            &topic,
            metadata.partition_count,
            &settings,
            &lines,
            &mut out,
        )
    })?;
    Ok(Outcome::Clean)
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

/// How lines become appends and acknowledgements.
#[derive(Debug, Clone, Copy)]
struct Settings<'a> {
    key_separator: Option<&'a [u8]>,
    batch_limit_bytes: u64,
    durability: Durability,
    format: OutputFormat,
}

/// Appends every line `lines` delivers until it ends, writing each record's acknowledgement to
/// `out` in input order; returns the number of records acknowledged.
fn produce<W: Write + Send>(
    engine: &Engine,
    topic: &TopicName,
    partition_count: u32,
    settings: &Settings<'_>,
    lines: &Receiver<io::Result<Vec<u8>>>,
    out: &mut W,
) -> anyhow::Result<u64> {
    let window = Window::default();
    let mut submitter = Submitter {
        engine,
        topic,
        router: Router {
            partition_count,
            round_robin: RoundRobin::default(),
        },
        settings,
    };
    thread::scope(|scope| {
        let (sender, chunks) = mpsc::channel();
        let window = &window;
        let acknowledger = thread::Builder::new()
            .name("produce-acks".to_owned())
            .spawn_scoped(scope, move || {
                let _closer = CloseOnDrop(window);
                acknowledge(&chunks, window, topic, settings, out)
            })
            .context("cannot start the acknowledgement thread")?;
        let submitted = submitter.submit_all(lines, window, &sender);
        drop(sender);
        let acknowledged = acknowledger
            .join()
            .map_err(|_| anyhow!("the acknowledgement thread panicked"))?;
        // An append error comes first: it is the earliest failure in input order.
        let count = acknowledged?;
        submitted?;
        Ok(count)
    })
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

/// A chunk whose batches were submitted: the answers to wait for, in submission order, and where
/// each of the chunk's records went.
struct SubmittedChunk {
    appends: Vec<(u32, Pending<AppendInfo, AppendError>)>,
    placements: Vec<Placement>,
    bytes: u64,
}

/// One acknowledgement line.
#[derive(Debug, Clone, Copy, Serialize)]
struct Ack {
    partition: u32,
    offset: u64,
}

/// Bounds the appends submitted but not yet acknowledged: the submitter takes room before it
/// submits a chunk, the acknowledgement thread gives it back once the chunk is printed.
#[derive(Debug, Default)]
struct Window {
    state: Mutex<WindowState>,
    released: Condvar,
}

#[derive(Debug, Default)]
struct WindowState {
    appends: usize,
    bytes: u64,
    /// The acknowledgement thread stopped: nothing more will be acknowledged.
    closed: bool,
}

impl Window {
    /// Waits until `appends` more appends of `bytes` fit (always, when none is in flight). False
    /// once the acknowledgement thread stopped.
    fn acquire(&self, appends: usize, bytes: u64) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if state.closed {
                return false;
            }
            let fits = state.appends == 0
                || (state.appends + appends <= INFLIGHT_APPENDS_MAX
                    && state.bytes + bytes <= INFLIGHT_BYTES_MAX);
            if fits {
                state.appends += appends;
                state.bytes += bytes;
                return true;
            }
            state = self
                .released
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn release(&self, appends: usize, bytes: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.appends = state.appends.saturating_sub(appends);
        state.bytes = state.bytes.saturating_sub(bytes);
        self.released.notify_all();
    }

    fn close(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .closed = true;
        self.released.notify_all();
    }
}

/// Closes the window when the acknowledgement thread ends, however it ends.
struct CloseOnDrop<'a>(&'a Window);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The main thread's side: turns chunks of lines into batches and submits them.
struct Submitter<'a> {
    engine: &'a Engine,
    topic: &'a TopicName,
    router: Router,
    settings: &'a Settings<'a>,
}

impl Submitter<'_> {
    /// Submits every chunk until the input ends or the acknowledgement thread stops.
    fn submit_all(
        &mut self,
        lines: &Receiver<io::Result<Vec<u8>>>,
        window: &Window,
        chunks: &Sender<SubmittedChunk>,
    ) -> anyhow::Result<()> {
        while let Some(chunk) = next_chunk(lines)? {
            let (batches, placements) = self.build_batches(&chunk)?;
            let built: Vec<(u32, bytes::Bytes)> = batches
                .into_iter()
                .map(|batch| {
                    let bytes = batch
                        .builder
                        .build()
                        .context("internal error: an empty batch")?;
                    Ok((batch.partition, bytes))
                })
                .collect::<anyhow::Result<_>>()?;
            let bytes = built.iter().map(|(_, batch)| batch.len() as u64).sum();
            if !window.acquire(built.len(), bytes) {
                return Ok(());
            }
            // One batch per append keeps every index entry on a batch boundary.
            let appends = built
                .into_iter()
                .map(|(partition, batch)| {
                    let pending =
                        self.engine
                            .append(self.topic, partition, batch, self.settings.durability);
                    (partition, pending)
                })
                .collect();
            let submitted = SubmittedChunk {
                appends,
                placements,
                bytes,
            };
            if chunks.send(submitted).is_err() {
                return Ok(());
            }
        }
        Ok(())
    }

    /// The chunk's batches, and where each of its lines went, in input order.
    fn build_batches(
        &mut self,
        chunk: &[Vec<u8>],
    ) -> anyhow::Result<(Vec<PendingBatch>, Vec<Placement>)> {
        let timestamp_ms = TimestampMs::now().0;
        let mut batches: Vec<PendingBatch> = Vec::new();
        let mut filling: BTreeMap<u32, usize> = BTreeMap::new();
        let mut placements = Vec::with_capacity(chunk.len());
        for line in chunk {
            let (key, value) = split_line(line, self.settings.key_separator);
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
        Ok((batches, placements))
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
            && batches[index].builder.size_bytes_with(record) as u64
                <= self.settings.batch_limit_bytes
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
}

/// The acknowledgement thread: waits for each chunk's appends in submission order, then prints
/// the chunk's acknowledgements in input order and flushes. Returns the records acknowledged.
fn acknowledge<W: Write>(
    chunks: &Receiver<SubmittedChunk>,
    window: &Window,
    topic: &TopicName,
    settings: &Settings<'_>,
    out: &mut W,
) -> anyhow::Result<u64> {
    let mut acknowledged = 0u64;
    for chunk in chunks {
        let append_count = chunk.appends.len();
        let mut first_offsets = Vec::with_capacity(append_count);
        for (partition, pending) in chunk.appends {
            let info = pending
                .wait()
                .with_context(|| format!("cannot append to {topic}-{partition}"))?;
            if settings.durability == Durability::Durable && !info.durable {
                bail!(
                    "internal error: the engine answered a durable append to {topic}-{partition} before syncing it"
                );
            }
            first_offsets.push((partition, info.first_offset.0));
        }
        for placement in &chunk.placements {
            let (partition, first_offset) = first_offsets[placement.batch];
            let ack = Ack {
                partition,
                offset: first_offset + placement.index_in_batch,
            };
            write_ack(out, ack, settings.format)?;
        }
        out.flush()?;
        acknowledged += chunk.placements.len() as u64;
        window.release(append_count, chunk.bytes);
    }
    Ok(acknowledged)
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

fn write_ack(out: &mut impl Write, ack: Ack, format: OutputFormat) -> anyhow::Result<()> {
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
    use seglog::io::pio::PositionedIo;
    use seglog::io::{OpenMode, Storage, StorageFile};

    use super::*;

    /// Positioned I/O whose group-commit syncs (`sync_data_many`) are counted and take 2 ms, as on
    /// a disk, so that appends queue up behind a sync in progress.
    #[derive(Debug, Default)]
    struct SlowSyncs {
        group_syncs: AtomicUsize,
    }

    impl Storage for SlowSyncs {
        fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
            PositionedIo.open(path, mode)
        }
        fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
            PositionedIo.create_dir_all(dir)
        }
        fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
            PositionedIo.list_dir(dir)
        }
        fn is_dir(&self, path: &Path) -> bool {
            PositionedIo.is_dir(path)
        }
        fn exists(&self, path: &Path) -> bool {
            PositionedIo.exists(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            PositionedIo.rename(from, to)
        }
        fn remove_file(&self, path: &Path) -> io::Result<()> {
            PositionedIo.remove_file(path)
        }
        fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
            PositionedIo.remove_dir_all(path)
        }
        fn sync_dir(&self, dir: &Path) -> io::Result<()> {
            PositionedIo.sync_dir(dir)
        }
        fn sync_data_many(&self, files: &[&dyn StorageFile]) -> Vec<io::Result<()>> {
            if !files.is_empty() {
                self.group_syncs.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(2));
            }
            PositionedIo.sync_data_many(files)
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
        let storage = Arc::new(SlowSyncs::default());
        let config = EngineConfig {
            shard_count: 1,
            pin_shards: false,
            ..EngineConfig::default()
        };
        let engine = Engine::open_with_storage(dir.path(), config, storage.clone()).unwrap();
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
            batch_limit_bytes: BATCH_TARGET_BYTES,
            durability,
            format: OutputFormat::Text,
        };
        let mut out = Vec::new();
        let acknowledged = produce(
            &engine,
            &topic,
            partition_count,
            &settings,
            &lines,
            &mut out,
        )
        .unwrap();
        assert_eq!(acknowledged, record_count as u64);
        let group_syncs = storage.group_syncs.load(Ordering::SeqCst);
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
}
