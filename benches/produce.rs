//! Producer throughput for 1 KiB records, uncompressed and with lz4 and zstd, through an engine
//! with one shard and a one-partition topic, acks after the write (`Durability::Written`).
//!
//! One measured iteration is one `send`; each sample sends its records, then `flush`es, so the
//! time covers every record being appended, not only queued. Records are keyless JSON-like text
//! from a pool of 64 different values, so they compress as real payloads do (about 3-4x), not as
//! one repeated value would. The producer runs with its defaults otherwise: `batch.size` 16 KiB,
//! `linger.ms` 5, 64 appends in flight, compression on the sender thread.
//!
//! Expected before measuring: `engine_append` writes 64 KiB batches built ahead of time; the
//! producer also encodes each record on the caller's thread and sends 16 KiB batches (4x the
//! appends per record), so fewer records/s without compression. lz4 costs little CPU and writes
//! fewer bytes: about the same. zstd (level 3, plus the engine decompressing each batch to
//! validate it on the sender thread): fewer still.
//!
//! Baseline in the same run: the engine appending the same records in uncompressed batches of
//! the same size built ahead of time, 64 in flight: the floor the producer's own work (encoding,
//! accumulating, answering each record) is measured against.

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, Pending};
use seglog::format::{BatchBuilder, Compression, NewRecord};
use seglog::producer::{Producer, ProducerConfig, ProducerRecord};
use seglog::types::TopicName;

const RECORD_BYTES: usize = 1024;
const VALUE_POOL: usize = 64;

/// `VALUE_POOL` different 1 KiB values of JSON-like text.
fn values() -> Vec<Vec<u8>> {
    let words = [
        "order",
        "customer",
        "amount",
        "currency",
        "EUR",
        "status",
        "shipped",
        "pending",
        "warehouse",
        "item",
        "quantity",
        "price",
        "discount",
        "address",
        "city",
        "country",
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..VALUE_POOL)
        .map(|_| {
            let mut value = Vec::with_capacity(RECORD_BYTES);
            while value.len() < RECORD_BYTES {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let word = words[(state % words.len() as u64) as usize];
                let field = format!("\"{word}\": {}, ", state % 100_000);
                value.extend_from_slice(field.as_bytes());
            }
            value.truncate(RECORD_BYTES);
            value
        })
        .collect()
}

fn send_and_flush(
    producer: &Producer,
    topic: &TopicName,
    values: &[Vec<u8>],
    count: u64,
) -> Duration {
    let start = Instant::now();
    let mut futures = Vec::with_capacity(count as usize);
    for index in 0..count as usize {
        let value = &values[index % values.len()];
        match producer.send(&ProducerRecord::new(topic, None, Some(value))) {
            Ok(future) => futures.push(future),
            Err(error) => panic!("send failed: {error}"),
        }
    }
    producer.flush();
    let elapsed = start.elapsed();
    for future in futures {
        if let Err(error) = future.wait() {
            panic!("append failed: {error}");
        }
    }
    elapsed
}

/// The batch the producer builds from these values without compression: as many records as fit
/// in `batch.size` (16 KiB). Returns it with its record count.
fn batch_of_batch_size(values: &[Vec<u8>]) -> (Bytes, u64) {
    let mut builder = BatchBuilder::with_capacity(0, 16 * 1024);
    for value in values.iter().cycle() {
        let record = NewRecord {
            timestamp_ms: 1_700_000_000_000,
            key: None,
            value: Some(value),
            headers: &[],
        };
        if builder.size_bytes_with(&record) > 16 * 1024 {
            break;
        }
        builder.push(&record);
    }
    let count = builder.records_count() as u64;
    (builder.build().unwrap_or_default(), count)
}

/// The baseline: the same records, batched ahead of time, appended with 64 in flight (what the
/// producer's sender does, without encoding, accumulating or answering records).
fn append_prebuilt(engine: &Engine, topic: &TopicName, batch: &Bytes, iterations: u64) -> Duration {
    let start = Instant::now();
    let mut in_flight = VecDeque::with_capacity(64);
    for _ in 0..iterations {
        if in_flight.len() == 64
            && let Some(pending) = in_flight.pop_front()
        {
            black_box(Pending::wait(pending).ok());
        }
        in_flight.push_back(engine.append(topic, 0, batch.clone(), Durability::Written));
    }
    for pending in in_flight {
        black_box(Pending::wait(pending).ok());
    }
    start.elapsed()
}

fn bench_produce(c: &mut Criterion) {
    let Ok(dir) = tempfile::tempdir_in(".") else {
        return;
    };
    let config = EngineConfig::default()
        .with_shard_count(1)
        .with_pin_shards(false);
    let Ok(engine) = Engine::open(dir.path().join("engine"), config) else {
        return;
    };
    let values = values();
    let mut group = c.benchmark_group("produce_1KiB_records");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    for codec in [Compression::None, Compression::Lz4, Compression::Zstd] {
        let mut topic_config = LogConfig::default();
        let _ = topic_config.set("segment.bytes", "268435456");
        let Ok(topic) = engine.create_topic(codec.name(), 1, topic_config) else {
            return;
        };
        let producer_config = ProducerConfig::default()
            .with_compression(codec)
            .with_acks(Durability::Written);
        let Ok(producer) = engine.producer(producer_config) else {
            return;
        };
        group.bench_function(codec.name(), |b| {
            b.iter_custom(|count| send_and_flush(&producer, &topic, &values, count))
        });
        let _ = producer.close();
        if let Ok(description) = engine.describe_topic(codec.name()) {
            let partition = &description.partitions[0];
            let per_record = partition.size_bytes as f64 / partition.log_end_offset.0.max(1) as f64;
            eprintln!("{codec}: {per_record:.0} bytes per 1 KiB record on disk");
        }
    }
    let (batch, records_per_batch) = batch_of_batch_size(&values);
    let mut topic_config = LogConfig::default();
    let _ = topic_config.set("segment.bytes", "268435456");
    let Ok(topic) = engine.create_topic("baseline", 1, topic_config) else {
        return;
    };
    group.throughput(Throughput::Elements(records_per_batch));
    group.bench_function("baseline_engine_append_prebuilt_16KiB_batches", |b| {
        b.iter_custom(|iterations| append_prebuilt(&engine, &topic, &batch, iterations))
    });
    group.finish();
    let _ = engine.close();
}

criterion_group!(benches, bench_produce);
criterion_main!(benches);
