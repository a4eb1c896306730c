//! The producer: records in, batches to the engine out (Kafka's `KafkaProducer`).
//!
//! [`Engine::producer`](crate::engine::Engine::producer) gives a [`Producer`]. Its
//! [`send`](Producer::send) encodes a [`ProducerRecord`] straight into the open batch of the
//! record's partition and returns a [`SendFuture`] at once; the future resolves to the record's
//! [`RecordMetadata`] (partition, offset, timestamp) once its batch is appended, or synced when
//! [`ProducerConfig::acks`] is [`Durability::Durable`](crate::engine::Durability::Durable).
//! `.await` it on any executor, or [`wait`](SendFuture::wait) on a plain thread.
//!
//! The parts are Kafka's, under Kafka's names:
//!
//! - **Partitioning** (`routing`). A record with an explicit partition goes there. Otherwise a
//!   configured [`Partitioner`] decides (`partitioner.class`); without one, a keyed record goes to
//!   `murmur2(key) & 0x7fffffff % partitions`
//!   ([`partition_for_key`], bit for bit the Java client's),
//!   and keyless records stick to one partition until its batch is closed (full, or sent after
//!   `linger.ms`), then move to another one picked at random (`BuiltInPartitioner`, KIP-480).
//! - **Accumulation** (`accumulator`, Kafka's `RecordAccumulator`). One queue of batches per
//!   partition. A batch is closed when the next record would grow it past `batch.size`. Every open
//!   or in-flight batch holds a reservation of `max(batch.size, its lone record)` bytes out of
//!   `buffer.memory`; when that is used up, `send` blocks for up to `max.block.ms`, then fails
//!   with [`ProducerError::BufferExhausted`], as Kafka's `BufferPool` does.
//! - **Sending** (`sender`, Kafka's `Sender`). One thread per producer takes each batch that is
//!   closed, or older than `linger.ms`, or wanted now by [`Producer::flush`], by
//!   [`Producer::close`] or by a `send` blocked on memory. It compresses the batch
//!   (`compression.type`, [`BatchBuilder::build_compressed`](crate::format::BatchBuilder::build_compressed))
//!   and hands it to [`Engine::append`](crate::engine::Engine::append), with at most
//!   `appends_inflight_max` appends unanswered. The engine stamps the batch's base offset; record
//!   `i` of the batch gets base offset + `i`. Appends to one partition are submitted in order
//!   and a shard's queue is FIFO, so records of a partition are stored in send order.
//!
//! Backpressure from the engine (`QueueFull`, `TooManyBytesInFlight`) is answered before the
//! append reaches a shard, so the sender retries that batch after `retry.backoff.ms`, and holds
//! back the partition's later batches to keep the order, until `delivery.timeout.ms` after the
//! batch was opened. Any other append error fails the batch's records.
//!
//! ```
//! use seglog::config::LogConfig;
//! use seglog::engine::{Engine, EngineConfig};
//! use seglog::producer::{ProducerConfig, ProducerRecord};
//!
//! let dir = tempfile::tempdir()?;
//! let engine = Engine::open(dir.path(), EngineConfig::default().with_shard_count(1))?;
//! let topic = engine.create_topic("orders", 3, LogConfig::default())?;
//! let producer = engine.producer(ProducerConfig::default())?;
//! let sent = producer.send(&ProducerRecord::new(&topic, Some(b"alice"), Some(b"book")))?;
//! let metadata = sent.wait()?;
//! assert_eq!(metadata.partition, seglog::producer::partition_for_key(b"alice", 3).unwrap());
//! assert_eq!(metadata.offset.0, 0);
//! producer.close()?;
//! engine.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod accumulator;
mod client;
mod config;
mod error;
mod result;
mod routing;
mod sender;

pub use crate::partitioner::{RoundRobin, partition_for_key};
pub use client::{Producer, ProducerRecord};
pub use config::ProducerConfig;
pub use error::ProducerError;
pub use result::{RecordMetadata, SendFuture};
pub use routing::Partitioner;
