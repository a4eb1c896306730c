//! The in-process group coordinator: groups, their members, generations, the hand-off of
//! partitions between members, and committed offsets ([`GroupCoordinator`]).
//!
//! # Rebalances
//!
//! A group rebalances when a member joins or leaves, when a member has not polled for its
//! `max.poll.interval.ms`, and when a subscribed topic's partition count changes (seen when a
//! member polls, at most every `metadata.max.age.ms`). A rebalance increments the group's
//! [`Generation`] and computes a new *target* assignment with the group's strategy. Members reach
//! it at their next poll, on their own threads: a member first gives up the partitions that left
//! its target (committing their positions with auto-commit, then calling its listener's
//! `on_partitions_revoked`), and then takes the partitions of its target that no other member
//! still holds (`on_partitions_assigned`). A partition moves only once its previous owner has
//! released it, or was removed for not polling: at every instant each partition has at most one
//! owner, and an owner commits offsets only for the partitions it owns. Every strategy is applied
//! this way (incremental, cooperative hand-off), so a member keeps consuming the partitions that
//! stay with it through a rebalance.
//!
//! # Fencing
//!
//! A commit carries the generation the member last synchronised with (at its last poll). It is
//! refused with [`CommitError::IllegalGeneration`] if the group has rebalanced since, with
//! [`CommitError::UnknownMember`] once the member has left or was removed, and with
//! [`CommitError::NotAssigned`] for a partition the member does not own.
//!
//! # One coordinator per engine
//!
//! Groups live in this process only. The coordinator takes the lock file
//! [`COORDINATOR_LOCK_FILE`] in the engine's data directory, so that a second coordinator on the
//! same engine cannot hand the same partitions out again; it is released when the last handle
//! (including those held by consumers and commit handles) is dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::File;
use std::future::Future as _;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::engine::{Durability, Engine, TopicMetadata};
use crate::io::lock_exclusive;
use crate::log::AppendInfo;
use crate::types::{Offset, TimestampMs, TopicName, TopicPartition};

use super::assignor::{AssignmentStrategy, MemberId, MemberSubscription};
use super::commit::{CommitHandle, InFlightCommit};
use super::config::ConsumerConfig;
use super::consumer::Consumer;
use super::describe::{
    GroupDescription, GroupListing, GroupState, MemberDescription, describe_partitions,
};
use super::error::{CommitError, CoordinatorError, DeleteGroupError, DescribeError};
use super::offset_record::OFFSET_METADATA_BYTES_MAX;
use super::store::{
    CommittedOffsets, OffsetAndMetadata, commit_records, ensure_offsets_topic, partition_for_group,
};

/// The lock file a coordinator holds in the engine's data directory.
pub const COORDINATOR_LOCK_FILE: &str = "seglog-groups.lock";

/// A group's generation: incremented by every rebalance (Kafka's `generationId`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Generation(pub u32);

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// How a coordinator creates the offsets topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorConfig {
    /// `offsets.topic.num.partitions`, used only when the offsets topic is created. Default 1, not
    /// Kafka's 50: in one process a single partition serves every group, and its durable appends
    /// are group-committed.
    pub offsets_topic_partition_count: u32,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            offsets_topic_partition_count: 1,
        }
    }
}

/// The group coordinator of one engine. Cheap to clone; clones share the groups.
#[derive(Debug, Clone)]
pub struct GroupCoordinator {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    engine: Engine,
    offsets_topic: TopicName,
    offsets_partition_count: u32,
    state: Mutex<State>,
    /// Signalled whenever a group changes (joins, leaves, releases, rebalances).
    changed: Condvar,
    _lock: File,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCoordinator")
            .field("engine", &self.engine)
            .field("offsets_topic", &self.offsets_topic)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    groups: BTreeMap<String, Group>,
    offsets: CommittedOffsets,
    /// Members that joined with each `client.id` so far: the `n` of member id `<client.id>-<n>`.
    client_sequences: BTreeMap<String, u64>,
    /// Commits whose handles were dropped before they completed. Each is an append in flight
    /// (bounded by the engine's request queues), recorded and removed at the next entry into the
    /// coordinator after it completes.
    parked: Vec<InFlightCommit>,
    change_count: u64,
}

struct Member {
    client_id: String,
    topics: BTreeSet<TopicName>,
    max_poll_interval: Duration,
    last_seen: Instant,
    /// The generation the member last synchronised with.
    generation: Generation,
    owned: BTreeSet<TopicPartition>,
}

struct Group {
    strategy: AssignmentStrategy,
    generation: Generation,
    members: BTreeMap<MemberId, Member>,
    /// The partition counts of the subscribed topics at the last rebalance or metadata check.
    partition_counts: BTreeMap<TopicName, u32>,
    metadata_checked: Instant,
    target: BTreeMap<MemberId, BTreeSet<TopicPartition>>,
    owners: BTreeMap<TopicPartition, MemberId>,
}

