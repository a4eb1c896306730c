//! [`AsyncConsumer`]: a [`Consumer`] on a thread of its own, for callers on an async executor.
//!
//! A consumer's `poll` waits (long polls, a rebalance, a commit's sync), and everything a group
//! does to a member happens inside it, so it cannot be split into futures without giving up
//! Kafka's single-threaded member model. Instead the consumer moves to a thread of its own, and
//! each call is sent to it and awaited: the executor's threads never wait. Calls run one at a
//! time, in the order they were made.

use std::future::Future;
use std::time::Duration;

use crossbeam_channel::{Sender, unbounded};

use super::consumer::{Consumer, PollOptions};
use super::error::{CloseError, CommitError, PollError};
use crate::engine::ConsumerRecord;
use crate::error::EngineUnavailable;
use crate::types::TopicPartition;

/// A call to run on the consumer's thread, with the consumer (`None` once closed).
type Call = Box<dyn FnOnce(&mut Option<Consumer>) + Send>;

/// A [`Consumer`] driven from async code: it lives on a thread of its own, and each call is sent
/// there and awaited, one at a time in the order made, so an executor's threads never wait for a
/// poll's long fetches, a rebalance or a commit's sync. Made with [`Consumer::into_async`]. Dropping it leaves the group (as dropping a `Consumer` does) on the
/// consumer's thread after the calls already made, without waiting for them.
#[derive(Debug)]
pub struct AsyncConsumer {
    /// The consumer's thread ends once this is dropped and the calls sent are run.
    calls: Option<Sender<Call>>,
}

impl Consumer {
    /// Moves the consumer to a thread of its own, driven by the returned handle's async calls.
    pub fn into_async(self) -> Result<AsyncConsumer, EngineUnavailable> {
        let (calls, receiver) = unbounded::<Call>();
        let mut consumer = Some(self);
        std::thread::Builder::new()
            .name("seglog-consumer".to_owned())
            .spawn(move || {
                for call in receiver {
                    call(&mut consumer);
                }
            })
            .map_err(|source| gone(source.to_string()))?;
        Ok(AsyncConsumer { calls: Some(calls) })
    }
}

impl AsyncConsumer {
    /// Runs `call` with the consumer on its thread and resolves to what it returns; any of the
    /// consumer's calls (`seek`, `pause`, `position`, `commit_sync_offsets`, ...) this way.
    pub fn run<R, F>(
        &self,
        call: F,
    ) -> impl Future<Output = Result<R, EngineUnavailable>> + Send + 'static + use<R, F>
    where
        R: Send + 'static,
        F: FnOnce(&mut Consumer) -> R + Send + 'static,
    {
        self.run_on_thread(move |consumer| match consumer.as_mut() {
            Some(consumer) => Ok(call(consumer)),
            None => Err(gone("the consumer is closed".into())),
        })
    }

    /// [`Consumer::poll`], on the consumer's thread.
    pub fn poll(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<ConsumerRecord>, PollError>> + Send + 'static + use<> {
        let run = self.run(move |consumer| consumer.poll(timeout));
        async move { run.await? }
    }

    /// [`Consumer::poll_with`], on the consumer's thread.
    pub fn poll_with(
        &self,
        options: PollOptions,
    ) -> impl Future<Output = Result<Vec<ConsumerRecord>, PollError>> + Send + 'static + use<> {
        let run = self.run(move |consumer| consumer.poll_with(options));
        async move { run.await? }
    }

    /// [`Consumer::commit_sync`], on the consumer's thread.
    pub fn commit(&self) -> impl Future<Output = Result<(), CommitError>> + Send + 'static + use<> {
        let run = self.run(Consumer::commit_sync);
        async move { run.await? }
    }

    /// [`Consumer::assignment`], asked on the consumer's thread.
    pub fn assignment(
        &self,
    ) -> impl Future<Output = Result<Vec<TopicPartition>, EngineUnavailable>> + Send + 'static + use<>
    {
        self.run(|consumer| consumer.assignment())
    }

    /// [`Consumer::close`] on the consumer's thread, which then ends. Calling it again does
    /// nothing.
    pub fn close(
        &mut self,
    ) -> impl Future<Output = Result<(), CloseError>> + Send + 'static + use<> {
        // Sent before the channel is dropped: the thread runs it, then ends.
        let closed = self.run_on_thread(|consumer| match consumer.take() {
            Some(consumer) => Ok(consumer.close()),
            None => Ok(Ok(())),
        });
        let was_open = self.calls.take().is_some();
        async move {
            match closed.await {
                Ok(outcome) => outcome,
                // Closed before: the thread is gone, and so is the consumer.
                Err(_) if !was_open => Ok(()),
                Err(error) => Err(error.into()),
            }
        }
    }

    fn run_on_thread<R, F>(
        &self,
        call: F,
    ) -> impl Future<Output = Result<R, EngineUnavailable>> + Send + 'static + use<R, F>
    where
        R: Send + 'static,
        F: FnOnce(&mut Option<Consumer>) -> Result<R, EngineUnavailable> + Send + 'static,
    {
        let (answer, receiver) = oneshot::channel();
        let sent = self.calls.as_ref().is_some_and(|calls| {
            calls
                .send(Box::new(move |consumer| {
                    let _ = answer.send(call(consumer));
                }))
                .is_ok()
        });
        async move {
            if !sent {
                return Err(gone("the consumer is closed".into()));
            }
            receiver
                .await
                .unwrap_or_else(|_| Err(gone("its thread ended without an answer".into())))
        }
    }
}

fn gone(cause: String) -> EngineUnavailable {
    EngineUnavailable::NoThread {
        call: "consumer",
        cause,
    }
}
