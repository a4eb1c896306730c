//! A cluster node: one engine, one Raft group per partition plus the metadata group, and a TCP
//! server for its peers and its clients.
//!
//! - **Directory.** `node.json` (the node's id and the voters, checked at every start), `log/`
//!   (the engine's data directory), `raft/` (the groups' state files).
//! - **Forming.** Every voter initializes each group with the same membership (all voters), so
//!   the first entry is the same everywhere and a restart with the same arguments rejoins.
//! - **Topics.** A topic is created by committing a command to the metadata group (its log: the
//!   `__seglog_metadata` topic); each node, following that log, creates the topic in its engine
//!   and starts its partitions' groups. Replicated topics keep everything (retention comes from
//!   Raft's purges, not the engine's).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, Config, Raft, SnapshotPolicy};
use seglog::config::LogConfig;
use seglog::engine::{Engine, EngineConfig, FetchOptions};
use seglog::error::ReadError;
use seglog::format::{BatchBuilder, NewRecord};
use seglog::types::{Offset, TopicName};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};

use crate::entry_codec::Batches;
use crate::grouping::ProduceQueue;
use crate::network::Network;
use crate::wire::{Connection, Fetched, GroupId, PartitionStatus, Request, Response, Retention};
use crate::{LogStore, Replica, StateMachine, TypeConfig};

/// The topic that holds the metadata group's log.
pub const METADATA_TOPIC: &str = "__seglog_metadata";
/// How long a topic creation waits for the node to start the topic's groups.
const TOPIC_START_TIMEOUT: Duration = Duration::from_secs(10);
/// How often each partition's copy is checked against its topic's retention.
const RETENTION_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How long a retention purge waits for its snapshot.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a produce waits for a new leader to apply the entries of earlier terms.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(5);

/// How a node is started.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id; one of `peers`.
    pub id: u64,
    /// Its directory.
    pub dir: PathBuf,
    /// Every voter's id and address, this node's included.
    pub peers: BTreeMap<u64, String>,
    /// A node joining a running cluster (`cluster add-node` adds it): it initializes no group
    /// of its own.
    pub join: bool,
    /// The engine's configuration (several nodes on one machine: fewer, unpinned shards).
    pub engine: EngineConfig,
}

/// Why a node cannot start or run.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The id is not among the voters.
    #[error("node id {id} is not in --peers ({known})")]
    UnknownId {
        /// The id given.
        id: u64,
        /// The ids listed.
        known: String,
    },
    /// The directory belongs to another node or cluster.
    #[error(
        "{dir} belongs to node {found_id} of the cluster {found_peers}; refusing to run node {id} of {peers} there"
    )]
    ForeignDirectory {
        /// The directory.
        dir: PathBuf,
        /// The id recorded there.
        found_id: u64,
        /// The voters recorded there.
        found_peers: String,
        /// The id asked for.
        id: u64,
        /// The voters asked for.
        peers: String,
    },
    /// A file of the node's directory.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The engine refused.
    #[error("engine: {0}")]
    Engine(String),
    /// A replica could not open.
    #[error(transparent)]
    Replica(#[from] crate::ReplicaError),
    /// openraft refused.
    #[error("raft: {0}")]
    Raft(String),
}

/// What `node.json` records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct NodeIdentity {
    node_id: u64,
    peers: BTreeMap<u64, String>,
}

/// A topic command in the metadata log (one record's value, JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
enum MetadataCommand {
    CreateTopic {
        topic: String,
        partitions: u32,
        retention: Retention,
        /// The metadata group's members when it was proposed: the partitions' first voters.
        voters: BTreeMap<u64, String>,
    },
}

/// One running group.
#[derive(Clone)]
struct Group {
    raft: Raft<TypeConfig>,
    replica: Replica,
    /// Where the state machine builds its next snapshot (`StateMachine::snapshot_point`).
    snapshot_point: Arc<Mutex<Option<openraft::LogId<u64>>>>,
    /// Producers' batches on their way into entries (on the leader).
    queue: ProduceQueue,
}

/// A running node; clones share it.
#[derive(Clone)]
pub struct Node {
    inner: Arc<NodeInner>,
}

struct NodeInner {
    id: u64,
    peers: BTreeMap<u64, String>,
    engine: Engine,
    raft_dir: PathBuf,
    raft_config: Arc<Config>,
    groups: Mutex<BTreeMap<GroupId, Group>>,
    /// Each replicated topic's retention, from the metadata log.
    retention: Mutex<BTreeMap<String, Retention>>,
    /// Set when the node stops: connections end.
    stopping: tokio::sync::watch::Sender<bool>,
}

