//! `replicated`'s cluster phase: three seglog-raft nodes in this process on loopback (ports
//! picked free), one tokio runtime for them all, each node with its own directory under the data
//! directory ([`NODES_DIR`]`/node-N`) and its own engine (`EngineConfig::default()`, as
//! `seglog node` runs it).
//!
//! The bench creates the topic through the cluster (`--partitions` partitions) and waits until
//! every partition has a leader; then `--producers` producers run as tasks on the same runtime,
//! each with its own [`ClusterClient`]: one batch in flight, partitions round-robin from its own,
//! each batch an idempotent producer's (an id per producer, a sequence per partition) and
//! answered once committed on a majority (appended and synced there). Latency is per batch, from
//! the send to the committed answer; bytes are the batches' bytes, as the single-node phases
//! count them. The phase runs for the whole `--duration` (or `--records`), as the single-node
//! phase before it did; then every node is stopped (its groups shut down, its engine closed) and
//! `serve` has returned.

use std::collections::BTreeMap;
use std::net::TcpListener as StdTcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use bytes::{Bytes, BytesMut};
use seglog::engine::EngineConfig;
use seglog::format::batch::field;
use seglog::format::crc::crc32c;
use seglog_raft::client::ClusterClient;
use seglog_raft::node::{Node, NodeConfig};
use seglog_raft::wire::Retention;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::TOPIC;
use super::batches::BatchSource;
use super::progress::{Limit, Phase, Shared, TaskPhase, WorkerStats, micros};
use super::settings::Settings;

/// The phase's name: its row in the table and its key in the JSON.
pub const PHASE: &str = "replicated";
/// The directory, under the data directory, that holds the nodes' directories.
pub const NODES_DIR: &str = "replicated";
/// Nodes of the cluster (every partition's voters): a batch is committed on two.
pub const NODES: u64 = 3;
/// How long one produce (or the topic's creation) may take, retries included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the partitions may take to elect their leaders.
const LEADERS_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between two looks at the partitions' leaders.
const LEADERS_POLL: Duration = Duration::from_millis(50);
/// How long the runtime's remaining tasks may take to end once the nodes stopped.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(10);
/// The first producer's id; producer `n` is this plus `n`.
const PRODUCER_ID_BASE: i64 = 1_000;

/// A node serving on its task, and the sender that stops it.
struct RunningNode {
    id: u64,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

/// Starts the cluster in `dir`, runs the producers until the settings' limit, and stops the
/// cluster (also when the phase failed).
pub fn replicated_phase(settings: &Settings, dir: &Path) -> anyhow::Result<Phase> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("seglog-bench-raft")
        .build()
        .context("cannot start the async runtime")?;
    let listeners = free_listeners(NODES)?;
    let peers = listeners
        .iter()
        .map(|(id, listener)| Ok((*id, listener.local_addr()?.to_string())))
        .collect::<anyhow::Result<BTreeMap<u64, String>>>()?;
    let phase = runtime.block_on(async {
        let mut nodes = Vec::new();
        let mut started = Ok(());
        for (id, listener) in listeners {
            match start_node(id, dir, &peers, listener).await {
                Ok(node) => nodes.push(node),
                Err(error) => {
                    started = Err(error);
                    break;
                }
            }
        }
        let measured = match started {
            Ok(()) => produce_on_cluster(settings, peers.values().cloned().collect()).await,
            Err(error) => Err(error),
        };
        let stopped = stop_nodes(nodes).await;
        let phase = measured?;
        stopped?;
        anyhow::Ok(phase)
    });
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    phase
}

/// `count` listeners on free loopback ports, ids 1 to `count`. Bound here and handed to the
/// nodes as they are, so that no other process takes a port in between.
fn free_listeners(count: u64) -> anyhow::Result<Vec<(u64, StdTcpListener)>> {
    (1..=count)
        .map(|id| {
            let listener = StdTcpListener::bind("127.0.0.1:0")
                .context("cannot listen on a free loopback port")?;
            listener.set_nonblocking(true)?;
            Ok((id, listener))
        })
        .collect()
}

/// Starts node `id` in `dir/node-<id>` and serves it on `listener` on a task of its own.
async fn start_node(
    id: u64,
    dir: &Path,
    peers: &BTreeMap<u64, String>,
    listener: StdTcpListener,
) -> anyhow::Result<RunningNode> {
    let listener = TcpListener::from_std(listener)?;
    let config = NodeConfig {
        id,
        dir: dir.join(format!("node-{id}")),
        peers: peers.clone(),
        join: false,
        // Three nodes share this machine: one unpinned shard each.
        engine: EngineConfig::default()
            .with_shard_count(1)
            .with_pin_shards(false),
    };
    let node = Node::start(config)
        .await
        .with_context(|| format!("cannot start node {id}"))?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        node.serve(listener, shutdown)
            .await
            .with_context(|| format!("node {id} did not stop cleanly"))
    });
    Ok(RunningNode { id, stop, task })
}

/// Stops every node and waits for each `serve` to return; the first failure.
async fn stop_nodes(nodes: Vec<RunningNode>) -> anyhow::Result<()> {
    let mut result = Ok(());
    for node in nodes {
        // A node whose task ended already has dropped the receiver: its task says why.
        let _ = node.stop.send(());
        let stopped = match node.task.await {
            Ok(served) => served,
            Err(error) => Err(anyhow!("node {}'s task failed: {error}", node.id)),
        };
        if result.is_ok() {
            result = stopped;
        }
    }
    result
}

