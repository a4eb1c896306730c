//! The end of a run: the table on stdout and the JSON document (`--json`), whose keys
//! BENCHMARKS.md documents.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::thread;

use serde_json::{Map, Value, json};

use super::args::Workload;
use super::cache::CacheDrop;
use super::compaction::{COMPACTION_SEGMENT_BYTES, CompactionFigures};
use super::create_partitions::CreatePartitionsFigures;
use super::disk::{DiskFigures, GroupedProducers, GroupedSpace, ProducersPattern, WriteLatency};
use super::progress::{Limit, Phase};
use super::replicated;
use super::restart::RestartFigures;
use super::ruler::DiskLimits;
use super::serve;
use super::settings::Settings;
use super::settle::Settle;

/// Percentiles the table prints, with their JSON names.
const PERCENTILES: [(&str, &str, f64); 5] = [
    ("p50", "p50", 50.0),
    ("p90", "p90", 90.0),
    ("p99", "p99", 99.0),
    ("p99.9", "p999", 99.9),
    ("p99.99", "p9999", 99.99),
];

pub struct Report<'a> {
    pub settings: &'a Settings,
    pub phases: Vec<Phase>,
    pub disk: Option<DiskFigures>,
    pub compaction: Option<CompactionFigures>,
    pub cache_drop: Option<CacheDrop>,
    pub dir: &'a Path,
    /// The engine's bound on open partitions (from `RLIMIT_NOFILE`).
    pub open_partitions_max: usize,
    /// The waits for freed memory to be handed back to the host (`settle.rs`).
    pub settles: &'a [Settle],
    /// The `restart` workload's opens.
    pub restart: Option<RestartFigures>,
    /// The `create-partitions` workload's steps.
    pub create_partitions: Option<CreatePartitionsFigures>,
}

/// An engine figure beside the disk's for the same pattern.
struct Versus {
    engine: f64,
    disk: f64,
    unit: &'static str,
    /// What `disk` is: the disk's best figure, or memory's (`fetch-hot`).
    against: &'static str,
}

impl Versus {
    fn ratio(&self) -> f64 {
        self.engine / self.disk.max(1e-9)
    }
}

