//! Idempotent producers (issue 44, item 2): per partition, each producer's epoch and last five
//! batches decide whether a batch is written, refused or answered as a duplicate.
//!
//! Proven through the engine (threaded and inline): a retried batch is answered with the offsets
//! its original got and is not written again, also while the original is still in flight and
//! when the retry asks for durability the original did not have (the answer then waits for a
//! sync covering the original); out-of-order sequences and fenced epochs are refused with typed
//! errors and write nothing; the state survives reopening, cleanly closed or not; a producer idle
//! past `producer.id.expiration.ms` is forgotten.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::Bytes;
use seglog::engine::{Durability, Engine, EngineConfig};
use seglog::error::AppendError;
use seglog::format::BatchBuilder;
use seglog::types::{Offset, TopicName};

use support::assert_matches;
use support::batches::{T0, record};
use support::configs::small_segments;
use support::dirs::scratch;
use support::engines::{engine_config, fetch_batches, inline_config, keeping_producers};

/// A batch of `records` records from producer `producer_id` at `epoch`, first sequence `sequence`.
fn producer_batch(producer_id: i64, epoch: i16, sequence: i32, records: usize) -> Bytes {
    let mut builder = BatchBuilder::new(0).with_producer(producer_id, epoch, sequence);
    for index in 0..records {
        let value = format!("p{producer_id}-e{epoch}-s{}", sequence as usize + index);
        builder.push(&record(T0, None, Some(value.as_bytes())));
    }
    builder.build().unwrap()
}

fn open(dir: &std::path::Path, config: EngineConfig) -> (Engine, TopicName) {
    let engine = Engine::open(dir, config).unwrap();
    let topic = match engine.create_topic("idem", 1, small_segments(1024, 256)) {
        Ok(topic) => topic,
        Err(_) => TopicName::parse("idem").unwrap(),
    };
    (engine, topic)
}

fn send(
    engine: &Engine,
    topic: &TopicName,
    batch: Bytes,
    durability: Durability,
) -> Result<seglog::engine::AppendInfo, AppendError> {
    engine.append(topic, 0, batch, durability).wait()
}

/// Every (producer id, base sequence, base offset) the partition serves.
fn served(engine: &Engine, topic: &TopicName) -> Vec<(i64, i32, u64)> {
    fetch_batches(engine, topic, 0)
        .iter()
        .map(|batch| {
            let header = batch.header();
            (
                header.producer_id,
                header.base_sequence,
                header.base_offset as u64,
            )
        })
        .collect()
}

#[test]
fn a_retried_batch_is_answered_with_its_first_offsets_and_written_once() {
    let dir = scratch();
    let (engine, topic) = open(dir.path(), engine_config(1));
    let first = send(
        &engine,
        &topic,
        producer_batch(7, 0, 0, 3),
        Durability::Written,
    )
    .unwrap();
    let second = send(
        &engine,
        &topic,
        producer_batch(7, 0, 3, 2),
        Durability::Durable,
    )
    .unwrap();
    assert_eq!(
        (first.first_offset, first.last_offset),
        (Offset(0), Offset(2))
    );
    assert!(!first.duplicate);
    for (batch, original) in [
        (producer_batch(7, 0, 0, 3), first),
        (producer_batch(7, 0, 3, 2), second),
    ] {
        for durability in [Durability::Written, Durability::Durable] {
            let retry = send(&engine, &topic, batch.clone(), durability).unwrap();
            assert!(retry.duplicate);
            assert_eq!(retry.first_offset, original.first_offset);
            assert_eq!(retry.last_offset, original.last_offset);
            assert_eq!(retry.record_count, original.record_count);
        }
    }
    assert_eq!(served(&engine, &topic), vec![(7, 0, 0), (7, 3, 3)]);
    let next = send(
        &engine,
        &topic,
        producer_batch(7, 0, 5, 1),
        Durability::Written,
    )
    .unwrap();
    assert_eq!(next.first_offset, Offset(5));
    engine.close().unwrap();
}

