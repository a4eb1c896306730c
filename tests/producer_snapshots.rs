//! Producer-state snapshots (issue 44, item 2; FORMAT.md §5.8): Kafka's `<offset>.snapshot` files
//! in the partition directory, written at each roll and at a clean close, removed with the
//! segments below the log start and above a truncation's end, and loaded at open with a replay of
//! the batch headers after them.
//!
//! Proven through the engine on a scratch directory, reading the files as bytes: the file written
//! at a roll matches the documented layout byte for byte (its CRC checked with the `crc32c`
//! crate, an independent oracle); a corrupt snapshot, or one above the log end, is removed at open
//! and the state rebuilt from an older one or the log; retention, `delete_records` and
//! truncation remove the snapshots that no longer describe the log; a roll snapshot, synced with
//! its seal, survives a power cut on the simulated disk.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use seglog::engine::{AppendInfo, Durability, Engine};
use seglog::error::AppendError;
use seglog::format::BatchBuilder;
use seglog::types::{Offset, TopicName};

use support::assert_matches;
use support::batches::{T0, record};
use support::configs::small_segments;
use support::dirs::{flip_byte, names_ending, scratch, segment_bases};
use support::engines::{engine_config, keeping_producers};

const PRODUCER: i64 = 21;
const EPOCH: i16 = 4;

/// A batch of two records from [`PRODUCER`] at [`EPOCH`], first sequence `sequence`.
fn producer_batch(epoch: i16, sequence: i32) -> Bytes {
    let mut builder = BatchBuilder::new(0).with_producer(PRODUCER, epoch, sequence);
    for index in 0..2 {
        let value = format!("seq-{}-{}", sequence + index, "v".repeat(40));
        builder.push(&record(T0, None, Some(value.as_bytes())));
    }
    builder.build().unwrap()
}

fn open(dir: &Path) -> (Engine, TopicName) {
    let engine = Engine::open(dir, keeping_producers(1)).unwrap();
    let topic = match engine.create_topic("snap", 1, small_segments(1024, 256)) {
        Ok(topic) => topic,
        Err(_) => TopicName::parse("snap").unwrap(),
    };
    (engine, topic)
}

fn partition_dir(dir: &Path) -> PathBuf {
    dir.join("snap-0")
}

fn send(engine: &Engine, topic: &TopicName, batch: Bytes) -> Result<AppendInfo, AppendError> {
    engine.append(topic, 0, batch, Durability::Written).wait()
}

/// `count` batches of two records, sequences from 0.
fn fill(engine: &Engine, topic: &TopicName, count: i32) -> Vec<AppendInfo> {
    (0..count)
        .map(|index| send(engine, topic, producer_batch(EPOCH, index * 2)).unwrap())
        .collect()
}

/// The offsets of the snapshot files in the partition directory, ascending.
fn snapshot_offsets(dir: &Path) -> Vec<u64> {
    names_ending(&partition_dir(dir), ".snapshot")
        .iter()
        .map(|name| name.strip_suffix(".snapshot").unwrap().parse().unwrap())
        .collect()
}

/// Opens the partition (partitions open at their first use) with a read.
fn touch(engine: &Engine, topic: &TopicName) {
    let options = seglog::engine::FetchOptions::default();
    engine.fetch(topic, 0, Offset(0), options).wait().unwrap();
}

fn snapshot_path(dir: &Path, offset: u64) -> PathBuf {
    partition_dir(dir).join(format!("{offset:020}.snapshot"))
}

/// The producer's last batch (of `infos`) is a duplicate, and its next sequence is accepted at
/// the log end.
fn assert_state_is_at(engine: &Engine, topic: &TopicName, infos: &[AppendInfo]) {
    let count = infos.len() as i32;
    let last = infos.last().unwrap();
    let retry = send(engine, topic, producer_batch(EPOCH, (count - 1) * 2)).unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.first_offset, last.first_offset);
    assert_matches!(
        send(engine, topic, producer_batch(EPOCH - 1, count * 2)),
        Err(AppendError::InvalidProducerEpoch { .. })
    );
    let next = send(engine, topic, producer_batch(EPOCH, count * 2)).unwrap();
    assert!(!next.duplicate);
    assert_eq!(next.first_offset, last.last_offset.next());
}

