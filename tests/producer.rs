//! The producer end to end (issue 6, part 1): records sent through `Engine::producer` land where
//! Kafka's Java client would put them and read back as sent. Proven by sending through a real
//! engine on positioned I/O and reading every batch back with `Engine::fetch`:
//! keyed records go to `murmur2(key) & 0x7fffffff % partitions` (Kafka's own test vectors, and
//! `partition_for_key` for many keys); keyless records stick to one partition for a whole batch,
//! then move on, including after `linger.ms` sends the batch; a custom partitioner decides every
//! record and an out-of-range answer is refused; each send resolves to a (partition, offset) that
//! holds the same key, value, headers and timestamp, in send order per partition, also with
//! several threads sharing the producer and with the future awaited on tokio; a lone record is
//! sent after `linger.ms` without a flush; batches stay within `batch.size` except a lone
//! oversized record; `buffer.memory` blocks `send` for `max.block.ms`, then fails with
//! `BufferExhausted`, and frees up when the engine answers; with durable acks a record is
//! answered only once the partition's durable offset covers it; appends refused because a shard's
//! queue is full are retried in send order until they get through, and fail with the engine's
//! refusal after `delivery.timeout.ms`; unknown topics, partitions out of range, records too
//! large and sends after `close` are typed errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig};
use seglog::format::Batch;
use seglog::io::hooked::{StorageHooks, StorageOp};
use seglog::producer::partition_for_key;
use seglog::producer::{
    Partitioner, Producer, ProducerConfig, ProducerError, ProducerRecord, RecordMetadata,
    SendFuture,
};
use seglog::types::{Offset, TimestampMs, TopicName};
use support::assert_matches;
use support::batches::owned_headers;
use support::engines::{self, fetch_batches};
use support::hooks::{hooked_pio, wait_every};

mod support;

fn engine_config() -> EngineConfig {
    engines::engine_config(2)
}

fn open(dir: &Path) -> Engine {
    Engine::open(dir, engine_config()).unwrap()
}

/// An engine in a temporary directory with a topic `name` of `partitions` partitions, and a
/// producer on it with [`config`] as `tweak` changes it.
fn producing(
    name: &str,
    partitions: u32,
    tweak: impl FnOnce(&mut ProducerConfig),
) -> (tempfile::TempDir, Engine, TopicName, Producer) {
    let mut config = config();
    tweak(&mut config);
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let topic = engine
        .create_topic(name, partitions, LogConfig::default())
        .unwrap();
    let producer = engine.producer(config).unwrap();
    (dir, engine, topic, producer)
}

/// A producer that answers once written and only sends full batches unless told otherwise.
fn config() -> ProducerConfig {
    ProducerConfig::default().with_acks(Durability::Written)
}

/// A record as read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StoredRecord {
    offset: u64,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

fn stored_records(batches: &[Batch]) -> Vec<StoredRecord> {
    let mut stored = Vec::new();
    for batch in batches {
        for record in batch.records().unwrap() {
            stored.push(StoredRecord {
                offset: batch.base_offset() as u64 + record.offset_delta as u64,
                timestamp: batch.header().base_timestamp + record.timestamp_delta,
                headers: owned_headers(&record),
                key: record.key.map(|key| key.to_vec()),
                value: record.value.map(|value| value.to_vec()),
            });
        }
    }
    stored
}

fn read_records(engine: &Engine, topic: &TopicName, partition: u32) -> Vec<StoredRecord> {
    stored_records(&fetch_batches(engine, topic, partition))
}

/// Sends a record of `key` and `value` to `topic`.
fn try_send(
    producer: &Producer,
    topic: &TopicName,
    key: Option<&[u8]>,
    value: &[u8],
) -> Result<SendFuture, ProducerError> {
    producer.send(&ProducerRecord::new(topic, key, Some(value)))
}

/// [`try_send`], which must be accepted.
fn send(producer: &Producer, topic: &TopicName, key: Option<&[u8]>, value: &[u8]) -> SendFuture {
    try_send(producer, topic, key, value).unwrap()
}

