//! # seglog
//!
//! An embedded log storage engine with Kafka's partition storage: topics split into partitions,
//! each partition a directory of segments (`.log` of RecordBatch v2, sparse `.index` and
//! `.timeindex`, named by a 20-digit base offset), byte-compatible with Kafka's own files.
//!
//! Open a data directory with [`engine::Engine::open`]; produce with [`producer`], consume with
//! [`group`] or fetch directly. The public modules:
//!
//! - [`engine`]: the thread-per-core engine: topics, partitions, appends, fetches, group commit,
//!   retention, compaction, close.
//! - [`producer`]: Kafka's producer: key partitioning, batching, compression, acks.
//! - [`group`]: consumer groups: assignors, coordinator, consumers, committed offsets.
//! - [`format`](mod@format): Kafka's bytes: record batches, records, index entries, file
//!   names, checkpoints.
//! - [`config`], [`error`], [`types`]: the vocabulary.
//!
//! Inside, dependencies point one way: `format` ← `io` ← `index` ← `segment` ← `cleaner` (pure
//! compaction and retention planning) ← `log` (one partition) ← `engine` ← `producer`, `group`.
//! The internal layers are public only with the `testing` feature, for the crate's tests, fuzz
//! targets, benchmarks and tools (`docs/DESIGN.md` § Module map).
//!
//! ```
//! use seglog::config::LogConfig;
//! use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions};
//! use seglog::format::{BatchBuilder, NewRecord};
//! use seglog::types::Offset;
//!
//! let dir = tempfile::tempdir()?;
//! let engine = Engine::open(dir.path(), EngineConfig::default())?;
//! let topic = engine.create_topic("orders", 1, LogConfig::default())?;
//! let mut batch = BatchBuilder::new(0);
//! batch.push(&NewRecord { timestamp_ms: 1, key: Some(b"k"), value: Some(b"v"), headers: &[] });
//! let appended = engine.append(&topic, 0, batch.build().unwrap(), Durability::Durable).wait()?;
//! assert_eq!(appended.first_offset, Offset(0));
//! let fetched = engine.fetch(&topic, 0, Offset(0), FetchOptions::default()).wait()?;
//! let mut records = 0;
//! for batch in fetched.batches() {
//!     for record in batch?.record_section()?.iter() {
//!         let record = record?; // read in place: key and value borrow the fetched bytes
//!         assert_eq!((record.key, record.value), (Some(&b"k"[..]), Some(&b"v"[..])));
//!         records += 1;
//!     }
//! }
//! assert_eq!(records, 1);
//! engine.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod config;
pub mod engine;
pub mod error;
pub mod format;
pub mod group;
pub mod metrics;
pub mod producer;
pub mod types;

/// Declares the internal layers: private, or public with the `testing` feature, which the
/// crate's own tests, the fuzz targets, the benchmarks and the bundled tools build with (the
/// simulated and hooked disks, logs and segments opened directly). No stability promise.
macro_rules! internal_modules {
    ($($(#[$attr:meta])* $name:ident),* $(,)?) => {$(
        $(#[$attr])*
        #[cfg(feature = "testing")]
        #[allow(missing_docs)]
        pub mod $name;
        $(#[$attr])*
        #[cfg(not(feature = "testing"))]
        #[allow(dead_code, unused_imports)]
        mod $name;
    )*};
}

internal_modules!(
    cleaner,
    failpoint,
    index,
    io,
    limits,
    log,
    partitioner,
    segment,
);
mod spin;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
