//! The engine: many topics and partitions, one shard thread per core, each the sole owner of a
//! group of partitions (DESIGN.md § Engine).
//!
//! [`Engine`] is a cheap, cloneable handle (`Clone + Send + Sync`). Data requests
//! ([`Engine::append`], [`Engine::fetch`], ...) return a [`Pending`]: `.await` it on any executor,
//! or `.wait()` on a plain thread. Batches are validated on the caller's thread; the owning shard
//! only assigns offsets, writes and syncs.
//!
//! Placement: partition `p` of topic `t` lives on shard
//! `(to_positive(murmur2(t)) + p) % shard_count` — a topic's partitions spread over consecutive
//! shards, and the same partition lands on the same shard at every open with the same shard
//! count. Nothing on disk depends on the placement, so changing the shard count is safe.

mod asynchronous;
mod checkpointer;
mod cleaner_thread;
mod clock;
mod consumer_record;
pub(crate) mod data_dir;
mod deleter;
mod inline;
mod pending;
mod producer_ids;
pub mod repair;
mod shard;
mod syncer;
mod topic_registry;
mod wake;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use bytes::Bytes;
use crossbeam_channel::{Receiver, TrySendError};

use crate::config::{ConfigError, LogConfig};
use crate::error::{
    AppendError, DeleteRecordsError, EngineUnavailable, FlushError, OpenError, ProducerIdError,
    ReadError, StorageError, TopicError, TruncateError,
};
use crate::format::file_name::{DELETE_DIR_SUFFIX, partition_dir_name};
use crate::io::{Storage, sync_dir};
use crate::log::{DigestBudget, ValidatedBatches};
use crate::partitioner;
use crate::types::{Offset, PartitionId, TimestampMs, TopicName, TopicPartition};

pub use crate::cleaner::log_cleaner::CompactionOutcome;
use crate::cleaner::offset_map::OffsetMap;
pub use crate::cleaner::scrub::{CorruptSegment, ScrubOutcome};
pub use crate::index::time_index::TimestampOffset;
pub use crate::io::IoBackend;
pub use crate::log::{AppendInfo, FetchData, RetentionOutcome};
pub(crate) use asynchronous::off_thread;
use cleaner_thread::{CleanerHandle, CleanerRequest, CleanerSettings, CleanerView, ShardLink};
pub use cleaner_thread::{CleanerPriority, CleanerStats, ScrubStats, UncleanablePartition};
pub use clock::Clock;
pub use consumer_record::ConsumerRecord;
pub(crate) use consumer_record::consumer_record;
use data_dir::{DataDir, PartitionOffsets};
use deleter::FileDeleter;
use inline::InlineShard;
pub use pending::Pending;
use pending::{DURABLE_ANSWER_SPIN, LOOKUP_ANSWER_SPIN, Reply};
use shard::{PartitionCheckpoint, Request, Shard, ShardClosed, ShardContext, Truncation};
pub use shard::{PartitionCompaction, PartitionRetention};
use syncer::Syncer;
pub use topic_registry::TopicMetadata;
use topic_registry::TopicRegistry;
use wake::{ShardSender, ShardWaker};

/// Whether `topic` is one of the engine's internal topics, which only the engine's own components
/// write: the group coordinator's `__consumer_offsets` (Kafka's `Topic.isInternal`). The public
/// API refuses to append to them, create, grow, reconfigure or delete them, or delete their
/// records (an `InternalTopic` error); fetching them is allowed.
pub fn is_internal_topic(topic: &str) -> bool {
    topic == OFFSETS_TOPIC
}

/// The compacted topic that holds consumer groups' committed offsets (Kafka's name), written only
/// by the group coordinator.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// How the engine runs.
#[derive(Debug, Clone, PartialEq, derive_setters::Setters)]
#[setters(prefix = "with_")]
#[non_exhaustive]
pub struct EngineConfig {
    /// Number of shard threads; 0 means one per available core.
    pub shard_count: usize,
    /// Pin shard `i` to core `i % cores` (`core_affinity`).
    pub pin_shards: bool,
    /// Bound on each shard's request queue; a full queue answers `QueueFull`.
    pub queue_requests_max: usize,
    /// Bound on the bytes of appends queued or being written across all shards.
    pub inflight_bytes_max: u64,
    /// Configuration of topics created without one, and of adopted partition directories.
    pub default_topic_config: LogConfig,
    /// Which backend performs file I/O (default: `SEGLOG_IO_BACKEND`, else `Auto`).
    pub backend: IoBackend,
    /// Bound on partitions open at once across all shards; beyond it the least recently used
    /// partition is released. Default: as many as `open_segments_max` (an open partition holds
    /// at least its active segment).
    pub open_partitions_max: usize,
    /// Bound on segments open at once across all shards. An open segment holds one file
    /// descriptor (its `.log`) and two index maps, an active one written with `O_DIRECT`
    /// (`direct_writes`) a second descriptor, counted too; an open partition holds its active
    /// segment and at most `SEALED_OPEN_MAX` sealed ones. Opening a partition beyond the bound releases the
    /// least recently used ones. Default: what fits `RLIMIT_NOFILE` and `vm.max_map_count` after
    /// a reserve each (see [`open_segments_default`]).
    pub open_segments_max: usize,
    /// `log.retention.check.interval.ms`: how often each shard applies retention to its
    /// partitions (default 5 minutes).
    pub retention_check_interval_ms: u64,
    /// `log.flush.offset.checkpoint.interval.ms`: how often the engine writes the recovery-point
    /// and log-start-offset checkpoints in the background (default 1 minute, as Kafka; 0: only on
    /// `checkpoint`, `compact` and `close`). After a crash, recovery re-reads every segment from
    /// the checkpointed recovery point on, and may cut a torn tail in any of them
    /// (`log/seal_sync.rs`): the interval bounds both.
    pub recovery_point_checkpoint_interval_ms: u64,
    /// `log.cleaner.dedupe.buffer.size`: memory for one compaction's key map (each entry takes
    /// 24 bytes; a full map means another round).
    pub cleaner_dedupe_buffer_bytes: usize,
    /// `log.cleaner.backoff.ms`: how often the cleaner thread looks for open compacted logs
    /// whose dirty share reached `min.cleanable.dirty.ratio` (default 15 s); also the first
    /// retry delay after a failed cleaning (doubling with each failure in a row).
    pub cleaner_backoff_ms: u64,
    /// `log.cleaner.io.max.bytes.per.second`: the cleaner's read and write rate limit (default:
    /// none, as Kafka's).
    pub cleaner_io_max_bytes_per_second: f64,
    /// How often the scrubber re-reads every open partition's sealed segments on the cleaner
    /// thread, checking CRCs and offset continuity (default 24 h; 0: never).
    pub scrub_interval_ms: u64,
    /// The core the cleaner thread is pinned to (default: the last core; `None`: not pinned).
    /// It runs at `SCHED_IDLE`, so it takes only time the shards leave idle on that core.
    pub cleaner_core: Option<usize>,
    /// Write each active segment's `.log` with `O_DIRECT` (default: on): appends skip the page
    /// cache and are acknowledged once the device has their bytes, many in flight on the shard's
    /// ring; fetches of fresh data read from the device. Where the file system refuses `O_DIRECT`
    /// (tmpfs before Linux 6.6), the engine says so once and writes through the page cache.
    pub direct_writes: bool,
    /// Read large ranges (256 KiB or more) the page cache holds none of with `O_DIRECT`, through
    /// 8 MiB windows of the shard's own read ahead (default: off; io_uring backend only; 64 MiB of
    /// windows, in huge pages, in memory per shard from its start, and up to as much on any other
    /// thread that reads so): a consumer catching up leaves
    /// the page cache to the hot tail and skips its page allocation and copy. Off by default
    /// because nothing read this way enters the page cache: with `direct_writes` too, data re-read
    /// (a second consumer, a second pass) comes from the device every time. Off, every read goes
    /// through the page cache and its read-ahead. A segment read this way holds a
    /// second descriptor, not counted by `open_segments_max`; where none is left (`EMFILE`), its
    /// reads stay buffered.
    pub direct_cold_reads: bool,
    /// When a shard's turn has one partition to sync, its sync threads hold nothing and no
    /// request is waiting, the shard syncs it itself rather than through a sync thread (default:
    /// on): a lone durable writer saves a hand-over. Off, every group-commit sync goes to the
    /// sync threads.
    pub sync_inline_when_idle: bool,
    /// Run the engine on the calling threads instead of threads of its own (default: off): one
    /// shard, driven by each request's caller until the request is answered (`engine/inline.rs`).
    /// Syncs, unlinks and compaction run in the calls that cause them; no background
    /// checkpoints, retention checks, cleaning or scrubbing run; a fetch never waits
    /// (`min_bytes` and `max_wait_ms` are not waited for). For tests, tools and single-threaded
    /// embedders: on a simulated disk a run is deterministic.
    pub inline: bool,
    /// Prewrite the space ahead of the appends of a partition whose syncs each cover little
    /// (stamped zeros, `format::prewrite`; default: on): its `fdatasync`s then rewrite blocks
    /// the file already has, with no block allocation or length change to journal, at the cost
    /// of writing those blocks twice (DESIGN.md § The append path).
    pub prewrite_synced_logs: bool,
    /// How long an idempotent producer's state is kept after its last batch's timestamp
    /// (Kafka's `producer.id.expiration.ms`, default a day): a producer idle longer is forgotten,
    /// and a batch of it that comes later is taken as a new producer's.
    pub producer_id_expiration_ms: i64,
    /// Once this many bytes were appended to a partition and no sync covered them, the shard
    /// hands the partition's active `.log` to its sync threads, which sync it in the background
    /// (default 0: never). The appends are answered at once, as before. What it bounds is the
    /// dirty data that a roll's seal sync or the kernel's writeback must write at once (up to a
    /// whole segment), which set the append preset's p99.99 and max latency while that sync ran
    /// on the shard; it moves the recovery point too. The price is a burst's throughput: data
    /// that would have stayed in the page cache is written back while the burst runs (DESIGN.md §
    /// The engine, BENCHMARKS.md § Tried and not kept). RocksDB's `bytes_per_sync` plays the same
    /// part.
    pub background_sync_bytes: u64,
    /// Memory each shard may keep in point lookups' batch digests (default 64 MiB): a lookup in
    /// a digested batch reads one to three 1 KiB chunks instead of the batch
    /// (`segment/lookup.rs`; a digest takes about 2.4 % of a 100 KiB batch, 3.3 % of an 11 KB
    /// one, so 64 MiB covers 2-2.7 GB of looked-up batches). Past it, lookups read undigested
    /// batches whole.
    pub lookup_digest_bytes_max: usize,
    /// Where the shards and the cleaner read the time (default: the system clock). A simulation
    /// gives an inline engine a clock of its own, so that time-dependent steps (deletion delays,
    /// retention, compaction's horizons) run the same way every time.
    pub clock: Clock,
}

