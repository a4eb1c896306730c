//! Kafka's classic consumer-group protocol over the wire (issue 44), with the `kafka-protocol`
//! crate as the client. Proven: a first JoinGroup (v5) is answered `MEMBER_ID_REQUIRED` with an
//! id; two members on their own connections go through a rebalance (the first learns of it by
//! heartbeat, both JoinGroups complete together at the next generation, the leader receives both
//! members' metadata, SyncGroup relays the leader's assignments to the waiting follower); stale
//! generations and unknown members are refused; a leave starts a rebalance; offsets commit only
//! from the current generation (oversized metadata refused per partition), are read back by
//! OffsetFetch, survive a server restart, are listed and described, and are deleted by
//! DeleteGroups; a stop answers a waiting JoinGroup.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::{Broker, Client};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest, GroupId, HeartbeatRequest,
    JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use seglog::config::LogConfig;
use seglog_kafka::ServeConfig;

const GROUP: &str = "g";
/// JoinGroup's highest version answered; librdkafka 2 joins at 5, which the clients' tests cover.
const JOIN_VERSION: i16 = 8;
const SYNC_VERSION: i16 = 4;

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

fn group() -> GroupId {
    GroupId(text(GROUP))
}

fn code(error: ResponseError) -> i16 {
    error.code()
}

fn join_request(member_id: &str) -> JoinGroupRequest {
    let protocol = JoinGroupRequestProtocol::default()
        .with_name(text("range"))
        .with_metadata(Bytes::from(format!("subscription of {member_id}")));
    JoinGroupRequest::default()
        .with_group_id(group())
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(text(member_id))
        .with_protocol_type(text("consumer"))
        .with_protocols(vec![protocol])
}

/// Joins as a new member: the id from `MEMBER_ID_REQUIRED`, then the join with it sent (its
/// answer may wait for the rest of the group: read it with `receive`).
async fn join_new(client: &mut Client) -> (String, i32) {
    let first = client.call(&join_request(""), JOIN_VERSION).await;
    assert_eq!(first.error_code, code(ResponseError::MemberIdRequired));
    let member_id = first.member_id.as_str().to_owned();
    assert!(!member_id.is_empty());
    let correlation_id = client.send(&join_request(&member_id), JOIN_VERSION).await;
    (member_id, correlation_id)
}

async fn receive_join(client: &mut Client, correlation_id: i32) -> JoinGroupResponse {
    client
        .receive::<JoinGroupRequest>(JOIN_VERSION, correlation_id)
        .await
}

fn sync_request(member_id: &str, generation: i32, plan: &[(&str, &str)]) -> SyncGroupRequest {
    let assignments = plan
        .iter()
        .map(|(member, assignment)| {
            SyncGroupRequestAssignment::default()
                .with_member_id(text(member))
                .with_assignment(Bytes::from(assignment.to_string()))
        })
        .collect();
    SyncGroupRequest::default()
        .with_group_id(group())
        .with_generation_id(generation)
        .with_member_id(text(member_id))
        .with_assignments(assignments)
}

async fn heartbeat(client: &mut Client, member_id: &str, generation: i32) -> i16 {
    let request = HeartbeatRequest::default()
        .with_group_id(group())
        .with_generation_id(generation)
        .with_member_id(text(member_id));
    client.call(&request, 4).await.error_code
}

