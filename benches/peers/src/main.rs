//! `peers`: seglog beside the embedded crates a Rust user would otherwise pick for an append-only
//! log read by offset (rocksdb, fjall, raft-engine, a naive `BufWriter` log), in one run, with the
//! disk's own limits measured in the same run. See README.md beside this crate.

mod device;
mod disk;
mod engines;
mod machine;
mod report;
mod workload;

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Parser, ValueEnum};

use crate::device::{BlockDevice, on_device};
use crate::engines::{ENGINE_NAMES, LogStore};
use crate::report::{CellResult, Report};
use crate::workload::{
    Cell, LatencyUs, Payloads, PeerError, PeerResult, Rate, Rng, allocated_bytes, context,
    drop_page_cache, sync_all,
};

#[derive(Debug, Parser)]
#[command(
    name = "peers",
    about = "seglog vs embedded peers: appends, scans and lookups by offset"
)]
struct Args {
    /// Parent of the scratch directories (one fresh directory per engine and cell, removed
    /// after). Use a disk, not tmpfs.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    dir: PathBuf,
    /// Payload megabytes (10^6 bytes) appended per engine and cell.
    #[arg(long, default_value_t = 256)]
    volume_mb: u64,
    /// Engines to run, comma-separated (default: all):
    /// seglog, seglog-gc16, seglog-inline, rocksdb, fjall, raft-engine, naive-bufwriter.
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,
    /// Cells to run, comma-separated (default: all): 100-nosync, 100-sync, 1024-nosync, 1024-sync.
    #[arg(long, value_delimiter = ',')]
    cells: Vec<String>,
    /// Random single-record lookups with a hot page cache.
    #[arg(long, default_value_t = 200_000)]
    hot_lookups: u64,
    /// Random single-record lookups after dropping the page cache.
    #[arg(long, default_value_t = 20_000)]
    cold_lookups: u64,
    /// seglog's single writer: appends kept in flight without sync (Kafka's
    /// `max.in.flight.requests.per.connection` default is 5). With sync it waits for each.
    #[arg(long, default_value_t = 5)]
    seglog_in_flight: usize,
    /// seglog's write path (all three seglog rows), per cell: `auto` takes the path seglog's own
    /// appends of the cell ran faster on, in a calibration just before it (README).
    #[arg(long, value_enum, default_value_t = DirectIo::Auto)]
    seglog_direct_io: DirectIo,
    /// Batches appended with one `fdatasync` each for the disk's sync floor.
    #[arg(long, default_value_t = 2000)]
    disk_sync_batches: u64,
    /// Measure the appends only (no scans, lookups or reopen).
    #[arg(long)]
    appends_only: bool,
    /// Skip the disk-limit measurement.
    #[arg(long)]
    no_disk: bool,
    /// Also write every figure as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DirectIo {
    Auto,
    On,
    Off,
}

/// seglog's appends per path in a cell's calibration (`--seglog-direct-io auto`), in
/// alternating runs of [`CALIBRATION_BYTES`] each.
const CALIBRATION_ROUNDS: usize = 2;
const CALIBRATION_BYTES: u64 = 32_000_000;

/// Whether seglog writes `cell` with `O_DIRECT` in this run, and why (for the report): `on` and
/// `off` as named, `auto` the path seglog's own appends of the cell ran faster on just before.
fn seglog_write_path(args: &Args, root: &Path, cell: Cell) -> PeerResult<report::WritePath> {
    let (direct_writes, reason) = match args.seglog_direct_io {
        DirectIo::On => (true, "--seglog-direct-io on".to_owned()),
        DirectIo::Off => (false, "--seglog-direct-io off".to_owned()),
        DirectIo::Auto => {
            let [buffered, direct] = calibrate(args, root, cell)?;
            (direct > buffered, calibration_reason(buffered, direct))
        }
    };
    Ok(report::WritePath {
        cell: cell.name(),
        direct_writes,
        reason,
    })
}