/// [`send`], and its answer.
fn send_value(
    producer: &Producer,
    topic: &TopicName,
    key: Option<&[u8]>,
    value: &[u8],
) -> RecordMetadata {
    send(producer, topic, key, value).wait().unwrap()
}

/// The answers of `futures`, which must all succeed.
fn answers(futures: Vec<SendFuture>) -> Vec<RecordMetadata> {
    futures.into_iter().map(|f| f.wait().unwrap()).collect()
}

#[test]
fn keyed_records_land_on_kafkas_murmur2_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let ten = engine
        .create_topic("ten", 10, LogConfig::default())
        .unwrap();
    let twelve = engine
        .create_topic("twelve", 12, LogConfig::default())
        .unwrap();
    let producer = engine.producer(config()).unwrap();

    // Partition numbers worked out from the `murmur2` vectors of Kafka's UtilsTest (see
    // `partitioner.rs`): what the Java client picks for these keys.
    let long_key: &[u8] = b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8";
    let kafka_cases: [(&TopicName, &[u8], u32); 7] = [
        (&ten, b"21", 0),
        (&ten, b"foobar", 6),
        (&ten, b"a-little-bit-longer-string", 9),
        (&ten, long_key, 7),
        (&ten, b"abc", 7),
        (&twelve, b"a-little-bit-long-string", 8),
        (&twelve, b"a-little-bit-longer-string", 11),
    ];
    let futures: Vec<_> = kafka_cases
        .iter()
        .map(|(topic, key, _)| send(&producer, topic, Some(key), b"v"))
        .collect();
    for ((topic, key, expected), future) in kafka_cases.iter().zip(futures) {
        let metadata = future.wait().unwrap();
        assert_eq!(
            metadata.partition,
            *expected,
            "{topic} {:?}",
            key.escape_ascii()
        );
        let stored = read_records(&engine, topic, metadata.partition);
        let record = stored
            .iter()
            .find(|record| record.offset == metadata.offset.0)
            .unwrap();
        assert_eq!(record.key.as_deref(), Some(*key));
    }

    let keys: Vec<String> = (0..300).map(|index| format!("user-{index}")).collect();
    let futures: Vec<_> = keys
        .iter()
        .map(|key| send(&producer, &twelve, Some(key.as_bytes()), b"v"))
        .collect();
    producer.flush();
    for (key, future) in keys.iter().zip(futures) {
        assert_eq!(
            future.partition(),
            partition_for_key(key.as_bytes(), 12).unwrap(),
            "{key}"
        );
        assert_eq!(
            future.wait().unwrap().partition,
            partition_for_key(key.as_bytes(), 12).unwrap()
        );
    }
    producer.close().unwrap();
    engine.close().unwrap();
}

/// Splits the partitions of consecutive sends into runs of the same partition.
fn runs(partitions: &[u32]) -> Vec<(u32, usize)> {
    let mut runs: Vec<(u32, usize)> = Vec::new();
    for &partition in partitions {
        match runs.last_mut() {
            Some((last, length)) if *last == partition => *length += 1,
            _ => runs.push((partition, 1)),
        }
    }
    runs
}

#[test]
fn keyless_records_stick_to_one_partition_for_a_full_batch_then_move_on() {
    // A long linger: only full batches are sent until the flush.
    let (_dir, engine, topic, producer) = producing("sticky", 4, |config| {
        config.batch_size_bytes = 1024;
        config.linger_ms = 60_000;
    });
    let value = [7u8; 100];
    let futures: Vec<_> = (0..95)
        .map(|_| send(&producer, &topic, None, &value))
        .collect();
    producer.flush();
    let sent = answers(futures);

    let partitions: Vec<u32> = sent.iter().map(|metadata| metadata.partition).collect();
    let runs = runs(&partitions);
    // A 100-byte value makes a 108-byte record: 8 fit in 1024 bytes with the 61-byte header.
    let (full_runs, last_run) = runs.split_at(runs.len() - 1);
    assert!(full_runs.iter().all(|&(_, length)| length == 8), "{runs:?}");
    assert!(last_run[0].1 <= 8, "{runs:?}");
    let distinct: std::collections::BTreeSet<u32> = partitions.iter().copied().collect();
    assert!(distinct.len() >= 2, "keyless records spread: {runs:?}");

    // Each run is exactly one batch on disk, in its partition.
    let mut batch_sizes: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for partition in 0..4 {
        let batches = fetch_batches(&engine, &topic, partition);
        let sizes = batches
            .iter()
            .map(|batch| batch.header().records_count as usize)
            .collect();
        batch_sizes.insert(partition, sizes);
    }
    let mut run_sizes: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for &(partition, length) in &runs {
        run_sizes.entry(partition).or_default().push(length);
    }
    batch_sizes.retain(|_, sizes| !sizes.is_empty());
    assert_eq!(batch_sizes, run_sizes);
    producer.close().unwrap();
    engine.close().unwrap();
}

