//! How a sleeping shard is woken: one `eventfd` per shard, signalled by whoever gives it work
//! (a request, a sync thread's report) and by the kernel when a completion of the shard's ring
//! waits for it (`Storage::attach_waker`). The shard sleeps in `poll(2)` on it.
//!
//! A sender signals only while the shard says it is asleep: the shard sets `asleep`, then looks
//! at its queues once more before it polls; a sender puts its work in the queue, then reads
//! `asleep`. With a full fence on each side, either the shard sees the work or the sender sees
//! the flag (the store-load pattern of Dekker's algorithm).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::time::Duration;

use super::inline::InlineShard;
use crossbeam_channel::{SendError, Sender, TrySendError};
use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};

use super::Request;

#[derive(Debug)]
pub(crate) struct ShardWaker {
    eventfd: OwnedFd,
    asleep: AtomicBool,
}

impl ShardWaker {
    pub(crate) fn new() -> io::Result<ShardWaker> {
        let eventfd = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(ShardWaker {
            eventfd,
            asleep: AtomicBool::new(false),
        })
    }

    pub(crate) fn eventfd(&self) -> BorrowedFd<'_> {
        self.eventfd.as_fd()
    }

    /// Wakes the shard if it sleeps. Called after the work was put where the shard looks.
    pub(crate) fn wake(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) && self.asleep.swap(false, Ordering::AcqRel) {
            self.signal();
        }
    }

    fn signal(&self) {
        // EAGAIN only when the counter is near its maximum: the shard is being woken anyway.
        let _ = rustix::io::write(&self.eventfd, &1u64.to_ne_bytes());
    }

    /// Sleeps until woken or `timeout` (`None`: no limit) passes, unless `idle` says, once the
    /// shard is marked asleep, that work came meanwhile.
    pub(crate) fn sleep(&self, timeout: Option<Duration>, idle: impl FnOnce() -> bool) {
        self.asleep.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if idle() {
            let timeout = timeout.map(|timeout| Timespec {
                tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
                tv_nsec: i64::from(timeout.subsec_nanos()),
            });
            let mut fds = [PollFd::new(&self.eventfd, PollFlags::IN)];
            // EINTR: the caller looks at its queues and sleeps again.
            let _ = rustix::event::poll(&mut fds, timeout.as_ref());
        }
        self.asleep.store(false, Ordering::Relaxed);
        let mut count = [0u8; 8];
        // Reset the counter; EAGAIN when nothing signalled.
        let _ = rustix::io::read(&self.eventfd, &mut count);
    }
}

/// A shard's queue, as the engine and the cleaner hold it: sending wakes the shard, and dropping
/// the last one wakes it to see the queue disconnected.
#[derive(Debug)]
pub(crate) struct ShardSender {
    sender: Option<Sender<Request>>,
    waker: Arc<ShardWaker>,
    /// An inline engine's shard, driven by the sender after each request (`inline.rs`).
    inline: Option<Arc<InlineShard>>,
}

impl ShardSender {
    pub(crate) fn new(sender: Sender<Request>, waker: Arc<ShardWaker>) -> ShardSender {
        ShardSender {
            sender: Some(sender),
            waker,
            inline: None,
        }
    }

    /// The sender of an inline engine's shard: each request is run before the send returns.
    pub(crate) fn inline(
        sender: Sender<Request>,
        waker: Arc<ShardWaker>,
        shard: Arc<InlineShard>,
    ) -> ShardSender {
        ShardSender {
            sender: Some(sender),
            waker,
            inline: Some(shard),
        }
    }

    pub(crate) fn try_send(&self, request: Request) -> Result<(), TrySendError<Request>> {
        let Some(sender) = self.sender.as_ref() else {
            return Err(TrySendError::Disconnected(request));
        };
        sender.try_send(request)?;
        self.run_or_wake();
        Ok(())
    }

    pub(crate) fn send(&self, request: Request) -> Result<(), SendError<Request>> {
        let Some(sender) = self.sender.as_ref() else {
            return Err(SendError(request));
        };
        sender.send(request)?;
        self.run_or_wake();
        Ok(())
    }

    fn run_or_wake(&self) {
        match &self.inline {
            Some(shard) => shard.drive(),
            None => self.waker.wake(),
        }
    }
}

impl Clone for ShardSender {
    fn clone(&self) -> ShardSender {
        ShardSender {
            sender: self.sender.clone(),
            waker: Arc::clone(&self.waker),
            inline: self.inline.clone(),
        }
    }
}

impl Drop for ShardSender {
    /// Signals whether or not the shard sleeps: its last look at the queue may have come just
    /// before the disconnection, and an empty disconnected queue looks idle.
    fn drop(&mut self) {
        drop(self.sender.take());
        self.waker.signal();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_sleep_ends_at_its_timeout_or_when_woken_while_asleep() {
        let waker = Arc::new(ShardWaker::new().unwrap());
        let started = Instant::now();
        waker.sleep(Some(Duration::from_millis(20)), || true);
        assert!(started.elapsed() >= Duration::from_millis(20));
        // Work that comes after the flag is set is seen by the check or wakes the poll.
        let other = Arc::clone(&waker);
        let sleeper = std::thread::spawn(move || {
            other.sleep(None, || true);
        });
        while !waker.asleep.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        waker.wake();
        sleeper.join().unwrap();
    }

    #[test]
    fn the_shard_does_not_sleep_when_work_came_after_it_looked() {
        let waker = ShardWaker::new().unwrap();
        let started = Instant::now();
        waker.sleep(Some(Duration::from_secs(5)), || false);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
