//! One partition's replica: its log in the engine, its state file, and the map from entry
//! index to batch that the log store and the state machine share.
//!
//! The map is rebuilt at open by reading the batch headers from the log start: the first batch
//! is the first anchor's entry, and each later batch is the next index unless an anchor names
//! it (`state_file.rs`). Anchors are written before the batch they name is appended, so a
//! crash never leaves a batch numbered wrong.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use seglog::engine::{Engine, FetchOptions};
use seglog::format::Batch;
use seglog::format::batch::BatchIter;
use seglog::types::{Offset, TopicName};

use crate::entry_codec::{self, Appended, CodecError};
use crate::error::ReplicaError;
use crate::grouping::AppendProgress;
use crate::state_file::{Anchor, RaftState, StateFile};

/// Bytes a fetch asks for while scanning or reading entries.
const FETCH_BYTES: u64 = 1024 * 1024;

/// Where one entry's batch lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    pub base_offset: u64,
    pub next_offset: u64,
    pub term: u64,
    /// The batch's size, for retention by bytes.
    pub size_bytes: u64,
    /// The batch's `maxTimestamp`, for retention by time.
    pub max_timestamp: i64,
}

/// What the log store and the state machine of one partition share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub state: RaftState,
    /// Entry index → its batch, for every entry in the log.
    pub entries: BTreeMap<u64, Position>,
    /// The offset the next entry's batch gets: the log end as this replica wrote it.
    pub next_offset: u64,
    /// Where a follower's log restarts after the snapshot it installed (its `next` anchor).
    pub installed_next: Option<Anchor>,
    /// The offset after the last entry applied (committed): what readers may see.
    pub high_watermark: u64,
    /// Per idempotent producer, its last committed batches: base sequence and offsets.
    pub producers: HashMap<i64, VecDeque<(i32, Appended)>>,
    /// The newest entries' batches as written (offset and term stamped), by index: replication
    /// and the state machine read them from here, not from the log.
    pub recent: RecentEntries,
    /// Set once a write failed: the replica refuses everything after.
    pub failure: Option<String>,
}

/// The newest entries' batches, at most [`RECENT_ENTRIES_BYTES`] of them.
#[derive(Debug, Default)]
pub(crate) struct RecentEntries {
    batches: BTreeMap<u64, Bytes>,
    size_bytes: usize,
}

/// Bytes of recent batches a replica keeps in memory.
pub const RECENT_ENTRIES_BYTES: usize = 32 * 1024 * 1024;

impl RecentEntries {
    /// Keeps `batch` as entry `index`'s, dropping the oldest past the bound.
    pub fn insert(&mut self, index: u64, batch: Bytes) {
        self.size_bytes += batch.len();
        if let Some(replaced) = self.batches.insert(index, batch) {
            self.size_bytes -= replaced.len();
        }
        while self.size_bytes > RECENT_ENTRIES_BYTES {
            let Some((_, oldest)) = self.batches.pop_first() else {
                break;
            };
            self.size_bytes -= oldest.len();
        }
    }

    /// Entry `index`'s batch, if kept.
    pub fn get(&self, index: u64) -> Option<&Bytes> {
        self.batches.get(&index)
    }

    /// Drops the entries for which `keep` is false.
    pub fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        let dropped: Vec<u64> = self.batches.keys().copied().filter(|i| !keep(*i)).collect();
        for index in dropped {
            if let Some(batch) = self.batches.remove(&index) {
                self.size_bytes -= batch.len();
            }
        }
    }
}

/// A partition's replica: cheap to clone, shared by its log store and state machine.
#[derive(Clone, Debug)]
pub struct Replica {
    pub(crate) engine: Engine,
    pub(crate) topic: TopicName,
    pub(crate) partition: u32,
    pub(crate) file: StateFile,
    pub(crate) shared: Arc<Mutex<Shared>>,
    /// Held while the state file is written.
    writing: Arc<tokio::sync::Mutex<()>>,
    /// Held while the log's front is purged, or restarted at an installed snapshot: a purge
    /// and the install it follows run on two tasks, in either order.
    pub(crate) purging: Arc<tokio::sync::Mutex<()>>,
    /// The log store's appends begun and reported flushed (the produce queue waits on it).
    pub(crate) appends: Arc<tokio::sync::watch::Sender<AppendProgress>>,
}

