//! Partition assignors: who in a group consumes which partition. Pure functions, no I/O.
//!
//! Each assignor takes the group's members (their ids, the topics each subscribes to, and, for
//! the sticky one, the partitions each owned before) and each subscribed topic's partition count,
//! and returns every member's partitions. Whatever the strategy, each partition of a subscribed
//! topic goes to exactly one member subscribed to it, and every member appears in the result,
//! possibly with no partition.
//!
//! - [`range`] (Kafka's `RangeAssignor`): per topic, the partitions in numeric order are split into
//!   contiguous ranges over the topic's subscribers in lexicographic order of member id; the first
//!   `partitions % members` get one more. With several topics the extra partitions pile up on the
//!   same first members (seed 002's example: `C1-0` gets two more than the others).
//! - [`round_robin`] (Kafka's `RoundRobinAssignor`): every subscribed partition, sorted by topic
//!   then partition, dealt out in turn over the members in lexicographic order, skipping members
//!   not subscribed to the partition's topic. With identical subscriptions loads differ by at most
//!   one.
//! - [`cooperative_sticky`] (in the spirit of Kafka's `CooperativeStickyAssignor`): keeps each
//!   partition with its previous owner where that owner is still subscribed, gives new partitions to
//!   the least loaded members, then moves partitions one at a time from a member to a less loaded
//!   one while their loads differ by two or more. With identical subscriptions the result is as
//!   balanced as round-robin while moving as few partitions as balance allows.
//!
//! Member ids must be unique; if one repeats, its first entry is used.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::types::{PartitionId, TopicName, TopicPartition};

/// A member's id in its group. Members are ordered lexicographically by id, as Kafka orders them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(String);

