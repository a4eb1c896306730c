//! `--vs-disk` through `fio` (`--output-format=json`) when it is installed: the same four
//! measurements as the built-in loop, each a `fio` job of about a second but the buffered write,
//! which runs as long as the engine's phase ([`DiskPattern::buffered_write_time`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

use super::disk::{
    DiskFigures, DiskPattern, FILE_MAX_BYTES, GroupSync, GroupSyncPattern, PAGE_BYTES, WriteLatency,
};
use super::progress::MB;

/// Reads in flight for the deep sequential read over the engine's data set.
const DATA_SET_READ_DEPTH: usize = 16;

pub fn installed() -> bool {
    Command::new("fio")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

pub fn measure(dir: &Path, pattern: DiskPattern) -> anyhow::Result<DiskFigures> {
    let buffered = dir.join("buffered.tmp");
    let direct = dir.join("direct.tmp");
    let direct_block = pattern.block_bytes.div_ceil(PAGE_BYTES) * PAGE_BYTES;
    // Without a sync per write the buffered job does not sync at all, as the engine's phase
    // does not: both then run into the page cache's dirty limit alike.
    let sync = |direct: bool| match (pattern.sync_each, direct) {
        (true, _) => "--fdatasync=1",
        (false, true) => "--end_fsync=1",
        (false, false) => "--end_fsync=0",
    };
    let write = |path: &Path, block: usize, direct: bool, (time, bytes_max): (Duration, u64)| {
        run(
            path,
            &[
                "--rw=write",
                &format!("--bs={block}"),
                &format!("--size={bytes_max}"),
                &format!("--runtime={}", time.as_secs()),
                &format!("--direct={}", u8::from(direct)),
                sync(direct),
            ],
        )
    };
    let buffered_limits = pattern.buffered_write_limits(super::disk::scratch_share(dir)?);
    let buffered_write = write(&buffered, pattern.block_bytes, false, buffered_limits)?;
    let direct_limits = (Duration::from_secs(1), FILE_MAX_BYTES);
    let direct_write = write(&direct, direct_block, true, direct_limits)?;
    let read = |path: &Path, direct: bool| -> anyhow::Result<Value> {
        let size = std::fs::metadata(path)?.len().min(FILE_MAX_BYTES);
        run(
            path,
            &[
                "--rw=read",
                "--bs=1m",
                &format!("--size={size}"),
                &format!("--direct={}", u8::from(direct)),
                "--invalidate=1",
            ],
        )
    };
    let buffered_read = read(&buffered, false)?;
    let direct_read = read(&direct, true)?;
    let size = std::fs::metadata(&direct)?.len();
    let random = run(
        &direct,
        &[
            "--rw=randread",
            "--bs=4k",
            &format!("--size={size}"),
            "--direct=1",
            &format!("--numjobs={}", pattern.queue_depth),
            "--group_reporting",
            "--runtime=1",
            "--time_based",
        ],
    )?;
    Ok(DiskFigures {
        tool: "fio",
        pattern,
        write_buffered_mb_per_s: number(&buffered_write, "write", "bw_bytes")? / MB,
        write_direct_mb_per_s: Some(number(&direct_write, "write", "bw_bytes")? / MB),
        write_latency: sync_latency(&buffered_write),
        read_buffered_mb_per_s: number(&buffered_read, "read", "bw_bytes")? / MB,
        read_buffered_from_data_set: false,
        read_direct_mb_per_s: Some(number(&direct_read, "read", "bw_bytes")? / MB),
        random_read_iops: number(&random, "read", "iops")?,
        random_read_direct: true,
        memcpy_mb_per_s: super::disk::measure_memcpy(),
        group_sync: match pattern.group_sync {
            Some(group) => Some(group_sync(dir, group)?),
            None => None,
        },
        producers: None,
        grouped_producers: Vec::new(),
        notes: Vec::new(),
        limits: None,
    })
}

/// 4 KiB random `O_DIRECT` reads per second over `files` (the engine's own `.log` files, so the
/// baseline reads a data set as large, and as cold in the host's cache, as the engine's), by
/// `queue_depth` jobs for about a second.
pub fn random_reads_per_s(files: &[PathBuf], queue_depth: usize) -> anyhow::Result<f64> {
    let report = fio(&[
        "--name=seglog-bench-data".to_owned(),
        filename_option(files),
        "--rw=randread".to_owned(),
        "--bs=4k".to_owned(),
        "--direct=1".to_owned(),
        "--group_reporting".to_owned(),
        "--runtime=1".to_owned(),
        "--time_based".to_owned(),
        "--readonly".to_owned(),
        format!("--numjobs={queue_depth}"),
    ])?;
    number(&report, "read", "iops")
}

/// Sequential `O_DIRECT` 1 MiB reads over `files` (the engine's data set, after its fetch phase),
/// the best of one read in flight (`psync`) and [`DATA_SET_READ_DEPTH`] (`io_uring`), the latter
/// also from buffers in huge pages where they can be reserved, about a second each, in MB/s.
pub fn sequential_reads(files: &[PathBuf]) -> anyhow::Result<SequentialReads> {
    let read = |engine: &[String]| -> anyhow::Result<f64> {
        let mut arguments = vec![
            "--name=seglog-bench-data".to_owned(),
            filename_option(files),
            "--rw=read".to_owned(),
            "--bs=1m".to_owned(),
            "--direct=1".to_owned(),
            "--runtime=1".to_owned(),
            "--time_based".to_owned(),
            "--readonly".to_owned(),
        ];
        arguments.extend_from_slice(engine);
        Ok(number(&fio(&arguments)?, "read", "bw_bytes")? / MB)
    };
    let one_in_flight = read(&[])?;
    let deep_options = [
        "--ioengine=io_uring".to_owned(),
        format!("--iodepth={DATA_SET_READ_DEPTH}"),
    ];
    let deep = read(&deep_options)?;
    // fio's own buffers are scattered 4 KiB pages: on a virtio disk without indirect descriptors
    // a 1 MiB read of them takes the ring's every slot, one read in flight (`io::direct_buffer`
    // in the library). The disk's limit is read from buffers in huge pages.
    // Where fio refuses them (a `kernel.shmmax` too small, say), the other two figures stand.
    let deep_huge_pages = HugePages::reserve(DATA_SET_READ_HUGE_PAGES).and_then(|_reserved| {
        let options = [&deep_options[..], &["--iomem=shmhuge".to_owned()]].concat();
        read(&options).ok()
    });
    Ok(SequentialReads {
        one_in_flight,
        deep,
        deep_huge_pages,
    })
}

/// Sequential 1 MiB reads through the page cache over the engine's data set, one reader per
/// partition (`partitions`: each one's `.log` files in order), all at once, each reading its
/// files once: the disk's rate through the page cache for the cold consumers' pattern, in MB/s.
/// The caller drops the page cache first. Not time-based: a second pass would read the first's
/// pages from memory.
pub fn sequential_reads_through_page_cache(partitions: &[Vec<PathBuf>]) -> anyhow::Result<f64> {
    let mut arguments = vec![
        "--rw=read".to_owned(),
        "--bs=1m".to_owned(),
        "--direct=0".to_owned(),
        "--readonly".to_owned(),
        "--group_reporting".to_owned(),
    ];
    for (number, files) in partitions.iter().enumerate() {
        arguments.push(format!("--name=seglog-bench-partition-{number}"));
        arguments.push(filename_option(files));
    }
    Ok(number(&fio(&arguments)?, "read", "bw_bytes")? / MB)
}

/// [`sequential_reads`]' figures, MB/s.
pub struct SequentialReads {
    pub one_in_flight: f64,
    pub deep: f64,
    /// `None` where no huge pages could be reserved, or fio could not use them.
    pub deep_huge_pages: Option<f64>,
}

impl SequentialReads {
    pub fn best(&self) -> f64 {
        self.one_in_flight
            .max(self.deep)
            .max(self.deep_huge_pages.unwrap_or(0.0))
    }
}

/// Huge pages for the deep read's buffers: [`DATA_SET_READ_DEPTH`] MiB and room to align them.
const DATA_SET_READ_HUGE_PAGES: u64 = DATA_SET_READ_DEPTH as u64 / 2 + 4;

/// Huge pages (`vm.nr_hugepages`) raised for one fio job's buffers (`--iomem=shmhuge`) and
/// lowered back when dropped.
struct HugePages {
    previous: u64,
}

impl HugePages {
    const SETTING: &str = "/proc/sys/vm/nr_hugepages";

    /// `pages` more huge pages, or `None` where the setting cannot be written (not root, a
    /// read-only `/proc/sys`) or the kernel could not find the memory for them.
    fn reserve(pages: u64) -> Option<HugePages> {
        let previous: u64 = std::fs::read_to_string(Self::SETTING)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        std::fs::write(Self::SETTING, (previous + pages).to_string()).ok()?;
        let reserved = HugePages { previous };
        (free_huge_pages()? >= pages).then_some(reserved)
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::SETTING, self.previous.to_string());
    }
}