impl Replica {
    /// Opens the replica of `topic`-`partition` (the topic must exist in `engine`), its state
    /// file in `state_dir`: loads the state, makes the whole log durable, brings the log's start
    /// to the state's, and rebuilds the entry map.
    pub async fn open(
        engine: Engine,
        topic: TopicName,
        partition: u32,
        state_dir: &Path,
    ) -> Result<Replica, ReplicaError> {
        let file = StateFile::new(state_dir, topic.as_str(), partition);
        let state = blocking(file.clone(), |file| file.load()).await??;
        let replica = Replica {
            engine,
            topic,
            partition,
            file,
            shared: Arc::new(Mutex::new(Shared {
                state,
                entries: BTreeMap::new(),
                next_offset: 0,
                installed_next: None,
                high_watermark: 0,
                producers: HashMap::new(),
                recent: RecentEntries::default(),
                failure: None,
            })),
            writing: Arc::new(tokio::sync::Mutex::new(())),
            purging: Arc::new(tokio::sync::Mutex::new(())),
            appends: Arc::new(tokio::sync::watch::Sender::new(AppendProgress::default())),
        };
        // After a crash the engine keeps what it recovered past the recovery point unsynced;
        // openraft takes every entry the log holds at open as persisted.
        replica
            .engine
            .flush(&replica.topic, replica.partition)
            .await?;
        replica.rebuild().await?;
        Ok(replica)
    }

    /// Follows the log store's appends: begun, and reported flushed.
    pub fn append_progress(&self) -> tokio::sync::watch::Receiver<AppendProgress> {
        self.appends.subscribe()
    }

    /// The offset after the last committed entry this replica applied.
    pub fn high_watermark(&self) -> u64 {
        self.lock().high_watermark
    }

    /// The offsets a committed batch of `producer_id` starting at `base_sequence` got, if one
    /// was committed (a retried produce is answered with them, not written again).
    pub fn committed_batch(&self, producer_id: i64, base_sequence: i32) -> Option<Appended> {
        let shared = self.lock();
        let batches = shared.producers.get(&producer_id)?;
        batches
            .iter()
            .find(|(sequence, _)| *sequence == base_sequence)
            .map(|(_, appended)| *appended)
    }

    /// The first offset of the log, as the replica's state names it.
    pub fn log_start_offset(&self) -> u64 {
        self.lock()
            .state
            .anchors
            .first()
            .map_or(0, |anchor| anchor.offset)
    }

    /// The last committed entry that retention (`retention_ms`, `retention_bytes`; negative: no
    /// limit) lets go, if it is past the last purged one: the entries up to it are older than
    /// `retention_ms` at `now_ms`, or the log still holds `retention_bytes` without them (as
    /// Kafka's and the engine's retention: never below it).
    pub fn retention_point(
        &self,
        retention_ms: i64,
        retention_bytes: i64,
        now_ms: i64,
    ) -> Option<openraft::LogId<u64>> {
        let shared = self.lock();
        let committed = shared.high_watermark;
        let mut remaining: u64 = shared.entries.values().map(|p| p.size_bytes).sum();
        let mut point = None;
        for (index, position) in &shared.entries {
            if position.next_offset > committed {
                break;
            }
            let rest = remaining - position.size_bytes;
            let too_big = retention_bytes >= 0 && rest >= retention_bytes as u64;
            let too_old =
                retention_ms >= 0 && position.max_timestamp < now_ms.saturating_sub(retention_ms);
            if !too_big && !too_old {
                break;
            }
            remaining -= position.size_bytes;
            point = Some((*index, position.term));
        }
        let (index, term) = point?;
        let log_id = openraft::LogId::new(openraft::CommittedLeaderId::new(term, 0), index);
        (Some(log_id) > shared.state.last_purged).then_some(log_id)
    }

    /// The log end offset as this replica wrote it.
    pub fn log_end_offset(&self) -> u64 {
        self.lock().next_offset
    }

    /// The partition's topic.
    pub fn topic(&self) -> &TopicName {
        &self.topic
    }

    /// The partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The partition's log start and end offsets, as the engine has them.
    async fn log_bounds(&self) -> Result<(u64, u64), ReplicaError> {
        let engine = self.engine.clone();
        let topic = self.topic.clone();
        let partition = self.partition;
        let description = tokio::task::spawn_blocking(move || {
            engine.describe_partition(topic.as_str(), partition)
        })
        .await
        .map_err(|error| ReplicaError::Runtime(error.to_string()))??;
        Ok((description.log_start_offset.0, description.log_end_offset.0))
    }

