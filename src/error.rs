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
    /// An operating-system call on a file or directory failed.
    #[error("{op} {file}: {source}")]
    Io {
        /// The operation that failed, such as `read`, `fdatasync` or `rename`.
        op: &'static str,
        /// The file or directory it was applied to.
        file: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A file's bytes cannot be trusted: recovery, a scan or the cleaner found bytes that do not
    /// decode or segments that do not fit together, and refuses to go on rather than truncate.
    #[error("corrupt {file} at position {position}: {reason}")]
    Corrupt {
        /// The corrupt file.
        file: PathBuf,
        /// The byte position in `file` where the corruption starts.
        position: u64,
        /// What is wrong there.
        reason: String,
    },
    /// The partition whose files are in `dir` went offline after a failed write, sync or rename
    /// (`cause`): it refuses appends and fetches until the engine (or log) is reopened, which
    /// recovers it.
    #[error("partition {dir} is offline after a storage error ({cause}); reopen to recover it")]
    Offline {
        /// The partition's directory.
        dir: PathBuf,
        /// The storage error that took it offline, as one line.
        cause: String,
    },
    /// A path the engine needs as a directory is a file.
    #[error("{path} is a file, not a directory")]
    NotADirectory {
        /// The path that is a file.
        path: PathBuf,
    },
    /// The log handed its active segment a write that breaks the segment's invariants (a bug in
    /// seglog, not bad input): refused before anything is written, and the log fails.
    #[error("refused to write to {file}: {reason} (an internal error; nothing was written)")]
    InvalidAppend {
        /// The active segment's `.log` file.
        file: PathBuf,
        /// Which invariant the write breaks.
        reason: String,
    },
    /// A segment holds a message set of magic 0 or 1 (Kafka before 0.11): seglog reads
    /// RecordBatch v2 only and stops rather than truncate data it cannot read.
    #[error(
        "{file} holds a message in the legacy format (magic {magic}) at position {position}; seglog reads magic 2 only and will not truncate it"
    )]
    UnsupportedFormat {
        /// The segment's `.log` file.
        file: PathBuf,
        /// The byte position of the legacy message in `file`.
        position: u64,
        /// The message's magic byte (format version).
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

/// Why no producer id could be handed out ([`crate::engine::Engine::allocate_producer_id`]).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ProducerIdError {
    /// The engine is closed or offline.
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
    /// Reading or writing the producer-id block file failed: no id was handed out.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The producer-id block file does not parse: which ids were handed out is unknown.
    #[error("{file}: {source}")]
    Corrupt {
        /// The block file.
        file: PathBuf,
        /// What is wrong with it.
        source: crate::format::producer_ids::ProducerIdBlockError,
    },
    /// Every producer id up to `i64::MAX` was handed out.
    #[error("every producer id was handed out")]
    Exhausted,
}

/// Why the engine could not take a request at all.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EngineUnavailable {
    /// The engine was closed (or is closing): it takes no more requests.
    #[error("the engine is closed")]
    Closed,
    /// Writing the data directory's checkpoint files failed: which recovery points and log start
    /// offsets the disk holds is unknown, so the engine refuses every request until reopened.
    #[error("data directory {dir} is offline after a storage error ({cause}); reopen the engine")]
    Offline {
        /// The data directory.
        dir: PathBuf,
        /// The storage error that took it offline, as one line.
        cause: String,
    },
    /// The shard thread that owns the partition stopped after an internal failure: its
    /// partitions are unavailable until the engine is reopened.
    #[error("shard {shard} failed and no longer serves its partitions; reopen the engine")]
    ShardFailed {
        /// The shard's index, from 0.
        shard: usize,
    },
    /// Backpressure: the shard's bounded request queue is full; the request was not sent.
    #[error("shard {shard}'s request queue is full; retry later")]
    QueueFull {
        /// The shard's index, from 0.
        shard: usize,
    },
    /// Backpressure: accepting this append would take the bytes of appends not yet answered past
    /// the engine's limit
    /// ([`EngineConfig::inflight_bytes_max`](crate::engine::EngineConfig::inflight_bytes_max)).
    #[error("{inflight_bytes} bytes are already in flight (limit {limit_bytes}); retry later")]
    TooManyBytesInFlight {
        /// The bytes of appends already in flight, before this one.
        inflight_bytes: u64,
        /// The limit, in bytes.
        limit_bytes: u64,
    },
    /// An async form could not run its blocking work on a thread of its own: the operating
    /// system refused the thread, or the work ended without an answer (it panicked).
    #[error("{call} could not run off the async caller's thread: {cause}")]
    NoThread {
        /// The call, for example `create_topic`.
        call: &'static str,
        /// What went wrong, as one line.
        cause: String,
    },
}