/// The member is not (or no longer) in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UnknownMember;

/// What a member does at its poll to reach its group's current generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyncPlan {
    pub(crate) generation: Generation,
    /// Owned partitions that left the member's target: commit, call back, release.
    pub(crate) revoke: Vec<TopicPartition>,
}

/// A member asking to join.
#[derive(Debug, Clone)]
pub(crate) struct JoinRequest<'a> {
    pub(crate) group: &'a str,
    pub(crate) client_id: &'a str,
    pub(crate) topics: BTreeSet<TopicName>,
    pub(crate) strategy: AssignmentStrategy,
    pub(crate) max_poll_interval: Duration,
}

/// Who commits: a member with the generation it synchronised with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Committer<'a> {
    pub(crate) member_id: &'a MemberId,
    pub(crate) generation: Generation,
}

impl GroupCoordinator {
    /// Opens the coordinator of `engine`, creating the offsets topic if needed (compacted, one
    /// partition), and reads every group's committed offsets from it.
    pub fn open(engine: &Engine) -> Result<GroupCoordinator, CoordinatorError> {
        GroupCoordinator::open_with(engine, CoordinatorConfig::default())
    }

    /// Opens the coordinator of `engine` with `config`.
    pub fn open_with(
        engine: &Engine,
        config: CoordinatorConfig,
    ) -> Result<GroupCoordinator, CoordinatorError> {
        let lock = lock_coordinator(engine)?;
        let partition_count = config.offsets_topic_partition_count.max(1);
        let (offsets_topic, offsets_partition_count) =
            ensure_offsets_topic(engine, partition_count)?;
        let offsets = CommittedOffsets::load(engine)?;
        Ok(GroupCoordinator {
            shared: Arc::new(Shared {
                engine: engine.clone(),
                offsets_topic,
                offsets_partition_count,
                state: Mutex::new(State {
                    offsets,
                    ..State::default()
                }),
                changed: Condvar::new(),
                _lock: lock,
            }),
        })
    }

    /// The engine the groups consume from.
    pub fn engine(&self) -> &Engine {
        &self.shared.engine
    }

    /// A consumer with `config`; it joins `config.group_id` when it subscribes.
    pub fn consumer(&self, config: ConsumerConfig) -> Consumer {
        Consumer::new(self.clone(), config)
    }

    /// Every group with members or committed offsets, in name order.
    pub fn list_groups(&self) -> Vec<GroupListing> {
        let mut state = self.shared.lock_state();
        self.shared.maintain(&mut state);
        let mut listings: BTreeMap<String, GroupListing> = BTreeMap::new();
        for group in state.offsets.groups() {
            listings.insert(group.clone(), GroupListing::empty(group));
        }
        for (name, group) in &state.groups {
            if !group.members.is_empty() {
                listings.insert(
                    name.clone(),
                    GroupListing {
                        group: name.clone(),
                        state: group.state(),
                        member_count: group.members.len(),
                    },
                );
            }
        }
        listings.into_values().collect()
    }

    /// A group's members, assignments, committed offsets, log end offsets and lag (as
    /// `kafka-consumer-groups --describe`).
    pub fn describe_group(&self, group: &str) -> Result<GroupDescription, DescribeError> {
        let (mut description, committed, owners) = {
            let mut state = self.shared.lock_state();
            self.shared.maintain(&mut state);
            let committed = state.offsets.group(group);
            let live = state.groups.get(group).filter(|g| !g.members.is_empty());
            if live.is_none() && committed.is_empty() {
                return Err(DescribeError::UnknownGroup {
                    group: group.to_owned(),
                });
            }
            let description = match live {
                Some(live) => live.describe(group),
                None => GroupDescription::empty(group),
            };
            let owners = live.map(|live| live.owners.clone()).unwrap_or_default();
            (description, committed, owners)
        };
        description.partitions = describe_partitions(&self.shared.engine, &committed, &owners)?;
        Ok(description)
    }

    /// The offset `group` committed for `tp`.
    pub fn committed(&self, group: &str, tp: &TopicPartition) -> Option<OffsetAndMetadata> {
        let mut state = self.shared.lock_state();
        self.shared.resolve_parked(&mut state);
        state.offsets.get(group, tp).cloned()
    }

    /// A snapshot of every group's committed offsets.
    pub fn committed_offsets(&self) -> CommittedOffsets {
        let mut state = self.shared.lock_state();
        self.shared.resolve_parked(&mut state);
        state.offsets.clone()
    }