/// seglog's append MB/s for `cell` buffered and with `O_DIRECT`, each over
/// [`CALIBRATION_ROUNDS`] runs of [`CALIBRATION_BYTES`], the paths alternating, each run in a
/// fresh directory removed after it, timed as the cell times its appends.
fn calibrate(args: &Args, root: &Path, cell: Cell) -> PeerResult<[f64; 2]> {
    let payloads = Payloads::new(
        cell.record_bytes,
        CALIBRATION_BYTES.min(args.volume_mb * 1_000_000),
    );
    let mut seconds = [0.0f64; 2];
    for _ in 0..CALIBRATION_ROUNDS {
        for (path, direct_writes) in [false, true].into_iter().enumerate() {
            let dir = root.join(format!("calibrate-{}-{path}", cell.name()));
            std::fs::create_dir_all(&dir).map_err(context("creating the calibration directory"))?;
            let options = engines::SeglogOptions {
                in_flight: args.seglog_in_flight,
                direct_writes,
            };
            let mut store = engines::open("seglog", &dir, options)?;
            let started = Instant::now();
            store.append_all(&payloads, cell.sync)?;
            seconds[path] += started.elapsed().as_secs_f64();
            drop(store);
            let _ = std::fs::remove_dir_all(&dir);
            sync_all();
        }
    }
    let megabytes = (CALIBRATION_ROUNDS as u64 * payloads.payload_bytes()) as f64 / 1e6;
    Ok(seconds.map(|seconds| megabytes / seconds))
}

fn calibration_reason(buffered_mb_per_s: f64, direct_mb_per_s: f64) -> String {
    format!(
        "auto: seglog's own appends of the cell, {CALIBRATION_ROUNDS} × {} MB per path, \
         O_DIRECT {direct_mb_per_s:.0} MB/s, buffered {buffered_mb_per_s:.0} MB/s",
        CALIBRATION_BYTES / 1_000_000
    )
}

fn selected_cells(args: &Args) -> PeerResult<Vec<Cell>> {
    for name in &args.cells {
        if !Cell::ALL.iter().any(|cell| cell.name() == *name) {
            return Err(PeerError(format!("unknown cell {name}")));
        }
    }
    Ok(Cell::ALL
        .into_iter()
        .filter(|cell| args.cells.is_empty() || args.cells.contains(&cell.name()))
        .collect())
}

fn selected_engines(args: &Args) -> PeerResult<Vec<&'static str>> {
    for name in &args.engines {
        if !ENGINE_NAMES.contains(&name.as_str()) {
            return Err(PeerError(format!("unknown engine {name}")));
        }
    }
    Ok(ENGINE_NAMES
        .into_iter()
        .filter(|name| args.engines.is_empty() || args.engines.iter().any(|e| e == name))
        .collect())
}

fn main() {
    let args = Args::parse();
    if let Err(error) = run(&args) {
        eprintln!("peers: {error}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> PeerResult<()> {
    let cells = selected_cells(args)?;
    let engines = selected_engines(args)?;
    std::fs::create_dir_all(&args.dir).map_err(context("creating --dir"))?;
    let root = tempfile::Builder::new()
        .prefix("seglog-peers-")
        .tempdir_in(&args.dir)
        .map_err(context("creating the scratch directory"))?;
    let mut report = Report::new(&args.dir, args.volume_mb * 1_000_000);
    report.drop_caches = match drop_page_cache() {
        Ok(()) => "permitted".to_owned(),
        Err(error) => format!("not permitted ({error}): cold figures omitted"),
    };
    eprintln!(
        "peers: scratch in {} ({})",
        root.path().display(),
        report.file_system
    );
    let mut sizes: Vec<usize> = cells.iter().map(|cell| cell.record_bytes).collect();
    sizes.dedup();
    if !args.no_disk {
        eprintln!("peers: measuring the disk's limits");
        report.disk = Some(disk::measure(
            root.path(),
            report.volume_bytes,
            &sizes,
            args.disk_sync_batches,
            args.cold_lookups,
        )?);
    }
    for cell in &cells {
        let path = seglog_write_path(args, root.path(), *cell)?;
        eprintln!("peers: seglog writes {}", path.describe());
        let seglog = engines::SeglogOptions {
            in_flight: args.seglog_in_flight,
            direct_writes: path.direct_writes,
        };
        report.seglog_writes.push(path);
        let payloads = Payloads::new(cell.record_bytes, report.volume_bytes);
        for engine in &engines {
            if *engine == "seglog-gc16" && !cell.sync {
                continue;
            }
            eprintln!("peers: {engine} {}", cell.name());
            let dir = root.path().join(format!("{engine}-{}", cell.name()));
            let result = run_cell(args, seglog, engine, *cell, &payloads, &dir);
            let _ = std::fs::remove_dir_all(&dir);
            sync_all();
            eprintln!("peers:   {}", result.one_line());
            report.results.push(result);
        }
    }
    println!("{}", report.markdown());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report).map_err(context("encoding JSON"))?;
        std::fs::write(path, json).map_err(context("writing --json"))?;
    }
    Ok(())
}

