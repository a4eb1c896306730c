//! The engine end to end (issue 3: the engine): concurrent appends from many threads to many
//! partitions read back byte for byte and in order; group commit syncs many appends with few
//! `fdatasync`s and never answers a durable append before a sync that covers it; an engine dropped
//! without `close` reopens with every durable append; topics survive a restart; typed errors for
//! unknown partitions and a closed engine. Runs on positioned I/O with hooks that count and fail syncs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions, Isolation};
use seglog::error::{AppendError, EngineUnavailable, ReadError};
use seglog::format::{BatchBuilder, Compression, NewRecord};
use seglog::group::ConsumerRecord;
use seglog::io::Storage;
use seglog::io::hooked::{StorageHooks, StorageOp};
use seglog::types::{Offset, TimestampMs, TopicName};
use std::time::Duration;
use support::batches;
use support::engines::{append, engine_config, engine_with_topic, fetch_values};
use support::hooks::{hooked_pio, wait_every};

mod support;

/// Hooks that record every `fdatasync` (which file, and how long it was when synced), and fail
/// every `fdatasync` with EIO while `fail_syncs` is set.
#[derive(Debug, Default)]
struct SyncCounter {
    syncs: Mutex<Vec<(PathBuf, u64)>>,
    sync_calls: AtomicUsize,
    fail_syncs: std::sync::atomic::AtomicBool,
}

impl StorageHooks for SyncCounter {
    fn before(&self, op: StorageOp, _path: &Path) -> io::Result<()> {
        if op == StorageOp::SyncData && self.fail_syncs.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(5));
        }
        Ok(())
    }

    fn after(&self, op: StorageOp, path: &Path) {
        if op == StorageOp::SyncData {
            let length = std::fs::metadata(path).map_or(0, |metadata| metadata.len());
            self.sync_calls.fetch_add(1, Ordering::SeqCst);
            self.syncs.lock().unwrap().push((path.to_owned(), length));
        }
    }
}

/// Positioned I/O with a [`SyncCounter`].
fn counting_storage() -> (Arc<dyn Storage>, Arc<SyncCounter>) {
    let counter = Arc::new(SyncCounter::default());
    (hooked_pio(counter.clone()), counter)
}

fn batch(value: &str) -> Bytes {
    keyed_batch(None, value)
}

/// Appends `value` to the partition, durable, and checks it is acknowledged so; returns its
/// offset.
fn append_durable(engine: &Engine, topic: &TopicName, partition: u32, value: &str) -> u64 {
    let append = engine.append(topic, partition, batch(value), Durability::Durable);
    let info = append.wait().unwrap();
    assert!(info.durable);
    info.first_offset.0
}

/// The record at `offset` of partition 0, which must be there.
fn record_at(engine: &Engine, topic: &TopicName, offset: u64, what: &str) -> ConsumerRecord {
    let record = engine
        .fetch_record(topic, 0, Offset(offset))
        .wait()
        .unwrap();
    let record = record.unwrap_or_else(|| panic!("{what}: no record at {offset}"));
    assert_eq!(record.offset, Offset(offset));
    record
}

/// A one-record batch stamped now.
fn keyed_batch(key: Option<&[u8]>, value: &str) -> Bytes {
    batches::keyed_batch(key, Some(value.as_bytes()), TimestampMs::now().0)
}

