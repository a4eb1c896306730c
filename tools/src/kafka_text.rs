//! The lines Kafka's `kafka.tools.DumpLogSegments` prints for a batch and for a record, with
//! Kafka's field names, order and value spellings (`OptionalLong.empty`, `CreateTime`, unsigned
//! CRC, lower-case codec names), and the same fields as `dump --format json` objects.

use std::borrow::Cow;

use seglog::format::{BatchAttributes, BatchHeader, Record};
use serde::Serialize;

use crate::record_view::{lossy, record_offset, record_timestamp};

/// Kafka's `RecordBatch.NO_SEQUENCE`.
const NO_SEQUENCE: i32 = -1;

/// `baseOffset: 0 lastOffset: 2 count: 3 ... position: 0 CreateTime: 1700000000002 size: 95
/// magic: 2 compresscodec: none crc: 1234567890 isvalid: true`.
pub fn batch_line(header: &BatchHeader, position: u64, is_valid: bool) -> String {
    format!(
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} \
         producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} \
         deleteHorizonMs: {} position: {position} {}: {} size: {} magic: {} compresscodec: {} \
         crc: {} isvalid: {is_valid}",
        header.base_offset,
        header.last_offset(),
        header.records_count,
        header.base_sequence,
        last_sequence(header),
        header.producer_id,
        header.producer_epoch,
        header.partition_leader_epoch,
        header.attributes.is_transactional(),
        header.attributes.is_control(),
        delete_horizon(header),
        timestamp_type_name(header.attributes),
        header.max_timestamp,
        header.size_bytes(),
        header.magic,
        compression_name(header.attributes),
        header.crc,
    )
}

/// `| offset: 0 CreateTime: 1700000000000 keySize: 3 valueSize: 5 sequence: -1 headerKeys: []`,
/// then ` key: abc payload: hello` when `print_data` (never for control batches, as in Kafka).
pub fn record_line(header: &BatchHeader, record: &Record, print_data: bool) -> String {
    let header_keys: Vec<&str> = record
        .headers
        .iter()
        .map(|header| header.key.as_str())
        .collect();
    let mut line = format!(
        "| offset: {} {}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
        record_offset(header, record),
        timestamp_type_name(header.attributes),
        record_timestamp(header, record),
        nullable_size(record.key.as_ref().map(|key| key.len())),
        nullable_size(record.value.as_ref().map(|value| value.len())),
        record_sequence(header, record),
        header_keys.join(","),
    );
    if header.attributes.is_control() {
        line.push_str(&control_description(record));
    } else if print_data {
        if let Some(key) = &record.key {
            line.push_str(&format!(" key: {}", lossy(key)));
        }
        if let Some(value) = &record.value {
            line.push_str(&format!(" payload: {}", lossy(value)));
        }
    }
    line
}

/// A batch as `dump --format json` writes it: [`batch_line`]'s fields in snake case, in the
/// same order; field order is the documented output order.
#[derive(Debug, Serialize)]
pub struct BatchJson {
    base_offset: i64,
    last_offset: i64,
    count: i32,
    base_sequence: i32,
    last_sequence: i32,
    producer_id: i64,
    producer_epoch: i16,
    partition_leader_epoch: i32,
    is_transactional: bool,
    is_control: bool,
    /// Null where the batch has none (Kafka's `OptionalLong.empty`).
    delete_horizon_ms: Option<i64>,
    position: u64,
    timestamp_type: &'static str,
    base_timestamp: i64,
    max_timestamp: i64,
    size: u64,
    magic: i8,
    compression: Cow<'static, str>,
    crc: u32,
    crc_valid: bool,
}

pub fn batch_json(header: &BatchHeader, position: u64, crc_valid: bool) -> BatchJson {
    BatchJson {
        base_offset: header.base_offset,
        last_offset: header.last_offset(),
        count: header.records_count,
        base_sequence: header.base_sequence,
        last_sequence: last_sequence(header),
        producer_id: header.producer_id,
        producer_epoch: header.producer_epoch,
        partition_leader_epoch: header.partition_leader_epoch,
        is_transactional: header.attributes.is_transactional(),
        is_control: header.attributes.is_control(),
        delete_horizon_ms: header
            .attributes
            .has_delete_horizon()
            .then_some(header.base_timestamp),
        position,
        timestamp_type: timestamp_type_name(header.attributes),
        base_timestamp: header.base_timestamp,
        max_timestamp: header.max_timestamp,
        size: header.size_bytes(),
        magic: header.magic,
        compression: compression_name(header.attributes),
        crc: header.crc,
        crc_valid,
    }
}

/// A record as `dump --format json` writes it: [`record_line`]'s fields in snake case; `key`
/// and `payload` (UTF-8, invalid bytes replaced) only with `print_data`, never for a control
/// batch, whose records carry `control` (what Kafka prints for them) instead.
#[derive(Debug, Serialize)]
pub struct RecordJson<'a> {
    offset: i64,
    timestamp: i64,
    key_size: i64,
    value_size: i64,
    sequence: i32,
    header_keys: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    control: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<Option<Cow<'a, str>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<Option<Cow<'a, str>>>,
}

pub fn record_json<'a>(
    header: &BatchHeader,
    record: &'a Record,
    print_data: bool,
) -> RecordJson<'a> {
    let is_control = header.attributes.is_control();
    let data = print_data && !is_control;
    RecordJson {
        offset: record_offset(header, record),
        timestamp: record_timestamp(header, record),
        key_size: nullable_size(record.key.as_ref().map(|key| key.len())),
        value_size: nullable_size(record.value.as_ref().map(|value| value.len())),
        sequence: record_sequence(header, record),
        header_keys: record
            .headers
            .iter()
            .map(|header| header.key.as_str())
            .collect(),
        control: is_control.then(|| control_description(record).trim_start().to_owned()),
        key: data.then(|| record.key.as_ref().map(lossy)),
        payload: data.then(|| record.value.as_ref().map(lossy)),
    }
}

