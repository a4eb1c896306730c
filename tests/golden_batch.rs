//! Golden bytes for RecordBatch v2: a batch encoded by seglog's `BatchBuilder` is, byte for byte,
//! the batch Kafka's `MemoryRecordsBuilder`/`DefaultRecord` write for the same records.
//!
//! How: the expected bytes are assembled in this file, field by field, from the header table and
//! record layout in KAFKA-FORMAT.md (big-endian integers, zig-zag varints written by hand here, the
//! CRC-32C over bytes 21..end computed with the `crc32c` crate), never with seglog's encoder. The
//! records cover keyed and null-key records, a tombstone, headers with a null value, a value long
//! enough for a two-byte length varint, and timestamps out of order (so the max timestamp is not
//! the last and a timestamp delta is negative). A hex fixture of a tiny batch, derived once by hand
//! (and cross-checked against the field-by-field builder below), pins the encoding so that a
//! future encoder change is caught even if both builders drift together. Finally the log must
//! store a producer's batch unchanged except for the stamped base offset.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::format::{Batch, BatchBuilder, NewRecord};
use seglog::io::storage_from_env;
use seglog::types::{Offset, TimestampMs};
use support::batches::{T0, batch_of, record};
use support::logs::{open_log, open_options};

mod support;

/// One record as the test describes it.
struct TestRecord {
    timestamp_ms: i64,
    key: Option<&'static [u8]>,
    value: Option<Vec<u8>>,
    headers: Vec<(&'static str, Option<&'static [u8]>)>,
}

/// Zig-zag varint/varlong, protobuf style: `(v << 1) ^ (v >> 63)`, then 7 bits per byte, low
/// group first, high bit set on every byte but the last. For values that fit an `i32` this is
/// exactly the 32-bit varint Kafka writes.
fn put_zigzag(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push((zigzag as u8 & 0x7f) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

/// `length varint` + bytes, or `-1` for null.
fn put_nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_zigzag(out, -1),
        Some(bytes) => {
            put_zigzag(out, bytes.len() as i64);
            out.extend_from_slice(bytes);
        }
    }
}

/// One record as Kafka's `DefaultRecord.writeTo` lays it out.
fn kafka_record(record: &TestRecord, offset_delta: i32, base_timestamp: i64) -> Vec<u8> {
    let mut body = vec![0u8]; // attributes: int8, unused
    put_zigzag(&mut body, record.timestamp_ms - base_timestamp); // timestampDelta varlong
    put_zigzag(&mut body, i64::from(offset_delta)); // offsetDelta varint
    put_nullable(&mut body, record.key); // keyLength + key
    put_nullable(&mut body, record.value.as_deref()); // valueLength + value
    put_zigzag(&mut body, record.headers.len() as i64); // headersCount
    for (key, value) in &record.headers {
        put_nullable(&mut body, Some(key.as_bytes())); // header key: never null
        put_nullable(&mut body, *value);
    }
    let mut out = Vec::new();
    put_zigzag(&mut out, body.len() as i64); // length: bytes after this field
    out.extend_from_slice(&body);
    out
}

/// The whole batch as Kafka writes it for a non-transactional, non-idempotent producer, built
/// field by field from the RecordBatch v2 header table.
fn kafka_batch(base_offset: i64, records: &[TestRecord]) -> Vec<u8> {
    let base_timestamp = records[0].timestamp_ms;
    let max_timestamp = records.iter().map(|r| r.timestamp_ms).max().unwrap();
    let mut records_section = Vec::new();
    for (index, record) in records.iter().enumerate() {
        records_section.extend(kafka_record(record, index as i32, base_timestamp));
    }
    // Bytes 21..end: everything the CRC covers.
    let mut covered = Vec::new();
    covered.extend_from_slice(&0i16.to_be_bytes()); // 21 attributes: no compression, CreateTime
    covered.extend_from_slice(&(records.len() as i32 - 1).to_be_bytes()); // 23 lastOffsetDelta
    covered.extend_from_slice(&base_timestamp.to_be_bytes()); // 27 baseTimestamp
    covered.extend_from_slice(&max_timestamp.to_be_bytes()); // 35 maxTimestamp
    covered.extend_from_slice(&(-1i64).to_be_bytes()); // 43 producerId
    covered.extend_from_slice(&(-1i16).to_be_bytes()); // 51 producerEpoch
    covered.extend_from_slice(&(-1i32).to_be_bytes()); // 53 baseSequence
    covered.extend_from_slice(&(records.len() as i32).to_be_bytes()); // 57 recordsCount
    assert_eq!(covered.len(), 61 - 21);
    covered.extend_from_slice(&records_section); // 61 records
    let total = 21 + covered.len();
    let mut batch = Vec::with_capacity(total);
    batch.extend_from_slice(&base_offset.to_be_bytes()); // 0 baseOffset
    batch.extend_from_slice(&((total - 12) as i32).to_be_bytes()); // 8 batchLength
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // 12 partitionLeaderEpoch
    batch.push(2); // 16 magic
    batch.extend_from_slice(&crc32c::crc32c(&covered).to_be_bytes()); // 17 crc
    batch.extend_from_slice(&covered);
    assert_eq!(batch.len(), total);
    batch
}

