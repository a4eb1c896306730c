//! DeleteRecords: moves each partition's log start offset forward (the engine's
//! `delete_records`); whole segments below it go with retention. Offset -1 means the high
//! watermark, which on this single replica is the log end offset.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsRequest,
};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsResponse, DeleteRecordsTopicResult,
};
use seglog::error::DeleteRecordsError;
use seglog::types::{Offset, PartitionId, TopicName};

use crate::broker::Broker;
use crate::error_code;
use crate::produce::offset_i64;

/// Kafka's `DeleteRecordsRequest.HIGH_WATERMARK`: delete every record.
const HIGH_WATERMARK: i64 = -1;

pub(crate) async fn answer(
    broker: &Broker,
    request: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let parsed = TopicName::parse(&topic.name.0);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for partition in &topic.partitions {
            let result = DeleteRecordsPartitionResult::default()
                .with_partition_index(partition.partition_index);
            let moved = match &parsed {
                Ok(name) => delete(broker, name, partition).await,
                Err(_) => Err(ResponseError::UnknownTopicOrPartition),
            };
            partitions.push(match moved {
                Ok(low_watermark) => result.with_low_watermark(low_watermark),
                Err(error) => result.with_error_code(error.code()).with_low_watermark(-1),
            });
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}

/// The partition's new log start offset (Kafka's low watermark).
async fn delete(
    broker: &Broker,
    topic: &TopicName,
    partition: &DeleteRecordsPartition,
) -> Result<i64, ResponseError> {
    let index = PartitionId::try_from(partition.partition_index)
        .ok()
        .ok_or(ResponseError::UnknownTopicOrPartition)?;
    let offset = match partition.offset {
        HIGH_WATERMARK => {
            let name = topic.to_string();
            broker
                .blocking(move |engine| engine.describe_partition(&name, index))
                .await?
                .map_err(|error| error_code::topic_error(&error))?
                .log_end_offset
        }
        offset => Offset(
            u64::try_from(offset)
                .ok()
                .ok_or(ResponseError::OffsetOutOfRange)?,
        ),
    };
    let moved = broker.engine.delete_records(topic, index, offset).await;
    moved
        .map(|start| offset_i64(start.0))
        .map_err(|error| delete_records_error(&error))
}

fn delete_records_error(error: &DeleteRecordsError) -> ResponseError {
    match error {
        DeleteRecordsError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        DeleteRecordsError::UnknownPartition { .. } => ResponseError::UnknownTopicOrPartition,
        DeleteRecordsError::InternalTopic { .. } => ResponseError::PolicyViolation,
        DeleteRecordsError::Storage(_) | DeleteRecordsError::PartitionOpen { .. } => {
            ResponseError::KafkaStorageError
        }
        DeleteRecordsError::Unavailable(unavailable) => error_code::unavailable_error(unavailable),
        _ => ResponseError::UnknownServerError,
    }
}