    /// Deletes an empty group's committed offsets (Kafka's `kafka-consumer-groups --delete`):
    /// appends a tombstone per partition and waits until they are durable.
    pub fn delete_group(&self, group: &str) -> Result<(), DeleteGroupError> {
        let handle = {
            let mut state = self.shared.lock_state();
            self.shared.maintain(&mut state);
            let member_count = state.groups.get(group).map_or(0, |g| g.members.len());
            if member_count > 0 {
                return Err(DeleteGroupError::NotEmpty {
                    group: group.to_owned(),
                    member_count,
                });
            }
            let entries: Vec<(TopicPartition, Option<OffsetAndMetadata>)> = state
                .offsets
                .group(group)
                .into_keys()
                .map(|tp| (tp, None))
                .collect();
            let known = state.groups.remove(group).is_some();
            if entries.is_empty() {
                if known {
                    return Ok(());
                }
                return Err(DeleteGroupError::UnknownGroup {
                    group: group.to_owned(),
                });
            }
            self.append_commit(group, entries)
        };
        Ok(handle.wait()?)
    }

    pub(crate) fn join(
        &self,
        request: JoinRequest<'_>,
    ) -> Result<(MemberId, Generation), JoinRefused> {
        let topics_metadata = self.shared.engine.list_topics();
        let now = Instant::now();
        let mut state = self.shared.lock_state();
        self.shared.maintain(&mut state);
        let State {
            groups,
            client_sequences,
            ..
        } = &mut *state;
        let group = groups
            .entry(request.group.to_owned())
            .or_insert_with(|| Group::new(request.strategy, now));
        if group.members.is_empty() {
            group.strategy = request.strategy;
        } else if group.strategy != request.strategy {
            return Err(JoinRefused::InconsistentStrategy {
                group_strategy: group.strategy,
            });
        }
        let sequence = client_sequences
            .entry(request.client_id.to_owned())
            .or_insert(0);
        let member_id = MemberId::new(format!("{}-{sequence}", request.client_id));
        *sequence += 1;
        group.members.insert(
            member_id.clone(),
            Member {
                client_id: request.client_id.to_owned(),
                topics: request.topics,
                max_poll_interval: request.max_poll_interval,
                last_seen: now,
                generation: group.generation,
                owned: BTreeSet::new(),
            },
        );
        group.rebalance(&topics_metadata, now);
        let generation = group.generation;
        if let Some(member) = group.members.get_mut(&member_id) {
            member.generation = generation;
        }
        tracing::info!(
            "member {member_id} joined group {}: generation {generation}",
            request.group
        );
        self.shared.notify(&mut state);
        Ok((member_id, generation))
    }

    /// Notes that the member polls, applies any rebalance due (expired members, changed
    /// partition counts), and tells the member its generation and what to revoke.
    pub(crate) fn sync(
        &self,
        group: &str,
        member_id: &MemberId,
        metadata_max_age: Duration,
    ) -> Result<SyncPlan, UnknownMember> {
        let now = Instant::now();
        let mut state = self.shared.lock_state();
        self.shared.maintain(&mut state);
        let group_state = state.groups.get_mut(group).ok_or(UnknownMember)?;
        let member = group_state
            .members
            .get_mut(member_id)
            .ok_or(UnknownMember)?;
        member.last_seen = now;
        let metadata_due = now.duration_since(group_state.metadata_checked) >= metadata_max_age;
        if metadata_due && group_state.refresh_metadata(&self.shared.engine, now) {
            tracing::info!(
                "group {group} rebalances to generation {}: partition counts changed",
                group_state.generation
            );
            self.shared.notify(&mut state);
        }
        let group_state = state.groups.get_mut(group).ok_or(UnknownMember)?;
        let generation = group_state.generation;
        let target = group_state
            .target
            .get(member_id)
            .cloned()
            .unwrap_or_default();
        let member = group_state
            .members
            .get_mut(member_id)
            .ok_or(UnknownMember)?;
        member.generation = generation;
        let revoke = member.owned.difference(&target).cloned().collect();
        Ok(SyncPlan { generation, revoke })
    }

    /// Releases `revoked`, then takes the partitions of the member's target that nobody holds.
    /// Returns the partitions taken.
    pub(crate) fn release_and_acquire(
        &self,
        group: &str,
        member_id: &MemberId,
        revoked: &[TopicPartition],
    ) -> Result<Vec<TopicPartition>, UnknownMember> {
        let mut state = self.shared.lock_state();
        let group_state = state.groups.get_mut(group).ok_or(UnknownMember)?;
        if !group_state.members.contains_key(member_id) {
            return Err(UnknownMember);
        }
        let released = group_state.release(member_id, revoked);
        let acquired = group_state.acquire(member_id);
        if released || !acquired.is_empty() {
            self.shared.notify(&mut state);
        }
        Ok(acquired)
    }

    /// Removes the member from its group and rebalances the others.
    pub(crate) fn leave(&self, group: &str, member_id: &MemberId) {
        let topics_metadata = self.shared.engine.list_topics();
        let mut state = self.shared.lock_state();
        let Some(group_state) = state.groups.get_mut(group) else {
            return;
        };
        if group_state.members.remove(member_id).is_none() {
            return;
        }
        group_state.forget(member_id);
        group_state.rebalance(&topics_metadata, Instant::now());
        tracing::info!(
            "member {member_id} left group {group}: generation {}",
            group_state.generation
        );
        self.shared.notify(&mut state);
    }