/// File descriptors kept for everything else in the host process (and for directory syncs).
const FILES_RESERVED: u64 = 256;
/// Memory maps an open segment holds (`.index`, `.timeindex`).
const MAPS_PER_OPEN_SEGMENT: u64 = 2;
/// Memory maps kept for everything else in the host process (its libraries, heap arenas).
const MAPS_RESERVED: u64 = 4096;

/// The default bound on open segments: what fits both the process's open-file limit
/// (`RLIMIT_NOFILE`, read from `/proc/self/limits`; one descriptor per open segment) and the
/// kernel's memory-map limit (`vm.max_map_count`; two maps per open segment) after a reserve
/// each, between 16 and 1,048,576.
pub fn open_segments_default() -> usize {
    let files = open_files_limit().unwrap_or(1024);
    let maps = max_map_count().unwrap_or(65_530);
    let by_files = files.saturating_sub(FILES_RESERVED);
    let by_maps = maps.saturating_sub(MAPS_RESERVED) / MAPS_PER_OPEN_SEGMENT;
    by_files.min(by_maps).clamp(16, 1 << 20) as usize
}

fn max_map_count() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    let soft = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .next()?;
    match soft {
        "unlimited" => Some(u64::MAX),
        number => number.parse().ok(),
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            shard_count: 0,
            pin_shards: true,
            queue_requests_max: 4096,
            inflight_bytes_max: 256 * 1024 * 1024,
            default_topic_config: LogConfig::default(),
            backend: IoBackend::from_env(),
            open_partitions_max: open_segments_default(),
            open_segments_max: open_segments_default(),
            retention_check_interval_ms: 300_000,
            recovery_point_checkpoint_interval_ms: 60_000,
            cleaner_dedupe_buffer_bytes: 32 * 1024 * 1024,
            cleaner_backoff_ms: 15_000,
            cleaner_io_max_bytes_per_second: f64::MAX,
            scrub_interval_ms: 24 * 60 * 60 * 1000,
            cleaner_core: core_affinity::get_core_ids()
                .and_then(|cores| cores.len().checked_sub(1)),
            direct_writes: true,
            direct_cold_reads: false,
            sync_inline_when_idle: true,
            inline: false,
            prewrite_synced_logs: true,
            producer_id_expiration_ms: crate::log::PRODUCER_ID_EXPIRATION_MS_DEFAULT,
            background_sync_bytes: 0,
            lookup_digest_bytes_max: 64 * 1024 * 1024,
            clock: Clock::system(),
        }
    }
}

/// Whether an append is answered once written (page cache) or once synced (group commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Answer after the write; the topic's flush policy decides when it is synced.
    #[default]
    Written,
    /// Answer only after an `fdatasync` that covers the append.
    Durable,
}

/// Which offsets a fetch may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Everything written, up to the log end offset.
    #[default]
    LogEnd,
    /// Only what is durable, up to the recovery point.
    Durable,
}

/// How a fetch reads (Kafka's `fetch.max.bytes`, `fetch.min.bytes`, `fetch.max.wait.ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchOptions {
    /// Upper bound on the bytes returned, except that one whole batch is always returned.
    pub max_bytes: u64,
    /// Wait until at least this many bytes are available...
    pub min_bytes: u64,
    /// ...or this many milliseconds passed (0: answer at once).
    pub max_wait_ms: u64,
    /// Which offsets the fetch may see: up to the log end offset, or only what is durable.
    pub isolation: Isolation,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            max_bytes: 1024 * 1024,
            min_bytes: 1,
            max_wait_ms: 0,
            isolation: Isolation::LogEnd,
        }
    }
}

/// One partition as `describe_topic` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDescription {
    /// The partition's number.
    pub partition: PartitionId,
    /// The first offset a fetch can read.
    pub log_start_offset: Offset,
    /// The offset the next appended record will get.
    pub log_end_offset: Offset,
    /// The recovery point: every offset below it is synced to disk.
    pub durable_offset: Offset,
    /// Bytes of the partition's segments (0 while it is offline).
    pub size_bytes: u64,
    /// How many segments the partition has (0 while it is offline).
    pub segment_count: usize,
    /// Why the partition is offline (a failed write, sync or rename), if it is: it refuses
    /// appends and fetches until the engine is reopened.
    pub offline: Option<String>,
}

/// A topic as `describe_topic` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicDescription {
    /// The topic's name.
    pub topic: TopicName,
    /// The topic's configuration.
    pub config: LogConfig,
    /// Each partition, in partition order.
    pub partitions: Vec<PartitionDescription>,
}

/// A handle to an open engine. Clones share the engine.
#[derive(Debug, Clone)]
pub struct Engine {
    /// Dropped before `inner`: the last user handle stops and joins the background checkpointer,
    /// which holds the engine for a moment each round, so that the engine is released (its
    /// directory lock too) when the last user handle goes, not when a round ends. `None` in the
    /// checkpointer's own view of the engine.
    user: Option<Arc<UserHandles>>,
    inner: Arc<Inner>,
}

/// What the user's handles share beside the engine: the background checkpointer.
#[derive(Debug)]
struct UserHandles {
    checkpointer: Mutex<Option<checkpointer::Checkpointer>>,
}

impl UserHandles {
    fn stop_checkpointer(&self) {
        let checkpointer = self
            .checkpointer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(checkpointer) = checkpointer {
            checkpointer.stop_and_join();
        }
    }
}

impl Drop for UserHandles {
    fn drop(&mut self) {
        self.stop_checkpointer();
    }
}