#[test]
fn a_durable_retry_of_an_unsynced_batch_is_answered_after_a_sync_covering_it() {
    let dir = scratch();
    let (engine, topic) = open(dir.path(), engine_config(1));
    // Nothing syncs a written append here (no flush policy), so the original stays unsynced.
    let original = send(
        &engine,
        &topic,
        producer_batch(3, 1, 0, 4),
        Durability::Written,
    )
    .unwrap();
    assert!(!original.durable);
    let retry = send(
        &engine,
        &topic,
        producer_batch(3, 1, 0, 4),
        Durability::Durable,
    )
    .unwrap();
    assert!(retry.duplicate);
    assert!(
        retry.durable,
        "a durable duplicate is answered through the sync path"
    );
    let description = engine.describe_topic("idem").unwrap();
    assert!(description.partitions[0].durable_offset > original.last_offset);
    engine.close().unwrap();
}

#[test]
fn a_retry_sent_while_its_original_is_in_flight_is_a_duplicate() {
    let dir = scratch();
    let (engine, topic) = open(dir.path(), engine_config(1));
    for round in 0..20 {
        let sequence = round * 2;
        let original = engine.append(
            &topic,
            0,
            producer_batch(11, 0, sequence, 2),
            Durability::Durable,
        );
        let retry = engine.append(
            &topic,
            0,
            producer_batch(11, 0, sequence, 2),
            Durability::Durable,
        );
        let original = original.wait().unwrap();
        let retry = retry.wait().unwrap();
        assert!(!original.duplicate);
        assert!(retry.duplicate);
        assert!(retry.durable);
        assert_eq!(retry.first_offset, original.first_offset);
    }
    assert_eq!(served(&engine, &topic).len(), 20);
    engine.close().unwrap();
}

#[test]
fn out_of_order_sequences_and_fenced_epochs_are_refused_and_write_nothing() {
    let dir = scratch();
    let (engine, topic) = open(dir.path(), engine_config(1));
    send(
        &engine,
        &topic,
        producer_batch(5, 2, 0, 2),
        Durability::Written,
    )
    .unwrap();
    let gap = send(
        &engine,
        &topic,
        producer_batch(5, 2, 3, 1),
        Durability::Written,
    );
    assert_matches!(
        gap,
        Err(AppendError::OutOfOrderSequence {
            producer_id: 5,
            producer_epoch: 2,
            first_sequence: 3,
            current_epoch: 2,
            last_sequence: 1,
        })
    );
    let fenced = send(
        &engine,
        &topic,
        producer_batch(5, 1, 2, 1),
        Durability::Durable,
    );
    assert_matches!(
        fenced,
        Err(AppendError::InvalidProducerEpoch {
            producer_id: 5,
            producer_epoch: 1,
            current_epoch: 2,
        })
    );
    let new_epoch_not_at_zero = send(
        &engine,
        &topic,
        producer_batch(5, 3, 2, 1),
        Durability::Written,
    );
    assert_matches!(
        new_epoch_not_at_zero,
        Err(AppendError::OutOfOrderSequence {
            current_epoch: 2,
            ..
        })
    );
    assert_eq!(served(&engine, &topic), vec![(5, 0, 0)]);
    // The producer goes on where it was; a new epoch starts at 0 and fences the old one.
    send(
        &engine,
        &topic,
        producer_batch(5, 2, 2, 1),
        Durability::Written,
    )
    .unwrap();
    send(
        &engine,
        &topic,
        producer_batch(5, 3, 0, 1),
        Durability::Written,
    )
    .unwrap();
    let zombie = send(
        &engine,
        &topic,
        producer_batch(5, 2, 3, 1),
        Durability::Written,
    );
    assert_matches!(
        zombie,
        Err(AppendError::InvalidProducerEpoch {
            current_epoch: 3,
            ..
        })
    );
    // A new producer starts at any sequence; batches without a producer are never checked.
    send(
        &engine,
        &topic,
        producer_batch(6, 0, 1000, 1),
        Durability::Written,
    )
    .unwrap();
    let plain = BatchBuilder::new(0);
    let mut plain = plain;
    plain.push(&record(T0, None, Some(b"plain")));
    send(&engine, &topic, plain.build().unwrap(), Durability::Written).unwrap();
    assert_eq!(served(&engine, &topic).len(), 5);
    engine.close().unwrap();
}

