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
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("{field} is not UTF-8")]
    NotUtf8 { field: &'static str },
    #[error(transparent)]
    TopicName(#[from] TopicNameError),
    #[error("{field} is {value}; it cannot be negative")]
    Negative { field: &'static str, value: i64 },
    #[error("offset {offset} does not fit Kafka's int64")]
    OffsetTooLarge { offset: Offset },
    #[error("{field} has length {length}; it cannot be negative")]
    NegativeLength { field: &'static str, length: i16 },
    #[error("key version {version} is not a record type")]
    InvalidKeyVersion { version: i16 },
    #[error("offset commit value version {version} is not supported (versions 0 to 3 are)")]
    UnsupportedValueVersion { version: i16 },
    #[error("{count} bytes follow the {record}")]
    TrailingBytes { record: &'static str, count: usize },
    #[error("the record has no key")]
    NullKey,
    #[error("{field} takes {length} bytes; a Kafka string holds at most {max}")]
    TooLong {
        field: &'static str,
        length: usize,
        max: usize,
    },
}

/// Opening a group coordinator: its lock, and creating and reading the offsets topic.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CoordinatorError {
    #[error("another group coordinator has the data directory {dir} open")]
    Locked { dir: PathBuf },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("cannot create the offsets topic {topic}: {source}")]
    CreateTopic {
        topic: String,
        #[source]
        source: TopicError,
    },
    #[error("cannot describe {partition}: {source}")]
    Describe {
        partition: TopicPartition,
        #[source]
        source: TopicError,
    },
    #[error("cannot read {partition} at offset {offset}: {source}")]
    Read {
        partition: TopicPartition,
        offset: Offset,
        #[source]
        source: ReadError,
    },
    #[error("the batch of {partition} at offset {offset} does not decode: {source}")]
    Batch {
        partition: TopicPartition,
        offset: Offset,
        #[source]
        source: DecodeError,
    },
    #[error("the record of {partition} at offset {offset} is not an offset commit: {source}")]
    Record {
        partition: TopicPartition,
        offset: Offset,
        #[source]
        source: OffsetRecordError,
    },
    #[error(
        "reading {partition} stopped at offset {offset}, below its log end offset {log_end_offset}"
    )]
    NoProgress {
        partition: TopicPartition,
        offset: Offset,
        log_end_offset: Offset,
    },
}

/// Subscribing: joining a group.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum JoinError {
    #[error("invalid group.id {group:?}: {reason}")]
    InvalidGroupId { group: String, reason: &'static str },
    #[error(transparent)]
    TopicName(#[from] TopicNameError),
    #[error("a subscription needs at least one topic")]
    NoTopics,
    #[error("the consumer is already subscribed to group {group}; unsubscribe first")]
    AlreadySubscribed { group: String },
    #[error(
        "group {group} assigns with {group_strategy}; a member asking for {requested} cannot join it"
    )]
    InconsistentStrategy {
        group: String,
        group_strategy: AssignmentStrategy,
        requested: AssignmentStrategy,
    },
    #[error("a rebalance callback cannot subscribe or unsubscribe its consumer")]
    InCallback,
}

/// Committing offsets.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CommitError {
    #[error("the consumer is not subscribed to a group")]
    NotSubscribed,
    #[error(
        "member {member_id} is no longer in group {group} (it left, or was removed for not polling within max.poll.interval.ms)"
    )]
    UnknownMember { group: String, member_id: MemberId },
    #[error(
        "member {member_id} of group {group} commits from generation {generation}, but the group rebalanced to generation {group_generation}; poll to rejoin, then commit"
    )]
    IllegalGeneration {
        group: String,
        member_id: MemberId,
        generation: Generation,
        group_generation: Generation,
    },
    #[error("member {member_id} of group {group} does not own {partition}")]
    NotAssigned {
        group: String,
        member_id: MemberId,
        partition: TopicPartition,
    },
    #[error(
        "the metadata committed for {partition} takes {size_bytes} bytes; at most {max_bytes} are kept"
    )]
    MetadataTooLarge {
        partition: TopicPartition,
        size_bytes: usize,
        max_bytes: usize,
    },
    #[error("cannot encode the commit: {source}")]
    InvalidRecord {
        #[source]
        source: OffsetRecordError,
    },
    #[error(
        "the commit of group {group} appended {expected} records to {partition}, but the append was answered with {appended}; the commit is not recorded (an internal error)"
    )]
    AppendMismatch {
        group: String,
        partition: TopicPartition,
        expected: u64,
        appended: u64,
    },
    #[error("cannot append to the offsets topic {partition}: {source}")]
    Append {
        partition: TopicPartition,
        #[source]
        source: AppendError,
    },
}

/// Leaving a group (`unsubscribe`, `close`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CloseError {
    #[error("a rebalance callback cannot unsubscribe its consumer")]
    InCallback,
    #[error("the final commit failed (the consumer left its group all the same): {0}")]
    Commit(#[from] CommitError),
}

/// Deleting a group's committed offsets.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeleteGroupError {
    #[error("group {group} has {member_count} live members; only an empty group can be deleted")]
    NotEmpty { group: String, member_count: usize },
    #[error("group {group} has no committed offsets and no members")]
    UnknownGroup { group: String },
    #[error(transparent)]
    Commit(#[from] CommitError),
}

/// Polling for records.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PollError {
    #[error("the consumer is not subscribed to a group")]
    NotSubscribed,
    #[error("a rebalance callback cannot poll its consumer")]
    InCallback,
    #[error("rejoining the group failed: {0}")]
    Rejoin(#[from] JoinError),
    #[error(transparent)]
    Position(#[from] PositionError),
    #[error("cannot fetch {partition} at offset {offset}: {source}")]
    Fetch {
        partition: TopicPartition,
        offset: Offset,
        #[source]
        source: ReadError,
    },
    #[error("the batch of {partition} fetched at offset {offset} does not decode: {source}")]
    Corrupt {
        partition: TopicPartition,
        offset: Offset,
        #[source]
        source: DecodeError,
    },
    #[error(
        "offset {offset} of {partition} is out of range ({log_start_offset} to {log_end_offset}) and auto.offset.reset is none"
    )]
    OffsetOutOfRange {
        partition: TopicPartition,
        offset: Offset,
        log_start_offset: Offset,
        log_end_offset: Offset,
    },
}

/// Positioning a partition: `position`, `seek`, `pause`, `resume`.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PositionError {
    #[error("{partition} is not assigned to this consumer")]
    NotAssigned { partition: TopicPartition },
    #[error("{partition} has no committed offset and auto.offset.reset is none")]
    NoOffset { partition: TopicPartition },
    #[error("cannot read the offsets of {partition}: {source}")]
    Describe {
        partition: TopicPartition,
        #[source]
        source: TopicError,
    },
}

/// Describing a group.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DescribeError {
    #[error("consumer group {group} does not exist")]
    UnknownGroup { group: String },
    #[error("cannot read the log end offset of {partition}: {source}")]
    Describe {
        partition: TopicPartition,
        #[source]
        source: TopicError,
    },
}
