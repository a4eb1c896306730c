//! openraft's log store over a partition: entries are the partition's batches.
//!
//! - `append` encodes each entry as one batch and appends it with the engine's durable group
//!   commit (`Engine::append_at`: where the replica's map says the log ends, the term stamped
//!   into `partitionLeaderEpoch`); one task per replica reports the flushes in order, each only
//!   after the `fdatasync` that covers it.
//! - `truncate` cuts the log (`Engine::truncate_to`) and syncs the cut; `purge` moves the log
//!   start (`Engine::delete_records`), or restarts the log empty
//!   (`Engine::truncate_fully_and_start_at`) where a follower installed a snapshot.
//! - The vote, the committed log id and the purge point live in the state file; the committed
//!   one is written at most every [`COMMITTED_WRITE_INTERVAL`] (a stale one is safe).

use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::time::{Duration, Instant};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogId, LogState, RaftLogReader, StorageError, Vote};
use seglog::engine::AppendInfo;
use seglog::engine::{Durability, Pending};
use seglog::error::AppendError;
use seglog::format::batch::BatchIter;
use seglog::types::Offset;
use tokio::sync::mpsc;

use crate::entry_codec::{self, leader_epoch};
use crate::error::ReplicaError;
use crate::replica::{Position, Replica, read_batches};
use crate::state_file::Anchor;
use crate::{Entry, TypeConfig};

/// The committed log id is written to the state file at most this often.
pub const COMMITTED_WRITE_INTERVAL: Duration = Duration::from_millis(200);
/// Bytes of entries one limited read returns (the replication stream's batches of entries).
pub const ENTRIES_READ_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// The appends of one `append` call and the callback that reports them flushed.
struct FlushJob {
    appends: Vec<Pending<AppendInfo, AppendError>>,
    callback: LogFlushed<TypeConfig>,
}

/// One partition's Raft log store.
#[derive(Clone)]
pub struct LogStore {
    replica: Replica,
    flushes: mpsc::UnboundedSender<FlushJob>,
    committed_written_at: Option<Instant>,
}

impl LogStore {
    /// The log store of `replica`; starts its flush task on the current tokio runtime.
    pub fn new(replica: Replica) -> LogStore {
        let (flushes, jobs) = mpsc::unbounded_channel();
        tokio::spawn(report_flushes(replica.clone(), jobs));
        LogStore {
            replica,
            flushes,
            committed_written_at: None,
        }
    }

    async fn read(
        &self,
        range: impl RangeBounds<u64>,
        max_bytes: u64,
    ) -> Result<Vec<Entry>, ReplicaError> {
        let wanted: Vec<(u64, Position)> = {
            let shared = self.replica.lock();
            shared
                .entries
                .range(range)
                .map(|(index, position)| (*index, *position))
                .collect()
        };
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(entries) = self.read_recent(&wanted, max_bytes)? {
            return Ok(entries);
        }
        let batches = read_batches(&self.replica, &wanted, max_bytes).await?;
        batches
            .iter()
            .map(|(index, batches)| Ok(entry_codec::decode(*index, batches)?))
            .collect()
    }

