//! Engine point lookups: one fetch of the batch holding a random offset (`max_bytes` 1), from the
//! page cache, beside a `pread` of the same number of bytes at a random position of one file in
//! the same run — the floor a lookup is measured against.
//!
//! Group `lookup`: 20,000 batches of 100 records of 100 B (about 23 MB, hot). A lookup crosses to
//! the owning shard and back, finds the batch through the offset index, reads it and checks its
//! CRC and offsets; `engine_fetch_decode` also decodes the one record asked for
//! (`FetchData::batches`, which does not check the CRC again, then `Batch::record_at`), as a
//! caller reading one record would; `engine_fetch_record` asks the engine for that record
//! (`Engine::fetch_record`), which the shard decodes from the batch it has just checked.
//!
//! Group `lookup_1kib`: 2,000 batches of 100 records of 1 KiB (about 200 MB, hot), where
//! `engine_fetch_record` reads a looked-up batch whole once and afterwards only the 1 KiB chunks
//! holding the record (`segment/lookup.rs`); `pread_floor` reads a whole batch and
//! `pread_4kib_floor` one 4 KiB block, a block store's lookup.
//!
//! Expected before measuring: the `pread` floor is a few microseconds (a 10 KiB copy); the
//! engine adds a channel round trip and a thread wake-up (tens of microseconds when the shard
//! sleeps), an index search and a CRC over 10 KiB (about a microsecond).

use std::fs::File;
use std::hint::black_box;
use std::os::unix::fs::FileExt;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions};
use seglog::format::{BatchBuilder, NewRecord};
use seglog::types::{Offset, TopicName};

const RECORDS_PER_BATCH: usize = 100;
const PAGE_BYTES: u64 = 4096;

fn batch(record_bytes: usize) -> Bytes {
    let value: Vec<u8> = (0..record_bytes).map(|i| (i * 7 % 251) as u8).collect();
    let mut builder = BatchBuilder::with_capacity(0, (record_bytes + 32) * RECORDS_PER_BATCH);
    for _ in 0..RECORDS_PER_BATCH {
        builder.push(&NewRecord {
            timestamp_ms: 1_700_000_000_000,
            key: None,
            value: Some(&value),
            headers: &[],
        });
    }
    builder.build().unwrap_or_default()
}

/// A small xorshift: lookups at random offsets without a dependency.
struct Random(u64);

impl Random {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

fn lookups(c: &mut Criterion) {
    lookups_in(c, "lookup", 100, 20_000);
    lookups_in(c, "lookup_1kib", 1024, 2_000);
}

fn lookups_in(c: &mut Criterion, group_name: &str, record_bytes: usize, batches: u64) {
    let dir = tempfile::tempdir().unwrap_or_else(|_| unreachable!());
    let config = EngineConfig::default()
        .with_shard_count(1)
        .with_pin_shards(false);
    let engine = Engine::open(dir.path(), config).unwrap_or_else(|_| unreachable!());
    let topic = engine
        .create_topic("bench", 1, LogConfig::default())
        .unwrap_or_else(|_| unreachable!());
    let batch = batch(record_bytes);
    for _ in 0..batches {
        let _ = engine
            .append(&topic, 0, batch.clone(), Durability::Written)
            .wait();
    }
    let records = batches * RECORDS_PER_BATCH as u64;
    let options = FetchOptions {
        max_bytes: 1,
        ..FetchOptions::default()
    };
    let mut group = c.benchmark_group(group_name);
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    group.bench_function("engine_fetch", |b| {
        b.iter(|| fetch(&engine, &topic, Offset(random.below(records)), options))
    });
    group.bench_function("engine_fetch_decode", |b| {
        b.iter(|| {
            let offset = random.below(records);
            let data = engine.fetch(&topic, 0, Offset(offset), options).wait();
            let record = data.ok().and_then(|data| {
                let batch = data.batches().next()?.ok()?;
                batch.record_at(offset as i64).ok().flatten()
            });
            black_box(record)
        })
    });
    group.bench_function("engine_fetch_record", |b| {
        b.iter(|| {
            let offset = Offset(random.below(records));
            black_box(engine.fetch_record(&topic, 0, offset).wait().ok().flatten())
        })
    });
    let file = pread_file(dir.path(), &batch, batches);
    let mut buffer = vec![0u8; batch.len()];
    group.bench_function("pread_floor", |b| {
        b.iter(|| {
            let position = random.below(batches) * batch.len() as u64;
            black_box(file.read_at(&mut buffer, position).ok())
        })
    });
    if batch.len() as u64 > PAGE_BYTES {
        let pages = batches * batch.len() as u64 / PAGE_BYTES;
        let mut page = vec![0u8; PAGE_BYTES as usize];
        group.bench_function("pread_4kib_floor", |b| {
            b.iter(|| {
                black_box(
                    file.read_at(&mut page, random.below(pages) * PAGE_BYTES)
                        .ok(),
                )
            })
        });
    }
    group.finish();
    let _ = engine.close();
}

fn fetch(engine: &Engine, topic: &TopicName, offset: Offset, options: FetchOptions) -> Bytes {
    engine
        .fetch(topic, 0, offset, options)
        .wait()
        .map(|data| data.records)
        .unwrap_or_default()
}

/// The same bytes in one plain file, read back with `pread` as the floor.
fn pread_file(dir: &std::path::Path, batch: &Bytes, batches: u64) -> File {
    let path = dir.join("pread-floor");
    let file = File::options()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap_or_else(|_| unreachable!());
    for index in 0..batches {
        let _ = file.write_all_at(batch, index * batch.len() as u64);
    }
    file
}

criterion_group!(benches, lookups);
criterion_main!(benches);
