//! Compression through the producer (issue 6, part 1): with `compression.type` set to each of
//! none, gzip, snappy, lz4 and zstd, the batches the producer writes are stored in Kafka's
//! format for that codec and decode to the records sent. Proven by producing keyed records with
//! headers through an engine, closing it, then reading the partition's `.log` file itself (not
//! through the engine): every batch carries the codec in attribute bits 0-2, its records section
//! starts with the codec's stream magic, its CRC-32C checks, and its records decompress to the
//! keys, values, headers, timestamps and offsets the sends were answered with. A compressible
//! payload also takes fewer bytes on disk with each codec than without.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine};
use seglog::format::batch::BatchIter;
use seglog::format::{Batch, Compression};
use seglog::limits::BATCH_HEADER_BYTES;
use seglog::producer::{ProducerConfig, ProducerRecord};
use seglog::types::TimestampMs;
use support::engines::engine_config;

mod support;

/// Every codec, by its attribute bits 0 to 4: none, gzip, snappy, lz4 and zstd.
fn codecs() -> Vec<Compression> {
    (0..5)
        .map(|bits| Compression::from_attribute_bits(bits).unwrap())
        .collect()
}

/// The first bytes of each codec's stream as Kafka's Java producer writes it.
fn stream_magic(codec: Compression) -> &'static [u8] {
    match codec {
        Compression::None => &[],
        Compression::Gzip => &[0x1f, 0x8b],
        Compression::Snappy => b"\x82SNAPPY\x00",
        Compression::Lz4 => &[0x04, 0x22, 0x4d, 0x18],
        Compression::Zstd => &[0x28, 0xb5, 0x2f, 0xfd],
    }
}

/// What was sent and where it was answered to be: offset -> (key, value, header value, timestamp).
type Sent = BTreeMap<u64, (Vec<u8>, Vec<u8>, Vec<u8>, i64)>;

/// Produces 300 keyed records with a header to a one-partition topic with `codec`, closes the
/// engine, and returns what was sent by offset.
fn produce(dir: &Path, codec: Compression) -> Sent {
    let engine = Engine::open(dir, engine_config(1)).unwrap();
    let topic = engine
        .create_topic("codec", 1, LogConfig::default())
        .unwrap();
    let producer = engine
        .producer(
            ProducerConfig::default()
                .with_compression(codec)
                .with_acks(Durability::Written),
        )
        .unwrap();
    let mut pending = Vec::new();
    for index in 0..300u32 {
        let key = format!("key-{}", index % 13).into_bytes();
        let value = format!(
            "{{\"order\": {index}, \"item\": \"{}\"}}",
            "book ".repeat(20)
        )
        .into_bytes();
        let header = index.to_be_bytes().to_vec();
        let timestamp = 1_700_000_000_000 + i64::from(index);
        let headers = [("index", Some(header.as_slice()))];
        let future = producer
            .send(&ProducerRecord {
                headers: &headers,
                timestamp: Some(TimestampMs(timestamp)),
                ..ProducerRecord::new(&topic, Some(&key), Some(&value))
            })
            .unwrap();
        pending.push((future, (key, value, header, timestamp)));
    }
    producer.flush();
    let sent = pending
        .into_iter()
        .map(|(future, record)| (future.wait().unwrap().offset.0, record))
        .collect();
    producer.close().unwrap();
    engine.close().unwrap();
    sent
}

/// Every batch of the partition's first `.log` file.
fn batches_on_disk(dir: &Path) -> Vec<Batch> {
    let log = dir.join("codec-0").join("00000000000000000000.log");
    let bytes = Bytes::from(std::fs::read(log).unwrap());
    BatchIter::new(bytes, u64::MAX)
        .map(Result::unwrap)
        .collect()
}

fn assert_batches_hold(batches: &[Batch], codec: Compression, sent: &Sent) {
    let mut found = Sent::new();
    for batch in batches {
        assert_eq!(
            batch.header().attributes.0 & 0x07,
            u16::from(codec.attribute_bits())
        );
        assert_eq!(batch.header().attributes.compression().unwrap(), codec);
        assert!(
            batch.bytes()[BATCH_HEADER_BYTES..].starts_with(stream_magic(codec)),
            "{codec}"
        );
        batch.validate_records(|_| {}).unwrap();
        for record in batch.records().unwrap() {
            let offset = batch.base_offset() as u64 + record.offset_delta as u64;
            let header = &record.headers[0];
            assert_eq!(header.key, "index");
            let previous = found.insert(
                offset,
                (
                    record.key.unwrap().to_vec(),
                    record.value.unwrap().to_vec(),
                    header.value.clone().unwrap().to_vec(),
                    batch.header().base_timestamp + record.timestamp_delta,
                ),
            );
            assert!(previous.is_none());
        }
    }
    assert_eq!(&found, sent, "{codec}");
}

#[test]
fn each_codec_writes_kafka_format_batches_that_decode_to_the_records_sent() {
    let mut log_bytes = BTreeMap::new();
    for codec in codecs() {
        let dir = tempfile::tempdir().unwrap();
        let sent = produce(dir.path(), codec);
        assert_eq!(sent.len(), 300);
        assert_eq!(
            sent.keys().copied().collect::<Vec<_>>(),
            (0..300).collect::<Vec<_>>()
        );
        let batches = batches_on_disk(dir.path());
        assert!(batches.len() > 1, "{codec}: {} batches", batches.len());
        assert_batches_hold(&batches, codec, &sent);
        let bytes: u64 = batches.iter().map(Batch::size_bytes).sum();
        log_bytes.insert(codec.name(), bytes);
    }
    let uncompressed = log_bytes["none"];
    for codec in &codecs()[1..] {
        assert!(
            log_bytes[codec.name()] * 2 < uncompressed,
            "{codec} stores repetitive records in under half the bytes: {log_bytes:?}"
        );
    }
}
