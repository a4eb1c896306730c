//! Kafka's classic consumer-group protocol, the broker's half: membership, generations and
//! rebalances. The clients assign partitions themselves (the leader runs the assignor and hands
//! its plan over in SyncGroup); the broker only decides who is in the group, which generation is
//! current, which of the members' protocols (assignors) the group uses and who leads.
//!
//! A group moves through Kafka's states:
//!
//! - `Empty`: no members (its committed offsets may remain).
//! - `PreparingRebalance`: a member joined, left, changed its protocols or expired; every member
//!   must send JoinGroup again. The join completes when all have (and no member id handed out
//!   with `MEMBER_ID_REQUIRED` is still outstanding), or at the rebalance deadline (the largest
//!   `rebalance_timeout_ms` of the members), which removes the members that did not rejoin.
//! - `CompletingRebalance`: the generation is bumped and every JoinGroup answered (the leader
//!   receives every member's metadata); members wait in SyncGroup for the leader's assignment.
//! - `Stable`: the leader's SyncGroup arrived; everyone has its assignment and heartbeats.
//!
//! A member that neither heartbeats nor waits in a JoinGroup or SyncGroup for longer than its
//! `session_timeout_ms` is removed, which starts a rebalance. This is pure logic: time is passed
//! in as `now`, and a request that must wait leaves a waiter `W` (in the broker, a channel's
//! sending half) that a later call hands back in [`Deliveries`] with its answer. The broker's
//! timer calls [`Membership::tick`]. Learned from Kafka's `GroupCoordinator` and `GroupMetadata`.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

/// Kafka's `group.min.session.timeout.ms`.
pub(crate) const SESSION_TIMEOUT_MIN: Duration = Duration::from_millis(6_000);
/// Kafka's `group.max.session.timeout.ms`.
pub(crate) const SESSION_TIMEOUT_MAX: Duration = Duration::from_millis(1_800_000);
/// Members of one group (Kafka's `group.max.size` is unbounded; a bound keeps memory bounded).
pub(crate) const MEMBERS_PER_GROUP_MAX: usize = 1_000;
/// Groups with members at once; a join that would create one more is refused.
pub(crate) const GROUPS_MAX: usize = 10_000;

/// A group's state, with Kafka's names (DescribeGroups and ListGroups answer them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl GroupState {
    pub(crate) fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// One of a member's protocols (for consumers, an assignor) and its metadata (its subscription).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Protocol {
    pub(crate) name: String,
    pub(crate) metadata: Bytes,
}

/// A JoinGroup, as the state machine needs it.
#[derive(Debug, Clone)]
pub(crate) struct JoinRequest {
    pub(crate) group_id: String,
    /// Empty for a member joining for the first time.
    pub(crate) member_id: String,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) session_timeout: Duration,
    pub(crate) rebalance_timeout: Duration,
    pub(crate) protocol_type: String,
    /// In the member's order of preference.
    pub(crate) protocols: Vec<Protocol>,
    /// JoinGroup v4 and later: a first join is answered `MEMBER_ID_REQUIRED` with the member's id,
    /// and the member joins again with it.
    pub(crate) member_id_required: bool,
}

/// The answer to a JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JoinAnswer {
    pub(crate) error: Option<ResponseError>,
    pub(crate) member_id: String,
    pub(crate) generation: i32,
    pub(crate) protocol_type: Option<String>,
    pub(crate) protocol_name: Option<String>,
    pub(crate) leader: String,
    /// Every member's id and metadata for the chosen protocol: for the leader only.
    pub(crate) members: Vec<(String, Bytes)>,
}

impl JoinAnswer {
    fn refused(error: ResponseError, member_id: &str) -> JoinAnswer {
        JoinAnswer {
            error: Some(error),
            member_id: member_id.to_owned(),
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            members: Vec::new(),
        }
    }
}

/// The answer to a SyncGroup: the member's assignment, as the leader wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyncAnswer {
    pub(crate) error: Option<ResponseError>,
    pub(crate) assignment: Bytes,
}

impl SyncAnswer {
    fn refused(error: ResponseError) -> SyncAnswer {
        SyncAnswer {
            error: Some(error),
            assignment: Bytes::new(),
        }
    }
}

/// Answers to requests that waited, ready to send to their waiters.
#[derive(Debug)]
pub(crate) struct Deliveries<W> {
    pub(crate) joins: Vec<(W, JoinAnswer)>,
    pub(crate) syncs: Vec<(W, SyncAnswer)>,
}

impl<W> Default for Deliveries<W> {
    fn default() -> Self {
        Deliveries {
            joins: Vec::new(),
            syncs: Vec::new(),
        }
    }
}

/// A member of a group as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberSummary {
    pub(crate) member_id: String,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    /// Its metadata for the group's protocol.
    pub(crate) metadata: Bytes,
    pub(crate) assignment: Bytes,
}

/// A group as DescribeGroups and ListGroups show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupSummary {
    pub(crate) group_id: String,
    pub(crate) state: GroupState,
    pub(crate) protocol_type: String,
    pub(crate) protocol_name: String,
    pub(crate) members: Vec<MemberSummary>,
}