    /// Commits `entries` for `group`, checked against the committer's membership, generation and
    /// ownership.
    pub(crate) fn commit(
        &self,
        group: &str,
        committer: Committer<'_>,
        entries: Vec<(TopicPartition, OffsetAndMetadata)>,
    ) -> CommitHandle {
        if entries.is_empty() {
            return CommitHandle::ready(Ok(()));
        }
        if let Err(error) = check_metadata(&entries) {
            return CommitHandle::ready(Err(error));
        }
        let mut state = self.shared.lock_state();
        self.shared.maintain(&mut state);
        if let Err(error) = check_committer(&state, group, committer, &entries) {
            return CommitHandle::ready(Err(error));
        }
        let entries = entries
            .into_iter()
            .map(|(tp, value)| (tp, Some(value)))
            .collect();
        drop(state);
        self.append_commit(group, entries)
    }

    /// Commits `offsets` for `group` as they are, without the membership, generation and
    /// ownership checks of an in-process [`Consumer`]'s commit: for a group whose members are
    /// managed elsewhere, such as by a Kafka-protocol broker that runs Kafka's group protocol
    /// over this engine and fences its members itself. The offsets are durable (and survive a
    /// restart) once the handle completes `Ok`; [`GroupCoordinator::committed`] then answers them.
    ///
    /// Refused: metadata longer than Kafka's `offset.metadata.max.bytes` (4096 bytes). An empty
    /// `offsets` completes at once. Deleting the group's offsets is [`GroupCoordinator::delete_group`].
    pub fn commit_offsets(
        &self,
        group: &str,
        offsets: Vec<(TopicPartition, OffsetAndMetadata)>,
    ) -> CommitHandle {
        if offsets.is_empty() {
            return CommitHandle::ready(Ok(()));
        }
        if let Err(error) = check_metadata(&offsets) {
            return CommitHandle::ready(Err(error));
        }
        {
            let mut state = self.shared.lock_state();
            self.shared.resolve_parked(&mut state);
        }
        let entries = offsets
            .into_iter()
            .map(|(tp, value)| (tp, Some(value)))
            .collect();
        self.append_commit(group, entries)
    }

    /// Appends the records of a commit. Appends of one group go to one partition in the order of
    /// this call, and the committed offsets record them by their offset in that partition.
    fn append_commit(
        &self,
        group: &str,
        entries: Vec<(TopicPartition, Option<OffsetAndMetadata>)>,
    ) -> CommitHandle {
        let offsets_partition = TopicPartition {
            topic: self.shared.offsets_topic.clone(),
            partition: partition_for_group(group, self.shared.offsets_partition_count),
        };
        let records = match commit_records(group, &entries, TimestampMs::now()) {
            Ok(records) => records,
            Err(error) => {
                tracing::error!("cannot encode a commit of group {group}: {error}");
                return CommitHandle::ready(Err(CommitError::InvalidRecord { source: error }));
            }
        };
        let pending = self.shared.engine.append_internal(
            &offsets_partition.topic,
            offsets_partition.partition,
            records,
            Durability::Durable,
        );
        let commit = InFlightCommit {
            pending,
            group: group.to_owned(),
            offsets_partition,
            entries,
        };
        CommitHandle::in_flight(commit, self.shared.clone())
    }

    /// A counter that moves whenever a group changes.
    pub(crate) fn change_count(&self) -> u64 {
        self.shared.lock_state().change_count
    }

