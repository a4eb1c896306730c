//! A record as a reader receives it ([`ConsumerRecord`]): absolute offset and timestamp, key,
//! value and headers sharing the fetched buffer. [`Engine::fetch_record`](super::Engine::fetch_record)
//! returns one; consumer groups decode whole fetches into them.

use bytes::Bytes;

use crate::config::TimestampType;
use crate::format::{BatchHeader, Record, RecordHeader};
use crate::types::{Offset, PartitionId, TimestampMs, TopicName, TopicPartition};

/// One record returned by `poll`. Key, value and header bytes share the fetched buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// The record's topic.
    pub topic: TopicName,
    /// The record's partition.
    pub partition: PartitionId,
    /// The record's offset in its partition.
    pub offset: Offset,
    /// The batch's max timestamp for `LogAppendTime` batches, else the record's create time.
    pub timestamp: TimestampMs,
    /// Which of the two `timestamp` is: the batch's `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// The key; `None` for a null key.
    pub key: Option<Bytes>,
    /// The value; `None` for a null value (a tombstone).
    pub value: Option<Bytes>,
    /// The headers, in order.
    pub headers: Vec<RecordHeader>,
}

impl ConsumerRecord {
    /// The record's topic and partition.
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition {
            topic: self.topic.clone(),
            partition: self.partition,
        }
    }

    /// Bytes of key, value and headers: what `poll`'s `max_bytes` counts.
    pub fn size_bytes(&self) -> u64 {
        let header_bytes: usize = self
            .headers
            .iter()
            .map(|header| header.key.len() + header.value.as_ref().map_or(0, Bytes::len))
            .sum();
        let bytes = self.key.as_ref().map_or(0, Bytes::len)
            + self.value.as_ref().map_or(0, Bytes::len)
            + header_bytes;
        bytes as u64
    }
}

/// `record` of the batch with `header`, with its absolute offset and timestamp (the batch's max
/// timestamp for `LogAppendTime` batches). `None` for a negative offset.
pub(crate) fn consumer_record(
    tp: &TopicPartition,
    header: &BatchHeader,
    record: Record,
) -> Option<ConsumerRecord> {
    let offset = header
        .base_offset
        .saturating_add(i64::from(record.offset_delta));
    let offset = u64::try_from(offset).ok()?;
    let (timestamp, timestamp_type) = if header.attributes.is_log_append_time() {
        (header.max_timestamp, TimestampType::LogAppendTime)
    } else {
        (
            header.base_timestamp.wrapping_add(record.timestamp_delta),
            TimestampType::CreateTime,
        )
    };
    Some(ConsumerRecord {
        topic: tp.topic.clone(),
        partition: tp.partition,
        offset: Offset(offset),
        timestamp: TimestampMs(timestamp),
        timestamp_type,
        key: record.key,
        value: record.value,
        headers: record.headers,
    })
}
