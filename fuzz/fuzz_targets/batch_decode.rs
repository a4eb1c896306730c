//! RecordBatch v2 decoding over arbitrary bytes: framing, CRC, records, decompression.
//!
//! Input: byte 0 = mode; the rest is a buffer of batches. With bit 0 of the mode set, the CRC of
//! every batch the prefixes frame is recomputed first, so that mutations reach the records and
//! the codecs instead of stopping at the CRC check; otherwise the bytes are decoded as they are.
//!
//! Invariants: no panic; a batch that decodes has a CRC-32C that holds over its own bytes and is a
//! prefix of the input; its records re-encode (with the library's encoder) to a records section
//! that is never longer than the one decoded and is byte-identical when it is as long (the
//! encoder writes minimal varints); the re-encoded batch decodes to the same records; and a batch
//! shaped like `BatchBuilder`'s output rebuilds to the same bytes.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use seglog::format::BatchBuilder;
use seglog::format::batch::{BatchIter, field};
use seglog::format::{Batch, BatchHeader, BatchPrefix, Compression, NewRecord, Record};
use seglog::limits::{BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES};

fuzz_target!(|input: &[u8]| {
    let Some((&mode, data)) = input.split_first() else {
        return;
    };
    let mut data = data.to_vec();
    if mode & 1 == 1 {
        fix_crcs(&mut data);
    }
    let data = &data[..];
    let _ = BatchPrefix::parse(data);
    let _ = BatchHeader::parse(data);
    let buffer = Bytes::copy_from_slice(data);
    let mut consumed = 0usize;
    for item in BatchIter::new(buffer.clone(), u64::MAX) {
        let Ok(batch) = item else { break };
        let size = batch.size_bytes() as usize;
        assert_eq!(batch.bytes()[..], data[consumed..consumed + size]);
        check_batch(&batch);
        consumed += size;
    }
});

/// Rewrites the CRC-32C of each whole batch the prefixes frame, front to back.
fn fix_crcs(data: &mut [u8]) {
    let mut position = 0usize;
    while let Ok(prefix) = BatchPrefix::parse(&data[position..]) {
        let Some(end) = usize::try_from(prefix.size_bytes())
            .ok()
            .and_then(|size| position.checked_add(size))
            .filter(|end| *end <= data.len() && *end >= position + BATCH_HEADER_BYTES)
        else {
            return;
        };
        let crc = crc32c::crc32c(&data[position + field::ATTRIBUTES..end]);
        data[position + field::CRC..position + field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        position = end;
    }
}

fn check_batch(batch: &Batch) {
    let header = *batch.header();
    assert_eq!(batch.size_bytes(), header.size_bytes());
    assert_eq!(BatchHeader::parse(batch.bytes()).ok(), Some(header));
    assert_eq!(
        crc32c::crc32c(&batch.bytes()[field::ATTRIBUTES..]),
        header.crc
    );
    let validated = batch.validate_records(|_| {});
    let Ok(records) = batch.records() else {
        assert!(
            validated.is_err(),
            "validate_records accepted what records() refused"
        );
        return;
    };
    assert_eq!(records.len() as i64, i64::from(header.records_count));
    let Ok(section) = batch.records_section() else {
        unreachable!("records() succeeded, so the section decompressed");
    };
    // Read in place, the same records (`to_record` shares or copies from `section`).
    let Ok(in_place) = batch.record_section() else {
        unreachable!("records() succeeded, so the section decompressed");
    };
    let mut views = 0;
    for (view, record) in in_place.iter().zip(&records) {
        let Ok(view) = view else {
            panic!("records() succeeded but a record read in place failed");
        };
        assert_eq!(&view.to_record(&section), record);
        views += 1;
    }
    assert_eq!(views, records.len());
    let reencoded = encode_records(&records);
    assert!(
        reencoded.len() <= section.len(),
        "re-encoding grew the records section: {} > {}",
        reencoded.len(),
        section.len()
    );
    let attributes_zero = records.iter().all(|record| record.attributes == 0);
    if attributes_zero && reencoded.len() == section.len() {
        assert_eq!(reencoded[..], section[..], "minimal encodings differ");
    }
    let rebuilt = with_section(batch, &reencoded);
    let redecoded = match Batch::decode(&rebuilt, u64::MAX) {
        Ok(redecoded) => redecoded,
        Err(error) => panic!("re-encoded batch does not decode: {error}"),
    };
    let Ok(again) = redecoded.records() else {
        panic!("re-encoded records do not decode");
    };
    assert_eq!(again, without_attributes(&records));
    if attributes_zero && header.attributes.compression().ok() == Some(Compression::None) {
        check_builder_round_trip(batch, &records);
    }
}

/// The records section the library's encoder writes for `records` (record attributes are not
/// part of `NewRecord`: the encoder always writes 0).
fn encode_records(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for record in records {
        let headers: Vec<(&str, Option<&[u8]>)> = record
            .headers
            .iter()
            .map(|header| (header.key.as_str(), header.value.as_deref()))
            .collect();
        let new_record = NewRecord {
            timestamp_ms: 0,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &headers,
        };
        new_record.encode(record.offset_delta, record.timestamp_delta, &mut out);
    }
    out
}

fn without_attributes(records: &[Record]) -> Vec<Record> {
    records
        .iter()
        .map(|record| Record {
            attributes: 0,
            ..record.clone()
        })
        .collect()
}

/// `batch`'s header (uncompressed from now on) with `section` as its records; length and CRC
/// rewritten.
fn with_section(batch: &Batch, section: &[u8]) -> Bytes {
    let mut bytes = batch.bytes()[..BATCH_HEADER_BYTES].to_vec();
    bytes.extend_from_slice(section);
    let length = (bytes.len() - LOG_OVERHEAD_BYTES) as i32;
    bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    let attributes = batch.header().attributes.0 & !0x07;
    bytes[field::ATTRIBUTES..field::ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
    bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(bytes)
}

/// A batch with every header field as `BatchBuilder` writes it is rebuilt byte for byte.
fn check_builder_round_trip(batch: &Batch, records: &[Record]) {
    let header = batch.header();
    let dense = records
        .iter()
        .enumerate()
        .all(|(index, record)| i64::from(record.offset_delta) == index as i64);
    let Some(first) = records.first() else { return };
    let timestamps: Vec<i64> = records
        .iter()
        .map(|record| header.base_timestamp.wrapping_add(record.timestamp_delta))
        .collect();
    let max_timestamp = timestamps.iter().copied().fold(-1, i64::max);
    let builder_shaped = header.attributes.0 == 0
        && header.partition_leader_epoch == -1
        && header.producer_id == -1
        && header.producer_epoch == -1
        && header.base_sequence == -1
        && dense
        && first.timestamp_delta == 0
        && i64::from(header.last_offset_delta) + 1 == records.len() as i64
        && header.max_timestamp == max_timestamp;
    if !builder_shaped {
        return;
    }
    let mut builder = BatchBuilder::new(header.base_offset);
    for (record, timestamp_ms) in records.iter().zip(&timestamps) {
        let headers: Vec<(&str, Option<&[u8]>)> = record
            .headers
            .iter()
            .map(|header| (header.key.as_str(), header.value.as_deref()))
            .collect();
        builder.push(&NewRecord {
            timestamp_ms: *timestamp_ms,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &headers,
        });
    }
    let Some(rebuilt) = builder.build() else {
        unreachable!("at least one record was pushed");
    };
    if rebuilt.len() == batch.bytes().len() {
        assert_eq!(
            rebuilt,
            *batch.bytes(),
            "BatchBuilder wrote different bytes"
        );
    }
}