    /// Blocks until a group changes after `seen` (see `change_count`) or `timeout` passes.
    pub(crate) fn wait_for_change(&self, seen: u64, timeout: Duration) {
        let state = self.shared.lock_state();
        let _ = self
            .shared
            .changed
            .wait_timeout_while(state, timeout, |state| state.change_count == seen)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

/// Why the coordinator refused a join (the consumer turns it into a `JoinError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JoinRefused {
    InconsistentStrategy { group_strategy: AssignmentStrategy },
}

/// Kafka's `OFFSET_METADATA_TOO_LARGE`: the first partition whose metadata is too long.
fn check_metadata(entries: &[(TopicPartition, OffsetAndMetadata)]) -> Result<(), CommitError> {
    match entries
        .iter()
        .find(|(_, value)| value.metadata.len() > OFFSET_METADATA_BYTES_MAX)
    {
        Some((tp, value)) => Err(CommitError::MetadataTooLarge {
            partition: tp.clone(),
            size_bytes: value.metadata.len(),
            max_bytes: OFFSET_METADATA_BYTES_MAX,
        }),
        None => Ok(()),
    }
}

fn check_committer(
    state: &State,
    group: &str,
    committer: Committer<'_>,
    entries: &[(TopicPartition, OffsetAndMetadata)],
) -> Result<(), CommitError> {
    let unknown = || CommitError::UnknownMember {
        group: group.to_owned(),
        member_id: committer.member_id.clone(),
    };
    let group_state = state.groups.get(group).ok_or_else(unknown)?;
    let member = group_state
        .members
        .get(committer.member_id)
        .ok_or_else(unknown)?;
    if committer.generation != group_state.generation {
        return Err(CommitError::IllegalGeneration {
            group: group.to_owned(),
            member_id: committer.member_id.clone(),
            generation: committer.generation,
            group_generation: group_state.generation,
        });
    }
    if let Some((tp, _)) = entries.iter().find(|(tp, _)| !member.owned.contains(tp)) {
        return Err(CommitError::NotAssigned {
            group: group.to_owned(),
            member_id: committer.member_id.clone(),
            partition: tp.clone(),
        });
    }
    Ok(())
}

fn lock_coordinator(engine: &Engine) -> Result<File, CoordinatorError> {
    let path = engine.root().join(COORDINATOR_LOCK_FILE);
    lock_exclusive(&path)?.ok_or_else(|| CoordinatorError::Locked {
        dir: engine.root().to_owned(),
    })
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn notify(&self, state: &mut State) {
        state.change_count = state.change_count.wrapping_add(1);
        self.changed.notify_all();
    }

    /// Work done whenever the coordinator is entered: record completed parked commits, and
    /// remove members that stopped polling.
    fn maintain(&self, state: &mut State) {
        self.resolve_parked(state);
        let now = Instant::now();
        let mut topics_metadata = None;
        let mut expired_any = false;
        for (name, group) in &mut state.groups {
            let expired: Vec<MemberId> = group
                .members
                .iter()
                .filter(|(_, member)| {
                    now.duration_since(member.last_seen) > member.max_poll_interval
                })
                .map(|(member_id, _)| member_id.clone())
                .collect();
            if expired.is_empty() {
                continue;
            }
            for member_id in &expired {
                tracing::warn!(
                    "member {member_id} of group {name} did not poll within max.poll.interval.ms; it is removed and its partitions reassigned"
                );
                group.members.remove(member_id);
                group.forget(member_id);
            }
            let metadata = topics_metadata.get_or_insert_with(|| self.engine.list_topics());
            group.rebalance(metadata, now);
            expired_any = true;
        }
        if expired_any {
            self.notify(state);
        }
    }

    /// Records parked commits that have completed since.
    fn resolve_parked(&self, state: &mut State) {
        if state.parked.is_empty() {
            return;
        }
        let mut cx = Context::from_waker(Waker::noop());
        let parked = std::mem::take(&mut state.parked);
        for mut commit in parked {
            match std::pin::Pin::new(&mut commit.pending).poll(&mut cx) {
                Poll::Pending => state.parked.push(commit),
                Poll::Ready(Ok(info)) => {
                    if let Err(error) = apply_commit(&mut state.offsets, &commit, &info) {
                        tracing::error!("{error}");
                    }
                }
                Poll::Ready(Err(error)) => tracing::warn!(
                    "offset commit of group {} to {} failed: {error}",
                    commit.group,
                    commit.offsets_partition
                ),
            }
        }
    }

    /// Records a completed commit.
    pub(crate) fn record_commit(
        &self,
        commit: &InFlightCommit,
        info: &AppendInfo,
    ) -> Result<(), CommitError> {
        let mut state = self.lock_state();
        apply_commit(&mut state.offsets, commit, info)
    }

    /// Keeps a commit whose handle was dropped before it completed.
    pub(crate) fn park(&self, commit: InFlightCommit) {
        let mut state = self.lock_state();
        state.parked.push(commit);
        self.resolve_parked(&mut state);
    }
}

/// The records of one append have consecutive offsets from `info.first_offset`, in entry order.
/// An append answered with another record count than the commit's entries cannot be matched to
/// them (an internal error): nothing is recorded and the commit fails.
fn apply_commit(
    offsets: &mut CommittedOffsets,
    commit: &InFlightCommit,
    info: &AppendInfo,
) -> Result<(), CommitError> {
    let expected = commit.entries.len() as u64;
    if info.record_count != expected {
        return Err(CommitError::AppendMismatch {
            group: commit.group.clone(),
            partition: commit.offsets_partition.clone(),
            expected,
            appended: info.record_count,
        });
    }
    for (index, (tp, value)) in (0u64..).zip(&commit.entries) {
        let log_offset = Offset(info.first_offset.0.saturating_add(index));
        offsets.apply(&commit.group, tp.clone(), value.clone(), log_offset);
    }
    Ok(())
}

impl Group {
    fn new(strategy: AssignmentStrategy, now: Instant) -> Group {
        Group {
            strategy,
            generation: Generation::default(),
            members: BTreeMap::new(),
            partition_counts: BTreeMap::new(),
            metadata_checked: now,
            target: BTreeMap::new(),
            owners: BTreeMap::new(),
        }
    }

