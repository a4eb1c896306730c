//! The engine's metrics (`seglog::metrics`, docs/METRICS.md) count what it did: an inline engine
//! opened under a recorder reports exactly the records, batches and bytes appended, one sync
//! round per durable append, and the fetch and its bytes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, FetchOptions, Pending};
use seglog::metrics as names;
use seglog::types::Offset;
use support::batches::{T0, repeated_batch};
use support::dirs::scratch;
use support::engines::inline_config;

/// One metric's samples: a counter's total, a histogram's observations (gauges are kept as their
/// last value in `total`, as bits).
#[derive(Default)]
struct Series {
    total: AtomicU64,
    observations: Mutex<Vec<f64>>,
}

impl CounterFn for Series {
    fn increment(&self, value: u64) {
        self.total.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.total.store(value, Ordering::Relaxed);
    }
}

impl GaugeFn for Series {
    fn increment(&self, _: f64) {}
    fn decrement(&self, _: f64) {}
    fn set(&self, value: f64) {
        self.total.store(value.to_bits(), Ordering::Relaxed);
    }
}

impl HistogramFn for Series {
    fn record(&self, value: f64) {
        self.observations.lock().unwrap().push(value);
    }
}

/// Keeps every series by name (the labels ignored: an inline engine has one shard).
#[derive(Default)]
struct TestRecorder {
    series: Mutex<BTreeMap<String, Arc<Series>>>,
}

impl TestRecorder {
    fn series(&self, name: &str) -> Arc<Series> {
        let mut series = self.series.lock().unwrap();
        series.entry(name.to_owned()).or_default().clone()
    }

    fn counter(&self, name: &str) -> u64 {
        self.series(name).total.load(Ordering::Relaxed)
    }

    fn observations(&self, name: &str) -> Vec<f64> {
        self.series(name).observations.lock().unwrap().clone()
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.series(key.name()))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.series(key.name()))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.series(key.name()))
    }
}

/// The answer, which an inline engine gives before the call returns.
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
fn an_engine_counts_its_appends_syncs_and_fetches() {
    let dir = scratch();
    let recorder = TestRecorder::default();
    // The handles are registered while the engine opens; they report to `recorder` after.
    let engine = metrics::with_local_recorder(&recorder, || {
        Engine::open(dir.path(), inline_config(LogConfig::default())).unwrap()
    });
    let topic = engine.create_topic("t", 1, LogConfig::default()).unwrap();
    let batches = [
        repeated_batch(10, None, b"a", T0),
        repeated_batch(20, None, b"bb", T0),
        repeated_batch(30, None, b"ccc", T0),
    ];
    for batch in &batches {
        answered(engine.append(&topic, 0, batch.clone(), Durability::Durable));
    }
    let data = answered(engine.fetch(&topic, 0, Offset(0), FetchOptions::default()));

    let appended_bytes: usize = batches.iter().map(|batch| batch.len()).sum();
    assert_eq!(recorder.counter(names::APPEND_RECORDS), 60);
    assert_eq!(recorder.counter(names::APPEND_BATCHES), 3);
    assert_eq!(recorder.counter(names::APPEND_BYTES), appended_bytes as u64);
    assert!(
        recorder.counter(names::SYNCS) >= 3,
        "a sync per durable append"
    );
    let appends_per_sync = recorder.observations(names::SYNC_APPENDS);
    assert_eq!(
        appends_per_sync,
        [1.0, 1.0, 1.0],
        "one append per group commit"
    );
    let bytes_per_sync = recorder.observations(names::SYNC_BYTES);
    let synced: f64 = bytes_per_sync.iter().sum();
    assert_eq!(synced, appended_bytes as f64, "every appended byte synced");
    assert_eq!(recorder.counter(names::FETCHES), 1);
    assert_eq!(
        recorder.counter(names::FETCH_BYTES),
        data.records.len() as u64
    );
    assert_eq!(
        data.records.len(),
        appended_bytes,
        "the fetch read every batch"
    );
    engine.close().unwrap();
}