impl Node {
    /// Checks the directory, opens the engine and starts the metadata group and every topic's
    /// groups found in the metadata log.
    pub async fn start(config: NodeConfig) -> Result<Node, NodeError> {
        check_identity(&config)?;
        let engine = Engine::open(config.dir.join("log"), config.engine.clone())
            .map_err(|error| NodeError::Engine(error.to_string()))?;
        Node::start_on(config, engine).await
    }

    /// [`Node::start`] on an engine the caller opened on the node's `log/` directory (a test's
    /// engine on failing storage, for one).
    pub async fn start_on(config: NodeConfig, engine: Engine) -> Result<Node, NodeError> {
        check_identity(&config)?;
        let raft_dir = config.dir.join("raft");
        create_dir(&raft_dir)?;
        // Each node's election timeouts in a range of its own: voters started together were
        // seen timing out in the same millisecond round after round (a split vote each time).
        let election_offset_ms = 200 * (config.id % 5);
        let raft_config = Config {
            cluster_name: "seglog".into(),
            heartbeat_interval: 250,
            election_timeout_min: 1_000 + election_offset_ms,
            election_timeout_max: 2_000 + election_offset_ms,
            max_payload_entries: 256,
            snapshot_policy: SnapshotPolicy::Never,
            ..Config::default()
        };
        let raft_config = Arc::new(
            raft_config
                .validate()
                .map_err(|error| NodeError::Raft(error.to_string()))?,
        );
        let node = Node {
            inner: Arc::new(NodeInner {
                id: config.id,
                peers: config.peers,
                engine,
                raft_dir,
                raft_config,
                groups: Mutex::new(BTreeMap::new()),
                retention: Mutex::new(BTreeMap::new()),
                stopping: tokio::sync::watch::Sender::new(false),
            }),
        };
        node.ensure_topic(METADATA_TOPIC, 1).await?;
        let voters = match config.join {
            true => None,
            false => Some(node.inner.peers.clone()),
        };
        node.start_group(GroupId::Metadata, voters).await?;
        tokio::spawn(node.clone().follow_metadata());
        tokio::spawn(node.clone().apply_retention());
        tokio::spawn(node.clone().break_election_ties());
        Ok(node)
    }

