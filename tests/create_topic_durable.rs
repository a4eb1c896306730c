//! A created topic's partitions are durable when `create_topic` returns, though a shard creates
//! all its new partitions' files first and syncs their directories together after
//! (`Storage::sync_dirs_many`; issue 47, item 4). Proven on the simulated disk, whose batch of
//! directory syncs is one `sync_dir` after another, with an inline engine that keeps only 8
//! partitions open (so most are released before their directory is synced):
//! - a power cut right after `create_topic` returned (unsynced directory entries dropped, or a
//!   random mix per directory over several seeds) leaves every partition's directory and first
//!   segment, and the reopened engine describes and appends to each;
//! - a failure injected on any one directory sync the creation issues fails `create_topic` with
//!   a storage error instead of acknowledging it; a partition whose own directory sync failed is
//!   offline and refuses appends.
//!
//! On the real backends (io_uring's syncs through the ring, positioned I/O's one by one), a
//! refused directory sync among a two-shard engine's fails the creation the same way.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};

use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig};
use seglog::error::TopicError;
use seglog::io::hooked::{StorageHooks, StorageOp};
use seglog::io::sim::{CrashMode, Fault, SimStorage};
use seglog::types::TopicName;
use support::batches::{T0, value_batch};
use support::dirs::{scratch, segment_file};
use support::engines::{counter_clock, engine_config, inline_config};
use support::hooks::hooked;

mod support;

const TOPIC: &str = "created";
const PARTITIONS: u32 = 40;

fn topic() -> TopicName {
    TopicName::parse(TOPIC).unwrap()
}

/// A simulated disk in a scratch directory and the inline engine configuration for it.
struct Disk {
    dir: tempfile::TempDir,
    sim: SimStorage,
    config: EngineConfig,
}

impl Disk {
    fn new(seed: u64) -> Disk {
        let dir = scratch();
        let sim = SimStorage::new(dir.path(), seed).unwrap();
        let config = inline_config(LogConfig::default().with_segment_index_bytes(4096))
            .with_clock(counter_clock(&Arc::new(AtomicI64::new(T0))))
            .with_open_partitions_max(8)
            .with_open_segments_max(32);
        Disk { dir, sim, config }
    }

    fn open(&self) -> Engine {
        let storage = Arc::new(self.sim.clone());
        Engine::open_with_storage(self.dir.path(), self.config.clone(), storage).unwrap()
    }

    fn create(&self, engine: &Engine) -> Result<TopicName, TopicError> {
        engine.create_topic(TOPIC, PARTITIONS, self.config.default_topic_config.clone())
    }

    fn partition_dir(&self, partition: u32) -> PathBuf {
        self.dir.path().join(format!("{TOPIC}-{partition}"))
    }
}

/// Every partition has its first segment's files and an empty, online log, and takes a durable
/// append at offset 0.
fn assert_every_partition_created(disk: &Disk, engine: &Engine) {
    for partition in 0..PARTITIONS {
        let dir = disk.partition_dir(partition);
        for extension in [".log", ".index", ".timeindex"] {
            let file = segment_file(&dir, 0, extension);
            assert!(file.exists(), "{} is gone", file.display());
        }
    }
    let description = engine.describe_topic(TOPIC).unwrap();
    assert_eq!(description.partitions.len(), PARTITIONS as usize);
    for partition in &description.partitions {
        assert_eq!(partition.offline, None, "{partition:?}");
        assert_eq!(partition.log_end_offset.0, 0, "{partition:?}");
        assert_eq!(partition.segment_count, 1, "{partition:?}");
    }
    for partition in 0..PARTITIONS {
        let batch = value_batch("after the power cut");
        let appended = engine.append(&topic(), partition, batch, Durability::Durable);
        assert_eq!(appended.wait().unwrap().first_offset.0, 0);
    }
}

#[test]
fn every_partition_survives_a_power_cut_right_after_create_topic_returned() {
    let disk = Disk::new(1);
    let engine = disk.open();
    disk.create(&engine).unwrap();
    drop(engine);
    disk.sim.crash_with(CrashMode::DropVolatile).unwrap();
    let engine = disk.open();
    assert_every_partition_created(&disk, &engine);
}

#[test]
fn every_partition_survives_power_cuts_of_any_mode_right_after_create_topic_returned() {
    for seed in 2..6 {
        let disk = Disk::new(seed);
        let engine = disk.open();
        disk.create(&engine).unwrap();
        drop(engine);
        disk.sim.crash().unwrap();
        let engine = disk.open();
        assert_every_partition_created(&disk, &engine);
    }
}

/// Whether `path` is one of the topic's partition directories.
fn is_partition_dir(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with(&format!("{TOPIC}-")))
}

#[test]
fn a_failed_directory_sync_anywhere_in_the_creation_fails_it() {
    let mut partition_dirs_failed = 0;
    for nth in 1.. {
        let disk = Disk::new(nth);
        let engine = disk.open();
        disk.sim.schedule(Fault::DirSyncError, nth);
        let created = disk.create(&engine);
        let Some((_, dir)) = disk.sim.faults_fired().into_iter().next() else {
            // Past the creation's last directory sync: it succeeded without a fault.
            created.unwrap();
            break;
        };
        assert!(
            matches!(created, Err(TopicError::Storage(_))),
            "the sync of {} failed, the creation answered {created:?}",
            dir.display()
        );
        if is_partition_dir(&dir) {
            partition_dirs_failed += 1;
            let partition: u32 = dir
                .to_str()
                .unwrap()
                .rsplit('-')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let appended =
                engine.append(&topic(), partition, value_batch("x"), Durability::Written);
            assert!(appended.wait().is_err(), "{} takes appends", dir.display());
        }
    }
    assert_eq!(partition_dirs_failed, PARTITIONS);
}

/// Refuses the directory sync of one path.
#[derive(Debug)]
struct RefuseDirSync {
    dir: PathBuf,
    refused: Mutex<u32>,
}

impl StorageHooks for RefuseDirSync {
    fn before(&self, op: StorageOp, path: &Path) -> io::Result<()> {
        if op == StorageOp::SyncDir && path == self.dir {
            *self.refused.lock().unwrap() += 1;
            return Err(io::Error::other("refused directory sync"));
        }
        Ok(())
    }
}

#[test]
fn a_refused_directory_sync_on_a_real_backend_fails_the_creation() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = Arc::new(RefuseDirSync {
        dir: dir.path().join(format!("{TOPIC}-7")),
        refused: Mutex::new(0),
    });
    let engine =
        Engine::open_with_storage(dir.path(), engine_config(2), hooked(hooks.clone())).unwrap();
    let created = engine.create_topic(TOPIC, PARTITIONS, LogConfig::default());
    assert!(
        matches!(created, Err(TopicError::Storage(_))),
        "{created:?}"
    );
    assert_eq!(*hooks.refused.lock().unwrap(), 1);
    let appended = engine.append(&topic(), 7, value_batch("x"), Durability::Written);
    assert!(appended.wait().is_err(), "partition 7 takes appends");
    let appended = engine.append(&topic(), 6, value_batch("x"), Durability::Durable);
    assert_eq!(appended.wait().unwrap().first_offset.0, 0);
}
