//! The ruler: the disk's limits as a storage engineer measures them with fio, on the data
//! directory's file system, in the same run as the engine (`../shared/PERFORMANCE-NOTES.md`,
//! "The ruler").
//!
//! - Sequential write, 1 MiB blocks, io_uring at queue depth 16, time-based, `O_DIRECT` and
//!   buffered, each with `end_fsync=1`: fio's runtime (and so its rate) includes that final
//!   fsync. The disk's best sequential write is the faster of the two.
//! - Sequential `O_DIRECT` read, 1 MiB at queue depth 16, over what the `O_DIRECT` write wrote
//!   (never past it: unwritten extents read as zeros without touching the device).
//! - Appends of 4 KiB and 64 KiB to a growing file (`fallocate=none`), each followed by
//!   `fdatasync`: writes per second and the `fdatasync` latency percentiles.
//! - Random 4 KiB `O_DIRECT` reads at queue depth 1 and 64 over the engine's own `.log` files,
//!   after its run ([`DiskLimits::measure_random_reads`]).
//!
//! Figures of the run's own pattern (`disk.rs`) stay beside these, named as such.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Value, json};

use super::disk::{PAGE_BYTES, WriteLatency, scratch_share};
use super::fio::{self, number, sync_latency};
use super::progress::MB;

/// Blocks of the sequential jobs, and their queue depth.
const SEQUENTIAL_BLOCK: &str = "1m";
const SEQUENTIAL_DEPTH: u32 = 16;
/// The largest file a sequential write may lay out: more than the disk writes in 5 s.
const WRITE_FILE_MAX_BYTES: u64 = 16 << 30;
/// The growing files of the append + `fdatasync` jobs may reach this.
const APPEND_FILE_MAX_BYTES: u64 = 8 << 30;
/// The append + `fdatasync` jobs' block sizes.
pub const APPEND_BLOCKS_BYTES: [usize; 2] = [4096, 65536];
/// Queue depths of the random reads.
pub const RANDOM_READ_DEPTHS: [u32; 2] = [1, 64];
/// Random reads need a data set at least this large to be read from the device, not from a
/// cache a few hundred MB hold.
const RANDOM_READ_DATA_SET_MIN_BYTES: u64 = 1 << 30;

/// What the ruler measured.
#[derive(Debug, Clone)]
pub struct DiskLimits {
    /// Each job's time.
    pub seconds: u64,
    /// `None` where the file system refuses `O_DIRECT` (a note says why).
    pub write_direct_mb_per_s: Option<f64>,
    pub write_buffered_mb_per_s: f64,
    pub read_direct_mb_per_s: Option<f64>,
    pub appends: Vec<AppendSync>,
    /// Reads per second at each of [`RANDOM_READ_DEPTHS`], over the engine's files; empty until
    /// [`DiskLimits::measure_random_reads`] ran, or where it could not.
    pub random_reads: Vec<(u32, f64)>,
    pub notes: Vec<String>,
}

/// Appends of `block_bytes` to a growing file, each followed by `fdatasync`.
#[derive(Debug, Clone, Copy)]
pub struct AppendSync {
    pub block_bytes: usize,
    pub writes_per_s: f64,
    pub fdatasync: WriteLatency,
}

impl DiskLimits {
    /// The disk's best sequential write: the faster of `O_DIRECT` and buffered.
    pub fn best_write_mb_per_s(&self) -> f64 {
        self.write_buffered_mb_per_s
            .max(self.write_direct_mb_per_s.unwrap_or(0.0))
    }

    /// The append + `fdatasync` figures of `block_bytes`.
    pub fn append_sync(&self, block_bytes: usize) -> Option<&AppendSync> {
        self.appends
            .iter()
            .find(|append| append.block_bytes == block_bytes)
    }