    /// Serves peers and clients on `listener` until `shutdown` completes, then stops every
    /// group and closes the engine.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), NodeError> {
        let accept = async {
            loop {
                if let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(self.clone().serve_connection(stream));
                }
            }
        };
        tokio::select! {
            () = accept => {}
            () = shutdown => {}
        }
        self.stop().await
    }

    async fn stop(&self) -> Result<(), NodeError> {
        self.inner.stopping.send_replace(true);
        let groups: Vec<Group> = self.groups().values().cloned().collect();
        for group in groups {
            let _ = group.raft.shutdown().await;
        }
        let engine = self.inner.engine.clone();
        tokio::task::spawn_blocking(move || engine.close())
            .await
            .map_err(|error| NodeError::Engine(error.to_string()))?
            .map_err(|error| NodeError::Engine(error.to_string()))
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, BTreeMap<GroupId, Group>> {
        self.inner
            .groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn group(&self, id: &GroupId) -> Option<Group> {
        self.groups().get(id).cloned()
    }

    /// Creates `topic` in the engine if it is missing, keeping everything (no engine retention).
    async fn ensure_topic(&self, topic: &str, partitions: u32) -> Result<TopicName, NodeError> {
        let engine = self.inner.engine.clone();
        let topic = topic.to_string();
        tokio::task::spawn_blocking(move || {
            if let Ok(description) = engine.describe_topic(&topic) {
                return Ok(description.topic);
            }
            let config = LogConfig::default()
                .with_retention_ms(-1)
                .with_retention_bytes(-1);
            engine.create_topic(&topic, partitions, config)
        })
        .await
        .map_err(|error| NodeError::Engine(error.to_string()))?
        .map_err(|error| NodeError::Engine(error.to_string()))
    }

    /// Starts group `id` if it is not running; a group not yet initialized is initialized with
    /// `voters` when this node is one of them (every voter writes the same first entry).
    async fn start_group(
        &self,
        id: GroupId,
        voters: Option<BTreeMap<u64, String>>,
    ) -> Result<Group, NodeError> {
        if let Some(group) = self.group(&id) {
            return Ok(group);
        }
        let (topic, partition) = match &id {
            GroupId::Metadata => (METADATA_TOPIC.to_string(), 0),
            GroupId::Partition { topic, partition } => (topic.clone(), *partition),
        };
        let topic =
            TopicName::parse(&topic).map_err(|error| NodeError::Engine(error.to_string()))?;
        let engine = self.inner.engine.clone();
        let replica = Replica::open(engine, topic, partition, &self.inner.raft_dir).await?;
        let state_machine = StateMachine::new(replica.clone());
        let snapshot_point = state_machine.snapshot_point();
        let raft = Raft::new(
            self.inner.id,
            self.inner.raft_config.clone(),
            Network::new(id.clone()),
            LogStore::new(replica.clone()),
            state_machine,
        )
        .await
        .map_err(|error| NodeError::Raft(error.to_string()))?;
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|error| NodeError::Raft(error.to_string()))?;
        let voters = voters.filter(|voters| voters.contains_key(&self.inner.id));
        if let (false, Some(voters)) = (initialized, voters) {
            let members: BTreeMap<u64, BasicNode> = voters
                .iter()
                .map(|(id, address)| (*id, BasicNode::new(address)))
                .collect();
            let _ = raft.initialize(members).await;
        }
        let queue = ProduceQueue::start(raft.clone(), replica.append_progress());
        let group = Group {
            raft,
            replica,
            snapshot_point,
            queue,
        };
        let mut groups = self.groups();
        Ok(groups.entry(id).or_insert(group).clone())
    }

    /// Follows the metadata log: each committed command is carried out here, in order.
    async fn follow_metadata(self) {
        let Some(metadata) = self.group(&GroupId::Metadata) else {
            return;
        };
        let mut applied = metadata.raft.metrics();
        let mut offset = 0;
        loop {
            offset = self.carry_out_commands(&metadata.replica, offset).await;
            if applied.changed().await.is_err() {
                return;
            }
        }
    }

    async fn carry_out_commands(&self, replica: &Replica, mut offset: u64) -> u64 {
        while offset < replica.high_watermark() {
            let Ok(batches) = replica.fetch(offset).await else {
                return offset;
            };
            let Some(last) = batches.last() else {
                return offset;
            };
            let next = last.last_offset() as u64 + 1;
            for batch in &batches {
                if batch.header().attributes.is_control() {
                    continue;
                }
                for record in batch.records().unwrap_or_default() {
                    let command = record
                        .value
                        .as_deref()
                        .and_then(|value| serde_json::from_slice(value).ok());
                    let Some(command) = command else { continue };
                    if let Err(error) = self.carry_out(command).await {
                        tracing::error!("node {}: {error}", self.inner.id);
                    }
                }
            }
            offset = next;
        }
        offset
    }

    async fn carry_out(&self, command: MetadataCommand) -> Result<(), NodeError> {
        match command {
            MetadataCommand::CreateTopic {
                topic,
                partitions,
                retention,
                voters,
            } => {
                self.inner
                    .retention
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(topic.clone())
                    .or_insert(retention);
                let name = self.ensure_topic(&topic, partitions).await?;
                let description = self
                    .inner
                    .engine
                    .describe_topic(name.as_str())
                    .map_err(|error| NodeError::Engine(error.to_string()))?;
                let partition_count = description.partitions.len() as u32;
                for partition in 0..partition_count {
                    let id = GroupId::Partition {
                        topic: topic.clone(),
                        partition,
                    };
                    self.start_group(id, Some(voters.clone())).await?;
                }
                Ok(())
            }
        }
    }

    /// Starts an election in every group that has no leader, every few seconds (a period of
    /// its own per node). openraft 0.9 draws a node's election timeout once: a voter whose log
    /// is behind and whose timeout is shorter can start every election, and be refused every
    /// time by the up-to-date one, whose own timer each refusal restarts.
    async fn break_election_ties(self) {
        let mut stopping = self.inner.stopping.subscribe();
        let period = Duration::from_millis(2_500 + 700 * (self.inner.id % 5));
        loop {
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                _ = stopping.wait_for(|stopping| *stopping) => return,
            }
            let groups: Vec<Group> = self.groups().values().cloned().collect();
            for group in groups {
                let leaderless = group.raft.metrics().borrow().current_leader.is_none();
                if leaderless {
                    let _ = group.raft.trigger().elect().await;
                }
            }
        }
    }

    /// Every [`RETENTION_CHECK_INTERVAL`], purges each partition's copy through the last
    /// committed entry its topic's retention lets go: a snapshot is built there first (so a
    /// follower that needs an entry before it installs the snapshot and starts after it), then
    /// openraft purges. Each node does so for its own copy, as Kafka's replicas apply retention
    /// each on its own.
    async fn apply_retention(self) {
        let mut stopping = self.inner.stopping.subscribe();
        loop {
            tokio::select! {
                () = tokio::time::sleep(RETENTION_CHECK_INTERVAL) => {}
                _ = stopping.wait_for(|stopping| *stopping) => return,
            }
            let groups: Vec<(String, Group)> = self
                .groups()
                .iter()
                .filter_map(|(id, group)| match id {
                    GroupId::Partition { topic, .. } => Some((topic.clone(), group.clone())),
                    GroupId::Metadata => None,
                })
                .collect();
            for (topic, group) in groups {
                let retention = self
                    .inner
                    .retention
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&topic)
                    .copied()
                    .unwrap_or_default();
                if retention == Retention::default() {
                    continue;
                }
                if let Err(error) = purge_by_retention(&group, retention).await {
                    tracing::warn!("node {}: retention of {topic}: {error}", self.inner.id);
                }
            }
        }
    }

    async fn serve_connection(self, stream: TcpStream) {
        let mut connection = Connection::new(stream);
        let mut stopping = self.inner.stopping.subscribe();
        loop {
            let request = tokio::select! {
                request = connection.receive::<Request>() => request,
                _ = stopping.wait_for(|stopping| *stopping) => return,
            };
            let Ok(Some(request)) = request else { return };
            let response = self.handle(request).await;
            if connection.send(&response).await.is_err() {
                return;
            }
        }
    }

    async fn handle(&self, request: Request) -> Response {
        match request {
            Request::AppendEntries(id, rpc) => match self.group(&id) {
                Some(group) => Response::AppendEntries(group.raft.append_entries(rpc).await),
                None => Response::UnknownGroup(id),
            },
            Request::Vote(id, rpc) => match self.group(&id) {
                Some(group) => Response::Vote(group.raft.vote(rpc).await),
                None => Response::UnknownGroup(id),
            },
            Request::InstallSnapshot(id, rpc) => match self.group(&id) {
                Some(group) => Response::InstallSnapshot(group.raft.install_snapshot(rpc).await),
                None => Response::UnknownGroup(id),
            },
            Request::CreateTopic {
                topic,
                partitions,
                retention,
            } => self.create_topic(topic, partitions, retention).await,
            Request::Topics => Response::Topics(self.topics()),
            Request::Produce {
                topic,
                partition,
                batch,
            } => self.produce(topic, partition, batch).await,
            Request::Fetch {
                topic,
                partition,
                offset,
                max_bytes,
            } => self.fetch(topic, partition, offset, max_bytes).await,
            Request::Status => Response::Status(self.status()),
            Request::Groups => Response::Groups(self.groups().keys().cloned().collect()),
            Request::AddVoter { group, id, address } => {
                self.change_voters(group, id, Some(address)).await
            }
            Request::RemoveVoter { group, id } => self.change_voters(group, id, None).await,
        }
    }

    /// Every replicated topic whose groups all run here, with its partition count.
    fn topics(&self) -> BTreeMap<String, u32> {
        let running = self.groups();
        self.inner
            .engine
            .list_topics()
            .into_iter()
            .filter(|(topic, _)| topic.as_str() != METADATA_TOPIC)
            .filter(|(topic, metadata)| {
                (0..metadata.partition_count).all(|partition| {
                    running.contains_key(&GroupId::Partition {
                        topic: topic.to_string(),
                        partition,
                    })
                })
            })
            .map(|(topic, metadata)| (topic.to_string(), metadata.partition_count))
            .collect()
    }

    async fn create_topic(&self, topic: String, partitions: u32, retention: Retention) -> Response {
        if self.topics().contains_key(&topic) {
            return Response::Done;
        }
        if let Err(error) = TopicName::parse(&topic) {
            return Response::Error(error.to_string());
        }
        if topic == METADATA_TOPIC || partitions == 0 {
            return Response::Error(format!(
                "cannot create topic {topic} with {partitions} partitions"
            ));
        }
        let Some(metadata) = self.group(&GroupId::Metadata) else {
            return Response::Error("the metadata group is not running".into());
        };
        let voters = metadata
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect();
        let command = MetadataCommand::CreateTopic {
            topic: topic.clone(),
            partitions,
            retention,
            voters,
        };
        let Ok(value) = serde_json::to_vec(&command) else {
            return Response::Error("command not encodable".into());
        };
        let batch = one_record_batch(&value);
        if let Err(refused) = crate::grouping::write(&metadata.raft, Batches(batch)).await {
            return refused.into();
        }
        let deadline = tokio::time::Instant::now() + TOPIC_START_TIMEOUT;
        while !self.topics().contains_key(&topic) {
            if tokio::time::Instant::now() > deadline {
                return Response::Error(format!("topic {topic} did not start in time"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Response::Done
    }

    /// Adds node `id` (at `address`) to `group` as a voter — a learner first, answered once it
    /// caught up — or, without an address, removes it from the group.
    async fn change_voters(&self, group_id: GroupId, id: u64, address: Option<String>) -> Response {
        let Some(group) = self.group(&group_id) else {
            return Response::UnknownGroup(group_id);
        };
        let result = match address {
            Some(address) => {
                let added = group
                    .raft
                    .add_learner(id, BasicNode::new(address), true)
                    .await;
                match added {
                    Ok(_) => {
                        let voters = ChangeMembers::AddVoterIds(BTreeSet::from([id]));
                        group.raft.change_membership(voters, false).await
                    }
                    Err(error) => Err(error),
                }
            }
            None => {
                let voters = ChangeMembers::RemoveVoters(BTreeSet::from([id]));
                group.raft.change_membership(voters, false).await
            }
        };
        match result {
            Ok(_) => Response::Done,
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                Response::NotLeader {
                    leader: forward.leader_id,
                    address: forward.leader_node.map(|node| node.addr),
                }
            }
            Err(RaftError::Fatal(fatal)) => Response::Unavailable(fatal.to_string()),
            Err(error) => Response::Error(error.to_string()),
        }
    }

    async fn produce(&self, topic: String, partition: u32, batch: Bytes) -> Response {
        let id = GroupId::Partition { topic, partition };
        let Some(group) = self.group(&id) else {
            return Response::UnknownGroup(id);
        };
        // A batch no log would take must not become an entry: every replica would fail on it.
        let header = match crate::entry_codec::check_client_batch(&batch) {
            Ok(header) => header,
            Err(error) => return Response::Error(error.to_string()),
        };
        if header.producer_id >= 0 {
            // A retry of a batch already committed is answered, not written again.
            if let Err(response) = self.wait_until_caught_up(&group).await {
                return response;
            }
            let committed = group
                .replica
                .committed_batch(header.producer_id, header.base_sequence);
            if let Some(appended) = committed {
                return Response::Produced(appended);
            }
        }
        group.queue.produce(batch).await
    }

    /// Waits until this node leads `group` and has applied every entry of earlier terms (its
    /// own first entry of the term applied): then its producer table is complete.
    async fn wait_until_caught_up(&self, group: &Group) -> Result<(), Response> {
        let mut metrics = group.raft.metrics();
        let deadline = tokio::time::Instant::now() + CATCH_UP_TIMEOUT;
        loop {
            {
                let now = metrics.borrow();
                if now.current_leader != Some(self.inner.id) {
                    let leader = now.current_leader;
                    let address = leader.and_then(|id| self.inner.peers.get(&id).cloned());
                    return Err(Response::NotLeader { leader, address });
                }
                let term = now.current_term;
                if now
                    .last_applied
                    .is_some_and(|applied| applied.leader_id.term == term)
                {
                    return Ok(());
                }
            }
            let changed = tokio::time::timeout_at(deadline, metrics.changed()).await;
            if !matches!(changed, Ok(Ok(()))) {
                return Err(Response::Error(
                    "the leader did not catch up in time".into(),
                ));
            }
        }
    }

    async fn fetch(&self, topic: String, partition: u32, offset: u64, max_bytes: u64) -> Response {
        let id = GroupId::Partition {
            topic: topic.clone(),
            partition,
        };
        let Some(group) = self.group(&id) else {
            return Response::UnknownGroup(id);
        };
        let log_start = group.replica.log_start_offset();
        // Everything below the log start was committed (a purge or an installed snapshot took
        // it), also while the state machine has not yet applied the snapshot.
        let high_watermark = group.replica.high_watermark().max(log_start);
        // Below the log start: from the log start (the records asked for are gone).
        let start = offset.max(log_start).min(high_watermark);
        let options = FetchOptions {
            max_bytes,
            ..FetchOptions::default()
        };
        let topic = group.replica.topic().clone();
        let pending = self
            .inner
            .engine
            .fetch(&topic, partition, Offset(start), options);
        match pending.await {
            Ok(data) => {
                let log_start_offset = data.log_start_offset.0;
                let records = data.trim_to(Offset(high_watermark)).records;
                Response::Fetched(Fetched {
                    records,
                    log_start_offset,
                    high_watermark,
                })
            }
            // The engine's log moves to the replica's new start just after the replica's state
            // does (a purge, or a restart at an installed snapshot): nothing to read yet.
            Err(ReadError::OffsetOutOfRange {
                log_start_offset, ..
            }) => Response::Fetched(Fetched {
                records: bytes::Bytes::new(),
                log_start_offset: log_start_offset.0.max(log_start),
                high_watermark,
            }),
            Err(error) => Response::Error(error.to_string()),
        }
    }

    fn status(&self) -> Vec<PartitionStatus> {
        let groups: Vec<(GroupId, Group)> = self
            .groups()
            .iter()
            .map(|(id, group)| (id.clone(), group.clone()))
            .collect();
        groups
            .into_iter()
            .filter_map(|(id, group)| {
                let GroupId::Partition { topic, partition } = id else {
                    return None;
                };
                let metrics = group.raft.metrics().borrow().clone();
                Some(PartitionStatus {
                    topic,
                    partition,
                    node: self.inner.id,
                    leader: metrics.current_leader,
                    term: metrics.current_term,
                    commit_index: metrics.last_applied.map(|applied| applied.index),
                    end_offset: group.replica.log_end_offset(),
                })
            })
            .collect()
    }
}

/// Builds a snapshot at the retention point of `group`'s copy and purges through it.
async fn purge_by_retention(group: &Group, retention: Retention) -> Result<(), String> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64);
    let Some(point) = group
        .replica
        .retention_point(retention.ms, retention.bytes, now_ms)
    else {
        return Ok(());
    };
    *group
        .snapshot_point
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some(point);
    group
        .raft
        .trigger()
        .snapshot()
        .await
        .map_err(|error| error.to_string())?;
    let mut metrics = group.raft.metrics();
    let built = metrics.wait_for(|now| now.snapshot >= Some(point));
    tokio::time::timeout(SNAPSHOT_TIMEOUT, built)
        .await
        .map_err(|_| format!("no snapshot at {point} in time"))?
        .map_err(|error| error.to_string())?;
    group
        .raft
        .trigger()
        .purge_log(point.index)
        .await
        .map_err(|error| error.to_string())
}

