//! `tail`: producers and consumers together. Each record's value starts with the microsecond
//! wall clock at which it was made; a consumer's end-to-end latency is the time it decoded the
//! record minus that stamp. With `--throughput` the stamp is taken when the batch is made, before
//! it waits for its turn, so that wait counts as a producer's linger would.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use seglog::engine::Engine;
use seglog::types::{Offset, PartitionId, TopicName};

use super::fetch::{consumer_partitions, fetch_options};
use super::produce::Producing;
use super::progress::{
    Phase, Shared, WorkerStats, join_all, merge, now_micros, phase_seconds, progress_bar, watch,
};
use super::settings::Settings;

/// How long consumers keep reading after the producers stopped, at most.
const TAIL_GRACE: Duration = Duration::from_secs(5);
/// Bytes a consumer asks for per fetch.
const FETCH_MAX_BYTES: u64 = 1024 * 1024;

pub fn tail_phases(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
) -> anyhow::Result<Vec<Phase>> {
    let shared = Shared::paced(settings.records_per_s_cap);
    let limit = settings.limit;
    let bar = progress_bar(limit, "tail");
    let started = Instant::now();
    let (producer_stats, consumer_stats) = thread::scope(|scope| {
        let consumers: Vec<_> = (0..settings.consumers)
            .map(|consumer| {
                let shared = &shared;
                let partitions = consumer_partitions(settings, consumer);
                scope.spawn(move || follow(engine, topic, partitions, shared))
            })
            .collect();
        let producers = (0..settings.producers)
            .map(|producer| {
                let worker = Producing {
                    engine,
                    topic,
                    settings,
                    shared: &shared,
                    limit,
                    started,
                    producer,
                };
                scope.spawn(move || worker.run())
            })
            .collect();
        let producer_stats = watch(producers, &bar, limit, started, || {
            shared.appended.load(Ordering::Relaxed)
        });
        shared.producers_done.store(true, Ordering::Release);
        (producer_stats, join_all(consumers))
    });
    let producer_stats = producer_stats?;
    let seconds = phase_seconds(started, &producer_stats);
    let append = merge(settings.ack_name(), &producer_stats, Some(seconds))?;
    let end_to_end = merge("end_to_end", &consumer_stats?, None)?;
    Ok(vec![append, end_to_end])
}

/// A `tail` consumer: follows its partitions from the start, recording each record's end-to-end
/// latency, until the producers stopped and everything appended was read (or [`TAIL_GRACE`]).
fn follow(
    engine: &Engine,
    topic: &TopicName,
    partitions: Vec<PartitionId>,
    shared: &Shared,
) -> anyhow::Result<WorkerStats> {
    let mut stats = WorkerStats::new()?;
    let mut positions: Vec<(PartitionId, Offset)> = partitions
        .into_iter()
        .map(|partition| (partition, Offset(0)))
        .collect();
    let mut stopped_at: Option<Instant> = None;
    loop {
        let mut caught_up = true;
        let mut progressed = false;
        for (partition, offset) in &mut positions {
            let data = engine
                .fetch(topic, *partition, *offset, fetch_options(FETCH_MAX_BYTES))
                .wait()
                .context("fetch failed")?;
            let now_us = now_micros();
            stats.bytes += data.records.len() as u64;
            for batch in data.batches() {
                let batch = batch.context("a fetched batch does not decode")?;
                let section = batch
                    .record_section()
                    .context("a fetched batch does not decode")?;
                for record in section.iter() {
                    let record = record.context("a fetched batch does not decode")?;
                    if let Some(stamp) = record
                        .value
                        .and_then(|value| value.get(..8))
                        .and_then(|stamp| <[u8; 8]>::try_from(stamp).ok())
                    {
                        let latency = now_us.saturating_sub(u64::from_le_bytes(stamp));
                        stats.latency.saturating_record(latency.max(1));
                    }
                    stats.records += 1;
                    progressed = true;
                }
                let next = u64::try_from(batch.last_offset()).unwrap_or(0) + 1;
                *offset = Offset(offset.0.max(next));
            }
            if *offset < data.log_end_offset {
                caught_up = false;
            }
        }
        if shared.producers_done.load(Ordering::Acquire) {
            let stopped = *stopped_at.get_or_insert_with(Instant::now);
            if caught_up || stopped.elapsed() > TAIL_GRACE {
                break;
            }
        }
        if !progressed {
            thread::sleep(Duration::from_micros(50));
        }
    }
    shared.fetched.fetch_add(stats.records, Ordering::Relaxed);
    Ok(stats)
}