    /// The wanted entries from the recent batches kept in memory, if the first is kept: as
    /// many as are kept in a row, within `max_bytes` (at least one).
    fn read_recent(
        &self,
        wanted: &[(u64, Position)],
        max_bytes: u64,
    ) -> Result<Option<Vec<Entry>>, ReplicaError> {
        let shared = self.replica.lock();
        let mut entries = Vec::new();
        let mut bytes = 0u64;
        for (index, _) in wanted {
            let Some(batch) = shared.recent.get(*index) else {
                break;
            };
            if bytes >= max_bytes && !entries.is_empty() {
                break;
            }
            bytes += batch.len() as u64;
            // These bytes were checked when they were appended: no second CRC check.
            let batches = BatchIter::without_crc_check(batch.clone(), u64::MAX)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| ReplicaError::Corrupt {
                    offset: 0,
                    why: error.to_string(),
                })?;
            entries.push(entry_codec::decode(*index, &batches)?);
        }
        Ok((!entries.is_empty()).then_some(entries))
    }

    async fn append_entries(
        &mut self,
        entries: Vec<Entry>,
    ) -> Result<Vec<Pending<AppendInfo, AppendError>>, ReplicaError> {
        self.replica.check_not_failed()?;
        let mut appends = Vec::with_capacity(entries.len());
        for entry in entries {
            let encoded = entry_codec::encode(&entry)?;
            let epoch = leader_epoch(&entry.log_id)?;
            let index = entry.log_id.index;
            let offset = self.anchor_if_needed(index).await?;
            // Stamped as the log stamps it: the bytes the log will hold.
            let bytes = entry_codec::stamped(&encoded.bytes, offset, epoch);
            let bytes_kept = bytes.clone();
            let append = self.replica.engine.append_at(
                &self.replica.topic,
                self.replica.partition,
                bytes,
                Offset(offset),
                epoch,
                Durability::Durable,
            );
            let mut shared = self.replica.lock();
            let position = Position {
                base_offset: offset,
                next_offset: offset + encoded.record_count,
                term: entry.log_id.leader_id.term,
                size_bytes: encoded.bytes.len() as u64,
                max_timestamp: encoded.max_timestamp,
            };
            shared.entries.insert(index, position);
            shared.recent.insert(index, bytes_kept);
            shared.next_offset = position.next_offset;
            appends.push(append);
        }
        Ok(appends)
    }

    /// Where entry `index` goes; first records an anchor durably when it does not follow the
    /// last entry (the first entry, or one after a gap). The first entry after an installed
    /// snapshot restarts the log empty at the leader's offset for it (`installed_next`), so the
    /// copy keeps the leader's offsets; what it held is covered by the snapshot.
    async fn anchor_if_needed(&self, index: u64) -> Result<u64, ReplicaError> {
        let (offset, anchor, restart) = {
            let shared = self.replica.lock();
            let last = shared.entries.last_key_value().map(|(last, _)| *last);
            if let Some(last) = last.filter(|last| index <= *last) {
                return Err(ReplicaError::OutOfOrder { index, last });
            }
            let installed = shared.installed_next.filter(|next| next.index == index);
            match installed {
                Some(next) if next.offset != shared.next_offset || last.is_some() => {
                    (next.offset, next, true)
                }
                _ if last.is_some_and(|last| index == last + 1) => return Ok(shared.next_offset),
                _ => {
                    let anchor = Anchor {
                        index,
                        offset: shared.next_offset,
                    };
                    if shared.state.anchors.last() == Some(&anchor) {
                        return Ok(anchor.offset);
                    }
                    (anchor.offset, anchor, false)
                }
            }
        };
        self.replica
            .update_state(|state| match restart {
                true => {
                    state.anchors = vec![anchor];
                    let snapshot = state.snapshot.as_ref().and_then(|s| s.meta.last_log_id);
                    state.last_purged = state.last_purged.max(snapshot);
                }
                false => {
                    state.anchors.retain(|existing| existing.offset < offset);
                    state.anchors.push(anchor);
                }
            })
            .await?;
        if restart {
            let replica = &self.replica;
            replica
                .engine
                .truncate_fully_and_start_at(&replica.topic, replica.partition, Offset(offset))
                .await?;
            let mut shared = replica.lock();
            shared.entries.clear();
            shared.recent = Default::default();
            shared.next_offset = offset;
        }
        Ok(offset)
    }

    async fn truncate_from(&mut self, index: u64) -> Result<(), ReplicaError> {
        self.replica.check_not_failed()?;
        let cut = {
            let shared = self.replica.lock();
            shared
                .entries
                .range(index..)
                .next()
                .map(|(_, position)| position.base_offset)
        };
        if let Some(offset) = cut {
            let replica = &self.replica;
            let engine = &replica.engine;
            let end = engine
                .truncate_to(&replica.topic, replica.partition, Offset(offset))
                .await?;
            // The cut is durable before the numbering changes.
            engine.flush(&replica.topic, replica.partition).await?;
            let mut shared = replica.lock();
            shared.entries.retain(|entry_index, _| *entry_index < index);
            shared.recent.retain(|entry_index| entry_index < index);
            shared.next_offset = end.0;
        }
        let stale = {
            let shared = self.replica.lock();
            shared
                .state
                .anchors
                .iter()
                .any(|anchor| anchor.index >= index)
        };
        if stale {
            self.replica
                .update_state(|state| state.anchors.retain(|anchor| anchor.index < index))
                .await?;
        }
        Ok(())
    }

    async fn purge_through(&mut self, log_id: LogId<u64>) -> Result<(), ReplicaError> {
        self.replica.check_not_failed()?;
        let upto = log_id.index;
        let _turn = self.replica.purging.lock().await;
        let (first_kept, next_offset, snapshot_next, last_purged) = {
            let shared = self.replica.lock();
            let first_kept = shared
                .entries
                .range(upto + 1..)
                .next()
                .map(|(index, position)| Anchor {
                    index: *index,
                    offset: position.base_offset,
                });
            // The snapshot purged through names where the log goes on: the leader's offset
            // where this follower installed it (also when it stopped before this purge).
            let snapshot = shared.state.snapshot.as_ref();
            let snapshot_next = snapshot
                .filter(|snapshot| snapshot.meta.last_log_id == Some(log_id))
                .map(|snapshot| snapshot.next)
                .filter(|next| next.index == upto + 1);
            (
                first_kept,
                shared.next_offset,
                snapshot_next,
                shared.state.last_purged,
            )
        };
        if last_purged >= Some(log_id) {
            return Ok(());
        }
        let engine = &self.replica.engine;
        let (topic, partition) = (&self.replica.topic, self.replica.partition);
        match first_kept {
            Some(first) => {
                self.replica
                    .update_state(|state| {
                        state.last_purged = Some(log_id);
                        state.anchors.retain(|anchor| anchor.offset > first.offset);
                        state.anchors.insert(0, first);
                    })
                    .await?;
                engine
                    .delete_records(topic, partition, Offset(first.offset))
                    .await?;
            }
            None => {
                // Nothing is left: the log restarts where the next entry will be, which the
                // snapshot names (a built one: the log end, with nothing to remove). An install
                // that comes after this purge restarts the log itself.
                let start = snapshot_next.map_or(next_offset, |next| next.offset);
                self.replica
                    .update_state(|state| {
                        state.last_purged = Some(log_id);
                        state.anchors = vec![Anchor {
                            index: upto + 1,
                            offset: start,
                        }];
                    })
                    .await?;
                match start == next_offset {
                    true => {
                        engine
                            .delete_records(topic, partition, Offset(start))
                            .await?
                    }
                    false => {
                        engine
                            .truncate_fully_and_start_at(topic, partition, Offset(start))
                            .await?
                    }
                };
                self.replica.lock().next_offset = start;
            }
        }
        let mut shared = self.replica.lock();
        shared.entries.retain(|index, _| *index > upto);
        shared.recent.retain(|index| index > upto);
        Ok(())
    }
}