/// Opening a data directory or a partition log.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Reading, recovering or creating the files failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The engine's or a topic's configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// Another engine (in this process or another) holds the data directory's `.lock`.
    #[error("data directory {dir} is locked by another seglog instance")]
    Locked {
        /// The data directory.
        dir: PathBuf,
    },
    /// The directory to repair is missing or not a partition's.
    #[error("{path} is not a partition directory named <topic>-<partition>")]
    NotAPartitionDirectory {
        /// The path that was expected to be a partition directory.
        path: PathBuf,
    },
    /// The topic registry (`seglog-topics`) does not parse, or a topic's setting in it is
    /// invalid.
    #[error("topic registry {file} is invalid at line {line}: {reason}")]
    TopicRegistry {
        /// The registry file.
        file: PathBuf,
        /// The offending line, from 1; 0 when the fault is not one line's.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// [`Engine::open_async`](crate::engine::Engine::open_async) could not run the open off
    /// the caller's thread.
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
    /// The configured I/O backend is io_uring but this kernel or process cannot set up a ring.
    #[error("io_uring was required for {dir} but cannot be set up: {source}")]
    IoUringUnavailable {
        /// The data directory being opened.
        dir: PathBuf,
        /// The error from setting up the ring.
        #[source]
        source: io::Error,
    },
    /// The operating system refused to spawn a shard thread.
    #[error("cannot start shard thread {shard}: {source}")]
    ShardThread {
        /// The shard's index, from 0.
        shard: usize,
        /// The error from spawning the thread.
        #[source]
        source: io::Error,
    },
    /// The cleaner's offset map cannot be made from `log.cleaner.dedupe.buffer.size`.
    #[error("log.cleaner.dedupe.buffer.size: {0}")]
    DedupeBuffer(#[from] OffsetMapError),
    /// The operating system refused to spawn the log cleaner thread.
    #[error("cannot start the cleaner thread: {source}")]
    CleanerThread {
        /// The error from spawning the thread.
        #[source]
        source: io::Error,
    },
}

/// Appending batches to a partition log.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AppendError {
    /// Writing to the partition's files failed, or the partition is offline.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A batch of the append fails validation: framing, CRC, magic, record count or its records.
    #[error("invalid batch at byte {position} of the append: {source}")]
    InvalidBatch {
        /// The batch's byte position in the appended bytes.
        position: usize,
        /// Why it does not decode.
        #[source]
        source: DecodeError,
    },
    /// One batch is larger than the topic's `max.message.bytes` (Kafka's `MESSAGE_TOO_LARGE`).
    #[error("batch of {size_bytes} bytes exceeds max.message.bytes = {max_bytes}")]
    BatchTooLarge {
        /// The batch's size, in bytes.
        size_bytes: u64,
        /// The topic's `max.message.bytes`.
        max_bytes: u64,
    },
    /// A batch for a topic with `cleanup.policy` `compact` (or `compact,delete`) holds a record
    /// with a null key (Kafka's `INVALID_RECORD`).
    #[error(
        "the batch at byte {position} of the append has a record without a key; a compacted topic (cleanup.policy=compact) keeps records by key, so every record needs one"
    )]
    NullKeyInCompactedTopic {
        /// The batch's byte position in the appended bytes.
        position: usize,
    },
    /// The whole append is larger than one segment (`segment.bytes`) can hold (Kafka's
    /// `RECORD_LIST_TOO_LARGE`).
    #[error("append of {size_bytes} bytes exceeds segment.bytes = {segment_bytes}")]
    AppendTooLarge {
        /// The append's size, in bytes.
        size_bytes: u64,
        /// The topic's `segment.bytes`.
        segment_bytes: u64,
    },
    /// The appended bytes hold no batch.
    #[error("the append holds no batch")]
    Empty,
    /// Assigning offsets to the append's records would go past `i64::MAX`.
    #[error("offset {next_offset} plus {record_count} records overflows the offset space")]
    OffsetOverflow {
        /// The partition's log end offset: the offset the first record would get.
        next_offset: Offset,
        /// The number of records in the append.
        record_count: u64,
    },
    /// An append at a given offset (`Engine::append_at`) found the log ending elsewhere: a
    /// replica's log and its owner's view of it disagree.
    #[error("the append expected the log to end at {expected}, but it ends at {log_end_offset}")]
    LogEndMismatch {
        /// The offset the append's first record was to get.
        expected: Offset,
        /// The partition's log end offset.
        log_end_offset: Offset,
    },
    /// A batch's producer epoch is below the epoch its producer already wrote with: a fenced
    /// (zombie) producer (Kafka's `INVALID_PRODUCER_EPOCH`). Nothing of the append is written.
    #[error(
        "producer {producer_id} wrote with epoch {producer_epoch}, below its current epoch {current_epoch}"
    )]
    InvalidProducerEpoch {
        /// The batch's `producerId`.
        producer_id: i64,
        /// The batch's `producerEpoch`.
        producer_epoch: i16,
        /// The epoch the partition last saw from the producer.
        current_epoch: i16,
    },
    /// A batch's first sequence number does not follow its producer's last one (or a new epoch
    /// does not start at 0): a batch in between was lost (Kafka's `OUT_OF_ORDER_SEQUENCE_NUMBER`).
    /// Nothing of the append is written.
    #[error(
        "producer {producer_id} epoch {producer_epoch} sent first sequence {first_sequence}, which does not follow its last sequence {last_sequence} (epoch {current_epoch})"
    )]
    OutOfOrderSequence {
        /// The batch's `producerId`.
        producer_id: i64,
        /// The batch's `producerEpoch`.
        producer_epoch: i16,
        /// The batch's `baseSequence`.
        first_sequence: i32,
        /// The epoch the partition last saw from the producer.
        current_epoch: i16,
        /// The last sequence of the producer's last batch in that epoch (-1: none).
        last_sequence: i32,
    },
    /// The topic does not exist or has fewer partitions.
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition {
        /// The topic's name.
        topic: String,
        /// The partition that does not exist.
        partition: u32,
    },
    /// The topic is internal (`engine::is_internal_topic`): only the engine's own components
    /// append to it.
    #[error(
        "topic {topic} is internal: the group coordinator manages it (the committed offsets of consumer groups), so it can be read but not written, created, grown or deleted directly"
    )]
    InternalTopic {
        /// The internal topic's name.
        topic: String,
    },
    /// Opening (and recovering) the partition's log on its first use failed.
    #[error("partition {topic}-{partition} cannot be opened: {source}")]
    PartitionOpen {
        /// The topic's name.
        topic: String,
        /// The partition that could not be opened.
        partition: u32,
        /// Why it could not be opened.
        #[source]
        source: Box<OpenError>,
    },
    /// The engine could not take the request.
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
}

