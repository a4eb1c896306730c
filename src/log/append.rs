//! The append path: validate the producer's batches, assign offsets, roll if needed, write, index,
//! and flush per the flush policy (Kafka's `UnifiedLog.append` with `LogValidator`, for a leader).

use bytes::{Bytes, BytesMut};

use super::PartitionLog;
use crate::config::TimestampType;
use crate::error::{AppendError, StorageError};
use crate::format::batch::{BatchIter, set_base_offset, set_log_append_time};
use crate::segment::{AppendedBatches, Segment};
use crate::types::{Offset, TimestampMs};

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub record_count: u64,
    pub batch_count: usize,
    /// The largest timestamp appended (the append time for `LogAppendTime`).
    pub max_timestamp: TimestampMs,
    /// `LogAppendTime` stamped on the batches, if the log uses it.
    pub log_append_time: Option<TimestampMs>,
    /// True when the append was synced before returning (flush policy).
    pub durable: bool,
}

/// One validated batch of an append, with what offset assignment needs.
#[derive(Debug, Clone, Copy)]
struct IncomingBatch {
    position: usize,
    record_count: u64,
    max_timestamp: i64,
}

impl PartitionLog {
    /// Appends one or more whole batches (as a producer sends them). Offsets in the batches are
    /// ignored: the log assigns them from the log end offset, as Kafka's leader does.
    pub fn append(&mut self, batches: Bytes, now: TimestampMs) -> Result<AppendInfo, AppendError> {
        self.check_not_failed()?;
        let incoming = self.validate(&batches)?;
        let record_count: u64 = incoming.iter().map(|batch| batch.record_count).sum();
        let first_offset = self.log_end_offset();
        let last_offset = first_offset
            .checked_add(record_count - 1)
            .filter(|offset| offset.0 <= i64::MAX as u64)
            .ok_or(AppendError::OffsetOverflow {
                next_offset: first_offset,
                record_count,
            })?;
        let log_append_time = (self.config.message_timestamp_type == TimestampType::LogAppendTime)
            .then_some(now);
        let mut bytes = BytesMut::from(batches);
        let appended = assign_offsets(&mut bytes, &incoming, first_offset, log_append_time);
        self.maybe_roll(bytes.len() as u64, last_offset, now)?;
        let first_batch_timestamp = TimestampMs(incoming[0].max_timestamp);
        let interval = self.config.index_interval_bytes;
        if let Err(error) = self.active_mut().append(&bytes, appended, first_batch_timestamp, interval) {
            self.failed = true;
            return Err(error.into());
        }
        let durable = self.flush_per_policy(record_count, now)?;
        Ok(AppendInfo {
            first_offset,
            last_offset,
            record_count,
            batch_count: incoming.len(),
            max_timestamp: appended.max_timestamp,
            log_append_time,
            durable,
        })
    }

    /// Checks every batch: framing, CRC, magic 2, `max.message.bytes`, and the records themselves.
    fn validate(&self, batches: &Bytes) -> Result<Vec<IncomingBatch>, AppendError> {
        let max_bytes = self.config.max_message_bytes;
        if batches.len() as u64 > self.config.segment_bytes {
            return Err(AppendError::BatchTooLarge {
                size_bytes: batches.len() as u64,
                max_bytes: self.config.segment_bytes,
            });
        }
        let mut incoming = Vec::new();
        let mut iter = BatchIter::new(batches.clone(), u64::MAX);
        loop {
            let position = iter.position();
            let Some(batch) = iter.next() else { break };
            let invalid = |source| AppendError::InvalidBatch { position, source };
            let batch = batch.map_err(invalid)?;
            if batch.size_bytes() > max_bytes {
                return Err(AppendError::BatchTooLarge {
                    size_bytes: batch.size_bytes(),
                    max_bytes,
                });
            }
            batch.validate_records().map_err(invalid)?;
            incoming.push(IncomingBatch {
                position,
                record_count: u64::from(batch.header().records_count as u32),
                max_timestamp: batch.header().max_timestamp,
            });
        }
        if incoming.is_empty() {
            return Err(AppendError::Empty);
        }
        Ok(incoming)
    }

    /// Starts a new segment at the log end offset if the active one cannot take `incoming_bytes`
    /// (size, age, full index, relative offset overflow). The old segment is sealed and synced,
    /// which moves the recovery point to its end.
    fn maybe_roll(
        &mut self,
        incoming_bytes: u64,
        last_offset: Offset,
        now: TimestampMs,
    ) -> Result<(), StorageError> {
        if !self.active().should_roll(&self.config, incoming_bytes, last_offset, now) {
            return Ok(());
        }
        self.roll(now)
    }

    /// Seals the active segment and starts a new, empty one at the log end offset.
    pub fn roll(&mut self, now: TimestampMs) -> Result<(), StorageError> {
        self.check_not_failed()?;
        let new_base_offset = self.log_end_offset();
        if self.active().is_empty() {
            return Ok(());
        }
        if let Err(error) = self.active_mut().seal() {
            self.failed = true;
            return Err(error);
        }
        self.recovery_point = self.recovery_point.max(new_base_offset);
        let segment = Segment::create(self.storage.as_ref(), &self.dir, new_base_offset, &self.config, now)?;
        self.segments.push(segment);
        self.sync_dir()
    }
}

/// Stamps base offsets (and `LogAppendTime`) into the batches and returns what the segment needs
/// for its indexes.
fn assign_offsets(
    bytes: &mut [u8],
    incoming: &[IncomingBatch],
    first_offset: Offset,
    log_append_time: Option<TimestampMs>,
) -> AppendedBatches {
    let mut next_offset = first_offset.0;
    let mut max_timestamp = i64::MIN;
    let mut offset_of_max_timestamp = first_offset;
    for (batch_index, batch) in incoming.iter().enumerate() {
        let end = incoming
            .get(batch_index + 1)
            .map_or(bytes.len(), |next| next.position);
        let batch_bytes = &mut bytes[batch.position..end];
        set_base_offset(batch_bytes, next_offset as i64);
        let timestamp = match log_append_time {
            Some(now) => {
                set_log_append_time(batch_bytes, now.0);
                now.0
            }
            None => batch.max_timestamp,
        };
        next_offset += batch.record_count;
        if timestamp > max_timestamp {
            max_timestamp = timestamp;
            offset_of_max_timestamp = Offset(next_offset - 1);
        }
    }
    AppendedBatches {
        last_offset: Offset(next_offset - 1),
        max_timestamp: TimestampMs(max_timestamp),
        offset_of_max_timestamp,
    }
}
