//! The log's side of its idempotent producers' state (`producer_state.rs`): rebuilt at open and
//! after a truncation by replaying the batch headers of the log.

use super::PartitionLog;
use super::producer_state::{ProducerBatchHeader, ProducerStateTable};
use crate::error::StorageError;
use crate::types::{Offset, TimestampMs};

impl PartitionLog {
    /// The idempotent producers' state, as of the log end.
    pub fn producer_state(&self) -> &ProducerStateTable {
        &self.producers
    }

    /// Rebuilds the producers' state from the log's batches: every producer batch from the first
    /// segment's base to the log end, recorded as written.
    pub(super) fn rebuild_producer_state(&mut self) -> Result<(), StorageError> {
        self.producers.clear();
        let from = self.segments.slots()[0].base_offset();
        self.replay_producers_from(from)
    }

    /// Records in the table every producer batch whose last offset is `from` or later.
    fn replay_producers_from(&mut self, from: Offset) -> Result<(), StorageError> {
        let first = self.segments.floor_index(from);
        let mut table = std::mem::take(&mut self.producers);
        let mut result = Ok(());
        for index in first..self.segments.len() {
            result = self.open_segment(index).and_then(|segment| {
                segment.for_each_header_from(from, |header| {
                    if let Some(producer) = ProducerBatchHeader::of(header) {
                        let last_offset = Offset(header.last_offset().max(0) as u64);
                        table.update(&producer, last_offset, TimestampMs(header.max_timestamp));
                    }
                })
            });
            if result.is_err() {
                break;
            }
        }
        self.producers = table;
        result
    }
}