struct Member<W> {
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<Protocol>,
    assignment: Bytes,
    last_heartbeat: Instant,
    awaiting_join: Option<W>,
    awaiting_sync: Option<W>,
}

impl<W> Member<W> {
    fn metadata_for(&self, protocol_name: Option<&str>) -> Bytes {
        self.protocols
            .iter()
            .find(|protocol| Some(protocol.name.as_str()) == protocol_name)
            .map(|protocol| protocol.metadata.clone())
            .unwrap_or_default()
    }

    /// A member waiting in a JoinGroup or SyncGroup is alive, whatever its heartbeats.
    fn is_expired(&self, now: Instant) -> bool {
        self.awaiting_join.is_none()
            && self.awaiting_sync.is_none()
            && now.saturating_duration_since(self.last_heartbeat) > self.session_timeout
    }
}

struct Group<W> {
    state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member<W>>,
    /// Ids answered with `MEMBER_ID_REQUIRED`, not yet joined with, and when they lapse.
    pending_members: BTreeMap<String, Instant>,
    rebalance_deadline: Option<Instant>,
}

impl<W> Group<W> {
    fn new() -> Group<W> {
        Group {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            rebalance_deadline: None,
        }
    }

    fn is_empty(&self) -> bool {
        self.members.is_empty() && self.pending_members.is_empty()
    }

    /// Whether a member of `protocol_type` with `protocols` can join: the group's type, and at
    /// least one protocol every member supports.
    fn supports(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols
                .iter()
                .any(|protocol| self.all_support(&protocol.name))
    }

    fn all_support(&self, name: &str) -> bool {
        self.members
            .values()
            .all(|member| member.protocols.iter().any(|p| p.name == name))
    }

    /// The protocol most members prefer among those all support (Kafka's vote).
    fn select_protocol(&self) -> Option<String> {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for member in self.members.values() {
            if let Some(preferred) = member
                .protocols
                .iter()
                .find(|protocol| self.all_support(&protocol.name))
            {
                *votes.entry(preferred.name.as_str()).or_default() += 1;
            }
        }
        let most = votes.values().copied().max()?;
        votes
            .into_iter()
            .find(|(_, count)| *count == most)
            .map(|(name, _)| name.to_owned())
    }

    /// Starts a rebalance: every member must join again; assignments handed out are void.
    fn prepare_rebalance(&mut self, now: Instant, deliveries: &mut Deliveries<W>) {
        for member in self.members.values_mut() {
            member.assignment = Bytes::new();
            if let Some(waiter) = member.awaiting_sync.take() {
                let answer = SyncAnswer::refused(ResponseError::RebalanceInProgress);
                deliveries.syncs.push((waiter, answer));
            }
        }
        let timeout = self
            .members
            .values()
            .map(|member| member.rebalance_timeout)
            .max()
            .unwrap_or_default();
        self.state = GroupState::PreparingRebalance;
        self.rebalance_deadline = Some(now + timeout);
    }

    /// Completes the join once every member (and every id handed out) has joined.
    fn maybe_complete_join(&mut self, now: Instant, deliveries: &mut Deliveries<W>) {
        let all_joined = self.pending_members.is_empty()
            && self.members.values().all(|m| m.awaiting_join.is_some());
        if self.state == GroupState::PreparingRebalance && all_joined {
            self.complete_join(now, deliveries);
        }
    }

    /// The next generation: protocol and leader chosen, every waiting join answered.
    fn complete_join(&mut self, now: Instant, deliveries: &mut Deliveries<W>) {
        self.generation = self.generation.wrapping_add(1).max(1);
        self.rebalance_deadline = None;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol_name = None;
            self.leader = None;
            return;
        }
        self.protocol_name = self.select_protocol();
        let leader = match &self.leader {
            Some(leader) if self.members.contains_key(leader) => leader.clone(),
            _ => self.members.keys().next().cloned().unwrap_or_default(),
        };
        self.leader = Some(leader);
        self.state = GroupState::CompletingRebalance;
        let member_ids: Vec<String> = self.members.keys().cloned().collect();
        for member_id in member_ids {
            let answer = self.join_answer(&member_id);
            if let Some(member) = self.members.get_mut(&member_id) {
                member.last_heartbeat = now;
                if let Some(waiter) = member.awaiting_join.take() {
                    deliveries.joins.push((waiter, answer));
                }
            }
        }
    }

    /// The current generation as `member_id` learns it.
    fn join_answer(&self, member_id: &str) -> JoinAnswer {
        let leader = self.leader.clone().unwrap_or_default();
        let members = match leader == member_id {
            true => self
                .members
                .iter()
                .map(|(id, member)| {
                    (
                        id.clone(),
                        member.metadata_for(self.protocol_name.as_deref()),
                    )
                })
                .collect(),
            false => Vec::new(),
        };
        JoinAnswer {
            error: None,
            member_id: member_id.to_owned(),
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader,
            members,
        }
    }

    /// Removes a member; a group that was settled rebalances without it.
    fn remove_member(&mut self, member_id: &str, now: Instant, deliveries: &mut Deliveries<W>) {
        let Some(member) = self.members.remove(member_id) else {
            return;
        };
        if let Some(waiter) = member.awaiting_join {
            let answer = JoinAnswer::refused(ResponseError::UnknownMemberId, member_id);
            deliveries.joins.push((waiter, answer));
        }
        if let Some(waiter) = member.awaiting_sync {
            let answer = SyncAnswer::refused(ResponseError::UnknownMemberId);
            deliveries.syncs.push((waiter, answer));
        }
        if matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance
        ) {
            self.prepare_rebalance(now, deliveries);
        }
        self.maybe_complete_join(now, deliveries);
    }

    /// Checks a member's generation (Heartbeat, SyncGroup, OffsetCommit).
    fn check_member(&self, member_id: &str, generation: i32) -> Result<(), ResponseError> {
        if self.state == GroupState::Empty || !self.members.contains_key(member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        if generation != self.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        Ok(())
    }
}

