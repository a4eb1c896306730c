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
    #[error("invalid producer configuration: {name} {reason}")]
    Config {
        name: &'static str,
        reason: &'static str,
    },
    #[error("topic {topic} does not exist")]
    UnknownTopic { topic: String },
    #[error("topic {topic} has {partition_count} partitions; partition {partition} does not exist")]
    PartitionOutOfRange {
        topic: String,
        partition: u32,
        partition_count: u32,
    },
    /// The record alone makes a batch larger than a limit it must fit: the topic's
    /// `max.message.bytes` or `segment.bytes`, or the producer's `buffer.memory`.
    #[error("a batch of this record alone takes {size_bytes} bytes; {limit_name} is {limit_bytes}")]
    RecordTooLarge {
        size_bytes: u64,
        limit_name: &'static str,
        limit_bytes: u64,
    },
    /// Kafka's "Failed to allocate memory within the configured max blocking time".
    #[error(
        "buffer.memory ({buffer_memory_bytes} bytes) stayed full for max.block.ms ({block_ms_max} ms); \
         the record needed {requested_bytes} bytes"
    )]
    BufferExhausted {
        requested_bytes: u64,
        buffer_memory_bytes: u64,
        block_ms_max: u64,
    },
    #[error("the producer is closed")]
    Closed,
    #[error("cannot append to {topic}-{partition}: {source}")]
    Append {
        topic: String,
        partition: u32,
        #[source]
        source: Arc<AppendError>,
    },
    #[error("cannot compress a batch for {topic}-{partition} with {codec}: {source}")]
    Compression {
        topic: String,
        partition: u32,
        codec: Compression,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("cannot start the producer's sender thread: {source}")]
    SenderThread {
        #[source]
        source: Arc<io::Error>,
    },
    /// The sender thread ended (it panicked) before the batch was appended.
    #[error("the producer's sender thread stopped before the batch was appended")]
    SenderStopped,
}
