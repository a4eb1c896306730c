//! # seglog
//!
//! An embedded log storage engine with Kafka's partition storage: topics split into partitions,
//! each partition a directory of segments (`.log` of RecordBatch v2, sparse `.index` and
//! `.timeindex`, named by a 20-digit base offset), byte-compatible with Kafka's own files.
//!
//! The crate is layered; dependencies point down this list and a module never reaches up:
//!
//! - [`types`], [`limits`], [`config`], [`error`]: vocabulary.
//! - [`format`](mod@format): bytes <-> values (batches, records, index entries, names, checkpoints). No I/O.
//! - [`index`]: sparse offset and time indexes over memory-mapped files.
//! - [`io`]: the seam through which log data is read, written and synced.
//! - [`segment`]: one `.log` with its indexes; append, locate, read, recover.
//! - [`log`]: one partition's ordered segments ([`log::PartitionLog`]).
//! - [`log_dir`]: a data directory of partitions with Kafka's checkpoints ([`log_dir::LogDir`]).
//! - [`engine`]: the thread-per-core engine: shards on io_uring, group commit, topics.
//! - [`cleaner`]: retention planning and compaction (offset map, batch cleaning).
//! - [`partitioner`]: Kafka's murmur2 key partitioner.
//! - [`producer`]: Kafka's producer: routing, batching, compression, acks.
//! - [`group`]: consumer groups: assignors, coordinator, consumers, committed offsets.
//! - [`testing`]: for tests and tools only: how a test that cannot run here says so.
//!
//! ```
//! use std::sync::Arc;
//! use seglog::config::LogConfig;
//! use seglog::format::{BatchBuilder, NewRecord};
//! use seglog::io::pio::PositionedIo;
//! use seglog::log_dir::LogDir;
//! use seglog::types::{Offset, TimestampMs, TopicName};
//!
//! let dir = tempfile::tempdir()?;
//! let mut log_dir = LogDir::open(dir.path(), Arc::new(PositionedIo), LogConfig::default())?;
//! let topic = TopicName::parse("orders")?;
//! log_dir.create_topic(&topic, 1)?;
//! let log = log_dir.partition(&topic, 0)?;
//! let mut batch = BatchBuilder::new(0);
//! batch.push(&NewRecord { timestamp_ms: 1, key: Some(b"k"), value: Some(b"v"), headers: &[] });
//! let appended = log.append(batch.build().unwrap(), TimestampMs::now())?;
//! assert_eq!(appended.first_offset, Offset(0));
//! let fetched = log.read(Offset(0), 1024 * 1024)?;
//! let mut records = 0;
//! for batch in fetched.batches() {
//!     let batch = batch?;
//!     for record in batch.record_section()?.iter() {
//!         let record = record?; // read in place: key and value borrow the fetched bytes
//!         assert_eq!((record.key, record.value), (Some(&b"k"[..]), Some(&b"v"[..])));
//!         records += 1;
//!     }
//! }
//! assert_eq!(records, 1);
//! log_dir.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod cleaner;
pub mod config;
pub mod engine;
pub mod error;
pub mod failpoint;
pub mod format;
pub mod group;
pub mod index;
pub mod io;
pub mod limits;
pub mod log;
pub mod log_dir;
pub mod partitioner;
pub mod producer;
pub mod segment;
mod spin;
pub mod testing;
pub mod types;