    fn subscribed_partition_counts(
        &self,
        topics_metadata: &[(TopicName, TopicMetadata)],
    ) -> BTreeMap<TopicName, u32> {
        topics_metadata
            .iter()
            .filter(|(topic, _)| self.members.values().any(|m| m.topics.contains(topic)))
            .map(|(topic, metadata)| (topic.clone(), metadata.partition_count))
            .collect()
    }

    /// Re-reads the partition counts; rebalances and returns true if they changed.
    fn refresh_metadata(&mut self, engine: &Engine, now: Instant) -> bool {
        let topics_metadata = engine.list_topics();
        self.metadata_checked = now;
        if self.subscribed_partition_counts(&topics_metadata) == self.partition_counts {
            return false;
        }
        self.rebalance(&topics_metadata, now);
        true
    }

    /// A new generation and target assignment for the current members and partition counts.
    fn rebalance(&mut self, topics_metadata: &[(TopicName, TopicMetadata)], now: Instant) {
        self.partition_counts = self.subscribed_partition_counts(topics_metadata);
        self.metadata_checked = now;
        self.generation = Generation(self.generation.0.wrapping_add(1));
        let subscriptions: Vec<MemberSubscription> = self
            .members
            .iter()
            .map(|(member_id, member)| MemberSubscription {
                member_id: member_id.clone(),
                topics: member.topics.clone(),
                owned: self
                    .target
                    .get(member_id)
                    .map(|target| target.iter().cloned().collect())
                    .unwrap_or_default(),
            })
            .collect();
        let assignment = self.strategy.assign(&subscriptions, &self.partition_counts);
        self.target = assignment
            .into_iter()
            .map(|(member_id, partitions)| (member_id, partitions.into_iter().collect()))
            .collect();
        let violation = self.invariant_violation();
        debug_assert_eq!(
            violation, None,
            "after a rebalance of generation {}",
            self.generation
        );
        if let Some(violation) = violation {
            tracing::error!(
                "generation {} of a group breaks an invariant (an internal error): {violation}",
                self.generation
            );
        }
    }

    /// What breaks the group's invariants, if anything: each partition of the target assignment
    /// has one member, who is in the group; and a partition is owned by a member exactly when
    /// `owners` names that member (`release` and `acquire` keep both sides in step).
    fn invariant_violation(&self) -> Option<String> {
        let assigned: usize = self.target.values().map(BTreeSet::len).sum();
        let distinct: BTreeSet<&TopicPartition> = self.target.values().flatten().collect();
        if assigned != distinct.len() {
            return Some("a partition is in two members' targets".to_owned());
        }
        if let Some(id) = self
            .target
            .keys()
            .find(|id| !self.members.contains_key(*id))
        {
            return Some(format!("{id} has a target but is not a member"));
        }
        for (member_id, member) in &self.members {
            if let Some(tp) = member
                .owned
                .iter()
                .find(|tp| self.owners.get(*tp) != Some(member_id))
            {
                return Some(format!(
                    "{member_id} owns {tp}, which owners does not give it"
                ));
            }
        }
        let unowned = self.owners.iter().find(|(tp, owner)| {
            self.members
                .get(*owner)
                .is_none_or(|member| !member.owned.contains(*tp))
        });
        unowned.map(|(tp, owner)| format!("owners gives {tp} to {owner}, who does not own it"))
    }

    /// Drops a removed member's target and ownership: its partitions are free.
    fn forget(&mut self, member_id: &MemberId) {
        self.target.remove(member_id);
        self.owners.retain(|_, owner| owner != member_id);
    }

    fn release(&mut self, member_id: &MemberId, revoked: &[TopicPartition]) -> bool {
        let Some(member) = self.members.get_mut(member_id) else {
            return false;
        };
        let mut released = false;
        for tp in revoked {
            if !member.owned.remove(tp) {
                continue;
            }
            released = true;
            // Ownership is recorded on both sides: the partition's owner is this member.
            let owner = self.owners.get(tp);
            debug_assert_eq!(owner, Some(member_id), "{tp} released by {member_id}");
            match owner {
                Some(owner) if owner == member_id => {
                    self.owners.remove(tp);
                }
                // Left to its recorded owner: never freed for a second member to take.
                _ => tracing::error!(
                    "{member_id} released {tp}, whose recorded owner is {owner:?} (an internal \
                     error); the partition stays with that owner"
                ),
            }
        }
        released
    }

