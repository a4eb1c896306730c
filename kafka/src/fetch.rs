//! Fetch: whole batches, as stored, from each partition's fetch offset.
//!
//! Limits as Kafka's: at most `partition_max_bytes` per partition and `max_bytes` in all, except
//! that the first batch of the first partition with data is returned whole however large. A
//! response shorter than `min_bytes` waits (long-poll) until enough arrives or `max_wait_ms`
//! passes (or the server stops): every partition's fetch is parked in its shard until that
//! partition grows, and the whole request is read again when one does. This node is the only replica, so the high
//! watermark and the last stable offset are the log end offset (no transactions).

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::FetchRequest;
use kafka_protocol::messages::fetch_response::{
    FetchResponse, FetchableTopicResponse, PartitionData,
};
use seglog::engine::{FetchData, FetchOptions, Isolation};
use seglog::types::{Offset, PartitionId, TopicName};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::error_code;
use crate::produce::offset_i64;

/// Kafka's `isolation_level` for `READ_COMMITTED`.
const READ_COMMITTED: i8 = 1;

/// One partition of the request, as the engine names it.
struct FetchTarget {
    /// `None`: not a valid topic name, so no such topic.
    topic: Option<TopicName>,
    partition: i32,
    fetch_offset: i64,
    partition_max_bytes: i32,
}

pub(crate) async fn answer(broker: &Broker, request: FetchRequest) -> FetchResponse {
    let targets = targets(&request);
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    let max_wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0));
    let deadline = Instant::now() + max_wait;
    let mut bytes_before = None;
    loop {
        let read = read_all(broker, &request, &targets).await;
        let remaining = deadline.saturating_duration_since(Instant::now());
        // No growth since the last wake-up: the limits, not the data, keep the response short.
        let stalled = bytes_before.is_some_and(|before| read.bytes <= before);
        let done = read.bytes >= min_bytes || read.failed || stalled || broker.is_stopping();
        if done || remaining.as_millis() == 0 {
            return response(&request, read.topics);
        }
        bytes_before = Some(read.bytes);
        wait_for_growth(broker, &targets, &read.sizes, remaining).await;
    }
}

fn targets(request: &FetchRequest) -> Vec<FetchTarget> {
    request
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|partition| FetchTarget {
                topic: TopicName::parse(&topic.topic.0).ok(),
                partition: partition.partition,
                fetch_offset: partition.fetch_offset,
                partition_max_bytes: partition.partition_max_bytes,
            })
        })
        .collect()
}

/// What one pass over every partition found.
struct Read {
    /// Each requested topic's partitions, in request order.
    topics: Vec<Vec<PartitionData>>,
    /// The record bytes of each target, in `targets` order.
    sizes: Vec<usize>,
    bytes: usize,
    failed: bool,
}

async fn read_all(broker: &Broker, request: &FetchRequest, targets: &[FetchTarget]) -> Read {
    let mut budget_bytes = usize::try_from(request.max_bytes).unwrap_or(0);
    let mut read = Read {
        topics: Vec::with_capacity(request.topics.len()),
        sizes: Vec::with_capacity(targets.len()),
        bytes: 0,
        failed: false,
    };
    let mut targets = targets.iter();
    for topic in &request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for target in targets.by_ref().take(topic.partitions.len()) {
            let data = read_partition(broker, target, budget_bytes, read.bytes == 0).await;
            let size = data.records.as_ref().map_or(0, Bytes::len);
            budget_bytes = budget_bytes.saturating_sub(size);
            read.bytes += size;
            read.sizes.push(size);
            read.failed |= data.error_code != 0;
            partitions.push(data);
        }
        read.topics.push(partitions);
    }
    read
}

