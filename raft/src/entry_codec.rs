//! Raft entries as Kafka record batches: the partition's log holds nothing else.
//!
//! - A **normal** entry is one producer's RecordBatch, stored as sent; the log stamps its
//!   `baseOffset` and the entry's term into `partitionLeaderEpoch`.
//! - A **blank** entry (a new leader's first) is a control batch of one record whose key is the
//!   control key (version 0, type [`RAFT_BLANK`]) and whose value is empty.
//! - A **membership** entry is a control batch of one record, key (version 0, type
//!   [`RAFT_MEMBERSHIP`]), value the membership as JSON.
//!
//! Consumers skip control batches, as Kafka's consumers skip transaction markers; Kafka's tools
//! read the control types as unknown ones. Control batches carry timestamp -1, so every replica
//! writes the same bytes for them.

use bytes::{BufMut, Bytes, BytesMut};
use openraft::{EntryPayload, LogId};
use seglog::format::{Batch, BatchBuilder, NewRecord};
use serde::{Deserialize, Serialize};

use crate::{Entry, Membership, TypeConfig};

/// The control record type of a blank entry (outside Kafka's 0–6).
pub const RAFT_BLANK: i16 = 100;
/// The control record type of a membership entry.
pub const RAFT_MEMBERSHIP: i16 = 101;
const CONTROL_KEY_VERSION: i16 = 0;

/// A normal entry's payload: exactly one RecordBatch (magic 2), as a producer sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordBatch(pub Bytes);

/// What a committed normal entry got: the offsets of its first and last records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appended {
    /// The offset of the batch's first record.
    pub base_offset: u64,
    /// The offset of the batch's last record.
    pub last_offset: u64,
}

/// Why an entry cannot be stored as a batch, or a batch read as an entry.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// A normal entry's payload is not exactly one valid data batch.
    #[error("a normal entry must hold exactly one valid RecordBatch: {0}")]
    InvalidPayload(String),
    /// A batch read from the log is not an entry this crate writes.
    #[error("the batch at offset {offset} is not a Raft entry: {why}")]
    NotAnEntry {
        /// The batch's base offset.
        offset: i64,
        /// What is wrong with it.
        why: String,
    },
    /// The term does not fit `partitionLeaderEpoch` (`int32`).
    #[error("term {0} does not fit a batch's partitionLeaderEpoch")]
    TermTooLarge(u64),
}

/// The term as a `partitionLeaderEpoch`.
pub fn leader_epoch(log_id: &LogId<u64>) -> Result<i32, CodecError> {
    let term = log_id.leader_id.term;
    i32::try_from(term).map_err(|_| CodecError::TermTooLarge(term))
}

/// One entry as the batch to append.
pub struct Encoded {
    /// The batch (its offset and term are stamped by the log, [`stamped`]).
    pub bytes: Bytes,
    /// How many offsets it takes.
    pub record_count: u64,
    /// Its `maxTimestamp`.
    pub max_timestamp: i64,
}

/// The batch to append for `entry`. A normal entry's batch is framed-checked here; its CRC and
/// records are checked by the log's append (and, for a client's batch, by
/// [`check_client_batch`] before it became an entry).
pub fn encode(entry: &Entry) -> Result<Encoded, CodecError> {
    let bytes = match &entry.payload {
        EntryPayload::Normal(RecordBatch(bytes)) => bytes.clone(),
        EntryPayload::Blank => control_batch(RAFT_BLANK, &[]),
        EntryPayload::Membership(membership) => {
            let value = serde_json::to_vec(membership).map_err(|error| {
                CodecError::InvalidPayload(format!("membership not encodable: {error}"))
            })?;
            control_batch(RAFT_MEMBERSHIP, &value)
        }
    };
    let header = one_batch_header(&bytes)?;
    Ok(Encoded {
        record_count: u64::from(header.records_count as u32),
        max_timestamp: header.max_timestamp,
        bytes,
    })
}

