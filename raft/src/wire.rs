//! What nodes and clients send each other over TCP: length-delimited frames (a `u32` big-endian
//! length, then the body), each body one [`Request`] or [`Response`] in postcard's encoding. A
//! connection carries requests one after another; each is answered, in order, before the next is
//! read.

use std::collections::BTreeMap;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::TypeConfig;
use crate::entry_codec::Appended;

/// The largest frame accepted: a batch of entries up to the read cap, with room to spare.
pub const FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;

/// A Raft group: the cluster's metadata, or one partition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GroupId {
    /// The group that orders topic creation (its log: the node's `__seglog_metadata` topic).
    Metadata,
    /// One partition's group.
    Partition {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
    },
}

/// A request to a node.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// A Raft message from a peer to one of its groups.
    AppendEntries(GroupId, AppendEntriesRequest<TypeConfig>),
    /// A Raft vote request.
    Vote(GroupId, VoteRequest<u64>),
    /// A chunk of a snapshot.
    InstallSnapshot(GroupId, InstallSnapshotRequest<TypeConfig>),
    /// Create a topic replicated on every voter (nothing if it exists).
    CreateTopic {
        /// The topic's name.
        topic: String,
        /// Its partition count.
        partitions: u32,
        /// How long and how much it keeps.
        retention: Retention,
    },
    /// Every topic and its partition count.
    Topics,
    /// Append one batch to a partition through its leader; answered once committed.
    Produce {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// One RecordBatch.
        batch: Bytes,
    },
    /// Committed batches of a partition from `offset`, as this node holds them.
    Fetch {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The first offset wanted.
        offset: u64,
        /// About how many bytes to return (at least one batch).
        max_bytes: u64,
    },
    /// This node's view of every partition.
    Status,
    /// Every group this node runs.
    Groups,
    /// Make node `id` (at `address`) a voter of `group`: a learner first, caught up, then a voter.
    AddVoter {
        /// The group.
        group: GroupId,
        /// The node's id.
        id: u64,
        /// Its address.
        address: String,
    },
    /// Remove node `id` from `group`.
    RemoveVoter {
        /// The group.
        group: GroupId,
        /// The node's id.
        id: u64,
    },
}

/// A node's answer.
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    /// To [`Request::AppendEntries`].
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    /// To [`Request::Vote`].
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    /// To [`Request::InstallSnapshot`].
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// The request named a group this node does not run (yet).
    UnknownGroup(GroupId),
    /// Done (a topic created).
    Done,
    /// To [`Request::Topics`].
    Topics(BTreeMap<String, u32>),
    /// To [`Request::Produce`]: the batch's offsets, committed.
    Produced(Appended),
    /// This node does not lead the group; the leader it knows of, and its address.
    NotLeader {
        /// The leader's id, if one is known.
        leader: Option<u64>,
        /// The leader's address, if known.
        address: Option<String>,
    },
    /// To [`Request::Fetch`].
    Fetched(Fetched),
    /// To [`Request::Status`].
    Status(Vec<PartitionStatus>),
    /// To [`Request::Groups`].
    Groups(Vec<GroupId>),
    /// The node cannot serve the group now (it is stopping, or its replica failed): ask
    /// another.
    Unavailable(String),
    /// The request failed.
    Error(String),
}

/// A replicated topic's retention, carried out through Raft (each node purges its copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// Kafka's `retention.ms` (-1: no limit).
    pub ms: i64,
    /// Kafka's `retention.bytes`, per partition (-1: no limit).
    pub bytes: i64,
}

impl Default for Retention {
    fn default() -> Retention {
        Retention { ms: -1, bytes: -1 }
    }
}

/// Committed batches of a partition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fetched {
    /// Whole batches, control batches included.
    pub records: Bytes,
    /// The first offset the node holds.
    pub log_start_offset: u64,
    /// The offset after the last committed entry the node applied.
    pub high_watermark: u64,
}

/// One partition as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionStatus {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The node answering.
    pub node: u64,
    /// The leader it knows of.
    pub leader: Option<u64>,
    /// Its current term.
    pub term: u64,
    /// The last committed entry's index it knows of.
    pub commit_index: Option<u64>,
    /// Its log end offset.
    pub end_offset: u64,
}

/// A connection that sends frames of `Out` and reads frames of `In`.
pub struct Connection {
    framed: Framed<TcpStream, LengthDelimitedCodec>,
}

impl Connection {
    /// Connects to `address` within `timeout`.
    pub async fn connect(address: &str, timeout: Duration) -> io::Result<Connection> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(address))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        Ok(Connection::new(stream))
    }

    /// A connection over an accepted or connected stream.
    pub fn new(stream: TcpStream) -> Connection {
        let _ = stream.set_nodelay(true);
        let codec = LengthDelimitedCodec::builder()
            .max_frame_length(FRAME_BYTES_MAX)
            .new_codec();
        Connection {
            framed: Framed::new(stream, codec),
        }
    }

    /// Sends one message.
    pub async fn send<T: Serialize>(&mut self, message: &T) -> io::Result<()> {
        let body = postcard::to_stdvec(message).map_err(io::Error::other)?;
        self.framed.send(Bytes::from(body)).await
    }

    /// Reads one message; `None` at a clean end of the stream.
    pub async fn receive<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        match self.framed.next().await {
            None => Ok(None),
            Some(frame) => {
                let frame = frame?;
                let message = postcard::from_bytes(&frame)
                    .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
                Ok(Some(message))
            }
        }
    }

    /// Sends `request` and reads its answer within `timeout`.
    pub async fn call(&mut self, request: &Request, timeout: Duration) -> io::Result<Response> {
        let exchange = async {
            self.send(request).await?;
            self.receive::<Response>().await?.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the node closed the connection",
                )
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer in time"))?
    }
}
