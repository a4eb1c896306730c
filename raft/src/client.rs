//! A client of a cluster: creates topics, produces through each partition's leader (following
//! leader changes), fetches committed records from any live node, and gathers every node's
//! status.
//!
//! A produce that got no answer (the leader died, the connection broke) is sent again, to the
//! leader of the moment. Batches carry an idempotent producer's id and sequence (set by the
//! caller, `BatchBuilder::with_producer`), so a leader answers a batch it already committed with
//! its offsets instead of writing it twice.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::entry_codec::Appended;
use crate::wire::{Connection, Fetched, GroupId, PartitionStatus, Request, Response, Retention};

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Pause before trying again when no node could take a request.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Why a request to the cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No node answered in time.
    #[error(
        "no node of {addresses} completed the request within {timeout_ms} ms; last error: {last}"
    )]
    TimedOut {
        /// The addresses tried.
        addresses: String,
        /// The time allowed.
        timeout_ms: u128,
        /// The last failure seen.
        last: String,
    },
    /// A node refused the request.
    #[error("node {address} refused: {message}")]
    Refused {
        /// The node.
        address: String,
        /// Its message.
        message: String,
    },
}

/// A connection to the nodes of one cluster.
pub struct ClusterClient {
    addresses: Vec<String>,
    timeout: Duration,
    connections: HashMap<String, Connection>,
    leaders: HashMap<GroupId, String>,
}

impl ClusterClient {
    /// A client of the nodes at `addresses`, giving each request `timeout` in all.
    pub fn new(addresses: Vec<String>, timeout: Duration) -> ClusterClient {
        ClusterClient {
            addresses,
            timeout,
            connections: HashMap::new(),
            leaders: HashMap::new(),
        }
    }

    async fn call(&mut self, address: &str, request: &Request) -> io::Result<Response> {
        let connection = match self.connections.remove(address) {
            Some(connection) => connection,
            None => Connection::connect(address, CONNECT_TIMEOUT).await?,
        };
        let mut connection = connection;
        let response = connection.call(request, self.timeout).await?;
        self.connections.insert(address.to_string(), connection);
        Ok(response)
    }

    fn timed_out(&self, last: String) -> ClientError {
        ClientError::TimedOut {
            addresses: self.addresses.join(","),
            timeout_ms: self.timeout.as_millis(),
            last,
        }
    }

    /// Creates `topic` with `partitions` partitions on every voter (nothing if it exists).
    pub async fn create_topic(
        &mut self,
        topic: &str,
        partitions: u32,
        retention: Retention,
    ) -> Result<(), ClientError> {
        let request = Request::CreateTopic {
            topic: topic.to_string(),
            partitions,
            retention,
        };
        self.through_leader(GroupId::Metadata, &request)
            .await
            .map(|_| ())
    }

    /// Every topic and its partition count, as the first node that answers knows them.
    pub async fn topics(&mut self) -> Result<BTreeMap<String, u32>, ClientError> {
        let mut last = String::new();
        for address in self.addresses.clone() {
            match self.call(&address, &Request::Topics).await {
                Ok(Response::Topics(topics)) => return Ok(topics),
                Ok(other) => last = format!("{other:?}"),
                Err(error) => last = error.to_string(),
            }
        }
        Err(self.timed_out(last))
    }

    /// Appends one batch to `topic`-`partition`; answers once it is committed.
    pub async fn produce(
        &mut self,
        topic: &str,
        partition: u32,
        batch: Bytes,
    ) -> Result<Appended, ClientError> {
        let group = GroupId::Partition {
            topic: topic.to_string(),
            partition,
        };
        let request = Request::Produce {
            topic: topic.to_string(),
            partition,
            batch,
        };
        match self.through_leader(group, &request).await? {
            Response::Produced(appended) => Ok(appended),
            other => Err(ClientError::Refused {
                address: String::new(),
                message: format!("{other:?}"),
            }),
        }
    }