struct ShardHandle {
    sender: Option<ShardSender>,
    /// Set when the shard thread has stopped serving (it panicked). Requests that reach a
    /// stopped shard are dropped from `exit_drain`, so their callers get `ShardFailed`.
    stopped: Arc<AtomicBool>,
    /// The queue's other end, kept to empty it once the shard stopped.
    exit_drain: Receiver<Request>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ShardHandle {
    /// Drops every request still queued for a stopped shard; each caller sees `ShardFailed`.
    fn drain_if_stopped(&self) {
        if self.stopped.load(Ordering::Acquire) {
            self.exit_drain.try_iter().for_each(drop);
        }
    }
}

struct Inner {
    root: PathBuf,
    storage: Arc<dyn Storage>,
    shards: Vec<ShardHandle>,
    topics: Arc<RwLock<TopicRegistry>>,
    /// Serialises topic administration (create, grow, alter, delete) and checkpoint writes.
    admin: Mutex<Checkpoints>,
    inflight_bytes: Arc<AtomicU64>,
    config: EngineConfig,
    closed: AtomicBool,
    /// Why the whole data directory went offline: a checkpoint write failed (its partitions'
    /// files did not, or they would be offline alone). Requests then fail until reopened.
    offline: Mutex<Option<String>>,
    cleaner: CleanerHandle,
    producer_ids: Mutex<producer_ids::ProducerIds>,
}

/// The data directory's own files and the checkpoints' contents, including partitions not
/// opened since the engine opened.
#[derive(Debug)]
struct Checkpoints {
    dir: DataDir,
    recovery_points: PartitionOffsets,
    log_start_offsets: PartitionOffsets,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("root", &self.root)
            .field("shards", &self.shards.len())
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Engine {
    /// Opens (creating if needed) the engine's data directory on the configured backend.
    pub fn open(dir: impl AsRef<Path>, config: EngineConfig) -> Result<Engine, OpenError> {
        let root = dir.as_ref();
        let storage = config
            .backend
            .storage_with_direct_cold_reads(config.direct_cold_reads)
            .map_err(|source| OpenError::IoUringUnavailable {
                dir: root.to_owned(),
                source,
            })?;
        Engine::open_on(root, config, storage)
    }

    /// Opens the engine on the given storage backend (a simulated or hooked disk).
    #[cfg(any(test, feature = "testing"))]
    pub fn open_with_storage(
        dir: impl AsRef<Path>,
        config: EngineConfig,
        storage: Arc<dyn Storage>,
    ) -> Result<Engine, OpenError> {
        Engine::open_on(dir, config, storage)
    }

    fn open_on(
        dir: impl AsRef<Path>,
        config: EngineConfig,
        storage: Arc<dyn Storage>,
    ) -> Result<Engine, OpenError> {
        let root = dir.as_ref().to_owned();
        config.default_topic_config.validate()?;
        let dedupe_map = OffsetMap::new(config.cleaner_dedupe_buffer_bytes)?;
        let (dir, at_open) = DataDir::open(&root, storage.clone())?;
        let had_clean_shutdown = at_open.had_clean_shutdown;
        let first_dirty_offsets = at_open.first_dirty_offsets;
        let checkpoints = Checkpoints {
            dir,
            recovery_points: at_open.recovery_points,
            log_start_offsets: at_open.log_start_offsets,
        };
        let registry = TopicRegistry::load(storage.as_ref(), &root, &config.default_topic_config)?;
        let topics = Arc::new(RwLock::new(registry));
        let inflight_bytes = Arc::new(AtomicU64::new(0));
        let shard_count = match config.inline {
            true => 1,
            false => effective_shard_count(config.shard_count),
        };
        let mut shards = Vec::with_capacity(shard_count);
        for shard_id in 0..shard_count {
            let context = ShardContext {
                root: root.clone(),
                storage: storage.clone(),
                topics: topics.clone(),
                inflight_bytes: inflight_bytes.clone(),
                had_clean_shutdown,
                recovery_points: checkpoints.recovery_points.clone(),
                log_start_offsets: checkpoints.log_start_offsets.clone(),
                owns: Box::new(move |tp| shard_for(tp, shard_count) == shard_id),
                open_partitions_max: config.open_partitions_max.div_ceil(shard_count).max(1),
                open_segments_max: config.open_segments_max.div_ceil(shard_count).max(1),
                direct_writes: config.direct_writes,
                sync_inline_when_idle: config.sync_inline_when_idle,
                prewrite_synced_logs: config.prewrite_synced_logs,
                producer_id_expiration_ms: config.producer_id_expiration_ms,
                background_sync_bytes: config.background_sync_bytes,
                digest_budget: DigestBudget::new(config.lookup_digest_bytes_max),
                clock: config.clock.clone(),
                // An inline engine runs on its caller's thread alone (a simulation replays).
                open_threads: match config.inline {
                    true => 1,
                    false => shard::OPEN_THREADS,
                },
            };
            shards.push(match config.inline {
                true => inline_shard(context, &config)?,
                false => spawn_shard(shard_id, context, &config)?,
            });
        }
        let view = CleanerView {
            root: root.clone(),
            topics: topics.clone(),
        };
        let cleaner = spawn_cleaner(
            &config,
            dedupe_map,
            storage.clone(),
            (view, &shards),
            first_dirty_offsets,
        )?;
        let interval_ms = match config.inline {
            true => 0,
            false => config.recovery_point_checkpoint_interval_ms,
        };
        let inner = Arc::new(Inner {
            root,
            storage,
            shards,
            topics,
            admin: Mutex::new(checkpoints),
            inflight_bytes,
            config,
            closed: AtomicBool::new(false),
            offline: Mutex::new(None),
            cleaner,
            producer_ids: Mutex::default(),
        });
        let checkpointer = match interval_ms {
            0 => None,
            _ => Some(
                checkpointer::Checkpointer::spawn(
                    Arc::downgrade(&inner),
                    std::time::Duration::from_millis(interval_ms),
                )
                .map_err(|source| StorageError::io("spawn checkpointer", &inner.root, source))?,
            ),
        };
        let user = UserHandles {
            checkpointer: Mutex::new(checkpointer),
        };
        Ok(Engine {
            user: Some(Arc::new(user)),
            inner,
        })
    }

    /// The data directory the engine was opened on.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// How many shard threads the engine runs.
    pub fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }

    /// The shard that owns `topic`'s `partition`.
    pub fn shard_of(&self, topic: &TopicName, partition: PartitionId) -> usize {
        shard_for(
            &TopicPartition {
                topic: topic.clone(),
                partition,
            },
            self.inner.shards.len(),
        )
    }

    /// Appends whole batches (as a producer sends them) to a partition. The batches are validated
    /// here, on the caller's thread; the shard assigns offsets and writes. With
    /// [`Durability::Durable`] the answer comes after a sync that covers the append. An internal
    /// topic ([`is_internal_topic`]) is refused: only the engine's own components write it.
    pub fn append(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        batches: Bytes,
        durability: Durability,
    ) -> Pending<AppendInfo, AppendError> {
        if let Err(refused) = refuse_internal_append(topic) {
            return Pending::ready(Err(refused));
        }
        self.append_internal(topic, partition, batches, durability)
    }

    /// [`Engine::append`] to any topic, internal ones included: the group coordinator's path to
    /// `__consumer_offsets`.
    pub(crate) fn append_internal(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        batches: Bytes,
        durability: Durability,
    ) -> Pending<AppendInfo, AppendError> {
        let tp = TopicPartition {
            topic: topic.clone(),
            partition,
        };
        match self.validate(&tp, batches) {
            Ok(validated) => self.append_validated(tp, validated, durability),
            Err(error) => Pending::ready(Err(error)),
        }
    }

    /// Appends as a replica's owner does (a Raft log store, for one): only if the partition's log
    /// ends at `first_offset` (else [`AppendError::LogEndMismatch`], and nothing is written),
    /// stamping `leader_epoch` into each batch's `partitionLeaderEpoch`. Otherwise as
    /// [`Engine::append`]; an internal topic is refused.
    pub fn append_at(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        batches: Bytes,
        first_offset: Offset,
        leader_epoch: i32,
        durability: Durability,
    ) -> Pending<AppendInfo, AppendError> {
        if let Err(refused) = refuse_internal_append(topic) {
            return Pending::ready(Err(refused));
        }
        let tp = TopicPartition {
            topic: topic.clone(),
            partition,
        };
        match self.validate(&tp, batches) {
            Ok(validated) => {
                let validated = validated.into_replica_append(first_offset, leader_epoch);
                self.append_validated(tp, validated, durability)
            }
            Err(error) => Pending::ready(Err(error)),
        }
    }

