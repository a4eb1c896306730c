//! The sender thread (Kafka's `Sender`): takes ready batches from the accumulator, compresses
//! them, hands them to the engine, and answers their records when the engine answers.
//!
//! One thread per producer, with no executor: it polls the engine's [`Pending`] answers with a
//! waker that wakes the thread itself, so it sleeps until an answer comes, a batch is ready, a
//! `linger.ms` or `retry.backoff.ms` deadline passes, or `send`, `flush` or `close` calls.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use bytes::Bytes;

use super::accumulator::{Accumulator, ClosedBatch, DrainRule};
use super::client::Shared;
use super::error::ProducerError;
use super::result::{BatchAppended, BatchResult};
use crate::engine::{Durability, Pending};
use crate::error::{AppendError, EngineUnavailable};
use crate::log::AppendInfo;
use crate::types::{PartitionId, TopicName};

/// Runs the sender loop until the producer is closed and every batch is answered.
pub(crate) fn run(shared: Arc<Shared>) {
    let waker = Waker::from(Arc::new(SenderWaker(shared.clone())));
    let mut sender = Sender {
        shared,
        waker,
        inflight: Vec::new(),
        finished: Vec::new(),
        retries: BTreeMap::new(),
        retry_at: None,
    };
    while sender.turn() {}
}

/// Wakes the sender thread when an engine answer arrives.
struct SenderWaker(Arc<Shared>);

impl Wake for SenderWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.0.lock_state();
        self.0.wake_sender(&mut state);
    }
}

/// A batch encoded for the engine.
#[derive(Debug)]
struct SentBatch {
    topic: TopicName,
    partition: PartitionId,
    id: u64,
    result: Arc<BatchResult>,
    opened_at: Instant,
    reserved_bytes: usize,
    bytes: Bytes,
}

#[derive(Debug)]
struct InflightAppend {
    pending: Pending<AppendInfo, AppendError>,
    batch: SentBatch,
}

struct Sender {
    shared: Arc<Shared>,
    waker: Waker,
    inflight: Vec<InflightAppend>,
    /// Answered appends whose records are not answered yet.
    finished: Vec<(SentBatch, Result<BatchAppended, ProducerError>)>,
    /// Batches refused for backpressure, per partition in send order, and the partition's later
    /// batches held back behind them.
    retries: BTreeMap<(TopicName, PartitionId), VecDeque<SentBatch>>,
    retry_at: Option<Instant>,
}

