//! A member of a consumer group ([`Consumer`]): subscribes, polls records from the partitions its
//! group assigns it, keeps a position per partition, and commits offsets.
//!
//! A consumer is used by one thread at a time (`Send`, not `Sync`), as Kafka's is. Everything a
//! group does to a member happens on that thread, inside `poll`: the revocations and assignments
//! of a rebalance, with their [`RebalanceListener`] callbacks, and auto-commits. Records come from
//! the engine's fetch; the coordinator is only asked about membership and offsets.
//!
//! `poll` first returns records already fetched, round-robin over the owned, unpaused partitions;
//! if there are none it fetches from every such partition at once (each fetch at most
//! `max.partition.fetch.bytes`, a round at most `fetch.max.bytes`), first without waiting, then
//! as long polls of at most `fetch.max.wait.ms` until a partition has records or the timeout
//! passes, looking at the group again between long polls.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::{Future, poll_fn};
use std::ops::Bound;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::engine::{FetchOptions, Isolation, Pending};
use crate::error::ReadError;
use crate::log::FetchData;
use crate::types::{Offset, TopicName, TopicPartition};

use super::assignor::MemberId;
use super::commit::CommitHandle;
use super::config::{AutoOffsetReset, ConsumerConfig};
use super::coordinator::{
    Committer, Generation, GroupCoordinator, JoinRefused, JoinRequest, UnknownMember,
};
use super::error::{CloseError, CommitError, JoinError, PollError, PositionError};
use super::records::decode_fetched;
use super::store::OffsetAndMetadata;
use crate::engine::ConsumerRecord;

/// The longest `group.id`.
pub const GROUP_ID_LENGTH_MAX: usize = 255;

/// How many times a commit of released positions follows the group to a newer generation; each
/// retry needs another member to join or leave between two calls on this thread.
const GENERATION_RETRIES_MAX: u32 = 8;

/// Callbacks of a rebalance, called on the consumer's thread inside `poll` (and `unsubscribe`,
/// `close`), with the consumer itself so that they can commit, seek or read positions.
///
/// A trait rather than closures: the three events share state (what was being processed), and
/// each needs the consumer. `poll`, `subscribe` and `unsubscribe` are refused inside a callback.
pub trait RebalanceListener: Send {
    /// Called before `partitions` are given up (after their positions were auto-committed, if
    /// enabled): the last moment to commit offsets for them.
    fn on_partitions_revoked(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        let _ = (consumer, partitions);
    }

    /// Called after `partitions` were added to the assignment, before records of them are
    /// returned: the place to `seek` to externally stored offsets.
    fn on_partitions_assigned(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        let _ = (consumer, partitions);
    }

    /// Called when the member was removed from its group (it did not poll within
    /// `max.poll.interval.ms`) and `partitions` may already belong to others: commits would be
    /// refused. Calls `on_partitions_revoked` unless overridden.
    fn on_partitions_lost(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(consumer, partitions);
    }
}

/// Bounds of one `poll`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollOptions {
    /// The most records returned.
    pub max_records: usize,
    /// The most bytes of keys, values and headers returned; one record is always returned whole.
    pub max_bytes: u64,
    /// How long to wait for records when none are ready.
    pub timeout: Duration,
}

/// A member of a consumer group. See the module documentation.
pub struct Consumer {
    coordinator: GroupCoordinator,
    config: ConsumerConfig,
    membership: Option<Membership>,
    listener: Option<Box<dyn RebalanceListener>>,
    partitions: BTreeMap<TopicPartition, PartitionState>,
    /// The partition `poll` last returned records of; the next starts after it.
    last_served: Option<TopicPartition>,
    auto_commit_due: Instant,
    auto_commit_in_flight: Option<(CommitHandle, Vec<(TopicPartition, Offset)>)>,
    in_callback: bool,
}

#[derive(Debug, Clone)]
struct Membership {
    group: String,
    member_id: MemberId,
    generation: Generation,
    topics: BTreeSet<TopicName>,
}