#[test]
fn the_snapshot_written_at_a_roll_is_kafkas_layout_byte_for_byte() {
    let dir = scratch();
    let (engine, topic) = open(dir.path());
    let infos = fill(&engine, &topic, 30);
    let bases = segment_bases(&partition_dir(dir.path()));
    assert!(bases.len() >= 3, "the log rolled: {bases:?}");
    let base = bases[1];
    assert!(snapshot_offsets(dir.path()).contains(&base));
    // The producer's last batch before the roll ends at `base - 1`.
    let before = infos
        .iter()
        .position(|info| info.last_offset == Offset(base - 1))
        .unwrap();
    let bytes = std::fs::read(snapshot_path(dir.path(), base)).unwrap();

    let mut expected = Vec::new();
    expected.extend_from_slice(&1i16.to_be_bytes()); // version
    expected.extend_from_slice(&[0; 4]); // crc, below
    expected.extend_from_slice(&1i32.to_be_bytes()); // one entry
    expected.extend_from_slice(&PRODUCER.to_be_bytes());
    expected.extend_from_slice(&EPOCH.to_be_bytes());
    expected.extend_from_slice(&((before as i32) * 2 + 1).to_be_bytes()); // last sequence
    expected.extend_from_slice(&((base - 1) as i64).to_be_bytes()); // last offset
    expected.extend_from_slice(&1i32.to_be_bytes()); // offset delta
    expected.extend_from_slice(&T0.to_be_bytes()); // timestamp
    expected.extend_from_slice(&(-1i32).to_be_bytes()); // coordinator epoch
    expected.extend_from_slice(&(-1i64).to_be_bytes()); // current transaction's first offset
    let crc = crc32c::crc32c(&expected[6..]);
    expected[2..6].copy_from_slice(&crc.to_be_bytes());
    assert_eq!(bytes, expected);
    engine.close().unwrap();
}

#[test]
fn a_clean_close_writes_the_state_at_the_log_end_and_the_open_uses_it() {
    let dir = scratch();
    let (engine, topic) = open(dir.path());
    let infos = fill(&engine, &topic, 9);
    engine.close().unwrap();
    let log_end = infos.last().unwrap().last_offset.next().0;
    assert_eq!(snapshot_offsets(dir.path()).last(), Some(&log_end));
    let (engine, topic) = open(dir.path());
    assert_state_is_at(&engine, &topic, &infos);
    engine.close().unwrap();
}

#[test]
fn a_corrupt_snapshot_is_removed_and_the_state_rebuilt() {
    let dir = scratch();
    let (engine, topic) = open(dir.path());
    let infos = fill(&engine, &topic, 30);
    engine.close().unwrap();
    let offsets = snapshot_offsets(dir.path());
    let newest = *offsets.last().unwrap();
    flip_byte(&snapshot_path(dir.path(), newest), 20, 0x40);
    // A torn one too: the next older snapshot cut short.
    let older = offsets[offsets.len() - 2];
    let older_path = snapshot_path(dir.path(), older);
    let older_bytes = std::fs::read(&older_path).unwrap();
    std::fs::write(&older_path, &older_bytes[..older_bytes.len() - 3]).unwrap();

    let (engine, topic) = open(dir.path());
    touch(&engine, &topic);
    let remaining = snapshot_offsets(dir.path());
    assert!(
        !remaining.contains(&newest),
        "the corrupt snapshot is removed"
    );
    assert!(!remaining.contains(&older), "the torn snapshot is removed");
    assert_state_is_at(&engine, &topic, &infos);
    engine.close().unwrap();
}

#[test]
fn every_snapshot_lost_the_state_is_replayed_from_the_log_start() {
    let dir = scratch();
    let (engine, topic) = open(dir.path());
    let infos = fill(&engine, &topic, 30);
    engine.close().unwrap();
    for offset in snapshot_offsets(dir.path()) {
        std::fs::remove_file(snapshot_path(dir.path(), offset)).unwrap();
    }
    let (engine, topic) = open(dir.path());
    assert_state_is_at(&engine, &topic, &infos);
    engine.close().unwrap();
}

#[test]
fn a_snapshot_above_the_log_end_is_removed_at_open_and_not_believed() {
    let dir = scratch();
    let (engine, topic) = open(dir.path());
    let infos = fill(&engine, &topic, 6);
    engine.close().unwrap();
    // As a crash may leave: a snapshot written at a roll whose batches were then lost. It says
    // the producer moved on to epoch 9.
    let log_end = infos.last().unwrap().last_offset.next().0;
    let newest = std::fs::read(snapshot_path(dir.path(), log_end)).unwrap();
    let mut ahead = newest.clone();
    ahead[18..20].copy_from_slice(&9i16.to_be_bytes());
    let crc = crc32c::crc32c(&ahead[6..]);
    ahead[2..6].copy_from_slice(&crc.to_be_bytes());
    std::fs::write(snapshot_path(dir.path(), log_end + 100), &ahead).unwrap();
    std::fs::write(
        partition_dir(dir.path()).join(format!("{:020}.snapshot.tmp", log_end + 7)),
        b"x",
    )
    .unwrap();

    let (engine, topic) = open(dir.path());
    touch(&engine, &topic);
    assert_eq!(snapshot_offsets(dir.path()).last(), Some(&log_end));
    assert!(names_ending(&partition_dir(dir.path()), ".tmp").is_empty());
    assert_state_is_at(&engine, &topic, &infos);
    engine.close().unwrap();
}