#[test]
fn the_inline_engine_answers_duplicates_and_refusals_alike() {
    let dir = scratch();
    let (engine, topic) = open(dir.path(), inline_config(small_segments(1024, 256)));
    let original = send(
        &engine,
        &topic,
        producer_batch(9, 0, 0, 2),
        Durability::Written,
    )
    .unwrap();
    let retry = send(
        &engine,
        &topic,
        producer_batch(9, 0, 0, 2),
        Durability::Durable,
    )
    .unwrap();
    assert!(retry.duplicate && retry.durable);
    assert_eq!(retry.first_offset, original.first_offset);
    assert_matches!(
        send(
            &engine,
            &topic,
            producer_batch(9, 0, 7, 1),
            Durability::Written
        ),
        Err(AppendError::OutOfOrderSequence { .. })
    );
    engine.close().unwrap();
}

/// Appends `count` batches of producer 21 (two records each) from sequence 0, rolling the
/// small segments several times.
fn fill(engine: &Engine, topic: &TopicName, count: i32) -> Vec<seglog::engine::AppendInfo> {
    (0..count)
        .map(|index| {
            send(
                engine,
                topic,
                producer_batch(21, 4, index * 2, 2),
                Durability::Written,
            )
            .unwrap()
        })
        .collect()
}

/// After reopening: the last five batches of producer 21 are still duplicates (answered with
/// their offsets), and its next batch must follow its last sequence.
fn assert_state_survived(engine: &Engine, topic: &TopicName, infos: &[seglog::engine::AppendInfo]) {
    let count = infos.len() as i32;
    let written = served(engine, topic).len();
    let last = infos.last().unwrap();
    let retry = send(
        engine,
        topic,
        producer_batch(21, 4, (count - 1) * 2, 2),
        Durability::Durable,
    )
    .unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.first_offset, last.first_offset);
    assert_matches!(
        send(
            engine,
            topic,
            producer_batch(21, 4, count * 2 + 1, 1),
            Durability::Written
        ),
        Err(AppendError::OutOfOrderSequence { .. })
    );
    assert_matches!(
        send(
            engine,
            topic,
            producer_batch(21, 3, count * 2, 1),
            Durability::Written
        ),
        Err(AppendError::InvalidProducerEpoch {
            current_epoch: 4,
            ..
        })
    );
    assert_eq!(served(engine, topic).len(), written);
    let next = send(
        engine,
        topic,
        producer_batch(21, 4, count * 2, 1),
        Durability::Written,
    )
    .unwrap();
    assert_eq!(next.first_offset, last.last_offset.next());
}

#[test]
fn producer_state_survives_a_clean_close() {
    let dir = scratch();
    let (engine, topic) = open(dir.path(), keeping_producers(1));
    let infos = fill(&engine, &topic, 40);
    assert!(engine.describe_topic("idem").unwrap().partitions[0].segment_count > 2);
    engine.close().unwrap();
    let (engine, topic) = open(dir.path(), keeping_producers(1));
    assert_state_survived(&engine, &topic, &infos);
    engine.close().unwrap();
}

#[test]
fn producer_state_survives_an_unclean_shutdown() {
    let dir = scratch();
    let (engine, topic) = open(dir.path(), keeping_producers(1));
    let infos = fill(&engine, &topic, 40);
    engine.flush(&topic, 0).wait().unwrap();
    // Dropping the last handle stops the shards without the clean-shutdown marker.
    drop(engine);
    assert!(!dir.path().join(".kafka_cleanshutdown").exists());
    let (engine, topic) = open(dir.path(), keeping_producers(1));
    assert_state_survived(&engine, &topic, &infos);
    engine.close().unwrap();
}

#[test]
fn a_failed_write_leaves_no_producer_state_behind() {
    use seglog::error::StorageError;
    use seglog::io::sim::{Fault, SimStorage};
    use std::sync::Arc;

    let dir = scratch();
    let sim = SimStorage::new(dir.path(), 44).unwrap();
    let config = engine_config(1).with_direct_writes(false);
    let open_sim = || {
        let engine =
            Engine::open_with_storage(dir.path(), config.clone(), Arc::new(sim.clone())).unwrap();
        let topic = match engine.create_topic("idem", 1, small_segments(1024, 256)) {
            Ok(topic) => topic,
            Err(_) => TopicName::parse("idem").unwrap(),
        };
        (engine, topic)
    };
    let (engine, topic) = open_sim();
    send(
        &engine,
        &topic,
        producer_batch(13, 0, 0, 2),
        Durability::Durable,
    )
    .unwrap();
    sim.schedule(Fault::WriteError, 1);
    assert!(
        send(
            &engine,
            &topic,
            producer_batch(13, 0, 2, 2),
            Durability::Durable
        )
        .is_err()
    );
    // The partition is offline: the retry is refused, never answered from the failed write.
    assert_matches!(
        send(
            &engine,
            &topic,
            producer_batch(13, 0, 2, 2),
            Durability::Durable
        ),
        Err(AppendError::Storage(StorageError::Offline { .. }))
    );
    drop(engine);

    // Reopened through recovery, the state is what the files hold: the retry lands once.
    let (engine, topic) = open_sim();
    let retry = send(
        &engine,
        &topic,
        producer_batch(13, 0, 2, 2),
        Durability::Durable,
    )
    .unwrap();
    assert_eq!(retry.first_offset, Offset(2));
    assert_eq!(served(&engine, &topic), vec![(13, 0, 0), (13, 2, 2)]);
    engine.close().unwrap();
}