/// A JoinGroup answered at once with a refusal, and its waiter.
type Refused<W> = Box<(W, JoinAnswer)>;

/// Every group with members, and the rebalances in progress. `W` is what a waiting JoinGroup
/// or SyncGroup leaves behind to be answered through.
pub(crate) struct Membership<W> {
    groups: BTreeMap<String, Group<W>>,
    /// Hashes a sequence into member ids no earlier run of the broker handed out.
    member_id_hasher: RandomState,
    member_id_sequence: u64,
}

impl<W> Default for Membership<W> {
    fn default() -> Self {
        Membership {
            groups: BTreeMap::new(),
            member_id_hasher: RandomState::new(),
            member_id_sequence: 0,
        }
    }
}

impl<W> Membership<W> {
    /// A JoinGroup: answered in `Deliveries` at once or when the rebalance completes.
    pub(crate) fn join(&mut self, request: JoinRequest, waiter: W, now: Instant) -> Deliveries<W> {
        let mut deliveries = Deliveries::default();
        match self.join_checked(request, waiter, now, &mut deliveries) {
            Ok(()) => {}
            Err(refused) => deliveries.joins.push(*refused),
        }
        deliveries
    }

    fn join_checked(
        &mut self,
        request: JoinRequest,
        waiter: W,
        now: Instant,
        deliveries: &mut Deliveries<W>,
    ) -> Result<(), Refused<W>> {
        let refuse = |error| JoinAnswer::refused(error, &request.member_id);
        if request.group_id.is_empty() {
            return Err(Box::new((waiter, refuse(ResponseError::InvalidGroupId))));
        }
        if !(SESSION_TIMEOUT_MIN..=SESSION_TIMEOUT_MAX).contains(&request.session_timeout) {
            return Err(Box::new((
                waiter,
                refuse(ResponseError::InvalidSessionTimeout),
            )));
        }
        if !self.groups.contains_key(&request.group_id) {
            if !request.member_id.is_empty() {
                return Err(Box::new((waiter, refuse(ResponseError::UnknownMemberId))));
            }
            if self.groups.len() >= GROUPS_MAX {
                return Err(Box::new((
                    waiter,
                    refuse(ResponseError::CoordinatorNotAvailable),
                )));
            }
        }
        let new_member_id = match request.member_id.is_empty() {
            true => Some(self.next_member_id(&request.client_id)),
            false => None,
        };
        let group = self
            .groups
            .entry(request.group_id.clone())
            .or_insert_with(Group::new);
        if !group.supports(&request.protocol_type, &request.protocols) {
            return Err(Box::new((
                waiter,
                refuse(ResponseError::InconsistentGroupProtocol),
            )));
        }
        if let Some(member_id) = new_member_id {
            if group.members.len() + group.pending_members.len() >= MEMBERS_PER_GROUP_MAX {
                return Err(Box::new((
                    waiter,
                    refuse(ResponseError::GroupMaxSizeReached),
                )));
            }
            if request.member_id_required {
                group
                    .pending_members
                    .insert(member_id.clone(), now + request.session_timeout);
                let answer = JoinAnswer::refused(ResponseError::MemberIdRequired, &member_id);
                return Err(Box::new((waiter, answer)));
            }
            add_member(group, member_id, request, waiter, now, deliveries);
            return Ok(());
        }
        if group.pending_members.remove(&request.member_id).is_some() {
            let member_id = request.member_id.clone();
            add_member(group, member_id, request, waiter, now, deliveries);
            return Ok(());
        }
        if !group.members.contains_key(&request.member_id) {
            return Err(Box::new((waiter, refuse(ResponseError::UnknownMemberId))));
        }
        rejoin(group, request, waiter, now, deliveries);
        Ok(())
    }

    fn next_member_id(&mut self, client_id: &str) -> String {
        self.member_id_sequence = self.member_id_sequence.wrapping_add(1);
        let unique = self.member_id_hasher.hash_one(self.member_id_sequence);
        format!("{client_id}-{unique:016x}")
    }