/// `HugePages_Free` of `/proc/meminfo`.
fn free_huge_pages() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo
        .lines()
        .find(|line| line.starts_with("HugePages_Free:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// fio's `--filename` for several files (`:` separates them; one in a name is escaped).
pub fn filename_option(files: &[PathBuf]) -> String {
    let names: Vec<String> = files
        .iter()
        .map(|path| path.display().to_string().replace(':', "\\:"))
        .collect();
    format!("--filename={}", names.join(":"))
}

/// `fdatasync` latency and write rate of `group.writers` jobs, each appending `group.block_bytes`
/// writes to its own file with a sync after each, all at once for about a second.
fn group_sync(dir: &Path, group: GroupSyncPattern) -> anyhow::Result<GroupSync> {
    let report = fio(&[
        "--name=seglog-bench-group-sync".to_owned(),
        format!("--directory={}", dir.display()),
        "--rw=write".to_owned(),
        "--fdatasync=1".to_owned(),
        format!("--size={FILE_MAX_BYTES}"),
        "--group_reporting".to_owned(),
        "--runtime=1".to_owned(),
        "--time_based".to_owned(),
        format!("--bs={}", group.block_bytes),
        format!("--numjobs={}", group.writers),
    ])?;
    Ok(GroupSync {
        latency: sync_latency(&report).context("fio reported no fdatasync latency")?,
        mb_per_s: number(&report, "write", "bw_bytes")? / MB,
    })
}

/// Runs one `fio` job on `path` with `options` and returns its JSON report.
fn run(path: &Path, options: &[&str]) -> anyhow::Result<Value> {
    let mut arguments = vec![
        "--name=seglog-bench".to_owned(),
        format!("--filename={}", path.display()),
    ];
    arguments.extend(options.iter().map(|option| (*option).to_owned()));
    fio(&arguments)
}

/// Runs `fio` (psync engine unless `arguments` name another, JSON output) with `arguments` and
/// returns its report.
fn fio(arguments: &[String]) -> anyhow::Result<Value> {
    let with_engine = [&["--ioengine=psync".to_owned()][..], arguments].concat();
    json(&with_engine)
}

/// Runs `fio --output-format=json` with `arguments` and returns its report.
pub fn json(arguments: &[String]) -> anyhow::Result<Value> {
    let output = Command::new("fio")
        .arg("--output-format=json")
        .args(arguments)
        .output()
        .context("cannot run fio")?;
    if !output.status.success() {
        bail!(
            "fio {arguments:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    report_from(&output.stdout)
}

/// fio's JSON report from its standard output, which may begin with a line of fio's own (a
/// warning) before the report.
fn report_from(stdout: &[u8]) -> anyhow::Result<Value> {
    let start = match stdout.first() {
        Some(b'{') => 0,
        _ => stdout
            .windows(2)
            .position(|pair| pair == b"\n{")
            .map_or(0, |newline| newline + 1),
    };
    serde_json::from_slice(&stdout[start..]).with_context(|| {
        let shown = &stdout[..stdout.len().min(start.max(200))];
        format!(
            "fio's JSON does not parse; its output began: {}",
            String::from_utf8_lossy(shown)
        )
    })
}

/// The `fdatasync` latency percentiles of a write job with `--fdatasync=1` (`jobs[0].sync`),
/// in microseconds; `None` without per-block syncs.
pub fn sync_latency(report: &Value) -> Option<WriteLatency> {
    let latency = &report["jobs"][0]["sync"]["lat_ns"];
    let percentile = |key: &str| Some(latency["percentile"][key].as_f64()? as u64 / 1000);
    Some(WriteLatency {
        p50_us: percentile("50.000000")?,
        p99_us: percentile("99.000000")?,
        p999_us: percentile("99.900000")?,
        max_us: latency["max"].as_f64()? as u64 / 1000,
    })
}

/// `jobs[0].<direction>.<field>` of a fio JSON report.
pub fn number(report: &Value, direction: &str, field: &str) -> anyhow::Result<f64> {
    report["jobs"][0][direction][field]
        .as_f64()
        .with_context(|| format!("fio's JSON has no jobs[0].{direction}.{field}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_after_a_line_of_fios_own_parses_and_garbage_does_not() {
        let report = report_from(b"fio: a warning of its own\n{\"jobs\": []}\n").unwrap();
        assert_eq!(report["jobs"], serde_json::json!([]));
        assert_eq!(report_from(b"{\"a\": 1}").unwrap()["a"], 1);
        let error = report_from(b"no report").unwrap_err();
        assert!(format!("{error:#}").contains("no report"), "{error:#}");
    }
}
