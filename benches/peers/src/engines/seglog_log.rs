//! seglog through its public engine API: one topic with one partition on one shard; appends of
//! prebuilt RecordBatch v2 batches of 100 records (`Durability::Written` without sync,
//! `Durability::Durable` with); scans through `Engine::fetch`, `FetchData::batches` and records
//! decoded in place (`RecordSection::iter`), keeping the next fetch in flight; lookups through
//! `Engine::fetch_record`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions, Pending};
use seglog::error::ReadError;
use seglog::format::{BatchBuilder, NewRecord};
use seglog::log::FetchData;
use seglog::types::{Offset, TopicName};

use super::LogStore;
use crate::workload::{BATCH_RECORDS, Payloads, PeerError, PeerResult, ScanTotals, context};

const TOPIC: &str = "peers";
const TIMESTAMP_MS: i64 = 1_700_000_000_000;
/// A scan's fetch size: Kafka's `max.partition.fetch.bytes` default.
const SCAN_FETCH_BYTES: u64 = 1024 * 1024;

pub struct SeglogLog {
    seglog: SeglogEngine,
    /// Appends a single writer keeps in flight without sync (with sync it waits for each).
    in_flight_max: usize,
    /// Producer threads appending to the one partition (group commit when > 1).
    producers: usize,
}

fn engine_config(direct_writes: bool) -> EngineConfig {
    EngineConfig::default()
        .with_shard_count(1)
        .with_pin_shards(false)
        .with_direct_writes(direct_writes)
}

impl SeglogLog {
    pub fn open(
        dir: &Path,
        in_flight_max: usize,
        producers: usize,
        direct_writes: bool,
    ) -> PeerResult<SeglogLog> {
        let seglog = SeglogEngine::open(dir.join("seglog"), engine_config(direct_writes))?;
        Ok(SeglogLog {
            seglog,
            in_flight_max: in_flight_max.max(1),
            producers: producers.max(1),
        })
    }

    fn append_pipelined(&mut self, payloads: &Payloads, sync: bool) -> PeerResult<Vec<u64>> {
        let durability = if sync {
            Durability::Durable
        } else {
            Durability::Written
        };
        let window = if sync { 1 } else { self.in_flight_max };
        let mut latencies_us = Vec::with_capacity(payloads.batch_count() as usize);
        let mut in_flight = VecDeque::with_capacity(window);
        for batch_index in 0..payloads.batch_count() {
            if in_flight.len() == window {
                wait_one(&mut in_flight, &mut latencies_us)?;
            }
            let first_offset = batch_index * BATCH_RECORDS as u64;
            let batch = self.seglog.batch(payloads, first_offset)?;
            let seglog = &self.seglog;
            let pending = seglog.engine.append(&seglog.topic, 0, batch, durability);
            in_flight.push_back((Instant::now(), first_offset, pending));
        }
        while !in_flight.is_empty() {
            wait_one(&mut in_flight, &mut latencies_us)?;
        }
        Ok(latencies_us)
    }

    /// `producers` threads share the partition; each appends one batch at a time.
    fn append_producers(&mut self, payloads: &Payloads, sync: bool) -> PeerResult<Vec<u64>> {
        let durability = if sync {
            Durability::Durable
        } else {
            Durability::Written
        };
        let distinct = payloads.distinct_batches();
        let batches: Vec<Bytes> = (0..distinct)
            .map(|index| self.seglog.batch(payloads, index * BATCH_RECORDS as u64))
            .collect::<PeerResult<_>>()?;
        let next_batch = AtomicU64::new(0);
        let total = payloads.batch_count();
        let results: Vec<PeerResult<Vec<u64>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..self.producers)
                .map(|_| {
                    scope.spawn(|| {
                        let mut latencies_us = Vec::new();
                        loop {
                            let index = next_batch.fetch_add(1, Ordering::Relaxed);
                            if index >= total {
                                return Ok(latencies_us);
                            }
                            let batch = batches[(index % distinct) as usize].clone();
                            let started = Instant::now();
                            self.seglog
                                .engine
                                .append(&self.seglog.topic, 0, batch, durability)
                                .wait()
                                .map_err(context("append"))?;
                            latencies_us.push(started.elapsed().as_micros() as u64);
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|_| Err(PeerError("producer panicked".to_owned())))
                })
                .collect()
        });
        let mut latencies_us = Vec::with_capacity(total as usize);
        for result in results {
            latencies_us.extend(result?);
        }
        Ok(latencies_us)
    }

    fn fetch_async(&self, offset: u64) -> Pending<FetchData, ReadError> {
        let options = FetchOptions {
            max_bytes: SCAN_FETCH_BYTES,
            ..FetchOptions::default()
        };
        let seglog = &self.seglog;
        seglog
            .engine
            .fetch(&seglog.topic, 0, Offset(offset), options)
    }
}