#[derive(Debug, Default)]
struct PartitionState {
    /// The offset of the next record `poll` returns; `None` until the committed offset (or
    /// `auto.offset.reset`) decides it.
    position: Option<Offset>,
    paused: bool,
    /// Records fetched and not yet returned, from `position` on: at most one fetch's worth
    /// (`max.partition.fetch.bytes`), since a partition is fetched only when this is empty.
    buffered: VecDeque<ConsumerRecord>,
    /// The position this consumer last knew committed (auto-commit skips unchanged ones).
    committed_position: Option<Offset>,
}

/// Which callback a rebalance event calls.
#[derive(Debug, Clone, Copy)]
enum Event {
    Revoked,
    Assigned,
    Lost,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("group_id", &self.config.group_id)
            .field("membership", &self.membership)
            .field("partitions", &self.partitions.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Consumer {
    pub(crate) fn new(coordinator: GroupCoordinator, config: ConsumerConfig) -> Consumer {
        Consumer {
            coordinator,
            auto_commit_due: Instant::now() + Duration::from_millis(config.auto_commit_interval_ms),
            config,
            membership: None,
            listener: None,
            partitions: BTreeMap::new(),
            last_served: None,
            auto_commit_in_flight: None,
            in_callback: false,
        }
    }

    /// The consumer's configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Sets the callbacks of rebalances.
    pub fn set_rebalance_listener(&mut self, listener: impl RebalanceListener + 'static) {
        self.listener = Some(Box::new(listener));
    }

    /// Joins `group.id` subscribed to `topics` (which need not exist yet: their partitions are
    /// assigned once they do). The group rebalances at once; partitions arrive at the next poll.
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<(), JoinError> {
        if self.in_callback {
            return Err(JoinError::InCallback);
        }
        if let Some(membership) = &self.membership {
            return Err(JoinError::AlreadySubscribed {
                group: membership.group.clone(),
            });
        }
        check_group_id(&self.config.group_id)?;
        let topics = topics
            .iter()
            .map(|topic| TopicName::parse(topic))
            .collect::<Result<BTreeSet<_>, _>>()?;
        if topics.is_empty() {
            return Err(JoinError::NoTopics);
        }
        self.join(topics)
    }

    fn join(&mut self, topics: BTreeSet<TopicName>) -> Result<(), JoinError> {
        let group = self.config.group_id.clone();
        let request = JoinRequest {
            group: &group,
            client_id: &self.config.client_id,
            topics: topics.clone(),
            strategy: self.config.partition_assignment_strategy,
            max_poll_interval: Duration::from_millis(self.config.max_poll_interval_ms),
        };
        let (member_id, generation) = self.coordinator.join(request).map_err(|refused| {
            let JoinRefused::InconsistentStrategy { group_strategy } = refused;
            JoinError::InconsistentStrategy {
                group: group.clone(),
                group_strategy,
                requested: self.config.partition_assignment_strategy,
            }
        })?;
        self.membership = Some(Membership {
            group,
            member_id,
            generation,
            topics,
        });
        Ok(())
    }

    /// Leaves the group: commits positions (with auto-commit), calls `on_partitions_revoked` for
    /// every owned partition, and gives them up. The group rebalances at once. The leave happens
    /// even if the commit fails; the commit's error is returned.
    pub fn unsubscribe(&mut self) -> Result<(), CloseError> {
        if self.in_callback {
            return Err(CloseError::InCallback);
        }
        let Some(membership) = self.membership.clone() else {
            return Ok(());
        };
        // Reach the group's current generation first, so that the final commit is not refused
        // for a rebalance this member has not polled since; it still owns all it owned.
        let synced = self.catch_up_generation();
        let committed = if self.config.enable_auto_commit {
            self.commit_changed_positions_sync()
        } else {
            Ok(())
        };
        let owned: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        if !owned.is_empty() {
            let event = if synced.is_ok() {
                Event::Revoked
            } else {
                Event::Lost
            };
            self.notify(event, &owned);
        }
        self.coordinator
            .leave(&membership.group, &membership.member_id);
        self.membership = None;
        self.partitions.clear();
        self.last_served = None;
        Ok(committed?)
    }

    /// Leaves the group as [`Consumer::unsubscribe`] does, then drops the consumer. Dropping a
    /// consumer without `close` also leaves the group, but commits nothing and calls no callback.
    pub fn close(mut self) -> Result<(), CloseError> {
        self.unsubscribe()
    }

    /// The member id, while subscribed.
    pub fn member_id(&self) -> Option<&MemberId> {
        self.membership.as_ref().map(|m| &m.member_id)
    }

    /// The generation the member last synchronised with, while subscribed.
    pub fn generation(&self) -> Option<Generation> {
        self.membership.as_ref().map(|m| m.generation)
    }

    /// The partitions this consumer owns, in order.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.partitions.keys().cloned().collect()
    }

    /// Polls with `max.poll.records` and `fetch.max.bytes` as bounds.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, PollError> {
        self.poll_with(PollOptions {
            max_records: self.config.max_poll_records,
            max_bytes: self.config.fetch_max_bytes,
            timeout,
        })
    }