    /// Random 4 KiB `O_DIRECT` reads at each depth over `files` (the engine's `.log` files,
    /// after its run), where they hold enough data; a note otherwise.
    pub fn measure_random_reads(&mut self, files: &[PathBuf]) {
        let data_set_bytes: u64 = files
            .iter()
            .filter_map(|file| std::fs::metadata(file).ok())
            .map(|metadata| metadata.len())
            .sum();
        if data_set_bytes < RANDOM_READ_DATA_SET_MIN_BYTES {
            self.notes.push(format!(
                "random reads not measured: the engine's files hold {:.0} MB, under the {} MiB \
                 a cold random read needs",
                data_set_bytes as f64 / MB,
                RANDOM_READ_DATA_SET_MIN_BYTES >> 20
            ));
            return;
        }
        for depth in RANDOM_READ_DEPTHS {
            match random_reads_per_s(files, depth, self.seconds) {
                Ok(reads_per_s) => self.random_reads.push((depth, reads_per_s)),
                Err(error) => self.notes.push(format!(
                    "random reads at queue depth {depth} not measured ({})",
                    crate::error_line::error_line(&error)
                )),
            }
        }
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        let optional = |value: Option<f64>| value.map_or("n/a".to_owned(), |v| format!("{v:.1}"));
        let mut line = format!(
            "the disk's limits (fio, io_uring, 1 MiB, queue depth {SEQUENTIAL_DEPTH}, {} s \
             each, the final fsync inside): sequential write {:.1} MB/s (O_DIRECT {}, buffered \
             {:.1}); sequential O_DIRECT read {} MB/s",
            self.seconds,
            self.best_write_mb_per_s(),
            optional(self.write_direct_mb_per_s),
            self.write_buffered_mb_per_s,
            optional(self.read_direct_mb_per_s),
        );
        for (depth, reads_per_s) in &self.random_reads {
            line += &format!(
                "; random 4 KiB O_DIRECT reads over the engine's files at queue depth \
                 {depth}: {reads_per_s:.0}/s"
            );
        }
        for append in &self.appends {
            let sync = append.fdatasync;
            line += &format!(
                "; {} B appends + fdatasync: {:.0}/s, fdatasync p50 / p99 / p99.9 {} / {} / {} us",
                append.block_bytes, append.writes_per_s, sync.p50_us, sync.p99_us, sync.p999_us,
            );
        }
        line
    }

    pub fn to_json(&self) -> Value {
        let appends: serde_json::Map<String, Value> = self
            .appends
            .iter()
            .map(|append| {
                let sync = append.fdatasync;
                let figures = json!({
                    "writes_per_s": append.writes_per_s,
                    "fdatasync_us": {
                        "p50": sync.p50_us,
                        "p99": sync.p99_us,
                        "p999": sync.p999_us,
                        "max": sync.max_us,
                    },
                });
                (append.block_bytes.to_string(), figures)
            })
            .collect();
        let random: serde_json::Map<String, Value> = self
            .random_reads
            .iter()
            .map(|(depth, reads_per_s)| (format!("qd{depth}"), json!(reads_per_s)))
            .collect();
        json!({
            "tool": "fio",
            "seconds": self.seconds,
            "best_write_mb_per_s": self.best_write_mb_per_s(),
            "write_direct_mb_per_s": self.write_direct_mb_per_s,
            "write_buffered_mb_per_s": self.write_buffered_mb_per_s,
            "read_direct_mb_per_s": self.read_direct_mb_per_s,
            "random_read_4k_direct_per_s": random,
            "append_fdatasync": appends,
            "notes": self.notes,
        })
    }
}

/// Runs the ruler's jobs in `dir` (a scratch directory on the data directory's file system),
/// each for `seconds`.
pub fn measure(dir: &Path, seconds: u64) -> anyhow::Result<DiskLimits> {
    let seconds = seconds.max(1);
    let file_max_bytes =
        WRITE_FILE_MAX_BYTES.min(scratch_share(dir)?) / PAGE_BYTES as u64 * PAGE_BYTES as u64;
    let mut notes = Vec::new();
    let buffered_path = dir.join("ruler-buffered.tmp");
    let buffered = sequential_write(&buffered_path, false, seconds, file_max_bytes)?;
    remove(&buffered_path);
    let direct_path = dir.join("ruler-direct.tmp");
    let (write_direct_mb_per_s, read_direct_mb_per_s) =
        match sequential_write(&direct_path, true, seconds, file_max_bytes) {
            Ok(direct) => {
                let read = sequential_read(&direct_path, direct.written_bytes, seconds)?;
                (Some(direct.mb_per_s), Some(read))
            }
            Err(error) => {
                notes.push(format!(
                    "O_DIRECT refused or failed ({})",
                    crate::error_line::error_line(&error)
                ));
                (None, None)
            }
        };
    remove(&direct_path);
    let appends = APPEND_BLOCKS_BYTES
        .into_iter()
        .map(|block_bytes| append_sync(dir, block_bytes, seconds))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(DiskLimits {
        seconds,
        write_direct_mb_per_s,
        write_buffered_mb_per_s: buffered.mb_per_s,
        read_direct_mb_per_s,
        appends,
        random_reads: Vec::new(),
        notes,
    })
}

fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

struct SequentialWrite {
    mb_per_s: f64,
    written_bytes: u64,
}

/// fio's sequential 1 MiB write at queue depth 16 on io_uring, `direct` or buffered, for
/// `seconds`, its final fsync inside the rate (fio counts `end_fsync` in the job's runtime).
fn sequential_write(
    path: &Path,
    direct: bool,
    seconds: u64,
    file_max_bytes: u64,
) -> anyhow::Result<SequentialWrite> {
    let mut arguments = timed_job("write", &file_option(path), "io_uring", seconds);
    arguments.extend([
        format!("--bs={SEQUENTIAL_BLOCK}"),
        format!("--iodepth={SEQUENTIAL_DEPTH}"),
        format!("--direct={}", u8::from(direct)),
        "--end_fsync=1".to_owned(),
        format!("--size={file_max_bytes}"),
    ]);
    let report = fio::json(&arguments)?;
    Ok(SequentialWrite {
        mb_per_s: number(&report, "write", "bw_bytes")? / MB,
        written_bytes: number(&report, "write", "io_bytes")? as u64,
    })
}

/// fio's sequential 1 MiB `O_DIRECT` read at queue depth 16 over the first `written_bytes` of
/// `path`, for `seconds`, in MB/s.
fn sequential_read(path: &Path, written_bytes: u64, seconds: u64) -> anyhow::Result<f64> {
    let mib = 1 << 20;
    let size = (written_bytes / mib * mib).max(mib);
    let mut arguments = timed_job("read", &file_option(path), "io_uring", seconds);
    arguments.extend([
        format!("--bs={SEQUENTIAL_BLOCK}"),
        format!("--iodepth={SEQUENTIAL_DEPTH}"),
        "--direct=1".to_owned(),
        format!("--size={size}"),
        "--readonly".to_owned(),
    ]);
    let report = fio::json(&arguments)?;
    Ok(number(&report, "read", "bw_bytes")? / MB)
}

/// fio's appends of `block_bytes` to a growing file in `dir` (no preallocation), each followed
/// by `fdatasync`, for `seconds`.
fn append_sync(dir: &Path, block_bytes: usize, seconds: u64) -> anyhow::Result<AppendSync> {
    let path = dir.join(format!("ruler-append-{block_bytes}.tmp"));
    let mut arguments = timed_job("write", &file_option(&path), "psync", seconds);
    arguments.extend([
        format!("--bs={block_bytes}"),
        "--fdatasync=1".to_owned(),
        "--fallocate=none".to_owned(),
        format!("--size={APPEND_FILE_MAX_BYTES}"),
    ]);
    let report = fio::json(&arguments);
    remove(&path);
    let report = report?;
    Ok(AppendSync {
        block_bytes,
        writes_per_s: number(&report, "write", "iops")?,
        fdatasync: sync_latency(&report).context("fio reported no fdatasync latency")?,
    })
}

/// fio's random 4 KiB `O_DIRECT` reads at `depth` on io_uring over `files`, for `seconds`.
fn random_reads_per_s(files: &[PathBuf], depth: u32, seconds: u64) -> anyhow::Result<f64> {
    let mut arguments = timed_job(
        "randread",
        &fio::filename_option(files),
        "io_uring",
        seconds,
    );
    arguments.extend([
        "--bs=4k".to_owned(),
        format!("--iodepth={depth}"),
        "--direct=1".to_owned(),
        "--readonly".to_owned(),
    ]);
    number(&fio::json(&arguments)?, "read", "iops")
}

/// The arguments every ruler job shares: a `rw` job on `files` (fio's `--filename`) with
/// `engine`, time-based for `seconds`.
fn timed_job(rw: &str, files: &str, engine: &str, seconds: u64) -> Vec<String> {
    vec![
        format!("--name=seglog-ruler-{rw}"),
        files.to_owned(),
        format!("--ioengine={engine}"),
        format!("--rw={rw}"),
        "--time_based".to_owned(),
        format!("--runtime={seconds}"),
    ]
}

fn file_option(path: &Path) -> String {
    fio::filename_option(&[path.to_path_buf()])
}
