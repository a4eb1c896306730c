//! Records accumulated into per-partition batches (Kafka's `RecordAccumulator`), and the
//! `buffer.memory` those batches reserve.
//!
//! Every method runs under the producer's lock and does no I/O: `send` appends here, the sender
//! thread drains the batches that are ready and gives their memory back once the engine answers.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::ProducerError;
use super::result::{BatchResult, SendFuture};
use super::routing::StickyPartition;
use crate::config::LogConfig;
use crate::format::{BatchBuilder, NewRecord};
use crate::limits::BATCH_HEADER_BYTES;
use crate::types::{PartitionId, TimestampMs, TopicName};

/// A batch taking records. Its builder always holds at least one record.
#[derive(Debug)]
struct OpenBatch {
    id: u64,
    builder: BatchBuilder,
    result: Arc<BatchResult>,
    opened_at: Instant,
    reserved_bytes: usize,
}

/// A batch taken out of its queue to be sent.
#[derive(Debug)]
pub(crate) struct ClosedBatch {
    pub(crate) topic: TopicName,
    pub(crate) partition: PartitionId,
    pub(crate) id: u64,
    pub(crate) builder: BatchBuilder,
    pub(crate) result: Arc<BatchResult>,
    pub(crate) opened_at: Instant,
    pub(crate) reserved_bytes: usize,
}

/// One topic's batches and what the producer knows of the topic.
#[derive(Debug)]
pub(crate) struct TopicBatches {
    pub(crate) partition_count: u32,
    /// A batch is closed before growing past this: `batch.size`, capped by the topic's limits.
    batch_limit_bytes: usize,
    /// No batch may be larger: the smaller of `max.message.bytes` and `segment.bytes`, named.
    batch_max: (u64, &'static str),
    refreshed_at: Instant,
    pub(crate) sticky: StickyPartition,
    /// Indexed by partition; each queue holds its batches in send order, the open one last.
    queues: Vec<VecDeque<OpenBatch>>,
}

impl TopicBatches {
    /// True if `record` would go into the partition's open batch (false if it would open one).
    pub(crate) fn accepts(&self, partition: PartitionId, record: &NewRecord<'_>) -> bool {
        self.queues
            .get(partition as usize)
            .and_then(VecDeque::back)
            .is_some_and(|batch| batch.builder.size_bytes_with(record) <= self.batch_limit_bytes)
    }
}

/// A record in its batch.
#[derive(Debug)]
pub(crate) struct Appended {
    pub(crate) future: SendFuture,
    /// The record opened a batch or filled one: the sender has something new to schedule.
    pub(crate) wake_sender: bool,
}

/// Why a record is not in a batch yet.
#[derive(Debug)]
pub(crate) enum AppendRefused {
    /// A new batch is needed and `buffer.memory` cannot reserve it now.
    Memory { requested_bytes: usize },
    /// The record can never be sent.
    Error(ProducerError),
}

/// Batches ready to send, and when the next one will be.
#[derive(Debug, Default)]
pub(crate) struct Drained {
    pub(crate) batches: Vec<ClosedBatch>,
    /// The earliest `linger.ms` expiry among the batches left behind.
    pub(crate) next_deadline: Option<Instant>,
}

/// What makes a batch ready to send, besides being closed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DrainRule {
    pub(crate) now: Instant,
    pub(crate) linger: Duration,
    /// Send every batch now: a flush, a close, or a `send` waiting for memory.
    pub(crate) everything: bool,
    /// Batches to take at most (the free in-flight slots).
    pub(crate) batch_count_max: usize,
}

#[derive(Debug, Default)]
pub(crate) struct Accumulator {
    topics: HashMap<TopicName, TopicBatches>,
    memory_used_bytes: usize,
    /// Batches opened and not answered yet, by id: what a flush waits for.
    incomplete_batch_ids: BTreeSet<u64>,
    next_batch_id: u64,
    queued_batch_count: usize,
    drain_rotation: usize,
}

impl Accumulator {
    pub(crate) fn topic(&self, topic: &TopicName) -> Option<&TopicBatches> {
        self.topics.get(topic)
    }

    pub(crate) fn topic_mut(&mut self, topic: &TopicName) -> Option<&mut TopicBatches> {
        self.topics.get_mut(topic)
    }

