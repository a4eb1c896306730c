//! The async forms (issue 45): the engine's administration, `flush_all`, `checkpoint`, `compact`
//! and `close`, the producer's `send`, `flush` and `close`, and the consumer's calls resolve to
//! what their blocking forms return, with their file work done off the caller's thread; and
//! `append_async` has the shard validate large and compressed batches, with `append`'s errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_executor::block_on;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine};
use seglog::error::AppendError;
use seglog::format::{BatchBuilder, Compression, NewRecord};
use seglog::io::hooked::{StorageHooks, StorageOp};
use seglog::producer::{ProducerConfig, ProducerRecord};
use seglog::types::Offset;
use support::assert_matches;
use support::engines::{engine_config, fetch_values, temp_engine};
use support::groups::{Groups, config, produce};
use support::hooks::hooked;

mod support;

/// Records the thread of every file operation that changes the directory or syncs.
#[derive(Debug, Default)]
struct FileWorkThreads {
    seen: Mutex<Vec<(StorageOp, PathBuf, ThreadId)>>,
}

impl StorageHooks for FileWorkThreads {
    fn before(&self, op: StorageOp, path: &Path) -> std::io::Result<()> {
        if !matches!(op, StorageOp::Read | StorageOp::Write | StorageOp::Open) {
            let thread = std::thread::current().id();
            self.seen
                .lock()
                .unwrap()
                .push((op, path.to_owned(), thread));
        }
        Ok(())
    }
}

