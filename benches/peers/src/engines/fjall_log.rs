//! fjall: one keyspace, key = the offset big-endian, value = the payload; one `Database::batch`
//! of 100 inserts per batch, committed with `durability(Some(PersistMode::SyncData))` in the sync
//! cells and the crate's default (`None`: journal buffered in the process) otherwise; scans with
//! `Keyspace::iter`, lookups with `Keyspace::get`.

use std::path::{Path, PathBuf};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{LogStore, offset_key};
use crate::workload::{BATCH_RECORDS, Payloads, PeerError, PeerResult, ScanTotals, context};

const KEYSPACE: &str = "log";

pub struct FjallLog {
    dir: PathBuf,
    open: Option<(Database, Keyspace)>,
}

fn open_at(dir: &Path) -> PeerResult<(Database, Keyspace)> {
    let db = Database::builder(dir)
        .open()
        .map_err(context("Database::open"))?;
    let keyspace = db
        .keyspace(KEYSPACE, KeyspaceCreateOptions::default)
        .map_err(context("Database::keyspace"))?;
    Ok((db, keyspace))
}

impl FjallLog {
    pub fn open(dir: &Path) -> PeerResult<FjallLog> {
        let dir = dir.join("fjall");
        let open = open_at(&dir)?;
        Ok(FjallLog {
            dir,
            open: Some(open),
        })
    }

    fn open_ref(&self) -> PeerResult<&(Database, Keyspace)> {
        self.open
            .as_ref()
            .ok_or_else(|| PeerError("fjall is closed".to_owned()))
    }
}

impl LogStore for FjallLog {
    fn append_batch(
        &mut self,
        payloads: &Payloads,
        first_offset: u64,
        sync: bool,
    ) -> PeerResult<()> {
        let (db, keyspace) = self.open_ref()?;
        let durability = sync.then_some(PersistMode::SyncData);
        let mut batch = db.batch().durability(durability);
        for offset in first_offset..first_offset + BATCH_RECORDS as u64 {
            batch.insert(keyspace, offset_key(offset), payloads.record(offset));
        }
        batch.commit().map_err(context("batch commit"))
    }

    fn scan(&mut self, _payloads: &Payloads) -> PeerResult<ScanTotals> {
        let (_, keyspace) = self.open_ref()?;
        let mut totals = ScanTotals::default();
        for guard in keyspace.iter() {
            let (_, value) = guard.into_inner().map_err(context("iter"))?;
            totals.add(value.len());
        }
        Ok(totals)
    }

    fn lookup(&mut self, payloads: &Payloads, offset: u64) -> PeerResult<()> {
        let (_, keyspace) = self.open_ref()?;
        let value = keyspace.get(offset_key(offset)).map_err(context("get"))?;
        let value = value.ok_or_else(|| PeerError(format!("record {offset} missing")))?;
        payloads.check(offset, &value)
    }

    fn reopen(&mut self) -> PeerResult<()> {
        self.open = None;
        self.open = Some(open_at(&self.dir)?);
        Ok(())
    }
}