    /// True if the topic is unknown here or its partition count is older than `max_age`.
    pub(crate) fn needs_refresh(&self, topic: &TopicName, now: Instant, max_age: Duration) -> bool {
        self.topics
            .get(topic)
            .is_none_or(|batches| now.duration_since(batches.refreshed_at) >= max_age)
    }

    /// Records the topic's partition count and limits as the engine reports them.
    pub(crate) fn update_topic(
        &mut self,
        topic: &TopicName,
        partition_count: u32,
        config: &LogConfig,
        batch_size_bytes: usize,
        now: Instant,
    ) {
        let batch_max = if config.max_message_bytes <= config.segment_bytes {
            (config.max_message_bytes, "max.message.bytes")
        } else {
            (config.segment_bytes, "segment.bytes")
        };
        let batch_limit_bytes = (batch_size_bytes as u64).min(batch_max.0) as usize;
        let batches = self
            .topics
            .entry(topic.clone())
            .or_insert_with(|| TopicBatches {
                partition_count,
                batch_limit_bytes,
                batch_max,
                refreshed_at: now,
                sticky: StickyPartition::default(),
                queues: Vec::new(),
            });
        // Kafka never shrinks a topic; a smaller count is a deleted and re-created topic, whose
        // queued batches still go to their partitions and fail there if those are gone.
        batches.partition_count = partition_count;
        batches.batch_limit_bytes = batch_limit_bytes;
        batches.batch_max = batch_max;
        batches.refreshed_at = now;
        let queue_count = batches.queues.len().max(partition_count as usize);
        batches.queues.resize_with(queue_count, VecDeque::new);
    }

    /// Puts `record` into `partition`'s open batch, or into a new batch if it does not fit there
    /// and `buffer_memory_bytes` can reserve one.
    pub(crate) fn append(
        &mut self,
        topic: &TopicName,
        partition: PartitionId,
        record: &NewRecord<'_>,
        buffer_memory_bytes: usize,
        now: Instant,
    ) -> Result<Appended, AppendRefused> {
        let memory_free_bytes = buffer_memory_bytes.saturating_sub(self.memory_used_bytes);
        let Some(batches) = self.topics.get_mut(topic) else {
            let topic = topic.to_string();
            return Err(AppendRefused::Error(ProducerError::UnknownTopic { topic }));
        };
        let (limit_bytes, batch_max) = (batches.batch_limit_bytes, batches.batch_max);
        let partition_count = batches.partition_count;
        let Some(queue) = batches
            .queues
            .get_mut(partition as usize)
            .filter(|_| partition < partition_count)
        else {
            return Err(AppendRefused::Error(ProducerError::PartitionOutOfRange {
                topic: topic.to_string(),
                partition,
                partition_count,
            }));
        };
        if let Some(batch) = queue.back_mut()
            && batch.builder.size_bytes_with(record) <= limit_bytes
        {
            return Ok(push(batch, partition, record, limit_bytes));
        }
        let reserved_bytes = reservation(record, limit_bytes, batch_max, buffer_memory_bytes)?;
        if reserved_bytes > memory_free_bytes {
            return Err(AppendRefused::Memory {
                requested_bytes: reserved_bytes,
            });
        }
        let mut batch = OpenBatch {
            id: self.next_batch_id,
            builder: BatchBuilder::with_capacity(0, reserved_bytes),
            result: Arc::new(BatchResult::default()),
            opened_at: now,
            reserved_bytes,
        };
        let mut appended = push(&mut batch, partition, record, limit_bytes);
        appended.wake_sender = true;
        self.incomplete_batch_ids.insert(batch.id);
        self.next_batch_id += 1;
        self.memory_used_bytes += reserved_bytes;
        self.queued_batch_count += 1;
        queue.push_back(batch);
        Ok(appended)
    }