fn run_cell(
    args: &Args,
    seglog: engines::SeglogOptions,
    engine: &str,
    cell: Cell,
    payloads: &Payloads,
    dir: &std::path::Path,
) -> CellResult {
    let mut result = CellResult::new(engine, cell, payloads);
    if let Err(error) = measure(args, seglog, engine, cell, payloads, dir, &mut result) {
        result.error = Some(error.to_string());
    }
    result
}

fn measure(
    args: &Args,
    seglog: engines::SeglogOptions,
    name: &str,
    cell: Cell,
    payloads: &Payloads,
    dir: &std::path::Path,
    result: &mut CellResult,
) -> PeerResult<()> {
    std::fs::create_dir_all(dir).map_err(context("creating the engine directory"))?;
    settle(result);
    let mut store = engines::open(name, dir, seglog)?;
    let started = Instant::now();
    let latencies_us = store.append_all(payloads, cell.sync)?;
    result.append = Some(Rate::of(
        payloads.record_count,
        payloads.payload_bytes(),
        started,
    ));
    result.append_latency_us = Some(LatencyUs::of(latencies_us));
    if !store.measures_reads() || args.appends_only {
        return Ok(());
    }
    // The first pass reads what the appends left: the page cache's copy, or the device's after
    // writes that bypass it (O_DIRECT). The second reads with every engine's data in memory.
    result.first_scan = Some(scan(store.as_mut(), payloads)?);
    let steal_before_scan = machine::steal_ms();
    result.hot_scan = Some(scan(store.as_mut(), payloads)?);
    let steal_after_scan = machine::steal_ms();
    let round_trip_before_ns = machine::core_round_trip_ns();
    result.hot_lookups = Some(median_of_passes(|pass| {
        lookups(store.as_mut(), payloads, args.hot_lookups, 1 + 10 * pass)
    })?);
    result.core_round_trip_ns = Some([round_trip_before_ns, machine::core_round_trip_ns()]);
    if let (Some(before), Some(middle), Some(after)) =
        (steal_before_scan, steal_after_scan, machine::steal_ms())
    {
        result.hot_steal_ms = Some([middle - before, after - middle]);
    }
    store.reopen()?;
    sync_all();
    result.disk_bytes_per_payload_byte =
        Some(allocated_bytes(dir) as f64 / payloads.payload_bytes() as f64);
    if drop_page_cache().is_ok() {
        let device = BlockDevice::of(dir);
        settle(result);
        let (cold_scan, reads) = on_device(device.as_ref(), || scan(store.as_mut(), payloads))?;
        result.cold_scan = Some(cold_scan);
        result.cold_scan_device = reads;
        drop_page_cache()?;
        settle(result);
        let (cold_lookups, reads) = on_device(device.as_ref(), || {
            lookups(store.as_mut(), payloads, args.cold_lookups, 2)
        })?;
        result.cold_lookups = Some(cold_lookups);
        result.cold_lookups_device = reads;
    }
    Ok(())
}