    /// Returns records of the owned, unpaused partitions, waiting up to `options.timeout` for
    /// some; also takes part in rebalances and auto-commits (see the module documentation).
    pub fn poll_with(&mut self, options: PollOptions) -> Result<Vec<ConsumerRecord>, PollError> {
        if self.in_callback {
            return Err(PollError::InCallback);
        }
        if self.membership.is_none() {
            return Err(PollError::NotSubscribed);
        }
        let started = Instant::now();
        let mut wait_ms = 0u64;
        // Each round either returns or waits (a long poll, or for a group change) for part of the
        // timeout, so the rounds end when it has passed.
        loop {
            let seen = self.coordinator.change_count();
            self.synchronise()?;
            self.auto_commit_if_due();
            self.resolve_positions()?;
            let records = self.drain(&options);
            if !records.is_empty() {
                return Ok(records);
            }
            let remaining = options.timeout.saturating_sub(started.elapsed());
            let fetchable = self.fetchable();
            if fetchable.is_empty() {
                if remaining.is_zero() {
                    return Ok(records);
                }
                let wait = remaining.min(Duration::from_millis(self.config.fetch_max_wait_ms));
                self.coordinator.wait_for_change(seen, wait);
                continue;
            }
            if self.fetch_round(fetchable, wait_ms)? {
                continue;
            }
            let remaining = options.timeout.saturating_sub(started.elapsed());
            if remaining.is_zero() {
                return Ok(Vec::new());
            }
            let remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
            wait_ms = remaining_ms.clamp(1, self.config.fetch_max_wait_ms.max(1));
        }
    }

    /// The offset of the next record `poll` returns for `tp`; decided from the committed offset
    /// (or `auto.offset.reset`) if `poll` has not done so yet.
    pub fn position(&mut self, tp: &TopicPartition) -> Result<Offset, PositionError> {
        let position = self.state(tp)?.position;
        match position {
            Some(position) => Ok(position),
            None => {
                let position = self.initial_position(tp)?;
                self.state_mut(tp)?.position = Some(position);
                Ok(position)
            }
        }
    }

    /// Makes `offset` the next offset `poll` returns for `tp` (records fetched already are
    /// dropped). An offset outside the log is reset by `auto.offset.reset` at the next fetch.
    pub fn seek(&mut self, tp: &TopicPartition, offset: Offset) -> Result<(), PositionError> {
        let state = self.state_mut(tp)?;
        state.position = Some(offset);
        state.buffered.clear();
        Ok(())
    }

    /// Seeks `tp` to its log start offset.
    pub fn seek_to_beginning(&mut self, tp: &TopicPartition) -> Result<(), PositionError> {
        let (log_start_offset, _) = self.log_bounds(tp)?;
        self.seek(tp, log_start_offset)
    }

    /// Seeks `tp` to its log end offset.
    pub fn seek_to_end(&mut self, tp: &TopicPartition) -> Result<(), PositionError> {
        let (_, log_end_offset) = self.log_bounds(tp)?;
        self.seek(tp, log_end_offset)
    }

    /// Stops returning records of `partitions` until they are resumed; their positions are kept
    /// (a rebalance that moves a paused partition away forgets the pause).
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<(), PositionError> {
        self.set_paused(partitions, true)
    }

    /// Returns records of paused `partitions` again.
    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<(), PositionError> {
        self.set_paused(partitions, false)
    }

