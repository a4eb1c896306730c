//! What can go wrong in a replica, and its form for openraft.

use openraft::{AnyError, StorageError, StorageIOError};
use seglog::error::{
    AppendError, DeleteRecordsError, FlushError, ReadError, TopicError, TruncateError,
};

use crate::entry_codec::CodecError;
use crate::state_file::StateFileError;

/// A replica's failure.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The state file could not be read or written.
    #[error(transparent)]
    StateFile(#[from] StateFileError),
    /// An entry could not be encoded, or a batch read as an entry.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// Appending to the partition failed.
    #[error("append: {0}")]
    Append(#[from] AppendError),
    /// Reading the partition failed.
    #[error("read: {0}")]
    Read(#[from] ReadError),
    /// Truncating the partition failed.
    #[error("truncate: {0}")]
    Truncate(#[from] TruncateError),
    /// Moving the partition's log start failed.
    #[error("delete records: {0}")]
    DeleteRecords(#[from] DeleteRecordsError),
    /// Syncing the partition failed.
    #[error("flush: {0}")]
    Flush(#[from] FlushError),
    /// Describing the partition failed.
    #[error("describe: {0}")]
    Topic(#[from] TopicError),
    /// The log holds batches but the state file names none of them.
    #[error(
        "the log holds offsets {log_start}..{log_end} but the Raft state file names no entry: it was lost or belongs to another log"
    )]
    NoAnchor {
        /// The log start offset.
        log_start: u64,
        /// The log end offset.
        log_end: u64,
    },
    /// The log starts after the first entry the state file names: entries are missing.
    #[error(
        "the log starts at {log_start}, after the first entry the Raft state names ({expected})"
    )]
    LogStartAhead {
        /// The log start offset.
        log_start: u64,
        /// Where the state says it starts.
        expected: u64,
    },
    /// An entry's batch is not where the map says.
    #[error("no batch where an entry was expected, at offset {offset}")]
    Gap {
        /// The offset looked at.
        offset: u64,
    },
    /// A batch read back does not decode.
    #[error("the batch read at offset {offset} does not decode: {why}")]
    Corrupt {
        /// The offset read.
        offset: u64,
        /// Why.
        why: String,
    },
    /// An append does not follow the log.
    #[error("entry {index} does not follow the last entry {last}: truncate first")]
    OutOfOrder {
        /// The entry's index.
        index: u64,
        /// The last entry's index.
        last: u64,
    },
    /// A snapshot's bytes do not decode.
    #[error("the snapshot does not decode: {0}")]
    Snapshot(String),
    /// A write failed earlier: nothing is accepted until the replica is reopened.
    #[error("the replica failed earlier and refuses writes until reopened: {0}")]
    Failed(String),
    /// The async runtime failed a task.
    #[error("runtime: {0}")]
    Runtime(String),
}

impl ReplicaError {
    /// As openraft's error for a failed log read.
    pub fn reading_logs(self) -> StorageError<u64> {
        StorageIOError::read_logs(AnyError::new(&self)).into()
    }

    /// As openraft's error for a failed log write.
    pub fn writing_logs(self) -> StorageError<u64> {
        StorageIOError::write_logs(AnyError::new(&self)).into()
    }

    /// As openraft's error for a failed vote write.
    pub fn writing_vote(self) -> StorageError<u64> {
        StorageIOError::write_vote(AnyError::new(&self)).into()
    }

    /// As openraft's error for a failed state machine write.
    pub fn writing_state_machine(self) -> StorageError<u64> {
        StorageIOError::write_state_machine(AnyError::new(&self)).into()
    }

    /// As openraft's error for a failed snapshot read or write.
    pub fn in_snapshot(self) -> StorageError<u64> {
        StorageIOError::write_snapshot(None, AnyError::new(&self)).into()
    }
}
