//! The inline engine (`EngineConfig::inline`): the engine's own shard code, run on the calling
//! thread. Each request is answered before its call returns; on the simulated disk a run is a
//! deterministic sequence of operations; a process that dies mid-run keeps every append answered
//! as durable, through the same recovery as the threaded engine.
//!
//! How: small segments so that runs roll, retain and compact; `SimStorage` for the deterministic
//! and crash cases; the first poll of each `Pending` with a no-op waker for "answered in the call".

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::task::{Context, Poll, Waker};

use seglog::engine::{Durability, Engine, EngineConfig, Pending};
use seglog::io::sim::SimStorage;
use seglog::types::{Offset, TopicName};

use support::batches::{T0, keyed_batch, value_batch};
use support::configs::{compacted, small_segments, with_settings};
use support::dirs::scratch;
use support::engines::{counter_clock, fetch_values};

fn inline_config() -> EngineConfig {
    support::engines::inline_config(small_segments(2048, 512))
}

/// The answer, which must be there at the first poll.
fn answered<T, E>(mut pending: Pending<T, E>) -> T
where
    E: std::fmt::Debug + From<seglog::error::EngineUnavailable>,
{
    let mut context = Context::from_waker(Waker::noop());
    match Pin::new(&mut pending).poll(&mut context) {
        Poll::Ready(result) => result.unwrap(),
        Poll::Pending => panic!("an inline engine answers before the call returns"),
    }
}

#[test]
fn an_inline_engine_answers_each_request_before_the_call_returns() {
    let dir = scratch();
    let engine = Engine::open(dir.path(), inline_config()).unwrap();
    let topic = engine
        .create_topic("orders", 2, small_segments(2048, 512))
        .unwrap();
    for index in 0..40 {
        let durability = match index % 2 {
            0 => Durability::Written,
            _ => Durability::Durable,
        };
        let value = format!("value-{index:03}-{}", "x".repeat(100));
        let info = answered(engine.append(&topic, index % 2, value_batch(&value), durability));
        assert_eq!(info.durable, durability == Durability::Durable);
    }
    answered(engine.flush(&topic, 0));
    let description = engine.describe_topic("orders").unwrap();
    assert!(
        description.partitions[0].segment_count > 1,
        "the log rolled"
    );
    assert_eq!(description.partitions[0].durable_offset, Offset(20));
    assert_eq!(fetch_values(&engine, &topic, 1).len(), 20);
    engine.close().unwrap();

    let engine = Engine::open(dir.path(), inline_config()).unwrap();
    assert_eq!(fetch_values(&engine, &topic, 0).len(), 20);
    engine.close().unwrap();
}

#[test]
fn an_inline_engine_compacts_in_the_call() {
    let dir = scratch();
    let engine = Engine::open(dir.path(), inline_config()).unwrap();
    let topic = engine
        .create_topic("keys", 1, compacted(small_segments(1024, 256)))
        .unwrap();
    for round in 0..30 {
        let key = format!("key-{}", round % 3);
        let value = format!("round-{round:02}-{}", "v".repeat(80));
        let batch = keyed_batch(Some(key.as_bytes()), Some(value.as_bytes()), 1);
        answered(engine.append(&topic, 0, batch, Durability::Written));
    }
    let compactions = engine.compact(Some("keys")).unwrap();
    assert!(
        compactions
            .iter()
            .any(|compaction| compaction.outcome.is_ok()),
        "{compactions:?}"
    );
    let values = fetch_values(&engine, &topic, 0);
    assert!(
        values.len() < 30,
        "compaction removed superseded keys: {values:?}"
    );
    engine.close().unwrap();
}

