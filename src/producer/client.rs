//! [`Producer`]: the handle `send`, `flush` and `close` go through, and the state it shares with
//! its sender thread.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use super::accumulator::{Accumulator, AppendRefused};
use super::config::ProducerConfig;
use super::error::ProducerError;
use super::result::SendFuture;
use super::routing::SplitMix64;
use super::sender;
use crate::engine::Engine;
use crate::engine::off_thread;
use crate::format::NewRecord;
use crate::partitioner::partition_for_key;
use crate::types::{PartitionId, TimestampMs, TopicName};

/// A record to send (Kafka's `ProducerRecord`). It is borrowed: `send` encodes it into a batch
/// before returning, so nothing of it is kept.
#[derive(Debug, Clone, Copy)]
pub struct ProducerRecord<'a> {
    /// The topic to send to.
    pub topic: &'a TopicName,
    /// `None`: the partitioner chooses.
    pub partition: Option<PartitionId>,
    /// The key (which the default partitioner hashes); `None` for a null key.
    pub key: Option<&'a [u8]>,
    /// `None` is a tombstone.
    pub value: Option<&'a [u8]>,
    /// The headers, in order: each a UTF-8 key and a nullable value.
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
    /// `None`: the time of the `send` call (Kafka's `CreateTime`).
    pub timestamp: Option<TimestampMs>,
}

impl<'a> ProducerRecord<'a> {
    /// A record without headers, partition or timestamp.
    pub fn new(
        topic: &'a TopicName,
        key: Option<&'a [u8]>,
        value: Option<&'a [u8]>,
    ) -> ProducerRecord<'a> {
        ProducerRecord {
            topic,
            partition: None,
            key,
            value,
            headers: &[],
            timestamp: None,
        }
    }
}

/// Sends records to an engine's topics in batches (see the [module](super) documentation).
///
/// `Send + Sync`: share it between threads by reference or in an `Arc`, as Kafka's producer is
/// shared. Dropping it closes it: every record sent is appended (or fails) first.
#[derive(Debug)]
pub struct Producer {
    shared: Arc<Shared>,
    sender_thread: Mutex<Option<JoinHandle<()>>>,
}

/// What `send` and the sender thread share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) config: ProducerConfig,
    state: Mutex<State>,
    /// The sender thread waits here for work ([`State::sender_woken`]).
    sender_wakeup: Condvar,
    /// Notified whenever batches are answered: memory is free, a flush may be done.
    released: Condvar,
}

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) accumulator: Accumulator,
    random: SplitMix64,
    pub(crate) closing: bool,
    /// The sender thread ended; nothing queued will be sent any more.
    pub(crate) sender_stopped: bool,
    pub(crate) flushes_in_progress: usize,
    pub(crate) memory_waiters: usize,
    /// Set by whoever gives the sender thread work, cleared by the sender before it looks for
    /// work: a wake-up between its look and its wait is never lost.
    pub(crate) sender_woken: bool,
}

/// How a record's partition is chosen, decided once per `send`.
#[derive(Debug, Clone, Copy)]
enum Route {
    Fixed(PartitionId),
    /// Keyless, built-in partitioner: the topic's sticky partition at the time of the append.
    Sticky,
}

/// What `send` does while `buffer.memory` is used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemoryWait {
    /// Waits for memory up to `max.block.ms`.
    UpToBlockMax,
    /// Fails at once (`send_async` then waits on a thread of its own).
    None,
}

/// A copy of a [`ProducerRecord`], for the thread that waits for memory on an async caller's
/// behalf.
#[derive(Debug)]
struct OwnedRecord {
    topic: TopicName,
    partition: Option<PartitionId>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp: TimestampMs,
}

impl OwnedRecord {
    fn from(record: &ProducerRecord<'_>) -> OwnedRecord {
        OwnedRecord {
            topic: record.topic.clone(),
            partition: record.partition,
            key: record.key.map(<[u8]>::to_vec),
            value: record.value.map(<[u8]>::to_vec),
            headers: record
                .headers
                .iter()
                .map(|(key, value)| ((*key).to_owned(), value.map(<[u8]>::to_vec)))
                .collect(),
            // Stamped now: the time of the `send_async` call, not of the end of the wait.
            timestamp: record.timestamp.unwrap_or_else(TimestampMs::now),
        }
    }

