//! Record batches as a producer would send them: plain and keyed, with timestamps.

use bytes::Bytes;
use seglog::format::batch::BatchIter;
use seglog::format::{Batch, BatchBuilder, NewRecord, Record};

/// The time the tests' records are stamped with: 2023-11-14.
pub const T0: i64 = 1_700_000_000_000;

/// A record without headers.
pub fn record<'a>(
    timestamp_ms: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
) -> NewRecord<'a> {
    NewRecord {
        timestamp_ms,
        key,
        value,
        headers: &[],
    }
}

/// A batch of `records` with base offset `base` (the log stamps its own on append).
pub fn batch_at(base: i64, records: &[NewRecord<'_>]) -> Bytes {
    let mut builder = BatchBuilder::new(base);
    for record in records {
        builder.push(record);
    }
    builder.build().unwrap()
}

/// A batch of `records` with base offset 0.
pub fn batch_of(records: &[NewRecord<'_>]) -> Bytes {
    batch_at(0, records)
}

/// A batch of one record: `key` and `value`, stamped `timestamp_ms`.
pub fn keyed_batch(key: Option<&[u8]>, value: Option<&[u8]>, timestamp_ms: i64) -> Bytes {
    batch_of(&[record(timestamp_ms, key, value)])
}

/// A batch of one record without a key: `value`, stamped [`T0`].
pub fn value_batch(value: &str) -> Bytes {
    keyed_batch(None, Some(value.as_bytes()), T0)
}

/// A batch of `count` records, each with `key` and `value`, stamped `timestamp_ms`.
pub fn repeated_batch(count: usize, key: Option<&[u8]>, value: &[u8], timestamp_ms: i64) -> Bytes {
    batch_of(&vec![record(timestamp_ms, key, Some(value)); count])
}

/// Every batch from offset `from` on, read through `fetch` (the bytes served from an offset)
/// until it serves nothing. Every batch must decode with a valid CRC.
pub fn batches_from<E>(
    from: u64,
    mut fetch: impl FnMut(seglog::types::Offset) -> Result<Bytes, E>,
) -> Result<Vec<Batch>, E> {
    let mut batches = Vec::new();
    let mut next = from;
    loop {
        let records = fetch(seglog::types::Offset(next))?;
        if records.is_empty() {
            return Ok(batches);
        }
        for batch in BatchIter::new(records, u64::MAX) {
            let batch = batch.expect("every batch decodes with a valid CRC");
            next = batch.last_offset() as u64 + 1;
            batches.push(batch);
        }
    }
}

/// The records of `batches` at offset `from` or above, each with its offset.
pub fn records_from(batches: &[Batch], from: u64) -> Vec<(u64, Record)> {
    let mut records = Vec::new();
    for batch in batches {
        for record in batch.records().unwrap() {
            let offset = batch.base_offset() as u64 + record.offset_delta as u64;
            if offset >= from {
                records.push((offset, record));
            }
        }
    }
    records
}

/// `bytes` as text.
pub fn text(bytes: &Option<Bytes>) -> String {
    String::from_utf8(bytes.as_ref().unwrap().to_vec()).unwrap()
}

/// A keyed record as a compaction test compares it: offset, key and value (`None`: a tombstone).
pub type Row = (u64, Vec<u8>, Option<Vec<u8>>);

/// The records of `batches` at offset `from` or above, as rows.
pub fn rows_from(batches: &[Batch], from: u64) -> Vec<Row> {
    records_from(batches, from)
        .into_iter()
        .map(|(offset, record)| {
            let value = record.value.map(|value| value.to_vec());
            (offset, record.key.unwrap().to_vec(), value)
        })
        .collect()
}

/// A record's headers as owned (key, value) pairs.
pub fn owned_headers(record: &Record) -> Vec<(String, Option<Vec<u8>>)> {
    let headers = record.headers.iter();
    headers
        .map(|header| {
            (
                header.key.clone(),
                header.value.as_deref().map(<[u8]>::to_vec),
            )
        })
        .collect()
}
