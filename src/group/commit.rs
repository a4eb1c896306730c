//! [`CommitHandle`]: an offset commit in flight, awaited from any executor or waited for on a
//! plain thread, like the engine's `Pending`.
//!
//! The coordinator learns a commit's outcome when its durable append completes. Whoever holds
//! the handle drives that: awaiting or waiting on it records the committed offsets. A handle
//! dropped before its commit completed is not lost: the commit is parked with the coordinator,
//! which finishes recording it the next time it is asked about offsets or members.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::engine::Pending;
use crate::error::AppendError;
use crate::log::AppendInfo;
use crate::types::TopicPartition;

use super::coordinator::Shared;
use super::error::CommitError;
use super::store::OffsetAndMetadata;

/// A commit whose append to the offsets topic was sent to its shard.
#[derive(Debug)]
pub(crate) struct InFlightCommit {
    pub(crate) pending: Pending<AppendInfo, AppendError>,
    pub(crate) group: String,
    /// The partition of the offsets topic appended to.
    pub(crate) offsets_partition: TopicPartition,
    /// What was committed, in record order (`None`: a tombstone).
    pub(crate) entries: Vec<(TopicPartition, Option<OffsetAndMetadata>)>,
}

impl InFlightCommit {
    /// Polls the append; on completion records the commit with the coordinator's offsets.
    pub(crate) fn poll_commit(
        &mut self,
        cx: &mut Context<'_>,
        shared: &Shared,
    ) -> Poll<Result<(), CommitError>> {
        match Pin::new(&mut self.pending).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(info)) => Poll::Ready(shared.record_commit(self, &info)),
            Poll::Ready(Err(source)) => {
                tracing::warn!(
                    "offset commit of group {} to {} failed: {source}",
                    self.group,
                    self.offsets_partition
                );
                Poll::Ready(Err(CommitError::Append {
                    partition: self.offsets_partition.clone(),
                    source,
                }))
            }
        }
    }
}

/// An offset commit in flight. `.await` it, or call [`CommitHandle::wait`] to block. Dropping it
/// does not cancel the commit.
#[derive(Debug)]
#[must_use = "a commit's outcome is only known by awaiting or waiting on it"]
pub struct CommitHandle {
    state: State,
}

#[derive(Debug)]
enum State {
    Ready(Option<Result<(), CommitError>>),
    InFlight {
        commit: Option<InFlightCommit>,
        shared: Arc<Shared>,
    },
}

impl CommitHandle {
    pub(crate) fn ready(result: Result<(), CommitError>) -> CommitHandle {
        CommitHandle {
            state: State::Ready(Some(result)),
        }
    }

    pub(crate) fn in_flight(commit: InFlightCommit, shared: Arc<Shared>) -> CommitHandle {
        CommitHandle {
            state: State::InFlight {
                commit: Some(commit),
                shared,
            },
        }
    }

    /// Blocks the calling thread until the commit is durable or failed.
    pub fn wait(self) -> Result<(), CommitError> {
        futures_executor::block_on(self)
    }

    /// The outcome if the commit has completed, without blocking.
    pub fn try_result(&mut self) -> Option<Result<(), CommitError>> {
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(self).poll(&mut cx) {
            Poll::Ready(result) => Some(result),
            Poll::Pending => None,
        }
    }
}

// `CommitHandle` never pins its contents (see `Pending`).
impl Unpin for CommitHandle {}

impl Future for CommitHandle {
    type Output = Result<(), CommitError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            State::Ready(result) => match result.take() {
                Some(result) => Poll::Ready(result),
                None => Poll::Ready(Ok(())),
            },
            State::InFlight { commit, shared } => {
                let Some(in_flight) = commit.as_mut() else {
                    return Poll::Ready(Ok(()));
                };
                let outcome = in_flight.poll_commit(cx, shared);
                if let Poll::Ready(result) = outcome {
                    *commit = None;
                    self.state = State::Ready(None);
                    return Poll::Ready(result);
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for CommitHandle {
    fn drop(&mut self) {
        if let State::InFlight { commit, shared } = &mut self.state
            && let Some(commit) = commit.take()
        {
            shared.park(commit);
        }
    }
}