#[test]
fn the_sticky_partition_moves_on_once_linger_has_sent_its_batch() {
    let (_dir, engine, topic, producer) = producing("lingered", 3, |config| config.linger_ms = 1);
    let partitions: Vec<u32> = (0..12)
        .map(|_| send_value(&producer, &topic, None, b"alone").partition)
        .collect();
    for pair in partitions.windows(2) {
        assert_ne!(
            pair[0], pair[1],
            "each lone batch moves the choice: {partitions:?}"
        );
    }
    producer.close().unwrap();
    engine.close().unwrap();
}

/// Sends every record to the last partition, and counts its calls.
#[derive(Debug, Default)]
struct LastPartition {
    calls: AtomicUsize,
}

impl Partitioner for LastPartition {
    fn partition(&self, _topic: &TopicName, _key: Option<&[u8]>, partition_count: u32) -> u32 {
        self.calls.fetch_add(1, Ordering::SeqCst);
        partition_count - 1
    }
}

/// Answers a partition that does not exist.
#[derive(Debug)]
struct OutOfRange;

impl Partitioner for OutOfRange {
    fn partition(&self, _topic: &TopicName, _key: Option<&[u8]>, partition_count: u32) -> u32 {
        partition_count
    }
}

#[test]
fn a_custom_partitioner_decides_every_record_and_an_answer_out_of_range_is_refused() {
    let partitioner = Arc::new(LastPartition::default());
    let (_dir, engine, topic, producer) = producing("custom", 5, |config| {
        config.partitioner = Some(partitioner.clone())
    });
    let keys: [Option<&[u8]>; 4] = [Some(b"21"), Some(b"foobar"), None, Some(b"")];
    for key in keys {
        assert_eq!(send_value(&producer, &topic, key, b"v").partition, 4);
    }
    assert_eq!(partitioner.calls.load(Ordering::SeqCst), 4);
    // An explicit partition bypasses the partitioner.
    let mut record = ProducerRecord::new(&topic, Some(b"21"), Some(b"v"));
    record.partition = Some(1);
    assert_eq!(producer.send(&record).unwrap().wait().unwrap().partition, 1);
    assert_eq!(partitioner.calls.load(Ordering::SeqCst), 4);
    assert_eq!(read_records(&engine, &topic, 4).len(), 4);
    producer.close().unwrap();

    let refused = engine
        .producer(config().with_partitioner(Some(Arc::new(OutOfRange))))
        .unwrap();
    let error = try_send(&refused, &topic, None, b"v").unwrap_err();
    assert_matches!(
        error,
        ProducerError::PartitionOutOfRange {
            partition: 5,
            partition_count: 5,
            ..
        }
    );
    refused.close().unwrap();
    engine.close().unwrap();
}

/// One record to send, owned.
#[derive(Debug, Clone)]
struct Sent {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp: i64,
}

fn sample(index: usize) -> Sent {
    let key = match index % 5 {
        0 => None,
        _ => Some(format!("key-{}", index % 7).into_bytes()),
    };
    let value =
        (index % 11 != 3).then(|| format!("value-{index}-{}", "x".repeat(index % 50)).into_bytes());
    let headers = (0..index % 3)
        .map(|header| {
            (
                format!("h{header}"),
                (header != 1).then(|| vec![header as u8; header + 1]),
            )
        })
        .collect();
    Sent {
        key,
        value,
        headers,
        timestamp: 1_700_000_000_000 + (index as i64 * 37) % 1000,
    }
}