/// A seglog engine in a directory of its own, with its topic of one partition (default
/// `LogConfig`) and the prebuilt batches appended to it; closed when dropped.
pub(super) struct SeglogEngine {
    dir: PathBuf,
    config: EngineConfig,
    pub(super) engine: Engine,
    pub(super) topic: TopicName,
    batches: PrebuiltBatches,
}

impl SeglogEngine {
    pub(super) fn open(dir: PathBuf, config: EngineConfig) -> PeerResult<SeglogEngine> {
        let engine = Engine::open(&dir, config.clone()).map_err(context("Engine::open"))?;
        let topic = engine
            .create_topic(TOPIC, 1, LogConfig::default())
            .map_err(context("create_topic"))?;
        Ok(SeglogEngine {
            dir,
            config,
            engine,
            topic,
            batches: PrebuiltBatches::default(),
        })
    }

    /// The prebuilt batch holding offsets `first_offset..first_offset + 100`.
    pub(super) fn batch(&mut self, payloads: &Payloads, first_offset: u64) -> PeerResult<Bytes> {
        self.batches.batch(payloads, first_offset)
    }

    /// Closes the engine and opens it again on the same directory, configured as before.
    pub(super) fn reopen(&mut self) -> PeerResult<()> {
        self.engine.close().map_err(context("Engine::close"))?;
        self.engine =
            Engine::open(&self.dir, self.config.clone()).map_err(context("Engine::open"))?;
        Ok(())
    }

    /// The engine's point lookup (`Engine::fetch_record`) of `offset`, checked against what was
    /// written.
    pub(super) fn look_up(&self, payloads: &Payloads, offset: u64) -> PeerResult<()> {
        let record = self
            .engine
            .fetch_record(&self.topic, 0, Offset(offset))
            .wait()
            .map_err(context("fetch_record"))?
            .ok_or_else(|| PeerError(format!("record {offset} missing")))?;
        payloads.check(offset, record.value.as_deref().unwrap_or_default())
    }
}

impl Drop for SeglogEngine {
    fn drop(&mut self) {
        let _ = self.engine.close();
    }
}

/// The offset after the last batch of `data`, from the batch headers alone; `None` if empty.
fn next_offset(data: &FetchData) -> PeerResult<Option<u64>> {
    let mut after = None;
    for batch in data.batches() {
        let batch = batch.map_err(context("decoding a fetched batch"))?;
        after = Some(batch.last_offset() as u64 + 1);
    }
    Ok(after)
}

/// Reads every record of `data` (decoded in place) into `totals`; returns the offset after its
/// last batch, `None` if it is empty.
pub(super) fn read_records(data: &FetchData, totals: &mut ScanTotals) -> PeerResult<Option<u64>> {
    let mut after = None;
    for batch in data.batches() {
        let batch = batch.map_err(context("decoding a fetched batch"))?;
        after = Some(batch.last_offset() as u64 + 1);
        let section = batch
            .record_section()
            .map_err(context("decoding records"))?;
        for record in section.iter() {
            let record = record.map_err(context("decoding a record"))?;
            totals.add(record.value.map_or(0, <[u8]>::len));
        }
    }
    Ok(after)
}

type InFlight = VecDeque<(
    Instant,
    u64,
    Pending<seglog::log::AppendInfo, seglog::error::AppendError>,
)>;

