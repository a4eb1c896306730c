//! [`ProducerError`]: why a record was not sent, or why its batch was not appended.

use std::io;
use std::sync::Arc;

use thiserror::Error;

use crate::error::AppendError;
use crate::format::Compression;

/// Why a [`Producer`](super::Producer) refused a record, or why a sent record's batch failed.
///
/// `Clone` because every record of a failed batch receives the batch's error; the causes that are
/// not `Clone` themselves are shared behind an `Arc`.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// The [`ProducerConfig`](super::ProducerConfig) breaks a bound or a relationship between
    /// settings (Kafka's `ConfigException`).
    #[error("invalid producer configuration: {name} {reason}")]
    Config {
        /// The setting's name, Kafka's where it has one (`batch.size`, `linger.ms`, ...).
        name: &'static str,
        /// What its value must be.
        reason: &'static str,
    },
    /// The record's topic does not exist in the engine.
    #[error("topic {topic} does not exist")]
    UnknownTopic {
        /// The topic's name.
        topic: String,
    },
    /// The record's explicit partition, or the one the partitioner chose, is not below the
    /// topic's partition count.
    #[error("topic {topic} has {partition_count} partitions; partition {partition} does not exist")]
    PartitionOutOfRange {
        /// The topic's name.
        topic: String,
        /// The partition asked for.
        partition: u32,
        /// The topic's partition count.
        partition_count: u32,
    },
    /// The record alone makes a batch larger than a limit it must fit: the topic's
    /// `max.message.bytes` or `segment.bytes`, or the producer's `buffer.memory`.
    #[error("a batch of this record alone takes {size_bytes} bytes; {limit_name} is {limit_bytes}")]
    RecordTooLarge {
        /// The size of a batch holding only this record, in bytes.
        size_bytes: u64,
        /// The limit's name: `max.message.bytes`, `segment.bytes` or `buffer.memory`.
        limit_name: &'static str,
        /// The limit, in bytes.
        limit_bytes: u64,
    },
    /// Kafka's "Failed to allocate memory within the configured max blocking time".
    #[error(
        "buffer.memory ({buffer_memory_bytes} bytes) stayed full for max.block.ms ({block_ms_max} ms); \
         the record needed {requested_bytes} bytes"
    )]
    BufferExhausted {
        /// The bytes the record's batch needed to reserve.
        requested_bytes: u64,
        /// The producer's `buffer.memory`, in bytes.
        buffer_memory_bytes: u64,
        /// The producer's `max.block.ms`: how long `send` waited, in milliseconds.
        block_ms_max: u64,
    },
    /// `send` was called after `close` began.
    #[error("the producer is closed")]
    Closed,
    /// The engine refused or failed the append of the record's batch; a backpressure refusal
    /// only once `delivery.timeout.ms` has passed since the batch was opened.
    #[error("cannot append to {topic}-{partition}: {source}")]
    Append {
        /// The batch's topic.
        topic: String,
        /// The batch's partition.
        partition: u32,
        /// Why the append failed; shared by every record of the batch.
        #[source]
        source: Arc<AppendError>,
    },
    /// Compressing the record's batch with `compression.type` failed.
    #[error("cannot compress a batch for {topic}-{partition} with {codec}: {source}")]
    Compression {
        /// The batch's topic.
        topic: String,
        /// The batch's partition.
        partition: u32,
        /// The codec: the producer's `compression.type`.
        codec: Compression,
        /// The codec's error; shared by every record of the batch.
        #[source]
        source: Arc<io::Error>,
    },
    /// The operating system refused to spawn the producer's sender thread.
    #[error("cannot start the producer's sender thread: {source}")]
    SenderThread {
        /// The error from spawning the thread.
        #[source]
        source: Arc<io::Error>,
    },
    /// The sender thread ended (it panicked) before the batch was appended.
    #[error("the producer's sender thread stopped before the batch was appended")]
    SenderStopped,
    /// An async form could not run its blocking part off the caller's thread.
    #[error(transparent)]
    Unavailable(#[from] crate::error::EngineUnavailable),
}
