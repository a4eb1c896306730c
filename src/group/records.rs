//! Records as a consumer receives them ([`ConsumerRecord`]), decoded from the whole batches an
//! engine fetch returns.

use bytes::Bytes;

use crate::config::TimestampType;
use crate::format::batch::BatchIter;
use crate::format::{Batch, BatchHeader, Record, RecordHeader};
use crate::types::{Offset, PartitionId, TimestampMs, TopicName, TopicPartition};

use super::error::PollError;

/// One record returned by `poll`. Key, value and header bytes share the fetched buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: TopicName,
    pub partition: PartitionId,
    pub offset: Offset,
    /// The batch's max timestamp for `LogAppendTime` batches, else the record's create time.
    pub timestamp: TimestampMs,
    pub timestamp_type: TimestampType,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
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

/// The data records at or after the fetch offset, and the offset after the last batch.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub(crate) records: Vec<ConsumerRecord>,
    pub(crate) next_offset: Offset,
}

/// Decodes the batches fetched from `tp` at offset `from`, skipping control batches (transaction
/// markers are not data) and the records before `from` in the first batch.
pub(crate) fn decode_fetched(
    tp: &TopicPartition,
    from: Offset,
    fetched: BatchIter,
) -> Result<Decoded, PollError> {
    let mut decoded = Decoded {
        records: Vec::new(),
        next_offset: from,
    };
    for batch in fetched {
        let corrupt = |source| PollError::Corrupt {
            partition: tp.clone(),
            offset: decoded.next_offset,
            source,
        };
        let batch = batch.map_err(corrupt)?;
        if !batch.header().attributes.is_control() {
            push_records(tp, &batch, from, &mut decoded.records).map_err(corrupt)?;
        }
        let after = u64::try_from(batch.last_offset().saturating_add(1)).unwrap_or(0);
        decoded.next_offset = decoded.next_offset.max(Offset(after));
    }
    Ok(decoded)
}

fn push_records(
    tp: &TopicPartition,
    batch: &Batch,
    from: Offset,
    out: &mut Vec<ConsumerRecord>,
) -> Result<(), crate::format::DecodeError> {
    for record in batch.records()? {
        match consumer_record(tp, batch.header(), record) {
            Some(record) if record.offset >= from => out.push(record),
            _ => {}
        }
    }
    Ok(())
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
