//! Errors of consumer groups, one enum per operation family: opening the coordinator, joining,
//! polling, committing, positioning, describing, and decoding the offsets topic's records.

use std::path::PathBuf;

use thiserror::Error;

use super::assignor::{AssignmentStrategy, MemberId};
use super::coordinator::Generation;
use crate::error::{AppendError, ReadError, StorageError, TopicError};
use crate::format::DecodeError;
use crate::types::{Offset, TopicNameError, TopicPartition};

/// Why a record of the offsets topic does not decode (see `offset_record`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OffsetRecordError {
    /// The bytes end inside a field.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A string field's bytes are not UTF-8.
    #[error("{field} is not UTF-8")]
    NotUtf8 {
        /// The field's name: `group`, `topic` or `metadata`.
        field: &'static str,
    },
    /// The key's topic is not a legal topic name.
    #[error(transparent)]
    TopicName(#[from] TopicNameError),
    /// A field that cannot be negative is: a key's partition, or a value's offset.
    #[error("{field} is {value}; it cannot be negative")]
    Negative {
        /// The field's name: `partition` or `offset`.
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// An offset to commit is above `i64::MAX`, so Kafka's value cannot hold it.
    #[error("offset {offset} does not fit Kafka's int64")]
    OffsetTooLarge {
        /// The offset to commit.
        offset: Offset,
    },
    /// A string field's `int16` length is negative (a null string, which these records never
    /// hold).
    #[error("{field} has length {length}; it cannot be negative")]
    NegativeLength {
        /// The field's name: `group`, `topic` or `metadata`.
        field: &'static str,
        /// The length read.
        length: i16,
    },
    /// The key's version is negative: it names no record type of the offsets topic.
    #[error("key version {version} is not a record type")]
    InvalidKeyVersion {
        /// The version read.
        version: i16,
    },
    /// An offset commit value has a version seglog does not read (it reads 0 to 3).
    #[error("offset commit value version {version} is not supported (versions 0 to 3 are)")]
    UnsupportedValueVersion {
        /// The version read.
        version: i16,
    },
    /// Bytes are left over after the last field of a key or value.
    #[error("{count} bytes follow the {record}")]
    TrailingBytes {
        /// Which part of the record: `key` or `value`.
        record: &'static str,
        /// How many bytes are left over.
        count: usize,
    },
    /// A record of the offsets topic has a null key; every record there needs one.
    #[error("the record has no key")]
    NullKey,
    /// A string to encode is longer than an `int16` length can say.
    #[error("{field} takes {length} bytes; a Kafka string holds at most {max}")]
    TooLong {
        /// The field's name: `group`, `topic` or `metadata`.
        field: &'static str,
        /// The string's length, in bytes.
        length: usize,
        /// The longest string allowed, in bytes (`i16::MAX`).
        max: usize,
    },
}

/// Opening a group coordinator: its lock, and creating and reading the offsets topic.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CoordinatorError {
    /// Another coordinator holds the engine's lock file (`seglog-groups.lock`): one coordinator
    /// per engine.
    #[error("another group coordinator has the data directory {dir} open")]
    Locked {
        /// The engine's data directory.
        dir: PathBuf,
    },
    /// Opening or locking the lock file failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The offsets topic `__consumer_offsets` does not exist and cannot be created.
    #[error("cannot create the offsets topic {topic}: {source}")]
    CreateTopic {
        /// The offsets topic's name.
        topic: String,
        /// Why it cannot be created.
        #[source]
        source: TopicError,
    },
    /// The log start and end offsets of an offsets topic partition cannot be read.
    #[error("cannot describe {partition}: {source}")]
    Describe {
        /// The offsets topic partition.
        partition: TopicPartition,
        /// Why it cannot be described.
        #[source]
        source: TopicError,
    },
    /// Fetching from an offsets topic partition, to load its committed offsets, failed.
    #[error("cannot read {partition} at offset {offset}: {source}")]
    Read {
        /// The offsets topic partition.
        partition: TopicPartition,
        /// The fetch offset.
        offset: Offset,
        /// Why the fetch failed.
        #[source]
        source: ReadError,
    },
    /// A batch of an offsets topic partition does not decode.
    #[error("the batch of {partition} at offset {offset} does not decode: {source}")]
    Batch {
        /// The offsets topic partition.
        partition: TopicPartition,
        /// The offset the batch was read from.
        offset: Offset,
        /// Why it does not decode.
        #[source]
        source: DecodeError,
    },
    /// A record of an offsets topic partition is not an offset commit seglog can read.
    #[error("the record of {partition} at offset {offset} is not an offset commit: {source}")]
    Record {
        /// The offsets topic partition.
        partition: TopicPartition,
        /// The record's offset.
        offset: Offset,
        /// Why it does not decode.
        #[source]
        source: OffsetRecordError,
    },
    /// Loading an offsets topic partition stopped short of its log end offset: a fetch returned
    /// nothing past the fetch offset.
    #[error(
        "reading {partition} stopped at offset {offset}, below its log end offset {log_end_offset}"
    )]
    NoProgress {
        /// The offsets topic partition.
        partition: TopicPartition,
        /// The offset loading reached.
        offset: Offset,
        /// The partition's log end offset when loading began.
        log_end_offset: Offset,
    },
}

