//! seglog partitions replicated with openraft: one Raft group per partition, whose Raft log is
//! the partition's log.
//!
//! Entry `i` of a partition's group is one RecordBatch of its log, or a group of them
//! (`entry_codec`): a producer's batch, the batches producers sent while the previous entry
//! was syncing behind a control batch that counts them, or a control batch for a blank or
//! membership entry; the entry's term is its batches' `partitionLeaderEpoch`. Indexes and offsets both grow with the log, but a batch
//! holds many offsets, so the replica keeps the map from index to batch (`replica.rs`), rebuilt
//! at open from the batches and the anchors of its state file (`state_file.rs`).

#![warn(missing_docs)]

pub mod client;
pub mod entry_codec;
pub mod error;
pub mod grouping;
pub mod log_store;
pub mod network;
pub mod node;
pub mod replica;
pub mod state_file;
pub mod state_machine;
pub mod wire;

use std::io::Cursor;

pub use entry_codec::{Appended, Batches};
pub use error::ReplicaError;
pub use log_store::LogStore;
pub use replica::Replica;
pub use state_machine::StateMachine;

openraft::declare_raft_types!(
    /// One partition's Raft group: normal entries are Kafka record batches; a committed one
    /// answers the offsets of each data batch.
    pub TypeConfig:
        D = Batches,
        R = Vec<Appended>,
);

/// An entry of a partition's Raft log.
pub type Entry = openraft::Entry<TypeConfig>;
/// A partition group's membership.
pub type Membership = openraft::Membership<u64, openraft::BasicNode>;