fn seglog_batch(base_offset: i64, records: &[TestRecord]) -> Bytes {
    let mut builder = BatchBuilder::new(base_offset);
    for record in records {
        let new_record = NewRecord {
            timestamp_ms: record.timestamp_ms,
            key: record.key,
            value: record.value.as_deref(),
            headers: &record.headers,
        };
        let before = builder.size_bytes_with(&new_record);
        builder.push(&new_record);
        assert_eq!(
            builder.size_bytes(),
            before,
            "size_bytes_with predicts push"
        );
    }
    builder.build().unwrap()
}

/// Five records: keyed, null key, tombstone, two headers (one null value), a 200-byte value.
/// Timestamps 1000, 1005, 1003, 999, 1002 around a real epoch: the max (…1005) is the second
/// record and one delta is negative.
fn mixed_records() -> Vec<TestRecord> {
    const T: i64 = 1_700_000_000_000;
    vec![
        TestRecord {
            timestamp_ms: T + 1000,
            key: Some(b"key-0"),
            value: Some(b"value-0".to_vec()),
            headers: vec![],
        },
        TestRecord {
            timestamp_ms: T + 1005,
            key: None,
            value: Some(b"no key here".to_vec()),
            headers: vec![],
        },
        TestRecord {
            timestamp_ms: T + 1003,
            key: Some(b"key-2"),
            value: None,
            headers: vec![],
        },
        TestRecord {
            timestamp_ms: T + 999,
            key: Some(b"key-3"),
            value: Some(b"with headers".to_vec()),
            headers: vec![("trace-id", Some(b"abc123")), ("empty", None)],
        },
        TestRecord {
            timestamp_ms: T + 1002,
            key: Some(b"key-4"),
            value: Some((0..200u8).collect()),
            headers: vec![],
        },
    ]
}

/// The tiny batch of the hex fixture: offset 0, one record, key "k", value "v",
/// timestamp 1_700_000_000_000 (0x0000018bcfe56800), no headers.
fn tiny_records() -> Vec<TestRecord> {
    vec![TestRecord {
        timestamp_ms: 1_700_000_000_000,
        key: Some(b"k"),
        value: Some(b"v".to_vec()),
        headers: vec![],
    }]
}

/// Derived by hand from the format table, field by field:
/// `0000000000000000` baseOffset 0 · `0000003a` batchLength 58 (70 − 12) · `ffffffff` epoch −1 ·
/// `02` magic · `e99b8dd8` CRC-32C of bytes 21..70 · `0000` attributes · `00000000` lastOffsetDelta
/// · `0000018bcfe56800` baseTimestamp · `0000018bcfe56800` maxTimestamp · `ffffffffffffffff`
/// producerId · `ffff` producerEpoch · `ffffffff` baseSequence · `00000001` recordsCount · record:
/// `10` length 8 · `00` attributes · `00` timestampDelta 0 · `00` offsetDelta 0 · `02` keyLength 1 ·
/// `6b` "k" · `02` valueLength 1 · `76` "v" · `00` headersCount 0.
const TINY_BATCH_HEX: &str = concat!(
    "0000000000000000",
    "0000003a",
    "ffffffff",
    "02",
    "e99b8dd8",
    "0000",
    "00000000",
    "0000018bcfe56800",
    "0000018bcfe56800",
    "ffffffffffffffff",
    "ffff",
    "ffffffff",
    "00000001",
    // record: length, attributes, timestampDelta, offsetDelta, keyLength, key, valueLength,
    // value, headersCount
    "10",
    "00",
    "00",
    "00",
    "02",
    "6b",
    "02",
    "76",
    "00",
);

fn from_hex(hex: &str) -> Vec<u8> {
    assert_eq!(hex.len() % 2, 0);
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn the_hand_written_zigzag_matches_known_encodings() {
    // Guards the test's own encoder: protobuf zig-zag reference values.
    for (value, expected) in [
        (0i64, &[0x00u8][..]),
        (-1, &[0x01]),
        (1, &[0x02]),
        (-64, &[0x7f]),
        (64, &[0x80, 0x01]),
        (200, &[0x90, 0x03]),
        (-6, &[0x0b]),
        (i64::from(i32::MIN), &[0xff, 0xff, 0xff, 0xff, 0x0f]),
    ] {
        let mut out = Vec::new();
        put_zigzag(&mut out, value);
        assert_eq!(out, expected, "zig-zag of {value}");
    }
}

#[test]
fn builder_output_equals_kafkas_bytes_for_mixed_records() {
    let records = mixed_records();
    let expected = kafka_batch(0, &records);
    let built = seglog_batch(0, &records);
    assert_eq!(built.len(), expected.len(), "batch length");
    for (position, (got, want)) in built.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "byte {position} differs");
    }
    // Spot checks of the fields the test cares most about.
    assert_eq!(&built[23..27], &4i32.to_be_bytes(), "lastOffsetDelta");
    assert_eq!(
        &built[35..43],
        &(1_700_000_000_000i64 + 1005).to_be_bytes(),
        "maxTimestamp is the second record's, not the last record's"
    );
}