/// Heartbeats until the broker answers `REBALANCE_IN_PROGRESS` (another connection's join is
/// on its way).
async fn until_rebalancing(client: &mut Client, member_id: &str, generation: i32) {
    for _ in 0..100 {
        match heartbeat(client, member_id, generation).await {
            0 => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            error => {
                assert_eq!(error, code(ResponseError::RebalanceInProgress));
                return;
            }
        }
    }
    panic!("no rebalance began");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_join_sync_heartbeat_and_leave_through_a_rebalance() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut first = broker.client().await;
    let coordinator = first
        .call(&FindCoordinatorRequest::default().with_key(text(GROUP)), 3)
        .await;
    assert_eq!(coordinator.error_code, 0);
    assert_eq!(coordinator.port, i32::from(broker.address.port()));

    let (a, pending) = join_new(&mut first).await;
    let joined = receive_join(&mut first, pending).await;
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    assert_eq!(joined.leader.as_str(), a);
    assert_eq!(joined.protocol_name.as_ref().unwrap().as_str(), "range");
    let synced: SyncGroupResponse = first
        .call(&sync_request(&a, 1, &[(&a, "A1")]), SYNC_VERSION)
        .await;
    assert_eq!(synced.assignment, Bytes::from("A1"));
    assert_eq!(heartbeat(&mut first, &a, 1).await, 0);

    // A second member: its join waits until the first has rejoined.
    let mut second = broker.client().await;
    let (b, pending_b) = join_new(&mut second).await;
    let rebalancing = code(ResponseError::RebalanceInProgress);
    until_rebalancing(&mut first, &a, 1).await;
    let pending_a = first.send(&join_request(&a), JOIN_VERSION).await;
    let joined_a = receive_join(&mut first, pending_a).await;
    let joined_b = receive_join(&mut second, pending_b).await;
    assert_eq!((joined_a.generation_id, joined_b.generation_id), (2, 2));
    assert_eq!(joined_a.leader.as_str(), a, "the leader stays");
    assert_eq!(joined_a.members.len(), 2, "the leader learns every member");
    assert!(joined_b.members.is_empty());

    // The follower's SyncGroup waits for the leader's plan.
    let pending_sync = second.send(&sync_request(&b, 2, &[]), SYNC_VERSION).await;
    let plan = [(a.as_str(), "A2"), (b.as_str(), "B2")];
    let synced_a: SyncGroupResponse = first.call(&sync_request(&a, 2, &plan), SYNC_VERSION).await;
    let synced_b = second
        .receive::<SyncGroupRequest>(SYNC_VERSION, pending_sync)
        .await;
    assert_eq!(synced_a.assignment, Bytes::from("A2"));
    assert_eq!(
        (synced_b.error_code, synced_b.assignment),
        (0, Bytes::from("B2"))
    );
    assert_eq!(heartbeat(&mut second, &b, 2).await, 0);

    // Fencing.
    let illegal = code(ResponseError::IllegalGeneration);
    let unknown = code(ResponseError::UnknownMemberId);
    assert_eq!(heartbeat(&mut first, &a, 1).await, illegal);
    assert_eq!(heartbeat(&mut first, "nobody", 2).await, unknown);
    let stale: SyncGroupResponse = first.call(&sync_request(&a, 1, &[]), SYNC_VERSION).await;
    assert_eq!(stale.error_code, illegal);
    let stranger = first.call(&join_request("nobody"), JOIN_VERSION).await;
    assert_eq!(stranger.error_code, unknown);

    // A leave makes the other member rejoin.
    let leave = LeaveGroupRequest::default()
        .with_group_id(group())
        .with_member_id(text(&b));
    assert_eq!(second.call(&leave, 1).await.error_code, 0);
    assert_eq!(heartbeat(&mut first, &a, 2).await, rebalancing);
    let pending_a = first.send(&join_request(&a), JOIN_VERSION).await;
    let alone = receive_join(&mut first, pending_a).await;
    assert_eq!((alone.generation_id, alone.members.len()), (3, 1));

    let described = first
        .call(
            &DescribeGroupsRequest::default().with_groups(vec![group()]),
            5,
        )
        .await;
    let described = &described.groups[0];
    assert_eq!(described.group_state.as_str(), "CompletingRebalance");
    assert_eq!(described.protocol_type.as_str(), "consumer");
    assert_eq!(described.members.len(), 1);
    assert_eq!(described.members[0].client_id.as_str(), "seglog-kafka-test");
    assert_eq!(described.members[0].client_host.as_str(), "/127.0.0.1");
    broker.stop().await;
}

fn commit_request(
    member_id: &str,
    generation: i32,
    offsets: &[(&str, i32, i64)],
) -> OffsetCommitRequest {
    let topics = offsets
        .iter()
        .map(|(topic, partition, offset)| {
            let partition = OffsetCommitRequestPartition::default()
                .with_partition_index(*partition)
                .with_committed_offset(*offset)
                .with_committed_metadata(Some(text("meta")));
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(text(topic)))
                .with_partitions(vec![partition])
        })
        .collect();
    OffsetCommitRequest::default()
        .with_group_id(group())
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(text(member_id))
        .with_topics(topics)
}

fn commit_codes(response: &OffsetCommitResponse) -> Vec<i16> {
    response
        .topics
        .iter()
        .flat_map(|topic| {
            topic
                .partitions
                .iter()
                .map(|partition| partition.error_code)
        })
        .collect()
}