#[test]
fn concurrent_appends_to_many_partitions_read_back_identically_and_in_order() {
    let (_dir, engine, topic) = engine_with_topic(engine_config(2), "orders", 8);
    let threads: Vec<_> = (0..6)
        .map(|thread| {
            let engine = engine.clone();
            let topic = topic.clone();
            std::thread::spawn(move || {
                let mut acks = Vec::new();
                for sequence in 0..200 {
                    let partition = (thread + sequence) % 8;
                    let value = format!("t{thread}-s{sequence}");
                    let info = engine
                        .append(&topic, partition as u32, batch(&value), Durability::Written)
                        .wait()
                        .unwrap();
                    acks.push((partition as u32, info.first_offset.0, value));
                }
                acks
            })
        })
        .collect();
    let mut expected: BTreeMap<u32, Vec<(u64, String)>> = BTreeMap::new();
    for thread in threads {
        for (partition, offset, value) in thread.join().unwrap() {
            expected.entry(partition).or_default().push((offset, value));
        }
    }
    for (partition, mut acks) in expected {
        acks.sort();
        let read = fetch_values(&engine, &topic, partition);
        assert_eq!(read, acks, "partition {partition}");
        let offsets: Vec<u64> = read.iter().map(|(offset, _)| *offset).collect();
        assert_eq!(
            offsets,
            (0..read.len() as u64).collect::<Vec<_>>(),
            "dense offsets"
        );
    }
    engine.close().unwrap();
}

