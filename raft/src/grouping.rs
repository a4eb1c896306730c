//! A partition leader's produce queue: the batches producers send while the leader's previous
//! entry is being written and synced become one entry (a group, `entry_codec::group`).
//!
//! openraft 0.9 appends one client write at a time and waits for its flush before it takes the
//! next, so one batch per entry would cost one `fdatasync` per batch. The queue holds batches
//! until the log store has no append in flight and the entry it submitted last has begun its
//! append (or has been answered); then everything waiting, up to [`ENTRY_BYTES_MAX`], is
//! submitted as one entry. A lone batch is submitted as itself.

use std::time::Duration;

use bytes::Bytes;
use openraft::Raft;
use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot, watch};

use crate::TypeConfig;
use crate::entry_codec::{self, Batches};
use crate::wire::Response;

/// Bytes of batches one entry holds at most (a batch larger than this is an entry alone).
pub const ENTRY_BYTES_MAX: usize = 1024 * 1024;
/// The longest the queue waits for the log store before it submits anyway.
const WAIT_FOR_LOG_MAX: Duration = Duration::from_millis(20);

/// The appends of a replica's log store: how many began, how many were reported flushed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AppendProgress {
    /// Append calls handed to the flush task.
    pub started: u64,
    /// Append calls reported flushed (or failed).
    pub flushed: u64,
}

/// A batch waiting for its entry, and where its answer goes.
struct Waiting {
    batch: Bytes,
    reply: oneshot::Sender<Response>,
}

/// One partition leader's produce queue; clones share it.
#[derive(Clone)]
pub struct ProduceQueue {
    sender: mpsc::UnboundedSender<Waiting>,
}

impl ProduceQueue {
    /// Starts the queue of `raft`, whose log store reports its appends on `progress`.
    pub fn start(raft: Raft<TypeConfig>, progress: watch::Receiver<AppendProgress>) -> Self {
        let (sender, waiting) = mpsc::unbounded_channel();
        tokio::spawn(form_entries(raft, progress, waiting));
        ProduceQueue { sender }
    }

    /// Commits `batch` (one checked data batch) in the next entry: its offsets, or why not.
    pub async fn produce(&self, batch: Bytes) -> Response {
        let (reply, answer) = oneshot::channel();
        if self.sender.send(Waiting { batch, reply }).is_err() {
            return Response::Unavailable("the produce queue stopped".into());
        }
        answer
            .await
            .unwrap_or_else(|_| Response::Unavailable("the produce queue stopped".into()))
    }
}

async fn form_entries(
    raft: Raft<TypeConfig>,
    mut progress: watch::Receiver<AppendProgress>,
    mut waiting: mpsc::UnboundedReceiver<Waiting>,
) {
    let (answered_sender, mut answered) = watch::channel(0u64);
    let mut submitted = 0u64;
    // `started` when the last entry was submitted.
    let mut submitted_at: Option<u64> = None;
    let mut carried: Option<Waiting> = None;
    loop {
        let first = match carried.take() {
            Some(first) => first,
            None => match waiting.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        if let Some(at) = submitted_at {
            let log_ready = |p: &AppendProgress| p.started > at && p.started == p.flushed;
            let wait = async {
                tokio::select! {
                    _ = progress.wait_for(log_ready) => {}
                    _ = answered.wait_for(|count| *count >= submitted) => {}
                }
            };
            let _ = tokio::time::timeout(WAIT_FOR_LOG_MAX, wait).await;
        }
        let mut entry = vec![first];
        let mut bytes = entry[0].batch.len();
        while let Ok(next) = waiting.try_recv() {
            if bytes + next.batch.len() > ENTRY_BYTES_MAX {
                carried = Some(next);
                break;
            }
            bytes += next.batch.len();
            entry.push(next);
        }
        submitted_at = Some(progress.borrow().started);
        submitted += 1;
        let answered_sender = answered_sender.clone();
        let raft = raft.clone();
        tokio::spawn(async move {
            write_entry(&raft, entry).await;
            answered_sender.send_modify(|count| *count += 1);
        });
    }
}

/// Commits `entry`'s batches as one entry and answers each with its offsets.
async fn write_entry(raft: &Raft<TypeConfig>, entry: Vec<Waiting>) {
    let batches: Vec<Bytes> = entry.iter().map(|w| w.batch.clone()).collect();
    let outcome = write(raft, Batches(entry_codec::group(&batches))).await;
    match outcome {
        Ok(offsets) if offsets.len() == entry.len() => {
            for (waiting, appended) in entry.into_iter().zip(offsets) {
                let _ = waiting.reply.send(Response::Produced(appended));
            }
        }
        Ok(offsets) => {
            let why = format!("{} batches answered {} offsets", entry.len(), offsets.len());
            for waiting in entry {
                let _ = waiting.reply.send(Response::Error(why.clone()));
            }
        }
        Err(refused) => {
            for waiting in entry {
                let _ = waiting.reply.send(refused.clone().into());
            }
        }
    }
}

/// Why a write was not committed here.
#[derive(Clone, Debug)]
pub(crate) enum Refused {
    /// This node does not lead the group: the leader it knows of, and its address.
    NotLeader(Option<u64>, Option<String>),
    /// The group cannot take writes now.
    Unavailable(String),
    /// The write failed.
    Failed(String),
}

impl From<Refused> for Response {
    fn from(refused: Refused) -> Response {
        match refused {
            Refused::NotLeader(leader, address) => Response::NotLeader { leader, address },
            Refused::Unavailable(why) => Response::Unavailable(why),
            Refused::Failed(why) => Response::Error(why),
        }
    }
}

/// Commits `payload` through `raft`'s leader (this node): each data batch's offsets, or why
/// not.
pub(crate) async fn write(
    raft: &Raft<TypeConfig>,
    payload: Batches,
) -> Result<Vec<entry_codec::Appended>, Refused> {
    match raft.client_write(payload).await {
        Ok(written) => Ok(written.data),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => Err(
            Refused::NotLeader(forward.leader_id, forward.leader_node.map(|node| node.addr)),
        ),
        Err(RaftError::Fatal(fatal)) => Err(Refused::Unavailable(fatal.to_string())),
        Err(error) => Err(Refused::Failed(error.to_string())),
    }
}
