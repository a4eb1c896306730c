//! OffsetCommit, OffsetFetch, ListGroups, DescribeGroups and DeleteGroups: committed offsets kept
//! by seglog's own store (`__consumer_offsets`, Kafka's layout, durable before a commit is
//! answered, read back after a restart), fenced by the membership state machine.

use std::collections::BTreeMap;
use std::time::Instant;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::delete_groups_response::{
    DeletableGroupResult, DeleteGroupsResponse,
};
use kafka_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_protocol::messages::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup, DescribedGroupMember,
};
use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::list_groups_response::{ListGroupsResponse, ListedGroup};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponse, OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequest;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponse, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{GroupId, TopicName as WireTopicName};
use kafka_protocol::protocol::StrBytes;
use seglog::group::offset_record::OFFSET_METADATA_BYTES_MAX;
use seglog::group::{CommitError, DeleteGroupError, GroupCoordinator, OffsetAndMetadata};
use seglog::types::{Offset, TopicName, TopicPartition};

use crate::broker::{Broker, partition_count};
use crate::group_coordinator::GroupState;

/// The protocol type a group of committed offsets alone (no members) is listed with, as Kafka
/// lists a group that never used its membership protocol.
const NO_PROTOCOL_TYPE: &str = "";
/// The state of a group DescribeGroups does not know (Kafka's, without an error).
const DEAD: &str = "Dead";

/// seglog's offsets store, opened at the first group request that needs it; `None` (logged)
/// when it cannot be, and the request is answered `COORDINATOR_NOT_AVAILABLE`.
async fn store(broker: &Broker) -> Option<GroupCoordinator> {
    let opened = broker
        .offsets_store
        .get_or_try_init(|| async {
            broker
                .blocking(GroupCoordinator::open)
                .await?
                .map_err(|error| {
                    tracing::error!("cannot open the group offsets store: {error}");
                    ResponseError::CoordinatorNotAvailable
                })
        })
        .await;
    opened.ok().cloned()
}

/// The committed offset request of one partition, checked.
type Checked = Result<(TopicPartition, OffsetAndMetadata), ResponseError>;

fn check_partition(
    broker: &Broker,
    topic: &str,
    partition: i32,
    offset: i64,
    metadata: &str,
) -> Checked {
    let known = partition_count(&broker.engine, topic)
        .zip(u32::try_from(partition).ok())
        .filter(|(count, partition)| partition < count);
    let (Some((_, partition)), Ok(topic)) = (known, TopicName::parse(topic)) else {
        return Err(ResponseError::UnknownTopicOrPartition);
    };
    let offset =
        u64::try_from(offset).map_err(|_negative| ResponseError::InvalidCommitOffsetSize)?;
    // Refused per partition, as Kafka does (the store would refuse the whole commit).
    if metadata.len() > OFFSET_METADATA_BYTES_MAX {
        return Err(ResponseError::OffsetMetadataTooLarge);
    }
    Ok((
        TopicPartition { topic, partition },
        OffsetAndMetadata {
            offset: Offset(offset),
            metadata: metadata.to_owned(),
        },
    ))
}

pub(crate) async fn commit(broker: &Broker, request: OffsetCommitRequest) -> OffsetCommitResponse {
    let group_id = request.group_id.0.as_str();
    let fenced = broker.groups.lock().check_commit(
        group_id,
        request.generation_id_or_member_epoch,
        request.member_id.as_str(),
        Instant::now(),
    );
    let mut outcomes: Vec<Vec<Checked>> = request
        .topics
        .iter()
        .map(|topic| {
            topic
                .partitions
                .iter()
                .map(|partition| {
                    fenced?;
                    let metadata = partition
                        .committed_metadata
                        .as_ref()
                        .map_or("", |m| m.as_str());
                    check_partition(
                        broker,
                        topic.name.0.as_str(),
                        partition.partition_index,
                        partition.committed_offset,
                        metadata,
                    )
                })
                .collect()
        })
        .collect();
    let offsets: Vec<(TopicPartition, OffsetAndMetadata)> = outcomes
        .iter()
        .flatten()
        .filter_map(|outcome| outcome.clone().ok())
        .collect();
    if !offsets.is_empty() {
        let committed = match store(broker).await {
            Some(store) => store
                .commit_offsets(group_id, offsets)
                .await
                .map_err(|error| commit_error(group_id, &error)),
            None => Err(ResponseError::CoordinatorNotAvailable),
        };
        if let Err(error) = committed {
            for outcome in outcomes.iter_mut().flatten() {
                if outcome.is_ok() {
                    *outcome = Err(error);
                }
            }
        }
    }
    commit_response(&request.topics, outcomes)
}

