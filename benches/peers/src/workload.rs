//! What every engine is fed and how it is timed: the payloads, the cell (record size, sync), the
//! per-batch latency summary, the page-cache drop, and the size of a directory on disk.

use std::fmt;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

/// Records per appended batch, for every engine.
pub const BATCH_RECORDS: usize = 100;
/// Bytes of incompressible payload the records are cut from (cycled).
const POOL_BYTES: usize = 8 * 1024 * 1024;

/// An error of one engine in one phase, as text (the harness reports it and goes on).
#[derive(Debug)]
pub struct PeerError(pub String);

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub type PeerResult<T> = Result<T, PeerError>;

/// Maps any displayable error to a `PeerError` naming what was being done.
pub fn context<E: fmt::Display>(what: &'static str) -> impl FnOnce(E) -> PeerError {
    move |error| PeerError(format!("{what}: {error}"))
}

/// One column group of the matrix: a record size and a sync policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cell {
    pub record_bytes: usize,
    /// One sync per batch (each engine's own durable write).
    pub sync: bool,
}

impl Cell {
    pub const ALL: [Cell; 4] = [
        Cell {
            record_bytes: 100,
            sync: false,
        },
        Cell {
            record_bytes: 100,
            sync: true,
        },
        Cell {
            record_bytes: 1024,
            sync: false,
        },
        Cell {
            record_bytes: 1024,
            sync: true,
        },
    ];

    /// `100-nosync`, `1024-sync`, ...: the names `--cells` takes.
    pub fn name(&self) -> String {
        let sync = if self.sync { "sync" } else { "nosync" };
        format!("{}-{sync}", self.record_bytes)
    }
}

/// The records of one cell: `record_count` records of `record_bytes`, cut from a random pool.
pub struct Payloads {
    pub record_bytes: usize,
    pub record_count: u64,
    pool: Vec<u8>,
    /// Distinct records in the pool, a multiple of `BATCH_RECORDS`; record `o` is slot `o % slots`.
    slots: u64,
}

impl Payloads {
    pub fn new(record_bytes: usize, volume_bytes: u64) -> Payloads {
        let batches = (volume_bytes / (record_bytes * BATCH_RECORDS) as u64).max(1);
        let slots = (POOL_BYTES / record_bytes / BATCH_RECORDS * BATCH_RECORDS).max(BATCH_RECORDS);
        let mut rng = Rng::new(0x5eed_1095);
        let mut pool = vec![0u8; slots * record_bytes];
        for chunk in pool.chunks_mut(8) {
            let word = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        Payloads {
            record_bytes,
            record_count: batches * BATCH_RECORDS as u64,
            pool,
            slots: slots as u64,
        }
    }

    /// The payload of the record at `offset`.
    pub fn record(&self, offset: u64) -> &[u8] {
        let start = (offset % self.slots) as usize * self.record_bytes;
        &self.pool[start..start + self.record_bytes]
    }

    /// Distinct batches before the payloads repeat (batch `b` holds offsets `b*100..`).
    pub fn distinct_batches(&self) -> u64 {
        self.slots / BATCH_RECORDS as u64
    }

    pub fn batch_count(&self) -> u64 {
        self.record_count / BATCH_RECORDS as u64
    }

    pub fn payload_bytes(&self) -> u64 {
        self.record_count * self.record_bytes as u64
    }

    /// Checks a looked-up value against the record written at `offset`.
    pub fn check(&self, offset: u64, value: &[u8]) -> PeerResult<()> {
        if value == self.record(offset) {
            Ok(())
        } else {
            Err(PeerError(format!(
                "record {offset}: read {} bytes that differ from the {} written",
                value.len(),
                self.record_bytes
            )))
        }
    }
}

/// xorshift64*: deterministic payloads and lookup offsets without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

/// What a scan read: records and value bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct ScanTotals {
    pub records: u64,
    pub value_bytes: u64,
}

impl ScanTotals {
    pub fn add(&mut self, value_len: usize) {
        self.records += 1;
        self.value_bytes += value_len as u64;
    }

    /// A scan must return every record written, whole.
    pub fn check(&self, payloads: &Payloads) -> PeerResult<()> {
        if self.records == payloads.record_count && self.value_bytes == payloads.payload_bytes() {
            Ok(())
        } else {
            Err(PeerError(format!(
                "scan read {} records / {} bytes, expected {} / {}",
                self.records,
                self.value_bytes,
                payloads.record_count,
                payloads.payload_bytes()
            )))
        }
    }
}

/// Throughput of one phase.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rate {
    pub records_per_s: f64,
    /// Payload bytes (10^6) per second.
    pub mb_per_s: f64,
    pub seconds: f64,
}

impl Rate {
    pub fn of(records: u64, payload_bytes: u64, started: Instant) -> Rate {
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        Rate {
            records_per_s: records as f64 / seconds,
            mb_per_s: payload_bytes as f64 / seconds / 1e6,
            seconds,
        }
    }
}

/// Per-batch append latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LatencyUs {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl LatencyUs {
    pub fn of(mut samples_us: Vec<u64>) -> LatencyUs {
        if samples_us.is_empty() {
            return LatencyUs::default();
        }
        samples_us.sort_unstable();
        let at = |quantile: f64| {
            let index = ((samples_us.len() as f64 - 1.0) * quantile).round() as usize;
            samples_us[index.min(samples_us.len() - 1)]
        };
        LatencyUs {
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max: samples_us[samples_us.len() - 1],
        }
    }
}

/// Flushes dirty pages and drops the page cache (root only). `Err` says why not.
pub fn drop_page_cache() -> PeerResult<()> {
    let status = std::process::Command::new("sync")
        .status()
        .map_err(context("running sync"))?;
    if !status.success() {
        return Err(PeerError(format!("sync exited with {status}")));
    }
    std::fs::write("/proc/sys/vm/drop_caches", b"1")
        .map_err(context("writing /proc/sys/vm/drop_caches"))
}

/// Only flushes dirty pages (`sync`), so one cell's writeback does not land in the next cell.
pub fn sync_all() {
    let _ = std::process::Command::new("sync").status();
}

/// Bytes allocated on disk under `dir` (blocks, not apparent sizes).
pub fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => allocated_bytes(&entry.path()),
            Ok(meta) => meta.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The file system holding `dir` (longest mount point prefix in /proc/mounts).
pub fn file_system_of(dir: &Path) -> String {
    let Ok(dir) = dir.canonicalize() else {
        return "unknown".to_owned();
    };
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return "unknown".to_owned();
    };
    mounts
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() >= 3 && dir.starts_with(fields[1])).then(|| {
                (
                    fields[1].len(),
                    format!("{} on {} ({})", fields[0], fields[1], fields[2]),
                )
            })
        })
        .max_by_key(|(length, _)| *length)
        .map_or_else(|| "unknown".to_owned(), |(_, description)| description)
}
