//! A small tokio service that embeds the seglog engine.
//!
//! It opens an engine in a temporary directory, creates a topic, and runs several producer tasks
//! that each `.await` durable appends (the engine's shards sync the appends in flight together:
//! group commit) while one consumer task long-polls the partitions with `fetch` and
//! `max_wait_ms` (a parked fetch is answered as soon as an append gives it data) until it has
//! read every record, checking that each producer's records arrive in the order it appended them.
//! It then prints a summary and closes the engine.
//!
//! The engine's data calls return a `Pending`, which is a `Future`: `.await` it on any executor.
//! The calls that block on a plain thread (opening, topic administration, `close`) have `_async`
//! forms that run off the executor's threads, so the service uses only those: it runs as well on
//! a single-threaded runtime, whose timers keep firing while the engine works (the test at the end
//! checks that).
//!
//! Run it with `cargo run --example tokio_service`; `cargo test` runs it too (the test at the end).

use std::collections::BTreeMap;
use std::error::Error;
use std::future::Future;
use std::time::{Duration, Instant};

use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions, TopicDescription};
use seglog::format::{BatchBuilder, NewRecord};
use seglog::types::{Offset, TimestampMs, TopicName};
use tokio::task::JoinSet;

type BoxError = Box<dyn Error + Send + Sync>;

/// How big the service's workload is.
#[derive(Debug, Clone, Copy)]
struct Workload {
    partitions: u32,
    producers: u32,
    records_per_producer: u32,
    records_per_append: u32,
}

const WORKLOAD: Workload = Workload {
    partitions: 4,
    producers: 8,
    records_per_producer: 500,
    records_per_append: 5,
};

/// How long a consumer fetch waits for data before answering empty (Kafka's `fetch.max.wait.ms`).
const FETCH_MAX_WAIT_MS: u64 = 200;
/// Bound on the whole run: a consumer that never sees its records fails instead of hanging.
const CONSUME_TIMEOUT: Duration = Duration::from_secs(60);

/// What the service did.
#[derive(Debug)]
struct Summary {
    records_appended: u64,
    durable_appends: u64,
    consumed: Consumed,
    description: TopicDescription,
    elapsed: Duration,
}

