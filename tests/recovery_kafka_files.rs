//! Recovery of segments written by Kafka itself: `.log` files with no index or checkpoint files
//! (with or without Kafka's own clean-shutdown marker) open, serve every batch and get their
//! indexes rebuilt; overlapping segment files are a typed error, not a panic; a log in Kafka's
//! legacy format (magic 0) is refused and left as it was, while a legacy-looking message with a
//! bad CRC, or a torn tail that looks like one, after seglog's batches is cut.
//!
//! How: the `.log` files are written byte by byte in the test (batches of
//! `support::recovery::batch` with leader epoch 0, or legacy messages built field by field) in
//! the partition directory `events-0` of a data directory, with Kafka's marker where the case
//! says, and opened by the inline engine (`support::recovery::open_engine`, over the backend
//! `SEGLOG_IO_BACKEND` names, `segment.bytes` = 1024 and `index.interval.bytes` = 64), which
//! adopts the directory and reads the marker as its own: what it serves, what its open of the
//! partition answers, and the files afterwards are checked. The tails after seglog's own batch
//! are a partition log's recovery: that log is written and reopened directly (`PartitionLog`),
//! as after a crash.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::fs;
use std::path::Path;

use bytes::Bytes;
use seglog::engine::{Engine, FetchOptions};
use seglog::error::{OpenError, ReadError, StorageError};
use seglog::types::Offset;
use support::assert_matches;
use support::dirs::segment_file;
use support::recovery::*;

mod support;

/// Writes `.log` files as a Kafka broker would have: base offsets from 100, contiguous batches,
/// leader epoch 0, no index and no checkpoint files. Returns the batches as written.
fn write_kafka_segments(dir: &Path) -> Vec<StoredBatch> {
    fs::create_dir_all(dir).unwrap();
    let mut written = Vec::new();
    let mut next = 100u64;
    for _segment in 0..2 {
        let base = next;
        let mut content = Vec::new();
        for n in 0..8u64 {
            let count = 1 + (next + n) % 3;
            let mut bytes = batch(next, count).to_vec();
            bytes[12..16].copy_from_slice(&0i32.to_be_bytes()); // partitionLeaderEpoch 0
            content.extend_from_slice(&bytes);
            written.push(StoredBatch {
                base: next,
                last: next + count - 1,
                bytes: Bytes::from(bytes),
            });
            next += count;
        }
        fs::write(segment_file(dir, base, ".log"), content).unwrap();
    }
    written
}

#[test]
fn segments_written_by_kafka_open_and_serve() {
    for kafka_marker in [false, true] {
        let (root, dir) = scratch_partition();
        let written = write_kafka_segments(&dir);
        if kafka_marker {
            // Kafka's own clean-shutdown marker: the files are trusted, the indexes rebuilt.
            fs::write(
                root.path().join(CLEAN_SHUTDOWN_MARKER),
                "{\"version\":0,\"brokerEpoch\":7}",
            )
            .unwrap();
        }
        let engine = open_engine(root.path());
        let marker = root.path().join(CLEAN_SHUTDOWN_MARKER);
        assert!(!marker.exists(), "the engine takes the marker at open");
        assert_engine_serves(&engine, &written);
        let description = engine.describe_partition(TOPIC, 0).unwrap();
        assert_eq!(description.log_start_offset, Offset(100));
        assert_eq!(description.segment_count, 2);
        let end = written.last().unwrap().last + 1;
        assert_engine_appends_at(&engine, end);
        engine.close().unwrap();
        // The two segments Kafka wrote now have index files with entries: rebuilt, as nothing
        // else writes entries for the batches Kafka wrote.
        for log_path in &segment_logs(&dir)[..2] {
            for extension in ["index", "timeindex"] {
                let index = log_path.with_extension(extension);
                assert!(
                    fs::metadata(&index).unwrap().len() > 0,
                    "{}",
                    index.display()
                );
            }
        }
    }
}