/// Reports each append call flushed, in order, once every append in it is durable; a failure
/// fails the replica and every later report.
async fn report_flushes(replica: Replica, mut jobs: mpsc::UnboundedReceiver<FlushJob>) {
    while let Some(job) = jobs.recv().await {
        let mut result = replica.check_not_failed();
        for append in job.appends {
            let outcome = append.await;
            if result.is_ok() {
                result = match outcome {
                    Ok(info) if info.durable => Ok(()),
                    Ok(_) => Err(ReplicaError::Failed("an append was not synced".into())),
                    Err(error) => Err(error.into()),
                };
            }
        }
        if let Err(error) = &result {
            replica.fail(&error.to_string());
        }
        job.callback
            .log_io_completed(result.map_err(|error| io::Error::other(error.to_string())));
        replica
            .appends
            .send_modify(|progress| progress.flushed += 1);
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<u64>> {
        self.read(range, u64::MAX)
            .await
            .map_err(ReplicaError::reading_logs)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError<u64>> {
        self.read(start..end, ENTRIES_READ_BYTES_MAX)
            .await
            .map_err(ReplicaError::reading_logs)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let shared = self.replica.lock();
        let last_purged_log_id = shared.state.last_purged;
        let last_log_id = shared
            .entries
            .last_key_value()
            .map(|(index, position)| {
                LogId::new(openraft::CommittedLeaderId::new(position.term, 0), *index)
            })
            .or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let vote = *vote;
        self.replica
            .update_state(|state| state.vote = Some(vote))
            .await
            .map_err(ReplicaError::writing_vote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.replica.lock().state.vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        self.replica.lock().state.committed = committed;
        let due = self
            .committed_written_at
            .is_none_or(|at| at.elapsed() >= COMMITTED_WRITE_INTERVAL);
        if due {
            self.committed_written_at = Some(Instant::now());
            self.replica
                .update_state(|state| state.committed = state.committed.max(committed))
                .await
                .map_err(ReplicaError::writing_logs)?;
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.replica.lock().state.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let appends = match self.append_entries(entries).await {
            Ok(appends) => appends,
            Err(error) => {
                self.replica.fail(&error.to_string());
                return Err(error.writing_logs());
            }
        };
        let job = FlushJob { appends, callback };
        self.replica
            .appends
            .send_modify(|progress| progress.started += 1);
        self.flushes
            .send(job)
            .map_err(|_| ReplicaError::Runtime("the flush task stopped".into()).writing_logs())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let result = self.truncate_from(log_id.index).await;
        result.map_err(|error| {
            self.replica.fail(&error.to_string());
            error.writing_logs()
        })
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let result = self.purge_through(log_id).await;
        result.map_err(|error| {
            self.replica.fail(&error.to_string());
            error.writing_logs()
        })
    }
}