/// Reading from a partition log.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Reading the partition's files failed, or the partition is offline.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The fetch offset is below the log start offset or above the log end offset (Kafka's
    /// `OFFSET_OUT_OF_RANGE`).
    #[error(
        "offset {requested} is out of range: valid offsets are {log_start_offset} (log start offset) to {log_end_offset} (log end offset)"
    )]
    OffsetOutOfRange {
        /// The offset asked for.
        requested: Offset,
        /// The partition's log start offset: its first readable offset.
        log_start_offset: Offset,
        /// The partition's log end offset: the offset its next record will get.
        log_end_offset: Offset,
    },
    /// The topic does not exist or has fewer partitions.
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition {
        /// The topic's name.
        topic: String,
        /// The partition that does not exist.
        partition: u32,
    },
    /// Opening (and recovering) the partition's log on its first use failed.
    #[error("partition {topic}-{partition} cannot be opened: {source}")]
    PartitionOpen {
        /// The topic's name.
        topic: String,
        /// The partition that could not be opened.
        partition: u32,
        /// Why it could not be opened.
        #[source]
        source: Box<OpenError>,
    },
    /// A record of a batch that passed its CRC check does not decode (a point lookup decodes it
    /// on the shard).
    #[error("the record at offset {offset} of {topic}-{partition} does not decode: {source}")]
    InvalidRecord {
        /// The topic's name.
        topic: String,
        /// The partition read.
        partition: u32,
        /// The record's offset.
        offset: Offset,
        /// Why it does not decode.
        #[source]
        source: DecodeError,
    },
    /// The engine could not take the request.
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
}

