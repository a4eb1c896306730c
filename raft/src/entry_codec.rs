//! Raft entries as Kafka record batches: the partition's log holds nothing else.
//!
//! - A **normal** entry is one producer's RecordBatch, stored as sent; the log stamps its
//!   `baseOffset` and the entry's term into `partitionLeaderEpoch`. Or it is a **group** of
//!   the batches that producers sent while the leader's previous write was syncing: a control
//!   batch of one record, key (version 0, type [`RAFT_GROUP`]), value the number of batches
//!   that follow (`u32`, big-endian), then those batches as sent.
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
use seglog::format::{Batch, BatchBuilder, BatchHeader, NewRecord};
use serde::{Deserialize, Serialize};

use crate::{Entry, Membership, TypeConfig};

/// The control record type of a blank entry (outside Kafka's 0–6).
pub const RAFT_BLANK: i16 = 100;
/// The control record type of a membership entry.
pub const RAFT_MEMBERSHIP: i16 = 101;
/// The control record type of a group's first batch.
pub const RAFT_GROUP: i16 = 102;
const CONTROL_KEY_VERSION: i16 = 0;

/// A normal entry's payload: one data batch (magic 2) as a producer sent it, or a group
/// ([`group`]): its first batch names how many data batches follow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batches(pub Bytes);

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
    /// A normal entry's payload is not one data batch or a group of them.
    #[error("a normal entry must hold one data batch or a group of them: {0}")]
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

/// The batches to append for `entry`. A normal entry's batches are framed-checked here; their
/// CRCs and records are checked by the log's append (and, for a client's batch, by
/// [`check_client_batch`] before it became an entry).
pub fn encode(entry: &Entry) -> Result<Encoded, CodecError> {
    let bytes = match &entry.payload {
        EntryPayload::Normal(Batches(bytes)) => bytes.clone(),
        EntryPayload::Blank => control_batch(RAFT_BLANK, &[]),
        EntryPayload::Membership(membership) => {
            let value = serde_json::to_vec(membership).map_err(|error| {
                CodecError::InvalidPayload(format!("membership not encodable: {error}"))
            })?;
            control_batch(RAFT_MEMBERSHIP, &value)
        }
    };
    let headers = entry_headers(&bytes)?;
    let normal = matches!(entry.payload, EntryPayload::Normal(_));
    if normal && headers.len() == 1 && headers[0].attributes.is_control() {
        let why = "a control batch as a normal entry".to_string();
        return Err(CodecError::InvalidPayload(why));
    }
    Ok(Encoded {
        record_count: headers
            .iter()
            .map(|header| u64::from(header.records_count as u32))
            .sum(),
        max_timestamp: headers.iter().map(|h| h.max_timestamp).max().unwrap_or(-1),
        bytes,
    })
}

/// The headers of the batches `bytes` frames: whole batches, at least one.
fn batch_headers(bytes: &[u8]) -> Result<Vec<BatchHeader>, CodecError> {
    let mut headers = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let header = BatchHeader::parse(rest)
            .map_err(|error| CodecError::InvalidPayload(error.to_string()))?;
        let size = header.size_bytes();
        if header.batch_length <= 0 || size > rest.len() as u64 {
            return Err(CodecError::InvalidPayload(format!(
                "{} bytes end inside a batch of {size}",
                rest.len()
            )));
        }
        headers.push(header);
        rest = &rest[size as usize..];
    }
    if headers.is_empty() {
        return Err(CodecError::InvalidPayload("no batch".into()));
    }
    Ok(headers)
}

/// The headers of an entry's batches: one batch, or a group's first batch and the number of
/// data batches it names.
fn entry_headers(bytes: &Bytes) -> Result<Vec<BatchHeader>, CodecError> {
    let headers = batch_headers(bytes)?;
    let first = &headers[0];
    if !first.attributes.is_control() || headers.len() == 1 {
        return match headers.len() {
            1 => Ok(headers),
            n => Err(CodecError::InvalidPayload(format!(
                "{n} batches without a group's first batch"
            ))),
        };
    }
    let first_bytes = bytes.slice(..first.size_bytes() as usize);
    let batch = Batch::decode_without_crc_check(&first_bytes, u64::MAX)
        .map_err(|error| CodecError::InvalidPayload(error.to_string()))?;
    let named = group_size(&batch)?.ok_or_else(|| {
        CodecError::InvalidPayload("a control batch that does not start a group".into())
    })?;
    let data = &headers[1..];
    if data.len() != named as usize || data.iter().any(|h| h.attributes.is_control()) {
        return Err(CodecError::InvalidPayload(format!(
            "a group of {named} data batches holds {} batches",
            data.len()
        )));
    }
    Ok(headers)
}

/// The number of data batches a group's first batch names; `None` for any other batch.
pub fn group_size(batch: &Batch) -> Result<Option<u32>, CodecError> {
    if !batch.header().attributes.is_control() {
        return Ok(None);
    }
    let not_an_entry = |why: &str| CodecError::NotAnEntry {
        offset: batch.base_offset(),
        why: why.to_string(),
    };
    let (control_type, value) = control_record(batch).map_err(|why| not_an_entry(&why))?;
    if control_type != RAFT_GROUP {
        return Ok(None);
    }
    match <[u8; 4]>::try_from(value.as_slice()) {
        Ok(count) if u32::from_be_bytes(count) > 0 => Ok(Some(u32::from_be_bytes(count))),
        _ => Err(not_an_entry("a group's first batch names no batches")),
    }
}

