//! The answer to a send: one shared [`BatchResult`] per batch, and per record a [`SendFuture`]
//! that holds the batch's result and the record's place in it (Kafka's `ProduceRequestResult`
//! and `FutureRecordMetadata`). A record costs no allocation of its own to be answered.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use super::error::ProducerError;
use crate::types::{Offset, PartitionId, TimestampMs};

/// Where a sent record was stored (Kafka's `RecordMetadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The partition the record went to.
    pub partition: PartitionId,
    /// The offset the record got in that partition.
    pub offset: Offset,
    /// The record's own timestamp (`CreateTime`), or the time the log stamped on its batch when
    /// the topic uses `message.timestamp.type=LogAppendTime`.
    pub timestamp: TimestampMs,
}

/// What the engine answered for a whole batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchAppended {
    pub(crate) base_offset: Offset,
    pub(crate) log_append_time: Option<TimestampMs>,
}

/// The outcome of one batch, shared by the futures of its records. Set once.
#[derive(Debug, Default)]
pub(crate) struct BatchResult {
    state: Mutex<BatchState>,
    completed: Condvar,
}

#[derive(Debug, Default)]
struct BatchState {
    outcome: Option<Result<BatchAppended, ProducerError>>,
    /// Tasks awaiting one of the batch's records; one entry per distinct waker.
    wakers: Vec<Waker>,
}

impl BatchResult {
    /// Sets the outcome (the first one wins) and wakes every waiter.
    pub(crate) fn complete(&self, outcome: Result<BatchAppended, ProducerError>) {
        let wakers = {
            let mut state = self.lock();
            if state.outcome.is_some() {
                return;
            }
            state.outcome = Some(outcome);
            std::mem::take(&mut state.wakers)
        };
        self.completed.notify_all();
        // Woken outside the lock: a waker may poll the future on this thread.
        wakers.into_iter().for_each(Waker::wake);
    }

    pub(crate) fn is_complete(&self) -> bool {
        self.lock().outcome.is_some()
    }

    fn wait(&self) -> Result<BatchAppended, ProducerError> {
        let mut state = self.lock();
        loop {
            if let Some(outcome) = &state.outcome {
                return outcome.clone();
            }
            state = self
                .completed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn poll(&self, cx: &Context<'_>) -> Poll<Result<BatchAppended, ProducerError>> {
        let mut state = self.lock();
        if let Some(outcome) = &state.outcome {
            return Poll::Ready(outcome.clone());
        }
        if !state.wakers.iter().any(|waker| waker.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    fn lock(&self) -> MutexGuard<'_, BatchState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A sent record's answer. `.await` it on any executor, or [`wait`](SendFuture::wait) on a plain
/// thread. Dropping it does not cancel the send.
#[derive(Debug)]
#[must_use = "a send's outcome is only known by awaiting or waiting on its future"]
pub struct SendFuture {
    batch: Arc<BatchResult>,
    partition: PartitionId,
    /// The record's index in its batch: its offset is the batch's base offset plus this.
    index_in_batch: u32,
    timestamp: TimestampMs,
}

impl SendFuture {
    pub(crate) fn new(
        batch: Arc<BatchResult>,
        partition: PartitionId,
        index_in_batch: u32,
        timestamp: TimestampMs,
    ) -> SendFuture {
        SendFuture {
            batch,
            partition,
            index_in_batch,
            timestamp,
        }
    }

    /// The partition the record was put in; known at once, before the batch is appended.
    pub fn partition(&self) -> PartitionId {
        self.partition
    }

    /// True once the record's batch is answered (appended, or failed).
    pub fn is_complete(&self) -> bool {
        self.batch.is_complete()
    }

    /// Blocks the calling thread until the record's batch is answered.
    pub fn wait(self) -> Result<RecordMetadata, ProducerError> {
        let outcome = self.batch.wait();
        self.metadata(outcome)
    }

    fn metadata(
        &self,
        outcome: Result<BatchAppended, ProducerError>,
    ) -> Result<RecordMetadata, ProducerError> {
        let appended = outcome?;
        Ok(RecordMetadata {
            partition: self.partition,
            // The engine checked that the batch's last offset fits: this cannot overflow.
            offset: Offset(appended.base_offset.0 + u64::from(self.index_in_batch)),
            timestamp: appended.log_append_time.unwrap_or(self.timestamp),
        })
    }
}

impl Future for SendFuture {
    type Output = Result<RecordMetadata, ProducerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.batch.poll(cx) {
            Poll::Ready(outcome) => Poll::Ready(self.metadata(outcome)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn appended(base_offset: u64, log_append_time: Option<i64>) -> BatchAppended {
        BatchAppended {
            base_offset: Offset(base_offset),
            log_append_time: log_append_time.map(TimestampMs),
        }
    }

    #[test]
    fn each_record_gets_the_base_offset_plus_its_index_and_its_own_timestamp() {
        let batch = Arc::new(BatchResult::default());
        let futures: Vec<SendFuture> = (0..3)
            .map(|index| {
                SendFuture::new(batch.clone(), 2, index, TimestampMs(100 + i64::from(index)))
            })
            .collect();
        assert!(!futures[0].is_complete());
        batch.complete(Ok(appended(40, None)));
        batch.complete(Err(ProducerError::Closed));
        let answers: Vec<RecordMetadata> = futures.into_iter().map(|f| f.wait().unwrap()).collect();
        let offsets: Vec<u64> = answers.iter().map(|answer| answer.offset.0).collect();
        assert_eq!(offsets, [40, 41, 42]);
        assert_eq!(answers[2].timestamp, TimestampMs(102));
        assert_eq!(answers[2].partition, 2);
    }

    #[test]
    fn log_append_time_replaces_the_record_timestamp_and_errors_reach_every_record() {
        let batch = Arc::new(BatchResult::default());
        let future = SendFuture::new(batch.clone(), 0, 0, TimestampMs(5));
        batch.complete(Ok(appended(0, Some(999))));
        assert_eq!(future.wait().unwrap().timestamp, TimestampMs(999));

        let failed = Arc::new(BatchResult::default());
        let futures = [0, 1].map(|index| SendFuture::new(failed.clone(), 0, index, TimestampMs(5)));
        failed.complete(Err(ProducerError::SenderStopped));
        for future in futures {
            assert!(matches!(future.wait(), Err(ProducerError::SenderStopped)));
        }
    }

    #[test]
    fn an_awaiting_task_is_woken_when_the_batch_completes() {
        let batch = Arc::new(BatchResult::default());
        let future = SendFuture::new(batch.clone(), 0, 1, TimestampMs(5));
        let completer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            batch.complete(Ok(appended(10, None)));
        });
        let metadata = futures_executor::block_on(future).unwrap();
        assert_eq!(metadata.offset, Offset(11));
        completer.join().unwrap();
    }
}