fn one_record_batch(value: &[u8]) -> Bytes {
    let mut builder = BatchBuilder::new(0);
    builder.push(&NewRecord {
        timestamp_ms: -1,
        key: None,
        value: Some(value),
        headers: &[],
    });
    builder.build().unwrap_or_default()
}

fn create_dir(dir: &Path) -> Result<(), NodeError> {
    std::fs::create_dir_all(dir).map_err(|source| NodeError::Io {
        path: dir.to_owned(),
        source,
    })
}

fn peer_list(peers: &BTreeMap<u64, String>) -> String {
    peers
        .iter()
        .map(|(id, address)| format!("{id}={address}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Refuses an id missing from the voters, and a directory recorded for another node or voter
/// set; records the identity in a new directory.
fn check_identity(config: &NodeConfig) -> Result<(), NodeError> {
    if !config.peers.contains_key(&config.id) {
        let known: BTreeSet<u64> = config.peers.keys().copied().collect();
        return Err(NodeError::UnknownId {
            id: config.id,
            known: format!("{known:?}"),
        });
    }
    create_dir(&config.dir)?;
    let path = config.dir.join("node.json");
    let wanted = NodeIdentity {
        node_id: config.id,
        peers: config.peers.clone(),
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            let found: NodeIdentity =
                serde_json::from_slice(&bytes).map_err(|error| NodeError::Io {
                    path: path.clone(),
                    source: std::io::Error::other(error),
                })?;
            if found != wanted {
                return Err(NodeError::ForeignDirectory {
                    dir: config.dir.clone(),
                    found_id: found.node_id,
                    found_peers: peer_list(&found.peers),
                    id: config.id,
                    peers: peer_list(&config.peers),
                });
            }
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let io = |source| NodeError::Io {
                path: path.clone(),
                source,
            };
            let bytes =
                serde_json::to_vec_pretty(&wanted).map_err(|e| io(std::io::Error::other(e)))?;
            write_durably(&path, &bytes).map_err(io)
        }
        Err(source) => Err(NodeError::Io { path, source }),
    }
}

fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("json.tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