/// One partition's data within `budget_bytes`; `first`: nothing was read before it, so one
/// whole batch is returned even past the limits.
async fn read_partition(
    broker: &Broker,
    target: &FetchTarget,
    budget_bytes: usize,
    first: bool,
) -> PartitionData {
    let data = PartitionData::default().with_partition_index(target.partition);
    let (Some(topic), Ok(partition), Ok(offset)) = (
        &target.topic,
        PartitionId::try_from(target.partition),
        u64::try_from(target.fetch_offset),
    ) else {
        return failed(data, unknown_or_out_of_range(target));
    };
    let partition_max_bytes = usize::try_from(target.partition_max_bytes).unwrap_or(0);
    let max_bytes = partition_max_bytes.min(budget_bytes);
    if max_bytes == 0 && !first {
        return peek(broker, topic, partition, Offset(offset), data).await;
    }
    let options = FetchOptions {
        max_bytes: max_bytes as u64,
        min_bytes: 0,
        max_wait_ms: 0,
        isolation: Isolation::LogEnd,
    };
    match broker
        .engine
        .fetch(topic, partition, Offset(offset), options)
        .await
    {
        Ok(fetched) => {
            let within = first || fetched.records.len() <= max_bytes;
            let records = if within {
                fetched.records.clone()
            } else {
                Bytes::new()
            };
            with_offsets(data, &fetched).with_records(Some(records))
        }
        Err(error) => failed(data, error_code::read_error(&error)),
    }
}

/// A partition past the response's limits: its offsets, no records.
async fn peek(
    broker: &Broker,
    topic: &TopicName,
    partition: PartitionId,
    offset: Offset,
    data: PartitionData,
) -> PartitionData {
    let options = FetchOptions {
        max_bytes: 1,
        min_bytes: 0,
        max_wait_ms: 0,
        isolation: Isolation::LogEnd,
    };
    match broker.engine.fetch(topic, partition, offset, options).await {
        Ok(fetched) => with_offsets(data, &fetched).with_records(Some(Bytes::new())),
        Err(error) => failed(data, error_code::read_error(&error)),
    }
}

fn unknown_or_out_of_range(target: &FetchTarget) -> ResponseError {
    match (&target.topic, target.partition) {
        (Some(_), 0..) => ResponseError::OffsetOutOfRange,
        _ => ResponseError::UnknownTopicOrPartition,
    }
}

fn with_offsets(data: PartitionData, fetched: &FetchData) -> PartitionData {
    let log_end_offset = offset_i64(fetched.log_end_offset.0);
    data.with_high_watermark(log_end_offset)
        .with_last_stable_offset(log_end_offset)
        .with_log_start_offset(offset_i64(fetched.log_start_offset.0))
}

fn failed(data: PartitionData, error: ResponseError) -> PartitionData {
    data.with_error_code(error.code())
        .with_high_watermark(-1)
        .with_records(Some(Bytes::new()))
}

/// Parks a fetch in every readable partition's shard until that partition holds more than it
/// held at the last read, and returns when the first does or `remaining` passes.
async fn wait_for_growth(
    broker: &Broker,
    targets: &[FetchTarget],
    sizes: &[usize],
    remaining: Duration,
) {
    let max_wait_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
    let mut parked = JoinSet::new();
    for (target, &size) in targets.iter().zip(sizes) {
        let (Some(topic), Ok(partition), Ok(offset)) = (
            &target.topic,
            PartitionId::try_from(target.partition),
            u64::try_from(target.fetch_offset),
        ) else {
            continue;
        };
        // Room for what arrives, within the partition's limit: a batch past the limit would
        // not be returned, so it cannot satisfy the wait either.
        let partition_max_bytes = u64::try_from(target.partition_max_bytes).unwrap_or(0);
        let options = FetchOptions {
            max_bytes: partition_max_bytes.max(size as u64 + 1),
            min_bytes: size as u64 + 1,
            max_wait_ms,
            isolation: Isolation::LogEnd,
        };
        parked.spawn(
            broker
                .engine
                .fetch(topic, partition, Offset(offset), options),
        );
    }
    // The engine answers each parked fetch by its own deadline; the timer is a backstop, and a
    // stopping server does not wait. Dropping `parked` aborts the fetches still waiting.
    tokio::select! {
        _ = tokio::time::timeout(remaining, parked.join_next()) => {}
        () = broker.stopping() => {}
    }
}

fn response(request: &FetchRequest, topics: Vec<Vec<PartitionData>>) -> FetchResponse {
    let read_committed = request.isolation_level == READ_COMMITTED;
    let responses = request
        .topics
        .iter()
        .zip(topics)
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|data| {
                    // Kafka sends a null list of aborted transactions to read-uncommitted
                    // consumers and an empty one to read-committed ones.
                    data.with_aborted_transactions(read_committed.then(Vec::new))
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(topic.topic.clone())
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    FetchResponse::default().with_responses(responses)
}