/// What the consumer read.
#[derive(Debug, Default)]
struct Consumed {
    records: u64,
    fetches: u64,
    /// Fetches answered a millisecond or more after they were asked: parked by the shard until an
    /// append gave them data (or, rarely, until `max_wait_ms` passed).
    fetches_that_waited: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Result<(), BoxError> {
    let summary = run_service(WORKLOAD).await?;
    print_summary(&summary);
    Ok(())
}

/// The service: engine, topic, producers and consumer, then close.
async fn run_service(workload: Workload) -> Result<Summary, BoxError> {
    let dir = tempfile::tempdir()?;
    run_service_on(workload, Engine::open_async(dir.path(), engine_config())).await
}

/// Two shards, unpinned: the service shares the machine.
fn engine_config() -> EngineConfig {
    EngineConfig::default()
        .with_shard_count(2)
        .with_pin_shards(false)
}

/// The service on the engine `open` resolves to.
async fn run_service_on(
    workload: Workload,
    open: impl Future<Output = Result<Engine, seglog::error::OpenError>>,
) -> Result<Summary, BoxError> {
    let started = Instant::now();
    let engine = open.await?;
    // Small segments, so that the run rolls a few.
    let mut config = LogConfig::default();
    config.set("segment.bytes", "16384")?;
    let topic = engine
        .create_topic_async("events", workload.partitions, config)
        .await?;

    // The consumer starts first: its first fetches find nothing and wait for the producers.
    let consumer = tokio::spawn(consume(engine.clone(), topic.clone(), workload));
    let mut producers = JoinSet::new();
    for producer in 0..workload.producers {
        producers.spawn(produce(engine.clone(), topic.clone(), producer, workload));
    }
    let mut durable_appends = 0;
    while let Some(appends) = producers.join_next().await {
        durable_appends += appends??;
    }
    let consumed = tokio::time::timeout(CONSUME_TIMEOUT, consumer)
        .await
        .map_err(|_| "the consumer did not read every record in time")???;

    let description = engine.describe_topic_async("events").await?;
    // Close writes the checkpoints and the clean-shutdown marker; dropping the handle after it
    // waits for nothing.
    engine.close_async().await?;
    Ok(Summary {
        records_appended: u64::from(workload.producers) * u64::from(workload.records_per_producer),
        durable_appends,
        consumed,
        description,
        elapsed: started.elapsed(),
    })
}

/// One producer: its records keyed `producer-<n>`, valued with their sequence number, appended
/// to partition `n % partitions` a few records per batch, each append awaited until durable.
/// Returns the number of appends.
async fn produce(
    engine: Engine,
    topic: TopicName,
    producer: u32,
    workload: Workload,
) -> Result<u64, BoxError> {
    let partition = producer % workload.partitions;
    let key = format!("producer-{producer}");
    let mut appends = 0;
    let mut sequence = 0;
    while sequence < workload.records_per_producer {
        let mut batch = BatchBuilder::new(0);
        let batch_end = (sequence + workload.records_per_append).min(workload.records_per_producer);
        for record_sequence in sequence..batch_end {
            let value = record_sequence.to_string();
            batch.push(&NewRecord {
                timestamp_ms: TimestampMs::now().0,
                key: Some(key.as_bytes()),
                value: Some(value.as_bytes()),
                headers: &[],
            });
        }
        sequence = batch_end;
        let batch = batch.build().ok_or("an empty batch")?;
        let appended = engine
            .append(&topic, partition, batch, Durability::Durable)
            .await?;
        if !appended.durable {
            return Err(format!("a durable append to partition {partition} was not synced").into());
        }
        appends += 1;
    }
    Ok(appends)
}

/// The consumer: long-polls each partition in turn from its next offset until it has read every
/// record its producers append, and checks that each producer's sequence numbers arrive in order.
async fn consume(
    engine: Engine,
    topic: TopicName,
    workload: Workload,
) -> Result<Consumed, BoxError> {
    // Producer `n` writes to partition `n % partitions`.
    let expected: Vec<u64> = (0..workload.partitions)
        .map(|partition| {
            let producers = (0..workload.producers)
                .filter(|producer| producer % workload.partitions == partition)
                .count() as u64;
            producers * u64::from(workload.records_per_producer)
        })
        .collect();
    let mut next_offsets = vec![0u64; workload.partitions as usize];
    let mut next_sequences: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut consumed = Consumed::default();
    let options = FetchOptions {
        max_wait_ms: FETCH_MAX_WAIT_MS,
        ..FetchOptions::default()
    };
    while next_offsets
        .iter()
        .zip(&expected)
        .any(|(next_offset, expected)| next_offset < expected)
    {
        for partition in 0..workload.partitions {
            let next_offset = &mut next_offsets[partition as usize];
            if *next_offset >= expected[partition as usize] {
                continue;
            }
            let asked = Instant::now();
            let fetched = engine
                .fetch(&topic, partition, Offset(*next_offset), options)
                .await?;
            consumed.fetches += 1;
            if asked.elapsed() >= Duration::from_millis(1) {
                consumed.fetches_that_waited += 1;
            }
            for batch in fetched.batches() {
                let batch = batch?;
                for record in batch.records()? {
                    let offset = batch.base_offset() + i64::from(record.offset_delta);
                    if offset < *next_offset as i64 {
                        continue;
                    }
                    check_sequence(&mut next_sequences, &record.key, &record.value)?;
                    consumed.records += 1;
                }
                *next_offset = (*next_offset).max(batch.last_offset() as u64 + 1);
            }
        }
    }
    Ok(consumed)
}

/// The record's value must be the next sequence number of its key's producer.
fn check_sequence(
    next_sequences: &mut BTreeMap<Vec<u8>, u64>,
    key: &Option<bytes::Bytes>,
    value: &Option<bytes::Bytes>,
) -> Result<(), BoxError> {
    let (Some(key), Some(value)) = (key, value) else {
        return Err("a record without a key or a value".into());
    };
    let sequence: u64 = std::str::from_utf8(value)?.parse()?;
    let next = next_sequences.entry(key.to_vec()).or_default();
    if sequence != *next {
        let producer = String::from_utf8_lossy(key);
        return Err(format!("{producer}: record {sequence} arrived where {next} was due").into());
    }
    *next += 1;
    Ok(())
}

fn print_summary(summary: &Summary) {
    let description = &summary.description;
    println!(
        "tokio_service: {} producers appended {} records to topic {} ({} partitions) in {} durable appends",
        WORKLOAD.producers,
        summary.records_appended,
        description.topic,
        description.partitions.len(),
        summary.durable_appends
    );
    println!(
        "tokio_service: the consumer read {} records, each producer's in order, in {} fetches ({} waited for data)",
        summary.consumed.records, summary.consumed.fetches, summary.consumed.fetches_that_waited
    );
    for partition in &description.partitions {
        println!(
            "  partition {}: log end offset {}, durable offset {}, {} segments, {} bytes",
            partition.partition,
            partition.log_end_offset.0,
            partition.durable_offset.0,
            partition.segment_count,
            partition.size_bytes
        );
    }
    println!(
        "tokio_service: done in {:.2} s; engine closed",
        summary.elapsed.as_secs_f64()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use seglog::io::Storage;
    use seglog::io::hooked::{HookedStorage, StorageHooks, StorageOp};

    /// How long a sync waits for the runtime's timer before it counts as stalled.
    const STALL_AFTER: Duration = Duration::from_secs(20);

    /// Every sync of the engine's files waits until the runtime's timer has ticked again. If an
    /// engine call blocked the runtime's only thread while the engine synced, the timer could
    /// not tick: the sync waits `STALL_AFTER`, then counts a stall and goes on.
    #[derive(Debug, Default)]
    struct SyncsWaitForTicks {
        ticks: AtomicU64,
        syncs: AtomicU64,
        stalls: AtomicU64,
    }

    impl StorageHooks for SyncsWaitForTicks {
        fn before(&self, op: StorageOp, _path: &Path) -> std::io::Result<()> {
            if !matches!(
                op,
                StorageOp::SyncData
                    | StorageOp::SyncAll
                    | StorageOp::SyncDir
                    | StorageOp::SyncGroup
            ) {
                return Ok(());
            }
            self.syncs.fetch_add(1, Ordering::Relaxed);
            if self.stalls.load(Ordering::Relaxed) > 0 {
                // Stalled once: the test fails; the rest of the run need not wait too.
                return Ok(());
            }
            let seen = self.ticks.load(Ordering::Acquire);
            let asked = Instant::now();
            while self.ticks.load(Ordering::Acquire) == seen {
                if asked.elapsed() > STALL_AFTER {
                    self.stalls.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            Ok(())
        }
    }

    #[test]
    fn on_a_single_threaded_runtime_the_timer_keeps_ticking_while_the_engine_syncs() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let gate = Arc::new(SyncsWaitForTicks::default());
        let ticker = {
            let gate = gate.clone();
            runtime.spawn(async move {
                let mut interval = tokio::time::interval(Duration::from_millis(1));
                loop {
                    interval.tick().await;
                    gate.ticks.fetch_add(1, Ordering::Release);
                }
            })
        };
        let dir = tempfile::tempdir().unwrap();
        let storage = HookedStorage::new(
            EngineConfig::default().backend.storage().unwrap(),
            gate.clone(),
        );
        let storage: Arc<dyn Storage> = Arc::new(storage);
        let root = dir.path().to_owned();
        // Opening on a hooked disk is a testing call, with no async form: a thread of its own.
        let open = async move {
            let opened = tokio::task::spawn_blocking(move || {
                Engine::open_with_storage(root, engine_config(), storage)
            });
            opened.await.expect("the open's thread panicked")
        };
        let summary = runtime.block_on(run_service_on(WORKLOAD, open)).unwrap();
        ticker.abort();
        print_summary(&summary);
        assert_eq!(summary.records_appended, 8 * 500);
        assert_eq!(summary.durable_appends, 8 * 500 / 5);
        assert_eq!(summary.consumed.records, summary.records_appended);
        let partitions = &summary.description.partitions;
        assert_eq!(partitions.len(), 4);
        for partition in partitions {
            // Two producers per partition, 500 records each.
            assert_eq!(partition.log_end_offset, Offset(1000));
            assert_eq!(partition.durable_offset, Offset(1000));
            assert!(partition.segment_count > 1, "16 KiB segments roll");
        }
        let syncs = gate.syncs.load(Ordering::Relaxed);
        assert!(syncs >= 100, "the durable appends synced: {syncs} syncs");
        assert_eq!(
            gate.stalls.load(Ordering::Relaxed),
            0,
            "a sync waited {STALL_AFTER:?} for the runtime's timer: an engine call blocked the runtime's thread"
        );
    }
}