#[test]
fn group_commit_acknowledges_many_durable_appends_with_few_syncs_each_after_its_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (storage, counter) = counting_storage();
    let engine = Engine::open_with_storage(dir.path(), engine_config(1), storage).unwrap();
    let topic = engine
        .create_topic("durable", 2, LogConfig::default())
        .unwrap();
    let batch_bytes = batch("v-0000").len() as u64;
    let writers = 8;
    let appends_per_writer = 50;
    let threads: Vec<_> = (0..writers)
        .map(|writer| {
            let engine = engine.clone();
            let topic = topic.clone();
            let counter = counter.clone();
            std::thread::spawn(move || {
                for sequence in 0..appends_per_writer {
                    let partition = (writer % 2) as u32;
                    let value = format!("v-{:04}", writer * 100 + sequence);
                    let offset = append_durable(&engine, &topic, partition, &value);
                    // One batch per offset, all the same size: this batch ends here in the file.
                    let end = (offset + 1) * batch_bytes;
                    let file = format!("durable-{partition}");
                    let covered = counter.syncs.lock().unwrap().iter().any(|(path, length)| {
                        path.to_string_lossy().contains(&file)
                            && path.extension().is_some_and(|e| e == "log")
                            && *length >= end
                    });
                    assert!(
                        covered,
                        "durable ack for offset {offset} before a sync covering byte {end}"
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let appends = writers * appends_per_writer;
    let sync_count = counter.sync_calls.load(Ordering::SeqCst);
    assert!(
        sync_count < appends,
        "{sync_count} syncs for {appends} durable appends: no group commit"
    );
    engine.close().unwrap();
}

#[test]
fn dropping_the_engine_without_close_keeps_every_durable_append() {
    let dir = tempfile::tempdir().unwrap();
    let topic = TopicName::parse("kept").unwrap();
    let mut acknowledged = Vec::new();
    {
        let engine = Engine::open(dir.path(), engine_config(2)).unwrap();
        engine
            .create_topic("kept", 3, LogConfig::default())
            .unwrap();
        for sequence in 0..60u32 {
            let value = format!("value-{sequence}");
            let offset = append_durable(&engine, &topic, sequence % 3, &value);
            acknowledged.push((sequence % 3, offset, value));
        }
    }
    let engine = Engine::open(dir.path(), engine_config(2)).unwrap();
    for partition in 0..3 {
        let read = fetch_values(&engine, &topic, partition);
        let expected: Vec<(u64, String)> = acknowledged
            .iter()
            .filter(|(p, _, _)| *p == partition)
            .map(|(_, offset, value)| (*offset, value.clone()))
            .collect();
        assert_eq!(read, expected);
    }
    engine.close().unwrap();
}

/// The engine writes the recovery-point checkpoint in the background every
/// `recovery_point_checkpoint_interval_ms`: after durable appends, with no explicit checkpoint or
/// close, the file names the partition's recovery point at its log end, where recovery after a
/// crash starts; and the engine dropped without `close` reopens with every durable append.
#[test]
fn the_recovery_point_checkpoint_is_written_in_the_background() {
    let (config, (dir, engine, topic)) = checkpointing_every(10, "checkpointed");
    for sequence in 0..5 {
        append_durable(&engine, &topic, 0, &format!("v{sequence}"));
    }
    let path = dir.path().join("recovery-point-offset-checkpoint");
    let line = || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let line = text
            .lines()
            .find(|line| line.starts_with("checkpointed 0 "));
        line.map(str::to_owned)
    };
    // A bound for a stuck thread, not a timing: the interval is 10 ms.
    let written = || line().as_deref() == Some("checkpointed 0 5");
    wait_every(Duration::from_millis(5), Duration::from_secs(60), written);
    assert_eq!(line().as_deref(), Some("checkpointed 0 5"));
    drop(engine);
    assert_reopens_holding(dir.path(), config, &topic, 5);
}

/// An engine of one shard writing the recovery-point checkpoint every `interval_ms`, with a topic
/// `name` of one partition; and its configuration.
fn checkpointing_every(
    interval_ms: u64,
    name: &str,
) -> (EngineConfig, (tempfile::TempDir, Engine, TopicName)) {
    let config = engine_config(1).with_recovery_point_checkpoint_interval_ms(interval_ms);
    (config.clone(), engine_with_topic(config, name, 1))
}

/// The engine in `dir`, opened with `config`, holds `count` records in partition 0 of `topic`.
fn assert_reopens_holding(dir: &Path, config: EngineConfig, topic: &TopicName, count: usize) {
    let engine = Engine::open(dir, config).unwrap();
    assert_eq!(fetch_values(&engine, topic, 0).len(), count);
    engine.close().unwrap();
}

/// Dropping the last handle releases the engine at once, its directory lock included, even
/// while a background checkpoint round holds it: the next open succeeds right away.
#[test]
fn dropping_the_last_handle_releases_the_engine_even_during_a_background_checkpoint() {
    let (config, (dir, engine, topic)) = checkpointing_every(1, "released");
    drop(engine);
    for round in 0..50 {
        let engine = Engine::open(dir.path(), config.clone()).unwrap();
        let clone = engine.clone();
        clone
            .append(&topic, 0, batch(&format!("v{round}")), Durability::Durable)
            .wait()
            .unwrap();
        drop(clone);
        drop(engine);
    }
    assert_reopens_holding(dir.path(), config, &topic, 50);
}

#[test]
fn topics_and_their_config_survive_a_restart_and_can_grow_and_be_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut topic_config = LogConfig::default();
    topic_config.set("segment.bytes", "1048576").unwrap();
    topic_config.set("cleanup.policy", "compact").unwrap();
    {
        let engine = Engine::open(dir.path(), engine_config(2)).unwrap();
        engine.create_topic("a", 2, topic_config.clone()).unwrap();
        engine.create_topic("b", 1, LogConfig::default()).unwrap();
        assert!(engine.create_topic("a", 1, LogConfig::default()).is_err());
        assert!(
            engine
                .create_topic("bad/name", 1, LogConfig::default())
                .is_err()
        );
        engine.add_partitions("a", 4).unwrap();
        assert!(engine.add_partitions("a", 3).is_err());
        engine
            .append(
                &TopicName::parse("a").unwrap(),
                3,
                keyed_batch(Some(b"k"), "x"),
                Durability::Written,
            )
            .wait()
            .unwrap();
        engine.close().unwrap();
    }
    let engine = Engine::open(dir.path(), engine_config(2)).unwrap();
    let topics = engine.list_topics();
    assert_eq!(topics.len(), 2);
    let description = engine.describe_topic("a").unwrap();
    assert_eq!(description.config, topic_config);
    assert_eq!(description.partitions.len(), 4);
    assert_eq!(description.partitions[3].log_end_offset, Offset(1));
    assert_eq!(description.partitions[3].durable_offset, Offset(1));
    engine.delete_topic("b").unwrap();
    assert!(!dir.path().join("b-0").exists());
    assert_eq!(engine.list_topics().len(), 1);
    engine.close().unwrap();
}

/// Hooks that hold every `fdatasync` of a `.log` until `open` is set, counting those begun.
#[derive(Debug, Default)]
struct HeldLogSyncs {
    open: Mutex<bool>,
    opened: std::sync::Condvar,
    begun: AtomicUsize,
}

impl StorageHooks for HeldLogSyncs {
    fn before(&self, op: StorageOp, path: &Path) -> io::Result<()> {
        if op == StorageOp::SyncData && path.extension().is_some_and(|e| e == "log") {
            self.begun.fetch_add(1, Ordering::SeqCst);
            let open = self.open.lock().unwrap();
            drop(self.opened.wait_while(open, |open| !*open).unwrap());
        }
        Ok(())
    }
}

/// With `background_sync_bytes` set, a partition with that much appended and unsynced is synced
/// by the sync threads while its appends are answered without waiting for it; the syncs move
/// the durable offset with no flush asked for.
#[test]
fn appends_past_background_sync_bytes_are_synced_in_the_background_and_answered_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = Arc::new(HeldLogSyncs::default());
    let storage = hooked_pio(hooks.clone());
    let engine_config = engine_config(1).with_background_sync_bytes(64 * 1024);
    let engine = Engine::open_with_storage(dir.path(), engine_config, storage).unwrap();
    let topic = engine
        .create_topic("bulk", 1, LogConfig::default())
        .unwrap();
    let value = "v".repeat(4000);
    let appends = 40u64;
    // Every append is answered while the background sync is held: none waits for it.
    for _ in 0..appends {
        let info = engine
            .append(&topic, 0, batch(&value), Durability::Written)
            .wait()
            .unwrap();
        assert!(!info.durable);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while hooks.begun.load(Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no background sync after {appends} appends of 4 KB"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    *hooks.open.lock().unwrap() = true;
    hooks.opened.notify_all();
    // No flush was asked for; the background syncs made the offsets durable all the same (up to
    // the last 64 KiB or less).
    let description = engine.describe_topic("bulk").unwrap();
    let partition = &description.partitions[0];
    assert_eq!(partition.log_end_offset, Offset(appends));
    assert!(
        partition.durable_offset.0 >= appends - 64 * 1024 / 4000,
        "durable through {} of {appends}",
        partition.durable_offset
    );
    engine.close().unwrap();
}

/// By default (`background_sync_bytes` 0) appends answered once written are synced only by the
/// flush policy, a roll or a close.
#[test]
fn by_default_nothing_is_synced_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let (storage, counter) = counting_storage();
    assert_eq!(EngineConfig::default().background_sync_bytes, 0);
    let engine = Engine::open_with_storage(dir.path(), engine_config(1), storage).unwrap();
    let topic = engine
        .create_topic("bulk", 1, LogConfig::default())
        .unwrap();
    let value = "v".repeat(4000);
    for _ in 0..40 {
        append(&engine, &topic, 0, batch(&value));
    }
    let description = engine.describe_topic("bulk").unwrap();
    assert_eq!(description.partitions[0].durable_offset, Offset(0));
    let log_syncs = counter
        .syncs
        .lock()
        .unwrap()
        .iter()
        .filter(|(path, _)| path.extension().is_some_and(|e| e == "log"))
        .count();
    assert_eq!(log_syncs, 0);
    engine.close().unwrap();
}

#[test]
fn fetch_waits_for_new_data_and_durable_reads_see_only_synced_offsets() {
    let (_dir, engine, topic) = engine_with_topic(engine_config(1), "tail", 1);
    let waiting_fetch = |offset, max_wait_ms| {
        let options = FetchOptions {
            max_wait_ms,
            ..FetchOptions::default()
        };
        engine.fetch(&topic, 0, Offset(offset), options)
    };
    let waiting = waiting_fetch(0, 10_000);
    let appender = {
        let engine = engine.clone();
        let topic = topic.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            engine
                .append(&topic, 0, batch("late"), Durability::Written)
                .wait()
                .unwrap()
        })
    };
    let data = waiting.wait().unwrap();
    assert!(
        !data.records.is_empty(),
        "the parked fetch was answered by the append"
    );
    appender.join().unwrap();
    let durable_only = FetchOptions {
        isolation: Isolation::Durable,
        ..FetchOptions::default()
    };
    let durable_read = || engine.fetch(&topic, 0, Offset(0), durable_only).wait();
    assert!(
        durable_read().unwrap().records.is_empty(),
        "nothing is durable before a sync"
    );
    engine.flush(&topic, 0).wait().unwrap();
    assert_eq!(durable_read().unwrap().records, data.records);
    let expired = waiting_fetch(1, 20);
    assert!(
        expired.wait().unwrap().records.is_empty(),
        "a wait with no data ends empty at its deadline"
    );
    engine.close().unwrap();
}

#[test]
fn unknown_partitions_bad_batches_and_a_closed_engine_are_typed_errors() {
    let (dir, engine, topic) = engine_with_topic(engine_config(1), "t", 1);
    let missing = engine
        .append(&topic, 5, batch("x"), Durability::Written)
        .wait();
    assert!(matches!(
        missing,
        Err(AppendError::UnknownPartition { partition: 5, .. })
    ));
    let garbage = engine
        .append(
            &topic,
            0,
            Bytes::from_static(b"garbage"),
            Durability::Written,
        )
        .wait();
    assert!(matches!(garbage, Err(AppendError::InvalidBatch { .. })));
    let out_of_range = engine
        .fetch(&topic, 0, Offset(7), FetchOptions::default())
        .wait();
    assert!(matches!(
        out_of_range,
        Err(ReadError::OffsetOutOfRange { .. })
    ));
    assert!(
        Engine::open(dir.path(), engine_config(1)).is_err(),
        "a second opener is refused"
    );
    engine.close().unwrap();
    let closed = engine
        .append(&topic, 0, batch("x"), Durability::Written)
        .wait();
    assert!(matches!(
        closed,
        Err(AppendError::Unavailable(EngineUnavailable::Closed))
    ));
}

#[test]
fn a_failed_sync_is_never_acknowledged_and_fails_the_partition_until_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (storage, counter) = counting_storage();
    let topic = TopicName::parse("fragile").unwrap();
    {
        let engine = Engine::open_with_storage(dir.path(), engine_config(1), storage).unwrap();
        engine
            .create_topic("fragile", 2, LogConfig::default())
            .unwrap();
        let durable = |partition, value: &str| {
            engine
                .append(&topic, partition, batch(value), Durability::Durable)
                .wait()
        };
        assert!(durable(0, "before").unwrap().durable);
        counter.fail_syncs.store(true, Ordering::SeqCst);
        let failed = durable(0, "lost");
        assert!(matches!(failed, Err(AppendError::Storage(_))), "{failed:?}");
        counter.fail_syncs.store(false, Ordering::SeqCst);
        let after = durable(0, "after");
        assert!(
            after.is_err(),
            "no acknowledgement on a failed partition: {after:?}"
        );
        let written = engine
            .append(&topic, 0, batch("written"), Durability::Written)
            .wait();
        assert!(written.is_err(), "not even a written one: {written:?}");
        assert!(
            durable(1, "other").unwrap().durable,
            "other partitions are unaffected"
        );
    }
    let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
    let values = values_of(&engine, &topic, 0);
    assert_eq!(values[0], "before", "the acknowledged append survives");
    assert!(!values.contains(&"after".to_owned()));
    // A reopened partition acknowledges again.
    append_durable(&engine, &topic, 0, "again");
    engine.close().unwrap();
}

