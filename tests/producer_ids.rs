//! Producer ids for idempotent producers (`Engine::allocate_producer_id`, FORMAT.md §
//! Producer-id block): never handed out twice, across a clean close, a crash (the engine
//! dropped unclosed) and block boundaries; a failed block write hands out nothing and the next
//! call retries it; a block file that does not parse is refused, not guessed past.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use seglog::engine::Engine;
use seglog::error::ProducerIdError;
use seglog::format::file_name::PRODUCER_ID_BLOCK;
use seglog::io::hooked::{StorageHooks, StorageOp};
use support::assert_matches;
use support::dirs::scratch;
use support::engines::engine_config;
use support::hooks::hooked_pio;

fn allocate(engine: &Engine, count: usize) -> Vec<i64> {
    (0..count)
        .map(|_| engine.allocate_producer_id().unwrap())
        .collect()
}

fn block_file(dir: &Path) -> String {
    std::fs::read_to_string(dir.join(PRODUCER_ID_BLOCK)).unwrap()
}

#[test]
fn ids_are_unique_across_blocks_closes_and_crashes() {
    let dir = scratch();
    let engine = Engine::open(dir.path(), engine_config(2)).unwrap();
    let first = allocate(&engine, 1001);
    assert_eq!(
        first,
        (0..1001).collect::<Vec<i64>>(),
        "ids count up from 0"
    );
    assert_eq!(
        block_file(dir.path()),
        "1\n1000 1999\n",
        "the second block is on disk"
    );
    engine.close().unwrap();

    let engine = Engine::open(dir.path(), engine_config(2)).unwrap();
    let after_close = allocate(&engine, 3);
    assert_eq!(
        after_close,
        vec![2000, 2001, 2002],
        "the unfinished block is skipped"
    );
    drop(engine); // a crash: no close

    let engine = Engine::open(dir.path(), engine_config(2)).unwrap();
    let after_crash = allocate(&engine, 1);
    assert_eq!(after_crash, vec![3000]);
    let all: BTreeSet<i64> = first
        .iter()
        .chain(&after_close)
        .chain(&after_crash)
        .copied()
        .collect();
    assert_eq!(all.len(), 1005, "no id was handed out twice");
    engine.close().unwrap();
}

#[test]
fn an_engine_that_never_allocates_writes_no_block_file() {
    let dir = scratch();
    let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
    engine.close().unwrap();
    assert!(!dir.path().join(PRODUCER_ID_BLOCK).exists());
}

/// Fails every `fsync` of the block file's temporary copy while `failing`.
#[derive(Debug, Default)]
struct FailBlockSync {
    failing: AtomicBool,
}

impl StorageHooks for FailBlockSync {
    fn before(&self, op: StorageOp, path: &Path) -> io::Result<()> {
        let block_file = path
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with(PRODUCER_ID_BLOCK));
        match self.failing.load(Ordering::SeqCst) && block_file && op == StorageOp::SyncAll {
            true => Err(io::Error::from_raw_os_error(5)),
            false => Ok(()),
        }
    }
}

#[test]
fn a_failed_block_write_hands_out_no_id_and_the_next_call_retries() {
    let dir = scratch();
    let hooks = Arc::new(FailBlockSync::default());
    let storage = hooked_pio(hooks.clone());
    let engine = Engine::open_with_storage(dir.path(), engine_config(1), storage).unwrap();
    hooks.failing.store(true, Ordering::SeqCst);
    assert_matches!(
        engine.allocate_producer_id(),
        Err(ProducerIdError::Storage(_))
    );
    assert!(
        !dir.path().join(PRODUCER_ID_BLOCK).exists(),
        "nothing was renamed into place"
    );
    hooks.failing.store(false, Ordering::SeqCst);
    assert_eq!(engine.allocate_producer_id().unwrap(), 0);
    assert_eq!(block_file(dir.path()), "1\n0 999\n");
    engine.close().unwrap();
}

#[test]
fn a_block_file_that_does_not_parse_is_refused_every_time() {
    let dir = scratch();
    let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
    engine.close().unwrap();
    std::fs::write(dir.path().join(PRODUCER_ID_BLOCK), "1\n1000 oops\n").unwrap();
    let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
    for _ in 0..2 {
        assert_matches!(
            engine.allocate_producer_id(),
            Err(ProducerIdError::Corrupt { .. })
        );
    }
    engine.close().unwrap();
}

#[test]
fn a_closed_engine_hands_out_no_id() {
    let dir = scratch();
    let engine = Engine::open(dir.path(), engine_config(1)).unwrap();
    let handle = engine.clone();
    engine.close().unwrap();
    assert_matches!(
        handle.allocate_producer_id(),
        Err(ProducerIdError::Unavailable(_))
    );
}