    /// The paused partitions.
    pub fn paused(&self) -> Vec<TopicPartition> {
        self.partitions
            .iter()
            .filter(|(_, state)| state.paused)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    fn set_paused(
        &mut self,
        partitions: &[TopicPartition],
        paused: bool,
    ) -> Result<(), PositionError> {
        if let Some(tp) = partitions
            .iter()
            .find(|tp| !self.partitions.contains_key(*tp))
        {
            return Err(PositionError::NotAssigned {
                partition: tp.clone(),
            });
        }
        for tp in partitions {
            self.state_mut(tp)?.paused = paused;
        }
        Ok(())
    }

    /// The offset `group.id` committed for `tp`.
    pub fn committed(&self, tp: &TopicPartition) -> Option<OffsetAndMetadata> {
        self.coordinator.committed(&self.config.group_id, tp)
    }

    /// Commits the position of every owned partition and waits until it is durable.
    pub fn commit_sync(&mut self) -> Result<(), CommitError> {
        let positions = self.positions(|_| true);
        self.commit_positions_sync(&positions)
    }

    /// Commits `offsets` (of owned partitions) and waits until they are durable.
    pub fn commit_sync_offsets(
        &mut self,
        offsets: BTreeMap<TopicPartition, OffsetAndMetadata>,
    ) -> Result<(), CommitError> {
        self.commit_offsets(offsets.into_iter().collect()).wait()
    }

    /// Commits the position of every owned partition; the handle completes once it is durable.
    pub fn commit_async(&mut self) -> CommitHandle {
        let positions = self.positions(|_| true);
        self.commit_offsets(with_no_metadata(&positions))
    }

    /// Commits `offsets` (of owned partitions); the handle completes once they are durable.
    pub fn commit_async_offsets(
        &mut self,
        offsets: BTreeMap<TopicPartition, OffsetAndMetadata>,
    ) -> CommitHandle {
        self.commit_offsets(offsets.into_iter().collect())
    }

    fn commit_offsets(
        &mut self,
        offsets: Vec<(TopicPartition, OffsetAndMetadata)>,
    ) -> CommitHandle {
        let Some(membership) = &self.membership else {
            return CommitHandle::ready(Err(CommitError::NotSubscribed));
        };
        let committer = Committer {
            member_id: &membership.member_id,
            generation: membership.generation,
        };
        self.coordinator
            .commit(&membership.group, committer, offsets)
    }

    fn commit_positions_sync(
        &mut self,
        positions: &[(TopicPartition, Offset)],
    ) -> Result<(), CommitError> {
        self.commit_offsets(with_no_metadata(positions)).wait()?;
        self.note_committed(positions);
        Ok(())
    }

    /// Commits positions of partitions this member is about to give up (a revocation or a leave).
    /// It still owns them: the group moves a partition only once its owner released it. So a
    /// refusal for a generation the group reached after this member last synchronised (another
    /// member joined or left meanwhile) is retried at the group's current generation; without
    /// the retry the positions stay uncommitted and the next owner consumes those records again.
    fn commit_released_positions_sync(
        &mut self,
        positions: &[(TopicPartition, Offset)],
    ) -> Result<(), CommitError> {
        let mut retries = 0;
        loop {
            match self.commit_positions_sync(positions) {
                Err(CommitError::IllegalGeneration { .. })
                    if retries < GENERATION_RETRIES_MAX && self.catch_up_generation().is_ok() =>
                {
                    retries += 1;
                }
                committed => return committed,
            }
        }
    }

    /// Auto-commit's last commit before a leave: waits for the one in flight, then commits the
    /// positions that moved since.
    fn commit_changed_positions_sync(&mut self) -> Result<(), CommitError> {
        if let Some((handle, positions)) = self.auto_commit_in_flight.take()
            && handle.wait().is_ok()
        {
            self.note_committed(&positions);
        }
        let positions = self.positions(|state| state.position != state.committed_position);
        self.commit_released_positions_sync(&positions)
    }

    fn note_committed(&mut self, positions: &[(TopicPartition, Offset)]) {
        for (tp, position) in positions {
            if let Some(state) = self.partitions.get_mut(tp) {
                state.committed_position = Some(*position);
            }
        }
    }

    /// The known positions of owned partitions that `select` picks.
    fn positions(&self, select: impl Fn(&PartitionState) -> bool) -> Vec<(TopicPartition, Offset)> {
        self.partitions
            .iter()
            .filter(|(_, state)| select(state))
            .filter_map(|(tp, state)| Some((tp.clone(), state.position?)))
            .collect()
    }

    fn state(&self, tp: &TopicPartition) -> Result<&PartitionState, PositionError> {
        self.partitions
            .get(tp)
            .ok_or_else(|| PositionError::NotAssigned {
                partition: tp.clone(),
            })
    }

    fn state_mut(&mut self, tp: &TopicPartition) -> Result<&mut PartitionState, PositionError> {
        self.partitions
            .get_mut(tp)
            .ok_or_else(|| PositionError::NotAssigned {
                partition: tp.clone(),
            })
    }

    fn log_bounds(&self, tp: &TopicPartition) -> Result<(Offset, Offset), PositionError> {
        self.state(tp)?;
        let description = self
            .coordinator
            .engine()
            .describe_partition(tp.topic.as_str(), tp.partition)
            .map_err(|source| PositionError::Describe {
                partition: tp.clone(),
                source,
            })?;
        Ok((description.log_start_offset, description.log_end_offset))
    }

    /// The committed offset, else where `auto.offset.reset` says.
    fn initial_position(&self, tp: &TopicPartition) -> Result<Offset, PositionError> {
        if let Some(committed) = self.committed(tp) {
            return Ok(committed.offset);
        }
        let (log_start_offset, log_end_offset) = self.log_bounds(tp)?;
        match self.config.auto_offset_reset {
            AutoOffsetReset::Earliest => Ok(log_start_offset),
            AutoOffsetReset::Latest => Ok(log_end_offset),
            AutoOffsetReset::None => Err(PositionError::NoOffset {
                partition: tp.clone(),
            }),
        }
    }

    fn resolve_positions(&mut self) -> Result<(), PositionError> {
        let unknown: Vec<TopicPartition> = self
            .partitions
            .iter()
            .filter(|(_, state)| state.position.is_none())
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in unknown {
            self.position(&tp)?;
        }
        Ok(())
    }
}

/// Rebalances: synchronising with the group at each poll.
impl Consumer {
    /// Brings the member to its group's current generation: revokes what moved away, takes what
    /// is free of its target, and rejoins if the group removed it.
    fn synchronise(&mut self) -> Result<(), PollError> {
        let Some(membership) = self.membership.clone() else {
            return Err(PollError::NotSubscribed);
        };
        let metadata_max_age = Duration::from_millis(self.config.metadata_max_age_ms);
        let plan =
            match self
                .coordinator
                .sync(&membership.group, &membership.member_id, metadata_max_age)
            {
                Ok(plan) => plan,
                Err(UnknownMember) => {
                    self.rejoin_after_removal(membership)?;
                    return Ok(());
                }
            };
        if let Some(current) = self.membership.as_mut() {
            current.generation = plan.generation;
        }
        if !plan.revoke.is_empty() {
            self.revoke(&plan.revoke);
        }
        let acquired = self.coordinator.release_and_acquire(
            &membership.group,
            &membership.member_id,
            &plan.revoke,
        );
        // A member removed meanwhile finds out at its next poll.
        let acquired = acquired.unwrap_or_default();
        for tp in &acquired {
            self.partitions
                .insert(tp.clone(), PartitionState::default());
        }
        if !acquired.is_empty() {
            self.notify(Event::Assigned, &acquired);
        }
        Ok(())
    }