/// Every `.index` and `.timeindex` file under `dir`, by name, with its bytes.
fn index_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "index" || ext == "timeindex")
        })
        .map(|path| {
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&path).unwrap(),
            )
        })
        .collect()
}

#[test]
fn coalesced_appends_index_exactly_as_recovery_rebuilds_even_across_index_full_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let topic = TopicName::parse("dense").unwrap();
    let mut topic_config = LogConfig::default();
    topic_config.set("segment.index.bytes", "48").unwrap();
    topic_config.set("index.interval.bytes", "100").unwrap();
    {
        let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
        engine.create_topic("dense", 1, topic_config).unwrap();
        let pendings: Vec<_> = (0..400)
            .map(|sequence| {
                engine.append(
                    &topic,
                    0,
                    batch(&format!("value-{sequence:05}")),
                    Durability::Written,
                )
            })
            .collect();
        for pending in pendings {
            pending.wait().unwrap();
        }
        engine.close().unwrap();
    }
    let partition_dir = dir.path().join("dense-0");
    let appended = index_files(&partition_dir);
    assert!(
        appended.len() > 10,
        "index-full rolls made many segments: {}",
        appended.len()
    );
    for name in appended.keys() {
        std::fs::remove_file(partition_dir.join(name)).unwrap();
    }
    std::fs::remove_file(dir.path().join(".kafka_cleanshutdown")).unwrap();
    // Kafka's file and seglog's copies (one or two).
    for name in [".0", ".1", ""].map(|copy| format!("recovery-point-offset-checkpoint{copy}")) {
        let _ = std::fs::remove_file(dir.path().join(name));
    }
    assert!(!dir.path().join("recovery-point-offset-checkpoint").exists());
    let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
    let values = values_of(&engine, &topic, 0);
    assert_eq!(values.len(), 400);
    engine.close().unwrap();
    assert_eq!(
        index_files(&partition_dir),
        appended,
        "rebuilt indexes equal the appended ones"
    );
}