#[test]
fn builder_output_equals_kafkas_bytes_at_a_nonzero_base_offset() {
    let records = mixed_records();
    let base_offset = 0x0102_0304_0506_0708;
    assert_eq!(
        seglog_batch(base_offset, &records).to_vec(),
        kafka_batch(base_offset, &records)
    );
    // Only the base offset differs from the batch at offset 0: it is outside the CRC.
    let at_zero = kafka_batch(0, &records);
    let at_base = kafka_batch(base_offset, &records);
    assert_eq!(&at_zero[8..], &at_base[8..]);
}

#[test]
fn single_records_of_every_shape_match_kafkas_bytes() {
    for record in mixed_records() {
        let records = [record];
        assert_eq!(
            seglog_batch(7, &records).to_vec(),
            kafka_batch(7, &records),
            "a batch of one record"
        );
    }
}

#[test]
fn tiny_batch_matches_the_hex_fixture() {
    let fixture = from_hex(TINY_BATCH_HEX);
    assert_eq!(fixture.len(), 70);
    assert_eq!(
        kafka_batch(0, &tiny_records()),
        fixture,
        "field-by-field builder vs hex fixture"
    );
    assert_eq!(
        seglog_batch(0, &tiny_records()).to_vec(),
        fixture,
        "BatchBuilder vs hex fixture"
    );
    assert_eq!(
        crc32c::crc32c(&fixture[21..]),
        0xe99b_8dd8,
        "the fixture's CRC-32C"
    );
}

#[test]
fn kafkas_bytes_decode_to_the_records_they_hold() {
    let records = mixed_records();
    let bytes = Bytes::from(kafka_batch(42, &records));
    let batch = Batch::decode(&bytes, u64::MAX).unwrap();
    batch.validate_records(|_| {}).unwrap();
    let header = batch.header();
    assert_eq!(header.base_offset, 42);
    assert_eq!(header.last_offset(), 46);
    assert_eq!(header.partition_leader_epoch, -1);
    assert_eq!(header.magic, 2);
    assert_eq!(header.records_count, 5);
    assert_eq!(header.producer_id, -1);
    assert_eq!(header.producer_epoch, -1);
    assert_eq!(header.base_sequence, -1);
    assert_eq!(header.base_timestamp, records[0].timestamp_ms);
    assert_eq!(header.max_timestamp, records[1].timestamp_ms);
    let decoded = batch.records().unwrap();
    assert_eq!(decoded.len(), records.len());
    for (index, (got, want)) in decoded.iter().zip(&records).enumerate() {
        assert_eq!(got.offset_delta, index as i32);
        assert_eq!(
            header.base_timestamp + got.timestamp_delta,
            want.timestamp_ms
        );
        assert_eq!(got.key.as_deref(), want.key);
        assert_eq!(got.value.as_deref(), want.value.as_deref());
        let headers: Vec<(&str, Option<&[u8]>)> = got
            .headers
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_deref()))
            .collect();
        assert_eq!(headers, want.headers);
    }
}

#[test]
fn the_log_stores_a_producer_batch_unchanged_but_for_its_stamped_base_offset() {
    let dir = tempfile::tempdir().unwrap();
    let now = TimestampMs(T0);
    let options = open_options(false, 0, now.0);
    let partition_dir = dir.path().join("golden-0");
    let config = LogConfig::default();
    let mut log = open_log(
        storage_from_env(),
        &partition_dir,
        "golden",
        config,
        options,
    );
    // Occupy offsets 0..=2 so that the Kafka batch lands at offset 3.
    let first: Vec<_> = (0..3)
        .map(|i| record(now.0 + i, None, Some(b"x")))
        .collect();
    log.append(batch_of(&first), now).unwrap();
    // A producer sends base offset 0; the log assigns 3.
    let producer_bytes = kafka_batch(0, &mixed_records());
    let info = log
        .append(Bytes::from(producer_bytes.clone()), now)
        .unwrap();
    assert_eq!(info.first_offset, Offset(3));
    assert_eq!(info.last_offset, Offset(7));
    let fetched = log.read(Offset(3), u64::MAX).unwrap().records;
    assert_eq!(fetched.len(), producer_bytes.len());
    assert_eq!(&fetched[..8], &3i64.to_be_bytes(), "stamped base offset");
    assert_eq!(
        &fetched[8..],
        &producer_bytes[8..],
        "every other byte unchanged"
    );
    assert_eq!(fetched.to_vec(), kafka_batch(3, &mixed_records()));
}
