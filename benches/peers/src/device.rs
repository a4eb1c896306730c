//! What the block device under the scratch directory did during a cold phase, from the kernel's
//! own counters (`/sys/dev/block/MAJ:MIN/stat`, Documentation/block/stat.rst): reads completed,
//! bytes read, the time those reads waited, and the time the device had any I/O in flight. They
//! tell an engine bound by the device (busy the whole phase, one read per lookup) from one that
//! adds time of its own (the device idle between its reads) or reads more than it needs.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::workload::PeerResult;

/// Bytes per sector in the stat file, whatever the device's own sector size.
const SECTOR_BYTES: u64 = 512;

/// The stat file of the device (or partition) a directory is on.
#[derive(Debug, Clone)]
pub struct BlockDevice {
    stat_path: PathBuf,
}

/// The read counters at one moment.
#[derive(Debug, Clone, Copy)]
pub struct ReadCounters {
    at: Instant,
    reads: u64,
    sectors: u64,
    read_wait_ms: u64,
    busy_ms: u64,
}

/// The device's reads over one phase.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DeviceReads {
    pub seconds: f64,
    pub reads: u64,
    pub bytes: u64,
    /// Summed over the reads, so above `busy_ms` when several are in flight.
    pub read_wait_ms: u64,
    /// Time with at least one I/O in flight (reads or writes).
    pub busy_ms: u64,
}

impl BlockDevice {
    /// The device holding `dir`; `None` where there is none (tmpfs, overlay) or no stat file.
    pub fn of(dir: &Path) -> Option<BlockDevice> {
        let dev = std::fs::metadata(dir).ok()?.dev();
        let (major, minor) = split_dev(dev);
        let stat_path = PathBuf::from(format!("/sys/dev/block/{major}:{minor}/stat"));
        stat_path.exists().then_some(BlockDevice { stat_path })
    }

    pub fn counters(&self) -> Option<ReadCounters> {
        let text = std::fs::read_to_string(&self.stat_path).ok()?;
        let at = Instant::now();
        parse_stat(&text).map(|(reads, sectors, read_wait_ms, busy_ms)| ReadCounters {
            at,
            reads,
            sectors,
            read_wait_ms,
            busy_ms,
        })
    }
}

impl ReadCounters {
    /// What the device did from `self` to `after`.
    pub fn until(&self, after: &ReadCounters) -> DeviceReads {
        DeviceReads {
            seconds: after.at.duration_since(self.at).as_secs_f64(),
            reads: after.reads.saturating_sub(self.reads),
            bytes: after.sectors.saturating_sub(self.sectors) * SECTOR_BYTES,
            read_wait_ms: after.read_wait_ms.saturating_sub(self.read_wait_ms),
            busy_ms: after.busy_ms.saturating_sub(self.busy_ms),
        }
    }
}

impl DeviceReads {
    pub fn kib_per_read(&self) -> Option<f64> {
        (self.reads > 0).then(|| self.bytes as f64 / 1024.0 / self.reads as f64)
    }

    /// Mean time a read waited, queue and service, µs.
    pub fn read_wait_us(&self) -> Option<f64> {
        (self.reads > 0).then(|| self.read_wait_ms as f64 * 1000.0 / self.reads as f64)
    }

    /// Share of the phase with I/O in flight.
    pub fn busy_share(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.busy_ms as f64 / 1000.0 / self.seconds)
    }
}

/// Runs `phase` and returns what the device did meanwhile (`None` without a device).
pub fn on_device<T>(
    device: Option<&BlockDevice>,
    phase: impl FnOnce() -> PeerResult<T>,
) -> PeerResult<(T, Option<DeviceReads>)> {
    let before = device.and_then(BlockDevice::counters);
    let value = phase()?;
    let after = device.and_then(BlockDevice::counters);
    let reads = before
        .zip(after)
        .map(|(before, after)| before.until(&after));
    Ok((value, reads))
}

/// glibc's `major()` and `minor()` of a `dev_t`.
fn split_dev(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

/// Reads completed, sectors read, ms spent reading, ms with I/O in flight: fields 1, 3, 4 and 10.
fn parse_stat(text: &str) -> Option<(u64, u64, u64, u64)> {
    let fields: Vec<u64> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    Some((
        *fields.first()?,
        *fields.get(2)?,
        *fields.get(3)?,
        *fields.get(9)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_a_dev_t_as_glibc_does() {
        // makedev(254, 0) and makedev(259, 65537).
        assert_eq!(split_dev(0xfe00), (254, 0));
        assert_eq!(split_dev((259 << 8) | (0x1000 << 12) | 1), (259, 4097));
    }

    #[test]
    fn reads_the_stat_files_read_fields() {
        let line = "   41253        0  4403718    21960     1021      107    74728      412        0    24892    22373\n";
        assert_eq!(parse_stat(line), Some((41253, 4403718, 21960, 24892)));
        assert_eq!(parse_stat("1 2 3"), None);
        assert_eq!(parse_stat("1 2 x 4 5 6 7 8 9 10"), None);
    }

    #[test]
    fn a_phase_is_the_difference_of_two_readings() {
        let before = ReadCounters {
            at: Instant::now(),
            reads: 10,
            sectors: 80,
            read_wait_ms: 5,
            busy_ms: 7,
        };
        let after = ReadCounters {
            at: before.at + std::time::Duration::from_millis(500),
            reads: 14,
            sectors: 112,
            read_wait_ms: 7,
            busy_ms: 257,
        };
        let phase = before.until(&after);
        assert_eq!(phase.reads, 4);
        assert_eq!(phase.bytes, 32 * 512);
        assert_eq!(phase.kib_per_read(), Some(4.0));
        assert_eq!(phase.read_wait_us(), Some(500.0));
        assert!((phase.busy_share().unwrap() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn the_root_file_systems_device_counters_parse_and_only_grow() {
        // On tmpfs or overlay roots there is no device: nothing to check.
        if let Some(device) = BlockDevice::of(Path::new("/")) {
            let first = device.counters().expect("a parsable stat file");
            let second = device.counters().expect("a parsable stat file");
            assert!(second.reads >= first.reads && second.sectors >= first.sectors);
            assert!(second.busy_ms >= first.busy_ms && second.at >= first.at);
        }
    }
}
