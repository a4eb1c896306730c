//! The run's figures: per engine and cell, the disk's limits, and the machine; as Markdown tables
//! (stdout) and JSON (`--json`).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::device::DeviceReads;
use crate::disk::DiskLimits;
use crate::workload::{Cell, LatencyUs, Payloads, Rate, file_system_of};

/// The crates a Rust user would otherwise pick: issue 4's "embedded peers".
const CRATES: [&str; 3] = ["rocksdb", "fjall", "raft-engine"];
/// The naive log: a reference beside the crates (issue 4 gives its figure apart from theirs).
const NAIVE: &str = "naive-bufwriter";

#[derive(Debug, Serialize)]
pub struct Report {
    pub date_utc: String,
    pub command: String,
    pub cores: usize,
    pub kernel: String,
    pub file_system: String,
    pub drop_caches: String,
    pub volume_bytes: u64,
    pub batch_records: usize,
    pub disk: Option<DiskLimits>,
    /// Per cell, whether the seglog rows wrote with `O_DIRECT`, and why (`--seglog-direct-io`).
    pub seglog_writes: Vec<WritePath>,
    pub results: Vec<CellResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WritePath {
    pub cell: String,
    pub direct_writes: bool,
    pub reason: String,
}

impl WritePath {
    /// `1024-sync O_DIRECT (auto: …)`.
    pub fn describe(&self) -> String {
        let path = if self.direct_writes {
            "O_DIRECT"
        } else {
            "buffered"
        };
        format!("{} {path} ({})", self.cell, self.reason)
    }
}

#[derive(Debug, Serialize)]
pub struct CellResult {
    pub engine: String,
    pub cell: String,
    pub record_bytes: usize,
    pub sync_per_batch: bool,
    pub records: u64,
    pub append: Option<Rate>,
    pub append_latency_us: Option<LatencyUs>,
    /// Bytes allocated on disk (after reopen and `sync`) per payload byte.
    pub disk_bytes_per_payload_byte: Option<f64>,
    /// The scan right after the appends: from the page cache, or from the device where the
    /// writes bypassed it (seglog with `O_DIRECT`).
    pub first_scan: Option<Rate>,
    /// The scan after that one, every engine's data in memory.
    pub hot_scan: Option<Rate>,
    pub hot_lookups: Option<Rate>,
    /// The machine's cross-core round trip right before and right after the hot lookups, ns.
    pub core_round_trip_ns: Option<[f64; 2]>,
    /// CPU time the host took from this VM's vCPUs (`steal`, ms summed over them) during the hot
    /// scan and during the hot lookups (with the round trips around them).
    pub hot_steal_ms: Option<[f64; 2]>,
    pub cold_scan: Option<Rate>,
    pub cold_lookups: Option<Rate>,
    /// The device's reads during the cold scan and the cold lookups (`device::DeviceReads`).
    pub cold_scan_device: Option<DeviceReads>,
    pub cold_lookups_device: Option<DeviceReads>,
    /// Seconds waited for free page reporting before the append, the cold scan and the cold
    /// lookups (`machine::settle_page_reporting`; empty where the machine does not report).
    pub page_reporting_waits_s: Vec<f64>,
    pub error: Option<String>,
}

impl CellResult {
    pub fn new(engine: &str, cell: Cell, payloads: &Payloads) -> CellResult {
        CellResult {
            engine: engine.to_owned(),
            cell: cell.name(),
            record_bytes: cell.record_bytes,
            sync_per_batch: cell.sync,
            records: payloads.record_count,
            append: None,
            append_latency_us: None,
            disk_bytes_per_payload_byte: None,
            first_scan: None,
            hot_scan: None,
            hot_lookups: None,
            core_round_trip_ns: None,
            hot_steal_ms: None,
            cold_scan: None,
            cold_lookups: None,
            cold_scan_device: None,
            cold_lookups_device: None,
            page_reporting_waits_s: Vec::new(),
            error: None,
        }
    }

