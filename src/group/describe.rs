//! What `kafka-consumer-groups --list` and `--describe` show: groups, their state and members,
//! and per partition the committed offset, the log end offset and the lag between them.

use std::collections::BTreeMap;
use std::fmt;

use crate::engine::Engine;
use crate::error::TopicError;
use crate::types::{Offset, TopicName, TopicPartition};

use super::assignor::{AssignmentStrategy, MemberId};
use super::coordinator::Generation;
use super::error::DescribeError;
use super::store::{CommittedOffsets, OffsetAndMetadata};

/// A group's state, with Kafka's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No live members (possibly committed offsets).
    Empty,
    /// A rebalance is under way: some member has yet to reach the current generation, or some
    /// partition has yet to move to its new owner.
    PreparingRebalance,
    /// Every member owns exactly its share of the current generation.
    Stable,
}

impl GroupState {
    /// Kafka's name of the state, as `kafka-consumer-groups` prints it.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One line of a group listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// The group's id.
    pub group: String,
    /// The group's state.
    pub state: GroupState,
    /// How many live members it has.
    pub member_count: usize,
}

impl GroupListing {
    pub(crate) fn empty(group: String) -> GroupListing {
        GroupListing {
            group,
            state: GroupState::Empty,
            member_count: 0,
        }
    }
}

/// A live member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// The member's id in the group.
    pub member_id: MemberId,
    /// The consumer's `client.id`.
    pub client_id: String,
    /// The topics the member subscribes to.
    pub topics: Vec<TopicName>,
    /// The partitions the member owns now.
    pub assignment: Vec<TopicPartition>,
    /// The partitions the current generation gives the member (the assignment once the
    /// rebalance completes).
    pub target: Vec<TopicPartition>,
}

/// One partition of a group: `CURRENT-OFFSET`, `LOG-END-OFFSET`, `LAG` and `CONSUMER-ID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    /// The partition.
    pub partition: TopicPartition,
    /// The committed offset, if any.
    pub committed: Option<OffsetAndMetadata>,
    /// `None` if the topic or partition no longer exists.
    pub log_end_offset: Option<Offset>,
    /// `log_end_offset - committed`, if both are known (0 if the commit is past the end).
    pub lag: Option<u64>,
    /// The live member that owns the partition, if any.
    pub owner: Option<MemberId>,
}

/// A group as `kafka-consumer-groups --describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group's id.
    pub group: String,
    /// The group's state.
    pub state: GroupState,
    /// The assignment strategy of a group with live members.
    pub strategy: Option<AssignmentStrategy>,
    /// The current generation of a group with live members.
    pub generation: Option<Generation>,
    /// The live members, empty for a group known only by its committed offsets.
    pub members: Vec<MemberDescription>,
    /// Every partition the group committed an offset for or a member owns, in order.
    pub partitions: Vec<PartitionLag>,
}

impl GroupDescription {
    pub(crate) fn empty(group: &str) -> GroupDescription {
        GroupDescription {
            group: group.to_owned(),
            state: GroupState::Empty,
            strategy: None,
            generation: None,
            members: Vec::new(),
            partitions: Vec::new(),
        }
    }
}

/// Describes a group from its committed offsets alone, without live members: what a tool that
/// opens a data directory can know, since groups live in the process that runs them.
pub fn describe_committed(
    engine: &Engine,
    offsets: &CommittedOffsets,
    group: &str,
) -> Result<GroupDescription, DescribeError> {
    let committed = offsets.group(group);
    if committed.is_empty() {
        return Err(DescribeError::UnknownGroup {
            group: group.to_owned(),
        });
    }
    let mut description = GroupDescription::empty(group);
    description.partitions = describe_partitions(engine, &committed, &BTreeMap::new())?;
    Ok(description)
}

/// The lag of every partition committed or owned.
pub(crate) fn describe_partitions(
    engine: &Engine,
    committed: &BTreeMap<TopicPartition, OffsetAndMetadata>,
    owners: &BTreeMap<TopicPartition, MemberId>,
) -> Result<Vec<PartitionLag>, DescribeError> {
    let mut partitions: Vec<&TopicPartition> = committed.keys().chain(owners.keys()).collect();
    partitions.sort();
    partitions.dedup();
    partitions
        .into_iter()
        .map(|tp| {
            let log_end_offset = log_end_offset(engine, tp)?;
            let committed = committed.get(tp).cloned();
            let lag = match (&committed, log_end_offset) {
                (Some(committed), Some(end)) => Some(end.0.saturating_sub(committed.offset.0)),
                _ => None,
            };
            Ok(PartitionLag {
                partition: tp.clone(),
                committed,
                log_end_offset,
                lag,
                owner: owners.get(tp).cloned(),
            })
        })
        .collect()
}

fn log_end_offset(engine: &Engine, tp: &TopicPartition) -> Result<Option<Offset>, DescribeError> {
    match engine.describe_partition(tp.topic.as_str(), tp.partition) {
        Ok(description) => Ok(Some(description.log_end_offset)),
        Err(TopicError::UnknownTopic { .. } | TopicError::UnknownPartition { .. }) => Ok(None),
        Err(source) => Err(DescribeError::Describe {
            partition: tp.clone(),
            source,
        }),
    }
}