fn nullable_size(length: Option<usize>) -> i64 {
    length.map_or(-1, |length| i64::try_from(length).unwrap_or(i64::MAX))
}

/// `CreateTime` or `LogAppendTime` (Kafka's `TimestampType.toString`).
pub fn timestamp_type_name(attributes: BatchAttributes) -> &'static str {
    if attributes.is_log_append_time() {
        "LogAppendTime"
    } else {
        "CreateTime"
    }
}

/// Kafka's `CompressionType.name`; an unknown codec id is shown as such.
fn compression_name(attributes: BatchAttributes) -> Cow<'static, str> {
    match attributes.compression() {
        Ok(codec) => Cow::Borrowed(codec.name()),
        Err(_) => Cow::Owned(format!("unknown({})", attributes.0 & 0x07)),
    }
}

/// Java's `OptionalLong.toString` of the batch's delete horizon.
fn delete_horizon(header: &BatchHeader) -> String {
    if header.attributes.has_delete_horizon() {
        format!("OptionalLong[{}]", header.base_timestamp)
    } else {
        "OptionalLong.empty".to_owned()
    }
}

/// Kafka's `DefaultRecordBatch.lastSequence`.
fn last_sequence(header: &BatchHeader) -> i32 {
    if header.base_sequence == NO_SEQUENCE {
        return NO_SEQUENCE;
    }
    increment_sequence(header.base_sequence, header.last_offset_delta)
}

/// Kafka's `DefaultRecord.sequence`: the batch's base sequence plus the offset delta.
fn record_sequence(header: &BatchHeader, record: &Record) -> i32 {
    if header.base_sequence < 0 {
        return NO_SEQUENCE;
    }
    increment_sequence(header.base_sequence, record.offset_delta)
}

/// Kafka's `DefaultRecordBatch.incrementSequence`: sequences wrap from `i32::MAX` to 0.
fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    let sum = i64::from(sequence) + i64::from(increment);
    let wrapped = if sum > i64::from(i32::MAX) {
        sum - i64::from(i32::MAX) - 1
    } else {
        sum
    };
    i32::try_from(wrapped).unwrap_or(NO_SEQUENCE)
}

/// What Kafka prints for the record of a control batch: the transaction marker, or the type.
fn control_description(record: &Record) -> String {
    let Some(control_type) = record.key.as_ref().and_then(|key| be_i16(key, 2)) else {
        return " controlType: UNKNOWN(-1)".to_owned();
    };
    let name = match control_type {
        0 => "ABORT",
        1 => "COMMIT",
        2 => "LEADER_CHANGE",
        3 => "SNAPSHOT_HEADER",
        4 => "SNAPSHOT_FOOTER",
        5 => "KRAFT_VERSION",
        6 => "KRAFT_VOTERS",
        _ => "UNKNOWN",
    };
    let coordinator_epoch = record.value.as_ref().and_then(|value| be_i32(value, 2));
    match (control_type, coordinator_epoch) {
        (0 | 1, Some(epoch)) => format!(" endTxnMarker: {name} coordinatorEpoch: {epoch}"),
        _ => format!(" controlType: {name}({control_type})"),
    }
}

fn be_i16(bytes: &[u8], at: usize) -> Option<i16> {
    let field = bytes.get(at..at + 2)?;
    Some(i16::from_be_bytes([field[0], field[1]]))
}

fn be_i32(bytes: &[u8], at: usize) -> Option<i32> {
    let field = bytes.get(at..at + 4)?;
    Some(i32::from_be_bytes([field[0], field[1], field[2], field[3]]))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use seglog::format::{Batch, BatchBuilder, NewRecord};

    use super::*;

    #[test]
    fn sequences_wrap_like_kafkas() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
    }

    #[test]
    fn batch_and_record_lines_use_kafkas_names_and_order() {
        let mut builder = BatchBuilder::new(7);
        let headers: [(&str, Option<&[u8]>); 2] = [("a", Some(&b"1"[..])), ("b", None)];
        builder.push(&NewRecord {
            timestamp_ms: 1_700_000_000_000,
            key: Some(b"abc"),
            value: Some(b"hello"),
            headers: &headers,
        });
        builder.push(&NewRecord {
            timestamp_ms: 1_700_000_000_002,
            key: None,
            value: None,
            headers: &[],
        });
        let batch = Batch::decode(&builder.build().unwrap(), u64::MAX).unwrap();
        let header = batch.header();
        let expected = format!(
            "baseOffset: 7 lastOffset: 8 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 \
             producerEpoch: -1 partitionLeaderEpoch: -1 isTransactional: false isControl: false \
             deleteHorizonMs: OptionalLong.empty position: 42 CreateTime: 1700000000002 size: {} \
             magic: 2 compresscodec: none crc: {} isvalid: true",
            batch.size_bytes(),
            header.crc
        );
        assert_eq!(batch_line(header, 42, true), expected);
        let records = batch.records().unwrap();
        assert_eq!(
            record_line(header, &records[0], true),
            "| offset: 7 CreateTime: 1700000000000 keySize: 3 valueSize: 5 sequence: -1 headerKeys: [a,b] key: abc payload: hello"
        );
        assert_eq!(
            record_line(header, &records[1], true),
            "| offset: 8 CreateTime: 1700000000002 keySize: -1 valueSize: -1 sequence: -1 headerKeys: []"
        );
        assert_eq!(
            record_line(header, &records[0], false),
            "| offset: 7 CreateTime: 1700000000000 keySize: 3 valueSize: 5 sequence: -1 headerKeys: [a,b]"
        );
    }
}
