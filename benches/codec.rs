//! Batch encode and decode throughput (MB/s of batch bytes) for 100 B and 1 KiB records.
//!
//! Expected before measuring: encoding is a memcpy of the values plus a few varints per record
//! and one CRC-32C pass (hardware CRC runs at several GB/s), so ≥ 1 GB/s for 1 KiB records;
//! decode-with-CRC is one CRC pass (several GB/s); decoding every record adds per-record varint
//! parsing, so 100 B records decode slower per byte than 1 KiB records. Reading in place (no CRC,
//! no allocation: a fetch result's reader) is bound by that parsing alone.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use seglog::format::{Batch, BatchBuilder, NewRecord};

const BATCH_BYTES_TARGET: usize = 64 * 1024;

fn build_batch(value: &[u8]) -> Bytes {
    let mut builder = BatchBuilder::with_capacity(0, BATCH_BYTES_TARGET + 1024);
    let mut index = 0i64;
    while builder.size_bytes() < BATCH_BYTES_TARGET {
        let key = index.to_be_bytes();
        builder.push(&NewRecord {
            timestamp_ms: 1_700_000_000_000 + index,
            key: Some(&key),
            value: Some(value),
            headers: &[],
        });
        index += 1;
    }
    builder.build().unwrap_or_default()
}

fn bench_codec(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch");
    for record_bytes in [100usize, 1024] {
        let value: Vec<u8> = (0..record_bytes).map(|i| (i * 31 % 251) as u8).collect();
        let batch = build_batch(&value);
        group.throughput(Throughput::Bytes(batch.len() as u64));
        // Baseline in the same run: copying the same bytes, the floor for any encoder.
        group.bench_with_input(
            BenchmarkId::new("baseline_memcpy", record_bytes),
            &batch,
            |b, batch| b.iter(|| black_box(batch.to_vec())),
        );
        group.bench_with_input(
            BenchmarkId::new("encode", record_bytes),
            &value,
            |b, value| b.iter(|| black_box(build_batch(value))),
        );
        group.bench_with_input(
            BenchmarkId::new("decode_crc", record_bytes),
            &batch,
            |b, batch| {
                b.iter(|| black_box(Batch::decode(batch, u64::MAX).map(|batch| batch.size_bytes())))
            },
        );
        group.bench_with_input(
            BenchmarkId::new("decode_records", record_bytes),
            &batch,
            |b, batch| {
                b.iter(|| {
                    let decoded = Batch::decode(batch, u64::MAX).and_then(|batch| batch.records());
                    black_box(decoded.map(|records| records.len()))
                })
            },
        );
        // A fetch result's reader: the engine checked the CRC, records are read in place.
        group.bench_with_input(
            BenchmarkId::new("read_in_place", record_bytes),
            &batch,
            |b, batch| {
                b.iter(|| {
                    let value_bytes = Batch::decode_without_crc_check(batch, u64::MAX)
                        .and_then(|batch| batch.record_section())
                        .map(|section| {
                            section
                                .iter()
                                .map(|record| {
                                    record.map_or(0, |record| record.value.map_or(0, <[u8]>::len))
                                })
                                .sum::<usize>()
                        });
                    black_box(value_bytes)
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench_codec);
criterion_main!(benches);