    /// Takes the group's current generation without applying its plan (`synchronise`, at the
    /// next poll, does). Fails if the group no longer knows this member.
    fn catch_up_generation(&mut self) -> Result<(), UnknownMember> {
        let Some(membership) = self.membership.as_mut() else {
            return Err(UnknownMember);
        };
        let metadata_max_age = Duration::from_millis(self.config.metadata_max_age_ms);
        let plan =
            self.coordinator
                .sync(&membership.group, &membership.member_id, metadata_max_age)?;
        membership.generation = plan.generation;
        Ok(())
    }

    fn revoke(&mut self, revoked: &[TopicPartition]) {
        if self.config.enable_auto_commit {
            let positions = self.positions(|state| state.position != state.committed_position);
            let positions: Vec<(TopicPartition, Offset)> = positions
                .into_iter()
                .filter(|(tp, _)| revoked.contains(tp))
                .collect();
            if let Err(error) = self.commit_released_positions_sync(&positions) {
                tracing::warn!("auto-commit before revoking {revoked:?} failed: {error}");
            }
        }
        self.notify(Event::Revoked, revoked);
        for tp in revoked {
            self.partitions.remove(tp);
        }
    }

    /// The group removed this member (it stopped polling): its partitions are lost, and it joins
    /// again as a new member.
    fn rejoin_after_removal(&mut self, membership: Membership) -> Result<(), JoinError> {
        tracing::warn!(
            "member {} was removed from group {}; rejoining",
            membership.member_id,
            membership.group
        );
        let lost: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        if !lost.is_empty() {
            self.notify(Event::Lost, &lost);
        }
        self.partitions.clear();
        self.last_served = None;
        self.auto_commit_in_flight = None;
        self.membership = None;
        self.join(membership.topics)
    }