    fn append_validated(
        &self,
        tp: TopicPartition,
        validated: ValidatedBatches,
        durability: Durability,
    ) -> Pending<AppendInfo, AppendError> {
        let size_bytes = validated.size_bytes();
        self.send_append(tp, size_bytes, durability, |tp, durable, reply| {
            Request::Append {
                tp,
                batches: validated,
                durable,
                reply,
            }
        })
    }

    /// Counts the append's bytes in flight and sends the `request` it makes to the partition's
    /// shard.
    fn send_append(
        &self,
        tp: TopicPartition,
        size_bytes: usize,
        durability: Durability,
        request: impl FnOnce(TopicPartition, bool, Reply<AppendInfo, AppendError>) -> Request,
    ) -> Pending<AppendInfo, AppendError> {
        let size_bytes = size_bytes as u64;
        if let Err(error) = self.reserve_inflight(size_bytes) {
            return Pending::ready(Err(error.into()));
        }
        let durable = durability == Durability::Durable;
        let shard = shard_for(&tp, self.inner.shards.len());
        let pending = self.send_to(shard, |reply| request(tp, durable, reply));
        if matches!(pending, SendOutcome::Refused(_)) {
            self.inner
                .inflight_bytes
                .fetch_sub(size_bytes, Ordering::AcqRel);
        }
        match durable {
            true => pending.into_pending().with_answer_spin(DURABLE_ANSWER_SPIN),
            false => pending.into_pending(),
        }
    }

    fn validate(
        &self,
        tp: &TopicPartition,
        batches: Bytes,
    ) -> Result<ValidatedBatches, AppendError> {
        ValidatedBatches::validate(batches, &self.append_config(tp)?)
    }

    /// The configuration an append to `tp` is validated with, if the engine takes appends.
    fn append_config(&self, tp: &TopicPartition) -> Result<LogConfig, AppendError> {
        self.check_open()?;
        self.partition_config(tp)
            .ok_or_else(|| AppendError::UnknownPartition {
                topic: tp.topic.to_string(),
                partition: tp.partition,
            })
    }

    fn reserve_inflight(&self, size_bytes: u64) -> Result<(), EngineUnavailable> {
        let limit_bytes = self.inner.config.inflight_bytes_max;
        let before = self
            .inner
            .inflight_bytes
            .fetch_add(size_bytes, Ordering::AcqRel);
        if before > 0 && before + size_bytes > limit_bytes {
            self.inner
                .inflight_bytes
                .fetch_sub(size_bytes, Ordering::AcqRel);
            return Err(EngineUnavailable::TooManyBytesInFlight {
                inflight_bytes: before,
                limit_bytes,
            });
        }
        Ok(())
    }

    /// Reads whole batches from `offset` (see [`FetchOptions`]).
    pub fn fetch(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        offset: Offset,
        options: FetchOptions,
    ) -> Pending<FetchData, ReadError> {
        self.read_request(topic, partition, |tp, reply| Request::Fetch {
            tp,
            offset,
            options,
            reply,
        })
    }

    /// The record at `offset` (a point lookup): the shard reads the batch holding it, checks
    /// its CRC and decodes just that record, so the caller walks no batch; in a batch it read
    /// before, it reads and checks only the 1 KiB chunks holding the record (`segment/lookup.rs`). `None` where the log
    /// holds no data record at `offset` (compaction removed it, a transaction marker, or
    /// `offset` is the log end); `OffsetOutOfRange` outside `[log start, log end]`. Reads up to
    /// the log end, as [`Isolation::LogEnd`].
    pub fn fetch_record(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        offset: Offset,
    ) -> Pending<Option<ConsumerRecord>, ReadError> {
        self.read_request(topic, partition, |tp, reply| Request::FetchRecord {
            tp,
            offset,
            reply,
        })
        .with_answer_spin(LOOKUP_ANSWER_SPIN)
    }

    /// The first offset whose record has a timestamp `>= timestamp` (Kafka's ListOffsets).
    pub fn fetch_by_timestamp(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        timestamp: TimestampMs,
    ) -> Pending<Option<TimestampOffset>, ReadError> {
        self.read_request(topic, partition, |tp, reply| Request::FetchByTimestamp {
            tp,
            timestamp,
            reply,
        })
    }

    /// Moves the partition's log start offset to `offset` (Kafka's DeleteRecords). Refused for an
    /// internal topic ([`is_internal_topic`]).
    pub fn delete_records(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        offset: Offset,
    ) -> Pending<Offset, DeleteRecordsError> {
        if is_internal_topic(topic.as_str()) {
            let topic = topic.to_string();
            return Pending::ready(Err(DeleteRecordsError::InternalTopic { topic }));
        }
        let tp = TopicPartition {
            topic: topic.clone(),
            partition,
        };
        if self.partition_config(&tp).is_none() {
            let error = DeleteRecordsError::UnknownPartition {
                topic: topic.to_string(),
                partition,
            };
            return Pending::ready(Err(error));
        }
        self.send(&tp, |reply| Request::DeleteRecords {
            tp: tp.clone(),
            offset,
            reply,
        })
        .into_pending()
    }

    /// Removes every record at or after `offset` (whole batches) from a partition: a replica
    /// dropping the suffix its leader does not have (Kafka's `truncateTo`). The writes and
    /// syncs in flight on the partition settle first; fetches parked past the new end are
    /// answered. Answers the new log end offset (`offset`, or less if a batch straddles it; the
    /// log end offset if that is lower). Refused below the log start offset and for an internal
    /// topic ([`is_internal_topic`]).
    pub fn truncate_to(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        offset: Offset,
    ) -> Pending<Offset, TruncateError> {
        self.truncate(topic, partition, Truncation::To(offset))
    }

    /// Removes every segment of a partition and starts it over, empty, at `offset` (log start
    /// and end): a replica catching up from its leader's log start (Kafka's
    /// `truncateFullyAndStartAt`). Answers `offset`. Refused for an internal topic.
    pub fn truncate_fully_and_start_at(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        offset: Offset,
    ) -> Pending<Offset, TruncateError> {
        self.truncate(topic, partition, Truncation::FullyAndStartAt(offset))
    }

    fn truncate(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        truncation: Truncation,
    ) -> Pending<Offset, TruncateError> {
        if is_internal_topic(topic.as_str()) {
            let topic = topic.to_string();
            return Pending::ready(Err(TruncateError::InternalTopic { topic }));
        }
        let tp = TopicPartition {
            topic: topic.clone(),
            partition,
        };
        if self.partition_config(&tp).is_none() {
            let error = TruncateError::UnknownPartition {
                topic: topic.to_string(),
                partition,
            };
            return Pending::ready(Err(error));
        }
        let (Truncation::To(offset) | Truncation::FullyAndStartAt(offset)) = truncation;
        // The cleaner starts again from the cut: what lies above it will be new.
        self.inner
            .cleaner
            .first_dirty_offsets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(tp.clone())
            .and_modify(|first_dirty| *first_dirty = (*first_dirty).min(offset));
        let shard = shard_for(&tp, self.inner.shards.len());
        let truncated = self
            .send(&tp, |reply| Request::Truncate {
                tp: tp.clone(),
                truncation,
                reply,
            })
            .into_pending();
        self.checkpoint_after(truncated, shard)
    }

