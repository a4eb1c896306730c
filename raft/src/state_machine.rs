//! openraft's state machine for a partition: applying an entry changes nothing on disk (the
//! committed entry is already the partition's data); it answers a normal entry's offsets and
//! follows the membership.
//!
//! A snapshot is metadata only: the last entry it covers, the membership as of it, and where the
//! leader's log goes on after it (`state_file::SnapshotRecord`). A follower installing one
//! restarts its log empty at that offset and replicates the rest. It is built at the point
//! [`StateMachine::snapshot_point`] names (where the log is about to be purged to), else at the
//! last applied entry.

use std::io::Cursor;
use std::sync::{Arc, Mutex, PoisonError};

use openraft::storage::RaftStateMachine;
use openraft::{
    EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StoredMembership,
};

use crate::entry_codec::{Appended, Batches};
use crate::error::ReplicaError;
use crate::replica::Replica;
use crate::state_file::{Anchor, SnapshotRecord};
use crate::{Entry, TypeConfig};

type Membership = StoredMembership<u64, openraft::BasicNode>;

/// One partition's Raft state machine.
pub struct StateMachine {
    replica: Replica,
    last_applied: Option<LogId<u64>>,
    /// Every membership applied since the current snapshot's, oldest first.
    memberships: Vec<Membership>,
    snapshot_point: Arc<Mutex<Option<LogId<u64>>>>,
}

impl StateMachine {
    /// The state machine of `replica`, starting where its current snapshot ends.
    pub fn new(replica: Replica) -> StateMachine {
        let snapshot = replica.lock().state.snapshot.clone();
        let (last_applied, memberships) = match snapshot {
            Some(record) => (
                record.meta.last_log_id,
                vec![record.meta.last_membership.clone()],
            ),
            None => (None, Vec::new()),
        };
        StateMachine {
            replica,
            last_applied,
            memberships,
            snapshot_point: Arc::new(Mutex::new(None)),
        }
    }

    /// Where the next snapshot is built: set it to the last entry the log is about to be
    /// purged through, so that the snapshot a lagging follower gets leaves no entry out.
    pub fn snapshot_point(&self) -> Arc<Mutex<Option<LogId<u64>>>> {
        self.snapshot_point.clone()
    }