    /// Calls the listener, if any, with the consumer.
    fn notify(&mut self, event: Event, partitions: &[TopicPartition]) {
        let Some(mut listener) = self.listener.take() else {
            return;
        };
        self.in_callback = true;
        match event {
            Event::Revoked => listener.on_partitions_revoked(self, partitions),
            Event::Assigned => listener.on_partitions_assigned(self, partitions),
            Event::Lost => listener.on_partitions_lost(self, partitions),
        }
        self.in_callback = false;
        if self.listener.is_none() {
            self.listener = Some(listener);
        }
    }

    fn auto_commit_if_due(&mut self) {
        if !self.config.enable_auto_commit {
            return;
        }
        if let Some((handle, positions)) = self.auto_commit_in_flight.as_mut() {
            match handle.try_result() {
                None => return,
                Some(Ok(())) => {
                    let positions = std::mem::take(positions);
                    self.note_committed(&positions);
                }
                Some(Err(error)) => tracing::warn!("auto-commit failed: {error}"),
            }
            self.auto_commit_in_flight = None;
        }
        let now = Instant::now();
        if now < self.auto_commit_due {
            return;
        }
        self.auto_commit_due = now + Duration::from_millis(self.config.auto_commit_interval_ms);
        let positions = self.positions(|state| state.position != state.committed_position);
        if positions.is_empty() {
            return;
        }
        let handle = self.commit_offsets(with_no_metadata(&positions));
        self.auto_commit_in_flight = Some((handle, positions));
    }
}

/// Fetching and returning records.
impl Consumer {
    /// Returns buffered records, round-robin over the unpaused partitions from the one after the
    /// partition served last, within `options`' bounds.
    fn drain(&mut self, options: &PollOptions) -> Vec<ConsumerRecord> {
        let mut records = Vec::new();
        let mut bytes = 0u64;
        for tp in self.rotation() {
            let Some(state) = self.partitions.get_mut(&tp) else {
                continue;
            };
            if state.paused {
                continue;
            }
            while let Some(record) = state.buffered.front() {
                let size_bytes = record.size_bytes();
                let full = records.len() >= options.max_records
                    || (!records.is_empty()
                        && bytes.saturating_add(size_bytes) > options.max_bytes);
                if full {
                    return records;
                }
                let Some(record) = state.buffered.pop_front() else {
                    break;
                };
                state.position = Some(record.offset.next());
                bytes = bytes.saturating_add(size_bytes);
                records.push(record);
                self.last_served = Some(tp.clone());
            }
        }
        records
    }

    /// The owned partitions, starting after the one served last.
    fn rotation(&self) -> Vec<TopicPartition> {
        let Some(last) = &self.last_served else {
            return self.partitions.keys().cloned().collect();
        };
        let after = self
            .partitions
            .range((Bound::Excluded(last), Bound::Unbounded));
        let before = self
            .partitions
            .range((Bound::Unbounded, Bound::Included(last)));
        after.chain(before).map(|(tp, _)| tp.clone()).collect()
    }

