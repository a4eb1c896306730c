//! No allocation per record on the append and fetch paths (issue 4, target 6): a counting global
//! allocator measures the allocations of appending and fetching batches of 10 and of 1,000
//! records; the counts must not grow with the number of records.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use seglog::config::LogConfig;
use seglog::io::storage_from_env;
use seglog::log::PartitionLog;
use seglog::types::{Offset, TimestampMs};
use support::batches::{T0, batch_of, record};
use support::logs::{self, open_options};

mod support;

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; counting has no effect on
// the memory handed out.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout, as GlobalAlloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (forwarded above).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with `layout`; forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Tests share the counter: one measures at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn allocations_during(run: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    run();
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

fn batch(records: usize) -> bytes::Bytes {
    let value = vec![b'v'; 100];
    let keys: Vec<[u8; 8]> = (0..records).map(usize::to_be_bytes).collect();
    let records: Vec<_> = keys
        .iter()
        .map(|key| record(T0, Some(key), Some(&value)))
        .collect();
    batch_of(&records)
}

fn open_log(dir: &std::path::Path) -> PartitionLog {
    let config = LogConfig::default().with_segment_index_bytes(1 << 20);
    let options = open_options(true, 0, T0);
    logs::open_log(storage_from_env(), dir, "alloc", config, options)
}

/// The allocations of one `what` of 10 records and of `large` records: at most 2 more for the
/// larger.
fn assert_per_batch(what: &str, large: u32, for_small: u64, for_large: u64) {
    println!("allocations per {what}: 10 records {for_small}, {large} records {for_large}");
    assert!(
        for_large <= for_small + 2,
        "a {what} of {large} records allocated {for_large} times, of 10 records {for_small}"
    );
}

/// A log holding a batch of 10 records, then one of 1,000.
fn log_of_10_and_1000_records(dir: &std::path::Path) -> PartitionLog {
    let mut log = open_log(dir);
    let now = TimestampMs(T0);
    log.append(batch(10), now).unwrap();
    log.append(batch(1_000), now).unwrap();
    log
}

#[test]
fn appending_allocates_per_batch_not_per_record() {
    let _serial = SERIAL.lock().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path());
    let now = TimestampMs(T0);
    let (small, large) = (batch(10), batch(1_000));
    // Warm up: first appends create buffers that are reused.
    for _ in 0..3 {
        log.append(small.clone(), now).unwrap();
        log.append(large.clone(), now).unwrap();
    }
    let for_small = allocations_during(|| {
        log.append(small.clone(), now).unwrap();
    });
    let for_large = allocations_during(|| {
        log.append(large.clone(), now).unwrap();
    });
    assert_per_batch("append", 1000, for_small, for_large);
}

#[test]
fn fetching_allocates_per_fetch_not_per_record() {
    let _serial = SERIAL.lock().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut log = log_of_10_and_1000_records(dir.path());
    for _ in 0..3 {
        log.read(Offset(0), 1 << 20).unwrap();
    }
    let for_small = allocations_during(|| {
        let data = log.read(Offset(0), 1_500).unwrap();
        assert!(!data.records.is_empty());
    });
    let for_large = allocations_during(|| {
        let data = log.read(Offset(0), 1 << 20).unwrap();
        assert!(data.records.len() > 100_000);
    });
    assert_per_batch("fetch", 1010, for_small, for_large);
}

#[test]
fn the_engine_appends_and_fetches_without_allocating_per_record() {
    use seglog::engine::{Durability, Engine, FetchOptions};
    use support::engines::engine_config;
    let _serial = SERIAL.lock().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = engine_config(1).with_cleaner_core(None);
    let engine = Engine::open(dir.path(), config).unwrap();
    let topic = engine
        .create_topic("alloc", 1, LogConfig::default())
        .unwrap();
    let (small, large) = (batch(10), batch(1_000));
    let append = |batch: &bytes::Bytes| {
        engine
            .append(&topic, 0, batch.clone(), Durability::Written)
            .wait()
            .unwrap();
    };
    let fetch = |max_bytes| {
        let options = FetchOptions {
            max_bytes,
            ..FetchOptions::default()
        };
        engine.fetch(&topic, 0, Offset(0), options).wait().unwrap();
    };
    for _ in 0..3 {
        append(&small);
        append(&large);
        fetch(1 << 20);
    }
    let append_small = allocations_during(|| append(&small));
    let append_large = allocations_during(|| append(&large));
    let fetch_small = allocations_during(|| fetch(1_500));
    let fetch_large = allocations_during(|| fetch(1 << 20));
    println!(
        "engine allocations: append 10 records {append_small}, 1000 records {append_large}; \
         fetch 10 records {fetch_small}, ~4000 records {fetch_large}"
    );
    assert!(
        append_large <= append_small + 4,
        "{append_small} vs {append_large}"
    );
    assert!(
        fetch_large <= fetch_small + 4,
        "{fetch_small} vs {fetch_large}"
    );
    engine.close().unwrap();
}

#[test]
fn reading_fetched_records_in_place_allocates_nothing() {
    let _serial = SERIAL.lock().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut log = log_of_10_and_1000_records(dir.path());
    let data = log.read(Offset(0), 1 << 20).unwrap();
    let mut records = 0u64;
    let mut value_bytes = 0usize;
    let allocations = allocations_during(|| {
        for batch in data.batches() {
            let section = batch.unwrap().record_section().unwrap();
            for record in section.iter() {
                value_bytes += record.unwrap().value.map_or(0, <[u8]>::len);
                records += 1;
            }
        }
    });
    assert_eq!(records, 1_010);
    assert_eq!(value_bytes, 1_010 * 100);
    assert_eq!(allocations, 0, "reading 1010 records in place allocated");
    // The same batches as a checking iteration gives: `batches` only skips the second CRC.
    let checked: Vec<_> = seglog::format::batch::BatchIter::new(data.records.clone(), u64::MAX)
        .map(Result::unwrap)
        .collect();
    let unchecked: Vec<_> = data.batches().map(Result::unwrap).collect();
    assert_eq!(checked, unchecked);
}