    /// `truncated`, answered once the checkpoints hold the lowered recovery point too (as
    /// Kafka checkpoints after a truncation): an unclean open trusts the bytes below the
    /// checkpointed recovery point, which must not be the cut's stale, higher one. The wait and
    /// the checkpoint run on a thread of their own, so the answer can be awaited.
    fn checkpoint_after(
        &self,
        truncated: Pending<Offset, TruncateError>,
        shard: usize,
    ) -> Pending<Offset, TruncateError> {
        let engine = self.clone();
        let (answer, receiver) = oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("seglog-truncate".to_owned())
            .spawn(move || {
                let outcome = truncated.wait().and_then(|log_end_offset| {
                    engine.checkpoint().map_err(|error| match error {
                        FlushError::Storage(error) => TruncateError::Storage(error),
                        FlushError::Unavailable(error) => TruncateError::Unavailable(error),
                    })?;
                    Ok(log_end_offset)
                });
                let _ = answer.send(outcome);
            });
        match spawned {
            Ok(_) => Pending::waiting(receiver, shard),
            Err(source) => Pending::ready(Err(EngineUnavailable::NoThread {
                call: "truncate",
                cause: source.to_string(),
            }
            .into())),
        }
    }

    /// Syncs one partition's appended data.
    pub fn flush(&self, topic: &TopicName, partition: PartitionId) -> Pending<(), FlushError> {
        let tp = TopicPartition {
            topic: topic.clone(),
            partition,
        };
        self.send(&tp, |reply| Request::Flush {
            tp: Some(tp.clone()),
            reply,
        })
        .into_pending()
    }

    /// Syncs every open partition's appended data, on every shard. Blocks.
    pub fn flush_all(&self) -> Result<(), FlushError> {
        self.flush_all_requests()
            .into_iter()
            .try_for_each(Pending::wait)
    }

    /// One flush of every open partition per shard, sent.
    fn flush_all_requests(&self) -> Vec<Pending<(), FlushError>> {
        (0..self.inner.shards.len())
            .map(|shard| {
                self.send_to(shard, |reply| Request::Flush { tp: None, reply })
                    .into_pending()
            })
            .collect()
    }

    fn check_open(&self) -> Result<(), EngineUnavailable> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(EngineUnavailable::Closed);
        }
        match self.directory_failure() {
            Some(cause) => Err(EngineUnavailable::Offline {
                dir: self.inner.root.clone(),
                cause,
            }),
            None => Ok(()),
        }
    }

    /// Why the data directory is offline, if it is.
    fn directory_failure(&self) -> Option<String> {
        self.inner
            .offline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Sends the read `request` makes for `topic`-`partition` to its shard, or answers at once
    /// when the partition is unknown or the engine closed.
    fn read_request<T>(
        &self,
        topic: &TopicName,
        partition: PartitionId,
        request: impl FnOnce(TopicPartition, Reply<T, ReadError>) -> Request,
    ) -> Pending<T, ReadError> {
        let tp = TopicPartition {
            topic: topic.clone(),
            partition,
        };
        if let Err(error) = self.check_known(&tp) {
            return Pending::ready(Err(error));
        }
        let shard = shard_for(&tp, self.inner.shards.len());
        self.send_to(shard, |reply| request(tp, reply))
            .into_pending()
    }

    fn check_known(&self, tp: &TopicPartition) -> Result<(), ReadError> {
        self.check_open()?;
        match self.partition_config(tp) {
            Some(_) => Ok(()),
            None => Err(ReadError::UnknownPartition {
                topic: tp.topic.to_string(),
                partition: tp.partition,
            }),
        }
    }

    fn partition_config(&self, tp: &TopicPartition) -> Option<LogConfig> {
        let topics = self.inner.topics.read().ok()?;
        topics.partition_config(tp).cloned()
    }

    fn send<T, E>(
        &self,
        tp: &TopicPartition,
        request: impl FnOnce(oneshot::Sender<Result<T, E>>) -> Request,
    ) -> SendOutcome<T, E>
    where
        E: From<EngineUnavailable>,
    {
        self.send_to(shard_for(tp, self.inner.shards.len()), request)
    }

    fn send_to<T, E>(
        &self,
        shard: usize,
        request: impl FnOnce(oneshot::Sender<Result<T, E>>) -> Request,
    ) -> SendOutcome<T, E>
    where
        E: From<EngineUnavailable>,
    {
        if let Err(error) = self.check_open() {
            return SendOutcome::Refused(error);
        }
        let Some(handle) = self.inner.shards.get(shard) else {
            return SendOutcome::Refused(EngineUnavailable::Closed);
        };
        let Some(sender) = handle.sender.as_ref() else {
            return SendOutcome::Refused(EngineUnavailable::Closed);
        };
        if handle.stopped.load(Ordering::Acquire) {
            return SendOutcome::Refused(EngineUnavailable::ShardFailed { shard });
        }
        let (reply, receiver) = oneshot::channel();
        match sender.try_send(request(reply)) {
            Ok(()) => {
                // The shard may have stopped between the check and the send; a request it will
                // never read is dropped here, and its caller sees `ShardFailed`.
                handle.drain_if_stopped();
                SendOutcome::Sent(Pending::waiting(receiver, shard))
            }
            Err(TrySendError::Full(_)) => {
                SendOutcome::Refused(EngineUnavailable::QueueFull { shard })
            }
            Err(TrySendError::Disconnected(_)) => {
                SendOutcome::Refused(EngineUnavailable::ShardFailed { shard })
            }
        }
    }
}

/// Whether a request reached its shard.
enum SendOutcome<T, E> {
    Sent(Pending<T, E>),
    Refused(EngineUnavailable),
}

impl<T, E: From<EngineUnavailable>> SendOutcome<T, E> {
    fn into_pending(self) -> Pending<T, E> {
        match self {
            SendOutcome::Sent(pending) => pending,
            SendOutcome::Refused(error) => Pending::ready(Err(error.into())),
        }
    }
}

/// Idempotent producers' ids.
impl Engine {
    /// A producer id never handed out before by this data directory, for an idempotent producer
    /// (Kafka's `InitProducerId`; its epoch starts at 0). Blocks while a new block of ids is
    /// written durably, once per thousand ids.
    pub fn allocate_producer_id(&self) -> Result<i64, ProducerIdError> {
        self.check_open()?;
        self.inner
            .producer_ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .allocate(self.inner.storage.as_ref(), &self.inner.root)
    }
}

/// Topic administration. These calls block: they are rare and touch every shard.
impl Engine {
    /// Creates a topic with `partition_count` partitions and its configuration. When it returns,
    /// every partition's directory and first segment exist and are durable (each shard creates
    /// its share at the same time), so a first append pays no file creation. An internal topic
    /// ([`is_internal_topic`]) is refused: its owner creates it.
    pub fn create_topic(
        &self,
        topic: &str,
        partition_count: u32,
        config: LogConfig,
    ) -> Result<TopicName, TopicError> {
        let topic = TopicName::parse(topic)?;
        refuse_internal_topic(&topic)?;
        self.create_internal_topic(topic, partition_count, config)
    }

    /// [`Engine::create_topic`] of any topic, internal ones included: the group coordinator's
    /// path to `__consumer_offsets`.
    pub(crate) fn create_internal_topic(
        &self,
        topic: TopicName,
        partition_count: u32,
        config: LogConfig,
    ) -> Result<TopicName, TopicError> {
        config.validate()?;
        self.check_open()?;
        let _admin = self.lock_admin();
        {
            let mut topics = self.write_topics();
            if topics.get(&topic).is_some() {
                return Err(TopicError::TopicExists {
                    topic: topic.to_string(),
                });
            }
            if partition_count == 0 {
                return Err(TopicError::InvalidPartitionCount {
                    topic: topic.to_string(),
                    current: 0,
                    requested: 0,
                });
            }
            self.create_partition_dirs(&topic, 0..partition_count)?;
            topics.insert(
                topic.clone(),
                TopicMetadata {
                    partition_count,
                    config,
                },
            );
            topics.save(self.inner.storage.as_ref())?;
        }
        self.describe_partitions(&topic, 0..partition_count)?;
        Ok(topic)
    }

    /// Every topic with its metadata.
    pub fn list_topics(&self) -> Vec<(TopicName, TopicMetadata)> {
        let topics = self.read_topics();
        topics
            .topics()
            .iter()
            .map(|(topic, metadata)| (topic.clone(), metadata.clone()))
            .collect()
    }

