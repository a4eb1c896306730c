//! seglog on the caller's thread: the inline engine (`EngineConfig::inline`: the shard's code run
//! by the calling thread, no shard thread, no hand-over between threads) with one partition.
//! Appends of the same prebuilt batches as the `seglog` engine row through `Engine::append`
//! (`Durability::Written`), with `Engine::flush` after each in the sync cells; scans through
//! `Engine::fetch` of 1 MiB, one at a time, and records decoded in place; lookups through
//! `Engine::fetch_record`. Beside the threaded engine's row it separates what a lookup costs in
//! the shard's code from what the hand-over to a shard thread and back costs.

use std::path::{Path, PathBuf};

use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions};
use seglog::types::{Offset, TopicName};

use super::LogStore;
use super::seglog_log::PrebuiltBatches;
use crate::workload::{Payloads, PeerError, PeerResult, ScanTotals, context};

const TOPIC: &str = "peers";
/// A scan's fetch size: Kafka's `max.partition.fetch.bytes` default, as the engine row fetches.
const SCAN_FETCH_BYTES: u64 = 1024 * 1024;

pub struct SeglogInline {
    dir: PathBuf,
    engine: Engine,
    topic: TopicName,
    batches: PrebuiltBatches,
    direct_writes: bool,
}

fn engine_config(direct_writes: bool) -> EngineConfig {
    EngineConfig {
        inline: true,
        pin_shards: false,
        direct_writes,
        ..EngineConfig::default()
    }
}

fn open_engine(dir: &Path, direct_writes: bool) -> PeerResult<Engine> {
    Engine::open(dir, engine_config(direct_writes)).map_err(context("Engine::open (inline)"))
}

impl SeglogInline {
    pub fn open(dir: &Path, direct_writes: bool) -> PeerResult<SeglogInline> {
        let dir = dir.join("seglog-inline");
        let engine = open_engine(&dir, direct_writes)?;
        let topic = engine
            .create_topic(TOPIC, 1, LogConfig::default())
            .map_err(context("create_topic"))?;
        Ok(SeglogInline {
            dir,
            engine,
            topic,
            batches: PrebuiltBatches::default(),
            direct_writes,
        })
    }
}

impl LogStore for SeglogInline {
    fn append_batch(
        &mut self,
        payloads: &Payloads,
        first_offset: u64,
        sync: bool,
    ) -> PeerResult<()> {
        let batch = self.batches.batch(payloads, first_offset)?;
        let info = self
            .engine
            .append(&self.topic, 0, batch, Durability::Written)
            .wait()
            .map_err(context("append"))?;
        if info.first_offset.0 != first_offset {
            return Err(PeerError(format!(
                "append gave first offset {}, expected {first_offset}",
                info.first_offset.0
            )));
        }
        if sync {
            let flushed = self.engine.flush(&self.topic, 0).wait();
            flushed.map_err(context("flush"))?;
        }
        Ok(())
    }

    fn scan(&mut self, payloads: &Payloads) -> PeerResult<ScanTotals> {
        let options = FetchOptions {
            max_bytes: SCAN_FETCH_BYTES,
            ..FetchOptions::default()
        };
        let mut totals = ScanTotals::default();
        let mut offset = 0;
        while offset < payloads.record_count {
            let data = self
                .engine
                .fetch(&self.topic, 0, Offset(offset), options)
                .wait()
                .map_err(context("fetch"))?;
            let mut after = None;
            for batch in data.batches() {
                let batch = batch.map_err(context("decoding a fetched batch"))?;
                after = Some(batch.last_offset() as u64 + 1);
                let section = batch
                    .record_section()
                    .map_err(context("decoding records"))?;
                for record in section.iter() {
                    let record = record.map_err(context("decoding a record"))?;
                    totals.add(record.value.map_or(0, <[u8]>::len));
                }
            }
            offset = after.ok_or_else(|| PeerError(format!("no batch fetched at {offset}")))?;
        }
        Ok(totals)
    }

    fn lookup(&mut self, payloads: &Payloads, offset: u64) -> PeerResult<()> {
        // The engine's point lookup, run by this thread: the shard's code decodes the one record
        // out of its batch.
        let record = self
            .engine
            .fetch_record(&self.topic, 0, Offset(offset))
            .wait()
            .map_err(context("fetch_record"))?
            .ok_or_else(|| PeerError(format!("record {offset} missing")))?;
        payloads.check(offset, record.value.as_deref().unwrap_or_default())
    }

    fn reopen(&mut self) -> PeerResult<()> {
        self.engine.close().map_err(context("Engine::close"))?;
        self.engine = open_engine(&self.dir, self.direct_writes)?;
        Ok(())
    }
}

impl Drop for SeglogInline {
    fn drop(&mut self) {
        let _ = self.engine.close();
    }
}
