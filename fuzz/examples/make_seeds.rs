//! Writes the seed corpus under `fuzz/seeds/<target>/`, from seglog's own encoders:
//! `cargo run --example make_seeds` (from `fuzz/`). The seeds are checked in; rerun after a
//! format change.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use seglog::format::compression::compress;
use seglog::format::file_name::{FileState, SegmentFileKind, SegmentFileName};
use seglog::format::index_entry::{OffsetIndexEntry, TimeIndexEntry};
use seglog::format::{BatchBuilder, Compression, NewRecord, checkpoint, topics};
use seglog::types::{Offset, TopicName, TopicPartition};

type SeedResult = Result<(), Box<dyn std::error::Error>>;

fn main() -> SeedResult {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let batches = sample_batches()?;
    write_batch_seeds(&seeds, &batches)?;
    write_decompress_seeds(&seeds)?;
    write_recovery_seeds(&seeds, &batches)?;
    write_index_seeds(&seeds)?;
    write_checkpoint_seeds(&seeds)?;
    write_file_name_seeds(&seeds)?;
    Ok(())
}

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> SeedResult {
    let dir = dir.join(target);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(name), bytes)?;
    Ok(())
}

fn builder(base_offset: i64, count: i64) -> BatchBuilder {
    let mut builder = BatchBuilder::new(base_offset);
    for index in 0..count {
        let value = format!("value-{index}");
        builder.push(&NewRecord {
            timestamp_ms: 1_700_000_000_000 + index,
            key: (index % 2 == 0).then_some(&b"key"[..]),
            value: Some(value.as_bytes()),
            headers: &[("trace", Some(b"t1")), ("empty", None)],
        });
    }
    builder
}

/// One uncompressed batch and one per codec, offsets following each other.
fn sample_batches() -> Result<Vec<Bytes>, std::io::Error> {
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut batches = Vec::new();
    for (index, codec) in codecs.into_iter().enumerate() {
        let base_offset = index as i64 * 3;
        if let Some(batch) = builder(base_offset, 3).build_compressed(codec)? {
            batches.push(batch);
        }
    }
    Ok(batches)
}

fn write_batch_seeds(seeds: &Path, batches: &[Bytes]) -> SeedResult {
    // Mode byte 1: the target recomputes CRCs, 0: it decodes the bytes as they are.
    for (index, batch) in batches.iter().enumerate() {
        let seed = [&[1u8][..], batch].concat();
        write(seeds, "batch_decode", &format!("batch-{index}"), &seed)?;
    }
    let seed = [&[0u8][..], &batches.concat()].concat();
    write(seeds, "batch_decode", "all", &seed)?;
    Ok(())
}

fn write_decompress_seeds(seeds: &Path) -> SeedResult {
    let payload = b"key=partition-0042 value=hello kafka record batch; ".repeat(8);
    for (codec_byte, codec) in [
        (0u8, Compression::None),
        (1, Compression::Gzip),
        (2, Compression::Snappy),
        (3, Compression::Lz4),
        (4, Compression::Zstd),
    ] {
        let mut seed = vec![codec_byte, 4];
        seed.extend_from_slice(&compress(codec, &payload)?);
        write(seeds, "decompress", codec.name(), &seed)?;
    }
    Ok(())
}

fn write_recovery_seeds(seeds: &Path, batches: &[Bytes]) -> SeedResult {
    let log = batches.concat();
    let mut recover = vec![0u8];
    recover.extend_from_slice(&log);
    write(seeds, "recovery_scan", "recover", &recover)?;
    // Flag 8: the target recomputes the CRCs, so mutated offsets reach the offset checks.
    recover[0] = 8;
    write(seeds, "recovery_scan", "recover-crc-fixed", &recover)?;
    recover[0] = 0;
    let mut torn = recover.clone();
    torn.truncate(recover.len() - 10);
    write(seeds, "recovery_scan", "torn-tail", &torn)?;
    let mut trusted = vec![1u8, 1, 1];
    let first_size = batches.first().map_or(0, |batch| batch.len() as u32);
    trusted.extend_from_slice(
        &OffsetIndexEntry {
            relative_offset: 3,
            position: first_size,
        }
        .encode(),
    );
    trusted.extend_from_slice(
        &TimeIndexEntry {
            timestamp_ms: 1_700_000_000_002,
            relative_offset: 2,
        }
        .encode(),
    );
    trusted.extend_from_slice(&log);
    write(seeds, "recovery_scan", "trusted", &trusted)?;
    Ok(())
}

fn write_index_seeds(seeds: &Path) -> SeedResult {
    let mut offset = vec![0u8, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 5];
    let mut time = vec![1u8, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 5];
    for entry in 0..6u32 {
        offset.extend_from_slice(
            &OffsetIndexEntry {
                relative_offset: entry * 2,
                position: entry * 100,
            }
            .encode(),
        );
        time.extend_from_slice(
            &TimeIndexEntry {
                timestamp_ms: i64::from(entry) * 3,
                relative_offset: entry * 2,
            }
            .encode(),
        );
    }
    write(seeds, "index_load", "offset", &offset)?;
    write(seeds, "index_load", "time", &time)?;
    Ok(())
}

fn write_checkpoint_seeds(seeds: &Path) -> SeedResult {
    let mut offsets = BTreeMap::new();
    for (topic, partition, offset) in [("orders", 0, 42), ("orders", 1, 7), ("a.b_c-D", 12, 0)] {
        let topic_partition = TopicPartition {
            topic: TopicName::parse(topic)?,
            partition,
        };
        offsets.insert(topic_partition, Offset(offset));
    }
    let mut seed = vec![0u8];
    seed.extend_from_slice(checkpoint::encode_offsets(&offsets).as_bytes());
    write(seeds, "checkpoint_parse", "offsets", &seed)?;
    let mut registry = BTreeMap::new();
    registry.insert(
        TopicName::parse("orders")?,
        topics::TopicEntry {
            partition_count: 3,
            settings: vec![
                ("segment.bytes".into(), "1024".into()),
                ("cleanup.policy".into(), "compact,delete".into()),
            ],
        },
    );
    let mut seed = vec![1u8];
    seed.extend_from_slice(topics::encode(&registry).as_bytes());
    write(seeds, "checkpoint_parse", "registry", &seed)?;
    Ok(())
}

fn write_file_name_seeds(seeds: &Path) -> SeedResult {
    let names = [
        SegmentFileName::live(Offset(368_769), SegmentFileKind::Log).file_name(),
        SegmentFileName::live(Offset(0), SegmentFileKind::TimeIndex)
            .with_state(FileState::Deleted)
            .file_name(),
        SegmentFileName::live(Offset(5), SegmentFileKind::Index)
            .with_state(FileState::Swap)
            .file_name(),
        "my-topic-12".to_owned(),
    ];
    for (index, name) in names.iter().enumerate() {
        write(
            seeds,
            "file_name_parse",
            &format!("name-{index}"),
            name.as_bytes(),
        )?;
    }
    Ok(())
}
