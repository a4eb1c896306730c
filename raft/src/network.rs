//! openraft's network for one group: a connection per peer, opened on first use and again after
//! any error; each RPC is one request frame and one answer frame (`wire.rs`). A peer that cannot
//! be reached, or does not run the group yet, is `Unreachable`: openraft backs off and retries.

use std::io;
use std::time::Duration;

use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use crate::TypeConfig;
use crate::wire::{Connection, GroupId, Request, Response};

/// How long a connection attempt to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

type RpcError<E = openraft::error::Infallible> = RPCError<u64, BasicNode, RaftError<u64, E>>;

/// Makes the links of one group to its peers.
#[derive(Clone, Debug)]
pub struct Network {
    group: GroupId,
}

impl Network {
    /// The network of `group`.
    pub fn new(group: GroupId) -> Network {
        Network { group }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerLink;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerLink {
        PeerLink {
            group: self.group.clone(),
            target,
            address: node.addr.clone(),
            connection: None,
        }
    }
}

/// One group's link to one peer.
pub struct PeerLink {
    group: GroupId,
    target: u64,
    address: String,
    connection: Option<Connection>,
}

/// Why an RPC got no answer of its kind.
enum CallError {
    Unreachable(io::Error),
    Unexpected(String),
}

impl PeerLink {
    async fn call(&mut self, request: Request, timeout: Duration) -> Result<Response, CallError> {
        if self.connection.is_none() {
            let connection = Connection::connect(&self.address, CONNECT_TIMEOUT)
                .await
                .map_err(CallError::Unreachable)?;
            self.connection = Some(connection);
        }
        let Some(connection) = self.connection.as_mut() else {
            return Err(CallError::Unexpected("no connection".into()));
        };
        match connection.call(&request, timeout).await {
            Ok(Response::UnknownGroup(group)) => Err(CallError::Unreachable(io::Error::other(
                format!("node {} does not run group {group:?} yet", self.target),
            ))),
            Ok(response) => Ok(response),
            Err(error) => {
                // The stream may hold half a frame: start over on a new connection.
                self.connection = None;
                Err(CallError::Unreachable(error))
            }
        }
    }

    fn failed<E: std::error::Error>(&self, error: CallError) -> RpcError<E> {
        match error {
            CallError::Unreachable(error) => RPCError::Unreachable(Unreachable::new(&error)),
            CallError::Unexpected(what) => {
                RPCError::Network(NetworkError::new(&io::Error::other(what)))
            }
        }
    }

    fn unexpected<E: std::error::Error>(&mut self, response: &Response) -> RpcError<E> {
        self.connection = None;
        let what = format!("node {} answered {response:?}", self.target);
        RPCError::Network(NetworkError::new(&io::Error::other(what)))
    }
}

impl RaftNetwork<TypeConfig> for PeerLink {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RpcError> {
        let request = Request::AppendEntries(self.group.clone(), rpc);
        match self.call(request, option.hard_ttl()).await {
            Ok(Response::AppendEntries(Ok(response))) => Ok(response),
            Ok(Response::AppendEntries(Err(error))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, error)))
            }
            Ok(other) => Err(self.unexpected(&other)),
            Err(error) => Err(self.failed(error)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RpcError<InstallSnapshotError>> {
        let request = Request::InstallSnapshot(self.group.clone(), rpc);
        match self.call(request, option.hard_ttl()).await {
            Ok(Response::InstallSnapshot(Ok(response))) => Ok(response),
            Ok(Response::InstallSnapshot(Err(error))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, error)))
            }
            Ok(other) => Err(self.unexpected(&other)),
            Err(error) => Err(self.failed(error)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RpcError> {
        let request = Request::Vote(self.group.clone(), rpc);
        match self.call(request, option.hard_ttl()).await {
            Ok(Response::Vote(Ok(response))) => Ok(response),
            Ok(Response::Vote(Err(error))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, error)))
            }
            Ok(other) => Err(self.unexpected(&other)),
            Err(error) => Err(self.failed(error)),
        }
    }
}
