//! The disk's own limits in the same run, with no engine logic: sequential buffered 1 MiB
//! `pwrite`s (until the last returns, and with a final `fdatasync`), sequential `O_DIRECT` 1 MiB
//! `pwrite`s (through a final `fdatasync`, as `seglog bench --vs-disk` times them), both write
//! paths again in writes of each cell's batch size (seglog's write path is chosen from them),
//! cold sequential 1 MiB
//! `pread`s, cold random 4 KiB `pread`s one at a time (a cold lookup's floor: one read from the
//! device per lookup), and the per-batch sync floor (one batch's bytes appended, then
//! `fdatasync`). The cold reads wait for free page reporting after their cache drop, as the
//! engines' cold phases do (`machine::settle_page_reporting`).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::device::{BlockDevice, DeviceReads, on_device};
use crate::machine;
use crate::workload::{BATCH_RECORDS, PeerResult, Rng, context, drop_page_cache, sync_all};

const BLOCK_BYTES: usize = 1024 * 1024;
const PAGE_BYTES: usize = 4096;

#[derive(Debug, Clone, Serialize)]
pub struct DiskLimits {
    pub bytes: u64,
    /// Buffered 1 MiB `pwrite`s of `bytes`, timed until the last returns (no sync).
    pub write_mb_per_s: f64,
    /// The same, timed through a final `fdatasync`.
    pub write_fdatasync_mb_per_s: f64,
    /// `O_DIRECT` 1 MiB `pwrite`s of `bytes` to a second file, timed through a final
    /// `fdatasync` (None where the file system refuses `O_DIRECT`).
    pub direct_write_mb_per_s: Option<f64>,
    /// 1 MiB `pread`s of the file after dropping the page cache (None: not permitted).
    pub read_cold_mb_per_s: Option<f64>,
    /// 4 KiB `pread`s at random page-aligned positions of the file after dropping the page
    /// cache, one at a time: reads/s (None: not permitted).
    pub read_cold_random_4kib_per_s: Option<f64>,
    /// The device's reads during the two cold phases (as the engines' cold phases are shown).
    pub read_cold_device: Option<DeviceReads>,
    pub read_cold_random_device: Option<DeviceReads>,
    /// Per record size: buffered and `O_DIRECT` sequential writes of one batch's bytes each.
    pub batch_writes: Vec<BatchWrites>,
    /// Per record size: records/s when each batch of 100 records' bytes is appended with one
    /// `pwrite` and followed by `fdatasync` (the floor of the sync cells).
    pub sync_floor: Vec<SyncFloor>,
}

/// The disk's two sequential write paths in writes of one batch's bytes (100 records' payload).
#[derive(Debug, Clone, Serialize)]
pub struct BatchWrites {
    pub record_bytes: usize,
    /// Bytes per buffered write (the batch's payload).
    pub batch_bytes: usize,
    /// Buffered writes of `batch_bytes`, timed until the last returns (no sync).
    pub buffered_mb_per_s: f64,
    /// The same writes timed through a final `fdatasync`, as the `O_DIRECT` ones are: bytes on
    /// the device. Timed to the last write, 256 MB of buffered writes measure how fast memory
    /// takes them that minute, not the disk.
    pub buffered_synced_mb_per_s: f64,
    /// `O_DIRECT` writes of `batch_bytes` rounded up to 4 KiB, timed through a final `fdatasync`,
    /// as MB/s of the batches' payload (None where the file system refuses `O_DIRECT`).
    pub direct_mb_per_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SyncFloor {
    pub record_bytes: usize,
    pub batches: u64,
    pub records_per_s: f64,
    pub mb_per_s: f64,
    pub fdatasync_p50_us: u64,
    pub fdatasync_p999_us: u64,
}

fn block() -> Vec<u8> {
    let mut rng = Rng::new(0xd15c);
    let mut data = vec![0u8; BLOCK_BYTES];
    for chunk in data.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes()[..chunk.len()]);
    }
    data
}

fn create(path: &Path) -> PeerResult<File> {
    OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .map_err(context("creating the disk-limit file"))
}

