//! Engine append throughput for 1 KiB records on one shard, beside the same bytes written with
//! plain sequential `pwrite`s (and `fdatasync`s) to one file in the same run — the floor the engine
//! is measured against.
//!
//! Each iteration appends one 64 KiB batch of 64 records of 1 KiB. Appends are pipelined: up to
//! 64 are in flight (a producer with `max.in.flight` > 1), so the figure is the shard's
//! throughput, not one round trip. `durable` waits for group commit: the shard syncs once per turn
//! for everything it wrote in that turn.
//!
//! Expected before measuring: `written` is bounded by page-cache copy bandwidth and the shard's
//! per-batch work (validation with CRC on the caller, offset stamping, one write per turn), so
//! close to the raw `pwrite` baseline; `durable` is bounded by `fdatasync` latency
//! (PERFORMANCE-NOTES.md) amortised over the batches of one turn.

use std::collections::VecDeque;
use std::fs::File;
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig};
use seglog::format::{BatchBuilder, NewRecord};

const RECORD_BYTES: usize = 1024;
const RECORDS_PER_BATCH: usize = 64;
const IN_FLIGHT_MAX: usize = 64;

fn batch() -> Bytes {
    let value: Vec<u8> = (0..RECORD_BYTES).map(|i| (i * 7 % 251) as u8).collect();
    let mut builder = BatchBuilder::with_capacity(0, RECORD_BYTES * RECORDS_PER_BATCH + 4096);
    for index in 0..RECORDS_PER_BATCH {
        let key = (index as u64).to_be_bytes();
        builder.push(&NewRecord {
            timestamp_ms: 1_700_000_000_000,
            key: Some(&key),
            value: Some(&value),
            headers: &[],
        });
    }
    builder.build().unwrap_or_default()
}

fn append_pipelined(
    engine: &Engine,
    batch: &Bytes,
    durability: Durability,
    iterations: u64,
) -> Duration {
    let topic = seglog::types::TopicName::parse("bench").unwrap_or_else(|_| unreachable!());
    let start = Instant::now();
    let mut in_flight = VecDeque::with_capacity(IN_FLIGHT_MAX);
    for _ in 0..iterations {
        if in_flight.len() == IN_FLIGHT_MAX
            && let Some(pending) = in_flight.pop_front()
        {
            black_box(seglog::engine::Pending::wait(pending).ok());
        }
        in_flight.push_back(engine.append(&topic, 0, batch.clone(), durability));
    }
    for pending in in_flight {
        black_box(seglog::engine::Pending::wait(pending).ok());
    }
    start.elapsed()
}

fn pwrite_baseline(
    file: &File,
    batch: &Bytes,
    sync: bool,
    position: &mut u64,
    iterations: u64,
) -> Duration {
    let start = Instant::now();
    for _ in 0..iterations {
        let _ = file.write_all_at(batch, *position);
        *position += batch.len() as u64;
        if sync {
            let _ = file.sync_data();
        }
    }
    start.elapsed()
}

fn bench_append(c: &mut Criterion) {
    let Ok(dir) = tempfile::tempdir_in(".") else {
        return;
    };
    let config = EngineConfig::default()
        .with_shard_count(1)
        .with_pin_shards(false);
    let Ok(engine) = Engine::open(dir.path().join("engine"), config) else {
        return;
    };
    let mut topic_config = LogConfig::default();
    let _ = topic_config.set("segment.bytes", "268435456");
    if engine.create_topic("bench", 1, topic_config).is_err() {
        return;
    }
    let batch = batch();
    let Ok(file) = File::create(dir.path().join("baseline.log")) else {
        return;
    };
    let mut position = 0u64;
    let mut group = c.benchmark_group("append_1KiB_records_one_shard");
    group.throughput(Throughput::Elements(RECORDS_PER_BATCH as u64));
    group.sample_size(20);
    group.bench_function("engine_written", |b| {
        b.iter_custom(|iterations| {
            append_pipelined(&engine, &batch, Durability::Written, iterations)
        })
    });
    group.bench_function("baseline_pwrite", |b| {
        b.iter_custom(|iterations| pwrite_baseline(&file, &batch, false, &mut position, iterations))
    });
    group.bench_function("engine_durable_group_commit", |b| {
        b.iter_custom(|iterations| {
            append_pipelined(&engine, &batch, Durability::Durable, iterations)
        })
    });
    group.bench_function("baseline_pwrite_fdatasync_each", |b| {
        b.iter_custom(|iterations| pwrite_baseline(&file, &batch, true, &mut position, iterations))
    });
    group.finish();
    let _ = engine.close();
}

criterion_group!(benches, bench_append);
criterion_main!(benches);