    /// Takes the free partitions of the member's target, if the member is on the current
    /// generation (otherwise it must first revoke what the new generation moved away).
    fn acquire(&mut self, member_id: &MemberId) -> Vec<TopicPartition> {
        let Some(member) = self.members.get_mut(member_id) else {
            return Vec::new();
        };
        if member.generation != self.generation {
            return Vec::new();
        }
        let Some(target) = self.target.get(member_id) else {
            return Vec::new();
        };
        let mut acquired = Vec::new();
        for tp in target {
            if member.owned.contains(tp) || self.owners.contains_key(tp) {
                continue;
            }
            self.owners.insert(tp.clone(), member_id.clone());
            member.owned.insert(tp.clone());
            acquired.push(tp.clone());
        }
        acquired
    }

    fn state(&self) -> GroupState {
        if self.members.is_empty() {
            return GroupState::Empty;
        }
        let settled = self.members.iter().all(|(member_id, member)| {
            member.generation == self.generation
                && self
                    .target
                    .get(member_id)
                    .is_some_and(|target| *target == member.owned)
        });
        if settled {
            GroupState::Stable
        } else {
            GroupState::PreparingRebalance
        }
    }

    fn describe(&self, name: &str) -> GroupDescription {
        let members = self
            .members
            .iter()
            .map(|(member_id, member)| MemberDescription {
                member_id: member_id.clone(),
                client_id: member.client_id.clone(),
                topics: member.topics.iter().cloned().collect(),
                assignment: member.owned.iter().cloned().collect(),
                target: self
                    .target
                    .get(member_id)
                    .map(|target| target.iter().cloned().collect())
                    .unwrap_or_default(),
            })
            .collect();
        GroupDescription {
            group: name.to_owned(),
            state: self.state(),
            strategy: Some(self.strategy),
            generation: Some(self.generation),
            members,
            partitions: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Issue 41, item 5: the group's invariants, once `assert!`s, are `debug_assert!`s (and, for
    //! a commit, a typed error). These tests drive a group through random joins, leaves, polls
    //! and partition growth with every strategy and check the invariants after each step.

    use proptest::prelude::*;

    use super::*;
    use crate::config::LogConfig;
    use crate::engine::Pending;

    const TOPICS: [&str; 3] = ["a", "b", "c"];

    #[derive(Debug, Clone)]
    enum Step {
        /// A member joins, subscribed to the topics whose bits are set (at least one).
        Join { topics: u8 },
        /// The `n`th member (modulo the member count) leaves.
        Leave { member: usize },
        /// The `n`th member polls: catches up, releases what it must, takes what is free.
        Poll { member: usize },
        /// A topic gains partitions.
        Grow { topic: usize, by: u32 },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1u8..8).prop_map(|topics| Step::Join { topics }),
            any::<usize>().prop_map(|member| Step::Leave { member }),
            any::<usize>().prop_map(|member| Step::Poll { member }),
            any::<usize>().prop_map(|member| Step::Poll { member }),
            (0..TOPICS.len(), 1u32..4).prop_map(|(topic, by)| Step::Grow { topic, by }),
        ]
    }

    fn strategy() -> impl Strategy<Value = AssignmentStrategy> {
        prop_oneof![
            Just(AssignmentStrategy::Range),
            Just(AssignmentStrategy::RoundRobin),
            Just(AssignmentStrategy::CooperativeSticky),
        ]
    }

    fn topic(name: &str) -> TopicName {
        TopicName::parse(name).unwrap()
    }

    fn metadata(counts: &[u32; 3]) -> Vec<(TopicName, TopicMetadata)> {
        TOPICS
            .iter()
            .zip(counts)
            .map(|(name, count)| {
                let metadata = TopicMetadata {
                    partition_count: *count,
                    config: LogConfig::default(),
                };
                (topic(name), metadata)
            })
            .collect()
    }

    fn nth_member(group: &Group, n: usize) -> Option<MemberId> {
        let count = group.members.len();
        (count > 0).then(|| group.members.keys().nth(n % count).cloned())?
    }