    async fn rebuild(&self) -> Result<(), ReplicaError> {
        let (log_start, log_end) = self.log_bounds().await?;
        let mut state = self.lock().state.clone();
        let start = match state.anchors.first() {
            Some(first) => first.offset,
            None if log_start == log_end => log_start,
            None => return Err(ReplicaError::NoAnchor { log_start, log_end }),
        };
        let log_end = self.settle_log_start(start, log_start, log_end).await?;
        // Anchors past the log end name batches a crash took away (a cut not yet recorded).
        let first = state.anchors.first().copied();
        state
            .anchors
            .retain(|anchor| anchor.offset < log_end || Some(*anchor) == first);
        if state.anchors != self.lock().state.anchors {
            let anchors = state.anchors.clone();
            self.update_state(|stored| stored.anchors = anchors).await?;
        }
        let (entries, log_end) = self.scan(start, log_end, &state.anchors).await?;
        let mut shared = self.lock();
        shared.high_watermark = start;
        shared.state = state;
        shared.entries = entries;
        shared.next_offset = log_end;
        Ok(())
    }

    /// Makes the log start where the state says it does, finishing a purge or a restart that
    /// a crash interrupted. Returns the log end.
    async fn settle_log_start(
        &self,
        start: u64,
        log_start: u64,
        log_end: u64,
    ) -> Result<u64, ReplicaError> {
        if log_end < start {
            let pending =
                self.engine
                    .truncate_fully_and_start_at(&self.topic, self.partition, Offset(start));
            pending.await?;
            return Ok(start);
        }
        if log_start < start {
            let pending = self
                .engine
                .delete_records(&self.topic, self.partition, Offset(start));
            pending.await?;
        } else if log_start > start {
            return Err(ReplicaError::LogStartAhead {
                log_start,
                expected: start,
            });
        }
        Ok(log_end)
    }

    /// Numbers the entries in `[start, log_end)`: each batch is the next entry, unless an
    /// anchor names its index, or a group's first batch before it counts it in. Returns the
    /// entries and the log end, which is cut back to a group's start where the log ends inside
    /// the group (its write was cut short by a crash: never reported flushed).
    async fn scan(
        &self,
        start: u64,
        log_end: u64,
        anchors: &[Anchor],
    ) -> Result<(BTreeMap<u64, Position>, u64), ReplicaError> {
        let named: BTreeMap<u64, u64> = anchors.iter().map(|a| (a.offset, a.index)).collect();
        let mut entries = BTreeMap::new();
        let mut previous: Option<u64> = None;
        // The group being read: its index, its position so far, the data batches still due.
        let mut open_group: Option<(u64, Position, u32)> = None;
        let mut offset = start;
        while offset < log_end {
            let batches = self.fetch(offset).await?;
            if batches.is_empty() {
                return Err(ReplicaError::Gap { offset });
            }
            for batch in batches {
                let base_offset = batch.base_offset() as u64;
                let next_offset = batch.last_offset() as u64 + 1;
                offset = next_offset;
                if let Some((index, mut position, due)) = open_group.take() {
                    if batch.header().attributes.is_control() {
                        return Err(ReplicaError::Corrupt {
                            offset: base_offset,
                            why: "a control batch inside a group".into(),
                        });
                    }
                    position.next_offset = next_offset;
                    position.size_bytes += batch.size_bytes();
                    position.max_timestamp =
                        position.max_timestamp.max(batch.header().max_timestamp);
                    match due {
                        1 => {
                            entries.insert(index, position);
                        }
                        _ => open_group = Some((index, position, due - 1)),
                    }
                    continue;
                }
                let index = match (named.get(&base_offset), previous) {
                    (Some(index), _) => *index,
                    (None, Some(previous)) => previous + 1,
                    (None, None) => {
                        return Err(ReplicaError::Gap {
                            offset: base_offset,
                        });
                    }
                };
                let term = u64::try_from(batch.header().partition_leader_epoch).map_err(|_| {
                    CodecError::NotAnEntry {
                        offset: base_offset as i64,
                        why: "negative partitionLeaderEpoch".into(),
                    }
                })?;
                let position = Position {
                    base_offset,
                    next_offset,
                    term,
                    size_bytes: batch.size_bytes(),
                    max_timestamp: batch.header().max_timestamp,
                };
                previous = Some(index);
                match entry_codec::group_size(&batch)? {
                    Some(due) => open_group = Some((index, position, due)),
                    None => {
                        entries.insert(index, position);
                    }
                }
            }
        }
        match open_group {
            Some((_, position, _)) => {
                let cut = Offset(position.base_offset);
                let end = self
                    .engine
                    .truncate_to(&self.topic, self.partition, cut)
                    .await?;
                self.engine.flush(&self.topic, self.partition).await?;
                Ok((entries, end.0))
            }
            None => Ok((entries, log_end)),
        }
    }