/// Subscribing: joining a group.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The consumer's `group.id` is empty, longer than 255 bytes or holds a control character
    /// (Kafka's `INVALID_GROUP_ID`).
    #[error("invalid group.id {group:?}: {reason}")]
    InvalidGroupId {
        /// The `group.id`.
        group: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A subscribed topic's name is not a legal topic name.
    #[error(transparent)]
    TopicName(#[from] TopicNameError),
    /// The topic list is empty.
    #[error("a subscription needs at least one topic")]
    NoTopics,
    /// The consumer is a member of a group already.
    #[error("the consumer is already subscribed to group {group}; unsubscribe first")]
    AlreadySubscribed {
        /// The group it is a member of.
        group: String,
    },
    /// The group's members assign with another `partition.assignment.strategy` (Kafka's
    /// `INCONSISTENT_GROUP_PROTOCOL`).
    #[error(
        "group {group} assigns with {group_strategy}; a member asking for {requested} cannot join it"
    )]
    InconsistentStrategy {
        /// The group's id.
        group: String,
        /// The strategy the group assigns with.
        group_strategy: AssignmentStrategy,
        /// The strategy this consumer is configured with.
        requested: AssignmentStrategy,
    },
    /// `subscribe` was called from the consumer's own rebalance listener.
    #[error("a rebalance callback cannot subscribe or unsubscribe its consumer")]
    InCallback,
}

/// Committing offsets.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CommitError {
    /// The consumer's own thread ([`AsyncConsumer`](crate::group::AsyncConsumer)) is gone or
    /// could not be started.
    #[error(transparent)]
    Unavailable(#[from] crate::error::EngineUnavailable),
    /// The consumer is not a member of a group, so it has nothing to commit for.
    #[error("the consumer is not subscribed to a group")]
    NotSubscribed,
    /// The group no longer knows the member (Kafka's `UNKNOWN_MEMBER_ID`).
    #[error(
        "member {member_id} is no longer in group {group} (it left, or was removed for not polling within max.poll.interval.ms)"
    )]
    UnknownMember {
        /// The group's id.
        group: String,
        /// The member that committed.
        member_id: MemberId,
    },
    /// The group rebalanced since the member's last poll: the commit is fenced (Kafka's
    /// `ILLEGAL_GENERATION`).
    #[error(
        "member {member_id} of group {group} commits from generation {generation}, but the group rebalanced to generation {group_generation}; poll to rejoin, then commit"
    )]
    IllegalGeneration {
        /// The group's id.
        group: String,
        /// The member that committed.
        member_id: MemberId,
        /// The generation the member last synchronised with.
        generation: Generation,
        /// The group's current generation.
        group_generation: Generation,
    },
    /// The commit names a partition the member does not own now.
    #[error("member {member_id} of group {group} does not own {partition}")]
    NotAssigned {
        /// The group's id.
        group: String,
        /// The member that committed.
        member_id: MemberId,
        /// The first partition of the commit the member does not own.
        partition: TopicPartition,
    },
    /// A partition's metadata string is longer than Kafka's `offset.metadata.max.bytes` (Kafka's
    /// `OFFSET_METADATA_TOO_LARGE`).
    #[error(
        "the metadata committed for {partition} takes {size_bytes} bytes; at most {max_bytes} are kept"
    )]
    MetadataTooLarge {
        /// The partition whose metadata is too long.
        partition: TopicPartition,
        /// The metadata's length, in bytes.
        size_bytes: usize,
        /// The most bytes of metadata kept.
        max_bytes: usize,
    },
    /// The commit cannot be encoded as records of the offsets topic.
    #[error("cannot encode the commit: {source}")]
    InvalidRecord {
        /// Why it cannot be encoded.
        #[source]
        source: OffsetRecordError,
    },
    /// The offsets topic answered the commit's append with another record count than it
    /// appended, so the records cannot be matched to partitions (a bug in seglog).
    #[error(
        "the commit of group {group} appended {expected} records to {partition}, but the append was answered with {appended}; the commit is not recorded (an internal error)"
    )]
    AppendMismatch {
        /// The group's id.
        group: String,
        /// The offsets topic partition appended to.
        partition: TopicPartition,
        /// The number of records appended: one per committed partition.
        expected: u64,
        /// The record count in the append's answer.
        appended: u64,
    },
    /// Appending the commit to the offsets topic failed: the offsets are not committed.
    #[error("cannot append to the offsets topic {partition}: {source}")]
    Append {
        /// The offsets topic partition appended to.
        partition: TopicPartition,
        /// Why the append failed.
        #[source]
        source: AppendError,
    },
}