    /// A SyncGroup: the leader's carries every member's assignment and completes the rebalance.
    pub(crate) fn sync(
        &mut self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
        waiter: W,
        now: Instant,
    ) -> Deliveries<W> {
        let mut deliveries = Deliveries::default();
        let Some(group) = self.groups.get_mut(group_id) else {
            let answer = SyncAnswer::refused(ResponseError::UnknownMemberId);
            deliveries.syncs.push((waiter, answer));
            return deliveries;
        };
        if let Err(error) = group.check_member(member_id, generation) {
            deliveries.syncs.push((waiter, SyncAnswer::refused(error)));
            return deliveries;
        }
        match group.state {
            GroupState::Empty | GroupState::PreparingRebalance => {
                let answer = SyncAnswer::refused(ResponseError::RebalanceInProgress);
                deliveries.syncs.push((waiter, answer));
            }
            GroupState::Stable => {
                let assignment = group
                    .members
                    .get(member_id)
                    .map(|member| member.assignment.clone())
                    .unwrap_or_default();
                let answer = SyncAnswer {
                    error: None,
                    assignment,
                };
                deliveries.syncs.push((waiter, answer));
            }
            GroupState::CompletingRebalance => {
                await_sync(group, member_id, assignments, waiter, now, &mut deliveries);
            }
        }
        deliveries
    }