/// The header of `bytes`, which must be exactly one batch.
fn one_batch_header(bytes: &Bytes) -> Result<seglog::format::BatchHeader, CodecError> {
    let header = seglog::format::BatchHeader::parse(bytes)
        .map_err(|error| CodecError::InvalidPayload(error.to_string()))?;
    if header.size_bytes() != bytes.len() as u64 {
        return Err(CodecError::InvalidPayload(format!(
            "{} bytes are not one batch of {}",
            bytes.len(),
            header.size_bytes()
        )));
    }
    Ok(header)
}

/// `encoded` with `baseOffset` and `partitionLeaderEpoch` set as the log sets them (neither is
/// covered by the CRC).
pub fn stamped(encoded: &Bytes, base_offset: u64, leader_epoch: i32) -> Bytes {
    let mut bytes = BytesMut::from(&encoded[..]);
    seglog::format::batch::set_base_offset(&mut bytes, base_offset as i64);
    seglog::format::batch::set_partition_leader_epoch(&mut bytes, leader_epoch);
    bytes.freeze()
}

/// Checks a client's batch before it becomes an entry: exactly one data batch (not a control
/// one) whose CRC and records check out, so that no replica's log refuses it.
pub fn check_client_batch(bytes: &Bytes) -> Result<seglog::format::BatchHeader, CodecError> {
    let invalid =
        |error: seglog::format::DecodeError| CodecError::InvalidPayload(error.to_string());
    let header = one_batch_header(bytes)?;
    let batch = Batch::decode(bytes, u64::MAX).map_err(invalid)?;
    batch.validate_records(|_| {}).map_err(invalid)?;
    if header.attributes.is_control() {
        return Err(CodecError::InvalidPayload("a control batch".to_string()));
    }
    Ok(header)
}

fn control_batch(control_type: i16, value: &[u8]) -> Bytes {
    let mut key = BytesMut::with_capacity(4);
    key.put_i16(CONTROL_KEY_VERSION);
    key.put_i16(control_type);
    let mut builder = BatchBuilder::new(0);
    builder.push(&NewRecord {
        timestamp_ms: -1,
        key: Some(&key),
        value: Some(value),
        headers: &[],
    });
    // One record: never empty.
    builder.build_control().unwrap_or_default()
}

/// The entry at `index` that `batch` stores.
pub fn decode(index: u64, batch: &Batch) -> Result<Entry, CodecError> {
    let header = batch.header();
    let not_an_entry = |why: &str| CodecError::NotAnEntry {
        offset: header.base_offset,
        why: why.to_string(),
    };
    let term = u64::try_from(header.partition_leader_epoch)
        .map_err(|_| not_an_entry("negative partitionLeaderEpoch"))?;
    let log_id = LogId::new(openraft::CommittedLeaderId::new(term, 0), index);
    if !header.attributes.is_control() {
        let payload = EntryPayload::Normal(RecordBatch(batch.bytes().clone()));
        return Ok(Entry { log_id, payload });
    }
    let records = batch
        .records()
        .map_err(|error| not_an_entry(&error.to_string()))?;
    let [record] = records.as_slice() else {
        return Err(not_an_entry("a control batch of more than one record"));
    };
    let key = record.key.as_deref().unwrap_or_default();
    let control_type = match key {
        [0, 0, high, low] => i16::from_be_bytes([*high, *low]),
        _ => return Err(not_an_entry("no control key")),
    };
    let payload = match control_type {
        RAFT_BLANK => EntryPayload::Blank,
        RAFT_MEMBERSHIP => {
            let value = record.value.as_deref().unwrap_or_default();
            let membership: Membership = serde_json::from_slice(value)
                .map_err(|error| not_an_entry(&format!("membership: {error}")))?;
            EntryPayload::Membership(membership)
        }
        other => return Err(not_an_entry(&format!("control type {other}"))),
    };
    Ok(openraft::Entry::<TypeConfig> { log_id, payload })
}

/// The offsets a normal entry's batch got, from the batch as stored.
pub fn appended(header: &seglog::format::BatchHeader) -> Appended {
    Appended {
        base_offset: header.base_offset as u64,
        last_offset: header.last_offset() as u64,
    }
}