    /// Sends it with `send`, whose record borrows its parts.
    fn send_with(
        &self,
        send: impl FnOnce(&ProducerRecord<'_>) -> Result<SendFuture, ProducerError>,
    ) -> Result<SendFuture, ProducerError> {
        let headers: Vec<(&str, Option<&[u8]>)> = self
            .headers
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_deref()))
            .collect();
        send(&ProducerRecord {
            topic: &self.topic,
            partition: self.partition,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: &headers,
            timestamp: Some(self.timestamp),
        })
    }
}

impl Engine {
    /// A producer sending to this engine's topics (see [`crate::producer`]).
    pub fn producer(&self, config: ProducerConfig) -> Result<Producer, ProducerError> {
        Producer::new(self.clone(), config)
    }
}

impl Producer {
    /// Starts a producer and its sender thread.
    pub fn new(engine: Engine, config: ProducerConfig) -> Result<Producer, ProducerError> {
        config.validate()?;
        let shared = Arc::new(Shared {
            engine,
            config,
            state: Mutex::new(State {
                accumulator: Accumulator::default(),
                random: SplitMix64::from_clock(),
                closing: false,
                sender_stopped: false,
                flushes_in_progress: 0,
                memory_waiters: 0,
                sender_woken: false,
            }),
            sender_wakeup: Condvar::new(),
            released: Condvar::new(),
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("seglog-producer".to_owned())
            .spawn(move || sender::run(thread_shared))
            .map_err(|source| ProducerError::SenderThread {
                source: Arc::new(source),
            })?;
        Ok(Producer {
            shared,
            sender_thread: Mutex::new(Some(thread)),
        })
    }

    /// Encodes `record` into its partition's batch and returns its future at once; blocks only
    /// while `buffer.memory` is used up, for at most `max.block.ms` (then `BufferExhausted`).
    ///
    /// Fails at once for a topic the engine does not know, a partition out of range, or a record
    /// too large for the topic's batches or for `buffer.memory`, and after `close`.
    pub fn send(&self, record: &ProducerRecord<'_>) -> Result<SendFuture, ProducerError> {
        self.shared.send(record, MemoryWait::UpToBlockMax)
    }

    /// [`Producer::send`] for an async caller: resolves once the record is in its batch (the
    /// returned [`SendFuture`] then resolves once the batch is appended). When `buffer.memory`
    /// is used up, the wait for it (up to `max.block.ms`) runs on a thread of its own, with a
    /// copy of the record, never on the caller's. Await it before the next send to keep the
    /// records' order.
    pub fn send_async(
        &self,
        record: &ProducerRecord<'_>,
    ) -> impl Future<Output = Result<SendFuture, ProducerError>> + Send + 'static + use<> {
        let queued = self.shared.send(record, MemoryWait::None);
        let waiting = match &queued {
            Err(ProducerError::BufferExhausted { .. }) => {
                Some((self.shared.clone(), OwnedRecord::from(record)))
            }
            _ => None,
        };
        async move {
            let Some((shared, record)) = waiting else {
                return queued;
            };
            off_thread("send", move || {
                record.send_with(|record| shared.send(record, MemoryWait::UpToBlockMax))
            })
            .await
        }
    }

    /// Sends every batch now and waits until each batch opened before this call is answered
    /// (Kafka's `flush`). Errors reach the records' futures, not this call.
    pub fn flush(&self) {
        self.shared.flush();
    }

    /// [`Producer::flush`], waiting on a thread of its own instead of the caller's.
    pub fn flush_async(
        &self,
    ) -> impl Future<Output = Result<(), ProducerError>> + Send + 'static + use<> {
        let shared = self.shared.clone();
        off_thread("producer flush", move || {
            shared.flush();
            Ok(())
        })
    }

    /// Refuses further sends, sends every batch, waits for every answer and stops the sender
    /// thread (Kafka's `close`). Calling it again does nothing.
    pub fn close(&self) -> Result<(), ProducerError> {
        join_sender(self.begin_close())
    }