/// Committed offsets of partitions 0..3 of `t` (`-1`: none).
async fn fetch_offsets(client: &mut Client) -> Vec<i64> {
    let topic = OffsetFetchRequestTopic::default()
        .with_name(TopicName(text("t")))
        .with_partition_indexes(vec![0, 1, 2]);
    let request = OffsetFetchRequest::default()
        .with_group_id(group())
        .with_topics(Some(vec![topic]));
    let response: OffsetFetchResponse = client.call(&request, 7).await;
    assert_eq!(response.error_code, 0);
    response.topics[0]
        .partitions
        .iter()
        .map(|partition| partition.committed_offset)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_commit_from_the_current_generation_and_survive_a_restart() {
    let broker = Broker::start(ServeConfig::default()).await;
    broker
        .engine
        .create_topic("t", 3, LogConfig::default())
        .unwrap();
    let mut client = broker.client().await;
    let (member, pending) = join_new(&mut client).await;
    let joined = receive_join(&mut client, pending).await;
    assert_eq!(joined.generation_id, 1);
    let synced: SyncGroupResponse = client
        .call(&sync_request(&member, 1, &[]), SYNC_VERSION)
        .await;
    assert_eq!(synced.error_code, 0);

    let offsets = [("t", 0, 5), ("t", 2, 9)];
    let committed = client.call(&commit_request(&member, 1, &offsets), 8).await;
    assert_eq!(commit_codes(&committed), [0, 0]);
    let stale = client
        .call(&commit_request(&member, 0, &[("t", 0, 7)]), 8)
        .await;
    assert_eq!(
        commit_codes(&stale),
        [code(ResponseError::IllegalGeneration)]
    );
    let stranger = client
        .call(&commit_request("nobody", 1, &[("t", 0, 7)]), 8)
        .await;
    assert_eq!(
        commit_codes(&stranger),
        [code(ResponseError::UnknownMemberId)]
    );
    let unknown_topic = client
        .call(&commit_request(&member, 1, &[("u", 0, 7)]), 8)
        .await;
    assert_eq!(
        commit_codes(&unknown_topic),
        [code(ResponseError::UnknownTopicOrPartition)]
    );
    let mut oversized = commit_request(&member, 1, &[("t", 0, 7), ("t", 1, 7)]);
    oversized.topics[1].partitions[0].committed_metadata = Some(text(&"m".repeat(4097)));
    let oversized = client.call(&oversized, 8).await;
    assert_eq!(
        commit_codes(&oversized),
        [0, code(ResponseError::OffsetMetadataTooLarge)]
    );
    assert_eq!(fetch_offsets(&mut client).await, [7, -1, 9]);
    let all: OffsetFetchResponse = client
        .call(
            &OffsetFetchRequest::default()
                .with_group_id(group())
                .with_topics(None),
            5,
        )
        .await;
    assert_eq!(
        all.topics[0].partitions.len(),
        2,
        "every committed partition"
    );

    let dir = broker.stop_keeping_dir().await;
    let broker = Broker::start_in(dir, ServeConfig::default()).await;
    let mut client = broker.client().await;
    assert_eq!(fetch_offsets(&mut client).await, [7, -1, 9]);
    // The membership did not survive: the member learns it must join again.
    assert_eq!(
        heartbeat(&mut client, &member, 1).await,
        code(ResponseError::UnknownMemberId)
    );
    // A client that assigns itself commits with no member and no generation.
    let simple = client
        .call(&commit_request("", -1, &[("t", 1, 3)]), 8)
        .await;
    assert_eq!(commit_codes(&simple), [0]);
    assert_eq!(fetch_offsets(&mut client).await, [7, 3, 9]);

    let listed = client.call(&ListGroupsRequest::default(), 2).await;
    let names: Vec<&str> = listed
        .groups
        .iter()
        .map(|g| g.group_id.0.as_str())
        .collect();
    assert_eq!(names, [GROUP]);
    let stable = ListGroupsRequest::default().with_states_filter(vec![text("Stable")]);
    assert!(client.call(&stable, 4).await.groups.is_empty());
    let empty = ListGroupsRequest::default().with_states_filter(vec![text("Empty")]);
    let listed = client.call(&empty, 4).await;
    assert_eq!(listed.groups[0].group_state.as_str(), "Empty");
    let described = client
        .call(
            &DescribeGroupsRequest::default().with_groups(vec![group()]),
            5,
        )
        .await;
    assert_eq!(described.groups[0].group_state.as_str(), "Empty");

    let delete = DeleteGroupsRequest::default().with_groups_names(vec![group()]);
    let deleted = client.call(&delete, 2).await;
    assert_eq!(deleted.results[0].error_code, 0);
    assert_eq!(fetch_offsets(&mut client).await, [-1, -1, -1]);
    let again = client.call(&delete, 1).await;
    assert_eq!(
        again.results[0].error_code,
        code(ResponseError::GroupIdNotFound)
    );
    broker.stop().await;
}

/// A JoinGroup waiting for the rest of its group does not hold up a stop: it is answered
/// `COORDINATOR_NOT_AVAILABLE` (the client looks for the coordinator again) and the server stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_answers_a_waiting_join() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut first = broker.client().await;
    let (a, pending) = join_new(&mut first).await;
    assert_eq!(receive_join(&mut first, pending).await.error_code, 0);
    let mut second = broker.client().await;
    let (_b, pending_b) = join_new(&mut second).await;
    until_rebalancing(&mut first, &a, 1).await;
    let stopping = tokio::spawn(broker.stop());
    let cut_short = receive_join(&mut second, pending_b).await;
    assert_eq!(
        cut_short.error_code,
        code(ResponseError::CoordinatorNotAvailable)
    );
    tokio::time::timeout(std::time::Duration::from_secs(10), stopping)
        .await
        .expect("the server stops")
        .unwrap();
}