    /// A progress line for stderr.
    pub fn one_line(&self) -> String {
        let mut line = format!(
            "append {} rec/s {} MB/s; first scan {} MB/s; hot scan {} MB/s; hot lookups {}/s (core round trip {} ns; CPU steal {} ms); cold scan {} MB/s; cold lookups {}/s",
            records(self.append.map(|r| r.records_per_s)),
            mb(self.append.map(|r| r.mb_per_s)),
            mb(self.first_scan.map(|r| r.mb_per_s)),
            mb(self.hot_scan.map(|r| r.mb_per_s)),
            records(self.hot_lookups.map(|r| r.records_per_s)),
            round_trips(self.core_round_trip_ns),
            steal(self.hot_steal_ms),
            mb(self.cold_scan.map(|r| r.mb_per_s)),
            records(self.cold_lookups.map(|r| r.records_per_s)),
        );
        if let Some(error) = &self.error {
            let _ = write!(line, "; error: {error}");
        }
        line
    }
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

fn date_utc() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map_or_else(|| "unknown".to_owned(), |date| date.trim().to_owned())
}

fn records(value: Option<f64>) -> String {
    let Some(value) = value else {
        return "–".to_owned();
    };
    let digits = format!("{:.0}", value);
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

fn mb(value: Option<f64>) -> String {
    match value {
        None => "–".to_owned(),
        Some(value) if value >= 100.0 => format!("{value:.0}"),
        Some(value) => format!("{value:.1}"),
    }
}

impl Report {
    pub fn new(dir: &Path, volume_bytes: u64) -> Report {
        Report {
            date_utc: date_utc(),
            command: command_line(),
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".to_owned(), |k| k.trim().to_owned()),
            file_system: file_system_of(dir),
            drop_caches: String::new(),
            volume_bytes,
            batch_records: crate::workload::BATCH_RECORDS,
            disk: None,
            seglog_writes: Vec::new(),
            results: Vec::new(),
        }
    }

    /// The engine's append figure as a share of the disk's: MB/s over the faster of its buffered
    /// and `O_DIRECT` 1 MiB `pwrite` MB/s without sync, records/s over the `pwrite`+`fdatasync` floor with sync.
    fn disk_ratio(&self, result: &CellResult) -> Option<f64> {
        let disk = self.disk.as_ref()?;
        let append = result.append?;
        if result.sync_per_batch {
            let floor = disk
                .sync_floor
                .iter()
                .find(|floor| floor.record_bytes == result.record_bytes)?;
            Some(append.records_per_s / floor.records_per_s)
        } else {
            Some(append.mb_per_s / disk.best_write_mb_per_s())
        }
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Run {}: `{}` — {} cores, Linux {}, scratch on {}; {} MB of payload per engine and cell, \
             batches of {} records, one writer (seglog-gc16: 16 producers); page-cache drop: {}; \
             seglog writes: {}.\n",
            self.date_utc,
            self.command,
            self.cores,
            self.kernel,
            self.file_system,
            self.volume_bytes / 1_000_000,
            self.batch_records,
            self.drop_caches,
            self.seglog_writes
                .iter()
                .map(WritePath::describe)
                .collect::<Vec<_>>()
                .join("; ")
        );
        self.write_disk(&mut out);
        self.write_table(&mut out);
        self.write_device(&mut out);
        self.write_versus(&mut out);
        out
    }

    fn write_disk(&self, out: &mut String) {
        let Some(disk) = &self.disk else {
            return;
        };
        let _ = write!(
            out,
            "Disk, same run: buffered 1 MiB `pwrite` {} MB/s ({} MB/s with a final `fdatasync`), \
             `O_DIRECT` 1 MiB `pwrite` {} MB/s (through a final `fdatasync`), cold 1 MiB `pread` {} MB/s, cold random 4 KiB `pread` one at a time {} reads/s",
            mb(Some(disk.write_mb_per_s)),
            mb(Some(disk.write_fdatasync_mb_per_s)),
            mb(disk.direct_write_mb_per_s),
            mb(disk.read_cold_mb_per_s),
            records(disk.read_cold_random_4kib_per_s),
        );
        if let (Some(scan), Some(random)) = (disk.read_cold_device, disk.read_cold_random_device) {
            let _ = write!(
                out,
                " (device: 1 MiB reads as {} reads of {} KiB, read wait {} µs, busy {}; 4 KiB \
                 reads {} µs wait each)",
                scan.reads,
                one_decimal(scan.kib_per_read()),
                whole(scan.read_wait_us()),
                percent(scan.busy_share()),
                whole(random.read_wait_us()),
            );
        }
        for writes in &disk.batch_writes {
            let _ = write!(
                out,
                "; {} B records' batches ({} B writes): buffered {} MB/s ({} MB/s with a final \
                 `fdatasync`), `O_DIRECT` {} MB/s",
                writes.record_bytes,
                writes.batch_bytes,
                mb(Some(writes.buffered_mb_per_s)),
                mb(Some(writes.buffered_synced_mb_per_s)),
                mb(writes.direct_mb_per_s),
            );
        }
        for floor in &disk.sync_floor {
            let _ = write!(
                out,
                "; sync floor ({} B records, one `pwrite` of a 100-record batch + `fdatasync`) {} rec/s \
                 (fdatasync p50 {} µs, p99.9 {} µs)",
                floor.record_bytes,
                records(Some(floor.records_per_s)),
                floor.fdatasync_p50_us,
                floor.fdatasync_p999_us
            );
        }
        let _ = writeln!(out, ".\n");
    }

    fn write_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "| engine | cell | appends/s | append MB/s | × disk | batch latency p50 / p99 / p99.9 / max µs \
             | disk B per payload B | first scan MB/s | hot scan MB/s | cold scan MB/s | hot lookups/s \
             | core round trip before / after ns | CPU steal, hot scan / lookups ms | cold lookups/s |"
        );
        let _ = writeln!(
            out,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for result in &self.results {
            let latency = result.append_latency_us.map_or_else(
                || "–".to_owned(),
                |l| format!("{} / {} / {} / {}", l.p50, l.p99, l.p999, l.max),
            );
            let appends = match &result.error {
                Some(error) if result.append.is_none() => format!("error: {error}"),
                _ => records(result.append.map(|r| r.records_per_s)),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                result.engine,
                result.cell,
                appends,
                mb(result.append.map(|r| r.mb_per_s)),
                self.disk_ratio(result)
                    .map_or_else(|| "–".to_owned(), |r| format!("{r:.2}")),
                latency,
                result
                    .disk_bytes_per_payload_byte
                    .map_or_else(|| "–".to_owned(), |r| format!("{r:.2}")),
                mb(result.first_scan.map(|r| r.mb_per_s)),
                mb(result.hot_scan.map(|r| r.mb_per_s)),
                mb(result.cold_scan.map(|r| r.mb_per_s)),
                records(result.hot_lookups.map(|r| r.records_per_s)),
                round_trips(result.core_round_trip_ns),
                steal(result.hot_steal_ms),
                records(result.cold_lookups.map(|r| r.records_per_s)),
            );
        }
        for result in self
            .results
            .iter()
            .filter(|r| r.error.is_some() && r.append.is_some())
        {
            let _ = writeln!(
                out,
                "\n{} {}: error after the append phase: {}",
                result.engine,
                result.cell,
                result.error.as_deref().unwrap_or_default()
            );
        }
        let _ = writeln!(out);
    }