impl Report<'_> {
    /// The phase whose latencies `--histogram` writes: the foreground appends (during
    /// compaction for `compaction`).
    pub fn append_phase(&self) -> Option<&Phase> {
        self.phases.iter().rev().find(|phase| phase.is_append())
    }

    fn versus_disk(&self, phase: &Phase) -> Option<Versus> {
        let disk = self.disk.as_ref()?;
        let best = "the disk's best";
        let (engine, disk, unit, against) = if phase.is_append() {
            let against = match disk.limits {
                Some(_) => "the disk's best sequential write",
                None => "the run's own pattern's best write (not the disk's limit)",
            };
            (phase.mb_per_s()?, disk.write_mb_per_s(), "MB/s", against)
        } else if phase.name != "fetch" {
            return None;
        } else if self.settings.workload == Workload::RandomFetch {
            (
                phase.operations_per_s()?,
                disk.random_read_iops,
                "reads/s",
                best,
            )
        } else if self.settings.workload == Workload::FetchHot {
            let memcpy = "single-core memcpy";
            (phase.mb_per_s()?, disk.memcpy_mb_per_s, "MB/s", memcpy)
        } else {
            (phase.mb_per_s()?, disk.read_mb_per_s(), "MB/s", best)
        };
        Some(Versus {
            engine,
            disk,
            unit,
            against,
        })
    }

    /// `replicated`'s MB/s and its single-node baseline's (the `durable` phase of the same run).
    fn replicated_and_single_node_mb_per_s(&self) -> Option<(f64, f64)> {
        let find = |name: &str| self.phases.iter().find(|phase| phase.name == name);
        let cluster = find(replicated::PHASE)?.mb_per_s()?;
        let single_node = find("durable")?.mb_per_s()?;
        Some((cluster, single_node))
    }

    /// `serve_produce`'s MB/s and its embedded baseline's (the `append` phase of the same run).
    fn served_and_embedded_mb_per_s(&self) -> Option<(f64, f64)> {
        let find = |name: &str| self.phases.iter().find(|phase| phase.name == name);
        let served = find(serve::PRODUCE_PHASE)?.mb_per_s()?;
        let embedded = find("append")?.mb_per_s()?;
        Some((served, embedded))
    }

    /// A cold fetch through the page cache beside the disk's own reads through it over the same
    /// data set: the limit of the path the engine read by.
    fn versus_page_cache(&self, phase: &Phase) -> Option<Versus> {
        let disk = self.disk.as_ref()?;
        if !disk.read_buffered_from_data_set || phase.name != "fetch" {
            return None;
        }
        Some(Versus {
            engine: phase.mb_per_s()?,
            disk: disk.read_buffered_mb_per_s,
            unit: "MB/s",
            against: "the disk's reads through the page cache",
        })
    }

    pub fn print_table(&self, out: &mut impl Write) -> io::Result<()> {
        let settings = self.settings;
        writeln!(
            out,
            "workload={} producers={} consumers={} partitions={} record_size={} batch_bytes={} \
             linger_ms={} key_space={} compression={} throughput={} backend={} direct_io={} \
             direct_cold_reads={} prewrite={} background_sync_bytes={} segment_bytes={} retention_bytes={}",
            settings.workload.name(),
            settings.producers,
            settings.consumers,
            settings.partitions,
            settings.record_size,
            settings.batch_bytes,
            or_dash(settings.linger_ms),
            or_dash(settings.key_space),
            settings.compression,
            settings
                .records_per_s_cap
                .map_or_else(|| "-".to_owned(), |cap| format!("{cap}/s")),
            settings.backend_name,
            settings.direct_io,
            settings.direct_cold_reads,
            settings.prewrite,
            settings.background_sync_bytes,
            or_dash(settings.segment_bytes),
            or_dash(settings.retention_bytes),
        )?;
        write!(
            out,
            "{:<26} {:>10} {:>12} {:>10}",
            "phase", "records", "records/s", "MB/s"
        )?;
        for (label, _, _) in PERCENTILES {
            write!(out, " {label:>9}")?;
        }
        writeln!(out, " {:>9}  (latency us)", "max")?;
        for phase in &self.phases {
            self.print_phase(out, phase)?;
        }
        if let Some((cluster, single_node)) = self.replicated_and_single_node_mb_per_s() {
            writeln!(
                out,
                "{}: {cluster:.1} MB/s on {} nodes (each batch committed on a majority) = \
                 {:.2} x the single-node durable {single_node:.1} MB/s",
                replicated::PHASE,
                replicated::NODES,
                cluster / single_node.max(1e-9),
            )?;
        }
        if let Some((served, embedded)) = self.served_and_embedded_mb_per_s() {
            writeln!(
                out,
                "{}: {served:.1} MB/s produced over Kafka's protocol = {:.2} x the embedded \
                 append {embedded:.1} MB/s",
                serve::PRODUCE_PHASE,
                served / embedded.max(1e-9),
            )?;
        }
        for phase in &self.phases {
            if let Some(seconds) = phase.final_flush_s {
                writeln!(
                    out,
                    "{}: its final flush of everything written took {seconds:.2} s, inside its time",
                    phase.name
                )?;
            }
            if let (Some(cpu_s), Some(per_gb)) = (phase.cpu_s, phase.cpu_seconds_per_gb()) {
                writeln!(
                    out,
                    "{}: {cpu_s:.2} CPU-s for the process, {per_gb:.2} CPU-s per GB",
                    phase.name
                )?;
            }
        }
        if let Some(cache_drop) = self.cache_drop {
            writeln!(
                out,
                "page cache dropped before fetching: {}",
                cache_drop.name()
            )?;
        }
        for settle in self.settles {
            writeln!(
                out,
                "free page reporting: waited {:.1} s before the {} ({} MiB handed back to the host{})",
                settle.waited.as_secs_f64(),
                settle.before,
                settle.reported_kib / 1024,
                if settle.settled {
                    ""
                } else {
                    "; still reporting"
                },
            )?;
        }
        if let Some(restart) = &self.restart {
            restart.print(out)?;
        }
        if let Some(create_partitions) = &self.create_partitions {
            create_partitions.print(out)?;
        }
        if let Some(compaction) = &self.compaction {
            writeln!(
                out,
                "compaction: {} runs, {} segments cleaned, {:.1} MB -> {:.1} MB, {:.1} MB/s cleaned (bytes before)",
                compaction.runs,
                compaction.segments_cleaned,
                compaction.bytes_before as f64 / 1e6,
                compaction.bytes_after as f64 / 1e6,
                compaction.mb_per_s()
            )?;
        }
        self.print_disk(out)
    }

    fn print_phase(&self, out: &mut impl Write, phase: &Phase) -> io::Result<()> {
        let shown = |value: Option<f64>, decimals: usize| {
            value.map_or_else(|| "-".to_owned(), |value| format!("{value:.decimals$}"))
        };
        let records = phase.records().map_or_else(
            || phase.latency.len().to_string(),
            |records| records.to_string(),
        );
        write!(
            out,
            "{:<26} {records:>10} {:>12} {:>10}",
            phase.name,
            shown(phase.records_per_s(), 0),
            shown(phase.mb_per_s(), 1)
        )?;
        for (_, _, quantile) in PERCENTILES {
            write!(out, " {:>9}", phase.latency.value_at_percentile(quantile))?;
        }
        writeln!(out, " {:>9}", phase.latency.max())
    }

    fn print_disk(&self, out: &mut impl Write) -> io::Result<()> {
        let Some(disk) = &self.disk else {
            return Ok(());
        };
        let optional = |value: Option<f64>| {
            value.map_or_else(|| "n/a".to_owned(), |value| format!("{value:.1}"))
        };
        writeln!(
            out,
            "disk ({}, measured before the engine, {} B blocks, {}): write {:.1} MB/s buffered (over {} s), {} MB/s O_DIRECT; \
             read {:.1} MB/s buffered, {} MB/s O_DIRECT; {:.0} random 4 KiB reads/s at queue depth {}; \
             memcpy {:.1} MB/s on one core",
            disk.tool,
            disk.pattern.block_bytes,
            if disk.pattern.sync_each {
                "fdatasync each"
            } else {
                "buffered without sync, O_DIRECT with fdatasync at the end"
            },
            disk.write_buffered_mb_per_s,
            disk.pattern.buffered_write_time.as_secs(),
            optional(disk.write_direct_mb_per_s),
            disk.read_buffered_mb_per_s,
            optional(disk.read_direct_mb_per_s),
            disk.random_read_iops,
            disk.pattern.queue_depth,
            disk.memcpy_mb_per_s,
        )?;
        if let Some(latency) = disk.write_latency.filter(|_| disk.pattern.sync_each) {
            writeln!(
                out,
                "disk: {} latency p50 / p99 / p99.9 / max {} / {} / {} / {} us",
                if disk.tool == "fio" {
                    "fdatasync"
                } else {
                    "write + fdatasync"
                },
                latency.p50_us,
                latency.p99_us,
                latency.p999_us,
                latency.max_us,
            )?;
            if let Some(durable) = self.phases.iter().find(|phase| phase.name == "durable") {
                let engine = durable.latency.value_at_percentile(99.9);
                writeln!(
                    out,
                    "durable p99.9: {engine} us = {:.2} x the disk's {} us",
                    engine as f64 / latency.p999_us.max(1) as f64,
                    latency.p999_us,
                )?;
                if let (Some(group), Some(measured)) = (disk.pattern.group_sync, disk.group_sync) {
                    let grouped = measured.latency;
                    writeln!(
                        out,
                        "disk, the engine's sync pattern ({} files at once, {} B append + \
                         fdatasync each): {:.1} MB/s; fdatasync p50 / p99 / p99.9 / max {} / {} / \
                         {} / {} us; durable p99.9 = {:.2} x its p99.9",
                        group.writers,
                        group.block_bytes,
                        measured.mb_per_s,
                        grouped.p50_us,
                        grouped.p99_us,
                        grouped.p999_us,
                        grouped.max_us,
                        engine as f64 / grouped.p999_us.max(1) as f64,
                    )?;
                }
                if let (Some(pattern), Some(measured)) = (disk.pattern.producers, disk.producers) {
                    let bare = measured.latency;
                    writeln!(
                        out,
                        "disk, the same producers with no engine ({} threads on {} files, {} B \
                         {}pwrite + fdatasync each, {:.0} s): {:.1} MB/s; {}",
                        pattern.producers,
                        pattern.files,
                        pattern.block_bytes,
                        if pattern.direct { "O_DIRECT " } else { "" },
                        pattern.time.as_secs_f64(),
                        measured.mb_per_s,
                        beside_one_writer("latency", &bare, &latency, engine),
                    )?;
                }
                if let Some(pattern) = disk.pattern.producers {
                    for grouped in &disk.grouped_producers {
                        write_grouped_producers(out, &pattern, grouped, &latency, engine)?;
                    }
                }
            }
        }
        for note in &disk.notes {
            writeln!(out, "disk: {note}")?;
        }
        if let Some(limits) = &disk.limits {
            writeln!(out, "disk: {}", limits.describe())?;
            for note in &limits.notes {
                writeln!(out, "disk: {note}")?;
            }
            self.print_durable_versus_limits(out, limits)?;
        }
        for phase in &self.phases {
            let versus = [self.versus_disk(phase), self.versus_page_cache(phase)];
            for versus in versus.into_iter().flatten() {
                writeln!(
                    out,
                    "{}: {:.1} {unit} = {:.2} x {} {:.1} {unit}",
                    phase.name,
                    versus.engine,
                    versus.ratio(),
                    versus.against,
                    versus.disk,
                    unit = versus.unit,
                )?;
            }
        }
        Ok(())
    }

    /// A durable phase's p99.9 beside the ruler's 64 KiB append + `fdatasync` p99.9.
    fn print_durable_versus_limits(
        &self,
        out: &mut impl Write,
        limits: &DiskLimits,
    ) -> io::Result<()> {
        let durable = self.phases.iter().find(|phase| phase.name == "durable");
        let (Some(durable), Some(append)) = (durable, limits.append_sync(65536)) else {
            return Ok(());
        };
        let engine = durable.latency.value_at_percentile(99.9);
        writeln!(
            out,
            "durable p99.9: {engine} us = {:.2} x the disk's 64 KiB append + fdatasync p99.9 {} us",
            engine as f64 / append.fdatasync.p999_us.max(1) as f64,
            append.fdatasync.p999_us,
        )
    }

    pub fn to_json(&self) -> Value {
        let mut root = Map::new();
        root.insert("config".into(), self.config_json());
        root.insert("machine".into(), self.machine_json());
        for phase in &self.phases {
            if phase.name == "durable"
                && let (Some(records), Some(mb)) = (phase.records_per_s(), phase.mb_per_s())
            {
                // Durable appends are appends too: their throughput is also `append`'s.
                root.insert(
                    "append".into(),
                    json!({"records_per_s": records, "mb_per_s": mb}),
                );
            }
            root.insert(phase.name.into(), self.phase_json(phase));
        }
        if let Some(compaction) = &self.compaction {
            root.insert(
                "compaction".into(),
                json!({
                    "runs": compaction.runs,
                    "segments_cleaned": compaction.segments_cleaned,
                    "bytes_before": compaction.bytes_before,
                    "bytes_after": compaction.bytes_after,
                    "seconds": compaction.seconds,
                    "mb_per_s": compaction.mb_per_s(),
                    "segment_bytes": self
                        .settings
                        .segment_bytes
                        .unwrap_or(COMPACTION_SEGMENT_BYTES),
                }),
            );
        }
        if let Some(disk) = &self.disk {
            root.insert("disk".into(), disk_json(disk));
        }
        if let Some(restart) = &self.restart {
            root.insert("restart".into(), restart.to_json());
        }
        if let Some(create_partitions) = &self.create_partitions {
            root.insert("create_partitions".into(), create_partitions.to_json());
        }
        Value::Object(root)
    }

    fn config_json(&self) -> Value {
        let settings = self.settings;
        let (duration_s, records) = match settings.limit {
            Limit::Time(duration) => (Some(duration.as_secs_f64()), None),
            Limit::Records(records) => (None, Some(records)),
        };
        json!({
            "workload": settings.workload.name(),
            "producers": settings.producers,
            "consumers": settings.consumers,
            "partitions": settings.partitions,
            "record_size": settings.record_size,
            "batch_bytes": settings.batch_bytes,
            "linger_ms": settings.linger_ms,
            "key_space": settings.key_space,
            "compression": settings.compression.name(),
            "throughput_records_per_s": settings.records_per_s_cap,
            "flush": settings.flush.name(),
            "duration_s": duration_s,
            "records": records,
            "shards": settings.shards,
            "backend": settings.backend_name,
            "direct_io": settings.direct_io,
            "direct_cold_reads": settings.direct_cold_reads,
            "prewrite": settings.prewrite,
            "background_sync_bytes": settings.background_sync_bytes,
            "segment_bytes": settings.segment_bytes,
            "retention_bytes": settings.retention_bytes,
        })
    }

    fn machine_json(&self) -> Value {
        let mut machine = Map::new();
        if let Ok(cores) = thread::available_parallelism() {
            machine.insert("cores".into(), json!(cores.get()));
        }
        if let Ok(kernel) = fs::read_to_string("/proc/sys/kernel/osrelease") {
            machine.insert("kernel".into(), json!(kernel.trim()));
        }
        machine.insert("backend".into(), json!(self.settings.backend_name));
        if let Some(fs_type) = file_system_type(self.dir) {
            machine.insert("fs_type".into(), json!(fs_type));
        }
        if let Some(soft) = rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
            machine.insert("open_files_limit".into(), json!(soft));
        }
        machine.insert(
            "open_partitions_max".into(),
            json!(self.open_partitions_max),
        );
        let settles: Vec<Value> = self
            .settles
            .iter()
            .map(|settle| {
                json!({
                    "before": settle.before,
                    "seconds": settle.waited.as_secs_f64(),
                    "reported_kib": settle.reported_kib,
                    "settled": settle.settled,
                })
            })
            .collect();
        machine.insert("page_reporting_waits".into(), json!(settles));
        Value::Object(machine)
    }

    fn phase_json(&self, phase: &Phase) -> Value {
        let mut object = Map::new();
        if let (Some(records), Some(per_s), Some(mb)) =
            (phase.records(), phase.records_per_s(), phase.mb_per_s())
        {
            object.insert("records".into(), json!(records));
            object.insert("records_per_s".into(), json!(per_s));
            object.insert("mb_per_s".into(), json!(mb));
        }
        if let Some(seconds) = phase.final_flush_s {
            object.insert("final_flush_seconds".into(), json!(seconds));
        }
        if let (Some(cpu_s), Some(per_gb)) = (phase.cpu_s, phase.cpu_seconds_per_gb()) {
            object.insert("cpu_seconds".into(), json!(cpu_s));
            object.insert("cpu_seconds_per_gb".into(), json!(per_gb));
        }
        if phase.name == "fetch" {
            object.insert("fetches_per_s".into(), json!(phase.operations_per_s()));
            if let Some(cache_drop) = self.cache_drop {
                object.insert("cache_drop".into(), json!(cache_drop.name()));
            }
        }
        let mut latency = Map::new();
        for (_, key, quantile) in PERCENTILES {
            latency.insert(
                key.into(),
                json!(phase.latency.value_at_percentile(quantile)),
            );
        }
        latency.insert("max".into(), json!(phase.latency.max()));
        latency.insert("count".into(), json!(phase.latency.len()));
        object.insert("latency_us".into(), Value::Object(latency));
        if let Some(versus) = self.versus_disk(phase) {
            object.insert("vs_disk".into(), json!(versus.ratio()));
        }
        if let Some(versus) = self.versus_page_cache(phase) {
            object.insert("vs_disk_through_page_cache".into(), json!(versus.ratio()));
        }
        if phase.name == replicated::PHASE {
            object.insert("nodes".into(), json!(replicated::NODES));
            if let Some((cluster, single_node)) = self.replicated_and_single_node_mb_per_s() {
                object.insert(
                    "vs_single_node".into(),
                    json!(cluster / single_node.max(1e-9)),
                );
            }
        }
        if phase.name == serve::PRODUCE_PHASE
            && let Some((served, embedded)) = self.served_and_embedded_mb_per_s()
        {
            object.insert(
                "vs_embedded_append".into(),
                json!(served / embedded.max(1e-9)),
            );
        }
        Value::Object(object)
    }
}