    /// What the coordinator does for `step` (`join`, `leave`, `sync` and `release_and_acquire`).
    fn apply(group: &mut Group, counts: &mut [u32; 3], joined: &mut u32, step: &Step) {
        let now = Instant::now();
        match step {
            Step::Join { topics } => {
                let member_id = MemberId::new(format!("m-{joined}"));
                *joined += 1;
                let topics = (0..TOPICS.len())
                    .filter(|bit| topics & (1 << bit) != 0)
                    .map(|bit| topic(TOPICS[bit]))
                    .collect();
                let member = Member {
                    client_id: "c".to_owned(),
                    topics,
                    max_poll_interval: Duration::from_secs(300),
                    last_seen: now,
                    generation: group.generation,
                    owned: BTreeSet::new(),
                };
                group.members.insert(member_id.clone(), member);
                group.rebalance(&metadata(counts), now);
                let generation = group.generation;
                group.members.get_mut(&member_id).unwrap().generation = generation;
            }
            Step::Leave { member } => {
                let Some(member_id) = nth_member(group, *member) else {
                    return;
                };
                group.members.remove(&member_id);
                group.forget(&member_id);
                group.rebalance(&metadata(counts), now);
            }
            Step::Poll { member } => {
                let Some(member_id) = nth_member(group, *member) else {
                    return;
                };
                let generation = group.generation;
                let target = group.target.get(&member_id).cloned().unwrap_or_default();
                let member = group.members.get_mut(&member_id).unwrap();
                member.generation = generation;
                let revoke: Vec<TopicPartition> =
                    member.owned.difference(&target).cloned().collect();
                group.release(&member_id, &revoke);
                group.acquire(&member_id);
            }
            Step::Grow { topic, by } => {
                counts[*topic] += by;
                group.rebalance(&metadata(counts), now);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn the_group_invariants_hold_through_joins_leaves_polls_and_growth(
            strategy in strategy(),
            steps in proptest::collection::vec(step(), 1..60),
        ) {
            let mut group = Group::new(strategy, Instant::now());
            let mut counts = [1, 2, 3];
            let mut joined = 0;
            for step in &steps {
                apply(&mut group, &mut counts, &mut joined, step);
                prop_assert_eq!(group.invariant_violation(), None, "after {:?}", step);
            }
            // Every member polling twice settles the group: each partition of a subscribed topic
            // then has exactly one owner, its target member.
            for _ in 0..2 {
                for member in 0..group.members.len() {
                    apply(&mut group, &mut counts, &mut joined, &Step::Poll { member });
                    prop_assert_eq!(group.invariant_violation(), None);
                }
            }
            for (member_id, target) in &group.target {
                prop_assert_eq!(&group.members[member_id].owned, target);
            }
        }
    }

    #[test]
    fn a_broken_invariant_is_named() {
        let mut group = Group::new(AssignmentStrategy::Range, Instant::now());
        let tp = TopicPartition {
            topic: topic("a"),
            partition: 0,
        };
        group
            .owners
            .insert(tp.clone(), MemberId::new("gone".to_owned()));
        assert_eq!(
            group.invariant_violation().as_deref(),
            Some("owners gives a-0 to gone, who does not own it")
        );
        group.owners.clear();
        let both = BTreeSet::from([tp.clone()]);
        group.target.insert(MemberId::new("x"), both.clone());
        group.target.insert(MemberId::new("y"), both);
        assert_eq!(
            group.invariant_violation().as_deref(),
            Some("a partition is in two members' targets")
        );
    }

    fn in_flight(entries: usize) -> InFlightCommit {
        let offsets_partition = TopicPartition {
            topic: topic("__consumer_offsets"),
            partition: 0,
        };
        let entries = (0..entries as u32)
            .map(|partition| {
                let tp = TopicPartition {
                    topic: topic("a"),
                    partition,
                };
                (
                    tp,
                    Some(OffsetAndMetadata::new(Offset(10 + u64::from(partition)))),
                )
            })
            .collect();
        InFlightCommit {
            pending: Pending::ready(Err(crate::error::AppendError::Empty)),
            group: "g".to_owned(),
            offsets_partition,
            entries,
        }
    }

    fn answered(first_offset: u64, record_count: u64) -> AppendInfo {
        AppendInfo {
            first_offset: Offset(first_offset),
            last_offset: Offset(first_offset + record_count.saturating_sub(1)),
            record_count,
            batch_count: 1,
            max_timestamp: TimestampMs(0),
            log_append_time: None,
            durable: true,
            duplicate: false,
        }
    }

    #[test]
    fn a_commit_records_its_entries_at_consecutive_offsets() {
        let mut offsets = CommittedOffsets::default();
        let commit = in_flight(3);
        apply_commit(&mut offsets, &commit, &answered(40, 3)).unwrap();
        let group = offsets.group("g");
        assert_eq!(group.len(), 3);
        for (tp, value) in &commit.entries {
            assert_eq!(group.get(tp), value.as_ref());
        }
        // Recorded at offsets 40, 41, 42: an older record (a lower log offset) loses to them.
        let last = commit.entries[2].0.clone();
        offsets.apply("g", last.clone(), None, Offset(41));
        assert!(
            offsets.get("g", &last).is_some(),
            "offset 42 is later than 41"
        );
        offsets.apply("g", last.clone(), None, Offset(43));
        assert!(offsets.get("g", &last).is_none());
    }

    #[test]
    fn an_append_answered_with_another_record_count_is_an_error_and_records_nothing() {
        let mut offsets = CommittedOffsets::default();
        let commit = in_flight(3);
        let error = apply_commit(&mut offsets, &commit, &answered(40, 2)).unwrap_err();
        assert!(
            matches!(
                &error,
                CommitError::AppendMismatch { group, expected: 3, appended: 2, .. } if group == "g"
            ),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "the commit of group g appended 3 records to __consumer_offsets-0, but the append was \
             answered with 2; the commit is not recorded (an internal error)"
        );
        assert!(offsets.groups().is_empty());
    }
}