/// Creates the topic, waits for its leaders and runs the producers until the limit.
async fn produce_on_cluster(settings: &Settings, addresses: Vec<String>) -> anyhow::Result<Phase> {
    let mut client = ClusterClient::new(addresses.clone(), REQUEST_TIMEOUT);
    client
        .create_topic(TOPIC, settings.partitions, Retention::default())
        .await
        .with_context(|| format!("cannot create topic {TOPIC} on the cluster"))?;
    wait_for_leaders(&mut client, settings.partitions).await?;
    let phase = TaskPhase::start(PHASE, settings.limit, settings.records_per_s_cap);
    let mut tasks = Vec::with_capacity(settings.producers);
    for producer in 0..settings.producers {
        let worker = ClusterProducer {
            client: ClusterClient::new(addresses.clone(), REQUEST_TIMEOUT),
            batches: BatchSource::new(settings, producer)?,
            producer_id: PRODUCER_ID_BASE + producer as i64,
            sequences: vec![0; settings.partitions as usize],
            partitions: settings.partitions,
            next_partition: producer as u32 % settings.partitions,
            shared: phase.shared.clone(),
            limit: phase.limit,
            started: phase.started,
        };
        tasks.push(tokio::spawn(worker.run()));
    }
    phase.finish(tasks).await
}

/// Waits until every partition of the topic has a node that calls itself its leader.
async fn wait_for_leaders(client: &mut ClusterClient, partitions: u32) -> anyhow::Result<()> {
    let deadline = Instant::now() + LEADERS_TIMEOUT;
    loop {
        let statuses = client.status().await;
        let leaderless = (0..partitions)
            .filter(|partition| {
                !statuses.iter().any(|status| {
                    status.topic == TOPIC
                        && status.partition == *partition
                        && status.leader == Some(status.node)
                })
            })
            .count();
        if leaderless == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "{leaderless} of {partitions} partitions of {TOPIC} had no leader after {} s",
                LEADERS_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(LEADERS_POLL).await;
    }
}

/// One producer task: its client and its idempotent producer's state.
struct ClusterProducer {
    client: ClusterClient,
    batches: BatchSource,
    producer_id: i64,
    /// The next base sequence of each partition.
    sequences: Vec<i32>,
    partitions: u32,
    next_partition: u32,
    shared: Arc<Shared>,
    limit: Limit,
    started: Instant,
}

impl ClusterProducer {
    /// Produces one batch at a time until the limit; the figures are stamped with its own end.
    async fn run(mut self) -> anyhow::Result<WorkerStats> {
        let mut stats = WorkerStats::new()?;
        loop {
            let (batch, records) = self.batches.next()?;
            let Some(due) = self.shared.claim_send(self.limit, self.started, records) else {
                break;
            };
            tokio::time::sleep_until(due.into()).await;
            let partition = self.next_partition;
            self.next_partition = (partition + 1) % self.partitions;
            let sequence = self
                .sequences
                .get_mut(partition as usize)
                .context("a partition beyond the topic's")?;
            let batch = with_producer(&batch, self.producer_id, *sequence)?;
            // Kafka's sequences wrap to 0 after i32::MAX.
            *sequence = i32::try_from(records)
                .ok()
                .and_then(|records| sequence.checked_add(records))
                .unwrap_or(0);
            let bytes = batch.len() as u64;
            self.client
                .produce(TOPIC, partition, batch)
                .await
                .with_context(|| format!("produce to {TOPIC}-{partition} failed"))?;
            stats.latency.saturating_record(micros(due.elapsed()));
            stats.records += records;
            stats.bytes += bytes;
            self.shared.appended.fetch_add(records, Ordering::Relaxed);
        }
        Ok(stats.finished_now())
    }
}

/// `batch` as idempotent producer `producer_id`'s (epoch 0) starting at `base_sequence`: its
/// header's producer fields set and its CRC-32C computed again (it covers them).
fn with_producer(batch: &Bytes, producer_id: i64, base_sequence: i32) -> anyhow::Result<Bytes> {
    let short = || anyhow!("a benchmark batch shorter than a batch header");
    let mut bytes = BytesMut::from(batch.as_ref());
    let fields: [(usize, &[u8]); 3] = [
        (field::PRODUCER_ID, &producer_id.to_be_bytes()),
        (field::PRODUCER_EPOCH, &0_i16.to_be_bytes()),
        (field::BASE_SEQUENCE, &base_sequence.to_be_bytes()),
    ];
    for (at, value) in fields {
        bytes
            .get_mut(at..at + value.len())
            .ok_or_else(short)?
            .copy_from_slice(value);
    }
    let crc = crc32c(bytes.get(field::ATTRIBUTES..).ok_or_else(short)?);
    bytes
        .get_mut(field::CRC..field::CRC + 4)
        .ok_or_else(short)?
        .copy_from_slice(&crc.to_be_bytes());
    Ok(bytes.freeze())
}

#[cfg(test)]
mod tests {
    use seglog::format::{Batch, BatchBuilder, NewRecord};

    use super::*;

    #[test]
    fn with_producer_sets_the_producer_fields_and_a_valid_crc() {
        let mut builder = BatchBuilder::new(0);
        for value in [b"one".as_slice(), b"two"] {
            builder.push(&NewRecord {
                timestamp_ms: 1_000,
                key: None,
                value: Some(value),
                headers: &[],
            });
        }
        let plain = builder.build().unwrap();
        let stamped = with_producer(&plain, 1_234, 56).unwrap();
        let batch = Batch::decode(&stamped, u64::MAX).unwrap();
        let header = batch.header();
        assert_eq!(
            (
                header.producer_id,
                header.producer_epoch,
                header.base_sequence
            ),
            (1_234, 0, 56)
        );
        assert_eq!(batch.records().unwrap().len(), 2);
        // The batch it came from is left as it was.
        assert_eq!(
            Batch::decode(&plain, u64::MAX)
                .unwrap()
                .header()
                .producer_id,
            -1
        );
    }
}