    /// Sends `request` to `group`'s leader, found by asking and by following `NotLeader`
    /// answers, until it is answered or the time is up.
    async fn through_leader(
        &mut self,
        group: GroupId,
        request: &Request,
    ) -> Result<Response, ClientError> {
        let deadline = Instant::now() + self.timeout;
        let mut next = 0;
        let mut last = String::from("no node tried");
        while Instant::now() < deadline {
            let address = match self.leaders.get(&group) {
                Some(address) => address.clone(),
                None => {
                    next = (next + 1) % self.addresses.len().max(1);
                    match self.addresses.get(next) {
                        Some(address) => address.clone(),
                        None => break,
                    }
                }
            };
            match self.call(&address, request).await {
                Ok(Response::NotLeader {
                    address: Some(leader),
                    ..
                }) if leader != address => {
                    self.leaders.insert(group.clone(), leader);
                    continue;
                }
                Ok(Response::Error(message)) => {
                    return Err(ClientError::Refused { address, message });
                }
                Ok(response @ (Response::Produced(_) | Response::Done)) => {
                    self.leaders.insert(group.clone(), address);
                    return Ok(response);
                }
                Ok(other) => last = format!("{address}: {other:?}"),
                Err(error) => last = format!("{address}: {error}"),
            }
            self.leaders.remove(&group);
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        Err(self.timed_out(last))
    }

    /// Committed batches of `topic`-`partition` from `offset`, from the first node that has
    /// the partition (with one address: that node's own copy).
    pub async fn fetch(
        &mut self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u64,
    ) -> Result<Fetched, ClientError> {
        let request = Request::Fetch {
            topic: topic.to_string(),
            partition,
            offset,
            max_bytes,
        };
        let deadline = Instant::now() + self.timeout;
        let mut last = String::from("no node tried");
        while Instant::now() < deadline {
            for address in self.addresses.clone() {
                match self.call(&address, &request).await {
                    Ok(Response::Fetched(fetched)) => return Ok(fetched),
                    Ok(Response::Error(message)) => {
                        return Err(ClientError::Refused { address, message });
                    }
                    Ok(other) => last = format!("{address}: {other:?}"),
                    Err(error) => last = format!("{address}: {error}"),
                }
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        Err(self.timed_out(last))
    }

    /// Makes node `id` (running with `--join`, at `address`) a voter of every group: the
    /// metadata group first, so that it learns the topics, then each partition's.
    pub async fn add_node(&mut self, id: u64, address: &str) -> Result<(), ClientError> {
        for group in self.all_groups().await? {
            let request = Request::AddVoter {
                group: group.clone(),
                id,
                address: address.to_string(),
            };
            self.through_leader(group, &request).await?;
        }
        Ok(())
    }

    /// Removes node `id` from every group: the partitions' first, the metadata group last.
    pub async fn remove_node(&mut self, id: u64) -> Result<(), ClientError> {
        let mut groups = self.all_groups().await?;
        groups.reverse();
        for group in groups {
            let request = Request::RemoveVoter {
                group: group.clone(),
                id,
            };
            self.through_leader(group, &request).await?;
        }
        Ok(())
    }

    /// The groups the first answering node runs, the metadata group first.
    async fn all_groups(&mut self) -> Result<Vec<GroupId>, ClientError> {
        let mut last = String::new();
        for address in self.addresses.clone() {
            match self.call(&address, &Request::Groups).await {
                Ok(Response::Groups(groups)) => return Ok(groups),
                Ok(other) => last = format!("{other:?}"),
                Err(error) => last = error.to_string(),
            }
        }
        Err(self.timed_out(last))
    }

    /// Every reachable node's view of every partition (unreachable nodes are left out).
    pub async fn status(&mut self) -> Vec<PartitionStatus> {
        let mut statuses = Vec::new();
        for address in self.addresses.clone() {
            if let Ok(Response::Status(status)) = self.call(&address, &Request::Status).await {
                statuses.extend(status);
            }
        }
        statuses
    }
}
