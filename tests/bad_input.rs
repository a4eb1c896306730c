//! Bad input gets a typed error and changes nothing: illegal topic names, oversized, empty,
//! garbage and inconsistent batches, reads and deletions outside the log, a data directory that
//! is already open; and no input makes the batch decoder panic.
//!
//! How: each case calls the public API (`TopicName`, the inline `Engine`, `PartitionLog`, `Batch`) on a
//! temporary directory and matches the exact error variant and the values it carries, then
//! checks that the log's offsets and files are as before. Inconsistent batches are assembled in
//! the test from records encoded with `NewRecord::encode` and a header written field by field,
//! with a correct CRC so that the record-level checks (not the CRC) must catch them. Two
//! proptests feed `Batch::decode`, `records()`, `validate_records(|_| {})` and `BatchIter` arbitrary
//! bytes and arbitrary mutations of a valid batch (with the CRC recomputed, so that mutated
//! records and attributes reach the record and decompression decoders), and append the
//! mutated batches to a log, which must accept them whole or refuse them with `InvalidBatch`.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use std::fs;
use std::path::Path;

use bytes::Bytes;
use proptest::prelude::*;
use seglog::config::LogConfig;
use seglog::engine::{Engine, EngineConfig, FetchOptions};
use seglog::error::{AppendError, DeleteRecordsError, OpenError, ReadError, TopicError};
use seglog::format::batch::BatchIter;
use seglog::format::{Batch, BatchHeader, BatchPrefix, DecodeError};
use seglog::io::storage_from_env;
use seglog::log::PartitionLog;
use seglog::types::{Offset, TimestampMs, TopicName, TopicNameError};
use support::assert_out_of_range;
use support::batches::{T0, batch_of, record};
use support::configs::compacted;
use support::dirs::scratch;
use support::logs::{self, open_options};

mod support;

/// Kafka's defaults, with small preallocated indexes (10 MiB ones cost time in every test).
fn config() -> LogConfig {
    LogConfig::default().with_segment_index_bytes(4096)
}

fn now() -> TimestampMs {
    TimestampMs(T0 + 1_000)
}

fn open_log(dir: &Path, config: LogConfig) -> PartitionLog {
    try_open_log(dir, config).unwrap()
}

/// Opens the partition `bad-0` under `dir` after an unclean shutdown (recovering from offset 0).
fn try_open_log(dir: &Path, config: LogConfig) -> Result<PartitionLog, seglog::error::OpenError> {
    let options = open_options(false, 0, now().0);
    logs::try_open_log(
        storage_from_env(),
        &dir.join("bad-0"),
        "bad",
        config,
        options,
    )
    .map(|(log, _)| log)
}

/// An empty log with `config` in a scratch directory.
fn new_log(config: LogConfig) -> (tempfile::TempDir, PartitionLog) {
    let root = scratch();
    let log = open_log(root.path(), config);
    (root, log)
}

/// A records section of `count` records with the given offset deltas.
fn records_section(offset_deltas: &[i32], value_bytes: usize) -> Vec<u8> {
    let value = vec![b'v'; value_bytes];
    let mut out = Vec::new();
    for (index, offset_delta) in offset_deltas.iter().enumerate() {
        let key = format!("key-{index}");
        record(T0 + index as i64, Some(key.as_bytes()), Some(&value)).encode(
            *offset_delta,
            index as i64,
            &mut out,
        );
    }
    out
}

/// A batch header written field by field around `records`, with a correct CRC-32C.
fn assemble(records: &[u8], records_count: i32, last_offset_delta: i32, attributes: i16) -> Bytes {
    let mut covered = Vec::new();
    covered.extend_from_slice(&attributes.to_be_bytes());
    covered.extend_from_slice(&last_offset_delta.to_be_bytes());
    covered.extend_from_slice(&T0.to_be_bytes());
    covered.extend_from_slice(&(T0 + 10).to_be_bytes());
    covered.extend_from_slice(&(-1i64).to_be_bytes());
    covered.extend_from_slice(&(-1i16).to_be_bytes());
    covered.extend_from_slice(&(-1i32).to_be_bytes());
    covered.extend_from_slice(&records_count.to_be_bytes());
    covered.extend_from_slice(records);
    let mut batch = Vec::new();
    batch.extend_from_slice(&0i64.to_be_bytes());
    batch.extend_from_slice(&((covered.len() + 9) as i32).to_be_bytes());
    batch.extend_from_slice(&(-1i32).to_be_bytes());
    batch.push(2);
    batch.extend_from_slice(&crc32c::crc32c(&covered).to_be_bytes());
    batch.extend_from_slice(&covered);
    Bytes::from(batch)
}

