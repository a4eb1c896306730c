//! `peers`: seglog beside the embedded crates a Rust user would otherwise pick for an append-only
//! log read by offset (rocksdb, fjall, raft-engine, a naive `BufWriter` log), in one run, with the
//! disk's own limits measured in the same run. See README.md beside this crate.

mod device;
mod disk;
mod engines;
mod machine;
mod report;
mod workload;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;

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
    /// seglog, seglog-gc16, seglog-logdir, rocksdb, fjall, raft-engine, naive-bufwriter.
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
    /// Batches appended with one `fdatasync` each for the disk's sync floor.
    #[arg(long, default_value_t = 2000)]
    disk_sync_batches: u64,
    /// Skip the disk-limit measurement.
    #[arg(long)]
    no_disk: bool,
    /// Also write every figure as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
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
    if !args.no_disk {
        let sizes: Vec<usize> = cells.iter().map(|cell| cell.record_bytes).collect();
        let mut sizes = sizes;
        sizes.dedup();
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
        let payloads = Payloads::new(cell.record_bytes, report.volume_bytes);
        for engine in &engines {
            if *engine == "seglog-gc16" && !cell.sync {
                continue;
            }
            eprintln!("peers: {engine} {}", cell.name());
            let dir = root.path().join(format!("{engine}-{}", cell.name()));
            let result = run_cell(args, engine, *cell, &payloads, &dir);
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
    engine: &str,
    cell: Cell,
    payloads: &Payloads,
    dir: &std::path::Path,
) -> CellResult {
    let mut result = CellResult::new(engine, cell, payloads);
    if let Err(error) = measure(args, engine, cell, payloads, dir, &mut result) {
        result.error = Some(error.to_string());
    }
    result
}

fn measure(
    args: &Args,
    name: &str,
    cell: Cell,
    payloads: &Payloads,
    dir: &std::path::Path,
    result: &mut CellResult,
) -> PeerResult<()> {
    std::fs::create_dir_all(dir).map_err(context("creating the engine directory"))?;
    settle(result);
    let mut store = engines::open(name, dir, args.seglog_in_flight)?;
    let started = Instant::now();
    let latencies_us = store.append_all(payloads, cell.sync)?;
    result.append = Some(Rate::of(
        payloads.record_count,
        payloads.payload_bytes(),
        started,
    ));
    result.append_latency_us = Some(LatencyUs::of(latencies_us));
    if !store.measures_reads() {
        return Ok(());
    }
    result.hot_scan = Some(scan(store.as_mut(), payloads)?);
    let round_trip_before_ns = machine::core_round_trip_ns();
    result.hot_lookups = Some(lookups(store.as_mut(), payloads, args.hot_lookups, 1)?);
    result.core_round_trip_ns = Some([round_trip_before_ns, machine::core_round_trip_ns()]);
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