impl MemberId {
    /// A member id from any string (the coordinator gives `<client.id>-<sequence>`).
    pub fn new(id: impl Into<String>) -> MemberId {
        MemberId(id.into())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What an assignor knows of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSubscription {
    /// The member's id.
    pub member_id: MemberId,
    /// The topics the member subscribes to.
    pub topics: BTreeSet<TopicName>,
    /// The partitions the member owned before this assignment; only [`cooperative_sticky`] reads it.
    pub owned: Vec<TopicPartition>,
}

impl MemberSubscription {
    /// A member subscribed to `topics` that owned nothing before.
    pub fn new(member_id: MemberId, topics: impl IntoIterator<Item = TopicName>) -> Self {
        MemberSubscription {
            member_id,
            topics: topics.into_iter().collect(),
            owned: Vec::new(),
        }
    }
}

/// Every member's partitions, each list sorted by topic then partition.
pub type Assignment = BTreeMap<MemberId, Vec<TopicPartition>>;

/// A group's assignment strategy (`partition.assignment.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AssignmentStrategy {
    /// [`range`]: Kafka's default.
    #[default]
    Range,
    /// [`round_robin`].
    RoundRobin,
    /// [`cooperative_sticky`].
    CooperativeSticky,
}

impl AssignmentStrategy {
    /// The strategy's name as `partition.assignment.strategy` takes it.
    pub fn name(self) -> &'static str {
        match self {
            AssignmentStrategy::Range => "range",
            AssignmentStrategy::RoundRobin => "roundrobin",
            AssignmentStrategy::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// Parses a strategy name: the short names of [`AssignmentStrategy::name`], or Kafka's
    /// assignor class names (`org.apache.kafka.clients.consumer.RangeAssignor`, ...).
    pub fn parse(name: &str) -> Option<AssignmentStrategy> {
        let short = name
            .trim()
            .strip_prefix("org.apache.kafka.clients.consumer.")
            .unwrap_or(name.trim());
        match short {
            "range" | "RangeAssignor" => Some(AssignmentStrategy::Range),
            "roundrobin" | "RoundRobinAssignor" => Some(AssignmentStrategy::RoundRobin),
            "cooperative-sticky" | "CooperativeStickyAssignor" => {
                Some(AssignmentStrategy::CooperativeSticky)
            }
            _ => None,
        }
    }

    /// Assigns the partitions of `partitions` (topic -> partition count) to `members`.
    pub fn assign(
        self,
        members: &[MemberSubscription],
        partitions: &BTreeMap<TopicName, u32>,
    ) -> Assignment {
        match self {
            AssignmentStrategy::Range => range(members, partitions),
            AssignmentStrategy::RoundRobin => round_robin(members, partitions),
            AssignmentStrategy::CooperativeSticky => cooperative_sticky(members, partitions),
        }
    }
}

impl fmt::Display for AssignmentStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Members by id, the first entry of a repeated id winning.
fn members_by_id(members: &[MemberSubscription]) -> BTreeMap<&MemberId, &MemberSubscription> {
    let mut by_id = BTreeMap::new();
    for member in members {
        by_id.entry(&member.member_id).or_insert(member);
    }
    by_id
}

fn empty_assignment(members: &BTreeMap<&MemberId, &MemberSubscription>) -> Assignment {
    members
        .keys()
        .map(|member_id| ((*member_id).clone(), Vec::new()))
        .collect()
}

fn topic_partition(topic: &TopicName, partition: PartitionId) -> TopicPartition {
    TopicPartition {
        topic: topic.clone(),
        partition,
    }
}

/// Kafka's `RangeAssignor` (see the module documentation).
pub fn range(members: &[MemberSubscription], partitions: &BTreeMap<TopicName, u32>) -> Assignment {
    let members = members_by_id(members);
    let mut assignment = empty_assignment(&members);
    for (topic, &partition_count) in partitions {
        let subscribers: Vec<&MemberId> = members
            .iter()
            .filter(|(_, member)| member.topics.contains(topic))
            .map(|(member_id, _)| *member_id)
            .collect();
        let Ok(subscriber_count) = u32::try_from(subscribers.len()) else {
            continue;
        };
        if subscriber_count == 0 {
            continue;
        }
        let per_member = partition_count / subscriber_count;
        let with_extra = partition_count % subscriber_count;
        for (index, member_id) in (0u32..).zip(subscribers) {
            let start = per_member * index + index.min(with_extra);
            let length = per_member + u32::from(index < with_extra);
            if let Some(owned) = assignment.get_mut(member_id) {
                owned.extend((start..start + length).map(|p| topic_partition(topic, p)));
            }
        }
    }
    assignment
}

/// Every partition of a topic somebody subscribes to, sorted by topic then partition.
fn subscribed_partitions(
    members: &BTreeMap<&MemberId, &MemberSubscription>,
    partitions: &BTreeMap<TopicName, u32>,
) -> Vec<TopicPartition> {
    partitions
        .iter()
        .filter(|(topic, _)| {
            members
                .values()
                .any(|member| member.topics.contains(*topic))
        })
        .flat_map(|(topic, &count)| (0..count).map(|p| topic_partition(topic, p)))
        .collect()
}

/// Kafka's `RoundRobinAssignor` (see the module documentation).
pub fn round_robin(
    members: &[MemberSubscription],
    partitions: &BTreeMap<TopicName, u32>,
) -> Assignment {
    let members = members_by_id(members);
    let mut assignment = empty_assignment(&members);
    let ring: Vec<(&MemberId, &MemberSubscription)> =
        members.iter().map(|(id, member)| (*id, *member)).collect();
    let mut cursor = 0usize;
    for tp in subscribed_partitions(&members, partitions) {
        // At least one member subscribes to the topic, so one lap of the ring finds it.
        for _ in 0..ring.len() {
            let (member_id, member) = ring[cursor % ring.len()];
            cursor = (cursor + 1) % ring.len();
            if member.topics.contains(&tp.topic) {
                if let Some(owned) = assignment.get_mut(member_id) {
                    owned.push(tp);
                }
                break;
            }
        }
    }
    assignment
}

/// The state of the sticky assignment while it is built.
struct StickyState<'a> {
    /// Members subscribed to each topic, in id order.
    subscribers: BTreeMap<&'a TopicName, Vec<&'a MemberId>>,
    owned: BTreeMap<&'a MemberId, BTreeSet<TopicPartition>>,
}

impl<'a> StickyState<'a> {
    fn load(&self, member_id: &MemberId) -> usize {
        self.owned.get(member_id).map_or(0, BTreeSet::len)
    }

    /// The least loaded subscriber of `topic`, the smallest id among equals.
    fn least_loaded(&self, topic: &TopicName) -> Option<&'a MemberId> {
        let subscribers = self.subscribers.get(topic)?;
        subscribers
            .iter()
            .copied()
            .min_by_key(|member_id| (self.load(member_id), *member_id))
    }

    fn give(&mut self, member_id: &'a MemberId, tp: TopicPartition) {
        self.owned.entry(member_id).or_default().insert(tp);
    }

    /// Moves one partition from a member to a subscriber of its topic whose load is at least two
    /// lower, trying the most loaded members first. Returns false when no such move exists.
    fn move_one(&mut self) -> bool {
        let mut by_load: Vec<&'a MemberId> = self.owned.keys().copied().collect();
        by_load.sort_by_key(|member_id| (std::cmp::Reverse(self.load(member_id)), *member_id));
        for from in by_load {
            let from_load = self.load(from);
            let candidate = self.owned.get(from).and_then(|owned| {
                owned.iter().find_map(|tp| {
                    let to = self.least_loaded(&tp.topic)?;
                    (self.load(to) + 1 < from_load).then(|| (tp.clone(), to))
                })
            });
            if let Some((tp, to)) = candidate {
                if let Some(owned) = self.owned.get_mut(from) {
                    owned.remove(&tp);
                }
                self.give(to, tp);
                return true;
            }
        }
        false
    }
}

