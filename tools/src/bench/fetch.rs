//! Consumers of a data set appended beforehand: sequential reads of whole partitions
//! (`fetch-hot`, `fetch-cold`) and single records at random offsets (`random-fetch`).

use std::sync::atomic::Ordering;
use std::thread;
use std::time::Instant;

use anyhow::Context;
use seglog::engine::{Engine, FetchOptions, Isolation};
use seglog::log::FetchData;
use seglog::types::{Offset, PartitionId, TopicName};

use super::progress::{
    Limit, Phase, Shared, WorkerStats, merge, micros, phase_seconds, progress_bar, watch,
};
use super::settings::Settings;

/// Bytes a sequential consumer asks for per fetch.
const FETCH_MAX_BYTES: u64 = 1024 * 1024;

/// How a sequential consumer treats the end of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtEnd {
    /// Start over from the log start while the limit allows (a timed `fetch-hot`).
    StartOver,
    /// Done with that partition (a `--records` run, and `fetch-cold`: a second pass is hot).
    Stop,
}

pub fn fetch_options(max_bytes: u64) -> FetchOptions {
    FetchOptions {
        max_bytes,
        min_bytes: 1,
        max_wait_ms: 0,
        isolation: Isolation::LogEnd,
    }
}

/// Records in the whole batches of a fetch result (the engine checked their CRCs).
pub fn count_records(data: &FetchData) -> anyhow::Result<u64> {
    let mut count = 0;
    for batch in data.batches() {
        let batch = batch.context("a fetched batch does not decode")?;
        count += u64::try_from(batch.header().records_count).unwrap_or(0);
    }
    Ok(count)
}

/// The partitions consumer `consumer` reads: every `consumers`-th one, or, with more consumers
/// than partitions, one partition shared with others.
pub fn consumer_partitions(settings: &Settings, consumer: usize) -> Vec<PartitionId> {
    let consumers = settings.consumers as u64;
    let partitions = u64::from(settings.partitions);
    let consumer = consumer as u64;
    if consumers > partitions {
        vec![PartitionId::try_from(consumer % partitions).unwrap_or(0)]
    } else {
        (0..partitions)
            .filter(|partition| partition % consumers == consumer)
            .filter_map(|partition| PartitionId::try_from(partition).ok())
            .collect()
    }
}

/// `settings.consumers` threads read their partitions from the start, a fetch of up to 1 MiB
/// each, until `limit` (a time limit only; record counts end at the partitions' ends).
pub fn sequential_phase(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
    limit: Limit,
    at_end: AtEnd,
) -> anyhow::Result<Phase> {
    let shared = Shared::default();
    let bar = progress_bar(limit, "fetch");
    let started = Instant::now();
    let stats = thread::scope(|scope| {
        let handles = (0..settings.consumers)
            .map(|consumer| {
                let shared = &shared;
                let partitions = consumer_partitions(settings, consumer);
                scope.spawn(move || {
                    read_partitions(engine, topic, partitions, shared, (limit, started), at_end)
                        .map(WorkerStats::finished_now)
                })
            })
            .collect();
        watch(handles, &bar, limit, started, || {
            shared.fetched.load(Ordering::Relaxed)
        })
    })?;
    merge("fetch", &stats, Some(phase_seconds(started, &stats)))
}

/// A sequential consumer: reads its partitions in turn, a fetch each, from the start.
fn read_partitions(
    engine: &Engine,
    topic: &TopicName,
    partitions: Vec<PartitionId>,
    shared: &Shared,
    (limit, started): (Limit, Instant),
    at_end: AtEnd,
) -> anyhow::Result<WorkerStats> {
    let mut stats = WorkerStats::new()?;
    let mut positions: Vec<(PartitionId, Offset, bool)> = partitions
        .into_iter()
        .map(|partition| (partition, Offset(0), false))
        .collect();
    while !limit.expired(started) && !positions.iter().all(|(_, _, done)| *done) {
        for (partition, offset, done) in positions.iter_mut().filter(|(_, _, done)| !*done) {
            let sent = Instant::now();
            let data = engine
                .fetch(topic, *partition, *offset, fetch_options(FETCH_MAX_BYTES))
                .wait()
                .context("fetch failed")?;
            stats.latency.saturating_record(micros(sent.elapsed()));
            let bytes = data.records.len() as u64;
            let records = count_records(&data)?;
            stats.records += records;
            stats.bytes += bytes;
            shared.fetched.fetch_add(records, Ordering::Relaxed);
            *offset = Offset(offset.0 + records);
            if records == 0 || *offset >= data.log_end_offset {
                match (at_end, limit) {
                    (AtEnd::StartOver, Limit::Time(_)) => *offset = data.log_start_offset,
                    _ => *done = true,
                }
            }
        }
    }
    Ok(stats)
}

/// Each partition's `[log start, log end)`, read before the cache is dropped.
pub fn partition_ranges(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
) -> anyhow::Result<Vec<(PartitionId, u64, u64)>> {
    (0..settings.partitions)
        .map(|partition| {
            let data = engine
                .fetch(topic, partition, Offset(0), fetch_options(1))
                .wait()
                .context("fetch failed")?;
            Ok((partition, data.log_start_offset.0, data.log_end_offset.0))
        })
        .filter(|range| !matches!(range, Ok((_, start, end)) if start >= end))
        .collect()
}

/// `random-fetch`: `settings.consumers` threads, one lookup in flight each (the queue depth),
/// each asking for the record at a uniformly random offset of a random partition
/// (`Engine::fetch_record`: the shard reads and checks the batch that holds it and answers with
/// the record). A record count limits the lookups; bytes are the records' keys and values.
pub fn random_phase(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
    ranges: &[(PartitionId, u64, u64)],
    limit: Limit,
) -> anyhow::Result<Phase> {
    anyhow::ensure!(!ranges.is_empty(), "random-fetch: the data set is empty");
    let shared = Shared::default();
    let bar = progress_bar(limit, "fetch");
    let started = Instant::now();
    let stats = thread::scope(|scope| {
        let handles = (0..settings.consumers)
            .map(|consumer| {
                let shared = &shared;
                scope.spawn(move || {
                    let mut rng = fastrand::Rng::with_seed(consumer as u64 + 1);
                    let mut stats = WorkerStats::new()?;
                    while shared.claim(limit, started, 1) {
                        let (partition, start, end) = ranges[rng.usize(..ranges.len())];
                        let offset = Offset(rng.u64(start..end));
                        let sent = Instant::now();
                        let record = engine
                            .fetch_record(topic, partition, offset)
                            .wait()
                            .context("fetch failed")?
                            .with_context(|| format!("no record at {partition}/{offset}"))?;
                        stats.latency.saturating_record(micros(sent.elapsed()));
                        stats.records += 1;
                        stats.bytes += record.size_bytes();
                        shared.fetched.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(stats.finished_now())
                })
            })
            .collect();
        watch(handles, &bar, limit, started, || {
            shared.fetched.load(Ordering::Relaxed)
        })
    })?;
    merge("fetch", &stats, Some(phase_seconds(started, &stats)))
}