/// Waits for memory freed before the next phase to be handed back to the host, and notes it.
fn settle(result: &mut CellResult) {
    if let Some(waited) = machine::settle_page_reporting() {
        result.page_reporting_waits_s.push(waited.as_secs_f64());
    }
}

fn scan(store: &mut dyn LogStore, payloads: &Payloads) -> PeerResult<Rate> {
    let started = Instant::now();
    let totals = store.scan(payloads)?;
    let rate = Rate::of(totals.records, totals.value_bytes, started);
    totals.check(payloads)?;
    Ok(rate)
}

/// Passes of a measure run one after the other (each engine's the same).
const HOT_LOOKUP_PASSES: u64 = 3;

/// The pass of [`HOT_LOOKUP_PASSES`] with the median rate: a slow spell of the cores (the round
/// trip between them moves from minute to minute) over one pass does not set the figure.
fn median_of_passes(mut pass: impl FnMut(u64) -> PeerResult<Rate>) -> PeerResult<Rate> {
    let mut rates = (0..HOT_LOOKUP_PASSES)
        .map(&mut pass)
        .collect::<PeerResult<Vec<_>>>()?;
    rates.sort_by(|a, b| a.records_per_s.total_cmp(&b.records_per_s));
    Ok(rates[rates.len() / 2])
}

fn lookups(
    store: &mut dyn LogStore,
    payloads: &Payloads,
    count: u64,
    seed: u64,
) -> PeerResult<Rate> {
    let mut rng = Rng::new(0x100c_0000 + seed);
    let started = Instant::now();
    for _ in 0..count {
        store.lookup(payloads, rng.below(payloads.record_count))?;
    }
    Ok(Rate::of(
        count,
        count * payloads.record_bytes as u64,
        started,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        Args::parse_from(["peers", "--volume-mb", "1"].iter().chain(extra))
    }

    #[test]
    fn auto_runs_seglogs_appends_of_the_cell_on_both_paths_and_keeps_the_faster() {
        let root = tempfile::tempdir().unwrap();
        let cell = Cell::ALL[1];
        let path = seglog_write_path(&args(&[]), root.path(), cell).unwrap();
        assert_eq!(path.cell, cell.name());
        let figure = |label: &str| -> f64 {
            let after = path.reason.split(label).nth(1).unwrap();
            after.split_whitespace().next().unwrap().parse().unwrap()
        };
        let (direct, buffered) = (figure("O_DIRECT "), figure("buffered "));
        assert!(direct > 0.0 && buffered > 0.0, "{}", path.reason);
        // The reason prints whole MB/s: equal there, the unrounded figures chose either way.
        if direct != buffered {
            assert_eq!(path.direct_writes, direct > buffered, "{}", path.reason);
        }
        let left: Vec<_> = std::fs::read_dir(root.path()).unwrap().collect();
        assert!(left.is_empty(), "the calibration's directories are removed");
    }

    #[test]
    fn the_median_pass_is_the_middle_rate() {
        let rate = |records_per_s| Rate {
            records_per_s,
            mb_per_s: 0.0,
            seconds: 1.0,
        };
        let figures = [300.0, 100.0, 200.0];
        let mut seeds = Vec::new();
        let median = median_of_passes(|pass| {
            seeds.push(pass);
            Ok(rate(figures[pass as usize]))
        });
        assert_eq!(median.unwrap().records_per_s, 200.0);
        assert_eq!(seeds, [0, 1, 2], "each pass once, in order");
    }

    #[test]
    fn on_and_off_are_taken_as_named_without_a_calibration() {
        let root = tempfile::tempdir().unwrap();
        let cell = Cell::ALL[0];
        let on = seglog_write_path(&args(&["--seglog-direct-io", "on"]), root.path(), cell);
        let off = seglog_write_path(&args(&["--seglog-direct-io", "off"]), root.path(), cell);
        assert!(on.unwrap().direct_writes);
        assert!(!off.unwrap().direct_writes);
    }
}