fn valid_batch(count: usize, value_bytes: usize) -> Bytes {
    let deltas: Vec<i32> = (0..count as i32).collect();
    assemble(
        &records_section(&deltas, value_bytes),
        count as i32,
        count as i32 - 1,
        0,
    )
}

/// Recomputes the CRC of an encoded batch after the test changed bytes it covers.
fn fix_crc(batch: &mut [u8]) {
    if batch.len() >= 21 {
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
    }
}

fn assert_invalid_batch(
    log: &mut PartitionLog,
    bytes: Bytes,
    expected_position: usize,
    expected: impl Fn(&DecodeError) -> bool,
    what: &str,
) {
    let (end, size) = (log.log_end_offset(), log.size_bytes());
    match log.append(bytes, now()) {
        Err(AppendError::InvalidBatch { position, source }) => {
            assert_eq!(position, expected_position, "{what}: position");
            assert!(expected(&source), "{what}: unexpected cause {source:?}");
        }
        other => panic!("{what}: append gave {other:?}"),
    }
    assert_eq!(log.log_end_offset(), end, "{what}: log end unchanged");
    assert_eq!(log.size_bytes(), size, "{what}: nothing written");
}

#[test]
fn illegal_topic_names_are_typed_errors_and_create_nothing() {
    let root = scratch();
    let engine = inline_engine(root.path());
    let before = names_in(root.path());
    let create = |engine: &Engine, name: &str| engine.create_topic(name, 1, config()).map(drop);
    let long = "x".repeat(250);
    type Expected = fn(&TopicNameError) -> bool;
    let cases: Vec<(&str, Expected)> = vec![
        ("", |e| matches!(e, TopicNameError::Empty)),
        (".", |e| matches!(e, TopicNameError::Dots)),
        ("..", |e| matches!(e, TopicNameError::Dots)),
        (&long, |e| {
            matches!(e, TopicNameError::TooLong { length: 250 })
        }),
        ("a/b", |e| {
            matches!(e, TopicNameError::IllegalCharacter { character: '/', .. })
        }),
        ("../etc", |e| {
            matches!(e, TopicNameError::IllegalCharacter { character: '/', .. })
        }),
        ("a b", |e| {
            matches!(e, TopicNameError::IllegalCharacter { character: ' ', .. })
        }),
        ("a\0b", |e| {
            matches!(
                e,
                TopicNameError::IllegalCharacter {
                    character: '\0',
                    ..
                }
            )
        }),
        ("é", |e| {
            matches!(
                e,
                TopicNameError::IllegalCharacter {
                    character: 'é', ..
                }
            )
        }),
        ("a:b", |e| {
            matches!(e, TopicNameError::IllegalCharacter { character: ':', .. })
        }),
    ];
    for (name, expected) in cases {
        match create(&engine, name) {
            Err(TopicError::TopicName(error)) => {
                assert!(expected(&error), "{name:?}: {error:?}")
            }
            other => panic!("{name:?}: {other:?}"),
        }
    }
    assert_eq!(names_in(root.path()), before, "no directory created");
    assert!(engine.list_topics().is_empty());
    // The longest legal name works.
    create(&engine, &"x".repeat(249)).unwrap();
    assert_eq!(engine.list_topics().len(), 1);
    engine.close().unwrap();
}

/// An inline engine (`EngineConfig::inline`) on `root`, with the tests' default topic config.
fn inline_engine(root: &Path) -> Engine {
    let config = EngineConfig::default()
        .with_inline(true)
        .with_default_topic_config(config());
    Engine::open(root, config).unwrap()
}

/// The names in directory `dir`, sorted.
fn names_in(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    names.sort();
    names
}

