//! openraft's own storage test suite (`openraft::testing::Suite::test_all`) against a
//! partition's log store and state machine on a real engine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use seglog::engine::{Engine, EngineConfig};
use seglog_raft::{LogStore, Replica, StateMachine, TypeConfig};
use tempfile::TempDir;

/// Each store gets a new engine in a new directory with one topic of one partition.
struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, (TempDir, Engine)> for Builder {
    async fn build(
        &self,
    ) -> Result<((TempDir, Engine), LogStore, StateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().unwrap();
        let data: PathBuf = dir.path().join("log");
        let config = EngineConfig::default()
            .with_shard_count(1)
            .with_pin_shards(false);
        let engine = Engine::open(&data, config).unwrap();
        let topic = engine
            .create_topic("raft", 1, seglog::config::LogConfig::default())
            .unwrap();
        let replica = Replica::open(engine.clone(), topic, 0, dir.path())
            .await
            .unwrap();
        let log_store = LogStore::new(replica.clone());
        let state_machine = StateMachine::new(replica);
        Ok(((dir, engine), log_store, state_machine))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).unwrap();
}