fn wait_one(in_flight: &mut InFlight, latencies_us: &mut Vec<u64>) -> PeerResult<()> {
    let Some((started, first_offset, pending)) = in_flight.pop_front() else {
        return Ok(());
    };
    let info = pending.wait().map_err(context("append"))?;
    latencies_us.push(started.elapsed().as_micros() as u64);
    if info.first_offset.0 != first_offset {
        return Err(PeerError(format!(
            "append answered first offset {}, expected {first_offset}",
            info.first_offset.0
        )));
    }
    Ok(())
}

/// RecordBatch v2 batches of 100 records, built once per record size (key: record bytes) and
/// appended again and again.
#[derive(Default)]
pub(super) struct PrebuiltBatches(Option<(usize, Vec<Bytes>)>);

impl PrebuiltBatches {
    /// The prebuilt batch holding offsets `first_offset..first_offset + 100` (base offset 0: the
    /// log stamps it).
    pub(super) fn batch(&mut self, payloads: &Payloads, first_offset: u64) -> PeerResult<Bytes> {
        if self.0.as_ref().map(|(bytes, _)| *bytes) != Some(payloads.record_bytes) {
            self.0 = Some((payloads.record_bytes, build_batches(payloads)?));
        }
        let batches = self.0.as_ref().map(|(_, batches)| batches);
        let batches = batches.ok_or_else(|| PeerError("no batches".to_owned()))?;
        let index = (first_offset / BATCH_RECORDS as u64) % batches.len() as u64;
        Ok(batches[index as usize].clone())
    }
}

fn build_batches(payloads: &Payloads) -> PeerResult<Vec<Bytes>> {
    (0..payloads.distinct_batches())
        .map(|index| {
            let capacity = BATCH_RECORDS * (payloads.record_bytes + 32) + 128;
            let mut builder = BatchBuilder::with_capacity(0, capacity);
            for delta in 0..BATCH_RECORDS as u64 {
                builder.push(&NewRecord {
                    timestamp_ms: TIMESTAMP_MS,
                    key: None,
                    value: Some(payloads.record(index * BATCH_RECORDS as u64 + delta)),
                    headers: &[],
                });
            }
            builder
                .build()
                .ok_or_else(|| PeerError("BatchBuilder::build gave no batch".to_owned()))
        })
        .collect()
}

impl LogStore for SeglogLog {
    fn append_batch(
        &mut self,
        payloads: &Payloads,
        first_offset: u64,
        sync: bool,
    ) -> PeerResult<()> {
        let durability = if sync {
            Durability::Durable
        } else {
            Durability::Written
        };
        let batch = self.seglog.batch(payloads, first_offset)?;
        let seglog = &self.seglog;
        seglog
            .engine
            .append(&seglog.topic, 0, batch, durability)
            .wait()
            .map_err(context("append"))?;
        Ok(())
    }

    fn append_all(&mut self, payloads: &Payloads, sync: bool) -> PeerResult<Vec<u64>> {
        if self.producers > 1 {
            self.append_producers(payloads, sync)
        } else {
            self.append_pipelined(payloads, sync)
        }
    }

    /// Reads ahead as Kafka's consumer does (it sends the next fetch while the application
    /// processes the last): the next fetch, from the offset after the last batch header, is sent
    /// before this one's records are read, so the shard copies and checks the next MiB while the
    /// caller reads these records.
    fn scan(&mut self, payloads: &Payloads) -> PeerResult<ScanTotals> {
        let mut totals = ScanTotals::default();
        let mut next = Some(self.fetch_async(0));
        while let Some(pending) = next.take() {
            let data = pending.wait().map_err(context("fetch"))?;
            let after = next_offset(&data)?;
            if let Some(after) = after.filter(|after| *after < payloads.record_count) {
                next = Some(self.fetch_async(after));
            }
            read_records(&data, &mut totals)?;
        }
        Ok(totals)
    }

    fn lookup(&mut self, payloads: &Payloads, offset: u64) -> PeerResult<()> {
        // The engine's point lookup: the shard decodes the one record out of its batch.
        self.seglog.look_up(payloads, offset)
    }

    fn reopen(&mut self) -> PeerResult<()> {
        self.seglog.reopen()
    }

    fn measures_reads(&self) -> bool {
        self.producers == 1
    }
}