fn send_sample(producer: &Producer, topic: &TopicName, sent: &Sent) -> SendFuture {
    let headers: Vec<(&str, Option<&[u8]>)> = sent
        .headers
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_deref()))
        .collect();
    producer
        .send(&ProducerRecord {
            headers: &headers,
            timestamp: Some(TimestampMs(sent.timestamp)),
            ..ProducerRecord::new(topic, sent.key.as_deref(), sent.value.as_deref())
        })
        .unwrap()
}

/// Every sent record is at its answered (partition, offset), as sent; per partition, offsets
/// follow send order.
fn assert_read_back(engine: &Engine, topic: &TopicName, answers: &[(Sent, RecordMetadata)]) {
    let mut stored: BTreeMap<(u32, u64), StoredRecord> = BTreeMap::new();
    for partition in 0..3 {
        for record in read_records(engine, topic, partition) {
            stored.insert((partition, record.offset), record);
        }
    }
    assert_eq!(stored.len(), answers.len());
    let mut last_offsets: BTreeMap<u32, u64> = BTreeMap::new();
    for (sent, metadata) in answers {
        let record = &stored[&(metadata.partition, metadata.offset.0)];
        assert_eq!(record.key, sent.key);
        assert_eq!(record.value, sent.value);
        assert_eq!(record.headers, sent.headers);
        assert_eq!(record.timestamp, sent.timestamp);
        assert_eq!(metadata.timestamp, TimestampMs(sent.timestamp));
        if let Some(last) = last_offsets.insert(metadata.partition, metadata.offset.0) {
            assert!(
                last < metadata.offset.0,
                "send order kept in partition {}",
                metadata.partition
            );
        }
    }
}

#[test]
fn sends_resolve_to_offsets_holding_the_same_key_value_headers_and_timestamp_in_send_order() {
    let (_dir, engine, topic, producer) =
        producing("roundtrip", 3, |config| config.batch_size_bytes = 2048);
    let records: Vec<Sent> = (0..1000).map(sample).collect();
    let futures: Vec<_> = records
        .iter()
        .map(|sent| send_sample(&producer, &topic, sent))
        .collect();
    let answers: Vec<(Sent, RecordMetadata)> = records
        .into_iter()
        .zip(futures)
        .map(|(sent, future)| (sent, future.wait().unwrap()))
        .collect();
    assert_read_back(&engine, &topic, &answers);
    producer.close().unwrap();
    engine.close().unwrap();
}

