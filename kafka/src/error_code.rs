//! Engine errors as Kafka error codes. Each mapping names the error Kafka's broker answers in the
//! same situation; what Kafka has no word for is `UNKNOWN_SERVER_ERROR`.

use kafka_protocol::error::ResponseError;
use seglog::error::{AppendError, EngineUnavailable, ReadError, TopicError};

/// The error code of a failed produce to one partition.
pub(crate) fn append_error(error: &AppendError) -> ResponseError {
    match error {
        AppendError::Storage(_) | AppendError::PartitionOpen { .. } => {
            ResponseError::KafkaStorageError
        }
        AppendError::InvalidBatch { .. } | AppendError::Empty => ResponseError::CorruptMessage,
        AppendError::BatchTooLarge { .. } => ResponseError::MessageTooLarge,
        AppendError::NullKeyInCompactedTopic { .. } => ResponseError::InvalidRecord,
        AppendError::AppendTooLarge { .. } => ResponseError::RecordListTooLarge,
        AppendError::UnknownPartition { .. } => ResponseError::UnknownTopicOrPartition,
        AppendError::InternalTopic { .. } => ResponseError::InvalidTopicException,
        AppendError::Unavailable(unavailable) => unavailable_error(unavailable),
        AppendError::InvalidProducerEpoch { .. } => ResponseError::InvalidProducerEpoch,
        AppendError::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
        _ => ResponseError::UnknownServerError,
    }
}

/// The error code of a failed fetch or offset lookup on one partition.
pub(crate) fn read_error(error: &ReadError) -> ResponseError {
    match error {
        ReadError::Storage(_) | ReadError::PartitionOpen { .. } => ResponseError::KafkaStorageError,
        ReadError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        ReadError::UnknownPartition { .. } => ResponseError::UnknownTopicOrPartition,
        ReadError::InvalidRecord { .. } => ResponseError::CorruptMessage,
        ReadError::Unavailable(unavailable) => unavailable_error(unavailable),
        _ => ResponseError::UnknownServerError,
    }
}

/// The error code of a failed topic administration call.
pub(crate) fn topic_error(error: &TopicError) -> ResponseError {
    match error {
        TopicError::TopicName(_) => ResponseError::InvalidTopicException,
        TopicError::Config(_) => ResponseError::InvalidConfig,
        TopicError::Storage(_) => ResponseError::KafkaStorageError,
        TopicError::TopicExists { .. } => ResponseError::TopicAlreadyExists,
        TopicError::UnknownTopic { .. } | TopicError::UnknownPartition { .. } => {
            ResponseError::UnknownTopicOrPartition
        }
        TopicError::InternalTopic { .. } => ResponseError::InvalidRequest,
        TopicError::InvalidPartitionCount { .. } => ResponseError::InvalidPartitions,
        TopicError::Unavailable(unavailable) => unavailable_error(unavailable),
        _ => ResponseError::UnknownServerError,
    }
}

/// Back-pressure is retriable (`REQUEST_TIMED_OUT`: the client retries after its backoff); a
/// closed, failed or offline engine is a storage error, as a failed log directory is in Kafka.
pub(crate) fn unavailable_error(error: &EngineUnavailable) -> ResponseError {
    match error {
        EngineUnavailable::QueueFull { .. } | EngineUnavailable::TooManyBytesInFlight { .. } => {
            ResponseError::RequestTimedOut
        }
        _ => ResponseError::KafkaStorageError,
    }
}