    /// Partitions to fetch from: owned, unpaused, positioned and with nothing buffered, in
    /// rotation order, as many as `fetch.max.bytes` allows at `max.partition.fetch.bytes` each.
    fn fetchable(&self) -> Vec<(TopicPartition, Offset)> {
        let per_partition = self.config.max_partition_fetch_bytes.max(1);
        let count_max = usize::try_from(self.config.fetch_max_bytes / per_partition)
            .unwrap_or(usize::MAX)
            .max(1);
        self.rotation()
            .into_iter()
            .filter_map(|tp| {
                let state = self.partitions.get(&tp)?;
                let ready = !state.paused && state.buffered.is_empty();
                ready.then_some((tp, state.position?))
            })
            .take(count_max)
            .collect()
    }

    /// Fetches from `partitions`, waiting up to `wait_ms` for data; returns whether any records
    /// were buffered.
    fn fetch_round(
        &mut self,
        partitions: Vec<(TopicPartition, Offset)>,
        wait_ms: u64,
    ) -> Result<bool, PollError> {
        let options = FetchOptions {
            max_bytes: self.config.max_partition_fetch_bytes,
            min_bytes: 1,
            max_wait_ms: wait_ms,
            isolation: Isolation::LogEnd,
        };
        let engine = self.coordinator.engine();
        let fetches: Vec<InFlightFetch> = partitions
            .into_iter()
            .map(|(tp, offset)| {
                let pending = engine.fetch(&tp.topic, tp.partition, offset, options);
                (tp, offset, Some(pending))
            })
            .collect();
        let mut buffered_any = false;
        for (tp, offset, result) in wait_fetches(fetches, wait_ms == 0) {
            buffered_any |= self.apply_fetch(&tp, offset, result)?;
        }
        Ok(buffered_any)
    }