    /// A Heartbeat: keeps the member's session; tells it of a rebalance.
    pub(crate) fn heartbeat(
        &mut self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        now: Instant,
    ) -> Result<(), ResponseError> {
        let group = self
            .groups
            .get_mut(group_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        group.check_member(member_id, generation)?;
        if let Some(member) = group.members.get_mut(member_id) {
            member.last_heartbeat = now;
        }
        match group.state {
            GroupState::PreparingRebalance => Err(ResponseError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// A LeaveGroup of one member.
    pub(crate) fn leave(
        &mut self,
        group_id: &str,
        member_id: &str,
        now: Instant,
    ) -> (Result<(), ResponseError>, Deliveries<W>) {
        let mut deliveries = Deliveries::default();
        let Some(group) = self.groups.get_mut(group_id) else {
            return (Err(ResponseError::UnknownMemberId), deliveries);
        };
        if group.pending_members.remove(member_id).is_some() {
            group.maybe_complete_join(now, &mut deliveries);
            return (Ok(()), deliveries);
        }
        if !group.members.contains_key(member_id) {
            return (Err(ResponseError::UnknownMemberId), deliveries);
        }
        group.remove_member(member_id, now, &mut deliveries);
        self.forget_empty_groups();
        (Ok(()), deliveries)
    }

    /// Whether an OffsetCommit of `member_id` at `generation` may commit for `group_id`. A commit
    /// with no member and a negative generation is a client that assigns itself (no group
    /// management): allowed while the group has no members. A member's commit keeps its session.
    pub(crate) fn check_commit(
        &mut self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        now: Instant,
    ) -> Result<(), ResponseError> {
        let Some(group) = self.groups.get_mut(group_id) else {
            return match generation < 0 {
                true => Ok(()),
                false => Err(ResponseError::IllegalGeneration),
            };
        };
        if generation < 0 && group.members.is_empty() {
            return Ok(());
        }
        group.check_member(member_id, generation)?;
        if let Some(member) = group.members.get_mut(member_id) {
            member.last_heartbeat = now;
        }
        match group.state {
            GroupState::CompletingRebalance => Err(ResponseError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// Expires members and ids past their session, and completes rebalances past their deadline.
    pub(crate) fn tick(&mut self, now: Instant) -> Deliveries<W> {
        let mut deliveries = Deliveries::default();
        for group in self.groups.values_mut() {
            group.pending_members.retain(|_, lapses| *lapses > now);
            let expired: Vec<String> = group
                .members
                .iter()
                .filter(|(_, member)| member.is_expired(now))
                .map(|(member_id, _)| member_id.clone())
                .collect();
            for member_id in expired {
                group.remove_member(&member_id, now, &mut deliveries);
            }
            let overdue = group
                .rebalance_deadline
                .is_some_and(|deadline| deadline <= now);
            if group.state == GroupState::PreparingRebalance && overdue {
                group
                    .members
                    .retain(|_, member| member.awaiting_join.is_some());
                group.pending_members.clear();
                group.complete_join(now, &mut deliveries);
            }
            group.maybe_complete_join(now, &mut deliveries);
        }
        self.forget_empty_groups();
        deliveries
    }

    /// Groups without members are forgotten (their committed offsets stay in the offsets store):
    /// the map holds only live groups.
    fn forget_empty_groups(&mut self) {
        self.groups
            .retain(|_, group| !(group.is_empty() && group.state == GroupState::Empty));
    }

    /// A group with members, if `group_id` is one.
    pub(crate) fn describe(&self, group_id: &str) -> Option<GroupSummary> {
        let group = self.groups.get(group_id)?;
        let members = group
            .members
            .iter()
            .map(|(member_id, member)| MemberSummary {
                member_id: member_id.clone(),
                client_id: member.client_id.clone(),
                client_host: member.client_host.clone(),
                metadata: member.metadata_for(group.protocol_name.as_deref()),
                assignment: member.assignment.clone(),
            })
            .collect();
        Some(GroupSummary {
            group_id: group_id.to_owned(),
            state: group.state,
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol_name: group.protocol_name.clone().unwrap_or_default(),
            members,
        })
    }

    /// Every group with members, in id order.
    pub(crate) fn list(&self) -> Vec<GroupSummary> {
        self.groups
            .keys()
            .filter_map(|group_id| self.describe(group_id))
            .collect()
    }

    /// Whether `group_id` has members (or ids handed out): such a group cannot be deleted.
    pub(crate) fn is_live(&self, group_id: &str) -> bool {
        self.groups
            .get(group_id)
            .is_some_and(|group| !group.is_empty())
    }
}

/// A new member joins: the group rebalances to take it in.
fn add_member<W>(
    group: &mut Group<W>,
    member_id: String,
    request: JoinRequest,
    waiter: W,
    now: Instant,
    deliveries: &mut Deliveries<W>,
) {
    if group.members.is_empty() {
        group.protocol_type = Some(request.protocol_type.clone());
    }
    group.members.insert(
        member_id,
        Member {
            client_id: request.client_id,
            client_host: request.client_host,
            session_timeout: request.session_timeout,
            rebalance_timeout: request.rebalance_timeout,
            protocols: request.protocols,
            assignment: Bytes::new(),
            last_heartbeat: now,
            awaiting_join: Some(waiter),
            awaiting_sync: None,
        },
    );
    if group.state != GroupState::PreparingRebalance {
        group.prepare_rebalance(now, deliveries);
    }
    group.maybe_complete_join(now, deliveries);
}

/// A known member joins again: answered at once if nothing changed in a settled group, else it
/// waits for the (possibly new) rebalance.
fn rejoin<W>(
    group: &mut Group<W>,
    request: JoinRequest,
    waiter: W,
    now: Instant,
    deliveries: &mut Deliveries<W>,
) {
    let member_id = request.member_id.clone();
    let is_leader = group.leader.as_deref() == Some(member_id.as_str());
    let Some(member) = group.members.get_mut(&member_id) else {
        return;
    };
    let unchanged = member.protocols == request.protocols;
    member.last_heartbeat = now;
    let settled = match group.state {
        GroupState::CompletingRebalance => unchanged,
        GroupState::Stable => unchanged && !is_leader,
        GroupState::Empty | GroupState::PreparingRebalance => false,
    };
    if settled {
        deliveries
            .joins
            .push((waiter, group.join_answer(&member_id)));
        return;
    }
    member.protocols = request.protocols;
    member.session_timeout = request.session_timeout;
    member.rebalance_timeout = request.rebalance_timeout;
    if let Some(displaced) = member.awaiting_join.replace(waiter) {
        let answer = JoinAnswer::refused(ResponseError::RebalanceInProgress, &member_id);
        deliveries.joins.push((displaced, answer));
    }
    if group.state != GroupState::PreparingRebalance {
        group.prepare_rebalance(now, deliveries);
    }
    group.maybe_complete_join(now, deliveries);
}

/// A SyncGroup while the rebalance completes: waits, unless it is the leader's, which settles the
/// group and answers every waiting member.
fn await_sync<W>(
    group: &mut Group<W>,
    member_id: &str,
    assignments: Vec<(String, Bytes)>,
    waiter: W,
    now: Instant,
    deliveries: &mut Deliveries<W>,
) {
    if let Some(member) = group.members.get_mut(member_id) {
        member.last_heartbeat = now;
        if let Some(displaced) = member.awaiting_sync.replace(waiter) {
            let answer = SyncAnswer::refused(ResponseError::RebalanceInProgress);
            deliveries.syncs.push((displaced, answer));
        }
    }
    if group.leader.as_deref() != Some(member_id) {
        return;
    }
    let mut assignments: BTreeMap<String, Bytes> = assignments.into_iter().collect();
    for (id, member) in &mut group.members {
        member.assignment = assignments.remove(id).unwrap_or_default();
        if let Some(waiter) = member.awaiting_sync.take() {
            let answer = SyncAnswer {
                error: None,
                assignment: member.assignment.clone(),
            };
            deliveries.syncs.push((waiter, answer));
        }
    }
    group.state = GroupState::Stable;
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: Duration = Duration::from_secs(10);
    const REBALANCE: Duration = Duration::from_secs(30);

    fn request(member_id: &str, protocols: &[&str]) -> JoinRequest {
        JoinRequest {
            group_id: "g".to_owned(),
            member_id: member_id.to_owned(),
            client_id: "client".to_owned(),
            client_host: "/127.0.0.1".to_owned(),
            session_timeout: SESSION,
            rebalance_timeout: REBALANCE,
            protocol_type: "consumer".to_owned(),
            protocols: protocols
                .iter()
                .map(|name| Protocol {
                    name: (*name).to_owned(),
                    metadata: Bytes::from(format!("{member_id}:{name}")),
                })
                .collect(),
            member_id_required: true,
        }
    }

    /// The only answer delivered, to waiter `waiter`.
    fn only_join(deliveries: Deliveries<u32>, waiter: u32) -> JoinAnswer {
        assert_eq!(deliveries.joins.len(), 1, "{deliveries:?}");
        let (to, answer) = deliveries.joins.into_iter().next().unwrap();
        assert_eq!(to, waiter);
        answer
    }

    /// A member joined through `MEMBER_ID_REQUIRED`; returns its id and its join's deliveries.
    fn join_new(
        groups: &mut Membership<u32>,
        waiter: u32,
        protocols: &[&str],
        now: Instant,
    ) -> (String, Deliveries<u32>) {
        let first = only_join(groups.join(request("", protocols), waiter, now), waiter);
        assert_eq!(first.error, Some(ResponseError::MemberIdRequired));
        let member_id = first.member_id;
        let deliveries = groups.join(request(&member_id, protocols), waiter, now);
        (member_id, deliveries)
    }

    fn stable_pair(groups: &mut Membership<u32>, now: Instant) -> (String, String, i32) {
        let (a, joined) = join_new(groups, 1, &["range"], now);
        let answer = only_join(joined, 1);
        assert_eq!(answer.generation, 1);
        let synced = groups.sync("g", 1, &a, vec![(a.clone(), Bytes::from("A"))], 1, now);
        assert_eq!(synced.syncs[0].1.assignment, Bytes::from("A"));
        // A second member: the first learns of the rebalance by heartbeat and rejoins.
        let (b, waiting) = join_new(groups, 2, &["range"], now);
        assert!(waiting.joins.is_empty());
        assert_eq!(
            groups.heartbeat("g", 1, &a, now),
            Err(ResponseError::RebalanceInProgress)
        );
        let joined = groups.join(request(&a, &["range"]), 1, now);
        assert_eq!(joined.joins.len(), 2);
        for (waiter, answer) in &joined.joins {
            assert_eq!(answer.generation, 2);
            assert_eq!(answer.leader, a, "the leader stays");
            assert_eq!(answer.members.len(), if *waiter == 1 { 2 } else { 0 });
        }
        let waiting = groups.sync("g", 2, &b, Vec::new(), 2, now);
        assert!(waiting.syncs.is_empty(), "a follower waits for the leader");
        let plan = vec![
            (a.clone(), Bytes::from("A2")),
            (b.clone(), Bytes::from("B2")),
        ];
        let synced = groups.sync("g", 2, &a, plan, 1, now);
        let mut synced: Vec<_> = synced.syncs.into_iter().collect();
        synced.sort_by_key(|(waiter, _)| *waiter);
        assert_eq!(synced[0].1.assignment, Bytes::from("A2"));
        assert_eq!(synced[1].1.assignment, Bytes::from("B2"));
        (a, b, 2)
    }

    #[test]
    fn two_members_rebalance_and_settle() {
        let now = Instant::now();
        let mut groups = Membership::default();
        let (a, b, generation) = stable_pair(&mut groups, now);
        assert_eq!(groups.heartbeat("g", generation, &a, now), Ok(()));
        assert_eq!(groups.heartbeat("g", generation, &b, now), Ok(()));
        let summary = groups.describe("g").unwrap();
        assert_eq!(summary.state, GroupState::Stable);
        assert_eq!(summary.protocol_name, "range");
        assert_eq!(summary.members.len(), 2);
    }

    #[test]
    fn stale_and_unknown_members_are_refused() {
        let now = Instant::now();
        let mut groups = Membership::default();
        let (a, _b, generation) = stable_pair(&mut groups, now);
        let illegal = Err(ResponseError::IllegalGeneration);
        assert_eq!(groups.heartbeat("g", generation - 1, &a, now), illegal);
        assert_eq!(groups.check_commit("g", generation - 1, &a, now), illegal);
        let unknown = Err(ResponseError::UnknownMemberId);
        assert_eq!(groups.heartbeat("g", generation, "nobody", now), unknown);
        assert_eq!(groups.heartbeat("other", 1, &a, now), unknown);
        let synced = groups.sync("g", generation, "nobody", Vec::new(), 9, now);
        assert_eq!(
            synced.syncs[0].1.error,
            Some(ResponseError::UnknownMemberId)
        );
        let rejoined = only_join(groups.join(request("nobody", &["range"]), 9, now), 9);
        assert_eq!(rejoined.error, Some(ResponseError::UnknownMemberId));
        assert_eq!(groups.check_commit("g", generation, &a, now), Ok(()));
        assert_eq!(groups.check_commit("g", -1, "", now), unknown);
        assert_eq!(groups.check_commit("nobody's", -1, "", now), Ok(()));
    }

    #[test]
    fn a_leaving_member_starts_a_rebalance_and_the_last_empties_the_group() {
        let now = Instant::now();
        let mut groups = Membership::default();
        let (a, b, generation) = stable_pair(&mut groups, now);
        let (left, _) = groups.leave("g", &b, now);
        assert_eq!(left, Ok(()));
        assert_eq!(
            groups.heartbeat("g", generation, &a, now),
            Err(ResponseError::RebalanceInProgress)
        );
        let answer = only_join(groups.join(request(&a, &["range"]), 1, now), 1);
        assert_eq!(answer.generation, generation + 1);
        assert_eq!(answer.members.len(), 1);
        assert_eq!(groups.leave("g", &a, now).0, Ok(()));
        assert!(
            groups.describe("g").is_none(),
            "an empty group is forgotten"
        );
        assert_eq!(
            groups.leave("g", &a, now).0,
            Err(ResponseError::UnknownMemberId)
        );
    }

    #[test]
    fn a_silent_member_expires_and_a_late_one_misses_the_rebalance() {
        let now = Instant::now();
        let mut groups = Membership::default();
        let (a, b, generation) = stable_pair(&mut groups, now);
        let later = now + SESSION / 2;
        assert_eq!(groups.heartbeat("g", generation, &a, later), Ok(()));
        let expired = now + SESSION + Duration::from_millis(1);
        assert!(groups.tick(expired).joins.is_empty());
        assert_eq!(
            groups.heartbeat("g", generation, &b, expired),
            Err(ResponseError::UnknownMemberId)
        );
        // `a` is asked to rejoin; a new member joins and `a` never comes: at the rebalance
        // deadline the join completes without it.
        let (c, waiting) = join_new(&mut groups, 3, &["range"], expired);
        assert!(waiting.joins.is_empty());
        let before_deadline = expired + REBALANCE - Duration::from_millis(1);
        let rebalancing = Err(ResponseError::RebalanceInProgress);
        assert_eq!(
            groups.heartbeat("g", generation, &a, before_deadline),
            rebalancing
        );
        assert!(groups.tick(before_deadline).joins.is_empty());
        let answer = only_join(groups.tick(expired + REBALANCE), 3);
        assert_eq!(answer.leader, c);
        assert_eq!(answer.members.len(), 1);
        assert!(
            groups
                .describe("g")
                .unwrap()
                .members
                .iter()
                .all(|m| m.member_id != a)
        );
    }

    #[test]
    fn members_of_another_type_or_protocol_are_refused() {
        let now = Instant::now();
        let mut groups = Membership::default();
        let (_a, _) = join_new(&mut groups, 1, &["roundrobin", "range"], now);
        // `a`'s join completed alone: a second member preferring range rebalances the group.
        let (_b, _) = join_new(&mut groups, 2, &["range"], now);
        let mut other_type = request("", &["range"]);
        other_type.protocol_type = "connect".to_owned();
        let refused = only_join(groups.join(other_type, 5, now), 5);
        assert_eq!(
            refused.error,
            Some(ResponseError::InconsistentGroupProtocol)
        );
        let refused = only_join(groups.join(request("", &["sticky"]), 6, now), 6);
        assert_eq!(
            refused.error,
            Some(ResponseError::InconsistentGroupProtocol)
        );
    }

    #[test]
    fn bad_joins_are_refused() {
        let now = Instant::now();
        let mut groups: Membership<u32> = Membership::default();
        let mut short = request("", &["range"]);
        short.session_timeout = Duration::from_millis(10);
        let refused = only_join(groups.join(short, 1, now), 1);
        assert_eq!(refused.error, Some(ResponseError::InvalidSessionTimeout));
        let mut unnamed = request("", &["range"]);
        unnamed.group_id = String::new();
        let refused = only_join(groups.join(unnamed, 2, now), 2);
        assert_eq!(refused.error, Some(ResponseError::InvalidGroupId));
        let refused = only_join(groups.join(request("", &[]), 3, now), 3);
        assert_eq!(
            refused.error,
            Some(ResponseError::InconsistentGroupProtocol)
        );
    }

    #[test]
    fn commits_wait_for_the_leaders_plan_and_a_late_follower_gets_it_at_once() {
        let now = Instant::now();
        let mut groups = Membership::default();
        let (a, joined) = join_new(&mut groups, 1, &["range"], now);
        assert_eq!(only_join(joined, 1).generation, 1);
        let (b, _) = join_new(&mut groups, 2, &["range"], now);
        let joined = groups.join(request(&a, &["range"]), 1, now);
        assert_eq!(joined.joins.len(), 2);
        // Between the join and the leader's plan, nobody owns anything: commits wait.
        let rebalancing = Err(ResponseError::RebalanceInProgress);
        assert_eq!(groups.check_commit("g", 2, &b, now), rebalancing);
        assert_eq!(groups.heartbeat("g", 2, &b, now), Ok(()));
        let plan = vec![(a.clone(), Bytes::from("A")), (b.clone(), Bytes::from("B"))];
        let synced = groups.sync("g", 2, &a, plan, 1, now);
        assert_eq!(synced.syncs.len(), 1, "only the leader was waiting");
        let late = groups.sync("g", 2, &b, Vec::new(), 2, now);
        assert_eq!(late.syncs[0].1.assignment, Bytes::from("B"));
        assert_eq!(groups.check_commit("g", 2, &b, now), Ok(()));
    }

    /// A group of members `a` and `b` in `state`; returns `a` and the generation.
    fn group_in(state: GroupState, now: Instant) -> (Membership<u32>, String, i32) {
        let mut groups = Membership::default();
        let (a, b, generation) = stable_pair(&mut groups, now);
        if state == GroupState::Stable {
            return (groups, a, generation);
        }
        join_new(&mut groups, 3, &["range"], now);
        if state == GroupState::PreparingRebalance {
            return (groups, a, generation);
        }
        groups.join(request(&a, &["range"]), 1, now);
        let joined = groups.join(request(&b, &["range"]), 2, now);
        assert_eq!(joined.joins.len(), 3);
        (groups, a, generation + 1)
    }

    /// Heartbeat, OffsetCommit and SyncGroup in every state a group with members can be in, from
    /// a known or unknown member, at the current or a stale generation: Kafka's answers.
    #[test]
    fn every_state_member_and_generation_is_answered_as_kafka_does() {
        use GroupState::{CompletingRebalance, PreparingRebalance, Stable};
        use ResponseError::{IllegalGeneration, RebalanceInProgress, UnknownMemberId};
        let now = Instant::now();
        for state in [PreparingRebalance, CompletingRebalance, Stable] {
            for known in [true, false] {
                for current in [true, false] {
                    let (mut groups, a, generation) = group_in(state, now);
                    assert_eq!(groups.describe("g").unwrap().state, state);
                    let member = if known { a.as_str() } else { "nobody" };
                    let generation = if current { generation } else { generation - 1 };
                    let fenced = match (known, current) {
                        (false, _) => Some(UnknownMemberId),
                        (true, false) => Some(IllegalGeneration),
                        (true, true) => None,
                    };
                    let case = format!("{state:?} known {known} current {current}");
                    let heartbeat = match (fenced, state) {
                        (Some(error), _) => Err(error),
                        (None, PreparingRebalance) => Err(RebalanceInProgress),
                        (None, _) => Ok(()),
                    };
                    assert_eq!(
                        groups.heartbeat("g", generation, member, now),
                        heartbeat,
                        "{case}"
                    );
                    let commit = match (fenced, state) {
                        (Some(error), _) => Err(error),
                        (None, CompletingRebalance) => Err(RebalanceInProgress),
                        (None, _) => Ok(()),
                    };
                    let committed = groups.check_commit("g", generation, member, now);
                    assert_eq!(committed, commit, "{case}");
                    let sync = match (fenced, state) {
                        (Some(error), _) => Some(error),
                        (None, PreparingRebalance) => Some(RebalanceInProgress),
                        (None, _) => None,
                    };
                    let synced = groups.sync("g", generation, member, Vec::new(), 7, now);
                    let answer = synced.syncs.iter().find(|(waiter, _)| *waiter == 7);
                    assert_eq!(answer.map(|(_, answer)| answer.error), Some(sync), "{case}");
                }
            }
        }
        let mut groups: Membership<u32> = Membership::default();
        let unknown = Err(UnknownMemberId);
        assert_eq!(groups.heartbeat("none", 1, "m", now), unknown);
        assert_eq!(
            groups.check_commit("none", 1, "m", now),
            Err(IllegalGeneration)
        );
        assert_eq!(groups.check_commit("none", -1, "", now), Ok(()));
    }

    /// kafka-python's leader, alone, assigns nothing while it does not know the topic yet, then
    /// rejoins the Stable group unchanged once it does: the next generation at once, its new plan
    /// settles the group, and the old generation is fenced.
    #[test]
    fn a_lone_leader_rejoining_a_stable_group_starts_the_next_generation_at_once() {
        let now = Instant::now();
        let mut groups = Membership::default();
        let (a, joined) = join_new(&mut groups, 1, &["range"], now);
        assert_eq!(only_join(joined, 1).generation, 1);
        let synced = groups.sync("g", 1, &a, vec![(a.clone(), Bytes::new())], 1, now);
        assert_eq!(synced.syncs[0].1.error, None);
        let answer = only_join(groups.join(request(&a, &["range"]), 2, now), 2);
        assert_eq!((answer.generation, answer.leader.as_str()), (2, a.as_str()));
        assert_eq!(
            answer.members.len(),
            1,
            "the leader learns every member's metadata"
        );
        let plan = vec![(a.clone(), Bytes::from("A"))];
        let synced = groups.sync("g", 2, &a, plan, 3, now);
        assert_eq!(synced.syncs[0].1.assignment, Bytes::from("A"));
        assert_eq!(groups.describe("g").unwrap().state, GroupState::Stable);
        assert_eq!(groups.heartbeat("g", 2, &a, now), Ok(()));
        let stale = Err(ResponseError::IllegalGeneration);
        assert_eq!(groups.heartbeat("g", 1, &a, now), stale);
    }

    /// A follower whose client sends JoinGroup again after its last one was answered (kafka-python
    /// does, when a poll gave up before the answer came) is answered at once, in the same
    /// generation, without a rebalance.
    #[test]
    fn a_follower_rejoining_a_stable_group_unchanged_keeps_its_generation() {
        let now = Instant::now();
        let mut groups = Membership::default();
        let (a, b, generation) = stable_pair(&mut groups, now);
        let answer = only_join(groups.join(request(&b, &["range"]), 2, now), 2);
        assert_eq!((answer.generation, answer.leader), (generation, a.clone()));
        assert!(
            answer.members.is_empty(),
            "only the leader learns the members"
        );
        let synced = groups.sync("g", generation, &b, Vec::new(), 2, now);
        assert_eq!(synced.syncs[0].1.assignment, Bytes::from("B2"));
        assert_eq!(groups.heartbeat("g", generation, &a, now), Ok(()));
    }

    #[test]
    fn a_first_join_before_v4_needs_no_second_round() {
        let now = Instant::now();
        let mut groups = Membership::default();
        let mut old = request("", &["range"]);
        old.member_id_required = false;
        let answer = only_join(groups.join(old, 1, now), 1);
        assert_eq!(answer.error, None);
        assert_eq!(answer.generation, 1);
        assert_eq!(answer.leader, answer.member_id);
    }
}