#[test]
fn threads_sharing_a_producer_each_keep_their_send_order() {
    let (_dir, engine, topic, producer) =
        producing("shared", 3, |config| config.batch_size_bytes = 1024);
    let answers: Vec<(Sent, RecordMetadata)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|thread| {
                let (producer, topic) = (&producer, &topic);
                scope.spawn(move || {
                    (0..300)
                        .map(|index| sample(thread * 1000 + index))
                        .map(|sent| {
                            let future = send_sample(producer, topic, &sent);
                            (sent, future)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap())
            .map(|(sent, future)| (sent, future.wait().unwrap()))
            .collect()
    });
    // Within each thread (each chunk of 300), offsets per partition follow send order.
    for chunk in answers.chunks(300) {
        let mut last_offsets: BTreeMap<u32, u64> = BTreeMap::new();
        for (_, metadata) in chunk {
            if let Some(last) = last_offsets.insert(metadata.partition, metadata.offset.0) {
                assert!(last < metadata.offset.0);
            }
        }
    }
    let mut stored = 0;
    for partition in 0..3 {
        stored += read_records(&engine, &topic, partition).len();
    }
    assert_eq!(stored, 1200);
    producer.close().unwrap();
    engine.close().unwrap();
}

#[test]
fn a_send_future_is_awaited_on_tokio() {
    let (_dir, engine, topic, producer) = producing("async", 1, |config| {
        config.acks = ProducerConfig::default().acks
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let offsets: Vec<u64> = runtime.block_on(async {
        let mut offsets = Vec::new();
        for index in 0..5u8 {
            let future = send(&producer, &topic, None, &[index]);
            offsets.push(future.await.unwrap().offset.0);
        }
        offsets
    });
    assert_eq!(offsets, [0, 1, 2, 3, 4]);
    producer.close().unwrap();
    engine.close().unwrap();
}

#[test]
fn a_lone_record_is_sent_after_linger_without_a_flush() {
    let linger = Duration::from_millis(100);
    let (_dir, engine, topic, producer) = producing("linger", 1, |config| config.linger_ms = 100);
    let started = Instant::now();
    let future = send(&producer, &topic, None, b"alone");
    let sent = wait_every(Duration::from_millis(5), Duration::from_secs(30), || {
        future.is_complete()
    });
    assert!(sent, "never sent");
    assert!(
        started.elapsed() >= linger,
        "sent before linger.ms: {:?}",
        started.elapsed()
    );
    assert_eq!(future.wait().unwrap().offset, Offset(0));
    assert_eq!(read_records(&engine, &topic, 0).len(), 1);
    producer.close().unwrap();
    engine.close().unwrap();
}

#[test]
fn batches_stay_within_batch_size_except_a_lone_oversized_record() {
    let (_dir, engine, topic, producer) = producing("sizes", 1, |config| {
        config.batch_size_bytes = 4096;
        // Only a full batch (or the flush) sends one: none goes early because it lingered.
        config.linger_ms = 60_000;
    });
    let values: Vec<Vec<u8>> = (0..1000)
        .map(|index| vec![b'v'; 10 + (index * 97) % 590])
        .collect();
    let oversized = vec![b'o'; 10_000];
    let futures: Vec<_> = values
        .iter()
        .take(500)
        .chain([&oversized])
        .chain(values.iter().skip(500))
        .map(|value| send(&producer, &topic, Some(b"k"), value))
        .collect();
    producer.flush();
    let answers = answers(futures);
    let oversized_offset = answers[500].offset.0;
    let batches = fetch_batches(&engine, &topic, 0);
    // ~300-byte records on average: about 310 KB in 4 KiB batches.
    assert!(batches.len() >= 76, "{} batches", batches.len());
    for batch in &batches {
        if batch.base_offset() as u64 == oversized_offset {
            assert_eq!(batch.header().records_count, 1);
            assert!(batch.size_bytes() > 4096);
        } else {
            assert!(batch.size_bytes() <= 4096, "{} bytes", batch.size_bytes());
            // Closed only when the next record did not fit: never more than the largest
            // ordinary record short, unless the next record was the oversized one, or none.
            let next_offset = batch.last_offset() as u64 + 1;
            if next_offset != oversized_offset && next_offset != 1001 {
                assert!(
                    batch.size_bytes() + 620 > 4096,
                    "{} bytes",
                    batch.size_bytes()
                );
            }
        }
    }
    assert_eq!(stored_records(&batches).len(), 1001);
    producer.close().unwrap();
    engine.close().unwrap();
}

/// Storage hooks under which one kind of operation waits while the gate is closed: group-commit
/// syncs (durable appends stay unanswered, so the producer's batches keep their `buffer.memory`),
/// or writes (the shard itself is held, so its queue fills).
#[derive(Debug)]
struct StorageGate {
    op: StorageOp,
    closed: Mutex<bool>,
    opened: Condvar,
    /// Operations waiting at the closed gate.
    held: std::sync::atomic::AtomicUsize,
}

impl StorageGate {
    fn new(op: StorageOp) -> StorageGate {
        StorageGate {
            op,
            closed: Mutex::new(false),
            opened: Condvar::new(),
            held: Default::default(),
        }
    }

    fn set_closed(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }

    /// Waits until an operation is held at the gate.
    fn wait_until_held(&self) {
        let held = || self.held.load(std::sync::atomic::Ordering::SeqCst) > 0;
        let reached = wait_every(Duration::from_millis(1), Duration::from_secs(30), held);
        assert!(reached, "no {:?} reached the gate", self.op);
    }
}

impl StorageHooks for StorageGate {
    fn before(&self, op: StorageOp, _path: &Path) -> io::Result<()> {
        if op == self.op {
            let mut closed = self.closed.lock().unwrap();
            self.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            while *closed {
                closed = self.opened.wait(closed).unwrap();
            }
            self.held.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(())
    }
}

/// An engine whose durable appends stay unanswered until the gate opens, with a one-partition
/// topic, and a producer with room for four 1 KiB batches, each filled by one 600-byte record.
fn gated(dir: &Path, block_ms_max: u64) -> Gated {
    // Every sync through the sync threads' `sync_data_many` (the gated operation), none inline.
    let config = engine_config().with_sync_inline_when_idle(false);
    let (engine, gate, topic) = gated_engine(dir, StorageOp::SyncGroup, config, "bounded");
    let producer = engine
        .producer(
            ProducerConfig::default()
                .with_batch_size_bytes(1024)
                .with_buffer_memory_bytes(4096)
                .with_block_ms_max(block_ms_max)
                .with_linger_ms(0)
                .with_acks(Durability::Durable),
        )
        .unwrap();
    let held = (0..4)
        .map(|_| send(&producer, &topic, None, &GATED_VALUE))
        .collect();
    (engine, gate, topic, producer, held)
}

const GATED_VALUE: [u8; 600] = [1; 600];

/// [`gated`]'s engine, gate, topic and producer, and the sends it holds.
type Gated = (
    Engine,
    Arc<StorageGate>,
    TopicName,
    Producer,
    Vec<SendFuture>,
);

#[test]
fn a_full_buffer_memory_blocks_send_for_max_block_ms_then_fails_with_buffer_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, storage, topic, producer, held) = gated(dir.path(), 200);
    assert_eq!(producer.buffer_used_bytes(), 4096);

    let started = Instant::now();
    let error = try_send(&producer, &topic, None, &GATED_VALUE).unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert_matches!(
        error,
        ProducerError::BufferExhausted {
            requested_bytes: 1024,
            buffer_memory_bytes: 4096,
            block_ms_max: 200
        }
    );
    assert!(held.iter().all(|future| !future.is_complete()));
    assert_eq!(producer.buffer_used_bytes(), 4096);

    // A record that could never fit is refused at once, not after max.block.ms.
    assert_matches!(
        try_send(&producer, &topic, None, &[0u8; 5000]).unwrap_err(),
        ProducerError::RecordTooLarge {
            limit_name: "buffer.memory",
            ..
        }
    );

    storage.set_closed(false);
    assert_eq!(offsets(held), [0, 1, 2, 3]);
    producer.close().unwrap();
    assert_eq!(producer.buffer_used_bytes(), 0);
    engine.close().unwrap();
}

#[test]
fn a_send_blocked_on_buffer_memory_goes_through_once_the_engine_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, storage, topic, producer, held) = gated(dir.path(), 60_000);
    // Before the opener starts: it opens no sooner than 100 ms after this.
    let started = Instant::now();
    let opener = std::thread::spawn({
        let storage = storage.clone();
        move || {
            std::thread::sleep(Duration::from_millis(100));
            storage.set_closed(false);
        }
    });
    let fifth = send(&producer, &topic, None, &GATED_VALUE);
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "did not block"
    );
    // Memory is given back only after a batch's records are answered.
    assert!(held.iter().any(SendFuture::is_complete));
    assert!(producer.buffer_used_bytes() <= 4096);
    assert_eq!(fifth.wait().unwrap().offset, Offset(4));
    opener.join().unwrap();
    producer.close().unwrap();
    engine.close().unwrap();
}