impl FileWorkThreads {
    fn taken(&self) -> Vec<(StorageOp, PathBuf, ThreadId)> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

#[test]
fn the_engines_async_forms_do_their_file_work_off_the_callers_thread() {
    let hooks = Arc::new(FileWorkThreads::default());
    let dir = tempfile::tempdir().unwrap();
    let engine =
        Engine::open_with_storage(dir.path(), engine_config(2), hooked(hooks.clone())).unwrap();
    // The open is a blocking call on this thread: what it did is not counted.
    hooks.taken();
    let caller = std::thread::current().id();
    let mut compacted = LogConfig::default();
    compacted.set("cleanup.policy", "compact").unwrap();
    let topic = block_on(async {
        let topic = engine.create_topic_async("t", 2, compacted).await.unwrap();
        engine.add_partitions_async("t", 3).await.unwrap();
        let mut altered = LogConfig::default();
        altered.set("cleanup.policy", "compact").unwrap();
        altered.set("retention.ms", "60000").unwrap();
        engine.alter_topic_config_async("t", altered).await.unwrap();
        for value in ["a", "b"] {
            let batch = support::batches::keyed_batch(Some(b"k"), Some(value.as_bytes()), 1);
            engine
                .append(&topic, 2, batch, Durability::Durable)
                .await
                .unwrap();
        }
        engine.flush_all_async().await.unwrap();
        engine.checkpoint_async().await.unwrap();
        engine.compact_async(Some("t")).await.unwrap();
        engine.apply_retention_async(Some("t")).await.unwrap();
        let description = engine.describe_topic_async("t").await.unwrap();
        assert_eq!(description.partitions.len(), 3);
        assert_eq!(description.partitions[2].log_end_offset, Offset(2));
        engine
            .create_topic_async("gone", 1, LogConfig::default())
            .await
            .unwrap();
        engine.delete_topic_async("gone").await.unwrap();
        engine.close_async().await.unwrap();
        topic
    });
    let work = hooks.taken();
    let syncs = work
        .iter()
        .filter(|(op, ..)| {
            matches!(
                op,
                StorageOp::SyncDir | StorageOp::SyncData | StorageOp::SyncAll
            )
        })
        .count();
    assert!(syncs > 0, "the calls synced files: {work:?}");
    let on_caller: Vec<_> = work
        .iter()
        .filter(|(.., thread)| *thread == caller)
        .collect();
    assert!(
        on_caller.is_empty(),
        "file work on the caller's thread: {on_caller:?}"
    );
    assert!(dir.path().join(".kafka_cleanshutdown").exists());
    let reopened = Engine::open(dir.path(), engine_config(1)).unwrap();
    assert_eq!(fetch_values(&reopened, &topic, 2).len(), 2);
}

#[test]
fn the_async_forms_answer_the_blocking_forms_errors() {
    let (_dir, engine) = temp_engine(engine_config(1));
    block_on(async {
        engine
            .create_topic_async("t", 1, LogConfig::default())
            .await
            .unwrap();
        let again = engine
            .create_topic_async("t", 1, LogConfig::default())
            .await;
        assert_matches!(again, Err(seglog::error::TopicError::TopicExists { .. }));
        let unknown = engine.delete_topic_async("nope").await;
        assert_matches!(unknown, Err(seglog::error::TopicError::UnknownTopic { .. }));
        engine.close_async().await.unwrap();
        let closed = engine
            .create_topic_async("u", 1, LogConfig::default())
            .await;
        assert_matches!(
            closed,
            Err(seglog::error::TopicError::Unavailable(
                seglog::error::EngineUnavailable::Closed
            ))
        );
    });
}

/// A batch of `count` records of `value_bytes` each, compressed with `compression`.
fn batch(count: usize, value_bytes: usize, compression: Compression) -> Bytes {
    let value = vec![b'v'; value_bytes];
    let mut builder = BatchBuilder::new(0);
    for _ in 0..count {
        builder.push(&NewRecord {
            timestamp_ms: 1,
            key: None,
            value: Some(&value),
            headers: &[],
        });
    }
    builder.build_compressed(compression).unwrap().unwrap()
}

/// `batch` with one byte of its records flipped: its CRC no longer matches.
fn corrupted(batch: &Bytes) -> Bytes {
    let mut bytes = BytesMut::from(&batch[..]);
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    bytes.freeze()
}

#[test]
fn append_async_validates_large_and_compressed_batches_with_appends_errors() {
    let (_dir, engine) = temp_engine(engine_config(2));
    let topic = engine.create_topic("t", 1, LogConfig::default()).unwrap();
    let small = batch(2, 10, Compression::None);
    let large = batch(100, 1024, Compression::None);
    let compressed = batch(50, 100, Compression::Lz4);
    assert!(large.len() >= 64 * 1024);
    block_on(async {
        let mut next = 0;
        for (batch, count) in [(&small, 2), (&large, 100), (&compressed, 50)] {
            let appended = engine
                .append_async(&topic, 0, batch.clone(), Durability::Durable)
                .await
                .unwrap();
            assert_eq!(appended.first_offset, Offset(next));
            next += count;
        }
        for batch in [&small, &large, &compressed] {
            let refused = engine
                .append_async(&topic, 0, corrupted(batch), Durability::Durable)
                .await;
            let by_append = engine
                .append(&topic, 0, corrupted(batch), Durability::Durable)
                .await;
            assert_matches!(refused, Err(AppendError::InvalidBatch { .. }));
            assert_eq!(format!("{refused:?}"), format!("{by_append:?}"));
        }
        let unknown = engine
            .append_async(&topic, 7, large.clone(), Durability::Durable)
            .await;
        assert_matches!(
            unknown,
            Err(AppendError::UnknownPartition { partition: 7, .. })
        );
    });
    assert_eq!(fetch_values(&engine, &topic, 0).len(), 152);
    engine.close().unwrap();
}

#[test]
fn producer_send_async_delivers_every_record_in_order_through_a_full_buffer() {
    let (_dir, engine) = temp_engine(engine_config(1));
    let topic = engine.create_topic("t", 1, LogConfig::default()).unwrap();
    // Room for a few batches only: most sends wait for memory.
    let config = ProducerConfig::default()
        .with_buffer_memory_bytes(64 * 1024)
        .with_batch_size_bytes(16 * 1024);
    let producer = engine.producer(config).unwrap();
    let value = vec![b'x'; 1000];
    block_on(async {
        let mut deliveries = Vec::new();
        for index in 0..2_000u32 {
            let key = index.to_be_bytes();
            let record = ProducerRecord::new(&topic, Some(&key), Some(&value));
            deliveries.push(producer.send_async(&record).await.unwrap());
        }
        producer.flush_async().await.unwrap();
        let mut offsets = Vec::new();
        for delivery in deliveries {
            offsets.push(delivery.await.unwrap().offset.0);
        }
        assert_eq!(offsets, (0..2_000).collect::<Vec<u64>>());
        producer.close_async().await.unwrap();
        let closed = producer
            .send_async(&ProducerRecord::new(&topic, None, Some(b"late")))
            .await;
        assert_matches!(closed, Err(seglog::producer::ProducerError::Closed));
    });
    assert_eq!(fetch_values(&engine, &topic, 0).len(), 2_000);
}

#[test]
fn an_async_consumer_polls_commits_and_closes_on_its_own_thread() {
    let groups = Groups::new(2, 0);
    produce(&groups.engine, "t", 0, &["a", "b"]);
    produce(&groups.engine, "t", 1, &["c"]);
    let mut consumer = groups.consumer(config("g")).into_async().unwrap();
    let caller = std::thread::current().id();
    block_on(async {
        let mut values = Vec::new();
        while values.len() < 3 {
            let records = consumer.poll(Duration::from_millis(100)).await.unwrap();
            values.extend(records.iter().map(support::groups::value));
        }
        values.sort();
        assert_eq!(values, ["a", "b", "c"]);
        let polled_on = consumer.run(|_| std::thread::current().id()).await.unwrap();
        assert_ne!(polled_on, caller);
        assert_eq!(consumer.assignment().await.unwrap().len(), 2);
        consumer.commit().await.unwrap();
        consumer.close().await.unwrap();
        assert_matches!(
            consumer.poll(Duration::ZERO).await,
            Err(seglog::group::PollError::Unavailable(_))
        );
        consumer.close().await.unwrap();
    });
    let committed = groups
        .coordinator
        .committed("g", &support::groups::tp("t", 0));
    assert_eq!(committed.map(|c| c.offset), Some(Offset(2)));
}
