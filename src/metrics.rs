//! The engine's metrics, through the [`metrics`] facade: whatever recorder the host installs
//! (a Prometheus exporter, a statsd sink) receives them; with none installed they cost a no-op.
//!
//! Names follow Prometheus' conventions (`_total` counters, units in the name). Per-shard series
//! carry a `shard` label; none carries a partition (a label per partition would grow without
//! bound). `docs/METRICS.md` lists them all.
//!
//! Handles are registered once, when a shard, its sync threads or the cleaner start
//! (`ShardMetrics`, `SyncMetrics`, `CleanerMetrics`), and updated per written group, sync,
//! fetch or pass, never looked up per record. A recorder installed after the engine opened sees
//! none of them.

use metrics::{Counter, Gauge, Histogram, Unit};

/// Every metric: name, kind, unit and meaning (what [`describe`] registers).
const METRICS: &[(&str, Kind, Unit, &str)] = &[
    (
        APPEND_RECORDS,
        Kind::Counter,
        Unit::Count,
        "Records appended",
    ),
    (
        APPEND_BYTES,
        Kind::Counter,
        Unit::Bytes,
        "Bytes of batches appended",
    ),
    (
        APPEND_BATCHES,
        Kind::Counter,
        Unit::Count,
        "Batches appended",
    ),
    (FETCHES, Kind::Counter, Unit::Count, "Fetches answered"),
    (
        FETCH_BYTES,
        Kind::Counter,
        Unit::Bytes,
        "Bytes of batches fetches returned",
    ),
    (
        FETCH_WAITS,
        Kind::Counter,
        Unit::Count,
        "Fetches parked to wait for min_bytes (long polls)",
    ),
    (
        SYNCS,
        Kind::Counter,
        Unit::Count,
        "fdatasync calls of active and sealed segments (group commits, flush policies, rolls)",
    ),
    (
        SYNC_BYTES,
        Kind::Histogram,
        Unit::Bytes,
        "Bytes of appends one group commit made durable",
    ),
    (
        SYNC_APPENDS,
        Kind::Histogram,
        Unit::Count,
        "Appends one group commit answered",
    ),
    (
        SYNC_SECONDS,
        Kind::Histogram,
        Unit::Seconds,
        "Time of one round of fdatasync calls (a group commit, a flush)",
    ),
    (
        WRITE_SECONDS,
        Kind::Histogram,
        Unit::Seconds,
        "Time of a partition's group write, from its start to its completion",
    ),
    (
        READ_SECONDS,
        Kind::Histogram,
        Unit::Seconds,
        "Time of one fetch's read",
    ),
    (
        QUEUE_REQUESTS,
        Kind::Gauge,
        Unit::Count,
        "Requests queued for the shard",
    ),
    (
        WRITING_BYTES,
        Kind::Gauge,
        Unit::Bytes,
        "Bytes the shard has written behind and not seen complete",
    ),
    (
        INFLIGHT_BYTES,
        Kind::Gauge,
        Unit::Bytes,
        "Bytes of appends accepted and not yet written (EngineConfig::inflight_bytes_max)",
    ),
    (PARTITIONS_OPEN, Kind::Gauge, Unit::Count, "Partitions open"),
    (
        PARTITIONS_EVICTED,
        Kind::Counter,
        Unit::Count,
        "Partitions closed to bound open files",
    ),
    (
        PARTITIONS_OFFLINE,
        Kind::Gauge,
        Unit::Count,
        "Partitions offline after a storage failure",
    ),
    (
        SEGMENTS_OPEN,
        Kind::Gauge,
        Unit::Count,
        "Segment .log descriptors open",
    ),
    (
        SEGMENTS_ROLLED,
        Kind::Counter,
        Unit::Count,
        "Segments sealed by a roll",
    ),
    (
        RETENTION_SEGMENTS_DELETED,
        Kind::Counter,
        Unit::Count,
        "Segments retention deleted",
    ),
    (
        RETENTION_BYTES_DELETED,
        Kind::Counter,
        Unit::Bytes,
        "Bytes of the segments retention deleted",
    ),
    (
        CLEANER_READ_BYTES,
        Kind::Counter,
        Unit::Bytes,
        "Bytes of segments compaction cleaned (before)",
    ),
    (
        CLEANER_WRITTEN_BYTES,
        Kind::Counter,
        Unit::Bytes,
        "Bytes compaction wrote (after)",
    ),
    (
        CLEANER_DIRTY_RATIO,
        Kind::Gauge,
        Unit::Count,
        "Largest dirty share of a compacted log at the cleaner's last check",
    ),
    (
        SCRUB_CORRUPT_SEGMENTS,
        Kind::Counter,
        Unit::Count,
        "Corrupt sealed segments the scrubber found",
    ),
];