    /// The whole batches from `offset` on, up to about [`FETCH_BYTES`].
    pub(crate) async fn fetch(&self, offset: u64) -> Result<Vec<Batch>, ReplicaError> {
        let options = FetchOptions {
            max_bytes: FETCH_BYTES,
            ..FetchOptions::default()
        };
        let pending = self
            .engine
            .fetch(&self.topic, self.partition, Offset(offset), options);
        let data = pending.await?;
        let mut batches = Vec::new();
        for batch in BatchIter::new(data.records, u64::MAX) {
            let batch = batch.map_err(|error| ReplicaError::Corrupt {
                offset,
                why: error.to_string(),
            })?;
            batches.push(batch);
        }
        Ok(batches)
    }

    /// Applies `change` to the current state, writes the result durably (off the async
    /// threads) and makes it the shared one. Writers take turns: each change sees every earlier
    /// one, and no two writes share the temporary file.
    pub(crate) async fn update_state(
        &self,
        change: impl FnOnce(&mut RaftState),
    ) -> Result<(), ReplicaError> {
        let _turn = self.writing.lock().await;
        let mut state = self.lock().state.clone();
        change(&mut state);
        let stored = state.clone();
        blocking(self.file.clone(), move |file| file.store(&stored)).await??;
        self.lock().state = state;
        Ok(())
    }

    /// Restarts the log empty at `next`, the entry after an installed snapshot at the leader's
    /// offset: the anchor first, durably, then the log.
    pub(crate) async fn restart_at(&self, next: Anchor) -> Result<(), ReplicaError> {
        self.update_state(|state| state.anchors = vec![next])
            .await?;
        let pending = self.engine.truncate_fully_and_start_at(
            &self.topic,
            self.partition,
            Offset(next.offset),
        );
        pending.await?;
        let mut shared = self.lock();
        shared.entries.clear();
        shared.recent = RecentEntries::default();
        shared.next_offset = next.offset;
        Ok(())
    }

    /// Fails the replica: nothing is acknowledged after a failed write.
    pub(crate) fn fail(&self, why: &str) {
        self.lock().failure.get_or_insert_with(|| why.to_string());
    }

    pub(crate) fn check_not_failed(&self) -> Result<(), ReplicaError> {
        match &self.lock().failure {
            Some(why) => Err(ReplicaError::Failed(why.clone())),
            None => Ok(()),
        }
    }
}

/// Runs `work` on `file` on tokio's blocking threads.
async fn blocking<T: Send + 'static>(
    file: StateFile,
    work: impl FnOnce(StateFile) -> T + Send + 'static,
) -> Result<T, ReplicaError> {
    tokio::task::spawn_blocking(move || work(file))
        .await
        .map_err(|error| ReplicaError::Runtime(error.to_string()))
}

/// The batches of the `wanted` entries read back, each entry's in order: `(index, batches)`
/// in index order, about `max_bytes` of them (at least one entry).
pub(crate) async fn read_batches(
    replica: &Replica,
    wanted: &[(u64, Position)],
    max_bytes: u64,
) -> Result<Vec<(u64, Vec<Batch>)>, ReplicaError> {
    let mut found: Vec<(u64, Vec<Batch>)> = Vec::with_capacity(wanted.len());
    let mut bytes = 0u64;
    let mut next = 0;
    // The batches of `wanted[next]` read so far.
    let mut partial: Vec<Batch> = Vec::new();
    while next < wanted.len() && (bytes < max_bytes || found.is_empty()) {
        let (_, position) = wanted[next];
        let from = partial
            .last()
            .map_or(position.base_offset, |b| b.last_offset() as u64 + 1);
        let batches = replica.fetch(from).await?;
        if batches.is_empty() {
            return Err(ReplicaError::Gap { offset: from });
        }
        for batch in batches {
            let Some((index, position)) = wanted.get(next) else {
                break;
            };
            let base_offset = batch.base_offset() as u64;
            let expected = partial
                .last()
                .map_or(position.base_offset, |b| b.last_offset() as u64 + 1);
            if base_offset < expected {
                continue;
            }
            if base_offset != expected {
                return Err(ReplicaError::Gap { offset: expected });
            }
            bytes += batch.size_bytes();
            let ends_entry = batch.last_offset() as u64 + 1 >= position.next_offset;
            partial.push(batch);
            if ends_entry {
                found.push((*index, std::mem::take(&mut partial)));
                next += 1;
                if bytes >= max_bytes {
                    break;
                }
            }
        }
    }
    Ok(found)
}
