//! The async forms of the engine's blocking calls, for callers on an async executor.
//!
//! The data calls (`append`, `fetch`, `flush`, ...) already return a [`Pending`](super::Pending),
//! which is a `Future`. The calls that touch every shard, take the administration lock, write
//! files or join threads (topic administration, `flush_all`, `checkpoint`, `close`, `compact`,
//! opening) block; their `_async` forms run the blocking form on a thread of their own and
//! resolve when it ends, so that no executor thread ever waits for the disk or a lock. The work
//! starts when the form is called and runs to its end even if the future is dropped.
//!
//! After [`Engine::close_async`] has resolved, dropping the last handle is immediate (the shards
//! are already stopped and joined); dropping it without a close stops and joins them on the
//! dropping thread, which a service on an executor should avoid.

use std::future::Future;
use std::path::Path;

use bytes::Bytes;

use super::shard::Request;
use super::{
    AppendInfo, Durability, Engine, EngineConfig, PartitionCompaction, PartitionRetention, Pending,
    ScrubOutcome, TopicDescription, refuse_internal_append,
};
use crate::config::LogConfig;
use crate::error::{AppendError, EngineUnavailable, FlushError, OpenError, TopicError};
use crate::format::{BatchHeader, Compression};
use crate::types::{PartitionId, TopicName, TopicPartition};

/// Runs `work` on a thread of its own; the future resolves to its outcome. `call` names the work
/// in the error when the thread cannot be started or ends without an answer.
pub(crate) fn off_thread<T, E>(
    call: &'static str,
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> impl Future<Output = Result<T, E>> + Send + 'static
where
    T: Send + 'static,
    E: From<EngineUnavailable> + Send + 'static,
{
    let (answer, receiver) = oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("seglog-{call}"))
        .spawn(move || {
            // The caller may have dropped the future: the work is done all the same.
            let _ = answer.send(work());
        });
    async move {
        if let Err(source) = spawned {
            return Err(no_thread(call, source.to_string()).into());
        }
        match receiver.await {
            Ok(outcome) => outcome,
            Err(oneshot::RecvError) => {
                Err(no_thread(call, "it ended without an answer".into()).into())
            }
        }
    }
}

/// Whether any batch of `batches` says it is compressed (a malformed one is the shard's to
/// report).
fn any_compressed(batches: &[u8]) -> bool {
    let mut rest = batches;
    while let Ok(header) = BatchHeader::parse(rest) {
        if !matches!(header.attributes.compression(), Ok(Compression::None)) {
            return true;
        }
        let size_bytes = usize::try_from(header.size_bytes()).unwrap_or(usize::MAX);
        match rest.get(size_bytes..) {
            Some(next) => rest = next,
            None => return false,
        }
    }
    false
}

fn no_thread(call: &'static str, cause: String) -> EngineUnavailable {
    EngineUnavailable::NoThread { call, cause }
}

/// Batches at least this large are validated by their shard in [`Engine::append_async`].
const SHARD_VALIDATES_FROM_BYTES: usize = 64 * 1024;

/// The async forms. Each resolves to what its blocking form returns.
impl Engine {
    /// [`Engine::append`] for an async caller: batches of 64 KiB or more, or compressed ones
    /// (whose records are decompressed to be checked), are validated by the partition's shard
    /// instead of on the caller's thread, so that an executor thread only copies a reference.
    /// The checks and their errors are the same; so is the order of the appends sent.
    pub fn append_async(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        batches: Bytes,
        durability: Durability,
    ) -> Pending<AppendInfo, AppendError> {
        if batches.len() < SHARD_VALIDATES_FROM_BYTES && !any_compressed(&batches) {
            return self.append(topic, partition, batches, durability);
        }
        if let Err(refused) = refuse_internal_append(topic) {
            return Pending::ready(Err(refused));
        }
        let tp = TopicPartition {
            topic: topic.clone(),
            partition,
        };
        let config = match self.append_config(&tp) {
            Ok(config) => config,
            Err(error) => return Pending::ready(Err(error)),
        };
        self.send_append(tp, batches.len(), durability, |tp, durable, reply| {
            Request::ValidateAndAppend {
                tp,
                batches,
                config: Box::new(config),
                durable,
                reply,
            }
        })
    }