/// Changing the log start offset or truncating.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeleteRecordsError {
    /// Deleting segments or writing the partition's files failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The requested log start offset is past the log end offset (Kafka's
    /// `OFFSET_OUT_OF_RANGE`).
    #[error(
        "cannot move the log start offset to {requested}: the log holds [{log_start_offset}, {log_end_offset}]"
    )]
    OffsetOutOfRange {
        /// The log start offset asked for.
        requested: Offset,
        /// The partition's current log start offset.
        log_start_offset: Offset,
        /// The partition's log end offset: the highest log start offset allowed.
        log_end_offset: Offset,
    },
    /// The topic does not exist or has fewer partitions.
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition {
        /// The topic's name.
        topic: String,
        /// The partition that does not exist.
        partition: u32,
    },
    /// The topic is internal (`engine::is_internal_topic`): its records are its owner's to
    /// delete.
    #[error(
        "topic {topic} is internal: the group coordinator manages it (the committed offsets of consumer groups), so it can be read but not written, created, grown or deleted directly"
    )]
    InternalTopic {
        /// The internal topic's name.
        topic: String,
    },
    /// Opening (and recovering) the partition's log on its first use failed.
    #[error("partition {topic}-{partition} cannot be opened: {source}")]
    PartitionOpen {
        /// The topic's name.
        topic: String,
        /// The partition that could not be opened.
        partition: u32,
        /// Why it could not be opened.
        #[source]
        source: Box<OpenError>,
    },
    /// The engine could not take the request.
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
}

/// Truncating a partition log (`Engine::truncate_to`, `Engine::truncate_fully_and_start_at`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TruncateError {
    /// Removing segments or writing the partition's files failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The cut is below the log start offset: those records are gone already.
    #[error("cannot truncate to {requested}: the log starts at {log_start_offset}")]
    BelowLogStart {
        /// The offset asked for.
        requested: Offset,
        /// The partition's log start offset.
        log_start_offset: Offset,
    },
    /// The topic does not exist or has fewer partitions.
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition {
        /// The topic's name.
        topic: String,
        /// The partition that does not exist.
        partition: u32,
    },
    /// The topic is internal (`engine::is_internal_topic`): its owner alone writes it.
    #[error(
        "topic {topic} is internal: the group coordinator manages it, so it cannot be truncated"
    )]
    InternalTopic {
        /// The internal topic's name.
        topic: String,
    },
    /// Opening (and recovering) the partition's log on its first use failed.
    #[error("partition {topic}-{partition} cannot be opened: {source}")]
    PartitionOpen {
        /// The topic's name.
        topic: String,
        /// The partition that could not be opened.
        partition: u32,
        /// Why it could not be opened.
        #[source]
        source: Box<OpenError>,
    },
    /// The engine could not take the request.
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
}