/// Five records per batch, keyed `k<offset>` with values `v<offset>` and create times
/// `1_000 + offset`, for offsets `first..first + 5`, the records section compressed by `codec`.
fn five_record_batch(first: u64, codec: Compression) -> Bytes {
    let mut builder = BatchBuilder::new(0);
    let texts: Vec<(String, String)> = (first..first + 5)
        .map(|offset| (format!("k{offset}"), format!("v{offset}")))
        .collect();
    for (index, (key, value)) in texts.iter().enumerate() {
        builder.push(&NewRecord {
            timestamp_ms: 1_000 + first as i64 + index as i64,
            key: Some(key.as_bytes()),
            value: Some(value.as_bytes()),
            headers: &[],
        });
    }
    builder.build_compressed(codec).unwrap().unwrap()
}

#[test]
fn fetch_record_returns_each_record_with_its_offset_key_value_and_timestamp_compressed_or_not() {
    let (_dir, engine, topic) = engine_with_topic(engine_config(1), "lookups", 1);
    let codecs = [
        Compression::None,
        Compression::Lz4,
        Compression::None,
        Compression::Zstd,
    ];
    for (first, codec) in [0, 5, 10, 15].into_iter().zip(codecs) {
        append(&engine, &topic, 0, five_record_batch(first, codec));
    }
    for offset in 0..20u64 {
        let record = record_at(&engine, &topic, offset, "compressed or not");
        assert_eq!(record.key.as_deref(), Some(format!("k{offset}").as_bytes()));
        assert_eq!(
            record.value.as_deref(),
            Some(format!("v{offset}").as_bytes())
        );
        assert_eq!(record.timestamp, TimestampMs(1_000 + offset as i64));
        assert_eq!(record.partition, 0);
    }
}