    fn membership_as_of(&self, point: Option<LogId<u64>>) -> Membership {
        self.memberships
            .iter()
            .rev()
            .find(|membership| *membership.log_id() <= point)
            .cloned()
            .unwrap_or_default()
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, Membership), StorageError<u64>> {
        let membership = self.memberships.last().cloned().unwrap_or_default();
        Ok((self.last_applied, membership))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Vec<Appended>>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut replies = Vec::new();
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            let reply = match entry.payload {
                EntryPayload::Normal(Batches(bytes)) => {
                    // The entry was read from the log (or kept from its append): checked.
                    let batches = crate::entry_codec::appended(&bytes)
                        .map_err(|error| ReplicaError::from(error).writing_state_machine())?;
                    for (header, appended) in &batches {
                        remember_producer(&self.replica, header, *appended);
                    }
                    batches.into_iter().map(|(_, appended)| appended).collect()
                }
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Membership(membership) => {
                    let stored = StoredMembership::new(Some(entry.log_id), membership);
                    self.memberships.push(stored);
                    Vec::new()
                }
            };
            replies.push(reply);
        }
        if let Some(last) = self.last_applied {
            let mut shared = self.replica.lock();
            if let Some(position) = shared.entries.get(&last.index).copied() {
                shared.high_watermark = shared.high_watermark.max(position.next_offset);
            }
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        let pending = self
            .snapshot_point
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let point = pending.filter(|point| Some(*point) <= self.last_applied);
        let point = point.or(self.last_applied);
        SnapshotBuilder {
            replica: self.replica.clone(),
            point,
            membership: self.membership_as_of(point),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let record: SnapshotRecord = serde_json::from_slice(snapshot.get_ref())
            .map_err(|error| ReplicaError::Snapshot(error.to_string()).in_snapshot())?;
        if record.meta != *meta {
            let why = "the snapshot's bytes name other metadata".to_string();
            return Err(ReplicaError::Snapshot(why).in_snapshot());
        }
        let installed = record.clone();
        let _turn = self.replica.purging.lock().await;
        self.replica
            .update_state(|state| state.snapshot = Some(installed))
            .await
            .map_err(ReplicaError::in_snapshot)?;
        let restart = {
            let mut shared = self.replica.lock();
            shared.installed_next = Some(record.next);
            shared.high_watermark = shared.high_watermark.max(record.next.offset);
            // openraft's core may purge through the snapshot before this task installs it:
            // the log then restarted at its own end. It restarts at the leader's offset now,
            // not at the next entry, which the leader may not have yet.
            let purged = shared.state.last_purged >= meta.last_log_id;
            let kept = shared.entries.range(record.next.index..).next().is_some();
            purged && !kept && shared.next_offset != record.next.offset
        };
        if restart {
            let restarted = self.replica.restart_at(record.next).await;
            restarted.map_err(ReplicaError::in_snapshot)?;
        }
        self.last_applied = meta.last_log_id;
        self.memberships = vec![meta.last_membership.clone()];
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        let record = self.replica.lock().state.snapshot.clone();
        let snapshot = record.map(|record| snapshot_of(&record)).transpose();
        snapshot.map_err(|error| ReplicaError::Snapshot(error.to_string()).in_snapshot())
    }
}

/// Batches of each idempotent producer remembered for answering its retries.
const PRODUCER_BATCHES_KEPT: usize = 16;

fn remember_producer(replica: &Replica, header: &seglog::format::BatchHeader, appended: Appended) {
    if header.producer_id < 0 {
        return;
    }
    let mut shared = replica.lock();
    let batches = shared.producers.entry(header.producer_id).or_default();
    if batches.len() == PRODUCER_BATCHES_KEPT {
        batches.pop_front();
    }
    batches.push_back((header.base_sequence, appended));
}

fn snapshot_of(record: &SnapshotRecord) -> Result<Snapshot<TypeConfig>, serde_json::Error> {
    let bytes = serde_json::to_vec(record)?;
    Ok(Snapshot {
        meta: record.meta.clone(),
        snapshot: Box::new(Cursor::new(bytes)),
    })
}

/// Builds the snapshot at one point.
pub struct SnapshotBuilder {
    replica: Replica,
    point: Option<LogId<u64>>,
    membership: Membership,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        // A snapshot installed since the point was named is newer: it stays the current one.
        let current = self.replica.lock().state.snapshot.clone();
        if let Some(current) = current.filter(|current| current.meta.last_log_id > self.point) {
            return snapshot_of(&current)
                .map_err(|error| ReplicaError::Snapshot(error.to_string()).in_snapshot());
        }
        let next_index = self.point.map_or(0, |point| point.index + 1);
        let next = {
            let shared = self.replica.lock();
            shared
                .entries
                .range(next_index..)
                .next()
                .map_or(shared.next_offset, |(_, position)| position.base_offset)
        };
        let snapshot_id = match self.point {
            Some(point) => format!("{}-{}", point.leader_id.term, point.index),
            None => "empty".to_string(),
        };
        let record = SnapshotRecord {
            meta: SnapshotMeta {
                last_log_id: self.point,
                last_membership: self.membership.clone(),
                snapshot_id,
            },
            next: Anchor {
                index: next_index,
                offset: next,
            },
        };
        let built = record.clone();
        self.replica
            .update_state(|state| state.snapshot = Some(built))
            .await
            .map_err(ReplicaError::in_snapshot)?;
        snapshot_of(&record)
            .map_err(|error| ReplicaError::Snapshot(error.to_string()).in_snapshot())
    }
}