/// `seglog_append_records_total` (counter, `shard`).
pub const APPEND_RECORDS: &str = "seglog_append_records_total";
/// `seglog_append_bytes_total` (counter, `shard`).
pub const APPEND_BYTES: &str = "seglog_append_bytes_total";
/// `seglog_append_batches_total` (counter, `shard`).
pub const APPEND_BATCHES: &str = "seglog_append_batches_total";
/// `seglog_fetches_total` (counter, `shard`).
pub const FETCHES: &str = "seglog_fetches_total";
/// `seglog_fetch_bytes_total` (counter, `shard`).
pub const FETCH_BYTES: &str = "seglog_fetch_bytes_total";
/// `seglog_fetch_waits_total` (counter, `shard`).
pub const FETCH_WAITS: &str = "seglog_fetch_waits_total";
/// `seglog_syncs_total` (counter, `shard`).
pub const SYNCS: &str = "seglog_syncs_total";
/// `seglog_sync_bytes` (histogram, `shard`).
pub const SYNC_BYTES: &str = "seglog_sync_bytes";
/// `seglog_sync_appends` (histogram, `shard`).
pub const SYNC_APPENDS: &str = "seglog_sync_appends";
/// `seglog_sync_duration_seconds` (histogram, `shard`).
pub const SYNC_SECONDS: &str = "seglog_sync_duration_seconds";
/// `seglog_write_duration_seconds` (histogram, `shard`).
pub const WRITE_SECONDS: &str = "seglog_write_duration_seconds";
/// `seglog_read_duration_seconds` (histogram, `shard`).
pub const READ_SECONDS: &str = "seglog_read_duration_seconds";
/// `seglog_queue_requests` (gauge, `shard`).
pub const QUEUE_REQUESTS: &str = "seglog_queue_requests";
/// `seglog_writing_bytes` (gauge, `shard`).
pub const WRITING_BYTES: &str = "seglog_writing_bytes";
/// `seglog_inflight_bytes` (gauge).
pub const INFLIGHT_BYTES: &str = "seglog_inflight_bytes";
/// `seglog_partitions_open` (gauge, `shard`).
pub const PARTITIONS_OPEN: &str = "seglog_partitions_open";
/// `seglog_partitions_evicted_total` (counter, `shard`).
pub const PARTITIONS_EVICTED: &str = "seglog_partitions_evicted_total";
/// `seglog_partitions_offline` (gauge, `shard`).
pub const PARTITIONS_OFFLINE: &str = "seglog_partitions_offline";
/// `seglog_segments_open` (gauge, `shard`).
pub const SEGMENTS_OPEN: &str = "seglog_segments_open";
/// `seglog_segments_rolled_total` (counter, `shard`).
pub const SEGMENTS_ROLLED: &str = "seglog_segments_rolled_total";
/// `seglog_retention_segments_deleted_total` (counter, `shard`).
pub const RETENTION_SEGMENTS_DELETED: &str = "seglog_retention_segments_deleted_total";
/// `seglog_retention_bytes_deleted_total` (counter, `shard`).
pub const RETENTION_BYTES_DELETED: &str = "seglog_retention_bytes_deleted_total";
/// `seglog_cleaner_read_bytes_total` (counter).
pub const CLEANER_READ_BYTES: &str = "seglog_cleaner_read_bytes_total";
/// `seglog_cleaner_written_bytes_total` (counter).
pub const CLEANER_WRITTEN_BYTES: &str = "seglog_cleaner_written_bytes_total";
/// `seglog_cleaner_dirty_ratio` (gauge).
pub const CLEANER_DIRTY_RATIO: &str = "seglog_cleaner_dirty_ratio";
/// `seglog_scrub_corrupt_segments_total` (counter).
pub const SCRUB_CORRUPT_SEGMENTS: &str = "seglog_scrub_corrupt_segments_total";

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Registers every metric's unit and description with the installed recorder (a Prometheus
/// exporter prints them as `# HELP`). Optional; call it after installing the recorder.
pub fn describe() {
    for &(name, kind, unit, help) in METRICS {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, unit, help),
            Kind::Gauge => metrics::describe_gauge!(name, unit, help),
            Kind::Histogram => metrics::describe_histogram!(name, unit, help),
        }
    }
}

