//! A node whose disk fails steps down: its partition's group stops on it (a failed write or
//! sync is never acknowledged), another node takes over, and every acknowledged record is still
//! served by the others.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use seglog::engine::{Engine, EngineConfig};
use seglog::io::hooked::{HookedStorage, StorageHooks, StorageOp};
use seglog::io::storage_from_env;
use seglog_raft::client::ClusterClient;
use seglog_raft::node::{Node, NodeConfig};
use seglog_raft::wire::Retention;
use support::{batch, free_addresses, values_once_served};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Fails every write and sync of the partition `t-0`'s files once `failing` is set.
#[derive(Debug, Default)]
struct FailingDisk {
    failing: AtomicBool,
}

impl StorageHooks for FailingDisk {
    fn before(&self, op: StorageOp, path: &Path) -> io::Result<()> {
        let data_op = matches!(
            op,
            StorageOp::Write | StorageOp::SyncData | StorageOp::SyncGroup
        );
        let partition = path.to_string_lossy().contains("/t-0/") || path.as_os_str().is_empty();
        if self.failing.load(Ordering::Acquire) && data_op && partition {
            return Err(io::Error::from_raw_os_error(EIO));
        }
        Ok(())
    }
}

/// `EIO`, what a failing disk answers.
const EIO: i32 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_whose_disk_fails_steps_down_and_the_others_go_on() {
    let root = tempfile::tempdir().unwrap();
    let peers = free_addresses(3);
    let mut disks = BTreeMap::new();
    let mut stops = Vec::new();
    for (id, address) in &peers {
        let disk = Arc::new(FailingDisk::default());
        let dir = root.path().join(format!("node-{id}"));
        let storage = Arc::new(HookedStorage::new(storage_from_env(), disk.clone()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = EngineConfig::default()
            .with_shard_count(1)
            .with_pin_shards(false);
        let engine = Engine::open_with_storage(dir.join("log"), config, storage).unwrap();
        let node_config = NodeConfig {
            id: *id,
            dir,
            peers: peers.clone(),
            join: false,
            engine: EngineConfig::default(),
        };
        let node = Node::start_on(node_config, engine).await.unwrap();
        let listener = TcpListener::bind(address).await.unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = node
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await;
        });
        disks.insert(*id, disk);
        stops.push((stop, task));
    }
    let addresses: Vec<String> = peers.values().cloned().collect();
    let mut client = ClusterClient::new(addresses, Duration::from_secs(30));
    client
        .create_topic("t", 1, Retention::default())
        .await
        .unwrap();
    let mut acknowledged = Vec::new();
    for sequence in 0..5 {
        let value = format!("before-{sequence}");
        let appended = client
            .produce("t", 0, batch(11, sequence, std::slice::from_ref(&value)))
            .await
            .unwrap();
        acknowledged.push((appended.base_offset, value));
    }
    let leader = loop {
        let status = client.status().await;
        let leader = status.iter().find_map(|partition| partition.leader);
        if let Some(leader) = leader {
            break leader;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    disks[&leader].failing.store(true, Ordering::Release);

    for sequence in 5..15 {
        let value = format!("after-{sequence}");
        let appended = client
            .produce("t", 0, batch(11, sequence, std::slice::from_ref(&value)))
            .await
            .unwrap();
        acknowledged.push((appended.base_offset, value));
    }
    let status = client.status().await;
    let new_leader = status
        .iter()
        .filter(|partition| partition.node != leader)
        .find_map(|partition| partition.leader)
        .unwrap();
    assert_ne!(
        new_leader, leader,
        "the node with the failed disk still leads"
    );
    for (id, address) in &peers {
        if *id == leader {
            continue;
        }
        let served = values_once_served(address, acknowledged.len()).await;
        for record in &acknowledged {
            assert!(served.contains(record), "node {id} lacks {record:?}");
        }
    }
    for (stop, task) in stops {
        let _ = stop.send(());
        let _ = task.await;
    }
}