fn disk_json(disk: &DiskFigures) -> Value {
    let mut object = json!({
        "tool": disk.tool,
        "block_bytes": disk.pattern.block_bytes,
        "sync_each": disk.pattern.sync_each,
        "queue_depth": disk.pattern.queue_depth,
        "write_mb_per_s": disk.write_mb_per_s(),
        "write_buffered_mb_per_s": disk.write_buffered_mb_per_s,
        "write_buffered_seconds": disk.pattern.buffered_write_time.as_secs(),
        "write_direct_mb_per_s": disk.write_direct_mb_per_s,
        "read_mb_per_s": disk.read_mb_per_s(),
        "read_buffered_mb_per_s": disk.read_buffered_mb_per_s,
        "read_buffered_from_data_set": disk.read_buffered_from_data_set,
        "read_direct_mb_per_s": disk.read_direct_mb_per_s,
        "random_read_iops": disk.random_read_iops,
        "random_read_direct": disk.random_read_direct,
        "memcpy_mb_per_s": disk.memcpy_mb_per_s,
        "notes": disk.notes,
        "write_is_the_disk_limit": disk.limits.is_some(),
        "limits": disk.limits.as_ref().map(DiskLimits::to_json),
    });
    let latency_json = |latency: &WriteLatency| {
        json!({
            "p50": latency.p50_us,
            "p99": latency.p99_us,
            "p999": latency.p999_us,
            "max": latency.max_us,
        })
    };
    if let (Some(latency), Value::Object(map)) = (&disk.write_latency, &mut object) {
        map.insert("write_latency_us".into(), latency_json(latency));
    }
    if let (Some(group), Some(measured), Value::Object(map)) =
        (&disk.pattern.group_sync, &disk.group_sync, &mut object)
    {
        map.insert(
            "group_sync".into(),
            json!({
                "writers": group.writers,
                "block_bytes": group.block_bytes,
                "mb_per_s": measured.mb_per_s,
                "latency_us": latency_json(&measured.latency),
            }),
        );
    }
    if let (Some(pattern), Some(measured), Value::Object(map)) =
        (&disk.pattern.producers, &disk.producers, &mut object)
    {
        map.insert(
            "producers".into(),
            json!({
                "producers": pattern.producers,
                "files": pattern.files,
                "block_bytes": pattern.block_bytes,
                "direct": pattern.direct,
                "seconds": pattern.time.as_secs_f64(),
                "mb_per_s": measured.mb_per_s,
                "latency_us": latency_json(&measured.latency),
            }),
        );
    }
    if let (Some(pattern), Value::Object(map)) = (&disk.pattern.producers, &mut object)
        && !disk.grouped_producers.is_empty()
    {
        let mut ways = Map::new();
        for grouped in &disk.grouped_producers {
            ways.insert(
                grouped.space.name().into(),
                json!({
                    "files": pattern.files,
                    "batches_per_file": pattern.batches_per_file(),
                    "block_bytes": pattern.block_bytes,
                    "direct": pattern.direct,
                    "seconds": pattern.time.as_secs_f64(),
                    "rounds": grouped.rounds,
                    "rounds_beyond_written": grouped.rounds_beyond_written,
                    "mb_per_s": grouped.measured.mb_per_s,
                    "latency_us": latency_json(&grouped.measured.latency),
                }),
            );
        }
        map.insert("grouped_producers".into(), Value::Object(ways));
    }
    object
}