    /// [`Producer::close`], waiting for the sender thread on a thread of its own instead of the
    /// caller's. Once it resolves, dropping the producer does not block.
    pub fn close_async(
        &self,
    ) -> impl Future<Output = Result<(), ProducerError>> + Send + 'static + use<> {
        let thread = self.begin_close();
        off_thread("producer close", move || join_sender(thread))
    }

    /// Refuses further sends and has the sender thread send what is left and stop; returns the
    /// thread to join (`None` once taken).
    fn begin_close(&self) -> Option<JoinHandle<()>> {
        {
            let mut state = self.shared.lock_state();
            state.closing = true;
            self.shared.wake_sender(&mut state);
        }
        self.sender_thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Bytes of `buffer.memory` reserved by open and unanswered batches now.
    pub fn buffer_used_bytes(&self) -> usize {
        self.shared.lock_state().accumulator.memory_used_bytes()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // The outcome of each record is on its future; there is no one to report a panic to.
        let _ = self.close();
    }
}

/// Waits for the sender thread to end.
fn join_sender(thread: Option<JoinHandle<()>>) -> Result<(), ProducerError> {
    match thread.map(JoinHandle::join) {
        Some(Err(_)) => Err(ProducerError::SenderStopped),
        Some(Ok(())) | None => Ok(()),
    }
}