/// Flushing partitions to disk.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FlushError {
    /// Syncing the partition's files failed, or the partition is offline.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The engine could not take the request.
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
}

/// Creating, describing, growing, reconfiguring or deleting topics.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TopicError {
    /// The topic name is not a legal Kafka topic name.
    #[error(transparent)]
    TopicName(#[from] TopicNameError),
    /// The topic's configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Creating, syncing or deleting the topic's files, or writing the topic registry, failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A topic of that name exists already (Kafka's `TOPIC_ALREADY_EXISTS`).
    #[error("topic {topic} already exists")]
    TopicExists {
        /// The topic's name.
        topic: String,
    },
    /// No topic of that name exists (Kafka's `UNKNOWN_TOPIC_OR_PARTITION`).
    #[error("topic {topic} does not exist")]
    UnknownTopic {
        /// The topic's name.
        topic: String,
    },
    /// The topic is internal (`engine::is_internal_topic`): only its owner creates, grows,
    /// reconfigures or deletes it.
    #[error(
        "topic {topic} is internal: the group coordinator manages it (the committed offsets of consumer groups), so it can be read but not written, created, grown or deleted directly"
    )]
    InternalTopic {
        /// The internal topic's name.
        topic: String,
    },
    /// The topic does not exist or has fewer partitions.
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition {
        /// The topic's name.
        topic: String,
        /// The partition that does not exist.
        partition: u32,
    },
    /// A partition count of 0 at creation, or one not above the current count when growing: a
    /// topic's partitions can only be added (Kafka's `INVALID_PARTITIONS`).
    #[error("topic {topic} has {current} partitions; cannot change to {requested}")]
    InvalidPartitionCount {
        /// The topic's name.
        topic: String,
        /// The topic's partition count now; 0 when it is being created.
        current: u32,
        /// The partition count asked for.
        requested: u32,
    },
    /// The engine could not take the request.
    #[error(transparent)]
    Unavailable(#[from] EngineUnavailable),
}

/// Convenience for topic-name errors surfacing through the data directory.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PartitionError {
    /// The topic name is not a legal Kafka topic name.
    #[error(transparent)]
    TopicName(#[from] TopicNameError),
    /// Opening the partition's log failed.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The topic does not exist or has fewer partitions.
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition {
        /// The topic's name.
        topic: String,
        /// The partition that does not exist.
        partition: u32,
    },
}

/// Why the cleaner's offset map cannot be made with the given memory and load factor.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum OffsetMapError {
    /// The memory is too small to hold even one key at this load factor.
    #[error(
        "an offset map of {memory_bytes} bytes at load factor {load_factor} holds no key; \
         it needs at least one (slots are {OFFSET_MAP_SLOT_BYTES} bytes)"
    )]
    TooSmall {
        /// The memory given, in bytes.
        memory_bytes: usize,
        /// The fraction of the map's slots that may hold keys.
        load_factor: f64,
    },
    /// The memory asked for is above the map's limit.
    #[error(
        "an offset map of {memory_bytes} bytes exceeds the limit of {OFFSET_MAP_MEMORY_BYTES_MAX} bytes"
    )]
    TooLarge {
        /// The memory asked for, in bytes.
        memory_bytes: usize,
    },
    /// The load factor is not strictly between 0 and 1.
    #[error("load factor {load_factor} is outside (0, 1)")]
    LoadFactor {
        /// The load factor given.
        load_factor: f64,
    },
}