/// Batches of 100 records of 1 KiB (each about 100 KiB): the first lookup in a batch reads it
/// whole, later ones only the chunks holding their record (`segment/lookup.rs`). Both give the
/// record appended, with its header, at every offset, records crossing chunk boundaries included;
/// so does a shard with no room for digests, whose lookups all read their batch whole.
#[test]
fn fetch_record_in_large_batches_returns_each_record_on_the_first_lookup_and_on_later_ones() {
    for digest_bytes_max in [EngineConfig::default().lookup_digest_bytes_max, 0] {
        let config = engine_config(1).with_lookup_digest_bytes_max(digest_bytes_max);
        let (_dir, engine, topic) = engine_with_topic(config, "lookups", 1);
        for first in [0u64, 100, 200] {
            append(&engine, &topic, 0, kib_batch(first));
        }
        for round in 0..2 {
            for offset in (0..300u64).rev() {
                let record = record_at(&engine, &topic, offset, &format!("round {round}"));
                assert_eq!(record.value.as_deref(), Some(kib_value(offset).as_slice()));
                assert_eq!(record.headers.len(), 1);
                assert_eq!(
                    record.headers[0].value.as_deref(),
                    Some(format!("{offset:08}").as_bytes())
                );
                assert_eq!(record.timestamp, TimestampMs(1_000 + offset as i64));
            }
        }
        let at_end = engine.fetch_record(&topic, 0, Offset(300)).wait().unwrap();
        assert!(at_end.is_none());
    }
}

