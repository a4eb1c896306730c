//! Compaction throughput (MB/s of dirty log cleaned) for 1 KiB records over 100 keys, beside the
//! same bytes read back once (a full read of the log, the floor any cleaner pays) in the same run.
//!
//! Expected before measuring: pass one decodes every record and hashes its key with MD5
//! (~300-500 MB/s for 1 KiB values), pass two decodes again, re-encodes the few kept records and
//! writes small files: roughly half the read rate.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use seglog::cleaner::offset_map::OffsetMap;
use seglog::config::LogConfig;
use seglog::format::{BatchBuilder, NewRecord};
use seglog::io::pio::PositionedIo;
use seglog::log::{LogOpenOptions, LogWriteMode, PartitionLog};
use seglog::types::{Offset, TimestampMs, TopicName, TopicPartition};

const RECORDS: u64 = 8 * 1024;
const KEYS: u64 = 100;

fn build_log(dir: &std::path::Path) -> Option<PartitionLog> {
    let mut config = LogConfig::default()
        .with_segment_bytes(1 << 20)
        .with_segment_index_bytes(1 << 16);
    config.set("cleanup.policy", "compact").ok()?;
    let tp = TopicPartition {
        topic: TopicName::parse("bench").ok()?,
        partition: 0,
    };
    let options = LogOpenOptions {
        had_clean_shutdown: false,
        recovery_point: Offset(0),
        log_start_offset: None,
        now: TimestampMs(0),
        mode: LogWriteMode::default(),
    };
    let (mut log, _) = PartitionLog::open(Arc::new(PositionedIo), dir, tp, config, options).ok()?;
    let value = vec![7u8; 1024];
    for offset in 0..RECORDS {
        let key = (offset % KEYS).to_be_bytes();
        let mut builder = BatchBuilder::new(0);
        builder.push(&NewRecord {
            timestamp_ms: 1,
            key: Some(&key),
            value: Some(&value),
            headers: &[],
        });
        log.append(builder.build()?, TimestampMs(1)).ok()?;
    }
    Some(log)
}

fn read_all(log: &mut PartitionLog) -> usize {
    let mut offset = log.log_start_offset();
    let mut bytes = 0;
    while offset < log.log_end_offset() {
        let Ok(data) = log.read(offset, 1 << 20) else {
            break;
        };
        if data.records.is_empty() {
            break;
        }
        bytes += data.records.len();
        let last = seglog::format::batch::BatchIter::new(data.records, u64::MAX)
            .filter_map(Result::ok)
            .last();
        offset = last.map_or(log.log_end_offset(), |batch| {
            Offset(batch.last_offset() as u64 + 1)
        });
    }
    bytes
}

fn bench_compaction(c: &mut Criterion) {
    let Ok(probe_dir) = tempfile::tempdir_in(".") else {
        return;
    };
    let Some(probe) = build_log(probe_dir.path()) else {
        return;
    };
    let dirty_bytes = probe.size_bytes();
    drop(probe);
    let mut group = c.benchmark_group("compaction_1KiB_records_100_keys");
    group.throughput(Throughput::Bytes(dirty_bytes));
    group.sample_size(10);
    group.bench_function("compact", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let Ok(dir) = tempfile::tempdir_in(".") else {
                    continue;
                };
                let Some(mut log) = build_log(dir.path()) else {
                    continue;
                };
                let Ok(mut map) = OffsetMap::new(1 << 20) else {
                    continue;
                };
                let start = Instant::now();
                black_box(log.compact(&mut map, Offset(0), 0, TimestampMs(1)).ok());
                total += start.elapsed();
            }
            total
        })
    });
    group.bench_function("baseline_read_all", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let Ok(dir) = tempfile::tempdir_in(".") else {
                    continue;
                };
                let Some(mut log) = build_log(dir.path()) else {
                    continue;
                };
                let start = Instant::now();
                black_box(read_all(&mut log));
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, bench_compaction);
criterion_main!(benches);
