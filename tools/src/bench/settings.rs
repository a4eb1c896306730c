//! The resolved configuration of a run: the arguments with each preset's defaults applied.

use std::time::Duration;

use anyhow::bail;
use seglog::engine::Durability;
use seglog::format::Compression;
use seglog::io::IoBackend;

use super::args::{BenchArgs, BenchBackend, DirectIo, FlushMode, Workload};
use super::progress::Limit;

/// Appends in flight per producer, except in `group-commit` and `replicated` (one each),
/// `tail` and `serve`. Where an
/// append is acknowledged once the device has its bytes (`O_DIRECT`), the rate is the bytes in
/// flight over a write's latency: 32 × 64 KiB per producer keeps 4 MiB in flight with the
/// default two producers (fio's ruler keeps 16 × 1 MiB).
const APPENDS_INFLIGHT: usize = 32;
/// `tail`'s appends in flight per producer: its figure is the end-to-end latency, which a deeper
/// queue only lengthens.
const TAIL_APPENDS_INFLIGHT: usize = 8;
/// `serve`'s appends (and Produce requests) in flight per producer: its 16 producers keep as
/// many bytes in flight as `append`'s two.
const SERVE_APPENDS_INFLIGHT: usize = 4;
/// Partitions of `many-partitions` unless `--partitions`.
const MANY_PARTITIONS: u32 = 10_000;
/// Keys of `compaction` unless `--key-space`.
const COMPACTION_KEY_SPACE: u64 = 1000;
/// Bytes a batch holds beyond its records' values (header, record framing, a short key).
const BATCH_OVERHEAD_BYTES: u64 = 64;

#[derive(Debug, Clone)]
pub struct Settings {
    pub workload: Workload,
    pub producers: usize,
    pub consumers: usize,
    pub partitions: u32,
    pub record_size: usize,
    pub batch_bytes: usize,
    pub linger_ms: Option<u64>,
    pub key_space: Option<u64>,
    pub compression: Compression,
    /// `--throughput`: the producers' offered load, all together, at most (None: no cap).
    pub records_per_s_cap: Option<f64>,
    pub flush: FlushMode,
    pub limit: Limit,
    pub backend: IoBackend,
    pub backend_name: &'static str,
    pub shards: Option<usize>,
    /// Whether the engine writes with `O_DIRECT` (`--direct-io`).
    pub direct_io: bool,
    pub direct_cold_reads: bool,
    pub prewrite: bool,
    pub background_sync_bytes: u64,
    pub segment_bytes: Option<u64>,
    pub retention_bytes: Option<u64>,
}

impl Settings {
    pub fn from_args(args: &BenchArgs) -> anyhow::Result<Settings> {
        let producers = args.producers.unwrap_or(match args.workload {
            Workload::GroupCommit | Workload::Replicated | Workload::Serve => 16,
            _ => 2,
        });
        let limit = match (args.records, args.duration) {
            (Some(records), _) => Limit::Records(records),
            (None, Some(seconds)) => Limit::Time(Duration::from_secs_f64(seconds)),
            (None, None) => Limit::Time(Duration::from_secs(3)),
        };
        let (backend, backend_name) = match args.backend {
            Some(BenchBackend::Uring) => (IoBackend::IoUring, "uring"),
            Some(BenchBackend::Pio) => (IoBackend::PositionedIo, "pio"),
            None => (IoBackend::from_env(), "auto"),
        };
        let partitions = args.partitions.unwrap_or(match args.workload {
            Workload::ManyPartitions => MANY_PARTITIONS,
            Workload::CreatePartitions => super::create_partitions::CREATE_PARTITIONS,
            _ => 4,
        });
        let batch_bytes = args.batch_bytes.unwrap_or(match args.workload {
            // One record per batch: a random fetch reads one record.
            Workload::RandomFetch => args.record_size + BATCH_OVERHEAD_BYTES,
            _ => 64 * 1024,
        });
        if args.record_size + BATCH_OVERHEAD_BYTES > batch_bytes {
            bail!(
                "--batch-bytes {batch_bytes} cannot hold one record of --record-size {} (with its headers)",
                args.record_size
            );
        }
        if matches!(args.workload, Workload::Replicated | Workload::Serve)
            && args.linger_ms.is_some()
        {
            bail!(
                "--linger-ms: the {} workload produces whole batches only",
                args.workload.name()
            );
        }
        let key_space = args.key_space.or(match args.workload {
            Workload::Compaction => Some(COMPACTION_KEY_SPACE),
            _ => None,
        });
        Ok(Settings {
            workload: args.workload,
            producers,
            consumers: args.consumers,
            partitions,
            record_size: args.record_size as usize,
            batch_bytes: batch_bytes as usize,
            linger_ms: args.linger_ms,
            key_space,
            compression: args.compression_type,
            records_per_s_cap: args.throughput.filter(|records_per_s| *records_per_s > 0.0),
            flush: args.flush,
            limit,
            backend,
            backend_name,
            shards: args.shards,
            direct_io: args.direct_io == DirectIo::On,
            direct_cold_reads: args.direct_reads,
            prewrite: !args.no_prewrite,
            background_sync_bytes: args.background_sync_mb.saturating_mul(1024 * 1024),
            segment_bytes: args.segment_bytes,
            retention_bytes: args.retention_bytes,
        })
    }

    /// Whether every append waits for a sync: `group-commit`, `replicated` (its single-node
    /// baseline is `group-commit`'s phase), `--flush batch`.
    pub fn durable_appends(&self) -> bool {
        matches!(self.workload, Workload::GroupCommit | Workload::Replicated)
            || self.flush == FlushMode::Batch
    }

    pub fn durability(&self) -> Durability {
        if self.durable_appends() {
            Durability::Durable
        } else {
            Durability::Written
        }
    }

    pub fn appends_inflight(&self) -> usize {
        match self.workload {
            Workload::GroupCommit | Workload::Replicated => 1,
            Workload::Tail => TAIL_APPENDS_INFLIGHT,
            Workload::Serve => SERVE_APPENDS_INFLIGHT,
            _ => APPENDS_INFLIGHT,
        }
    }

    /// The name of the append-acknowledgement phase: `durable` when appends wait for a sync.
    pub fn ack_name(&self) -> &'static str {
        if self.durable_appends() {
            "durable"
        } else {
            "append"
        }
    }

    /// Whether each append needs a batch of its own (random keys, a clock stamp, or compression
    /// to pay for), rather than one prebuilt batch appended again and again.
    pub fn fresh_batches(&self) -> bool {
        self.key_space.is_some()
            || self.compression != Compression::None
            || self.workload == Workload::Tail
    }

    /// About how many records fill a batch.
    pub fn records_per_batch(&self) -> usize {
        (self.batch_bytes / (self.record_size + 16)).max(1)
    }
}
