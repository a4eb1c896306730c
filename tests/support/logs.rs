//! Partition logs opened over a storage (the backend `SEGLOG_IO_BACKEND` names,
//! `storage_from_env`, or a test's own), and what they serve.

use std::path::Path;
use std::sync::Arc;

use seglog::config::LogConfig;
use seglog::error::OpenError;
use seglog::format::Batch;
use seglog::io::Storage;
use seglog::log::{LogOpenOptions, LogWriteMode, PartitionLog, RecoveryReport};
use seglog::types::{Offset, TimestampMs, TopicName, TopicPartition};

use super::batches::batches_from;

/// Partition 0 of `topic`.
pub fn partition_0(topic: &str) -> TopicPartition {
    TopicPartition {
        topic: TopicName::parse(topic).unwrap(),
        partition: 0,
    }
}

/// How a log opens: after a clean shutdown or not, recovering from `recovery_point`, without a
/// log-start-offset checkpoint, at `now_ms`.
pub fn open_options(clean: bool, recovery_point: u64, now_ms: i64) -> LogOpenOptions {
    LogOpenOptions {
        had_clean_shutdown: clean,
        recovery_point: Offset(recovery_point),
        log_start_offset: None,
        now: TimestampMs(now_ms),
        mode: LogWriteMode::default(),
    }
}

/// Opens partition 0 of `topic` in `dir` (the partition's own directory) through `storage`.
pub fn try_open_log(
    storage: Arc<dyn Storage>,
    dir: &Path,
    topic: &str,
    config: LogConfig,
    options: LogOpenOptions,
) -> Result<(PartitionLog, RecoveryReport), OpenError> {
    PartitionLog::open(storage, dir, partition_0(topic), config, options)
}

/// [`try_open_log`], which must succeed.
pub fn open_log(
    storage: Arc<dyn Storage>,
    dir: &Path,
    topic: &str,
    config: LogConfig,
    options: LogOpenOptions,
) -> PartitionLog {
    try_open_log(storage, dir, topic, config, options)
        .unwrap()
        .0
}

/// Every batch the log serves from its log start on, read 1 MiB at a time. Every offset below
/// the log end must serve a batch.
pub fn log_batches(log: &mut PartitionLog) -> Vec<Batch> {
    let (start, end) = (log.log_start_offset().0, log.log_end_offset().0);
    let batches = batches_from(start, |offset| {
        log.read(offset, 1 << 20).map(|data| data.records)
    });
    let batches = batches.unwrap();
    let next = batches
        .last()
        .map_or(start, |batch| batch.last_offset() as u64 + 1);
    assert!(
        next >= end,
        "offset {next} below the log end {end} reads nothing"
    );
    batches
}
