//! [`Pending`]: the answer to one engine request, awaited from any executor or waited for on a
//! plain thread.
//!
//! The shard answers through a oneshot channel. If the shard dies before answering (its thread
//! panicked), the channel is dropped and the request resolves to `ShardFailed`: a caller never
//! hangs on a dead shard.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_channel::oneshot;

use crate::error::EngineUnavailable;

/// How long [`Pending::wait`] polls for the answer before it sleeps.
const ANSWER_SPIN: Duration = Duration::from_micros(50);

/// Threads of the process polling in [`Pending::wait`] at once, at most.
const SPINNING_WAITERS_MAX: usize = 1;

static SPINNING_WAITERS: AtomicUsize = AtomicUsize::new(0);

/// The reply end the shard holds.
pub(crate) type Reply<T, E> = oneshot::Sender<Result<T, E>>;

/// An engine request in flight. `.await` it, or call [`Pending::wait`] to block.
#[derive(Debug)]
#[must_use = "a request's outcome is only known by awaiting or waiting on it"]
pub struct Pending<T, E> {
    state: State<T, E>,
}

#[derive(Debug)]
enum State<T, E> {
    Ready(Option<Result<T, E>>),
    Waiting {
        receiver: oneshot::Receiver<Result<T, E>>,
        shard: usize,
    },
}

impl<T, E: From<EngineUnavailable>> Pending<T, E> {
    /// A request that failed before reaching a shard.
    pub(crate) fn ready(result: Result<T, E>) -> Pending<T, E> {
        Pending {
            state: State::Ready(Some(result)),
        }
    }

    pub(crate) fn waiting(receiver: oneshot::Receiver<Result<T, E>>, shard: usize) -> Self {
        Pending {
            state: State::Waiting { receiver, shard },
        }
    }

    /// Blocks the calling thread until the shard answers. One waiting thread at a time polls
    /// for [`ANSWER_SPIN`] first, so a quick answer to a lone caller costs no sleep and wake-up
    /// (tens of µs in a VM), while many waiters do not burn the cores the shards need.
    pub fn wait(mut self) -> Result<T, E> {
        if let Some(result) = self.spin_for_answer() {
            return result;
        }
        futures_executor::block_on(self)
    }

    fn spin_for_answer(&mut self) -> Option<Result<T, E>> {
        let State::Waiting { receiver, shard } = &mut self.state else {
            return None;
        };
        if SPINNING_WAITERS.fetch_add(1, Ordering::Relaxed) >= SPINNING_WAITERS_MAX {
            SPINNING_WAITERS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let started = Instant::now();
        let answer = loop {
            match receiver.try_recv() {
                Ok(Some(result)) => break Some(result),
                Ok(None) if started.elapsed() < ANSWER_SPIN => super::pause(started),
                Ok(None) => break None,
                Err(oneshot::Canceled) => {
                    break Some(Err(EngineUnavailable::ShardFailed { shard: *shard }.into()));
                }
            }
        };
        SPINNING_WAITERS.fetch_sub(1, Ordering::Relaxed);
        answer
    }
}

// `Pending` never pins its contents: the result is moved out by value and the receiver is a
// pointer, so it can move freely whatever `T` and `E` are.
impl<T, E> Unpin for Pending<T, E> {}

impl<T, E: From<EngineUnavailable>> Future for Pending<T, E> {
    type Output = Result<T, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            State::Ready(result) => match result.take() {
                Some(result) => Poll::Ready(result),
                None => Poll::Ready(Err(EngineUnavailable::Closed.into())),
            },
            State::Waiting { receiver, shard } => match Pin::new(receiver).poll(cx) {
                Poll::Ready(Ok(result)) => Poll::Ready(result),
                Poll::Ready(Err(oneshot::Canceled)) => {
                    Poll::Ready(Err(EngineUnavailable::ShardFailed { shard: *shard }.into()))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}