impl Sender {
    /// One turn: answer what the engine answered, take ready batches, submit them, then sleep
    /// until there is work. False once closed with nothing left.
    fn turn(&mut self) -> bool {
        self.collect_answers();
        let (batches, next_deadline) = {
            let answered = self.answer_records();
            let mut state = self.shared.lock_state();
            self.release(&mut state.accumulator, &answered);
            if state.closing && state.accumulator.is_drained() && self.is_idle() {
                return false;
            }
            let rule = DrainRule {
                now: Instant::now(),
                linger: self.shared.config.linger(),
                everything: state.closing
                    || state.flushes_in_progress > 0
                    || state.memory_waiters > 0,
                batch_count_max: self
                    .shared
                    .config
                    .appends_inflight_max
                    .saturating_sub(self.inflight.len()),
            };
            let drained = state.accumulator.drain(rule);
            (drained.batches, drained.next_deadline)
        };
        self.submit_retries();
        for batch in batches {
            self.submit(batch);
        }
        if self.finished.is_empty() {
            let deadline = match (next_deadline, self.retry_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let state = self.shared.lock_state();
            let mut state = self.shared.wait_for_work(state, deadline);
            state.sender_woken = false;
        }
        true
    }

    fn is_idle(&self) -> bool {
        self.inflight.is_empty() && self.finished.is_empty() && self.retries.is_empty()
    }

    /// Moves every append the engine answered from `inflight` to `finished`.
    fn collect_answers(&mut self) {
        let mut cx = Context::from_waker(&self.waker);
        let mut index = 0;
        while index < self.inflight.len() {
            let append = &mut self.inflight[index];
            let Poll::Ready(outcome) = Pin::new(&mut append.pending).poll(&mut cx) else {
                index += 1;
                continue;
            };
            let append = self.inflight.swap_remove(index);
            let outcome = self.outcome(&append.batch, outcome);
            self.finished.push((append.batch, outcome));
        }
    }

    fn outcome(
        &self,
        batch: &SentBatch,
        outcome: Result<AppendInfo, AppendError>,
    ) -> Result<BatchAppended, ProducerError> {
        match outcome {
            Ok(info) => {
                debug_assert!(info.durable || self.shared.config.acks == Durability::Written);
                Ok(BatchAppended {
                    base_offset: info.first_offset,
                    log_append_time: info.log_append_time,
                })
            }
            Err(error) => Err(ProducerError::Append {
                topic: batch.topic.to_string(),
                partition: batch.partition,
                source: Arc::new(error),
            }),
        }
    }

    /// Answers the records of every finished batch, outside the producer's lock (a waker may
    /// run a task that sends). Returns what to release.
    fn answer_records(&mut self) -> Vec<(u64, usize)> {
        self.finished
            .drain(..)
            .map(|(batch, outcome)| {
                batch.result.complete(outcome);
                (batch.id, batch.reserved_bytes)
            })
            .collect()
    }

    fn release(&self, accumulator: &mut Accumulator, answered: &[(u64, usize)]) {
        if answered.is_empty() {
            return;
        }
        for &(id, reserved_bytes) in answered {
            accumulator.release(id, reserved_bytes);
        }
        self.shared.notify_released();
    }

    /// Encodes a drained batch and submits it, unless its partition has batches waiting to be
    /// retried: then it waits behind them, to keep the partition's order.
    fn submit(&mut self, batch: ClosedBatch) {
        let (sent, encoded) = self.encode(batch);
        if let Err(error) = encoded {
            self.finished.push((sent, Err(error)));
            return;
        }
        let key = (sent.topic.clone(), sent.partition);
        if let Some(waiting) = self.retries.get_mut(&key) {
            waiting.push_back(sent);
            return;
        }
        if let Err(refused) = self.append(sent) {
            self.retries.entry(key).or_default().push_back(refused);
            self.schedule_retry();
        }
    }

    /// Builds the batch's bytes with the configured codec.
    fn encode(&self, batch: ClosedBatch) -> (SentBatch, Result<(), ProducerError>) {
        let ClosedBatch {
            topic,
            partition,
            id,
            builder,
            result,
            opened_at,
            reserved_bytes,
        } = batch;
        let codec = self.shared.config.compression;
        let (bytes, encoded) = match builder.build_compressed(codec) {
            Ok(Some(bytes)) => (bytes, Ok(())),
            Ok(None) => unreachable!("a queued batch holds at least one record"),
            Err(error) => {
                let error = ProducerError::Compression {
                    topic: topic.to_string(),
                    partition,
                    codec,
                    source: Arc::new(error),
                };
                (Bytes::new(), Err(error))
            }
        };
        let sent = SentBatch {
            topic,
            partition,
            id,
            result,
            opened_at,
            reserved_bytes,
            bytes,
        };
        (sent, encoded)
    }

    /// Hands the batch to the engine. Gives it back if the engine refused it for backpressure
    /// and `delivery.timeout.ms` has not passed: the caller retries it later.
    fn append(&mut self, batch: SentBatch) -> Result<(), SentBatch> {
        let config = &self.shared.config;
        let mut pending = self.shared.engine.append(
            &batch.topic,
            batch.partition,
            batch.bytes.clone(),
            config.acks,
        );
        let mut cx = Context::from_waker(&self.waker);
        match Pin::new(&mut pending).poll(&mut cx) {
            Poll::Pending => self.inflight.push(InflightAppend { pending, batch }),
            Poll::Ready(Err(error))
                if is_backpressure(&error)
                    && batch.opened_at.elapsed() < config.delivery_timeout() =>
            {
                return Err(batch);
            }
            Poll::Ready(outcome) => {
                let outcome = self.outcome(&batch, outcome);
                self.finished.push((batch, outcome));
            }
        }
        Ok(())
    }

    /// Resubmits refused batches, in order per partition, once `retry.backoff.ms` has passed.
    fn submit_retries(&mut self) {
        if self.retry_at.is_none_or(|at| Instant::now() < at) {
            return;
        }
        self.retry_at = None;
        let keys: Vec<(TopicName, PartitionId)> = self.retries.keys().cloned().collect();
        for key in keys {
            let Some(mut waiting) = self.retries.remove(&key) else {
                continue;
            };
            while let Some(batch) = waiting.pop_front() {
                if let Err(refused) = self.append(batch) {
                    waiting.push_front(refused);
                    break;
                }
            }
            if !waiting.is_empty() {
                self.retries.insert(key, waiting);
            }
        }
        if !self.retries.is_empty() {
            self.schedule_retry();
        }
    }

    fn schedule_retry(&mut self) {
        if self.retry_at.is_none() {
            self.retry_at = Some(Instant::now() + self.shared.config.retry_backoff());
        }
    }
}

/// Refusals that come before the append reaches a shard and clear by themselves.
fn is_backpressure(error: &AppendError) -> bool {
    matches!(
        error,
        AppendError::Unavailable(
            EngineUnavailable::QueueFull { .. } | EngineUnavailable::TooManyBytesInFlight { .. }
        )
    )
}

impl Drop for Sender {
    /// However the thread ends (a panic included), no record is left unanswered and no `flush`
    /// or blocked `send` waits forever: what was not answered fails with `SenderStopped`.
    fn drop(&mut self) {
        let queued = {
            let mut state = self.shared.lock_state();
            state.sender_stopped = true;
            state.accumulator.drain_all()
        };
        let mut abandoned: Vec<(u64, usize)> = Vec::new();
        let mut fail = |result: &BatchResult, id, reserved_bytes| {
            result.complete(Err(ProducerError::SenderStopped));
            abandoned.push((id, reserved_bytes));
        };
        for batch in queued {
            fail(&batch.result, batch.id, batch.reserved_bytes);
        }
        let inflight = self.inflight.drain(..).map(|append| append.batch);
        let waiting = std::mem::take(&mut self.retries).into_values().flatten();
        for batch in inflight.chain(waiting) {
            fail(&batch.result, batch.id, batch.reserved_bytes);
        }
        let mut answered = self.answer_records();
        answered.append(&mut abandoned);
        let mut state = self.shared.lock_state();
        self.release(&mut state.accumulator, &answered);
    }
}
