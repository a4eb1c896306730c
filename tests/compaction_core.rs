//! Compaction's pure core (`seglog::cleaner::{offset_map, batch_cleaning}`) against a model. Random logs
//! of keyed records over a small key space, with tombstones, a few keyless records, headers and
//! unordered timestamps, in batches stored with every codec, are mapped and cleaned; decoding the
//! result must give exactly the model's survivors: the latest record per key, tombstones kept
//! until their delete horizon and gone in a cleaning after it, every kept record's offset, key,
//! value, headers and timestamp unchanged, and every batch valid (CRC) with its original base
//! offset, last offset delta and codec. A tiny map cleaned in rounds must converge to what one
//! big map gives. The delete-horizon test compares a cleaned batch byte for byte with one
//! assembled field by field from Kafka's `DefaultRecordBatch` layout (KIP-534: attribute bit 6,
//! `baseTimestamp` = horizon, deltas relative to it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use seglog::cleaner::batch_cleaning::{
    CleanRules, build_offset_map, clean_batch, delete_horizon_ms,
};
use seglog::cleaner::offset_map::OffsetMap;
use seglog::format::batch::field;
use seglog::format::compression::compress;
use seglog::format::{Batch, BatchBuilder, Compression, NewRecord};
use seglog::limits::{BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES};
use support::batches::owned_headers;

mod support;

const T0: i64 = 1_700_000_000_000;
const NOW: i64 = T0 + 3_600_000;
const RETENTION_MS: i64 = 86_400_000;
const HORIZON: i64 = NOW + RETENTION_MS;
const BASE_OFFSET: u64 = 1000;

type Headers = Vec<(String, Option<Vec<u8>>)>;
/// A record to write: key (an index into a small key space), value, timestamp delta, headers.
type InputRecord = (Option<u8>, Option<Vec<u8>>, i64, Headers);
/// A record to write by hand: key, value, timestamp.
type RecordSpec<'a> = (&'a [u8], Option<&'a [u8]>, i64);

/// A record as a reader sees it: what compaction must keep intact.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelRecord {
    offset: u64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Headers,
    timestamp_ms: i64,
}

/// One batch to write: its codec and its records (without offsets).
#[derive(Debug, Clone)]
struct InputBatch {
    codec: Compression,
    records: Vec<InputRecord>,
}

fn codec_strategy() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Gzip),
        Just(Compression::Snappy),
        Just(Compression::Lz4),
        Just(Compression::Zstd),
    ]
}

fn log_strategy() -> impl Strategy<Value = Vec<InputBatch>> {
    let key = prop_oneof![12 => (0u8..6).prop_map(Some), 1 => Just(None)];
    let value = proptest::option::weighted(0.75, proptest::collection::vec(any::<u8>(), 0..12));
    let header = (
        "[a-z]{1,4}",
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..4)),
    );
    let record = (
        key,
        value,
        -1_000i64..1_000,
        proptest::collection::vec(header, 0..2),
    );
    let batch = (codec_strategy(), proptest::collection::vec(record, 1..10))
        .prop_map(|(codec, records)| InputBatch { codec, records });
    proptest::collection::vec(batch, 1..8)
}

/// The same batch with its records section compressed by `codec`, as a Kafka producer sends it.
fn compressed(batch: &Bytes, codec: Compression) -> Bytes {
    let mut bytes = batch[..BATCH_HEADER_BYTES].to_vec();
    bytes.extend_from_slice(&compress(codec, &batch[BATCH_HEADER_BYTES..]).unwrap());
    let length = (bytes.len() - LOG_OVERHEAD_BYTES) as i32;
    bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    let attributes = u16::from(codec.attribute_bits());
    bytes[field::ATTRIBUTES..field::ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
    bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(bytes)
}

fn key_bytes(key: u8) -> Vec<u8> {
    format!("key-{key}").into_bytes()
}

/// Writes the batches at consecutive offsets from `BASE_OFFSET`; returns them and the records
/// they hold.
fn write_log(input: &[InputBatch]) -> (Vec<Batch>, Vec<ModelRecord>) {
    let mut batches = Vec::new();
    let mut model = Vec::new();
    let mut next_offset = BASE_OFFSET;
    for input_batch in input {
        let mut builder = BatchBuilder::new(next_offset as i64);
        for (key, value, timestamp_delta, headers) in &input_batch.records {
            let key = key.map(key_bytes);
            let header_refs: Vec<(&str, Option<&[u8]>)> = headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_deref()))
                .collect();
            builder.push(&NewRecord {
                timestamp_ms: T0 + timestamp_delta,
                key: key.as_deref(),
                value: value.as_deref(),
                headers: &header_refs,
            });
            model.push(ModelRecord {
                offset: next_offset,
                key,
                value: value.clone(),
                headers: headers.clone(),
                timestamp_ms: T0 + timestamp_delta,
            });
            next_offset += 1;
        }
        let bytes = builder.build().unwrap();
        let bytes = match input_batch.codec {
            Compression::None => bytes,
            codec => compressed(&bytes, codec),
        };
        batches.push(Batch::decode(&bytes, u64::MAX).unwrap());
    }
    (batches, model)
}

