//! ListOffsets: the earliest offset (-2: the log start offset), the latest (-1: the log end
//! offset, which is the high watermark on this single replica), or the first offset whose record
//! has a timestamp at or after the one asked for (none: offset -1).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsRequest};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use seglog::types::{PartitionId, TimestampMs, TopicName};

use crate::broker::Broker;
use crate::error_code;
use crate::produce::offset_i64;

/// Kafka's `ListOffsetsRequest.LATEST_TIMESTAMP`.
const LATEST_TIMESTAMP: i64 = -1;
/// Kafka's `ListOffsetsRequest.EARLIEST_TIMESTAMP`.
const EARLIEST_TIMESTAMP: i64 = -2;

pub(crate) async fn answer(broker: &Broker, request: ListOffsetsRequest) -> ListOffsetsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let parsed = TopicName::parse(&topic.name.0);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for partition in &topic.partitions {
            let response = ListOffsetsPartitionResponse::default()
                .with_partition_index(partition.partition_index);
            let found = match &parsed {
                Ok(name) => offset_for(broker, name, partition).await,
                Err(_) => Err(ResponseError::UnknownTopicOrPartition),
            };
            partitions.push(match found {
                Ok((timestamp, offset)) => response.with_timestamp(timestamp).with_offset(offset),
                Err(error) => response
                    .with_error_code(error.code())
                    .with_timestamp(-1)
                    .with_offset(-1),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

/// `(timestamp, offset)` for one partition; the timestamp is -1 for the earliest and latest.
async fn offset_for(
    broker: &Broker,
    topic: &TopicName,
    partition: &ListOffsetsPartition,
) -> Result<(i64, i64), ResponseError> {
    let index = PartitionId::try_from(partition.partition_index)
        .ok()
        .ok_or(ResponseError::UnknownTopicOrPartition)?;
    match partition.timestamp {
        LATEST_TIMESTAMP | EARLIEST_TIMESTAMP => {
            let earliest = partition.timestamp == EARLIEST_TIMESTAMP;
            let name = topic.to_string();
            let described = broker
                .blocking(move |engine| engine.describe_partition(&name, index))
                .await?
                .map_err(|error| error_code::topic_error(&error))?;
            let offset = match earliest {
                true => described.log_start_offset,
                false => described.log_end_offset,
            };
            Ok((-1, offset_i64(offset.0)))
        }
        timestamp if timestamp >= 0 => {
            let found = broker
                .engine
                .fetch_by_timestamp(topic, index, TimestampMs(timestamp))
                .await
                .map_err(|error| error_code::read_error(&error))?;
            Ok(found.map_or((-1, -1), |found| {
                (found.timestamp.0, offset_i64(found.offset.0))
            }))
        }
        // The offset of the largest timestamp (-3) and the tiered-storage lookups (-4, -5) come
        // with versions this broker does not list.
        _ => Err(ResponseError::InvalidRequest),
    }
}
