//! The engines under test behind one small trait: append batches of records by offset, scan them
//! back in offset order, look one up by offset, and reopen (close and open the same directory).

mod fjall_log;
mod naive;
mod raft_log;
#[cfg(feature = "rocksdb")]
mod rocksdb_log;
mod seglog_inline;
mod seglog_log;

use std::path::Path;
use std::time::Instant;

use crate::workload::{BATCH_RECORDS, Payloads, PeerError, PeerResult, ScanTotals};

/// Engine names, as `--engines` takes them, in report order.
pub const ENGINE_NAMES: [&str; 7] = [
    "seglog",
    "seglog-gc16",
    "seglog-inline",
    "rocksdb",
    "fjall",
    "raft-engine",
    "naive-bufwriter",
];

/// An append-only log of records addressed by a dense offset from 0.
pub trait LogStore {
    /// Appends the records at `first_offset..first_offset + BATCH_RECORDS` as one batch; with
    /// `sync`, returns once the engine's own sync covers them.
    fn append_batch(
        &mut self,
        payloads: &Payloads,
        first_offset: u64,
        sync: bool,
    ) -> PeerResult<()>;

    /// Appends every record of `payloads`, batch by batch, and returns each batch's latency (µs).
    /// The default is one writer waiting for each batch; an engine may override it (seglog
    /// pipelines, or runs several producers).
    fn append_all(&mut self, payloads: &Payloads, sync: bool) -> PeerResult<Vec<u64>> {
        let mut latencies_us = Vec::with_capacity(payloads.batch_count() as usize);
        for batch in 0..payloads.batch_count() {
            let started = Instant::now();
            self.append_batch(payloads, batch * BATCH_RECORDS as u64, sync)?;
            latencies_us.push(started.elapsed().as_micros() as u64);
        }
        Ok(latencies_us)
    }

    /// Reads every record in offset order.
    fn scan(&mut self, payloads: &Payloads) -> PeerResult<ScanTotals>;

    /// Reads the record at `offset` and checks it against what was written.
    fn lookup(&mut self, payloads: &Payloads, offset: u64) -> PeerResult<()>;

    /// Closes the engine and opens it again on the same directory (before a cold phase).
    fn reopen(&mut self) -> PeerResult<()>;

    /// Whether scans and lookups are measured for this engine (not for a second view of the same
    /// engine, such as seglog with 16 producers).
    fn measures_reads(&self) -> bool {
        true
    }
}

/// How the seglog rows run.
#[derive(Debug, Clone, Copy)]
pub struct SeglogOptions {
    /// Appends the single writer keeps in flight without sync.
    pub in_flight: usize,
    /// Appends written with `O_DIRECT` (`EngineConfig::direct_writes`).
    pub direct_writes: bool,
}

/// Opens engine `name` in the empty directory `dir`.
pub fn open(name: &str, dir: &Path, seglog: SeglogOptions) -> PeerResult<Box<dyn LogStore>> {
    let direct = seglog.direct_writes;
    Ok(match name {
        "seglog" => Box::new(seglog_log::SeglogLog::open(
            dir,
            seglog.in_flight,
            1,
            direct,
        )?),
        "seglog-gc16" => Box::new(seglog_log::SeglogLog::open(dir, 1, 16, direct)?),
        "seglog-inline" => Box::new(seglog_inline::SeglogInline::open(dir, direct)?),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Box::new(rocksdb_log::RocksLog::open(dir)?),
        #[cfg(not(feature = "rocksdb"))]
        "rocksdb" => return Err(PeerError("built without the rocksdb feature".to_owned())),
        "fjall" => Box::new(fjall_log::FjallLog::open(dir)?),
        "raft-engine" => Box::new(raft_log::RaftLog::open(dir)?),
        "naive-bufwriter" => Box::new(naive::NaiveLog::open(dir)?),
        other => return Err(PeerError(format!("unknown engine {other}"))),
    })
}

/// The key of `offset` in the key-value peers: 8 bytes, big-endian, so key order is offset order.
pub fn offset_key(offset: u64) -> [u8; 8] {
    offset.to_be_bytes()
}