/// The records of a batch as a reader computes them (`DefaultRecordBatch`).
fn read_records(batch: &Batch) -> Vec<ModelRecord> {
    let header = batch.header();
    batch
        .records()
        .unwrap()
        .into_iter()
        .map(|record| ModelRecord {
            offset: (header.base_offset + i64::from(record.offset_delta)) as u64,
            headers: owned_headers(&record),
            key: record.key.map(|key| key.to_vec()),
            value: record.value.map(|value| value.to_vec()),
            timestamp_ms: if header.attributes.is_log_append_time() {
                header.max_timestamp
            } else {
                header.base_timestamp + record.timestamp_delta
            },
        })
        .collect()
}

fn read_log(batches: &[Batch]) -> Vec<ModelRecord> {
    batches.iter().flat_map(read_records).collect()
}

/// The model's cleaning: the latest record of each key, tombstones included unless `drop_tombstones`.
fn latest_per_key(records: &[ModelRecord], drop_tombstones: bool) -> Vec<ModelRecord> {
    let mut latest: BTreeMap<&[u8], u64> = BTreeMap::new();
    for record in records {
        if let Some(key) = &record.key {
            latest.insert(key, record.offset);
        }
    }
    records
        .iter()
        .filter(|record| {
            record
                .key
                .as_deref()
                .is_some_and(|key| latest[key] == record.offset)
        })
        .filter(|record| !(drop_tombstones && record.value.is_none()))
        .cloned()
        .collect()
}

fn rules(mapped_end: u64, now_ms: i64) -> CleanRules {
    CleanRules {
        mapped_end,
        now_ms,
        delete_retention_ms: RETENTION_MS,
    }
}

fn log_end(batches: &[Batch]) -> u64 {
    batches
        .last()
        .map_or(BASE_OFFSET, |batch| batch.last_offset() as u64 + 1)
}

/// Cleans every batch and checks what every cleaned batch must satisfy: it decodes (CRC and
/// record count) and keeps its base offset, last offset delta, codec and producer fields.
fn clean_log(batches: &[Batch], map: &OffsetMap, rules: &CleanRules) -> Vec<Batch> {
    let mut cleaned = Vec::new();
    for batch in batches {
        let Some(bytes) = clean_batch(batch, map, rules).unwrap() else {
            continue;
        };
        let after = Batch::decode(&bytes, u64::MAX).unwrap();
        assert_eq!(after.size_bytes(), bytes.len() as u64);
        let (before, after_header) = (batch.header(), after.header());
        assert_eq!(after_header.base_offset, before.base_offset);
        assert_eq!(after_header.last_offset_delta, before.last_offset_delta);
        assert_eq!(
            after_header.attributes.compression().unwrap(),
            before.attributes.compression().unwrap()
        );
        assert_eq!(after_header.producer_id, before.producer_id);
        assert_eq!(after_header.producer_epoch, before.producer_epoch);
        assert_eq!(after_header.base_sequence, before.base_sequence);
        assert_eq!(
            after_header.records_count as usize,
            after.records().unwrap().len()
        );
        assert!(after_header.records_count > 0);
        cleaned.push(after);
    }
    cleaned
}

