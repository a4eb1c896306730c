//! Three nodes in one process on loopback: a topic created through any node is replicated on
//! all; produced batches are committed with their offsets and read back from every node; after
//! the leader stops, another takes over and produce goes on, and a retried batch of an
//! idempotent producer is not written twice; batches sent together are committed in groups,
//! each answered its own offsets; a follower behind the leader's retention restarts at its
//! offsets.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{batch, batches_at, free_addresses, values_at, values_once_served};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use seglog::engine::EngineConfig;
use seglog_raft::client::{ClientError, ClusterClient};
use seglog_raft::node::{Node, NodeConfig};
use seglog_raft::wire::Retention;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct RunningNode {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

async fn start(id: u64, root: &Path, peers: &BTreeMap<u64, String>) -> RunningNode {
    start_node(id, root, peers, false).await
}

async fn start_node(
    id: u64,
    root: &Path,
    peers: &BTreeMap<u64, String>,
    join: bool,
) -> RunningNode {
    let listener = TcpListener::bind(&peers[&id]).await.unwrap();
    let config = NodeConfig {
        id,
        dir: root.join(format!("node-{id}")),
        peers: peers.clone(),
        join,
        // One unpinned shard per node: the tests run many nodes at once on a few cores.
        engine: EngineConfig::default()
            .with_shard_count(1)
            .with_pin_shards(false),
    };
    let node = Node::start(config).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        node.serve(listener, shutdown).await.unwrap();
    });
    RunningNode { stop, task }
}

/// Three nodes in `root` and a client of all three.
async fn start_three(
    root: &Path,
) -> (
    BTreeMap<u64, String>,
    BTreeMap<u64, RunningNode>,
    ClusterClient,
) {
    let peers = free_addresses(3);
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start(id, root, &peers).await);
    }
    let addresses: Vec<String> = peers.values().cloned().collect();
    let client = ClusterClient::new(addresses, Duration::from_secs(30));
    (peers, nodes, client)
}

async fn stop(node: RunningNode) {
    node.stop.send(()).unwrap();
    node.task.await.unwrap();
}