#[test]
fn durable_acks_answer_a_record_only_once_its_partition_is_durable_past_it() {
    let (_dir, engine, topic, producer) = producing("durable", 2, |config| {
        config.acks = Durability::Durable;
        config.batch_size_bytes = 512;
    });
    let futures: Vec<_> = (0..200)
        .map(|index| {
            let key = format!("k{index}");
            send(&producer, &topic, Some(key.as_bytes()), b"durable value")
        })
        .collect();
    for future in futures {
        let metadata = future.wait().unwrap();
        let description = engine
            .describe_partition("durable", metadata.partition)
            .unwrap();
        assert!(
            description.durable_offset > metadata.offset,
            "offset {} answered with durable offset {}",
            metadata.offset,
            description.durable_offset
        );
    }
    producer.close().unwrap();

    // Written acks do not wait for a sync: the topic's flush policy never syncs before close.
    let written = engine.producer(config()).unwrap();
    let metadata = send_value(&written, &topic, Some(b"k0"), b"written");
    let description = engine
        .describe_partition("durable", metadata.partition)
        .unwrap();
    assert!(description.durable_offset <= metadata.offset);
    written.close().unwrap();
    engine.close().unwrap();
}

#[test]
fn unknown_topics_partitions_out_of_range_oversized_records_and_closed_producers_are_typed_errors()
{
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let small = LogConfig::default().with_max_message_bytes(1000);
    let topic = engine.create_topic("small", 2, small).unwrap();
    let producer = engine.producer(config()).unwrap();

    let missing = TopicName::parse("missing").unwrap();
    let error = try_send(&producer, &missing, None, b"v").unwrap_err();
    assert_matches!(&error, ProducerError::UnknownTopic { topic } if topic == "missing");

    let mut record = ProducerRecord::new(&topic, None, Some(b"v"));
    record.partition = Some(2);
    let error = producer.send(&record).unwrap_err();
    assert_matches!(
        error,
        ProducerError::PartitionOutOfRange {
            partition: 2,
            partition_count: 2,
            ..
        }
    );

    let large = vec![0u8; 1000];
    let error = try_send(&producer, &topic, None, &large).unwrap_err();
    assert_matches!(
        error,
        ProducerError::RecordTooLarge {
            limit_name: "max.message.bytes",
            limit_bytes: 1000,
            ..
        }
    );

    // The producer's batches respect the topic's max.message.bytes below batch.size.
    let value = [5u8; 300];
    let futures: Vec<_> = (0..20)
        .map(|_| send(&producer, &topic, Some(b"same"), &value))
        .collect();
    producer.close().unwrap();
    let partition = futures[0].partition();
    assert!(futures.into_iter().all(|future| future.wait().is_ok()));
    for batch in fetch_batches(&engine, &topic, partition) {
        assert!(batch.size_bytes() <= 1000);
    }

    let error = try_send(&producer, &topic, None, b"v").unwrap_err();
    assert!(matches!(error, ProducerError::Closed), "{error}");
    let invalid = engine.producer(ProducerConfig::default().with_appends_inflight_max(0));
    assert!(matches!(invalid, Err(ProducerError::Config { .. })));
    engine.close().unwrap();
}