    /// [`Engine::open`], off the caller's thread.
    pub fn open_async(
        dir: &Path,
        config: EngineConfig,
    ) -> impl Future<Output = Result<Engine, OpenError>> + Send + 'static + use<> {
        let dir = dir.to_owned();
        off_thread("open", move || Engine::open(dir, config))
    }

    /// [`Engine::create_topic`], off the caller's thread.
    pub fn create_topic_async(
        &self,
        topic: &str,
        partition_count: u32,
        config: LogConfig,
    ) -> impl Future<Output = Result<TopicName, TopicError>> + Send + 'static + use<> {
        let (engine, topic) = (self.clone(), topic.to_owned());
        off_thread("create_topic", move || {
            engine.create_topic(&topic, partition_count, config)
        })
    }

    /// [`Engine::describe_topic`], off the caller's thread (it asks every partition's shard).
    pub fn describe_topic_async(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<TopicDescription, TopicError>> + Send + 'static + use<> {
        let (engine, topic) = (self.clone(), topic.to_owned());
        off_thread("describe_topic", move || engine.describe_topic(&topic))
    }

    /// [`Engine::add_partitions`], off the caller's thread.
    pub fn add_partitions_async(
        &self,
        topic: &str,
        partition_count: u32,
    ) -> impl Future<Output = Result<(), TopicError>> + Send + 'static + use<> {
        let (engine, topic) = (self.clone(), topic.to_owned());
        off_thread("add_partitions", move || {
            engine.add_partitions(&topic, partition_count)
        })
    }

    /// [`Engine::alter_topic_config`], off the caller's thread.
    pub fn alter_topic_config_async(
        &self,
        topic: &str,
        config: LogConfig,
    ) -> impl Future<Output = Result<(), TopicError>> + Send + 'static + use<> {
        let (engine, topic) = (self.clone(), topic.to_owned());
        off_thread("alter_topic_config", move || {
            engine.alter_topic_config(&topic, config)
        })
    }

    /// [`Engine::delete_topic`], off the caller's thread.
    pub fn delete_topic_async(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<(), TopicError>> + Send + 'static + use<> {
        let (engine, topic) = (self.clone(), topic.to_owned());
        off_thread("delete_topic", move || engine.delete_topic(&topic))
    }

    /// [`Engine::flush_all`] without blocking: the shards sync while the caller awaits.
    pub fn flush_all_async(
        &self,
    ) -> impl Future<Output = Result<(), FlushError>> + Send + 'static + use<> {
        let pendings = self.flush_all_requests();
        async move {
            for pending in pendings {
                pending.await?;
            }
            Ok(())
        }
    }

    /// [`Engine::checkpoint`], off the caller's thread.
    pub fn checkpoint_async(
        &self,
    ) -> impl Future<Output = Result<(), FlushError>> + Send + 'static + use<> {
        let engine = self.clone();
        off_thread("checkpoint", move || engine.checkpoint())
    }

    /// [`Engine::close`], off the caller's thread. Once it resolves, dropping the handles does
    /// not block.
    pub fn close_async(
        &self,
    ) -> impl Future<Output = Result<(), FlushError>> + Send + 'static + use<> {
        let engine = self.clone();
        off_thread("close", move || engine.close())
    }

    /// [`Engine::apply_retention`], off the caller's thread.
    pub fn apply_retention_async(
        &self,
        topic: Option<&str>,
    ) -> impl Future<Output = Result<Vec<PartitionRetention>, TopicError>> + Send + 'static + use<>
    {
        let (engine, topic) = (self.clone(), topic.map(str::to_owned));
        off_thread("apply_retention", move || {
            engine.apply_retention(topic.as_deref())
        })
    }

    /// [`Engine::compact`], off the caller's thread.
    pub fn compact_async(
        &self,
        topic: Option<&str>,
    ) -> impl Future<Output = Result<Vec<PartitionCompaction>, TopicError>> + Send + 'static + use<>
    {
        let (engine, topic) = (self.clone(), topic.map(str::to_owned));
        off_thread("compact", move || engine.compact(topic.as_deref()))
    }

    /// [`Engine::scrub`], off the caller's thread.
    pub fn scrub_async(
        &self,
        topic: Option<&str>,
    ) -> impl Future<Output = Result<Vec<(TopicPartition, ScrubOutcome)>, TopicError>>
    + Send
    + 'static
    + use<> {
        let (engine, topic) = (self.clone(), topic.map(str::to_owned));
        off_thread("scrub", move || engine.scrub(topic.as_deref()))
    }
}