/// The batches of `batches` (each one producer's, checked) as one group entry's payload.
pub fn group(batches: &[Bytes]) -> Bytes {
    if let [one] = batches {
        return one.clone();
    }
    let count = u32::try_from(batches.len()).unwrap_or(u32::MAX);
    let first = control_batch(RAFT_GROUP, &count.to_be_bytes());
    let size = first.len() + batches.iter().map(Bytes::len).sum::<usize>();
    let mut bytes = BytesMut::with_capacity(size);
    bytes.extend_from_slice(&first);
    for batch in batches {
        bytes.extend_from_slice(batch);
    }
    bytes.freeze()
}

/// `encoded` with each batch's `baseOffset` and `partitionLeaderEpoch` set as the log sets them
/// (neither is covered by the CRC), the first batch at `base_offset`.
pub fn stamped(encoded: &Bytes, base_offset: u64, leader_epoch: i32) -> Bytes {
    let mut bytes = BytesMut::from(&encoded[..]);
    let mut at = 0;
    let mut offset = base_offset;
    while let Ok(header) = BatchHeader::parse(&bytes[at..]) {
        let batch = &mut bytes[at..];
        seglog::format::batch::set_base_offset(batch, offset as i64);
        seglog::format::batch::set_partition_leader_epoch(batch, leader_epoch);
        offset += u64::from(header.records_count as u32);
        at = (at + header.size_bytes() as usize).min(bytes.len());
    }
    bytes.freeze()
}

/// Checks a client's batch before it becomes an entry: exactly one data batch (not a control
/// one) whose CRC and records check out, so that no replica's log refuses it.
pub fn check_client_batch(bytes: &Bytes) -> Result<BatchHeader, CodecError> {
    let invalid =
        |error: seglog::format::DecodeError| CodecError::InvalidPayload(error.to_string());
    let [header] = batch_headers(bytes)?[..] else {
        return Err(CodecError::InvalidPayload("more than one batch".into()));
    };
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

/// The control type and value of a control batch's one record.
fn control_record(batch: &Batch) -> Result<(i16, Vec<u8>), String> {
    let records = batch.records().map_err(|error| error.to_string())?;
    let [record] = records.as_slice() else {
        return Err("a control batch of more than one record".into());
    };
    let key = record.key.as_deref().unwrap_or_default();
    let control_type = match key {
        [0, 0, high, low] => i16::from_be_bytes([*high, *low]),
        _ => return Err("no control key".into()),
    };
    Ok((
        control_type,
        record.value.as_deref().unwrap_or_default().to_vec(),
    ))
}

/// The entry at `index` that `batches` store: one batch, or a group's batches in order.
pub fn decode(index: u64, batches: &[Batch]) -> Result<Entry, CodecError> {
    let Some(first) = batches.first() else {
        return Err(CodecError::InvalidPayload("no batch".into()));
    };
    let header = first.header();
    let not_an_entry = |why: &str| CodecError::NotAnEntry {
        offset: header.base_offset,
        why: why.to_string(),
    };
    let term = u64::try_from(header.partition_leader_epoch)
        .map_err(|_| not_an_entry("negative partitionLeaderEpoch"))?;
    let log_id = LogId::new(openraft::CommittedLeaderId::new(term, 0), index);
    if batches.len() > 1 {
        let size = batches.iter().map(|b| b.bytes().len()).sum();
        let mut bytes = BytesMut::with_capacity(size);
        for batch in batches {
            bytes.extend_from_slice(batch.bytes());
        }
        let payload = Batches(bytes.freeze());
        entry_headers(&payload.0)?;
        let payload = EntryPayload::Normal(payload);
        return Ok(Entry { log_id, payload });
    }
    if !header.attributes.is_control() {
        let payload = EntryPayload::Normal(Batches(first.bytes().clone()));
        return Ok(Entry { log_id, payload });
    }
    let (control_type, value) = control_record(first).map_err(|why| not_an_entry(&why))?;
    let payload = match control_type {
        RAFT_BLANK => EntryPayload::Blank,
        RAFT_MEMBERSHIP => {
            let membership: Membership = serde_json::from_slice(&value)
                .map_err(|error| not_an_entry(&format!("membership: {error}")))?;
            EntryPayload::Membership(membership)
        }
        other => return Err(not_an_entry(&format!("control type {other}"))),
    };
    Ok(openraft::Entry::<TypeConfig> { log_id, payload })
}

/// The offsets each data batch of a normal entry got, in order, from the batches as stored
/// (a group's first batch answers nothing).
pub fn appended(bytes: &[u8]) -> Result<Vec<(BatchHeader, Appended)>, CodecError> {
    let headers = batch_headers(bytes)?;
    Ok(headers
        .into_iter()
        .filter(|header| !header.attributes.is_control())
        .map(|header| {
            let appended = Appended {
                base_offset: header.base_offset as u64,
                last_offset: header.last_offset() as u64,
            };
            (header, appended)
        })
        .collect())
}