/// A sticky assignment (see the module documentation).
pub fn cooperative_sticky(
    members: &[MemberSubscription],
    partitions: &BTreeMap<TopicName, u32>,
) -> Assignment {
    let members = members_by_id(members);
    let mut state = StickyState {
        subscribers: BTreeMap::new(),
        owned: members.keys().map(|id| (*id, BTreeSet::new())).collect(),
    };
    for (member_id, member) in &members {
        for topic in member.topics.iter().filter(|t| partitions.contains_key(*t)) {
            state.subscribers.entry(topic).or_default().push(*member_id);
        }
    }
    let all_partitions = subscribed_partitions(&members, partitions);
    let mut taken: BTreeSet<TopicPartition> = BTreeSet::new();
    for (member_id, member) in &members {
        for tp in &member.owned {
            let exists = partitions.get(&tp.topic).is_some_and(|&n| tp.partition < n);
            if exists && member.topics.contains(&tp.topic) && taken.insert(tp.clone()) {
                state.give(member_id, tp.clone());
            }
        }
    }
    let partition_count = all_partitions.len();
    for tp in all_partitions {
        if taken.contains(&tp) {
            continue;
        }
        if let Some(member_id) = state.least_loaded(&tp.topic) {
            state.give(member_id, tp);
        }
    }
    // Each move lowers the sum of squared loads by at least two, and that sum starts at most at
    // the square of the partition count: the loop ends well within this bound.
    let moves_max = partition_count.saturating_mul(partition_count) / 2 + 1;
    for _ in 0..moves_max {
        if !state.move_one() {
            break;
        }
    }
    state
        .owned
        .into_iter()
        .map(|(member_id, owned)| (member_id.clone(), owned.into_iter().collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str) -> TopicName {
        TopicName::parse(name).unwrap()
    }

    fn member(id: &str, topics: &[&str]) -> MemberSubscription {
        MemberSubscription::new(MemberId::new(id), topics.iter().map(|t| topic(t)))
    }

    #[test]
    fn strategy_names_parse_back_and_accept_kafka_class_names() {
        for strategy in [
            AssignmentStrategy::Range,
            AssignmentStrategy::RoundRobin,
            AssignmentStrategy::CooperativeSticky,
        ] {
            assert_eq!(AssignmentStrategy::parse(strategy.name()), Some(strategy));
        }
        assert_eq!(
            AssignmentStrategy::parse("org.apache.kafka.clients.consumer.RoundRobinAssignor"),
            Some(AssignmentStrategy::RoundRobin)
        );
        assert_eq!(AssignmentStrategy::parse("sticky"), None);
    }

    #[test]
    fn members_without_a_subscribed_topic_get_nothing_and_appear_in_the_result() {
        let members = [member("a", &["t"]), member("b", &["missing"])];
        let partitions = BTreeMap::from([(topic("t"), 2)]);
        for strategy in [
            AssignmentStrategy::Range,
            AssignmentStrategy::RoundRobin,
            AssignmentStrategy::CooperativeSticky,
        ] {
            let assignment = strategy.assign(&members, &partitions);
            assert_eq!(assignment[&MemberId::new("a")].len(), 2, "{strategy}");
            assert!(assignment[&MemberId::new("b")].is_empty(), "{strategy}");
        }
    }

    #[test]
    fn round_robin_skips_members_not_subscribed_to_the_topic() {
        let members = [member("a", &["t1"]), member("b", &["t1", "t2"])];
        let partitions = BTreeMap::from([(topic("t1"), 2), (topic("t2"), 2)]);
        let assignment = round_robin(&members, &partitions);
        let names = |id: &str| -> Vec<String> {
            assignment[&MemberId::new(id)]
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(names("a"), ["t1-0"]);
        assert_eq!(names("b"), ["t1-1", "t2-0", "t2-1"]);
    }

    #[test]
    fn sticky_keeps_previous_owners_and_moves_only_the_excess_to_a_new_member() {
        let mut a = member("a", &["t"]);
        a.owned = (0..6).map(|p| topic_partition(&topic("t"), p)).collect();
        let mut b = member("b", &["t"]);
        b.owned = (6..10).map(|p| topic_partition(&topic("t"), p)).collect();
        let c = member("c", &["t"]);
        let partitions = BTreeMap::from([(topic("t"), 10)]);
        let assignment = cooperative_sticky(&[a.clone(), b.clone(), c], &partitions);
        let kept = |m: &MemberSubscription| {
            assignment[&m.member_id]
                .iter()
                .filter(|tp| m.owned.contains(tp))
                .count()
        };
        assert_eq!(assignment[&MemberId::new("c")].len(), 3);
        assert_eq!(kept(&a) + kept(&b), 7, "only three partitions move");
    }
}