/// The 1 KiB value of the record at `offset` in `kib_batch`'s batches.
fn kib_value(offset: u64) -> Vec<u8> {
    format!("{offset:08}").repeat(128).into_bytes()
}

/// 100 records of 1 KiB for offsets `first..first + 100`, each with a header naming its offset
/// and the create time `1_000 + offset`.
fn kib_batch(first: u64) -> Bytes {
    let mut builder = BatchBuilder::new(0);
    let values: Vec<Vec<u8>> = (first..first + 100).map(kib_value).collect();
    for (index, value) in values.iter().enumerate() {
        builder.push(&NewRecord {
            timestamp_ms: 1_000 + first as i64 + index as i64,
            key: None,
            value: Some(value),
            headers: &[("at", Some(value.get(..8).unwrap()))],
        });
    }
    builder.build().unwrap()
}

#[test]
fn fetch_record_is_none_at_the_log_end_and_out_of_range_past_it_or_below_the_log_start() {
    let (_dir, engine, topic) = engine_with_topic(engine_config(1), "lookups", 1);
    for first in [0, 5] {
        let batch = five_record_batch(first, Compression::None);
        append(&engine, &topic, 0, batch);
    }
    let at_end = engine.fetch_record(&topic, 0, Offset(10)).wait().unwrap();
    assert!(at_end.is_none(), "the log end holds no record yet");
    let past_end = engine.fetch_record(&topic, 0, Offset(11)).wait();
    assert!(
        matches!(past_end, Err(ReadError::OffsetOutOfRange { .. })),
        "{past_end:?}"
    );
    engine.delete_records(&topic, 0, Offset(7)).wait().unwrap();
    let deleted = engine.fetch_record(&topic, 0, Offset(6)).wait();
    assert!(
        matches!(deleted, Err(ReadError::OffsetOutOfRange { .. })),
        "{deleted:?}"
    );
    let kept = engine.fetch_record(&topic, 0, Offset(7)).wait().unwrap();
    assert_eq!(kept.map(|record| record.offset), Some(Offset(7)));
    let unknown = engine.fetch_record(&topic, 1, Offset(0)).wait();
    assert!(
        matches!(unknown, Err(ReadError::UnknownPartition { .. })),
        "{unknown:?}"
    );
}

/// The record values of a partition, in offset order.
fn values_of(engine: &Engine, topic: &TopicName, partition: u32) -> Vec<String> {
    fetch_values(engine, topic, partition)
        .into_iter()
        .map(|(_, value)| value)
        .collect()
}

/// A value of about `bytes` bytes, distinct per partition and sequence.
fn sized_value(partition: usize, sequence: usize, bytes: usize) -> String {
    let mut value = format!("p{partition}-s{sequence}-");
    value.extend(std::iter::repeat_n('v', bytes.saturating_sub(value.len())));
    value
}