#[test]
fn truncation_rebuilds_the_state_of_what_remains() {
    let dir = scratch();
    let (engine, topic) = open(dir.path(), engine_config(1));
    let infos = fill(&engine, &topic, 30);
    // Cut the last ten batches: the producer's last batch is now its 20th (sequences 38..=39).
    let cut = infos[20].first_offset;
    engine.truncate_to(&topic, 0, cut).wait().unwrap();
    let retry = send(
        &engine,
        &topic,
        producer_batch(21, 4, 38, 2),
        Durability::Written,
    )
    .unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.first_offset, infos[19].first_offset);
    let next = send(
        &engine,
        &topic,
        producer_batch(21, 4, 40, 2),
        Durability::Written,
    )
    .unwrap();
    assert!(!next.duplicate);
    assert_eq!(next.first_offset, cut);
    // Starting over forgets every producer: any sequence is accepted.
    engine
        .truncate_fully_and_start_at(&topic, 0, Offset(1000))
        .wait()
        .unwrap();
    let fresh = send(
        &engine,
        &topic,
        producer_batch(21, 4, 7, 1),
        Durability::Written,
    )
    .unwrap();
    assert_eq!(fresh.first_offset, Offset(1000));
    engine.close().unwrap();
}

/// A producer's batch whose records carry `timestamp_ms`.
fn producer_batch_at(producer_id: i64, sequence: i32, timestamp_ms: i64) -> Bytes {
    let mut builder = BatchBuilder::new(0).with_producer(producer_id, 0, sequence);
    builder.push(&record(timestamp_ms, None, Some(b"v")));
    builder.build().unwrap()
}

/// `producer.id.expiration.ms`: a producer whose last batch is older than it is forgotten at the
/// next check (at most every 10 minutes, on an append), so its retry is written as a new
/// producer's batch; a producer within it is kept, its retry still answered as a duplicate.
#[test]
fn producers_idle_past_the_expiration_are_forgotten_and_others_kept() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    const MINUTE_MS: i64 = 60_000;
    let time_ms = Arc::new(AtomicI64::new(T0));
    let config = engine_config(1)
        .with_clock(support::engines::counter_clock(&time_ms))
        .with_producer_id_expiration_ms(5 * MINUTE_MS);
    let dir = scratch();
    let (engine, topic) = open(dir.path(), config);
    let idle = producer_batch_at(7, 0, T0);
    assert_eq!(
        send(&engine, &topic, idle.clone(), Durability::Written)
            .unwrap()
            .first_offset,
        Offset(0)
    );
    time_ms.store(T0 + 8 * MINUTE_MS, Ordering::Relaxed);
    let recent = producer_batch_at(9, 0, T0 + 8 * MINUTE_MS);
    assert_eq!(
        send(&engine, &topic, recent.clone(), Durability::Written)
            .unwrap()
            .first_offset,
        Offset(1)
    );

    time_ms.store(T0 + 10 * MINUTE_MS + 1_000, Ordering::Relaxed);
    let retried_recent = send(&engine, &topic, recent, Durability::Written).unwrap();
    assert!(
        retried_recent.duplicate,
        "a producer within the expiration is kept"
    );
    assert_eq!(retried_recent.first_offset, Offset(1));
    let retried_idle = send(&engine, &topic, idle, Durability::Written).unwrap();
    assert!(!retried_idle.duplicate, "the idle producer was forgotten");
    assert_eq!(retried_idle.first_offset, Offset(2));
    assert_eq!(
        served(&engine, &topic),
        vec![(7, 0, 0), (9, 0, 1), (7, 0, 2)]
    );
    engine.close().unwrap();
}