fn commit_error(group_id: &str, error: &CommitError) -> ResponseError {
    match error {
        CommitError::MetadataTooLarge { .. } => ResponseError::OffsetMetadataTooLarge,
        _ => {
            tracing::warn!("an offset commit of group {group_id} failed: {error}");
            ResponseError::UnknownServerError
        }
    }
}

fn commit_response(
    topics: &[OffsetCommitRequestTopic],
    outcomes: Vec<Vec<Checked>>,
) -> OffsetCommitResponse {
    let topics = topics
        .iter()
        .zip(outcomes)
        .map(|(topic, outcomes)| {
            let partitions = topic
                .partitions
                .iter()
                .zip(outcomes)
                .map(|(partition, outcome)| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(partition.partition_index)
                        .with_error_code(outcome.err().map_or(0, |error| error.code()))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// The offsets a group committed: of the partitions asked for (`-1` for none), or all of them
/// (version 2 and later, with no topics named).
pub(crate) async fn fetch(broker: &Broker, request: OffsetFetchRequest) -> OffsetFetchResponse {
    let Some(store) = store(broker).await else {
        return OffsetFetchResponse::default()
            .with_error_code(ResponseError::CoordinatorNotAvailable.code());
    };
    let committed = store.committed_offsets().group(request.group_id.0.as_str());
    let topics = match request.topics {
        Some(topics) => topics
            .into_iter()
            .map(|topic| {
                let partitions = topic
                    .partition_indexes
                    .iter()
                    .map(|partition| {
                        let found = TopicName::parse(topic.name.0.as_str())
                            .ok()
                            .zip(u32::try_from(*partition).ok())
                            .and_then(|(topic, partition)| {
                                committed.get(&TopicPartition { topic, partition })
                            });
                        fetched_partition(*partition, found)
                    })
                    .collect();
                OffsetFetchResponseTopic::default()
                    .with_name(topic.name)
                    .with_partitions(partitions)
            })
            .collect(),
        None => all_committed(&committed),
    };
    OffsetFetchResponse::default().with_topics(topics)
}

fn fetched_partition(
    partition: i32,
    committed: Option<&OffsetAndMetadata>,
) -> OffsetFetchResponsePartition {
    let (offset, metadata) = match committed {
        Some(committed) => (
            i64::try_from(committed.offset.0).unwrap_or(i64::MAX),
            committed.metadata.clone(),
        ),
        None => (-1, String::new()),
    };
    OffsetFetchResponsePartition::default()
        .with_partition_index(partition)
        .with_committed_offset(offset)
        .with_committed_leader_epoch(-1)
        .with_metadata(Some(StrBytes::from_string(metadata)))
}

fn all_committed(
    committed: &BTreeMap<TopicPartition, OffsetAndMetadata>,
) -> Vec<OffsetFetchResponseTopic> {
    let mut topics: BTreeMap<&str, Vec<OffsetFetchResponsePartition>> = BTreeMap::new();
    for (tp, offset) in committed {
        let partition = i32::try_from(tp.partition).unwrap_or(i32::MAX);
        topics
            .entry(tp.topic.as_str())
            .or_default()
            .push(fetched_partition(partition, Some(offset)));
    }
    topics
        .into_iter()
        .map(|(topic, partitions)| {
            OffsetFetchResponseTopic::default()
                .with_name(WireTopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(partitions)
        })
        .collect()
}

/// The groups with members, and those with committed offsets alone (listed `Empty` with no
/// protocol type, as Kafka lists them); from version 4 only those in the states asked for, if any.
pub(crate) async fn list(broker: &Broker, request: &ListGroupsRequest) -> ListGroupsResponse {
    let empty = || (NO_PROTOCOL_TYPE.to_owned(), GroupState::Empty.name());
    let mut groups: BTreeMap<String, (String, &str)> = match store(broker).await {
        Some(store) => store
            .committed_offsets()
            .groups()
            .into_iter()
            .map(|group| (group, empty()))
            .collect(),
        None => {
            return ListGroupsResponse::default()
                .with_error_code(ResponseError::CoordinatorNotAvailable.code());
        }
    };
    for live in broker.groups.lock().list() {
        groups.insert(live.group_id, (live.protocol_type, live.state.name()));
    }
    let wanted = |state: &str| {
        let filter = &request.states_filter;
        filter.is_empty()
            || filter
                .iter()
                .any(|s| s.as_str().eq_ignore_ascii_case(state))
    };
    let groups = groups
        .into_iter()
        .filter(|(_, (_, state))| wanted(state))
        .map(|(group_id, (protocol_type, state))| {
            ListedGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(group_id)))
                .with_protocol_type(StrBytes::from_string(protocol_type))
                .with_group_state(StrBytes::from_static_str(state))
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

pub(crate) async fn describe(
    broker: &Broker,
    request: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let committed = store(broker).await.map(|store| store.committed_offsets());
    let groups = request
        .groups
        .into_iter()
        .map(|group_id| {
            let described = DescribedGroup::default().with_group_id(group_id.clone());
            let Some(committed) = &committed else {
                return described.with_error_code(ResponseError::CoordinatorNotAvailable.code());
            };
            let Some(live) = broker.groups.lock().describe(group_id.0.as_str()) else {
                let has_offsets = !committed.group(group_id.0.as_str()).is_empty();
                let state = if has_offsets { "Empty" } else { DEAD };
                return described.with_group_state(StrBytes::from_static_str(state));
            };
            let members = live
                .members
                .into_iter()
                .map(|member| {
                    DescribedGroupMember::default()
                        .with_member_id(StrBytes::from_string(member.member_id))
                        .with_client_id(StrBytes::from_string(member.client_id))
                        .with_client_host(StrBytes::from_string(member.client_host))
                        .with_member_metadata(member.metadata)
                        .with_member_assignment(member.assignment)
                })
                .collect();
            described
                .with_group_state(StrBytes::from_static_str(live.state.name()))
                .with_protocol_type(StrBytes::from_string(live.protocol_type))
                .with_protocol_data(StrBytes::from_string(live.protocol_name))
                .with_members(members)
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

/// Deletes groups without members: their committed offsets get tombstones, durably.
pub(crate) async fn delete(broker: &Broker, request: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let store = store(broker).await;
    let mut results = Vec::with_capacity(request.groups_names.len());
    for group_id in request.groups_names {
        let outcome = match &store {
            None => Err(ResponseError::CoordinatorNotAvailable),
            Some(_) if broker.groups.lock().is_live(group_id.0.as_str()) => {
                Err(ResponseError::NonEmptyGroup)
            }
            Some(store) => delete_one(broker, store.clone(), text(&group_id)).await,
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(group_id)
                .with_error_code(outcome.err().map_or(0, |error| error.code())),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}

fn text(group_id: &GroupId) -> String {
    group_id.0.as_str().to_owned()
}

async fn delete_one(
    broker: &Broker,
    store: GroupCoordinator,
    group_id: String,
) -> Result<(), ResponseError> {
    let deleted = broker
        .blocking(move |_| {
            let deleted = store.delete_group(&group_id);
            (group_id, deleted)
        })
        .await?;
    match deleted {
        (_, Ok(())) => Ok(()),
        (_, Err(DeleteGroupError::UnknownGroup { .. })) => Err(ResponseError::GroupIdNotFound),
        (_, Err(DeleteGroupError::NotEmpty { .. })) => Err(ResponseError::NonEmptyGroup),
        (group_id, Err(error)) => {
            tracing::warn!("deleting group {group_id} failed: {error}");
            Err(ResponseError::UnknownServerError)
        }
    }
}