    /// The device's reads during each cold phase: how many, how large, how long each waited and
    /// how much of the phase the device was busy; for lookups, per lookup beside the lookup's
    /// own time (an engine adding nothing of its own spends about its device wait per lookup).
    fn write_device(&self, out: &mut String) {
        let measured =
            |r: &&CellResult| r.cold_scan_device.is_some() || r.cold_lookups_device.is_some();
        if !self.results.iter().any(|r| measured(&r)) {
            return;
        }
        let _ = writeln!(
            out,
            "The device during the cold phases (`/sys/dev/block/…/stat`):\n\n\
             | engine | cell | cold scan MB/s | device reads | KiB per read | read wait µs | device busy \
             | cold lookups/s | µs per lookup | device reads per lookup | device wait µs per lookup |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
        for result in self.results.iter().filter(measured) {
            let scan = result.cold_scan_device;
            let lookups = result.cold_lookups_device;
            let count = result
                .cold_lookups
                .map(|rate| rate.records_per_s * rate.seconds);
            let per_lookup = |value: Option<f64>| match (value, count) {
                (Some(value), Some(count)) if count >= 1.0 => Some(value / count),
                _ => None,
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                result.engine,
                result.cell,
                mb(result.cold_scan.map(|r| r.mb_per_s)),
                scan.map_or_else(|| "–".to_owned(), |s| s.reads.to_string()),
                one_decimal(scan.and_then(|s| s.kib_per_read())),
                whole(scan.and_then(|s| s.read_wait_us())),
                percent(scan.and_then(|s| s.busy_share())),
                records(result.cold_lookups.map(|r| r.records_per_s)),
                one_decimal(result.cold_lookups.map(|r| 1e6 / r.records_per_s)),
                two_decimals(per_lookup(lookups.map(|l| l.reads as f64))),
                one_decimal(per_lookup(lookups.map(|l| l.read_wait_ms as f64 * 1000.0))),
            );
        }
        let _ = writeln!(out);
    }

    /// seglog's figure over the best crate's and over the naive log's, per cell and measure.
    fn write_versus(&self, out: &mut String) {
        type Measure = fn(&CellResult) -> Option<f64>;
        let measures: [(&str, Measure); 5] = [
            ("appends/s", |r| r.append.map(|a| a.records_per_s)),
            ("hot scan MB/s", |r| r.hot_scan.map(|a| a.mb_per_s)),
            ("cold scan MB/s", |r| r.cold_scan.map(|a| a.mb_per_s)),
            ("hot lookups/s", |r| r.hot_lookups.map(|a| a.records_per_s)),
            ("cold lookups/s", |r| {
                r.cold_lookups.map(|a| a.records_per_s)
            }),
        ];
        let _ = writeln!(
            out,
            "| cell | measure | seglog | best crate | seglog ÷ best crate | naive log | seglog ÷ naive log |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|");
        let mut cells: Vec<&str> = self.results.iter().map(|r| r.cell.as_str()).collect();
        cells.dedup();
        for cell in cells {
            let in_cell = |engine: &str| {
                self.results
                    .iter()
                    .find(|r| r.cell == cell && r.engine == engine)
            };
            for (label, measure) in measures {
                let best = CRATES
                    .iter()
                    .filter_map(|peer| Some((*peer, measure(in_cell(peer)?)?)))
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                let naive = in_cell(NAIVE).and_then(measure).map(|value| (NAIVE, value));
                for engine in ["seglog", "seglog-gc16", "seglog-inline"] {
                    let Some(value) = in_cell(engine).and_then(measure) else {
                        continue;
                    };
                    let versus = |other: Option<(&str, f64)>| match other {
                        Some((peer, other)) => (
                            format!("{} ({peer})", number(label, other)),
                            format!("{:.2}", value / other),
                        ),
                        None => ("–".to_owned(), "–".to_owned()),
                    };
                    let (best_text, best_ratio) = versus(best);
                    let (naive_text, naive_ratio) = versus(naive);
                    let _ = writeln!(
                        out,
                        "| {cell} | {label} | {} ({engine}) | {best_text} | {best_ratio} | {naive_text} | {naive_ratio} |",
                        number(label, value)
                    );
                }
            }
        }
    }
}

fn whole(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |value| format!("{value:.0}"))
}

fn one_decimal(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |value| format!("{value:.1}"))
}

fn two_decimals(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |value| format!("{value:.2}"))
}

fn percent(share: Option<f64>) -> String {
    share.map_or_else(|| "–".to_owned(), |share| format!("{:.0} %", share * 100.0))
}

fn round_trips(round_trips_ns: Option<[f64; 2]>) -> String {
    round_trips_ns.map_or_else(
        || "–".to_owned(),
        |[before, after]| format!("{before:.0} / {after:.0}"),
    )
}

fn steal(steal_ms: Option<[f64; 2]>) -> String {
    steal_ms.map_or_else(
        || "–".to_owned(),
        |[scan, lookups]| format!("{scan:.0} / {lookups:.0}"),
    )
}

fn number(label: &str, value: f64) -> String {
    if label.contains("MB/s") {
        mb(Some(value))
    } else {
        records(Some(value))
    }
}
