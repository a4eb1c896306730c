//! [`ProducerConfig`]: Kafka's producer settings that mean something for an embedded engine.
//!
//! Settings about the network (`request.timeout.ms`, `max.request.size`, ...) have no
//! counterpart: a batch goes to a shard through a bounded channel, not through a socket.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::error::ProducerError;
use super::routing::Partitioner;
use crate::engine::Durability;
use crate::format::Compression;

/// How a [`Producer`](super::Producer) batches, compresses, bounds and acknowledges.
#[derive(Clone, derive_setters::Setters)]
#[setters(prefix = "with_")]
#[non_exhaustive]
pub struct ProducerConfig {
    /// `batch.size`: a partition's batch is closed once the next record would grow it past this
    /// many bytes (header included, before compression). A record larger than this goes alone in
    /// a batch. The topic's `max.message.bytes` and `segment.bytes` cap it further. Default 16384.
    pub batch_size_bytes: usize,
    /// `linger.ms`: a batch that is not full is sent this long after its first record. 0 sends
    /// whatever is there as soon as the sender thread gets to it. Default 5 (Kafka 3.9+).
    pub linger_ms: u64,
    /// `buffer.memory`: bytes reserved by open and unanswered batches, at most. Default 32 MiB.
    pub buffer_memory_bytes: usize,
    /// `max.block.ms`: how long `send` waits for `buffer.memory` before failing with
    /// `BufferExhausted`. Default 60000; `u64::MAX` waits as long as it takes.
    pub block_ms_max: u64,
    /// `compression.type`: the codec of every batch. Default none.
    pub compression: Compression,
    /// `acks`: a send resolves once its batch is written (`Written`, close to Kafka's `acks=1`)
    /// or once it is synced (`Durable`, what `acks=all` protects against: losing an acknowledged
    /// record in a crash). Default `Durable`.
    pub acks: Durability,
    /// Appends handed to the engine and not yet answered, at most, across all partitions (Kafka's
    /// `max.in.flight.requests.per.connection`, with one engine instead of connections). More in
    /// flight lets durable appends share syncs (group commit). Default 64.
    pub appends_inflight_max: usize,
    /// `retry.backoff.ms`: wait before resubmitting a batch the engine refused for backpressure.
    /// Default 10 (Kafka: 100; a shard's queue drains in microseconds, not a network round trip).
    pub retry_backoff_ms: u64,
    /// `delivery.timeout.ms`: a batch still refused for backpressure this long after it was
    /// opened fails. Default 120000.
    pub delivery_timeout_ms: u64,
    /// `metadata.max.age.ms`: how long a topic's partition count is cached before it is read
    /// again from the engine, so that added partitions get records. Default 300000.
    pub metadata_max_age_ms: u64,
    /// `partitioner.class`: chooses the partition of records sent without one. `None`: Kafka's
    /// built-in partitioner (murmur2 of the key; sticky for keyless records).
    pub partitioner: Option<Arc<dyn Partitioner>>,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            batch_size_bytes: 16 * 1024,
            linger_ms: 5,
            buffer_memory_bytes: 32 * 1024 * 1024,
            block_ms_max: 60_000,
            compression: Compression::None,
            acks: Durability::Durable,
            appends_inflight_max: 64,
            retry_backoff_ms: 10,
            delivery_timeout_ms: 120_000,
            metadata_max_age_ms: 300_000,
            partitioner: None,
        }
    }
}

impl fmt::Debug for ProducerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProducerConfig")
            .field("batch_size_bytes", &self.batch_size_bytes)
            .field("linger_ms", &self.linger_ms)
            .field("buffer_memory_bytes", &self.buffer_memory_bytes)
            .field("block_ms_max", &self.block_ms_max)
            .field("compression", &self.compression)
            .field("acks", &self.acks)
            .field("appends_inflight_max", &self.appends_inflight_max)
            .field("retry_backoff_ms", &self.retry_backoff_ms)
            .field("delivery_timeout_ms", &self.delivery_timeout_ms)
            .field("metadata_max_age_ms", &self.metadata_max_age_ms)
            .field("partitioner", &self.partitioner.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl ProducerConfig {
    /// Checks the relationships Kafka's `ProducerConfig` checks, and the bounds seglog needs.
    pub fn validate(&self) -> Result<(), ProducerError> {
        let invalid = |name, reason| Err(ProducerError::Config { name, reason });
        if self.buffer_memory_bytes == 0 {
            return invalid("buffer.memory", "must be at least 1");
        }
        if self.batch_size_bytes > self.buffer_memory_bytes {
            return invalid("batch.size", "must not exceed buffer.memory");
        }
        if self.batch_size_bytes > i32::MAX as usize {
            return invalid("batch.size", "must fit a batch's int32 length");
        }
        if self.appends_inflight_max == 0 {
            return invalid("appends_inflight_max", "must be at least 1");
        }
        // Kafka's int range; it also keeps every deadline computed from them representable.
        if self.linger_ms > i32::MAX as u64 {
            return invalid("linger.ms", "must be at most 2147483647");
        }
        if self.retry_backoff_ms > i32::MAX as u64 {
            return invalid("retry.backoff.ms", "must be at most 2147483647");
        }
        Ok(())
    }

    pub(crate) fn linger(&self) -> Duration {
        Duration::from_millis(self.linger_ms)
    }

    pub(crate) fn block_max(&self) -> Duration {
        Duration::from_millis(self.block_ms_max)
    }

    pub(crate) fn retry_backoff(&self) -> Duration {
        Duration::from_millis(self.retry_backoff_ms)
    }

    pub(crate) fn delivery_timeout(&self) -> Duration {
        Duration::from_millis(self.delivery_timeout_ms)
    }

    pub(crate) fn metadata_max_age(&self) -> Duration {
        Duration::from_millis(self.metadata_max_age_ms)
    }
}