    fn apply_fetch(
        &mut self,
        tp: &TopicPartition,
        offset: Offset,
        result: Result<FetchData, ReadError>,
    ) -> Result<bool, PollError> {
        match result {
            Ok(data) => {
                let decoded = decode_fetched(tp, offset, data.batches())?;
                let Some(state) = self.partitions.get_mut(tp) else {
                    return Ok(false);
                };
                if decoded.records.is_empty() {
                    // Only control batches or records compacted away: skip past them.
                    state.position = Some(decoded.next_offset.max(offset));
                    return Ok(false);
                }
                state.buffered.extend(decoded.records);
                Ok(true)
            }
            Err(ReadError::OffsetOutOfRange {
                log_start_offset,
                log_end_offset,
                ..
            }) => {
                let reset = match self.config.auto_offset_reset {
                    AutoOffsetReset::Earliest => log_start_offset,
                    AutoOffsetReset::Latest => log_end_offset,
                    AutoOffsetReset::None => {
                        return Err(PollError::OffsetOutOfRange {
                            partition: tp.clone(),
                            offset,
                            log_start_offset,
                            log_end_offset,
                        });
                    }
                };
                tracing::info!("offset {offset} of {tp} is out of range; reset to {reset}");
                if let Some(state) = self.partitions.get_mut(tp) {
                    state.position = Some(reset);
                }
                Ok(false)
            }
            // The topic was deleted: the next metadata check revokes the partition.
            Err(ReadError::UnknownPartition { .. }) => Ok(false),
            Err(source) => Err(PollError::Fetch {
                partition: tp.clone(),
                offset,
                source,
            }),
        }
    }
}

impl Drop for Consumer {
    /// Leaves the group (without committing or calling back) so that its partitions move at once.
    fn drop(&mut self) {
        if let Some(membership) = self.membership.take() {
            self.coordinator
                .leave(&membership.group, &membership.member_id);
        }
    }
}

type InFlightFetch = (
    TopicPartition,
    Offset,
    Option<Pending<FetchData, ReadError>>,
);

/// Waits for every fetch (`wait_all`), or until one brings records or fails; the fetches still
/// waiting are dropped (their shards answer no one).
fn wait_fetches(
    mut fetches: Vec<InFlightFetch>,
    wait_all: bool,
) -> Vec<(TopicPartition, Offset, Result<FetchData, ReadError>)> {
    let mut results = Vec::with_capacity(fetches.len());
    futures_executor::block_on(poll_fn(|cx| {
        let mut decisive = false;
        for (tp, offset, slot) in &mut fetches {
            let Some(pending) = slot.as_mut() else {
                continue;
            };
            if let Poll::Ready(result) = Pin::new(pending).poll(cx) {
                *slot = None;
                decisive |= result
                    .as_ref()
                    .map_or(true, |data| !data.records.is_empty());
                results.push((tp.clone(), *offset, result));
            }
        }
        let all_done = fetches.iter().all(|(_, _, slot)| slot.is_none());
        if all_done || (decisive && !wait_all) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }));
    results
}

fn with_no_metadata(
    positions: &[(TopicPartition, Offset)],
) -> Vec<(TopicPartition, OffsetAndMetadata)> {
    positions
        .iter()
        .map(|(tp, offset)| (tp.clone(), OffsetAndMetadata::new(*offset)))
        .collect()
}

fn check_group_id(group: &str) -> Result<(), JoinError> {
    let invalid = |reason| JoinError::InvalidGroupId {
        group: group.to_owned(),
        reason,
    };
    if group.is_empty() {
        return Err(invalid("group.id is empty"));
    }
    if group.len() > GROUP_ID_LENGTH_MAX {
        return Err(invalid("group.id is longer than 255 bytes"));
    }
    if group.chars().any(char::is_control) {
        return Err(invalid("group.id contains a control character"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LogConfig;
    use crate::engine::{Durability, Engine, EngineConfig};
    use crate::format::{BatchBuilder, NewRecord};

    fn engine_with_records(dir: &std::path::Path, topic: &TopicName, count: usize) -> Engine {
        let config = EngineConfig {
            shard_count: 1,
            pin_shards: false,
            ..EngineConfig::default()
        };
        let engine = Engine::open(dir, config).unwrap();
        engine
            .create_topic(topic.as_str(), 1, LogConfig::default())
            .unwrap();
        let mut batch = BatchBuilder::new(0);
        for _ in 0..count {
            batch.push(&NewRecord {
                timestamp_ms: 1_700_000_000_000,
                key: None,
                value: Some(b"v"),
                headers: &[],
            });
        }
        let pending = engine.append(topic, 0, batch.build().unwrap(), Durability::Written);
        pending.wait().unwrap();
        engine
    }

    fn auto_committing(coordinator: &GroupCoordinator, client_id: &str) -> Consumer {
        let mut config = ConsumerConfig::new("g");
        for (key, value) in [
            ("client.id", client_id),
            ("auto.offset.reset", "earliest"),
            ("enable.auto.commit", "true"),
            ("max.poll.records", "3"),
            ("fetch.max.wait.ms", "20"),
        ] {
            config.set(key, value).unwrap();
        }
        let mut consumer = coordinator.consumer(config);
        consumer.subscribe(&["t"]).unwrap();
        consumer
    }

    /// A rebalance between a member's sync and its commit of what it gives up (here: another
    /// member joins after the first one's last poll) must not leave those positions uncommitted,
    /// or the partition's next owner consumes the same records again.
    #[test]
    fn released_positions_are_committed_when_the_group_moved_on_since_the_last_sync() {
        let dir = tempfile::tempdir().unwrap();
        let topic = TopicName::parse("t").unwrap();
        let engine = engine_with_records(dir.path(), &topic, 10);
        let coordinator = GroupCoordinator::open(&engine).unwrap();
        let mut first = auto_committing(&coordinator, "first");
        let deadline = Instant::now() + Duration::from_secs(10);
        while first.poll(Duration::from_millis(20)).unwrap().is_empty() {
            assert!(Instant::now() < deadline, "no records polled");
        }
        let tp = TopicPartition {
            topic,
            partition: 0,
        };
        let position = first.position(&tp).unwrap();
        let stale = first.generation().unwrap();
        let _second = auto_committing(&coordinator, "second");
        assert_ne!(
            coordinator.describe_group("g").unwrap().generation,
            Some(stale)
        );
        assert_eq!(first.generation(), Some(stale));

        first.revoke(std::slice::from_ref(&tp));

        let committed = coordinator.committed("g", &tp).map(|c| c.offset);
        assert_eq!(committed, Some(position));
    }
}