/// Appends far more than the shard's ring keeps in flight (32 writes), to several partitions, some
/// large enough to go as several writes: on io_uring they complete in any order, each group is
/// answered once its own writes completed, and a full ring makes a write wait, not fail. Every
/// append is answered with the next offsets of its partition and reads back in order.
#[test]
fn appends_beyond_the_writes_a_ring_keeps_in_flight_are_all_answered_and_read_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
    let log_config = LogConfig::default().with_max_message_bytes(8 * 1024 * 1024);
    let partitions = 6;
    let topic = engine.create_topic("wide", partitions, log_config).unwrap();
    let mut pending = Vec::new();
    let mut expected = vec![Vec::new(); partitions as usize];
    for sequence in 0..40 {
        for (partition, values) in expected.iter_mut().enumerate() {
            let bytes = match sequence % 8 {
                0 => 2 * 1024 * 1024 + 512 * 1024,
                _ => 3000 + 700 * partition,
            };
            let value = sized_value(partition, sequence, bytes);
            let append =
                engine.append(&topic, partition as u32, batch(&value), Durability::Written);
            pending.push((partition, append));
            values.push(value);
        }
    }
    let mut next_offset = vec![0u64; partitions as usize];
    for (partition, append) in pending {
        let info = append.wait().unwrap();
        assert_eq!(
            info.first_offset,
            Offset(next_offset[partition]),
            "partition {partition}"
        );
        next_offset[partition] += 1;
    }
    for (partition, appended) in expected.iter().enumerate() {
        let values = values_of(&engine, &topic, partition as u32);
        assert!(
            &values == appended,
            "partition {partition} reads back as appended"
        );
    }
    engine.close().unwrap();
}

type InFlightAppend = (
    usize,
    String,
    seglog::engine::Pending<seglog::log::AppendInfo, AppendError>,
);

/// An engine of one shard with 400 appends of 20 KB to 4 partitions sent and none waited for.
fn engine_with_appends_in_flight() -> (tempfile::TempDir, Engine, TopicName, Vec<InFlightAppend>) {
    let (dir, engine, topic) = engine_with_topic(engine_config(1), "t", 4);
    let pending = (0..400)
        .map(|sequence| {
            let partition = sequence % 4;
            let value = sized_value(partition, sequence, 20_000);
            let append =
                engine.append(&topic, partition as u32, batch(&value), Durability::Written);
            (partition, value, append)
        })
        .collect();
    (dir, engine, topic, pending)
}

#[test]
fn closing_with_appends_in_flight_answers_them_all_and_keeps_them() {
    let (dir, engine, topic, pending) = engine_with_appends_in_flight();
    engine.close().unwrap();
    let mut expected = vec![Vec::new(); 4];
    for (partition, value, append) in pending {
        append.wait().expect("answered before close returned");
        expected[partition].push(value);
    }
    let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
    for (partition, values) in expected.iter().enumerate() {
        let read = values_of(&engine, &topic, partition as u32);
        assert!(&read == values, "partition {partition}");
    }
}

/// Dropping the engine while appends are queued and written behind: the shard answers each one
/// (none hangs), and each one answered `Ok` is there after a reopen.
#[test]
fn dropping_the_engine_with_appends_in_flight_answers_each_and_keeps_those_answered() {
    let (dir, engine, topic, pending) = engine_with_appends_in_flight();
    drop(engine);
    let mut answered = vec![Vec::new(); 4];
    for (partition, value, append) in pending {
        if append.wait().is_ok() {
            answered[partition].push(value);
        }
    }
    assert!(answered.iter().any(|values| !values.is_empty()));
    let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
    for (partition, values) in answered.iter().enumerate() {
        let read = values_of(&engine, &topic, partition as u32);
        assert!(
            read.starts_with(values),
            "partition {partition} keeps every append answered Ok"
        );
    }
}
