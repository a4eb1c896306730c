//! The group APIs over the wire: FindCoordinator, JoinGroup, SyncGroup, Heartbeat and
//! LeaveGroup drive the membership state machine (`group_coordinator.rs`); a request that must
//! wait for the rest of its group (a JoinGroup during a rebalance, a follower's SyncGroup) waits
//! on a channel the state machine answers through, or until the server stops. Committed offsets
//! are `offsets.rs`'s.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::find_coordinator_response::FindCoordinatorResponse;
use kafka_protocol::messages::heartbeat_request::HeartbeatRequest;
use kafka_protocol::messages::heartbeat_response::HeartbeatResponse;
use kafka_protocol::messages::join_group_request::JoinGroupRequest;
use kafka_protocol::messages::join_group_response::{JoinGroupResponse, JoinGroupResponseMember};
use kafka_protocol::messages::leave_group_request::LeaveGroupRequest;
use kafka_protocol::messages::leave_group_response::{LeaveGroupResponse, MemberResponse};
use kafka_protocol::messages::sync_group_request::SyncGroupRequest;
use kafka_protocol::messages::sync_group_response::SyncGroupResponse;
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;

use crate::broker::Broker;
use crate::group_coordinator::{
    Deliveries, JoinAnswer, JoinRequest, Membership, Protocol, SyncAnswer,
};

/// How often session timeouts and rebalance deadlines are checked.
pub(crate) const TICK_INTERVAL: Duration = Duration::from_millis(100);

/// FindCoordinator's `key_type` of a group (1 is a transactional id).
const KEY_TYPE_GROUP: i8 = 0;

/// An answer a waiting request receives.
#[derive(Debug)]
pub(crate) enum Answered {
    Join(JoinAnswer),
    Sync(SyncAnswer),
}

type Waiter = oneshot::Sender<Answered>;

/// The broker's groups: the membership state machine behind a lock, held only for a step of it.
#[derive(Default)]
pub(crate) struct Groups {
    membership: Mutex<Membership<Waiter>>,
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups").finish_non_exhaustive()
    }
}

impl Groups {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Membership<Waiter>> {
        self.membership
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Expires sessions and completes overdue rebalances; called every [`TICK_INTERVAL`].
    pub(crate) fn tick(&self) {
        let deliveries = self.lock().tick(Instant::now());
        deliver(deliveries);
    }
}

/// Sends answers to their waiters; a waiter whose connection closed meanwhile is gone, and its
/// answer with it.
fn deliver(deliveries: Deliveries<Waiter>) {
    for (waiter, answer) in deliveries.joins {
        let _ = waiter.send(Answered::Join(answer));
    }
    for (waiter, answer) in deliveries.syncs {
        let _ = waiter.send(Answered::Sync(answer));
    }
}

/// Waits for a request's answer; `None` when the server stops first.
async fn wait(broker: &Broker, answered: oneshot::Receiver<Answered>) -> Option<Answered> {
    tokio::select! {
        answer = answered => answer.ok(),
        () = broker.stopping() => None,
    }
}

/// This broker coordinates every group; transactions are not built.
pub(crate) fn find_coordinator(
    broker: &Broker,
    request: &FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let response = FindCoordinatorResponse::default();
    if request.key_type != KEY_TYPE_GROUP {
        return response
            .with_error_code(ResponseError::CoordinatorNotAvailable.code())
            .with_node_id(kafka_protocol::messages::BrokerId(-1))
            .with_port(-1);
    }
    response
        .with_node_id(broker.broker_id())
        .with_host(broker.host.clone())
        .with_port(broker.port)
}

fn text(value: &StrBytes) -> String {
    value.as_str().to_owned()
}

/// The client a JoinGroup came from, as DescribeGroups shows its member.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Joining<'a> {
    pub(crate) client_id: &'a str,
    pub(crate) client_host: &'a str,
}