/// Leaving a group (`unsubscribe`, `close`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CloseError {
    /// The consumer's own thread ([`AsyncConsumer`](crate::group::AsyncConsumer)) is gone or
    /// could not be started.
    #[error(transparent)]
    Unavailable(#[from] crate::error::EngineUnavailable),
    /// `unsubscribe` or `close` was called from the consumer's own rebalance listener.
    #[error("a rebalance callback cannot unsubscribe its consumer")]
    InCallback,
    /// The auto-commit on leaving failed; the consumer left its group all the same.
    #[error("the final commit failed (the consumer left its group all the same): {0}")]
    Commit(#[from] CommitError),
}

/// Deleting a group's committed offsets.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeleteGroupError {
    /// The group still has members (Kafka's `NON_EMPTY_GROUP`).
    #[error("group {group} has {member_count} live members; only an empty group can be deleted")]
    NotEmpty {
        /// The group's id.
        group: String,
        /// How many members it has.
        member_count: usize,
    },
    /// The coordinator knows no group of that id (Kafka's `GROUP_ID_NOT_FOUND`).
    #[error("group {group} has no committed offsets and no members")]
    UnknownGroup {
        /// The group's id.
        group: String,
    },
    /// Appending the tombstones of the group's committed offsets failed.
    #[error(transparent)]
    Commit(#[from] CommitError),
}

/// Polling for records.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PollError {
    /// The consumer's own thread ([`AsyncConsumer`](crate::group::AsyncConsumer)) is gone or
    /// could not be started.
    #[error(transparent)]
    Unavailable(#[from] crate::error::EngineUnavailable),
    /// The consumer is not a member of a group: `subscribe` first.
    #[error("the consumer is not subscribed to a group")]
    NotSubscribed,
    /// `poll` was called from the consumer's own rebalance listener.
    #[error("a rebalance callback cannot poll its consumer")]
    InCallback,
    /// The member had been removed from its group and could not join it again.
    #[error("rejoining the group failed: {0}")]
    Rejoin(#[from] JoinError),
    /// An assigned partition's starting position cannot be found.
    #[error(transparent)]
    Position(#[from] PositionError),
    /// Fetching from an assigned partition failed.
    #[error("cannot fetch {partition} at offset {offset}: {source}")]
    Fetch {
        /// The partition fetched.
        partition: TopicPartition,
        /// The fetch offset: the consumer's position.
        offset: Offset,
        /// Why the fetch failed.
        #[source]
        source: ReadError,
    },
    /// A fetched batch or one of its records does not decode.
    #[error("the batch of {partition} fetched at offset {offset} does not decode: {source}")]
    Corrupt {
        /// The partition fetched.
        partition: TopicPartition,
        /// The offset the batch was read from.
        offset: Offset,
        /// Why it does not decode.
        #[source]
        source: DecodeError,
    },
    /// The consumer's position is outside the partition's log and `auto.offset.reset` is
    /// `none`, so there is no offset to reset it to.
    #[error(
        "offset {offset} of {partition} is out of range ({log_start_offset} to {log_end_offset}) and auto.offset.reset is none"
    )]
    OffsetOutOfRange {
        /// The partition fetched.
        partition: TopicPartition,
        /// The consumer's position.
        offset: Offset,
        /// The partition's log start offset.
        log_start_offset: Offset,
        /// The partition's log end offset.
        log_end_offset: Offset,
    },
}

/// Positioning a partition: `position`, `seek`, `pause`, `resume`.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PositionError {
    /// The partition is not assigned to this consumer now.
    #[error("{partition} is not assigned to this consumer")]
    NotAssigned {
        /// The partition asked about.
        partition: TopicPartition,
    },
    /// The group committed no offset for the partition and `auto.offset.reset` is `none`
    /// (Kafka's `NoOffsetForPartitionException`).
    #[error("{partition} has no committed offset and auto.offset.reset is none")]
    NoOffset {
        /// The partition without a position.
        partition: TopicPartition,
    },
    /// The partition's log start and end offsets, which `auto.offset.reset` needs, cannot be
    /// read.
    #[error("cannot read the offsets of {partition}: {source}")]
    Describe {
        /// The partition described.
        partition: TopicPartition,
        /// Why it cannot be described.
        #[source]
        source: TopicError,
    },
}

/// Describing a group.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DescribeError {
    /// The group has no members and no committed offsets.
    #[error("consumer group {group} does not exist")]
    UnknownGroup {
        /// The group's id.
        group: String,
    },
    /// A partition's log end offset, which its lag needs, cannot be read.
    #[error("cannot read the log end offset of {partition}: {source}")]
    Describe {
        /// The partition described.
        partition: TopicPartition,
        /// Why it cannot be described.
        #[source]
        source: TopicError,
    },
}
