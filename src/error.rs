//! Error types, one enum per operation family, sharing [`StorageError`].
//!
//! Operating errors (I/O failures, corrupt bytes, bad arguments) are values. A broken internal
//! invariant never panics the host: where going on could damage data it is a value too (the
//! operation is refused), elsewhere a `debug_assert!` that the tests exercise. Every error keeps
//! its cause and its context: the file, the position, the offset. Its message includes its
//! cause's, so `{error}` alone says everything; a printer of source chains (the `seglog` tool)
//! leaves out a cause whose message it already printed.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::config::ConfigError;
use crate::format::DecodeError;
use crate::limits::{OFFSET_MAP_MEMORY_BYTES_MAX, OFFSET_MAP_SLOT_BYTES};
use crate::types::{Offset, TopicNameError};

/// A failure of the storage below a log: an I/O error or bytes that cannot be trusted.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StorageError {
    #[error("{op} {file}: {source}")]
    Io {
        op: &'static str,
        file: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("corrupt {file} at position {position}: {reason}")]
    Corrupt {
        file: PathBuf,
        position: u64,
        reason: String,
    },
    /// The partition whose files are in `dir` went offline after a failed write, sync or rename
    /// (`cause`): it refuses appends and fetches until the engine (or log) is reopened, which
    /// recovers it.
    #[error("partition {dir} is offline after a storage error ({cause}); reopen to recover it")]
    Offline { dir: PathBuf, cause: String },
    /// A path the engine needs as a directory is a file.
    #[error("{path} is a file, not a directory")]
    NotADirectory { path: PathBuf },
    /// The log handed its active segment a write that breaks the segment's invariants (a bug in
    /// seglog, not bad input): refused before anything is written, and the log fails.
    #[error("refused to write to {file}: {reason} (an internal error; nothing was written)")]
    InvalidAppend { file: PathBuf, reason: String },
    #[error(
        "{file} holds a message in the legacy format (magic {magic}) at position {position}; seglog reads magic 2 only and will not truncate it"
    )]
    UnsupportedFormat {
        file: PathBuf,
        position: u64,
        magic: i8,
    },
}

impl StorageError {
    /// What went wrong, as one line: an offline partition's first error, not the refusal.
    pub fn cause(&self) -> String {
        match self {
            StorageError::Offline { cause, .. } => cause.clone(),
            error => error.to_string(),
        }
    }

    /// Wraps an `io::Error` from operation `op` on `file`.
    pub fn io(op: &'static str, file: impl Into<PathBuf>, source: io::Error) -> StorageError {
        StorageError::Io {
            op,
            file: file.into(),
            source,
        }
    }
}

/// Why the engine could not take a request at all.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EngineUnavailable {
    #[error("the engine is closed")]
    Closed,
    #[error("data directory {dir} is offline after a storage error ({cause}); reopen the engine")]
    Offline { dir: PathBuf, cause: String },
    #[error("shard {shard} failed and no longer serves its partitions; reopen the engine")]
    ShardFailed { shard: usize },
    #[error("shard {shard}'s request queue is full; retry later")]
    QueueFull { shard: usize },
    #[error("{inflight_bytes} bytes are already in flight (limit {limit_bytes}); retry later")]
    TooManyBytesInFlight {
        inflight_bytes: u64,
        limit_bytes: u64,
    },
}

/// Opening a data directory or a partition log.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("data directory {dir} is locked by another seglog instance")]
    Locked { dir: PathBuf },
    #[error("{path} is not a partition directory named <topic>-<partition>")]
    NotAPartitionDirectory { path: PathBuf },
    #[error("topic registry {file} is invalid at line {line}: {reason}")]
    TopicRegistry {
        file: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("io_uring was required for {dir} but cannot be set up: {source}")]
    IoUringUnavailable {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot start shard thread {shard}: {source}")]
    ShardThread {
        shard: usize,
        #[source]
        source: io::Error,
    },
    #[error("log.cleaner.dedupe.buffer.size: {0}")]
    DedupeBuffer(#[from] OffsetMapError),
    #[error("cannot start the cleaner thread: {source}")]
    CleanerThread {
        #[source]
        source: io::Error,
    },
}

/// Appending batches to a partition log.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AppendError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("invalid batch at byte {position} of the append: {source}")]
    InvalidBatch {
        position: usize,
        #[source]
        source: DecodeError,
    },
    #[error("batch of {size_bytes} bytes exceeds max.message.bytes = {max_bytes}")]
    BatchTooLarge { size_bytes: u64, max_bytes: u64 },
    #[error(
        "the batch at byte {position} of the append has a record without a key; a compacted topic (cleanup.policy=compact) keeps records by key, so every record needs one"
    )]
    NullKeyInCompactedTopic { position: usize },
    #[error("append of {size_bytes} bytes exceeds segment.bytes = {segment_bytes}")]
    AppendTooLarge { size_bytes: u64, segment_bytes: u64 },
    #[error("the append holds no batch")]
    Empty,
    #[error("offset {next_offset} plus {record_count} records overflows the offset space")]
    OffsetOverflow {
        next_offset: Offset,
        record_count: u64,
    },
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition { topic: String, partition: u32 },
    /// The topic is internal (`engine::is_internal_topic`): only the engine's own components
    /// append to it.
    #[error(
        "topic {topic} is internal: the group coordinator manages it (the committed offsets of consumer groups), so it can be read but not written, created, grown or deleted directly"
    )]
    InternalTopic { topic: String },
    #[error("partition {topic}-{partition} cannot be opened: {source}")]
    PartitionOpen {
        topic: String,
        partition: u32,
        #[source]
        source: Box<OpenError>,
    },
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
}