/// A shard's handles, registered when it starts.
pub(crate) struct ShardMetrics {
    pub append_records: Counter,
    pub append_bytes: Counter,
    pub append_batches: Counter,
    pub fetches: Counter,
    pub fetch_bytes: Counter,
    pub fetch_waits: Counter,
    pub write_seconds: Histogram,
    pub read_seconds: Histogram,
    pub queue_requests: Gauge,
    pub writing_bytes: Gauge,
    pub inflight_bytes: Gauge,
    pub partitions_open: Gauge,
    pub partitions_evicted: Counter,
    pub partitions_offline: Gauge,
    pub segments_open: Gauge,
    pub segments_rolled: Counter,
    pub retention_segments_deleted: Counter,
    pub retention_bytes_deleted: Counter,
    /// The syncs the shard makes itself (a lone sync, `flush.ms`).
    pub sync: SyncMetrics,
}

impl ShardMetrics {
    pub(crate) fn new(shard: usize) -> ShardMetrics {
        let label = shard.to_string();
        let counter = |name: &'static str| metrics::counter!(name, "shard" => label.clone());
        let gauge = |name: &'static str| metrics::gauge!(name, "shard" => label.clone());
        let histogram = |name: &'static str| metrics::histogram!(name, "shard" => label.clone());
        ShardMetrics {
            append_records: counter(APPEND_RECORDS),
            append_bytes: counter(APPEND_BYTES),
            append_batches: counter(APPEND_BATCHES),
            fetches: counter(FETCHES),
            fetch_bytes: counter(FETCH_BYTES),
            fetch_waits: counter(FETCH_WAITS),
            write_seconds: histogram(WRITE_SECONDS),
            read_seconds: histogram(READ_SECONDS),
            queue_requests: gauge(QUEUE_REQUESTS),
            writing_bytes: gauge(WRITING_BYTES),
            inflight_bytes: metrics::gauge!(INFLIGHT_BYTES),
            partitions_open: gauge(PARTITIONS_OPEN),
            partitions_evicted: counter(PARTITIONS_EVICTED),
            partitions_offline: gauge(PARTITIONS_OFFLINE),
            segments_open: gauge(SEGMENTS_OPEN),
            segments_rolled: counter(SEGMENTS_ROLLED),
            retention_segments_deleted: counter(RETENTION_SEGMENTS_DELETED),
            retention_bytes_deleted: counter(RETENTION_BYTES_DELETED),
            sync: SyncMetrics::new(shard),
        }
    }
}

/// The group-commit handles of one shard, shared by its sync threads.
#[derive(Clone)]
pub(crate) struct SyncMetrics {
    pub syncs: Counter,
    pub bytes: Histogram,
    pub appends: Histogram,
    pub seconds: Histogram,
}

impl SyncMetrics {
    pub(crate) fn new(shard: usize) -> SyncMetrics {
        let label = shard.to_string();
        SyncMetrics {
            syncs: metrics::counter!(SYNCS, "shard" => label.clone()),
            bytes: metrics::histogram!(SYNC_BYTES, "shard" => label.clone()),
            appends: metrics::histogram!(SYNC_APPENDS, "shard" => label.clone()),
            seconds: metrics::histogram!(SYNC_SECONDS, "shard" => label),
        }
    }

    /// One group commit: `files` synced in `seconds`, making `bytes` of `appends` durable.
    pub(crate) fn record(&self, files: usize, seconds: f64, bytes: u64, appends: usize) {
        self.syncs.increment(files as u64);
        self.seconds.record(seconds);
        if appends > 0 {
            self.bytes.record(bytes as f64);
            self.appends.record(appends as f64);
        }
    }
}

/// The cleaner thread's handles (one per engine).
pub(crate) struct CleanerMetrics {
    pub read_bytes: Counter,
    pub written_bytes: Counter,
    pub dirty_ratio: Gauge,
    pub scrub_corrupt_segments: Counter,
}

impl CleanerMetrics {
    pub(crate) fn new() -> CleanerMetrics {
        CleanerMetrics {
            read_bytes: metrics::counter!(CLEANER_READ_BYTES),
            written_bytes: metrics::counter!(CLEANER_WRITTEN_BYTES),
            dirty_ratio: metrics::gauge!(CLEANER_DIRTY_RATIO),
            scrub_corrupt_segments: metrics::counter!(SCRUB_CORRUPT_SEGMENTS),
        }
    }
}