    /// Takes the batches that are ready, oldest first in each partition, up to
    /// `rule.batch_count_max`.
    pub(crate) fn drain(&mut self, rule: DrainRule) -> Drained {
        let mut drained = Drained::default();
        if self.queued_batch_count == 0 {
            return drained;
        }
        // Start each drain one partition further, so that when `batch_count_max` binds no
        // partition is always served first (Kafka's `drainIndex`).
        self.drain_rotation = self.drain_rotation.wrapping_add(1);
        for (topic, batches) in &mut self.topics {
            let limit_bytes = batches.batch_limit_bytes;
            let queue_count = batches.queues.len();
            for step in 0..queue_count {
                let partition = (self.drain_rotation + step) % queue_count;
                let queue = &mut batches.queues[partition];
                while let Some(front) = queue.front() {
                    let due = front.opened_at + rule.linger;
                    let full = queue.len() > 1 || front.builder.size_bytes() >= limit_bytes;
                    if !(full || rule.everything || due <= rule.now) {
                        drained.next_deadline =
                            Some(drained.next_deadline.map_or(due, |d| d.min(due)));
                        break;
                    }
                    if drained.batches.len() >= rule.batch_count_max {
                        break;
                    }
                    let Some(batch) = queue.pop_front() else {
                        break;
                    };
                    drained
                        .batches
                        .push(close(topic, partition as PartitionId, batch));
                }
            }
        }
        self.queued_batch_count -= drained.batches.len();
        drained
    }

    /// Gives back a batch's reservation once the batch is answered.
    pub(crate) fn release(&mut self, id: u64, reserved_bytes: usize) {
        let was_incomplete = self.incomplete_batch_ids.remove(&id);
        debug_assert!(was_incomplete, "batch {id} released twice");
        self.memory_used_bytes -= reserved_bytes;
    }

    /// Takes every queued batch, ready or not (the sender thread is stopping).
    pub(crate) fn drain_all(&mut self) -> Vec<ClosedBatch> {
        let rule = DrainRule {
            now: Instant::now(),
            linger: Duration::ZERO,
            everything: true,
            batch_count_max: usize::MAX,
        };
        self.drain(rule).batches
    }

    /// The id the next batch will get: every batch opened so far has a smaller one.
    pub(crate) fn next_batch_id(&self) -> u64 {
        self.next_batch_id
    }

    /// True while a batch opened before `batch_id` is unanswered.
    pub(crate) fn has_incomplete_before(&self, batch_id: u64) -> bool {
        self.incomplete_batch_ids
            .first()
            .is_some_and(|&first| first < batch_id)
    }

    /// True when no batch waits in a queue (some may still be in flight).
    pub(crate) fn is_drained(&self) -> bool {
        self.queued_batch_count == 0
    }

    pub(crate) fn memory_used_bytes(&self) -> usize {
        self.memory_used_bytes
    }
}

/// Bytes a new batch for `record` reserves: `batch.size` (capped by the topic), or the record's
/// own batch if it is larger, as Kafka's `BufferPool` allocates `max(batch.size, record)`.
fn reservation(
    record: &NewRecord<'_>,
    limit_bytes: usize,
    (max_bytes, max_name): (u64, &'static str),
    buffer_memory_bytes: usize,
) -> Result<usize, AppendRefused> {
    let alone_bytes = BATCH_HEADER_BYTES + record.size_bytes(0, 0);
    let too_large = |limit_name, limit_bytes| {
        AppendRefused::Error(ProducerError::RecordTooLarge {
            size_bytes: alone_bytes as u64,
            limit_name,
            limit_bytes,
        })
    };
    if alone_bytes as u64 > max_bytes {
        return Err(too_large(max_name, max_bytes));
    }
    if alone_bytes > buffer_memory_bytes {
        return Err(too_large("buffer.memory", buffer_memory_bytes as u64));
    }
    Ok(alone_bytes.max(limit_bytes))
}

/// Pushes `record` into `batch`, which takes it.
fn push(
    batch: &mut OpenBatch,
    partition: PartitionId,
    record: &NewRecord<'_>,
    limit_bytes: usize,
) -> Appended {
    let index_in_batch = batch.builder.records_count() as u32;
    batch.builder.push(record);
    debug_assert!(batch.builder.size_bytes() <= batch.reserved_bytes);
    let future = SendFuture::new(
        batch.result.clone(),
        partition,
        index_in_batch,
        TimestampMs(record.timestamp_ms),
    );
    Appended {
        future,
        wake_sender: batch.builder.size_bytes() >= limit_bytes,
    }
}

fn close(topic: &TopicName, partition: PartitionId, batch: OpenBatch) -> ClosedBatch {
    ClosedBatch {
        topic: topic.clone(),
        partition,
        id: batch.id,
        builder: batch.builder,
        result: batch.result,
        opened_at: batch.opened_at,
        reserved_bytes: batch.reserved_bytes,
    }
}
