//! Decoding the whole batches an engine fetch returns into the records a consumer receives
//! ([`ConsumerRecord`]).

use crate::engine::{ConsumerRecord, consumer_record};
use crate::format::Batch;
use crate::format::batch::BatchIter;
use crate::types::{Offset, TopicPartition};

use super::error::PollError;

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