/// Reading from a partition log.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReadError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(
        "offset {requested} is out of range: valid offsets are {log_start_offset} (log start offset) to {log_end_offset} (log end offset)"
    )]
    OffsetOutOfRange {
        requested: Offset,
        log_start_offset: Offset,
        log_end_offset: Offset,
    },
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition { topic: String, partition: u32 },
    #[error("partition {topic}-{partition} cannot be opened: {source}")]
    PartitionOpen {
        topic: String,
        partition: u32,
        #[source]
        source: Box<OpenError>,
    },
    /// A record of a batch that passed its CRC check does not decode (a point lookup decodes it
    /// on the shard).
    #[error("the record at offset {offset} of {topic}-{partition} does not decode: {source}")]
    InvalidRecord {
        topic: String,
        partition: u32,
        offset: Offset,
        #[source]
        source: DecodeError,
    },
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
}

/// Changing the log start offset or truncating.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeleteRecordsError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(
        "cannot move the log start offset to {requested}: the log holds [{log_start_offset}, {log_end_offset}]"
    )]
    OffsetOutOfRange {
        requested: Offset,
        log_start_offset: Offset,
        log_end_offset: Offset,
    },
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition { topic: String, partition: u32 },
    /// The topic is internal (`engine::is_internal_topic`): its records are its owner's to
    /// delete.
    #[error(
        "topic {topic} is internal: the group coordinator manages it (the committed offsets of consumer groups), so it can be read but not written, created, grown or deleted directly"
    )]
    InternalTopic { topic: String },
    #[error("partition {topic}-{partition} cannot be opened: {source}")]
    PartitionOpen {
        topic: String,
        partition: u32,
        #[source]
        source: Box<OpenError>,
    },
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
}

/// Flushing partitions to disk.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FlushError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
}

/// Creating, describing, growing or deleting topics.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TopicError {
    #[error(transparent)]
    TopicName(#[from] TopicNameError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("topic {topic} already exists")]
    TopicExists { topic: String },
    #[error("topic {topic} does not exist")]
    UnknownTopic { topic: String },
    /// The topic is internal (`engine::is_internal_topic`): only its owner creates, grows or
    /// deletes it.
    #[error(
        "topic {topic} is internal: the group coordinator manages it (the committed offsets of consumer groups), so it can be read but not written, created, grown or deleted directly"
    )]
    InternalTopic { topic: String },
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition { topic: String, partition: u32 },
    #[error("topic {topic} has {current} partitions; cannot change to {requested}")]
    InvalidPartitionCount {
        topic: String,
        current: u32,
        requested: u32,
    },
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
}

/// Convenience for topic-name errors surfacing through the data directory.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PartitionError {
    #[error(transparent)]
    TopicName(#[from] TopicNameError),
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition { topic: String, partition: u32 },
}

/// Why the cleaner's offset map cannot be made with the given memory and load factor.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum OffsetMapError {
    #[error(
        "an offset map of {memory_bytes} bytes at load factor {load_factor} holds no key; \
         it needs at least one (slots are {OFFSET_MAP_SLOT_BYTES} bytes)"
    )]
    TooSmall {
        memory_bytes: usize,
        load_factor: f64,
    },
    #[error(
        "an offset map of {memory_bytes} bytes exceeds the limit of {OFFSET_MAP_MEMORY_BYTES_MAX} bytes"
    )]
    TooLarge { memory_bytes: usize },
    #[error("load factor {load_factor} is outside (0, 1)")]
    LoadFactor { load_factor: f64 },
}