#[test]
fn records_sent_when_the_engine_is_closed_fail_with_the_engines_error() {
    let (_dir, engine, topic, producer) = producing("gone", 1, |config| config.linger_ms = 60_000);
    let future = send(&producer, &topic, None, b"v");
    engine.close().unwrap();
    producer.flush();
    let error = future.wait().unwrap_err();
    assert_matches!(&error, ProducerError::Append { partition: 0, .. });
    producer.close().unwrap();
}

/// An engine with one shard whose request queue holds one request, blocked in a gated write: a
/// third append in a row is refused with `QueueFull` before it reaches the shard.
fn one_slot_queue(dir: &Path) -> (Engine, Arc<StorageGate>, TopicName) {
    let config = engine_config()
        .with_shard_count(1)
        .with_queue_requests_max(1);
    gated_engine(dir, StorageOp::Write, config, "queue")
}

/// An engine with `config` in `dir` over storage whose `op`s wait at a gate, closed once the topic
/// `name` of one partition is created.
fn gated_engine(
    dir: &Path,
    op: StorageOp,
    config: EngineConfig,
    name: &str,
) -> (Engine, Arc<StorageGate>, TopicName) {
    let gate = Arc::new(StorageGate::new(op));
    let engine = Engine::open_with_storage(dir, config, hooked_pio(gate.clone())).unwrap();
    let topic = engine.create_topic(name, 1, LogConfig::default()).unwrap();
    gate.set_closed(true);
    (engine, gate, topic)
}

/// The offsets `futures` are answered with, each of which must succeed.
fn offsets(futures: Vec<SendFuture>) -> Vec<u64> {
    answers(futures).iter().map(|m| m.offset.0).collect()
}