impl Shared {
    /// Sends every batch now and waits until each batch opened before the call is answered.
    fn flush(&self) {
        let mut state = self.lock_state();
        let through_batch_id = state.accumulator.next_batch_id();
        state.flushes_in_progress += 1;
        self.wake_sender(&mut state);
        while state.accumulator.has_incomplete_before(through_batch_id) && !state.sender_stopped {
            state = self
                .released
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.flushes_in_progress -= 1;
    }

    /// Encodes `record` into its partition's batch; while `buffer.memory` is used up, waits as
    /// `memory_wait` says, then fails with `BufferExhausted`.
    fn send(
        &self,
        record: &ProducerRecord<'_>,
        memory_wait: MemoryWait,
    ) -> Result<SendFuture, ProducerError> {
        let started = Instant::now();
        let new_record = NewRecord {
            timestamp_ms: record.timestamp.unwrap_or_else(TimestampMs::now).0,
            key: record.key,
            value: record.value,
            headers: record.headers,
        };
        let mut state = self.lock_state();
        state.check_open()?;
        self.refresh_topic(&mut state, record.topic, started)?;
        let route = self.route(&state, record)?;
        loop {
            let partition = state.resolve(record.topic, route, &new_record);
            let appended = state.accumulator.append(
                record.topic,
                partition,
                &new_record,
                self.config.buffer_memory_bytes,
                Instant::now(),
            );
            match appended {
                Ok(appended) => {
                    state.after_append(record.topic, route);
                    if appended.wake_sender {
                        self.wake_sender(&mut state);
                    }
                    return Ok(appended.future);
                }
                Err(AppendRefused::Error(error)) => return Err(error),
                Err(AppendRefused::Memory { requested_bytes }) => {
                    state = self.wait_for_memory(state, started, requested_bytes, memory_wait)?;
                }
            }
        }
    }

    pub(crate) fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn wake_sender(&self, state: &mut State) {
        state.sender_woken = true;
        self.sender_wakeup.notify_one();
    }

    /// Waits (releasing the lock) until woken or until `deadline`.
    pub(crate) fn wait_for_work<'a>(
        &self,
        mut state: MutexGuard<'a, State>,
        deadline: Option<Instant>,
    ) -> MutexGuard<'a, State> {
        while !state.sender_woken {
            match deadline {
                None => {
                    state = self
                        .sender_wakeup
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    state = self
                        .sender_wakeup
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
        state
    }

    pub(crate) fn notify_released(&self) {
        self.released.notify_all();
    }

    /// Reads the topic's partition count and limits from the engine if they are unknown or
    /// older than `metadata.max.age.ms`.
    fn refresh_topic(
        &self,
        state: &mut State,
        topic: &TopicName,
        now: Instant,
    ) -> Result<(), ProducerError> {
        let max_age = self.config.metadata_max_age();
        if !state.accumulator.needs_refresh(topic, now, max_age) {
            return Ok(());
        }
        let found = self
            .engine
            .list_topics()
            .into_iter()
            .find(|(name, _)| name == topic);
        let Some((_, metadata)) = found else {
            let topic = topic.to_string();
            return Err(ProducerError::UnknownTopic { topic });
        };
        state.accumulator.update_topic(
            topic,
            metadata.partition_count,
            &metadata.config,
            self.config.batch_size_bytes,
            now,
        );
        Ok(())
    }

    fn route(&self, state: &State, record: &ProducerRecord<'_>) -> Result<Route, ProducerError> {
        let partition_count = state
            .accumulator
            .topic(record.topic)
            .map_or(0, |batches| batches.partition_count);
        let partition = match (record.partition, &self.config.partitioner, record.key) {
            (Some(partition), _, _) => partition,
            (None, Some(partitioner), key) => {
                partitioner.partition(record.topic, key, partition_count)
            }
            (None, None, Some(key)) => partition_for_key(key, partition_count).unwrap_or(0),
            (None, None, None) => return Ok(Route::Sticky),
        };
        if partition >= partition_count {
            return Err(ProducerError::PartitionOutOfRange {
                topic: record.topic.to_string(),
                partition,
                partition_count,
            });
        }
        Ok(Route::Fixed(partition))
    }

    /// Waits for `buffer.memory` to free up, asking the sender to send every batch meanwhile
    /// (Kafka's `BufferPool` waiters make every batch ready too). `BufferExhausted` once
    /// `max.block.ms` has passed since the send began.
    fn wait_for_memory<'a>(
        &self,
        mut state: MutexGuard<'a, State>,
        started: Instant,
        requested_bytes: usize,
        memory_wait: MemoryWait,
    ) -> Result<MutexGuard<'a, State>, ProducerError> {
        // No deadline when `max.block.ms` is beyond what `Instant` can represent.
        let deadline = started.checked_add(self.config.block_max());
        let now = Instant::now();
        let waits = memory_wait == MemoryWait::UpToBlockMax;
        if !waits || deadline.is_some_and(|deadline| now >= deadline) {
            return Err(ProducerError::BufferExhausted {
                requested_bytes: requested_bytes as u64,
                buffer_memory_bytes: self.config.buffer_memory_bytes as u64,
                block_ms_max: self.config.block_ms_max,
            });
        }
        state.memory_waiters += 1;
        self.wake_sender(&mut state);
        let mut state = match deadline {
            Some(deadline) => {
                self.released
                    .wait_timeout(state, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => self
                .released
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner),
        };
        state.memory_waiters -= 1;
        state.check_open()?;
        Ok(state)
    }
}

impl State {
    fn check_open(&self) -> Result<(), ProducerError> {
        if self.closing {
            return Err(ProducerError::Closed);
        }
        if self.sender_stopped {
            return Err(ProducerError::SenderStopped);
        }
        Ok(())
    }

    /// The partition for this attempt: fixed, or the topic's sticky partition, moved on if the
    /// record would need a new batch in a partition that already had its batch.
    fn resolve(&mut self, topic: &TopicName, route: Route, record: &NewRecord<'_>) -> PartitionId {
        let Route::Fixed(partition) = route else {
            return self.sticky_partition(topic, record);
        };
        partition
    }

    fn sticky_partition(&mut self, topic: &TopicName, record: &NewRecord<'_>) -> PartitionId {
        let random = &mut self.random;
        // `send` refreshed the topic: it is known. If not, the append reports it.
        let Some(batches) = self.accumulator.topic_mut(topic) else {
            return 0;
        };
        let partition_count = batches.partition_count;
        let partition = batches.sticky.current(random, partition_count);
        if batches.sticky.is_used() && !batches.accepts(partition, record) {
            return batches.sticky.switch(random, partition_count);
        }
        partition
    }

    fn after_append(&mut self, topic: &TopicName, route: Route) {
        if let (Route::Sticky, Some(batches)) = (route, self.accumulator.topic_mut(topic)) {
            batches.sticky.mark_used();
        }
    }
}
