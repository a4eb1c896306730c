//! [`Pending`]: the answer to one engine request, awaited from any executor or waited for on a
//! plain thread.
//!
//! The shard answers through a oneshot channel (the `oneshot` crate: the answer is written, then
//! one atomic swap publishes it, which the waiting caller polls with plain loads; the caller frees
//! the channel). If the shard dies before answering (its thread panicked), the channel is dropped
//! and the request resolves to `ShardFailed`: a caller never hangs on a dead shard.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::error::EngineUnavailable;

/// How long [`Pending::wait`] polls for the answer before it sleeps.
const ANSWER_SPIN: Duration = Duration::from_micros(50);
/// The same for a durable append, whose answer waits for an `fdatasync`: sleeping through it
/// costs a wake-up on top (tens of µs in a VM, two per round trip with the shard's).
pub(crate) const DURABLE_ANSWER_SPIN: Duration = Duration::from_millis(1);
/// The same for a point lookup, whose answer may wait for a read from the device: past
/// [`ANSWER_SPIN`] the caller would sleep through most cold reads.
pub(crate) const LOOKUP_ANSWER_SPIN: Duration = Duration::from_micros(250);

/// Threads of the process polling in [`Pending::wait`] at once, at most.
const SPINNING_WAITERS_MAX: usize = 1;

static SPINNING_WAITERS: AtomicUsize = AtomicUsize::new(0);

/// Threads of the process in [`Pending::wait`] at once. A long spin is for a lone waiter: with
/// others waiting (many producers sharing group commit) the core it would burn is the shards'.
static WAITERS: AtomicUsize = AtomicUsize::new(0);

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
        /// How long [`Pending::wait`] polls before it sleeps.
        spin: Duration,
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
            state: State::Waiting {
                receiver,
                shard,
                spin: ANSWER_SPIN,
            },
        }
    }

    /// Polls for the answer this long in [`Pending::wait`] before sleeping.
    pub(crate) fn with_answer_spin(mut self, answer_spin: Duration) -> Self {
        if let State::Waiting { spin, .. } = &mut self.state {
            *spin = answer_spin;
        }
        self
    }

    /// Blocks the calling thread until the shard answers. One waiting thread at a time polls
    /// for the answer first — 50 µs, or up to 1 ms for a durable append when no other thread
    /// waits — so a quick answer to a lone caller costs no sleep and wake-up (tens of µs in a
    /// VM), while many waiters do not burn the cores the shards need.
    pub fn wait(mut self) -> Result<T, E> {
        let alone = WAITERS.fetch_add(1, Ordering::Relaxed) == 0;
        let result = match self.spin_for_answer(alone) {
            Some(result) => result,
            None => futures_executor::block_on(self),
        };
        WAITERS.fetch_sub(1, Ordering::Relaxed);
        result
    }

    fn spin_for_answer(&mut self, alone: bool) -> Option<Result<T, E>> {
        let State::Waiting {
            receiver,
            shard,
            spin,
        } = &mut self.state
        else {
            return None;
        };
        if SPINNING_WAITERS.fetch_add(1, Ordering::Relaxed) >= SPINNING_WAITERS_MAX {
            SPINNING_WAITERS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let spin = match alone {
            true => *spin,
            false => ANSWER_SPIN.min(*spin),
        };
        let started = Instant::now();
        let answer = loop {
            match receiver.try_recv() {
                Ok(result) => break Some(result),
                Err(oneshot::TryRecvError::Empty) if started.elapsed() < spin => {
                    crate::spin::pause(started);
                }
                Err(oneshot::TryRecvError::Empty) => break None,
                Err(oneshot::TryRecvError::Disconnected) => {
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
            State::Waiting {
                receiver, shard, ..
            } => match Pin::new(receiver).poll(cx) {
                Poll::Ready(Ok(result)) => Poll::Ready(result),
                Poll::Ready(Err(oneshot::RecvError)) => {
                    Poll::Ready(Err(EngineUnavailable::ShardFailed { shard: *shard }.into()))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestPending = Pending<u32, EngineUnavailable>;

    fn waiting(spin: Duration) -> (Reply<u32, EngineUnavailable>, TestPending) {
        let (reply, receiver) = oneshot::channel();
        (reply, Pending::waiting(receiver, 0).with_answer_spin(spin))
    }

    #[test]
    fn a_lone_waiter_polls_as_long_as_its_request_asks() {
        let (reply, mut pending) = waiting(Duration::from_secs(60));
        let answer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            reply.send(Ok(7)).unwrap();
        });
        // Far past `ANSWER_SPIN`, and still polling: the answer is taken without sleeping. (The
        // spinning slot is process-wide: while another test's waiter holds it, this one is
        // refused at once, and asks again.)
        let taken = loop {
            if let Some(taken) = pending.spin_for_answer(true) {
                break taken;
            }
            std::thread::yield_now();
        };
        assert_eq!(taken, Ok(7));
        answer.join().unwrap();
    }

    #[test]
    fn with_other_waiters_a_long_spin_is_cut_to_the_short_one() {
        let (reply, mut pending) = waiting(Duration::from_secs(60));
        let started = Instant::now();
        assert_eq!(
            pending.spin_for_answer(false),
            None,
            "gave up: it will sleep"
        );
        // Not the request's minute: the short spin (µs), with a wide margin for a loaded machine.
        assert!(started.elapsed() < Duration::from_secs(10));
        reply.send(Ok(7)).unwrap();
        assert_eq!(pending.wait(), Ok(7));
    }
}