async fn leader_of_t0(client: &mut ClusterClient) -> u64 {
    for _ in 0..200 {
        let leaders: Vec<u64> = client
            .status()
            .await
            .into_iter()
            .filter(|status| status.topic == "t" && status.partition == 0)
            .filter_map(|status| status.leader)
            .collect();
        if let Some(leader) = leaders.first() {
            return *leader;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader for t-0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_replicate_commit_and_survive_the_leaders_stop() {
    let root = tempfile::tempdir().unwrap();
    let (peers, mut nodes, mut client) = start_three(root.path()).await;
    let addresses: Vec<String> = peers.values().cloned().collect();
    client
        .create_topic("t", 1, Retention::default())
        .await
        .unwrap();
    let topics = client.topics().await.unwrap();
    assert_eq!(topics.get("t"), Some(&1));

    let mut expected = Vec::new();
    let mut sequence = 0;
    for round in 0..20 {
        let values: Vec<String> = (0..10).map(|i| format!("v{round}-{i}")).collect();
        let appended = client
            .produce("t", 0, batch(7, sequence, &values))
            .await
            .unwrap();
        sequence += 10;
        assert_eq!(appended.last_offset - appended.base_offset, 9);
        for (i, value) in values.into_iter().enumerate() {
            expected.push((appended.base_offset + i as u64, value));
        }
    }
    // A retry of a recent committed batch gets its offsets back and is not written again.
    let last_values: Vec<String> = (0..10).map(|i| format!("v19-{i}")).collect();
    let retried = client
        .produce("t", 0, batch(7, sequence - 10, &last_values))
        .await
        .unwrap();
    assert_eq!(retried.base_offset, expected[expected.len() - 10].0);
    // A batch that fails its CRC is refused before it becomes an entry; the group goes on.
    let mut damaged = batch(8, 0, &["damaged".into()]).to_vec();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    let refused = client.produce("t", 0, damaged.into()).await;
    assert!(
        matches!(refused, Err(ClientError::Refused { .. })),
        "{refused:?}"
    );

    for address in &addresses {
        let served = values_once_served(address, expected.len()).await;
        assert_eq!(served, expected, "node {address}");
    }

    let leader = leader_of_t0(&mut client).await;
    stop(nodes.remove(&leader).unwrap()).await;
    let values: Vec<String> = (0..10).map(|i| format!("after-{i}")).collect();
    let appended = client
        .produce("t", 0, batch(7, sequence, &values))
        .await
        .unwrap();
    for (i, value) in values.into_iter().enumerate() {
        expected.push((appended.base_offset + i as u64, value));
    }
    let new_leader = leader_of_t0(&mut client).await;
    assert_ne!(new_leader, leader);
    let served = values_at(&peers[&new_leader]).await;
    assert_eq!(served, expected);

    // The stopped node restarts and catches up.
    nodes.insert(leader, start(leader, root.path(), &peers).await);
    let caught_up = values_once_served(&peers[&leader], expected.len()).await;
    assert_eq!(caught_up, expected);
    for (_, node) in nodes {
        stop(node).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batches_sent_together_are_grouped_and_each_answered_its_own_offsets() {
    let root = tempfile::tempdir().unwrap();
    let (peers, nodes, mut admin) = start_three(root.path()).await;
    let addresses: Vec<String> = peers.values().cloned().collect();
    admin
        .create_topic("t", 1, Retention::default())
        .await
        .unwrap();
    // Sixteen producers, each with one batch in flight at a time.
    let producers: Vec<_> = (0..16)
        .map(|producer| {
            let mut client = ClusterClient::new(addresses.clone(), Duration::from_secs(30));
            tokio::spawn(async move {
                let mut sent = Vec::new();
                for round in 0..20 {
                    let values: Vec<String> = (0..3)
                        .map(|i| format!("p{producer}-r{round}-{i}"))
                        .collect();
                    let batch = batch(100 + producer, round * 3, &values);
                    let appended = client.produce("t", 0, batch).await.unwrap();
                    assert_eq!(appended.last_offset - appended.base_offset, 2);
                    for (i, value) in values.into_iter().enumerate() {
                        sent.push((appended.base_offset + i as u64, value));
                    }
                }
                sent
            })
        })
        .collect();
    let mut expected = Vec::new();
    for producer in producers {
        expected.extend(producer.await.unwrap());
    }
    expected.sort();
    for address in peers.values() {
        let served = values_once_served(address, expected.len()).await;
        assert_eq!(served, expected, "node {address}");
    }
    // Some entries held several batches: their control batch counts them.
    let leader = leader_of_t0(&mut admin).await;
    let groups = group_batches_at(&peers[&leader]).await;
    assert!(!groups.is_empty(), "no batches were grouped");
    assert!(groups.iter().all(|count| *count >= 2), "{groups:?}");
    for (_, node) in nodes {
        stop(node).await;
    }
}

/// The batch counts of the groups in what `address` serves of t-0.
async fn group_batches_at(address: &str) -> Vec<u32> {
    let batches = batches_at(address).await;
    let groups = batches.iter().map(seglog_raft::entry_codec::group_size);
    groups.filter_map(|count| count.unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_behind_the_leaders_retention_restarts_from_its_log_start() {
    // The leader keeps the newest 64 KiB: the follower is sent a snapshot and entries after it.
    let retention = Retention {
        ms: -1,
        bytes: 64 * 1024,
    };
    follower_behind_the_leaders_retention(retention, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_behind_a_leader_that_purged_its_whole_log_restarts_at_its_end() {
    // Records of 1970 (`support::batch`) are past any `retention.ms`: the leader purges every
    // committed entry, and the follower is sent a snapshot and no entry after it.
    let retention = Retention {
        ms: 60_000,
        bytes: -1,
    };
    follower_behind_the_leaders_retention(retention, true).await;
}

/// A follower stopped while the leader takes far more than `retention` keeps restarts, is sent
/// a snapshot, and holds the leader's records at the leader's offsets from its log start on,
/// its log ending where the leader's does; `whole_log`: once the leader purged its whole log.
async fn follower_behind_the_leaders_retention(retention: Retention, whole_log: bool) {
    let root = tempfile::tempdir().unwrap();
    let (peers, mut nodes, mut client) = start_three(root.path()).await;
    client.create_topic("t", 1, retention).await.unwrap();
    client
        .produce("t", 0, batch(9, 0, &["first".into()]))
        .await
        .unwrap();
    let leader = leader_of_t0(&mut client).await;
    let follower = peers.keys().copied().find(|id| *id != leader).unwrap();
    stop(nodes.remove(&follower).unwrap()).await;

    // Far more than the retention keeps: the leader purges past everything the follower has.
    let value = "x".repeat(1000);
    let mut sequence = 1;
    for _ in 0..100 {
        let values = vec![value.clone(); 8];
        client
            .produce("t", 0, batch(9, sequence, &values))
            .await
            .unwrap();
        sequence += 8;
    }
    let mut leader_reader =
        ClusterClient::new(vec![peers[&leader].clone()], Duration::from_secs(10));
    let mut purged = None;
    for _ in 0..200 {
        let fetched = leader_reader.fetch("t", 0, 0, 1).await.unwrap();
        let start = fetched.log_start_offset;
        if start > 0 && (!whole_log || start == fetched.high_watermark) {
            purged = Some(fetched);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let purged = purged.expect("the leader never applied its retention");
    let (leader_start, leader_end) = (purged.log_start_offset, purged.high_watermark);

    nodes.insert(follower, start(follower, root.path(), &peers).await);
    let mut follower_reader =
        ClusterClient::new(vec![peers[&follower].clone()], Duration::from_secs(10));
    let mut caught_up = None;
    for _ in 0..400 {
        let fetched = follower_reader.fetch("t", 0, 0, 1).await.unwrap();
        let statuses = follower_reader.status().await;
        let end = statuses
            .iter()
            .find(|status| status.topic == "t" && status.partition == 0)
            .map(|status| status.end_offset);
        if fetched.high_watermark >= leader_end && end == Some(leader_end) {
            caught_up = Some(fetched);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let Some(caught_up) = caught_up else {
        let fetched = follower_reader.fetch("t", 0, 0, 1).await.unwrap();
        let status = client.status().await;
        panic!("the follower never caught up to {leader_end}: {fetched:?} {status:?}");
    };
    // It did not get the purged entries: its log starts at or after the leader's did.
    assert!(caught_up.log_start_offset >= leader_start);
    let from_follower = values_at(&peers[&follower]).await;
    let from_leader = values_at(&peers[&leader]).await;
    let common: Vec<_> = from_leader
        .iter()
        .filter(|(offset, _)| *offset >= caught_up.log_start_offset)
        .cloned()
        .collect();
    assert_eq!(from_follower, common);
    assert_eq!(from_follower.is_empty(), whole_log);
    for (_, node) in nodes {
        stop(node).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_added_catches_up_and_a_node_removed_leaves_every_group() {
    let root = tempfile::tempdir().unwrap();
    let mut peers = free_addresses(4);
    let fourth = peers.remove(&4).unwrap();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start(id, root.path(), &peers).await);
    }
    let addresses: Vec<String> = peers.values().cloned().collect();
    let mut client = ClusterClient::new(addresses.clone(), Duration::from_secs(30));
    client
        .create_topic("t", 1, Retention::default())
        .await
        .unwrap();
    let mut expected = Vec::new();
    for sequence in 0..10 {
        let value = format!("before-{sequence}");
        let appended = client
            .produce("t", 0, batch(5, sequence, std::slice::from_ref(&value)))
            .await
            .unwrap();
        expected.push((appended.base_offset, value));
    }

    let mut all_peers = peers.clone();
    all_peers.insert(4, fourth.clone());
    nodes.insert(4, start_node(4, root.path(), &all_peers, true).await);
    client.add_node(4, &fourth).await.unwrap();
    let served = values_once_served(&fourth, expected.len()).await;
    assert_eq!(served, expected);

    // Without node 1, the group of 2, 3 and 4 commits; node 4 holds what it commits.
    client.remove_node(1).await.unwrap();
    stop(nodes.remove(&1).unwrap()).await;
    let mut client = ClusterClient::new(
        vec![peers[&2].clone(), peers[&3].clone(), fourth.clone()],
        Duration::from_secs(30),
    );
    let appended = client
        .produce("t", 0, batch(5, 10, &["after".into()]))
        .await
        .unwrap();
    expected.push((appended.base_offset, "after".to_string()));
    let served = values_once_served(&fourth, expected.len()).await;
    assert_eq!(served, expected);
    let status = client.status().await;
    assert!(status.iter().all(|partition| partition.leader != Some(1)));
    for (_, node) in nodes {
        stop(node).await;
    }
}