/// The file system type of the mount that holds `dir` (longest mount point prefix in
/// `/proc/mounts`), if it can be told.
fn file_system_type(dir: &Path) -> Option<String> {
    let dir: PathBuf = fs::canonicalize(dir).ok()?;
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _device = fields.next()?;
            let mount_point = fields.next()?;
            let fs_type = fields.next()?;
            dir.starts_with(mount_point)
                .then(|| (mount_point.len(), fs_type.to_owned()))
        })
        .max_by_key(|(length, _)| *length)
        .map(|(_, fs_type)| fs_type)
}

/// A set option's value, or `-`.
fn or_dash(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| value.to_string())
}

/// One line of [`GroupedProducers`] beside the one writer's `fdatasync` latency and the
/// engine's durable p99.9 (`engine_p999_us`).
fn write_grouped_producers(
    out: &mut impl Write,
    pattern: &ProducersPattern,
    grouped: &GroupedProducers,
    one_writer: &WriteLatency,
    engine_p999_us: u64,
) -> io::Result<()> {
    let beyond = match grouped.space {
        GroupedSpace::WrittenAhead => format!(
            ", {} of {} file writes past the space written ahead",
            grouped.rounds_beyond_written,
            grouped.rounds * pattern.files as u64
        ),
        GroupedSpace::Grow | GroupedSpace::Overwrite => String::new(),
    };
    writeln!(
        out,
        "disk, the same producers grouped with no engine, space {} ({} files at once, each round \
         {} x {} B in one {}pwrite + fdatasync per file, {:.0} s{beyond}): {:.1} MB/s; {}",
        grouped.space.name(),
        pattern.files,
        pattern.batches_per_file(),
        pattern.block_bytes,
        if pattern.direct { "O_DIRECT " } else { "" },
        pattern.time.as_secs_f64(),
        grouped.measured.mb_per_s,
        beside_one_writer(
            "round",
            &grouped.measured.latency,
            one_writer,
            engine_p999_us
        ),
    )
}

/// `what`'s percentiles, its p99.9 over the one writer's `fdatasync` p99.9, and the engine's
/// durable p99.9 over it.
fn beside_one_writer(
    what: &str,
    measured: &WriteLatency,
    one_writer: &WriteLatency,
    engine_p999_us: u64,
) -> String {
    format!(
        "{what} p50 / p99 / p99.9 / max {} / {} / {} / {} us = {:.2} x the disk's one writer at \
         p99.9; durable p99.9 = {:.2} x its p99.9",
        measured.p50_us,
        measured.p99_us,
        measured.p999_us,
        measured.max_us,
        measured.p999_us as f64 / one_writer.p999_us.max(1) as f64,
        engine_p999_us as f64 / measured.p999_us.max(1) as f64,
    )
}