pub(crate) async fn join(
    broker: &Broker,
    request: JoinGroupRequest,
    version: i16,
    client: Joining<'_>,
) -> JoinGroupResponse {
    // Version 0 has no rebalance timeout: Kafka takes the session timeout.
    let rebalance_timeout_ms = match version {
        0 => request.session_timeout_ms,
        _ => request.rebalance_timeout_ms,
    };
    let join = JoinRequest {
        group_id: text(&request.group_id.0),
        member_id: text(&request.member_id),
        client_id: client.client_id.to_owned(),
        client_host: client.client_host.to_owned(),
        session_timeout: duration_ms(request.session_timeout_ms),
        rebalance_timeout: duration_ms(rebalance_timeout_ms),
        protocol_type: text(&request.protocol_type),
        protocols: request
            .protocols
            .into_iter()
            .map(|protocol| Protocol {
                name: text(&protocol.name),
                metadata: protocol.metadata,
            })
            .collect(),
        member_id_required: version >= 4,
    };
    let (waiter, answered) = oneshot::channel();
    let deliveries = broker.groups.lock().join(join, waiter, Instant::now());
    deliver(deliveries);
    let answer = match wait(broker, answered).await {
        Some(Answered::Join(answer)) => answer,
        _ => JoinAnswer {
            error: Some(ResponseError::CoordinatorNotAvailable),
            member_id: text(&request.member_id),
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            members: Vec::new(),
        },
    };
    join_response(answer)
}

/// A negative timeout reads as zero (and is then refused as too short).
fn duration_ms(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn join_response(answer: JoinAnswer) -> JoinGroupResponse {
    let members = answer
        .members
        .into_iter()
        .map(|(member_id, metadata)| {
            JoinGroupResponseMember::default()
                .with_member_id(StrBytes::from_string(member_id))
                .with_metadata(metadata)
        })
        .collect();
    JoinGroupResponse::default()
        .with_error_code(answer.error.map_or(0, |error| error.code()))
        .with_generation_id(answer.generation)
        .with_protocol_type(answer.protocol_type.map(StrBytes::from_string))
        // Null only from version 7 (not answered here): Kafka sends "" before.
        .with_protocol_name(Some(StrBytes::from_string(
            answer.protocol_name.unwrap_or_default(),
        )))
        .with_leader(StrBytes::from_string(answer.leader))
        .with_member_id(StrBytes::from_string(answer.member_id))
        .with_members(members)
}

pub(crate) async fn sync(broker: &Broker, request: SyncGroupRequest) -> SyncGroupResponse {
    let assignments: Vec<(String, Bytes)> = request
        .assignments
        .into_iter()
        .map(|assignment| (text(&assignment.member_id), assignment.assignment))
        .collect();
    let (waiter, answered) = oneshot::channel();
    let deliveries = broker.groups.lock().sync(
        request.group_id.0.as_str(),
        request.generation_id,
        request.member_id.as_str(),
        assignments,
        waiter,
        Instant::now(),
    );
    deliver(deliveries);
    let answer = match wait(broker, answered).await {
        Some(Answered::Sync(answer)) => answer,
        _ => SyncAnswer {
            error: Some(ResponseError::CoordinatorNotAvailable),
            assignment: Bytes::new(),
        },
    };
    SyncGroupResponse::default()
        .with_error_code(answer.error.map_or(0, |error| error.code()))
        .with_assignment(answer.assignment)
}

pub(crate) fn heartbeat(broker: &Broker, request: &HeartbeatRequest) -> HeartbeatResponse {
    let outcome = broker.groups.lock().heartbeat(
        request.group_id.0.as_str(),
        request.generation_id,
        request.member_id.as_str(),
        Instant::now(),
    );
    HeartbeatResponse::default().with_error_code(outcome.err().map_or(0, |error| error.code()))
}

/// Versions 0-2 name one member; 3 and later a list, each answered (a reason, from 5, is not
/// kept).
pub(crate) fn leave(
    broker: &Broker,
    request: &LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let group_id = request.group_id.0.as_str();
    let now = Instant::now();
    if version < 3 {
        let (outcome, deliveries) =
            broker
                .groups
                .lock()
                .leave(group_id, request.member_id.as_str(), now);
        deliver(deliveries);
        return LeaveGroupResponse::default()
            .with_error_code(outcome.err().map_or(0, |error| error.code()));
    }
    let mut members = Vec::with_capacity(request.members.len());
    for member in &request.members {
        let (outcome, deliveries) =
            broker
                .groups
                .lock()
                .leave(group_id, member.member_id.as_str(), now);
        deliver(deliveries);
        members.push(
            MemberResponse::default()
                .with_member_id(member.member_id.clone())
                .with_group_instance_id(member.group_instance_id.clone())
                .with_error_code(outcome.err().map_or(0, |error| error.code())),
        );
    }
    LeaveGroupResponse::default().with_members(members)
}