/// `O_DIRECT` sequential writes of `write_bytes` (a multiple of 4 KiB, at most 1 MiB) until
/// `total_bytes` are written, through a final `fdatasync`, MB/s; `None` where the file system
/// refuses `O_DIRECT` (tmpfs before Linux 6.6).
fn write_direct(dir: &Path, write_bytes: usize, total_bytes: u64) -> PeerResult<Option<f64>> {
    let path = dir.join("disk-limit-direct.bin");
    let opened = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path);
    let file = match opened {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
        Err(error) => return Err(context("creating the O_DIRECT disk-limit file")(error)),
    };
    // A block at a page-aligned address inside a larger buffer, as O_DIRECT needs.
    let mut buffer = vec![0u8; BLOCK_BYTES + PAGE_BYTES];
    let start = buffer.as_ptr().align_offset(PAGE_BYTES);
    let aligned = &mut buffer[start..start + BLOCK_BYTES];
    aligned.copy_from_slice(&block());
    let writes = total_bytes.div_ceil(write_bytes as u64);
    let started = Instant::now();
    for index in 0..writes {
        file.write_all_at(&aligned[..write_bytes], index * write_bytes as u64)
            .map_err(context("O_DIRECT pwrite"))?;
    }
    file.sync_data().map_err(context("fdatasync"))?;
    let seconds = started.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(Some((writes * write_bytes as u64) as f64 / seconds / 1e6))
}

/// Buffered sequential writes of `write_bytes` (at most 1 MiB) until `total_bytes` are written:
/// MB/s timed until the last returns, and timed through a final `fdatasync`.
fn write_buffered(dir: &Path, write_bytes: usize, total_bytes: u64) -> PeerResult<(f64, f64)> {
    let path = dir.join("disk-limit-buffered.bin");
    let file = create(&path)?;
    let data = block();
    let writes = total_bytes.div_ceil(write_bytes as u64);
    let started = Instant::now();
    for index in 0..writes {
        file.write_all_at(&data[..write_bytes], index * write_bytes as u64)
            .map_err(context("pwrite"))?;
    }
    let written_s = started.elapsed().as_secs_f64();
    file.sync_data().map_err(context("fdatasync"))?;
    let synced_s = started.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(&path);
    let mb = (writes * write_bytes as u64) as f64 / 1e6;
    Ok((mb / written_s, mb / synced_s))
}

/// Both write paths in writes of one batch of `record_bytes` records, each after a page-cache
/// drop (where permitted) and the wait for free page reporting: a buffered write that reused
/// pages freed a moment before, still backed by the host, would measure that luck, not the
/// sustained rate.
fn batch_writes(dir: &Path, record_bytes: usize, total_bytes: u64) -> PeerResult<BatchWrites> {
    let batch_bytes = (record_bytes * BATCH_RECORDS).min(BLOCK_BYTES);
    let settle = || {
        let _ = drop_page_cache();
        machine::settle_page_reporting();
    };
    settle();
    let (buffered_mb_per_s, buffered_synced_mb_per_s) =
        write_buffered(dir, batch_bytes, total_bytes)?;
    sync_all();
    settle();
    let direct_bytes = batch_bytes.next_multiple_of(PAGE_BYTES);
    // Each `O_DIRECT` write carries one batch's payload in `direct_bytes`: compared as payload.
    let payload_share = batch_bytes as f64 / direct_bytes as f64;
    let direct_mb_per_s = write_direct(dir, direct_bytes, total_bytes)?
        .map(|written_mb_per_s| written_mb_per_s * payload_share);
    Ok(BatchWrites {
        record_bytes,
        batch_bytes,
        buffered_mb_per_s,
        buffered_synced_mb_per_s,
        direct_mb_per_s,
    })
}