/// Sends `count` records (record i holds value byte i), the first alone: once it holds the shard
/// in its write at the closed gate, the rest, which then meet a full queue. (Sent together, the
/// shard could take several into one turn.)
fn send_behind_a_held_write(
    producer: &Producer,
    topic: &TopicName,
    gate: &StorageGate,
    count: u8,
) -> Vec<SendFuture> {
    let send = |index: u8| {
        let value = [index; 600];
        send(producer, topic, None, &value)
    };
    let mut futures = vec![send(0)];
    gate.wait_until_held();
    futures.extend((1..count).map(send));
    futures
}

/// [`one_slot_queue`] in a temporary directory, and `count` records sent behind its held write
/// ([`send_behind_a_held_write`]) by a producer timing out after `delivery_timeout_ms`.
fn held_in_a_full_queue(delivery_timeout_ms: u64, count: u8) -> HeldInAFullQueue {
    let dir = tempfile::tempdir().unwrap();
    let (engine, gate, topic) = one_slot_queue(dir.path());
    let producer = engine
        .producer(one_append_per_record(delivery_timeout_ms))
        .unwrap();
    let futures = send_behind_a_held_write(&producer, &topic, &gate, count);
    (dir, engine, gate, topic, producer, futures)
}

type HeldInAFullQueue = (
    tempfile::TempDir,
    Engine,
    Arc<StorageGate>,
    TopicName,
    Producer,
    Vec<SendFuture>,
);

/// One 600-byte record per 1 KiB batch, so each send is its own append.
fn one_append_per_record(delivery_timeout_ms: u64) -> ProducerConfig {
    ProducerConfig::default()
        .with_batch_size_bytes(1024)
        .with_linger_ms(0)
        .with_retry_backoff_ms(5)
        .with_delivery_timeout_ms(delivery_timeout_ms)
        .with_acks(Durability::Durable)
}

#[test]
fn appends_refused_for_a_full_shard_queue_are_retried_in_order_until_they_get_through() {
    let (_dir, engine, storage, topic, producer, futures) = held_in_a_full_queue(120_000, 20);
    std::thread::sleep(Duration::from_millis(200));
    assert!(futures.iter().all(|future| !future.is_complete()));
    storage.set_closed(false);
    assert_eq!(offsets(futures), (0..20).collect::<Vec<u64>>());
    // Stored in send order: record i holds value byte i.
    let values: Vec<u8> = read_records(&engine, &topic, 0)
        .iter()
        .map(|record| record.value.as_ref().unwrap()[0])
        .collect();
    assert_eq!(values, (0..20).collect::<Vec<u8>>());
    producer.close().unwrap();
    engine.close().unwrap();
}

#[test]
fn appends_still_refused_after_delivery_timeout_fail_with_the_engines_refusal() {
    let (_dir, engine, storage, topic, producer, futures) = held_in_a_full_queue(100, 10);
    // Every batch refused for 100 ms fails; then the shard may take the rest again.
    let timed_out = || futures.iter().any(|future| future.is_complete());
    let timed_out = wait_every(Duration::from_millis(5), Duration::from_secs(30), timed_out);
    assert!(timed_out, "no batch timed out");
    storage.set_closed(false);
    let outcomes: Vec<_> = futures.into_iter().map(SendFuture::wait).collect();
    let failed: Vec<&ProducerError> = outcomes
        .iter()
        .filter_map(|outcome| outcome.as_ref().err())
        .collect();
    assert!(!failed.is_empty());
    for error in &failed {
        let ProducerError::Append { source, .. } = error else {
            panic!("{error}");
        };
        assert!(
            matches!(
                **source,
                seglog::error::AppendError::Unavailable(
                    seglog::error::EngineUnavailable::QueueFull { .. }
                )
            ),
            "{source}"
        );
    }
    // What got through is stored densely, in send order among the records that got through.
    let stored = read_records(&engine, &topic, 0);
    let succeeded: Vec<u64> = outcomes
        .iter()
        .filter_map(|outcome| outcome.as_ref().ok())
        .map(|m| m.offset.0)
        .collect();
    assert_eq!(succeeded, (0..stored.len() as u64).collect::<Vec<u64>>());
    producer.close().unwrap();
    engine.close().unwrap();
}