#[test]
fn an_inline_engine_reads_the_time_from_its_clock() {
    let dir = scratch();
    let time_ms = Arc::new(AtomicI64::new(T0 + 1_000));
    let config = inline_config().with_clock(counter_clock(&time_ms));
    let engine = Engine::open(dir.path(), config).unwrap();
    let retained = with_settings(
        small_segments(1024, 256),
        &[("retention.ms", "3600000"), ("file.delete.delay.ms", "0")],
    );
    let topic = engine.create_topic("timed", 1, retained).unwrap();
    for index in 0..30 {
        let value = format!("record-{index:02}-{}", "t".repeat(100));
        let batch = keyed_batch(None, Some(value.as_bytes()), T0 + index);
        answered(engine.append(&topic, 0, batch, Durability::Written));
    }
    let deleted = |engine: &Engine| -> usize {
        let passes = engine.apply_retention(Some("timed")).unwrap();
        passes
            .into_iter()
            .map(|pass| pass.outcome.unwrap().segments_deleted)
            .sum()
    };
    assert_eq!(deleted(&engine), 0, "an hour has not passed on the clock");
    time_ms.store(T0 + 2 * 3_600_000, Ordering::Relaxed);
    assert!(deleted(&engine) > 0, "two hours later the records expired");
    let description = engine.describe_topic("timed").unwrap();
    assert!(description.partitions[0].log_start_offset > Offset(0));
    engine.close().unwrap();
}

/// What one seeded run leaves: the simulator's counts and the bytes of every file.
fn run_on_sim(root: &Path, seed: u64) -> (seglog::io::sim::SimStats, Vec<(String, Vec<u8>)>) {
    let sim = SimStorage::new(root, seed).unwrap();
    let engine = Engine::open_with_storage(root, inline_config(), Arc::new(sim.clone())).unwrap();
    let topic = engine
        .create_topic("runs", 2, small_segments(2048, 512))
        .unwrap();
    write_values(&engine, &topic, 60);
    engine.close().unwrap();
    (sim.stats(), files_under(root))
}

fn write_values(engine: &Engine, topic: &TopicName, count: u32) -> Vec<(u32, String)> {
    let mut durable = Vec::new();
    for index in 0..count {
        let value = format!("value-{index:03}-{}", "y".repeat(64));
        let durability = match index % 3 {
            0 => Durability::Durable,
            _ => Durability::Written,
        };
        let partition = index % 2;
        let appended = engine
            .append(topic, partition, value_batch(&value), durability)
            .wait();
        if let Ok(info) = appended
            && info.durable
        {
            durable.push((partition, value));
        }
    }
    durable
}

fn files_under(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for entry in walk(root) {
        let name = entry.strip_prefix(root).unwrap().display().to_string();
        if !name.ends_with(".lock") {
            files.push((name, std::fs::read(&entry).unwrap()));
        }
    }
    files.sort();
    files
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        match path.is_dir() {
            true => paths.extend(walk(&path)),
            false => paths.push(path),
        }
    }
    paths
}

#[test]
fn an_inline_run_on_the_simulated_disk_is_deterministic() {
    let (first, second) = (scratch(), scratch());
    let (first_stats, first_files) = run_on_sim(first.path(), 7);
    let (second_stats, second_files) = run_on_sim(second.path(), 7);
    assert!(
        first_stats.mutations > 100 && first_stats.syncs > 0,
        "{first_stats:?}"
    );
    assert_eq!(first_stats, second_stats);
    assert_eq!(first_files, second_files);
}

#[test]
fn an_inline_engine_that_dies_mid_run_keeps_every_durable_append() {
    let mut checked = 0;
    for died_after in [5u64, 20, 45, 80] {
        let dir = scratch();
        let sim = SimStorage::new(dir.path(), died_after).unwrap();
        let storage = Arc::new(sim.clone());
        let engine = Engine::open_with_storage(dir.path(), inline_config(), storage).unwrap();
        let topic = engine
            .create_topic("runs", 2, small_segments(2048, 512))
            .unwrap();
        sim.die_after(died_after);
        let durable = write_values(&engine, &topic, 60);
        assert!(
            sim.is_dead(),
            "the run reached its death after {died_after} mutations"
        );
        drop(engine);
        sim.crash().unwrap();

        let reopened = SimStorage::new(dir.path(), died_after + 1).unwrap();
        let engine =
            Engine::open_with_storage(dir.path(), inline_config(), Arc::new(reopened)).unwrap();
        for partition in 0..2 {
            let served: Vec<String> = fetch_values(&engine, &topic, partition)
                .into_iter()
                .map(|(_, value)| value)
                .collect();
            for (durable_partition, value) in &durable {
                if *durable_partition == partition {
                    checked += 1;
                    assert!(
                        served.contains(value),
                        "died after {died_after}: {value} was answered durable and is gone"
                    );
                }
            }
        }
        engine.close().unwrap();
    }
    assert!(checked > 10, "only {checked} durable appends were checked");
}