/// Maps the whole log with one big map and cleans it at `now_ms`.
fn clean_once(batches: &[Batch], now_ms: i64) -> Vec<Batch> {
    let mut map = OffsetMap::new(1 << 16).unwrap();
    let outcome = build_offset_map(batches, &mut map, BASE_OFFSET..log_end(batches)).unwrap();
    assert!(!outcome.full);
    clean_log(batches, &map, &rules(outcome.mapped_end, now_ms))
}

fn assert_offsets_increase(records: &[ModelRecord]) -> Result<(), TestCaseError> {
    for pair in records.windows(2) {
        prop_assert!(pair[0].offset < pair[1].offset);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn cleaning_keeps_exactly_the_latest_record_per_key_and_tombstones_until_their_horizon(
        input in log_strategy(),
    ) {
        let (batches, written) = write_log(&input);
        prop_assert_eq!(read_log(&batches), written.clone());

        let first = clean_once(&batches, NOW);
        let survivors = read_log(&first);
        prop_assert_eq!(&survivors, &latest_per_key(&written, false));
        assert_offsets_increase(&survivors)?;
        for batch in &first {
            let has_tombstone = read_records(batch).iter().any(|record| record.value.is_none());
            let expected_horizon = has_tombstone.then_some(HORIZON);
            prop_assert_eq!(delete_horizon_ms(batch.header()), expected_horizon);
        }

        let before_horizon = clean_once(&first, HORIZON - 1);
        prop_assert_eq!(before_horizon, first.clone(), "nothing changes before the horizon");

        let after_horizon = clean_once(&first, HORIZON);
        let survivors = read_log(&after_horizon);
        prop_assert_eq!(&survivors, &latest_per_key(&written, true));
        assert_offsets_increase(&survivors)?;

        // A cleaning with nothing dirty (an empty map covering the whole log) drops them too.
        let mut empty_map = OffsetMap::new(1024).unwrap();
        let end = log_end(&batches);
        let outcome = build_offset_map(&first, &mut empty_map, end..end).unwrap();
        prop_assert_eq!(outcome.mapped_end, end);
        let nothing_dirty = clean_log(&first, &empty_map, &rules(outcome.mapped_end, HORIZON));
        prop_assert_eq!(read_log(&nothing_dirty), survivors);
    }

    #[test]
    fn rounds_with_a_tiny_map_converge_to_one_big_map(
        input in log_strategy(),
        slot_count in 2usize..6,
    ) {
        let (batches, written) = write_log(&input);
        let end = log_end(&batches);
        let mut map = OffsetMap::new(slot_count * 24).unwrap();
        let mut log = batches.clone();
        let mut start = BASE_OFFSET;
        let mut rounds = 0;
        loop {
            rounds += 1;
            prop_assert!(rounds <= written.len() + 1, "every round makes progress");
            map.clear();
            let outcome = build_offset_map(&log, &mut map, start..end).unwrap();
            prop_assert!(outcome.mapped_end > start || start == end);
            prop_assert!(outcome.mapped_end <= end);
            log = clean_log(&log, &map, &rules(outcome.mapped_end, NOW));
            start = outcome.mapped_end;
            if !outcome.full {
                break;
            }
        }
        prop_assert_eq!(start, end);
        let one_big_map = clean_once(&batches, NOW);
        prop_assert_eq!(read_log(&log), read_log(&one_big_map));
        prop_assert_eq!(read_log(&log), latest_per_key(&written, false));
    }
}

/// Appends a big-endian field to a batch being assembled in Kafka's header order.
fn push_be(bytes: &mut Vec<u8>, field: &[u8]) {
    bytes.extend_from_slice(field);
}

#[test]
fn a_retained_tombstone_is_encoded_with_kafkas_delete_horizon() {
    // Offsets 40..=43: key a (superseded at 43), a tombstone for b, c, then a again.
    let records: [RecordSpec<'_>; 4] = [
        (b"a", Some(b"old"), T0 + 20),
        (b"b", None, T0 + 5),
        (b"c", Some(b"kept"), T0 + 30),
        (b"a", Some(b"new"), T0 + 10),
    ];
    let mut builder = BatchBuilder::new(40);
    for (key, value, timestamp_ms) in records {
        builder.push(&NewRecord {
            timestamp_ms,
            key: Some(key),
            value,
            headers: &[("trace", Some(b"t1"))],
        });
    }
    let batch = Batch::decode(&builder.build().unwrap(), u64::MAX).unwrap();
    let mut map = OffsetMap::new(1024).unwrap();
    let outcome = build_offset_map([&batch], &mut map, 40..44).unwrap();
    let cleaned = clean_batch(&batch, &map, &rules(outcome.mapped_end, NOW))
        .unwrap()
        .unwrap();

    // The expected batch, field by field in `DefaultRecordBatch` order.
    let mut section = Vec::new();
    for (offset_delta, (key, value, timestamp_ms)) in records.iter().enumerate().skip(1) {
        NewRecord {
            timestamp_ms: *timestamp_ms,
            key: Some(key),
            value: *value,
            headers: &[("trace", Some(b"t1"))],
        }
        .encode(offset_delta as i32, timestamp_ms - HORIZON, &mut section);
    }
    let mut after_crc = Vec::new();
    push_be(&mut after_crc, &0x0040i16.to_be_bytes()); // attributes: delete horizon only
    push_be(&mut after_crc, &3i32.to_be_bytes()); // lastOffsetDelta: unchanged
    push_be(&mut after_crc, &HORIZON.to_be_bytes()); // baseTimestamp: the horizon
    push_be(&mut after_crc, &(T0 + 30).to_be_bytes()); // maxTimestamp: of the kept records
    push_be(&mut after_crc, &(-1i64).to_be_bytes()); // producerId
    push_be(&mut after_crc, &(-1i16).to_be_bytes()); // producerEpoch
    push_be(&mut after_crc, &(-1i32).to_be_bytes()); // baseSequence
    push_be(&mut after_crc, &3i32.to_be_bytes()); // recordsCount
    after_crc.extend_from_slice(&section);
    let mut expected = Vec::new();
    push_be(&mut expected, &40i64.to_be_bytes()); // baseOffset
    let batch_length = (4 + 1 + 4 + after_crc.len()) as i32;
    push_be(&mut expected, &batch_length.to_be_bytes());
    push_be(&mut expected, &(-1i32).to_be_bytes()); // partitionLeaderEpoch
    push_be(&mut expected, &[2]); // magic
    push_be(&mut expected, &crc32c::crc32c(&after_crc).to_be_bytes());
    expected.extend_from_slice(&after_crc);
    assert_eq!(cleaned.as_ref(), &expected[..]);

    let cleaned = Batch::decode(&cleaned, u64::MAX).unwrap();
    assert!(cleaned.header().attributes.has_delete_horizon());
    assert_eq!(cleaned.header().base_timestamp, HORIZON);
    let read: Vec<(u64, i64)> = read_records(&cleaned)
        .iter()
        .map(|record| (record.offset, record.timestamp_ms))
        .collect();
    assert_eq!(read, vec![(41, T0 + 5), (42, T0 + 30), (43, T0 + 10)]);
}

#[test]
fn every_codec_carries_the_delete_horizon() {
    let mut builder = BatchBuilder::new(0);
    for (key, value) in [(b"a", Some(&b"1"[..])), (b"a", None), (b"b", Some(b"2"))] {
        builder.push(&NewRecord {
            timestamp_ms: T0,
            key: Some(key),
            value,
            headers: &[],
        });
    }
    let plain = builder.build().unwrap();
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let batch = Batch::decode(&compressed(&plain, codec), u64::MAX).unwrap();
        let mut map = OffsetMap::new(1024).unwrap();
        build_offset_map([&batch], &mut map, 0..3).unwrap();
        let cleaned = clean_batch(&batch, &map, &rules(3, NOW)).unwrap().unwrap();
        let cleaned = Batch::decode(&cleaned, u64::MAX).unwrap();
        let header = cleaned.header();
        assert_eq!(header.attributes.compression().unwrap(), codec);
        assert_eq!(delete_horizon_ms(header), Some(HORIZON), "{codec}");
        let read = read_records(&cleaned);
        assert_eq!(read.len(), 2, "{codec}");
        assert_eq!((read[0].offset, read[0].value.clone()), (1, None));
        assert!(
            read.iter().all(|record| record.timestamp_ms == T0),
            "{codec}"
        );
    }
}
