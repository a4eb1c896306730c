//! seglog on the caller's thread: the inline engine (`EngineConfig::inline`: the shard's code run
//! by the calling thread, no shard thread, no hand-over between threads) with one partition.
//! Appends of the same prebuilt batches as the `seglog` engine row through `Engine::append`
//! (`Durability::Written`), with `Engine::flush` after each in the sync cells; scans through
//! `Engine::fetch` of 1 MiB, one at a time, and records decoded in place; lookups through
//! `Engine::fetch_record`. Beside the threaded engine's row it separates what a lookup costs in
//! the shard's code from what the hand-over to a shard thread and back costs.

use std::path::Path;

use seglog::engine::{Durability, EngineConfig, FetchOptions};
use seglog::types::Offset;

use super::LogStore;
use super::seglog_log::{SeglogEngine, read_records};
use crate::workload::{Payloads, PeerError, PeerResult, ScanTotals, context};

/// A scan's fetch size: Kafka's `max.partition.fetch.bytes` default, as the engine row fetches.
const SCAN_FETCH_BYTES: u64 = 1024 * 1024;

pub struct SeglogInline {
    seglog: SeglogEngine,
}

fn engine_config(direct_writes: bool) -> EngineConfig {
    EngineConfig::default()
        .with_inline(true)
        .with_pin_shards(false)
        .with_direct_writes(direct_writes)
}

impl SeglogInline {
    pub fn open(dir: &Path, direct_writes: bool) -> PeerResult<SeglogInline> {
        let dir = dir.join("seglog-inline");
        let seglog = SeglogEngine::open(dir, engine_config(direct_writes))?;
        Ok(SeglogInline { seglog })
    }
}

impl LogStore for SeglogInline {
    fn append_batch(
        &mut self,
        payloads: &Payloads,
        first_offset: u64,
        sync: bool,
    ) -> PeerResult<()> {
        let batch = self.seglog.batch(payloads, first_offset)?;
        let seglog = &self.seglog;
        let info = seglog
            .engine
            .append(&seglog.topic, 0, batch, Durability::Written)
            .wait()
            .map_err(context("append"))?;
        if info.first_offset.0 != first_offset {
            return Err(PeerError(format!(
                "append gave first offset {}, expected {first_offset}",
                info.first_offset.0
            )));
        }
        if sync {
            let flushed = seglog.engine.flush(&seglog.topic, 0).wait();
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
        let seglog = &self.seglog;
        while offset < payloads.record_count {
            let data = seglog
                .engine
                .fetch(&seglog.topic, 0, Offset(offset), options)
                .wait()
                .map_err(context("fetch"))?;
            let after = read_records(&data, &mut totals)?;
            offset = after.ok_or_else(|| PeerError(format!("no batch fetched at {offset}")))?;
        }
        Ok(totals)
    }

    fn lookup(&mut self, payloads: &Payloads, offset: u64) -> PeerResult<()> {
        // The engine's point lookup, run by this thread: the shard's code decodes the one record
        // out of its batch.
        self.seglog.look_up(payloads, offset)
    }

    fn reopen(&mut self) -> PeerResult<()> {
        self.seglog.reopen()
    }
}