    /// The topic's configuration and each partition's offsets and size.
    pub fn describe_topic(&self, topic: &str) -> Result<TopicDescription, TopicError> {
        let topic = TopicName::parse(topic)?;
        self.check_open()?;
        let metadata =
            self.read_topics()
                .get(&topic)
                .cloned()
                .ok_or_else(|| TopicError::UnknownTopic {
                    topic: topic.to_string(),
                })?;
        let partitions = self.describe_partitions(&topic, 0..metadata.partition_count)?;
        Ok(TopicDescription {
            topic,
            config: metadata.config,
            partitions,
        })
    }

    /// Each of `partitions`' offsets, size and segment count, in partition order: every shard
    /// opens its share (creating a new partition's first segment) at the same time.
    fn describe_partitions(
        &self,
        topic: &TopicName,
        partitions: std::ops::Range<u32>,
    ) -> Result<Vec<PartitionDescription>, TopicError> {
        let mut by_shard: BTreeMap<usize, Vec<TopicPartition>> = BTreeMap::new();
        for partition in partitions.clone() {
            let tp = TopicPartition {
                topic: topic.clone(),
                partition,
            };
            by_shard
                .entry(shard_for(&tp, self.inner.shards.len()))
                .or_default()
                .push(tp);
        }
        let pendings: Vec<Pending<Vec<PartitionDescription>, TopicError>> = by_shard
            .into_iter()
            .map(|(shard, tps)| {
                self.send_to(shard, |reply| Request::Describe { tps, reply })
                    .into_pending()
            })
            .collect();
        let mut descriptions = Vec::with_capacity(partitions.len());
        for pending in pendings {
            descriptions.extend(pending.wait()?);
        }
        descriptions.sort_by_key(|description| description.partition);
        Ok(descriptions)
    }

    /// One partition's offsets, size and segment count.
    pub fn describe_partition(
        &self,
        topic: &str,
        partition: PartitionId,
    ) -> Result<PartitionDescription, TopicError> {
        let topic = TopicName::parse(topic)?;
        self.check_open()?;
        let tp = TopicPartition { topic, partition };
        let unknown = || TopicError::UnknownPartition {
            topic: tp.topic.to_string(),
            partition,
        };
        if self.partition_config(&tp).is_none() {
            return Err(unknown());
        }
        let tps = vec![tp.clone()];
        let descriptions = self
            .send(&tp, |reply| Request::Describe { tps, reply })
            .into_pending()
            .wait()?;
        descriptions.into_iter().next().ok_or_else(unknown)
    }

    /// Grows a topic to `partition_count` partitions (Kafka never shrinks a topic); the new
    /// partitions' first segments are created before it returns, as in `create_topic`. Refused
    /// for an internal topic ([`is_internal_topic`]).
    pub fn add_partitions(&self, topic: &str, partition_count: u32) -> Result<(), TopicError> {
        let topic = TopicName::parse(topic)?;
        refuse_internal_topic(&topic)?;
        self.check_open()?;
        let _admin = self.lock_admin();
        let mut topics = self.write_topics();
        let current = topics
            .get(&topic)
            .map(|metadata| metadata.partition_count)
            .ok_or_else(|| TopicError::UnknownTopic {
                topic: topic.to_string(),
            })?;
        if partition_count <= current {
            return Err(TopicError::InvalidPartitionCount {
                topic: topic.to_string(),
                current,
                requested: partition_count,
            });
        }
        self.create_partition_dirs(&topic, current..partition_count)?;
        topics.set_partition_count(&topic, partition_count);
        topics.save(self.inner.storage.as_ref())?;
        drop(topics);
        self.describe_partitions(&topic, current..partition_count)?;
        Ok(())
    }

    /// Changes a topic's configuration (Kafka's IncrementalAlterConfigs): validates `config`,
    /// writes it to the topic registry durably, then has every shard holding one of the topic's
    /// partitions give it to their open logs, so that it takes effect without a restart and
    /// survives one. What a log reads as it runs (retention, the roll rules, the flush policy,
    /// the appends' limits, the cleaner's settings) follows at once; what a segment fixes when it
    /// is created (`segment.index.bytes`, `preallocate`) applies from the next segment. Retention
    /// applies the new limits at its next pass (`retention_check_interval_ms`, or
    /// [`Engine::apply_retention`]). Refused for an internal topic ([`is_internal_topic`]).
    ///
    /// An error once the registry is written (a shard's queue full, a failed shard) leaves the
    /// new configuration durable and the logs that missed it with the old one until they are
    /// next opened; calling again completes the change.
    pub fn alter_topic_config(&self, topic: &str, config: LogConfig) -> Result<(), TopicError> {
        self.update_topic_config(topic, |_| Ok(config)).map(drop)
    }