/// Measures the limits in `dir` (a scratch file, removed after).
pub fn measure(
    dir: &Path,
    bytes: u64,
    record_sizes: &[usize],
    sync_batches: u64,
    random_reads: u64,
) -> PeerResult<DiskLimits> {
    let path = dir.join("disk-limit.bin");
    let data = block();
    let blocks = (bytes / BLOCK_BYTES as u64).max(1);
    let file = create(&path)?;
    machine::settle_page_reporting();
    let started = Instant::now();
    for index in 0..blocks {
        file.write_all_at(&data, index * BLOCK_BYTES as u64)
            .map_err(context("pwrite"))?;
    }
    let written_s = started.elapsed().as_secs_f64();
    file.sync_data().map_err(context("fdatasync"))?;
    let synced_s = started.elapsed().as_secs_f64();
    let total = blocks * BLOCK_BYTES as u64;
    let device = BlockDevice::of(dir);
    let (read_cold_mb_per_s, read_cold_device) =
        cold_phase(device.as_ref(), || read_cold(&file, blocks))?;
    let (read_cold_random_4kib_per_s, read_cold_random_device) = match random_reads {
        0 => (None, None),
        reads => cold_phase(device.as_ref(), || read_cold_random(&file, total, reads))?,
    };
    drop(file);
    let _ = std::fs::remove_file(&path);
    machine::settle_page_reporting();
    let direct_write_mb_per_s = write_direct(dir, BLOCK_BYTES, total)?;
    let batch_writes = record_sizes
        .iter()
        .map(|record_bytes| batch_writes(dir, *record_bytes, total))
        .collect::<PeerResult<_>>()?;
    let sync_floor = record_sizes
        .iter()
        .map(|record_bytes| sync_floor(dir, *record_bytes, sync_batches))
        .collect::<PeerResult<_>>()?;
    Ok(DiskLimits {
        bytes: total,
        write_mb_per_s: total as f64 / written_s / 1e6,
        write_fdatasync_mb_per_s: total as f64 / synced_s / 1e6,
        direct_write_mb_per_s,
        batch_writes,
        read_cold_mb_per_s,
        read_cold_random_4kib_per_s,
        read_cold_device,
        read_cold_random_device,
        sync_floor,
    })
}

/// `phase` after a page-cache drop and the wait for free page reporting, with the device's reads
/// during it alone (the wait outside the window); `None`s when the drop is not permitted.
fn cold_phase(
    device: Option<&BlockDevice>,
    phase: impl FnOnce() -> PeerResult<f64>,
) -> PeerResult<(Option<f64>, Option<DeviceReads>)> {
    if drop_page_cache().is_err() {
        return Ok((None, None));
    }
    machine::settle_page_reporting();
    let (figure, reads) = on_device(device, phase)?;
    Ok((Some(figure), reads))
}

impl DiskLimits {
    /// The faster of the two sequential writes, MB/s.
    pub fn best_write_mb_per_s(&self) -> f64 {
        self.direct_write_mb_per_s
            .unwrap_or(0.0)
            .max(self.write_mb_per_s)
    }
}

fn read_cold(file: &File, blocks: u64) -> PeerResult<f64> {
    let mut buffer = vec![0u8; BLOCK_BYTES];
    let started = Instant::now();
    for index in 0..blocks {
        file.read_exact_at(&mut buffer, index * BLOCK_BYTES as u64)
            .map_err(context("pread"))?;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok((blocks * BLOCK_BYTES as u64) as f64 / seconds / 1e6)
}

fn read_cold_random(file: &File, bytes: u64, reads: u64) -> PeerResult<f64> {
    let pages = bytes / PAGE_BYTES as u64;
    let mut rng = Rng::new(0x4ead);
    let mut buffer = vec![0u8; PAGE_BYTES];
    let started = Instant::now();
    for _ in 0..reads {
        let position = rng.below(pages) * PAGE_BYTES as u64;
        file.read_exact_at(&mut buffer, position)
            .map_err(context("pread"))?;
    }
    Ok(reads as f64 / started.elapsed().as_secs_f64())
}

fn sync_floor(dir: &Path, record_bytes: usize, batches: u64) -> PeerResult<SyncFloor> {
    let path = dir.join("disk-sync-floor.bin");
    let file = create(&path)?;
    let batch_bytes = record_bytes * BATCH_RECORDS;
    let data = block();
    let payload = &data[..batch_bytes.min(BLOCK_BYTES)];
    let mut sync_us = Vec::with_capacity(batches as usize);
    let started = Instant::now();
    for index in 0..batches {
        file.write_all_at(payload, index * payload.len() as u64)
            .map_err(context("pwrite"))?;
        let sync_started = Instant::now();
        file.sync_data().map_err(context("fdatasync"))?;
        sync_us.push(sync_started.elapsed().as_micros() as u64);
    }
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    drop(file);
    let _ = std::fs::remove_file(&path);
    let latency = crate::workload::LatencyUs::of(sync_us);
    Ok(SyncFloor {
        record_bytes,
        batches,
        records_per_s: (batches * BATCH_RECORDS as u64) as f64 / seconds,
        mb_per_s: (batches * payload.len() as u64) as f64 / seconds / 1e6,
        fdatasync_p50_us: latency.p50,
        fdatasync_p999_us: latency.p999,
    })
}
