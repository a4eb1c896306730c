//! Producers: threads that append until the phase's limit, either whole batches straight to
//! `Engine::append` (the default) or records one at a time through seglog's `Producer`
//! (`--linger-ms`).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use seglog::engine::{Engine, Pending};
use seglog::error::AppendError;
use seglog::log::AppendInfo;
use seglog::producer::{ProducerConfig, ProducerRecord, SendFuture};
use seglog::types::{PartitionId, TopicName};

use super::batches::{BatchMaker, RecordMaker};
use super::progress::{
    Limit, Phase, Shared, WorkerStats, merge, micros, now_micros, phase_seconds,
    process_cpu_seconds, progress_bar, sleep_until, watch,
};
use super::settings::Settings;

/// One append phase: `settings.producers` threads until `limit`, merged as phase `name`.
pub fn append_phase(
    engine: &Engine,
    topic: &TopicName,
    settings: &Settings,
    limit: Limit,
    name: &'static str,
) -> anyhow::Result<Phase> {
    let shared = Shared::paced(settings.records_per_s_cap);
    let bar = progress_bar(limit, name);
    let started = Instant::now();
    let cpu_started = process_cpu_seconds();
    let stats = thread::scope(|scope| {
        let handles = (0..settings.producers)
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
        watch(handles, &bar, limit, started, || {
            shared.appended.load(Ordering::Relaxed)
        })
    })?;
    // What was acknowledged once written may not be durable yet: the phase ends when it is on
    // the disk, as the disk's buffered write ends with its fsync. Timed on its own and added to
    // the workers' time: the progress poll that noticed their end is no part of either.
    let flush_s = match settings.durable_appends() {
        true => None,
        false => Some(final_flush_seconds(engine)?),
    };
    let seconds = phase_seconds(started, &stats) + flush_s.unwrap_or(0.0);
    let mut phase = merge(name, &stats, Some(seconds))?;
    phase.final_flush_s = flush_s;
    phase.cpu_s = Some(process_cpu_seconds() - cpu_started);
    Ok(phase)
}

/// Syncs everything the engine wrote; returns how long that took, in seconds.
fn final_flush_seconds(engine: &Engine) -> anyhow::Result<f64> {
    let flush_started = Instant::now();
    engine
        .flush_all()
        .context("the append phase's final flush failed")?;
    Ok(flush_started.elapsed().as_secs_f64())
}

/// One producer thread's view of its phase.
#[derive(Clone, Copy)]
pub struct Producing<'a> {
    pub engine: &'a Engine,
    pub topic: &'a TopicName,
    pub settings: &'a Settings,
    pub shared: &'a Shared,
    pub limit: Limit,
    pub started: Instant,
    pub producer: usize,
}

/// An append in flight: when it was due (sent, unless `--throughput` scheduled it earlier than
/// it could go), its answer, its records and bytes.
type InFlight = (Instant, Pending<AppendInfo, AppendError>, u64, u64);

