//! raft-engine: one region (raft group 1), one entry per record at index offset + 1; one
//! `LogBatch` of 100 entries per batch through `Engine::write(batch, sync)`; scans with
//! `fetch_entries_to` in chunks, lookups with `get_entry`. Default `Config` (it LZ4-compresses
//! batches above 8 KiB). Entries are protobuf messages: a `BytesValue` holding the index
//! (8 bytes, big-endian, as the key-value peers' key) then the payload.

use std::path::{Path, PathBuf};

use protobuf::well_known_types::BytesValue;
use raft_engine::{Config, Engine, LogBatch, MessageExt};

use super::{LogStore, offset_key};
use crate::workload::{BATCH_RECORDS, Payloads, PeerError, PeerResult, ScanTotals, context};

const REGION: u64 = 1;
/// Entries per `fetch_entries_to` call during a scan.
const SCAN_CHUNK_ENTRIES: u64 = 1024;
const INDEX_BYTES: usize = 8;

#[derive(Clone)]
struct OffsetEntries;

impl MessageExt for OffsetEntries {
    type Entry = BytesValue;

    fn index(entry: &BytesValue) -> u64 {
        let mut index = [0u8; INDEX_BYTES];
        if let Some(prefix) = entry.value.get(..INDEX_BYTES) {
            index.copy_from_slice(prefix);
        }
        u64::from_be_bytes(index)
    }
}

pub struct RaftLog {
    dir: PathBuf,
    engine: Option<Engine>,
}

fn open_at(dir: &Path) -> PeerResult<Engine> {
    let config = Config {
        dir: dir.to_string_lossy().into_owned(),
        ..Config::default()
    };
    Engine::open(config).map_err(context("Engine::open"))
}

fn payload(entry: &BytesValue) -> &[u8] {
    entry.value.get(INDEX_BYTES..).unwrap_or_default()
}

impl RaftLog {
    pub fn open(dir: &Path) -> PeerResult<RaftLog> {
        let dir = dir.join("raft-engine");
        let engine = open_at(&dir)?;
        Ok(RaftLog {
            dir,
            engine: Some(engine),
        })
    }

    fn engine(&self) -> PeerResult<&Engine> {
        self.engine
            .as_ref()
            .ok_or_else(|| PeerError("raft-engine is closed".to_owned()))
    }
}

impl LogStore for RaftLog {
    fn append_batch(
        &mut self,
        payloads: &Payloads,
        first_offset: u64,
        sync: bool,
    ) -> PeerResult<()> {
        let entries: Vec<BytesValue> = (first_offset..first_offset + BATCH_RECORDS as u64)
            .map(|offset| {
                let record = payloads.record(offset);
                let mut value = Vec::with_capacity(INDEX_BYTES + record.len());
                value.extend_from_slice(&offset_key(offset + 1));
                value.extend_from_slice(record);
                let mut entry = BytesValue::new();
                entry.value = value;
                entry
            })
            .collect();
        let mut batch = LogBatch::with_capacity(BATCH_RECORDS);
        batch
            .add_entries::<OffsetEntries>(REGION, &entries)
            .map_err(context("add_entries"))?;
        self.engine()?
            .write(&mut batch, sync)
            .map_err(context("write"))?;
        Ok(())
    }

    fn scan(&mut self, payloads: &Payloads) -> PeerResult<ScanTotals> {
        let engine = self.engine()?;
        let mut totals = ScanTotals::default();
        let mut entries = Vec::with_capacity(SCAN_CHUNK_ENTRIES as usize);
        let end = payloads.record_count + 1;
        let mut begin = 1u64;
        while begin < end {
            let chunk_end = (begin + SCAN_CHUNK_ENTRIES).min(end);
            entries.clear();
            engine
                .fetch_entries_to::<OffsetEntries>(REGION, begin, chunk_end, None, &mut entries)
                .map_err(context("fetch_entries_to"))?;
            for entry in &entries {
                totals.add(payload(entry).len());
            }
            begin = chunk_end;
        }
        Ok(totals)
    }

    fn lookup(&mut self, payloads: &Payloads, offset: u64) -> PeerResult<()> {
        let entry = self
            .engine()?
            .get_entry::<OffsetEntries>(REGION, offset + 1)
            .map_err(context("get_entry"))?;
        let entry = entry.ok_or_else(|| PeerError(format!("record {offset} missing")))?;
        payloads.check(offset, payload(&entry))
    }

    fn reopen(&mut self) -> PeerResult<()> {
        self.engine = None;
        self.engine = Some(open_at(&self.dir)?);
        Ok(())
    }
}