#[test]
fn snapshots_go_with_the_log_below_its_start_and_above_a_truncation() {
    let dir = scratch();
    let (engine, topic) = open(dir.path());
    let infos = fill(&engine, &topic, 40);
    let offsets = snapshot_offsets(dir.path());
    assert!(offsets.len() >= 3, "{offsets:?}");
    let start = offsets[1];
    engine
        .delete_records(&topic, 0, Offset(start))
        .wait()
        .unwrap();
    assert!(
        snapshot_offsets(dir.path())
            .iter()
            .all(|offset| *offset >= start)
    );

    let newest = *snapshot_offsets(dir.path()).last().unwrap();
    let cut = infos
        .iter()
        .find(|info| info.first_offset.0 > start)
        .unwrap()
        .first_offset;
    assert!(cut.0 < newest);
    engine.truncate_to(&topic, 0, cut).wait().unwrap();
    assert!(
        snapshot_offsets(dir.path())
            .iter()
            .all(|offset| *offset <= cut.0)
    );
    let kept: Vec<AppendInfo> = infos
        .iter()
        .copied()
        .filter(|info| info.first_offset < cut)
        .collect();
    assert_state_is_at(&engine, &topic, &kept);

    engine
        .truncate_fully_and_start_at(&topic, 0, Offset(5000))
        .wait()
        .unwrap();
    assert!(
        snapshot_offsets(dir.path())
            .iter()
            .all(|offset| *offset >= 5000)
    );
    engine.close().unwrap();
    let (engine, topic) = open(dir.path());
    // Nothing of the producer is left: it starts anywhere.
    let fresh = send(&engine, &topic, producer_batch(EPOCH - 2, 77)).unwrap();
    assert_eq!(fresh.first_offset, Offset(5000));
    engine.close().unwrap();
}

#[test]
fn roll_snapshots_synced_with_their_seals_survive_a_power_cut() {
    use seglog::io::sim::{CrashMode, SimStorage};
    use std::sync::Arc;

    let dir = scratch();
    let sim = SimStorage::new(dir.path(), 3).unwrap();
    let config = keeping_producers(1).with_direct_writes(false);
    let open_sim = || {
        let engine =
            Engine::open_with_storage(dir.path(), config.clone(), Arc::new(sim.clone())).unwrap();
        let topic = match engine.create_topic("snap", 1, small_segments(1024, 256)) {
            Ok(topic) => topic,
            Err(_) => TopicName::parse("snap").unwrap(),
        };
        (engine, topic)
    };
    let (engine, topic) = open_sim();
    let mut infos = fill(&engine, &topic, 30);
    // A durable append is answered after every earlier seal sync, snapshots included.
    let durable = engine
        .append(&topic, 0, producer_batch(EPOCH, 60), Durability::Durable)
        .wait()
        .unwrap();
    infos.push(durable);
    drop(engine);
    sim.crash_with(CrashMode::DropVolatile).unwrap();

    let rolled: Vec<u64> = segment_bases(&partition_dir(dir.path()))
        .into_iter()
        .filter(|base| *base > 0)
        .collect();
    assert!(rolled.len() >= 2, "{rolled:?}");
    for base in &rolled {
        let bytes = std::fs::read(snapshot_path(dir.path(), *base)).unwrap();
        assert_eq!(bytes.len(), 10 + 46, "the snapshot at {base} is whole");
        assert_eq!(crc32c::crc32c(&bytes[6..]).to_be_bytes(), bytes[2..6]);
    }
    let (engine, topic) = open_sim();
    assert_state_is_at(&engine, &topic, &infos);
    engine.close().unwrap();
}

#[test]
fn retention_removes_the_snapshots_below_the_new_log_start() {
    use support::configs::with_settings;
    let dir = scratch();
    let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
    let config = with_settings(
        small_segments(1024, 256),
        &[("retention.bytes", "2048"), ("file.delete.delay.ms", "0")],
    );
    let topic = engine.create_topic("snap", 1, config).unwrap();
    let infos = fill(&engine, &topic, 40);
    let before = snapshot_offsets(dir.path());
    engine.apply_retention(Some("snap")).unwrap();
    let description = engine.describe_topic("snap").unwrap();
    let log_start = description.partitions[0].log_start_offset.0;
    assert!(log_start > before[0], "retention deleted segments");
    let after = snapshot_offsets(dir.path());
    assert!(
        after.iter().all(|offset| *offset >= log_start),
        "{after:?} from {log_start}"
    );
    assert!(
        after.contains(&log_start),
        "the snapshot at the first kept segment stays"
    );
    assert_state_is_at(&engine, &topic, &infos);
    engine.close().unwrap();
}
