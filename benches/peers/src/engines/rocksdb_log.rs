//! RocksDB (crate `rocksdb`): key = the offset big-endian, value = the payload; one `WriteBatch`
//! of 100 `put`s per batch through `DB::write_opt`, `WriteOptions::set_sync(true)` in the sync
//! cells; scans with a raw iterator from the first key, lookups with `get_pinned`.

use std::path::{Path, PathBuf};

use rocksdb::{DB, WriteBatch, WriteOptions};

use super::{LogStore, offset_key};
use crate::workload::{BATCH_RECORDS, Payloads, PeerError, PeerResult, ScanTotals, context};

pub struct RocksLog {
    dir: PathBuf,
    db: Option<DB>,
}

impl RocksLog {
    pub fn open(dir: &Path) -> PeerResult<RocksLog> {
        let dir = dir.join("rocksdb");
        let db = DB::open_default(&dir).map_err(context("DB::open_default"))?;
        Ok(RocksLog { dir, db: Some(db) })
    }

    fn db(&self) -> PeerResult<&DB> {
        self.db
            .as_ref()
            .ok_or_else(|| PeerError("rocksdb is closed".to_owned()))
    }
}

impl LogStore for RocksLog {
    fn append_batch(
        &mut self,
        payloads: &Payloads,
        first_offset: u64,
        sync: bool,
    ) -> PeerResult<()> {
        let mut batch = WriteBatch::default();
        for offset in first_offset..first_offset + BATCH_RECORDS as u64 {
            batch.put(offset_key(offset), payloads.record(offset));
        }
        let mut options = WriteOptions::default();
        options.set_sync(sync);
        self.db()?
            .write_opt(batch, &options)
            .map_err(context("write_opt"))
    }

    fn scan(&mut self, _payloads: &Payloads) -> PeerResult<ScanTotals> {
        let mut totals = ScanTotals::default();
        let mut iterator = self.db()?.raw_iterator();
        iterator.seek_to_first();
        while let Some(value) = iterator.value() {
            totals.add(value.len());
            iterator.next();
        }
        iterator.status().map_err(context("iterator"))?;
        Ok(totals)
    }

    fn lookup(&mut self, payloads: &Payloads, offset: u64) -> PeerResult<()> {
        let value = self
            .db()?
            .get_pinned(offset_key(offset))
            .map_err(context("get_pinned"))?;
        let value = value.ok_or_else(|| PeerError(format!("record {offset} missing")))?;
        payloads.check(offset, &value)
    }

    fn reopen(&mut self) -> PeerResult<()> {
        self.db = None;
        self.db = Some(DB::open_default(&self.dir).map_err(context("DB::open_default"))?);
        Ok(())
    }
}