#[test]
fn overlapping_segments_are_a_typed_error_not_a_panic() {
    // Two segment files whose offsets overlap cannot both be right; opening says so.
    let (root, dir) = scratch_partition();
    let written = write_kafka_segments(&dir);
    let second_base = base_of(&segment_logs(&dir)[1]);
    let overlapping = written
        .iter()
        .find(|b| b.base > 100 && b.base < second_base)
        .unwrap();
    fs::write(
        segment_file(&dir, overlapping.base, ".log"),
        &overlapping.bytes,
    )
    .unwrap();
    for clean in [false, true] {
        if clean {
            fs::write(root.path().join(CLEAN_SHUTDOWN_MARKER), "{}").unwrap();
        }
        let engine = open_engine(root.path());
        let overlapping_file = segment_file(&dir, overlapping.base, ".log");
        let error = *open_error(&engine);
        assert_matches!(
            error,
            OpenError::Storage(StorageError::Corrupt { file, .. }) if file == overlapping_file
        );
    }
}

/// Why the engine's partition does not open: the error of a fetch from its first offset.
fn open_error(engine: &Engine) -> Box<OpenError> {
    let fetched = engine.fetch(&topic(), 0, Offset(0), FetchOptions::default());
    match fetched.wait() {
        Err(ReadError::PartitionOpen { source, .. }) => source,
        other => panic!("the partition opened: {other:?}"),
    }
}

/// A message in Kafka's legacy format (magic 0): offset, size, crc, magic, attributes, key, value.
fn legacy_message(offset: i64, value: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.push(0); // magic 0
    body.push(0); // attributes
    body.extend_from_slice(&(-1i32).to_be_bytes()); // null key
    body.extend_from_slice(&(value.len() as i32).to_be_bytes());
    body.extend_from_slice(value);
    let mut message = offset.to_be_bytes().to_vec();
    message.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    message.extend_from_slice(&crc32fast::hash(&body).to_be_bytes()); // CRC-32 from magic on
    message.extend_from_slice(&body);
    message
}

#[test]
fn a_log_in_kafkas_legacy_format_is_refused_not_truncated() {
    let (root, dir) = scratch_partition();
    fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("00000000000000000000.log");
    let mut bytes = legacy_message(0, b"old message");
    bytes.extend_from_slice(&legacy_message(1, b"another"));
    fs::write(&log_path, &bytes).unwrap();
    let engine = open_engine(root.path());
    let message = open_error(&engine).to_string();
    assert!(message.contains("legacy format (magic 0)"), "{message}");
    assert_eq!(
        fs::read(&log_path).unwrap(),
        bytes,
        "the old data is left exactly as it was"
    );
}

/// A partition log holding three records of seglog's in one batch, dropped as a crash leaves
/// it, with `tail` appended to the `.log` after the batch; and the length the `.log` had before.
fn batch_then(tail: &[u8], flush: bool) -> (tempfile::TempDir, std::path::PathBuf, u64) {
    let (root, dir) = scratch_partition();
    {
        let (mut log, _) = open_partition_log(&dir, config(), false, 0);
        log.append(batch(0, 3), now()).unwrap();
        if flush {
            log.flush().unwrap();
        }
    }
    let log_path = dir.join("00000000000000000000.log");
    let valid_length = fs::metadata(&log_path).unwrap().len();
    append_to_file(&log_path, tail);
    (root, log_path, valid_length)
}

/// The partition log holding `log_path`, reopened as after a crash that left no recovery point,
/// opens with the tail after its batch of three records cut.
fn assert_cut_after_the_batch(log_path: &Path, valid_length: u64) {
    let dir = log_path.parent().unwrap();
    let (log, _) = open_partition_log(dir, config(), false, 0);
    assert_eq!(log.log_end_offset(), Offset(3));
    assert_eq!(fs::metadata(log_path).unwrap().len(), valid_length);
}

#[test]
fn a_legacy_message_with_a_bad_crc_is_damage_and_truncated() {
    let mut damaged = legacy_message(3, b"looks old");
    let last = damaged.len() - 1;
    damaged[last] ^= 0x10;
    let (_root, log_path, valid_length) = batch_then(&damaged, false);
    assert_cut_after_the_batch(&log_path, valid_length);
}

#[test]
fn a_torn_tail_that_looks_like_a_legacy_message_is_still_truncated() {
    let torn = legacy_message(3, &[7u8; 200]);
    let (_root, log_path, valid_length) = batch_then(&torn[..100], true);
    assert_cut_after_the_batch(&log_path, valid_length);
}