#[test]
fn an_unknown_partition_is_a_typed_error_and_creates_nothing() {
    let root = scratch();
    let engine = inline_engine(root.path());
    let topic = TopicName::parse("absent").unwrap();
    let fetched = engine.fetch(&topic, 3, Offset(0), FetchOptions::default());
    match fetched.wait() {
        Err(ReadError::UnknownPartition { topic, partition }) => {
            assert_eq!(topic, "absent");
            assert_eq!(partition, 3);
        }
        other => panic!("{other:?}"),
    }
    assert!(!root.path().join("absent-3").exists());
    engine.close().unwrap();
    // Directories with names that are not `<legal topic>-<partition>` are not partitions: a
    // reopen adopts none of them.
    for name in ["a b-0", "..-1", "topic", "topic-x", "-2"] {
        fs::create_dir(root.path().join(name)).unwrap();
    }
    let engine = inline_engine(root.path());
    assert!(engine.list_topics().is_empty());
    engine.close().unwrap();
}

#[test]
fn a_batch_larger_than_max_message_bytes_is_rejected() {
    let (_root, mut log) = new_log(config().with_max_message_bytes(500));
    let oversized = valid_batch(4, 120);
    assert!(oversized.len() > 500);
    match log.append(oversized.clone(), now()) {
        Err(AppendError::BatchTooLarge {
            size_bytes,
            max_bytes,
        }) => {
            assert_eq!(size_bytes, oversized.len() as u64);
            assert_eq!(max_bytes, 500);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(log.log_end_offset(), Offset(0));
    assert_eq!(log.size_bytes(), 0);
    // The second batch of an append is checked too, and the first is not written alone.
    let mut two = valid_batch(1, 10).to_vec();
    two.extend_from_slice(&oversized);
    assert!(matches!(
        log.append(Bytes::from(two), now()),
        Err(AppendError::BatchTooLarge { max_bytes: 500, .. })
    ));
    assert_eq!(log.size_bytes(), 0);
    // A batch of exactly max.message.bytes is accepted.
    let exact = (0..500)
        .map(|value_bytes| valid_batch(1, value_bytes))
        .find(|batch| batch.len() == 500)
        .unwrap();
    log.append(exact, now()).unwrap();
    assert_eq!(log.log_end_offset(), Offset(1));
}

#[test]
fn an_append_larger_than_a_segment_is_rejected() {
    let (_root, mut log) = new_log(config().with_segment_bytes(1024));
    let mut bytes = Vec::new();
    while bytes.len() <= 1024 {
        bytes.extend_from_slice(&valid_batch(2, 50));
    }
    let size = bytes.len() as u64;
    match log.append(Bytes::from(bytes), now()) {
        Err(AppendError::AppendTooLarge {
            size_bytes,
            segment_bytes,
        }) => {
            assert_eq!(size_bytes, size);
            assert_eq!(segment_bytes, 1024);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(log.log_end_offset(), Offset(0));
}

#[test]
fn an_empty_append_is_rejected() {
    let (_root, mut log) = new_log(config());
    assert!(matches!(
        log.append(Bytes::new(), now()),
        Err(AppendError::Empty)
    ));
    assert_eq!(log.log_end_offset(), Offset(0));
    assert_eq!(log.size_bytes(), 0);
}

#[test]
fn garbage_and_damaged_batches_are_invalid_batches() {
    let (_root, mut log) = new_log(config());
    log.append(valid_batch(3, 10), now()).unwrap();
    let good = valid_batch(2, 20);

    let garbage: Vec<u8> = (0..200u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    assert_invalid_batch(&mut log, Bytes::from(garbage), 0, |_| true, "garbage");
    assert_invalid_batch(
        &mut log,
        Bytes::from(vec![0u8; 100]),
        0,
        |e| matches!(e, DecodeError::BatchLengthTooSmall { batch_length: 0 }),
        "zeros",
    );
    assert_invalid_batch(
        &mut log,
        Bytes::from_static(&[1, 2, 3]),
        0,
        |e| matches!(e, DecodeError::Truncated { .. }),
        "three bytes",
    );
    assert_invalid_batch(
        &mut log,
        good.slice(..good.len() - 1),
        0,
        |e| matches!(e, DecodeError::Truncated { .. }),
        "a batch missing its last byte",
    );
    let mut bad_crc = good.to_vec();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 1;
    assert_invalid_batch(
        &mut log,
        Bytes::from(bad_crc),
        0,
        |e| matches!(e, DecodeError::CrcMismatch { .. }),
        "a bad CRC",
    );
    let mut magic_one = good.to_vec();
    magic_one[16] = 1;
    assert_invalid_batch(
        &mut log,
        Bytes::from(magic_one),
        0,
        |e| matches!(e, DecodeError::UnsupportedMagic { magic: 1 }),
        "magic 1",
    );
    // A good batch followed by garbage: refused as a whole, the error at the garbage.
    let mut followed = good.to_vec();
    followed.extend_from_slice(&[0xff; 30]);
    assert_invalid_batch(
        &mut log,
        Bytes::from(followed),
        good.len(),
        |_| true,
        "a good batch then garbage",
    );
    // Log still serves the first batch and appends at offset 3.
    assert_eq!(log.append(good, now()).unwrap().first_offset, Offset(3));
}

#[test]
fn batches_with_wrong_counts_or_offset_deltas_are_invalid() {
    let (_root, mut log) = new_log(config());
    let three = records_section(&[0, 1, 2], 8);
    assert_invalid_batch(
        &mut log,
        assemble(&three, 4, 3, 0),
        0,
        |e| {
            matches!(
                e,
                DecodeError::RecordCount {
                    declared: 4,
                    found: 3
                }
            )
        },
        "records count too high",
    );
    assert_invalid_batch(
        &mut log,
        assemble(&three, 2, 1, 0),
        0,
        |e| {
            matches!(
                e,
                DecodeError::RecordCount {
                    declared: 2,
                    found: 3
                }
            )
        },
        "records count too low",
    );
    assert_invalid_batch(
        &mut log,
        assemble(&three, 3, 5, 0),
        0,
        |e| {
            matches!(
                e,
                DecodeError::LastOffsetDelta {
                    last_offset_delta: 5,
                    records_count: 3
                }
            )
        },
        "lastOffsetDelta past the records",
    );
    assert_invalid_batch(
        &mut log,
        assemble(&records_section(&[0, 2, 3], 8), 3, 2, 0),
        0,
        |e| {
            matches!(
                e,
                DecodeError::OffsetDelta {
                    record_index: 1,
                    offset_delta: 2
                }
            )
        },
        "a gap in the offset deltas",
    );
    assert_invalid_batch(
        &mut log,
        assemble(&records_section(&[0, 0], 8), 2, 1, 0),
        0,
        |e| {
            matches!(
                e,
                DecodeError::OffsetDelta {
                    record_index: 1,
                    offset_delta: 0
                }
            )
        },
        "a repeated offset delta",
    );
    assert_invalid_batch(
        &mut log,
        assemble(&[], 0, -1, 0),
        0,
        |e| matches!(e, DecodeError::EmptyBatch),
        "no records",
    );
    assert_invalid_batch(
        &mut log,
        assemble(&three, 3, 2, 0x0007),
        0,
        |_| true,
        "an unknown compression codec",
    );
    // A well-formed batch after all those: offset 0.
    let info = log.append(assemble(&three, 3, 2, 0), now()).unwrap();
    assert_eq!(
        (info.first_offset, info.last_offset),
        (Offset(0), Offset(2))
    );
}

#[test]
fn reads_outside_the_log_are_out_of_range_with_the_range() {
    let (_root, mut log) = new_log(config());
    for _ in 0..5 {
        log.append(valid_batch(2, 10), now()).unwrap();
    }
    assert_eq!(log.delete_records(Offset(4), now()).unwrap(), Offset(4));
    for requested in [0u64, 3, 11, 12, u64::MAX] {
        let read = log.read(Offset(requested), u64::MAX);
        assert_out_of_range!(read, ReadError, requested, 4, 10);
    }
    let at_end = log.read(Offset(10), u64::MAX).unwrap();
    assert!(at_end.records.is_empty());
    assert_eq!(
        log.read(Offset(4), 0).unwrap().records.len(),
        valid_batch(2, 10).len()
    );
}

#[test]
fn delete_records_beyond_the_log_end_is_rejected() {
    let (_root, mut log) = new_log(config());
    log.append(valid_batch(3, 10), now()).unwrap();
    for requested in [4u64, 1000, u64::MAX] {
        let deleted = log.delete_records(Offset(requested), now());
        assert_out_of_range!(deleted, DeleteRecordsError, requested, 0, 3);
        assert_eq!(log.log_start_offset(), Offset(0));
    }
    // Up to and including the log end is allowed; moving backwards is a no-op.
    assert_eq!(log.delete_records(Offset(3), now()).unwrap(), Offset(3));
    assert_eq!(log.delete_records(Offset(1), now()).unwrap(), Offset(3));
}

#[test]
fn a_second_open_of_the_same_directory_is_locked() {
    let root = scratch();
    let first = inline_engine(root.path());
    let config = EngineConfig::default().with_inline(true);
    match Engine::open(root.path(), config) {
        Err(OpenError::Locked { dir }) => assert_eq!(dir, root.path()),
        other => panic!("{other:?}"),
    }
    drop(first);
    let again = inline_engine(root.path());
    again.close().unwrap();
}

/// Everything the decoder offers, on `bytes`. Returns whether a batch decoded with valid records.
fn decode_everything(bytes: &Bytes) -> bool {
    let _ = BatchPrefix::parse(bytes);
    let _ = BatchHeader::parse(bytes);
    for batch in BatchIter::new(bytes.clone(), u64::MAX).flatten() {
        let _ = batch.records();
    }
    match Batch::decode(bytes, u64::MAX) {
        Ok(batch) => {
            let _ = batch.records_section();
            let records = batch.records();
            batch.validate_records(|_| {}).is_ok() && records.is_ok()
        }
        Err(_) => false,
    }
}

fn mutation() -> impl Strategy<Value = (usize, u8)> {
    (any::<usize>(), 1u8..=255)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn decoding_arbitrary_bytes_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        plausible_prefix in any::<bool>(),
    ) {
        let mut bytes = bytes;
        if plausible_prefix && bytes.len() >= 21 {
            // Make the framing fit so that the CRC and record decoders get to run.
            let length = (bytes.len() - 12) as i32;
            bytes[8..12].copy_from_slice(&length.to_be_bytes());
            bytes[16] = 2;
            fix_crc(&mut bytes);
        }
        decode_everything(&Bytes::from(bytes));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn mutated_batches_never_panic_and_are_appended_whole_or_refused(
        count in 1usize..5,
        value_bytes in 0usize..40,
        mutations in proptest::collection::vec(mutation(), 1..6),
        cut in proptest::option::weighted(0.2, any::<usize>()),
        recompute_crc in any::<bool>(),
    ) {
        let mut bytes = valid_batch(count, value_bytes).to_vec();
        for (position, xor) in &mutations {
            let position = position % bytes.len();
            bytes[position] ^= xor;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut % (bytes.len() + 1));
        }
        if recompute_crc {
            fix_crc(&mut bytes);
        }
        let bytes = Bytes::from(bytes);
        let decodes = decode_everything(&bytes);
        let (_root, mut log) = new_log(config());
        match log.append(bytes.clone(), now()) {
            Ok(info) => {
                prop_assert!(decodes, "the log accepted a batch the decoder rejects");
                let fetched = log.read(info.first_offset, u64::MAX).unwrap().records;
                let stored = Batch::decode(&fetched, u64::MAX).unwrap();
                prop_assert_eq!(stored.records().unwrap(), Batch::decode(&bytes, u64::MAX).unwrap().records().unwrap());
                prop_assert_eq!(log.log_end_offset().0, info.last_offset.0 + 1);
            }
            Err(AppendError::InvalidBatch { .. }) | Err(AppendError::Empty) => {
                prop_assert_eq!(log.log_end_offset(), Offset(0));
                prop_assert_eq!(log.size_bytes(), 0);
            }
            Err(other) => prop_assert!(false, "unexpected error {:?}", other),
        }
    }
}

#[test]
fn a_compacted_topic_rejects_records_without_a_key() {
    let (_root, mut log) = new_log(compacted(config()));
    let keyless = batch_of(&[
        record(T0, Some(b"k"), Some(b"v")),
        record(T0, None, Some(b"no key")),
    ]);
    let result = log.append(keyless, now());
    assert!(
        matches!(
            result,
            Err(AppendError::NullKeyInCompactedTopic { position: 0 })
        ),
        "{result:?}"
    );
    assert_eq!(
        log.log_end_offset(),
        Offset(0),
        "nothing of the batch was written"
    );
    log.append(valid_batch(2, 10), now()).unwrap();
    assert_eq!(
        log.log_end_offset(),
        Offset(2),
        "keyed records are accepted"
    );
}

/// R24: a segment file that is a symlink is never followed — opening the partition fails with an
/// I/O error naming it, and the file the link points at is neither read into the log nor changed.
#[test]
fn a_symlinked_segment_is_refused_and_its_target_left_untouched() {
    let dir = scratch();
    let partition_dir = dir.path().join("bad-0");
    {
        let mut log = open_log(dir.path(), config());
        log.append(valid_batch(3, 10), now()).unwrap();
        log.flush().unwrap();
    }
    let outside = dir.path().join("precious.txt");
    fs::write(&outside, b"not a segment; must survive").unwrap();
    let segment = partition_dir.join("00000000000000000000.log");
    fs::remove_file(&segment).unwrap();
    std::os::unix::fs::symlink(&outside, &segment).unwrap();

    let opened = try_open_log(dir.path(), config());
    let error = opened.expect_err("a symlinked segment must not open");
    assert!(
        format!("{error}").contains("00000000000000000000.log"),
        "the error names the file: {error}"
    );
    assert_eq!(
        fs::read(&outside).unwrap(),
        b"not a segment; must survive",
        "the link's target is untouched"
    );
}

/// Issue 41, item 5: a write that breaks the segment's invariants (its first batch ending below
/// the segment's next offset, or batch extents that do not end where the write does) is refused
/// with `StorageError::InvalidAppend` naming the file, instead of a panic, and writes nothing.
#[test]
fn a_segment_refuses_a_write_that_breaks_its_invariants_and_writes_nothing() {
    use seglog::error::StorageError;
    use seglog::segment::{ActiveSegment, AppendedBatch};

    let dir = scratch();
    let storage = storage_from_env();
    let mut segment = ActiveSegment::create(
        storage.as_ref(),
        dir.path(),
        Offset(0),
        &config(),
        false,
        now(),
    )
    .unwrap();
    let batch = valid_batch(2, 10);
    let appended = |last_offset: u64, size_bytes: u64| AppendedBatch {
        position_in_write: 0,
        size_bytes,
        last_offset: Offset(last_offset),
        max_timestamp: now(),
    };
    let size = batch.len() as u64;
    segment
        .append(&batch, &[appended(1, size)], now(), 4096)
        .unwrap();
    let log_path = segment.log_path().to_owned();
    let length_before = fs::metadata(&log_path).unwrap().len();

    for (batches, expected_reason) in [
        (
            appended(1, size),
            "the write's first batch ends at offset 1, below the segment's next offset 2",
        ),
        (
            appended(3, size - 1),
            &*format!(
                "the write's batches end at byte {} of its {size} bytes",
                size - 1
            ),
        ),
    ] {
        let error = segment
            .append(&batch, &[batches], now(), 4096)
            .expect_err("an append breaking the segment's invariants is refused");
        match &error {
            StorageError::InvalidAppend { file, reason } => {
                assert_eq!(file, &log_path);
                assert_eq!(reason, expected_reason);
            }
            other => panic!("expected InvalidAppend, got {other:?}"),
        }
        assert_eq!(segment.size_bytes(), size, "{error}");
        assert_eq!(segment.next_offset(), Offset(2), "{error}");
        assert_eq!(fs::metadata(&log_path).unwrap().len(), length_before);
    }
}

/// Issue 41, item 11: opening an engine on a path that is a file, or creating a topic whose
/// partition directory is a file, is `StorageError::NotADirectory` naming that file ("is a file,
/// not a directory"), not the OS's `File exists`.
#[test]
fn a_file_where_a_directory_belongs_is_named_as_such() {
    use seglog::engine::Engine;
    use seglog::error::{StorageError, TopicError};
    use support::engines::engine_config;

    let dir = scratch();
    let file = dir.path().join("a-file");
    fs::write(&file, b"x").unwrap();
    let config = engine_config(1);
    let error = Engine::open(&file, config.clone()).unwrap_err();
    match &error {
        OpenError::Storage(StorageError::NotADirectory { path }) => assert_eq!(path, &file),
        other => panic!("expected NotADirectory, got {other:?}"),
    }
    assert_eq!(
        error.to_string(),
        format!("{} is a file, not a directory", file.display())
    );

    let data = dir.path().join("data");
    let engine = Engine::open(&data, config).unwrap();
    fs::write(data.join("t-0"), b"").unwrap();
    let error = engine
        .create_topic("t", 1, LogConfig::default())
        .unwrap_err();
    match &error {
        TopicError::Storage(StorageError::NotADirectory { path }) => {
            assert_eq!(path, &data.join("t-0"));
        }
        other => panic!("expected NotADirectory, got {other:?}"),
    }
    engine.close().unwrap();
}