    /// [`Engine::alter_topic_config`] with the new configuration computed from the current one
    /// by `change` (for example with [`LogConfig::altered`]), under the lock that serialises
    /// topic administration, so that two changes at once never lose one. `change` must not call
    /// the engine's topic administration (it would wait for itself). Returns the new
    /// configuration; on any error before the registry is written nothing changed.
    pub fn update_topic_config(
        &self,
        topic: &str,
        change: impl FnOnce(&LogConfig) -> Result<LogConfig, ConfigError>,
    ) -> Result<LogConfig, TopicError> {
        let topic = TopicName::parse(topic)?;
        refuse_internal_topic(&topic)?;
        self.check_open()?;
        let _admin = self.lock_admin();
        let unknown = || TopicError::UnknownTopic {
            topic: topic.to_string(),
        };
        let metadata = self
            .read_topics()
            .get(&topic)
            .cloned()
            .ok_or_else(unknown)?;
        let config = change(&metadata.config)?;
        config.validate()?;
        {
            let mut topics = self.write_topics();
            let previous = topics
                .set_config(&topic, config.clone())
                .ok_or_else(unknown)?;
            if let Err(error) = topics.save(self.inner.storage.as_ref()) {
                topics.set_config(&topic, previous);
                return Err(error.into());
            }
        }
        let shards: std::collections::BTreeSet<usize> = (0..metadata.partition_count)
            .map(|partition| {
                let tp = TopicPartition {
                    topic: topic.clone(),
                    partition,
                };
                shard_for(&tp, self.inner.shards.len())
            })
            .collect();
        let pendings: Vec<Pending<(), TopicError>> = shards
            .into_iter()
            .map(|shard| {
                self.send_to(shard, |reply| Request::AlterConfig {
                    topic: topic.clone(),
                    config: Box::new(config.clone()),
                    reply,
                })
                .into_pending()
            })
            .collect();
        let mut first_error = None;
        for pending in pendings {
            if let Err(error) = pending.wait() {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(config), Err)
    }

    /// Deletes a topic: its shards drop the partitions, then the directories are removed. Refused
    /// for an internal topic ([`is_internal_topic`]).
    pub fn delete_topic(&self, topic: &str) -> Result<(), TopicError> {
        let topic = TopicName::parse(topic)?;
        refuse_internal_topic(&topic)?;
        self.check_open()?;
        let mut admin = self.lock_admin();
        let metadata = {
            let mut topics = self.write_topics();
            let metadata = topics
                .remove(&topic)
                .ok_or_else(|| TopicError::UnknownTopic {
                    topic: topic.to_string(),
                })?;
            topics.save(self.inner.storage.as_ref())?;
            metadata
        };
        let tps: Vec<TopicPartition> = (0..metadata.partition_count)
            .map(|partition| TopicPartition {
                topic: topic.clone(),
                partition,
            })
            .collect();
        let pendings: Vec<Pending<(), TopicError>> = (0..self.inner.shards.len())
            .map(|shard| {
                self.send_to(shard, |reply| Request::DropPartitions {
                    tps: tps.clone(),
                    reply,
                })
                .into_pending()
            })
            .collect();
        for pending in pendings {
            pending.wait()?;
        }
        for tp in &tps {
            admin.recovery_points.remove(tp);
            admin.log_start_offsets.remove(tp);
            self.inner
                .cleaner
                .first_dirty_offsets
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(tp);
            self.remove_partition_dir(tp)?;
        }
        sync_dir(self.inner.storage.as_ref(), &self.inner.root)?;
        Ok(())
    }

    fn create_partition_dirs(
        &self,
        topic: &TopicName,
        partitions: std::ops::Range<u32>,
    ) -> Result<(), StorageError> {
        let storage = self.inner.storage.as_ref();
        for partition in partitions {
            let tp = TopicPartition {
                topic: topic.clone(),
                partition,
            };
            let dir = self.inner.root.join(partition_dir_name(&tp));
            crate::segment::create_dir_all(storage, &dir)?;
        }
        sync_dir(storage, &self.inner.root)
    }

    /// Renames the directory with Kafka's `-delete` suffix, then removes it. A crash in between
    /// leaves a `-delete` directory that the next open removes.
    fn remove_partition_dir(&self, tp: &TopicPartition) -> Result<(), StorageError> {
        let storage = self.inner.storage.as_ref();
        let dir = self.inner.root.join(partition_dir_name(tp));
        if !storage.is_dir(&dir) {
            return Ok(());
        }
        let doomed = self
            .inner
            .root
            .join(format!("{}{DELETE_DIR_SUFFIX}", partition_dir_name(tp)));
        storage
            .rename(&dir, &doomed)
            .map_err(|source| StorageError::io("rename", &dir, source))?;
        storage
            .remove_dir_all(&doomed)
            .map_err(|source| StorageError::io("remove directory", &doomed, source))
    }

    fn lock_admin(&self) -> std::sync::MutexGuard<'_, Checkpoints> {
        self.inner
            .admin
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn read_topics(&self) -> std::sync::RwLockReadGuard<'_, TopicRegistry> {
        self.inner
            .topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_topics(&self) -> std::sync::RwLockWriteGuard<'_, TopicRegistry> {
        self.inner
            .topics
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Checkpoints and shutdown.
impl Engine {
    /// Writes the recovery-point and log-start-offset checkpoint files from every shard's state.
    pub fn checkpoint(&self) -> Result<(), FlushError> {
        self.write_shard_checkpoints(true)
    }

    /// The checkpoints as the shards know them; with `settle`, after the syncs in flight report
    /// (the background checkpoint does not wait for them: an older recovery point is safe).
    fn write_shard_checkpoints(&self, settle: bool) -> Result<(), FlushError> {
        // Held from the question to the write, so that rounds never interleave (an earlier
        // round's older log start offsets written over a later one's) and none writes after
        // `close` wrote its own (it sets `closed` first, then waits for this lock).
        let mut admin = self.lock_admin();
        self.check_open()?;
        let pendings: Vec<Pending<Vec<PartitionCheckpoint>, FlushError>> =
            (0..self.inner.shards.len())
                .map(|shard| {
                    self.send_to(shard, |reply| Request::Checkpoint { settle, reply })
                        .into_pending()
                })
                .collect();
        for pending in pendings {
            merge_checkpoints(&mut admin, pending.wait()?);
        }
        Ok(self.write_checkpoints(&mut admin)?)
    }

    /// Closes every partition cleanly, writes the checkpoints and the clean-shutdown marker, and
    /// stops the shards. Every clone of this handle answers `Closed` afterwards. With a partition
    /// (or the directory) offline, the checkpoints keep what the successful syncs covered, no
    /// marker is written, so that the next open recovers, and the error names the partition.
    pub fn close(&self) -> Result<(), FlushError> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.cleaner.stop();
        if let Some(user) = &self.user {
            user.stop_checkpointer();
        }
        let pendings: Vec<Pending<ShardClosed, FlushError>> = (0..self.inner.shards.len())
            .map(|shard| self.close_shard(shard))
            .collect();
        let result = self.finish_close(pendings);
        // Closed either way: no shard runs any more, and the next open recovers what needs it.
        self.lock_admin().dir.release();
        result
    }

    /// Waits for the shards' closes, writes the checkpoints, and the clean-shutdown marker when
    /// nothing is offline.
    fn finish_close(
        &self,
        pendings: Vec<Pending<ShardClosed, FlushError>>,
    ) -> Result<(), FlushError> {
        let mut admin = self.lock_admin();
        let mut first_error = None;
        let mut offline = Vec::new();
        for pending in pendings {
            match pending.wait() {
                Ok(closed) => {
                    merge_checkpoints(&mut admin, closed.checkpoints);
                    offline.extend(closed.offline);
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        for shard in &self.inner.shards {
            join_shard(shard);
        }
        if let Some(error) = first_error {
            return Err(error);
        }
        if let Some(cause) = self.directory_failure() {
            return Err(EngineUnavailable::Offline {
                dir: self.inner.root.clone(),
                cause,
            }
            .into());
        }
        self.write_checkpoints(&mut admin)?;
        if let Some(error) = offline_error(&self.inner.root, offline) {
            return Err(error.into());
        }
        Ok(admin.dir.mark_clean_shutdown()?)
    }

    /// Applies retention now to every partition (of `topic`, if given), on every shard, and
    /// reports what each pass did. Blocks.
    pub fn apply_retention(
        &self,
        topic: Option<&str>,
    ) -> Result<Vec<PartitionRetention>, TopicError> {
        let topic = topic.map(TopicName::parse).transpose()?;
        self.check_open()?;
        let pendings: Vec<Pending<Vec<PartitionRetention>, FlushError>> =
            (0..self.inner.shards.len())
                .map(|shard| {
                    let topic = topic.clone();
                    self.send_to(shard, |reply| Request::Retention { topic, reply })
                        .into_pending()
                })
                .collect();
        let mut reports = Vec::new();
        for pending in pendings {
            reports.extend(pending.wait().map_err(flush_into_topic_error)?);
        }
        reports.sort_by(|a, b| a.topic_partition.cmp(&b.topic_partition));
        Ok(reports)
    }

    /// Compacts every partition of the compacted topics (of `topic`, if given) now, on the
    /// cleaner thread (the owning shards swap the cleaned segments in), and records each one's
    /// progress in `cleaner-offset-checkpoint`. Blocks.
    pub fn compact(&self, topic: Option<&str>) -> Result<Vec<PartitionCompaction>, TopicError> {
        let topic = topic.map(TopicName::parse).transpose()?;
        self.check_open()?;
        let mut reports = self
            .inner
            .cleaner
            .call(|reply| CleanerRequest::Compact { topic, reply })
            .map_err(flush_into_topic_error)?;
        reports.sort_by(|a, b| a.topic_partition.cmp(&b.topic_partition));
        self.checkpoint().map_err(flush_into_topic_error)?;
        Ok(reports)
    }

    /// Scrubs every partition (of `topic`, if given) now, on the cleaner thread: re-reads each
    /// sealed segment and checks every batch's CRC and the offsets' continuity, reporting what
    /// it found (and adding it to [`Engine::cleaner_stats`]). Changes nothing. Blocks.
    pub fn scrub(
        &self,
        topic: Option<&str>,
    ) -> Result<Vec<(TopicPartition, ScrubOutcome)>, TopicError> {
        let topic = topic.map(TopicName::parse).transpose()?;
        self.check_open()?;
        let mut reports = self
            .inner
            .cleaner
            .call(|reply| CleanerRequest::Scrub { topic, reply })
            .map_err(flush_into_topic_error)?;
        reports.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(reports)
    }

    /// What the cleaner thread has done since the engine opened, and the partitions it could not
    /// clean (each with its last error and the time to its next attempt).
    pub fn cleaner_stats(&self) -> CleanerStats {
        self.inner.cleaner.stats()
    }

    fn close_shard(&self, shard: usize) -> Pending<ShardClosed, FlushError> {
        let failed = || Pending::ready(Err(EngineUnavailable::ShardFailed { shard }.into()));
        let Some(sender) = self
            .inner
            .shards
            .get(shard)
            .and_then(|handle| handle.sender.as_ref())
        else {
            return failed();
        };
        let (reply, receiver) = oneshot::channel();
        // The close request must get through even if the queue is momentarily full.
        match sender.send(Request::Close { reply }) {
            Ok(()) => Pending::waiting(receiver, shard),
            Err(_) => failed(),
        }
    }

    /// Writes the checkpoint files; a failure takes the data directory offline (which recovery
    /// points and log start offsets the device holds is unknown).
    fn write_checkpoints(&self, checkpoints: &mut Checkpoints) -> Result<(), StorageError> {
        let result = self.write_checkpoint_files(checkpoints);
        if let Err(error) = &result {
            tracing::error!(
                "the data directory {} goes offline: {error}",
                self.inner.root.display()
            );
            self.inner
                .offline
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get_or_insert_with(|| error.cause());
        }
        result
    }

    fn write_checkpoint_files(&self, checkpoints: &mut Checkpoints) -> Result<(), StorageError> {
        let first_dirty_offsets = self
            .inner
            .cleaner
            .first_dirty_offsets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        checkpoints.dir.write_checkpoints(
            &checkpoints.recovery_points,
            &checkpoints.log_start_offsets,
            Some(&first_dirty_offsets),
        )
    }
}

impl Drop for Inner {
    /// Dropping the last handle without `close` stops the shards without a clean shutdown: the
    /// next open recovers, and keeps every durable append.
    fn drop(&mut self) {
        // The cleaner holds senders to the shards: it stops first.
        self.cleaner.stop();
        for shard in &mut self.shards {
            shard.sender.take();
        }
        for shard in &self.shards {
            join_shard(shard);
        }
    }
}

fn join_shard(shard: &ShardHandle) {
    let thread = shard
        .thread
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(thread) = thread {
        let _ = thread.join();
    }
}

/// `InternalTopic` for an append to an internal topic ([`is_internal_topic`]).
fn refuse_internal_append(topic: &TopicName) -> Result<(), AppendError> {
    match is_internal_topic(topic.as_str()) {
        true => Err(AppendError::InternalTopic {
            topic: topic.to_string(),
        }),
        false => Ok(()),
    }
}

/// `InternalTopic` for an internal topic ([`is_internal_topic`]).
fn refuse_internal_topic(topic: &TopicName) -> Result<(), TopicError> {
    match is_internal_topic(topic.as_str()) {
        true => Err(TopicError::InternalTopic {
            topic: topic.to_string(),
        }),
        false => Ok(()),
    }
}

fn flush_into_topic_error(error: FlushError) -> TopicError {
    match error {
        FlushError::Storage(error) => TopicError::Storage(error),
        FlushError::Unavailable(error) => TopicError::Unavailable(error),
    }
}

fn merge_checkpoints(checkpoints: &mut Checkpoints, partitions: Vec<PartitionCheckpoint>) {
    for partition in partitions {
        checkpoints
            .recovery_points
            .insert(partition.tp.clone(), partition.recovery_point);
        checkpoints
            .log_start_offsets
            .insert(partition.tp, partition.log_start_offset);
    }
}

/// The error `close` returns when partitions were offline (each is logged), `None` if none was.
fn offline_error(root: &Path, offline: Vec<(TopicPartition, String)>) -> Option<StorageError> {
    let count = offline.len();
    for (tp, cause) in &offline {
        tracing::error!("{tp} was offline at close, the next open recovers it: {cause}");
    }
    let (tp, cause) = offline.into_iter().next()?;
    let cause = match count {
        1 => cause,
        _ => format!("{cause}; and {} more partitions offline", count - 1),
    };
    Some(StorageError::Offline {
        dir: root.join(partition_dir_name(&tp)),
        cause,
    })
}

fn effective_shard_count(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// The shard that owns `tp` (see the module documentation).
fn shard_for(tp: &TopicPartition, shard_count: usize) -> usize {
    let topic_hash = partitioner::to_positive(partitioner::murmur2(tp.topic.as_str().as_bytes()));
    ((u64::from(topic_hash) + u64::from(tp.partition)) % shard_count.max(1) as u64) as usize
}

/// Pins the calling thread to `core`. A refusal (`sched_setaffinity`: a cpuset or container that
/// excludes the core) leaves the thread unpinned and is logged, naming the thread and the core.
pub(crate) fn pin_current_thread(core: core_affinity::CoreId) {
    if !core_affinity::set_for_current(core) {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed");
        tracing::warn!(
            "thread {name} could not be pinned to core {}; it runs unpinned",
            core.id
        );
    }
}

fn spawn_shard(
    shard_id: usize,
    context: ShardContext,
    config: &EngineConfig,
) -> Result<ShardHandle, OpenError> {
    let (sender, receiver) = crossbeam_channel::bounded(config.queue_requests_max.max(1));
    let stopped = Arc::new(AtomicBool::new(false));
    let exit_drain = receiver.clone();
    let core = config
        .pin_shards
        .then(|| {
            core_affinity::get_core_ids()
                .and_then(|cores| cores.get(shard_id % cores.len().max(1)).copied())
        })
        .flatten();
    let thread_stopped = stopped.clone();
    let shard_thread_error = |source| OpenError::ShardThread {
        shard: shard_id,
        source,
    };
    let waker = Arc::new(ShardWaker::new().map_err(shard_thread_error)?);
    let syncer = Syncer::start(shard_id, context.storage.clone(), waker.clone())
        .map_err(shard_thread_error)?;
    let file_deleter =
        FileDeleter::start(shard_id, context.storage.clone()).map_err(shard_thread_error)?;
    let shard_waker = waker.clone();
    let thread = std::thread::Builder::new()
        .name(format!("seglog-shard-{shard_id}"))
        .spawn(move || {
            if let Some(core) = core {
                pin_current_thread(core);
            }
            context.storage.prepare_reader_thread();
            let drain = receiver.clone();
            let shard = Shard::new(
                shard_id,
                context,
                (receiver, shard_waker),
                syncer,
                file_deleter,
            );
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shard.run()));
            if outcome.is_err() {
                tracing::error!("shard {shard_id} panicked; its partitions fail with ShardFailed until the engine is reopened");
            }
            // Stopped first, then drained: a request sent after this drain sees the flag and is
            // drained by its sender (`Engine::send_to`).
            thread_stopped.store(true, Ordering::Release);
            drain.try_iter().for_each(drop);
        })
        .map_err(shard_thread_error)?;
    Ok(ShardHandle {
        sender: Some(ShardSender::new(sender, waker)),
        stopped,
        exit_drain,
        thread: Mutex::new(Some(thread)),
    })
}

/// An inline engine's shard (`inline.rs`): built here, run by the callers.
fn inline_shard(context: ShardContext, config: &EngineConfig) -> Result<ShardHandle, OpenError> {
    let (sender, receiver) = crossbeam_channel::bounded(config.queue_requests_max.max(1));
    let stopped = Arc::new(AtomicBool::new(false));
    let exit_drain = receiver.clone();
    let waker =
        Arc::new(ShardWaker::new().map_err(|source| OpenError::ShardThread { shard: 0, source })?);
    let syncer = Syncer::inline(context.storage.clone(), waker.clone());
    let file_deleter = FileDeleter::inline(context.storage.clone());
    let shard = Shard::new(0, context, (receiver, waker.clone()), syncer, file_deleter);
    let inline = Arc::new(InlineShard::new(shard, stopped.clone()));
    Ok(ShardHandle {
        sender: Some(ShardSender::inline(sender, waker, inline)),
        stopped,
        exit_drain,
        thread: Mutex::new(None),
    })
}

/// Starts the cleaner thread, pinned to `cleaner_core`, reaching every shard.
fn spawn_cleaner(
    config: &EngineConfig,
    map: OffsetMap,
    storage: Arc<dyn Storage>,
    (view, shards): (CleanerView, &[ShardHandle]),
    first_dirty_offsets: BTreeMap<TopicPartition, Offset>,
) -> Result<CleanerHandle, OpenError> {
    let links = shards
        .iter()
        .filter_map(|handle| {
            Some(ShardLink {
                sender: handle.sender.clone()?,
                stopped: handle.stopped.clone(),
                exit_drain: handle.exit_drain.clone(),
            })
        })
        .collect();
    let core = config.cleaner_core.and_then(|index| {
        core_affinity::get_core_ids().and_then(|cores| cores.get(index).copied())
    });
    let settings = CleanerSettings {
        backoff: std::time::Duration::from_millis(config.cleaner_backoff_ms),
        io_max_bytes_per_second: config.cleaner_io_max_bytes_per_second,
        scrub_interval: (config.scrub_interval_ms > 0)
            .then(|| std::time::Duration::from_millis(config.scrub_interval_ms)),
        core,
        retention_interval: std::time::Duration::from_millis(config.retention_check_interval_ms),
        clock: config.clock.clone(),
    };
    let first_dirty = (first_dirty_offsets, config.inline);
    CleanerHandle::start(map, settings, storage, (view, links), first_dirty)
        .map_err(|source| OpenError::CleanerThread { source })
}
