//! seglog's storage layer on the caller's thread: a `LogDir` with one partition, driven as the
//! crates are (no shard, no hand-over between threads). Appends of the same prebuilt batches as
//! the `seglog` engine row through `PartitionLog::append`, with `PartitionLog::flush` after each
//! in the sync cells; scans through `PartitionLog::read` and records decoded in place; lookups
//! through `PartitionLog::read_record`. Beside the engine's row it separates what a lookup costs
//! in the log from what the hand-over to a shard and back costs.

use std::path::{Path, PathBuf};

use seglog::config::LogConfig;
use seglog::io::storage_from_env;
use seglog::log::{LogWriteMode, PartitionLog, RecordRead};
use seglog::log_dir::LogDir;
use seglog::types::{Offset, TimestampMs, TopicName};

use super::LogStore;
use super::seglog_log::PrebuiltBatches;
use crate::workload::{Payloads, PeerError, PeerResult, ScanTotals, context};

const TOPIC: &str = "peers";
/// A scan's read size: Kafka's `max.partition.fetch.bytes` default, as the engine row fetches.
const SCAN_FETCH_BYTES: u64 = 1024 * 1024;
const APPEND_TIME_MS: TimestampMs = TimestampMs(1_700_000_000_000);

pub struct SeglogDir {
    dir: PathBuf,
    /// `None` only between the close and the open of `reopen`.
    log_dir: Option<LogDir>,
    topic: TopicName,
    batches: PrebuiltBatches,
    direct_writes: bool,
}

fn open_log_dir(dir: &Path, direct_writes: bool) -> PeerResult<LogDir> {
    let mode = LogWriteMode {
        direct_writes,
        ..LogWriteMode::default()
    };
    LogDir::open_with(dir, storage_from_env(), LogConfig::default(), mode)
        .map_err(context("LogDir::open"))
}

impl SeglogDir {
    pub fn open(dir: &Path, direct_writes: bool) -> PeerResult<SeglogDir> {
        let dir = dir.join("seglog-dir");
        let mut log_dir = open_log_dir(&dir, direct_writes)?;
        let topic = TopicName::parse(TOPIC).map_err(context("TopicName::parse"))?;
        log_dir
            .create_topic(&topic, 1)
            .map_err(context("LogDir::create_topic"))?;
        Ok(SeglogDir {
            dir,
            log_dir: Some(log_dir),
            topic,
            batches: PrebuiltBatches::default(),
            direct_writes,
        })
    }

    fn log(&mut self) -> PeerResult<&mut PartitionLog> {
        let log_dir = self
            .log_dir
            .as_mut()
            .ok_or_else(|| PeerError("LogDir closed".to_owned()))?;
        log_dir
            .partition(&self.topic, 0)
            .map_err(context("LogDir::partition"))
    }
}

impl LogStore for SeglogDir {
    fn append_batch(
        &mut self,
        payloads: &Payloads,
        first_offset: u64,
        sync: bool,
    ) -> PeerResult<()> {
        let batch = self.batches.batch(payloads, first_offset)?;
        let log = self.log()?;
        let info = log
            .append(batch, APPEND_TIME_MS)
            .map_err(context("PartitionLog::append"))?;
        if info.first_offset.0 != first_offset {
            return Err(PeerError(format!(
                "append gave first offset {}, expected {first_offset}",
                info.first_offset.0
            )));
        }
        if sync {
            log.flush().map_err(context("PartitionLog::flush"))?;
        }
        Ok(())
    }

    fn scan(&mut self, payloads: &Payloads) -> PeerResult<ScanTotals> {
        let mut totals = ScanTotals::default();
        let mut offset = 0;
        while offset < payloads.record_count {
            let data = self
                .log()?
                .read(Offset(offset), SCAN_FETCH_BYTES)
                .map_err(context("PartitionLog::read"))?;
            let mut after = None;
            for batch in data.batches() {
                let batch = batch.map_err(context("decoding a read batch"))?;
                after = Some(batch.last_offset() as u64 + 1);
                let section = batch
                    .record_section()
                    .map_err(context("decoding records"))?;
                for record in section.iter() {
                    let record = record.map_err(context("decoding a record"))?;
                    totals.add(record.value.map_or(0, <[u8]>::len));
                }
            }
            offset = after.ok_or_else(|| PeerError(format!("no batch read at {offset}")))?;
        }
        Ok(totals)
    }

    fn lookup(&mut self, payloads: &Payloads, offset: u64) -> PeerResult<()> {
        match self
            .log()?
            .read_record(Offset(offset))
            .map_err(context("PartitionLog::read_record"))?
        {
            RecordRead::Found(_, record) => {
                payloads.check(offset, record.value.as_deref().unwrap_or_default())
            }
            RecordRead::Invalid(error) => Err(PeerError(format!("record {offset}: {error}"))),
            RecordRead::Absent | RecordRead::PastEnd => {
                Err(PeerError(format!("record {offset} missing")))
            }
        }
    }

    fn reopen(&mut self) -> PeerResult<()> {
        if let Some(log_dir) = self.log_dir.take() {
            log_dir.close().map_err(context("LogDir::close"))?;
        }
        self.log_dir = Some(open_log_dir(&self.dir, self.direct_writes)?);
        Ok(())
    }
}

impl Drop for SeglogDir {
    fn drop(&mut self) {
        if let Some(log_dir) = self.log_dir.take() {
            let _ = log_dir.close();
        }
    }
}