impl Producing<'_> {
    /// Appends until the limit; the figures are stamped with the worker's own end.
    pub fn run(self) -> anyhow::Result<WorkerStats> {
        self.append_until_limit().map(WorkerStats::finished_now)
    }

    fn append_until_limit(self) -> anyhow::Result<WorkerStats> {
        if self.settings.linger_ms.is_some() {
            return self.send_records();
        }
        let mut maker = BatchMaker::new(self.settings, self.producer as u64 + 1);
        if self.settings.fresh_batches() {
            self.append_batches(|| maker.batch(now_micros()))
        } else {
            let (batch, records) = maker.batch(now_micros())?;
            self.append_batches(|| Ok((batch.clone(), records)))
        }
    }

    /// Appends the batches `next_batch` makes, round-robin over the partitions starting at its
    /// own, with up to `appends_inflight` appends in flight, until the limit.
    fn append_batches(
        &self,
        mut next_batch: impl FnMut() -> anyhow::Result<(Bytes, u64)>,
    ) -> anyhow::Result<WorkerStats> {
        let settings = self.settings;
        let mut stats = WorkerStats::new()?;
        let partitions = u64::from(settings.partitions);
        let mut next_partition = self.producer as u64 % partitions;
        let mut inflight = VecDeque::with_capacity(settings.appends_inflight());
        let durability = settings.durability();
        let finish = |(due, pending, records, bytes): InFlight, stats: &mut WorkerStats| {
            pending.wait().context("append failed")?;
            stats.latency.saturating_record(micros(due.elapsed()));
            stats.records += records;
            stats.bytes += bytes;
            self.shared.appended.fetch_add(records, Ordering::Relaxed);
            anyhow::Ok(())
        };
        loop {
            let (batch, records) = next_batch()?;
            let Some(due) = self.shared.claim_send(self.limit, self.started, records) else {
                break;
            };
            // Capped: the answers that come before the batch is due are taken meanwhile.
            while Instant::now() < due
                && let Some(oldest) = inflight.pop_front()
            {
                finish(oldest, &mut stats)?;
            }
            sleep_until(due);
            let partition = PartitionId::try_from(next_partition).unwrap_or(0);
            next_partition = (next_partition + 1) % partitions;
            let bytes = batch.len() as u64;
            let pending = self.engine.append(self.topic, partition, batch, durability);
            inflight.push_back((due, pending, records, bytes));
            if inflight.len() >= settings.appends_inflight()
                && let Some(oldest) = inflight.pop_front()
            {
                finish(oldest, &mut stats)?;
            }
        }
        while let Some(oldest) = inflight.pop_front() {
            finish(oldest, &mut stats)?;
        }
        Ok(stats)
    }

    /// Sends records one at a time through a `Producer` of its own (batch.size, linger.ms,
    /// compression.type and acks from the settings; the partitioner chooses: murmur2 of the key,
    /// sticky without one). Latency is per record, send to acknowledgement; bytes are the
    /// records' keys and values. Capped (`--throughput`), latency runs from when the record was
    /// due.
    fn send_records(&self) -> anyhow::Result<WorkerStats> {
        let settings = self.settings;
        let config = ProducerConfig::default()
            .with_batch_size_bytes(settings.batch_bytes)
            .with_linger_ms(settings.linger_ms.unwrap_or(0))
            .with_compression(settings.compression)
            .with_acks(settings.durability())
            .with_block_ms_max(u64::MAX);
        let producer = self
            .engine
            .producer(config)
            .context("cannot start a producer")?;
        let mut maker = RecordMaker::new(settings, self.producer as u64 + 1);
        let mut stats = WorkerStats::new()?;
        let inflight_max = settings.appends_inflight() * settings.records_per_batch();
        let mut inflight: VecDeque<(Instant, SendFuture, u64)> = VecDeque::new();
        let finish = |(due, future, bytes): (Instant, SendFuture, u64), stats: &mut WorkerStats| {
            future.wait().context("send failed")?;
            stats.latency.saturating_record(micros(due.elapsed()));
            stats.records += 1;
            stats.bytes += bytes;
            self.shared.appended.fetch_add(1, Ordering::Relaxed);
            anyhow::Ok(())
        };
        while let Some(due) = self.shared.claim_send(self.limit, self.started, 1) {
            while Instant::now() < due
                && let Some(oldest) = inflight.pop_front()
            {
                finish(oldest, &mut stats)?;
            }
            sleep_until(due);
            let (key, value) = maker.next(now_micros());
            let bytes = (key.map_or(0, <[u8]>::len) + value.len()) as u64;
            let record = ProducerRecord::new(self.topic, key, Some(value));
            let future = producer.send(&record).context("send failed")?;
            inflight.push_back((due, future, bytes));
            while inflight.len() >= inflight_max
                || inflight
                    .front()
                    .is_some_and(|(_, future, _)| future.is_complete())
            {
                let Some(oldest) = inflight.pop_front() else {
                    break;
                };
                finish(oldest, &mut stats)?;
            }
        }
        while let Some(oldest) = inflight.pop_front() {
            finish(oldest, &mut stats)?;
        }
        producer.close().context("cannot close the producer")?;
        Ok(stats)
    }
}
