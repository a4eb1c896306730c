//! Produce: each partition's batches are appended as the client sent them. `acks=all` (-1)
//! answers after the engine's group commit synced them (`Durability::Durable`); `acks=1` once
//! written; `acks=0` is never answered (a failure closes the connection). Every partition's
//! append is validated and sent to its shard before any is awaited, so a request's partitions are
//! written in parallel, and the connection's next produce requests are sent behind them.

use bytes::Bytes;
use kafka_protocol::error::{ParseResponseErrorCode, ResponseError};
use kafka_protocol::messages::TopicName as WireTopicName;
use kafka_protocol::messages::produce_request::ProduceRequest;
use kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_protocol::protocol::StrBytes;
use seglog::engine::{AppendInfo, Durability, Engine, Pending};
use seglog::error::AppendError;
use seglog::types::TopicName;

use crate::broker::Broker;
use crate::error_code;

/// One partition's append, under way or refused before it started.
enum PartitionAppend {
    Sent(Pending<AppendInfo, AppendError>),
    Refused(ResponseError),
}

/// A request with more record bytes than this is validated (CRCs, decompression) on tokio's
/// blocking pool, not on the thread that serves other connections.
const VALIDATE_INLINE_BYTES_MAX: usize = 256 * 1024;

/// What a produce request comes to.
pub(crate) enum ProduceOutcome {
    /// The response (`acks` 1 or all).
    Answer(ProduceResponse),
    /// Every append of an `acks=0` request succeeded: nothing is sent.
    Unanswered,
    /// An append of an `acks=0` request failed: Kafka closes the connection, the only way such
    /// a client learns of it.
    UnansweredFailure(ResponseError),
}

/// Sends every append of `request` to its shard, in order, and returns what settles them: the
/// connection may read its next request before they are written (and sends their answers in
/// order), while the engine applies each partition's appends in the order they were sent.
pub(crate) async fn submit(
    broker: &Broker,
    request: ProduceRequest,
) -> impl Future<Output = ProduceOutcome> + Send + 'static {
    let acks = request.acks;
    let durability = match acks {
        -1 => Some(Durability::Durable),
        0 | 1 => Some(Durability::Written),
        _ => None,
    };
    let records_bytes: usize = request
        .topic_data
        .iter()
        .flat_map(|topic| &topic.partition_data)
        .filter_map(|partition| partition.records.as_ref().map(Bytes::len))
        .sum();
    let appends = match records_bytes > VALIDATE_INLINE_BYTES_MAX {
        false => Ok(send_all(&broker.engine, request, durability)),
        true => {
            let sent = broker.blocking(move |engine| send_all(engine, request, durability));
            sent.await
        }
    };
    async move {
        let appends = match appends {
            Ok(appends) => appends,
            Err(error) => return ProduceOutcome::UnansweredFailure(error),
        };
        outcome(acks, settle_all(appends).await)
    }
}

fn outcome(acks: i16, responses: Vec<TopicProduceResponse>) -> ProduceOutcome {
    if acks != 0 {
        return ProduceOutcome::Answer(ProduceResponse::default().with_responses(responses));
    }
    let failure = responses
        .iter()
        .flat_map(|topic| &topic.partition_responses)
        .find_map(|partition| partition.error_code.err());
    match failure {
        Some(error) => ProduceOutcome::UnansweredFailure(error),
        None => ProduceOutcome::Unanswered,
    }
}

/// Each topic's partitions, each append sent to its shard (or refused) before any is awaited.
type TopicAppends = Vec<(WireTopicName, Vec<(i32, PartitionAppend)>)>;

fn send_all(
    engine: &Engine,
    request: ProduceRequest,
    durability: Option<Durability>,
) -> TopicAppends {
    let mut appends = Vec::with_capacity(request.topic_data.len());
    for topic in request.topic_data {
        let partitions = topic
            .partition_data
            .into_iter()
            .map(|partition| {
                let append = match durability {
                    Some(durability) => send(
                        engine,
                        &topic.name.0,
                        partition.index,
                        partition.records,
                        durability,
                    ),
                    None => PartitionAppend::Refused(ResponseError::InvalidRequiredAcks),
                };
                (partition.index, append)
            })
            .collect();
        appends.push((topic.name, partitions));
    }
    appends
}

async fn settle_all(appends: TopicAppends) -> Vec<TopicProduceResponse> {
    let mut responses = Vec::with_capacity(appends.len());
    for (name, partitions) in appends {
        let mut partition_responses = Vec::with_capacity(partitions.len());
        for (index, append) in partitions {
            partition_responses.push(settle(index, append).await);
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(name)
                .with_partition_responses(partition_responses),
        );
    }
    responses
}

fn send(
    engine: &Engine,
    topic: &StrBytes,
    partition: i32,
    records: Option<Bytes>,
    durability: Durability,
) -> PartitionAppend {
    let (Ok(topic), Ok(partition)) = (TopicName::parse(topic), u32::try_from(partition)) else {
        return PartitionAppend::Refused(ResponseError::UnknownTopicOrPartition);
    };
    let Some(records) = records else {
        return PartitionAppend::Refused(ResponseError::CorruptMessage);
    };
    PartitionAppend::Sent(engine.append(&topic, partition, records, durability))
}

async fn settle(index: i32, append: PartitionAppend) -> PartitionProduceResponse {
    let response = PartitionProduceResponse::default().with_index(index);
    let pending = match append {
        PartitionAppend::Sent(pending) => pending,
        PartitionAppend::Refused(error) => return refused(response, error, None),
    };
    match pending.await {
        Ok(appended) => response
            .with_base_offset(offset_i64(appended.first_offset.0))
            .with_log_append_time_ms(appended.log_append_time.map_or(-1, |time| time.0)),
        Err(error) => {
            let code = error_code::append_error(&error);
            refused(response, code, Some(error.to_string()))
        }
    }
}

fn refused(
    response: PartitionProduceResponse,
    error: ResponseError,
    message: Option<String>,
) -> PartitionProduceResponse {
    response
        .with_error_code(error.code())
        .with_base_offset(-1)
        .with_error_message(message.map(StrBytes::from_string))
}

/// Offsets are below 2^63 (the engine refuses an append past `i64::MAX`).
pub(crate) fn offset_i64(offset: u64) -> i64 {
    i64::try_from(offset).unwrap_or(i64::MAX)
}
