//! `seglog bench`: a load generator that runs producers and consumers as threads against an
//! embedded engine and reports throughput and latency percentiles.
//!
//! Workloads (`--workload`):
//! - `append`: producers append prebuilt batches as fast as they can (`Durability::Written`, or
//!   `Durable` with `--flush batch`), several appends in flight each;
//! - `group-commit`: 16 producers by default, every append `Durable`, one in flight each, so the
//!   engine's group commit shares each `fdatasync` between them;
//! - `fetch-hot`: producers append a data set first (`--records`, or for 30% of `--duration`),
//!   then consumers fetch it back, from the page cache, for the rest of the run (with
//!   `--records`, each consumer reads its partitions once);
//! - `fetch-cold`: the same data set, synced and dropped from the page cache ([`cache`]), then
//!   read back once;
//! - `random-fetch`: a data set of one-record batches (unless `--batch-bytes`), dropped from the
//!   page cache, then single records fetched at random offsets by `--consumers` threads;
//! - `tail`: producers and consumers together, end-to-end latency ([`tail`]);
//! - `many-partitions`: `append` over 10,000 partitions (the engine bounds its open files);
//! - `compaction`: appends without, then with, compactions running ([`compaction`]);
//! - `replicated`: `group-commit`'s durable phase on the embedded engine (the single-node
//!   baseline), then the same producers against three seglog-raft nodes in this process, each
//!   batch answered once committed on a majority ([`replicated`]);
//! - `serve`: the embedded `append` phase, then the same producers over Kafka's wire protocol
//!   to `seglog serve` in this process, then the data fetched back over it ([`serve`]);
//! - `restart`: two data sets written, then each opened cleanly, after a kill with nothing
//!   unsynced and after a kill with data unsynced, each open in a child process ([`restart`]);
//! - `create-partitions`: a topic of 100,000 partitions created, described, closed, reopened and
//!   described again, each step timed ([`create_partitions`]).
//!
//! `--throughput` caps the producers' offered load, all together ([`progress::Shared::claim_send`]).
//! `--vs-disk` measures the disk's own limits first ([`disk`]). The run prints a table on stdout;
//! `--json`, `--histogram` and `--plot` write files. A progress bar with live throughput goes to
//! stderr when it is a terminal.

pub mod args;
mod batches;
mod cache;
mod compaction;
mod create_partitions;
mod disk;
mod distribution;
mod fetch;
mod fio;
mod plot;
mod produce;
mod progress;
mod replicated;
mod report;
pub mod restart;
mod ruler;
mod serve;
mod settings;
mod settle;
mod tail;

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use seglog::config::LogConfig;
use seglog::engine::{Engine, EngineConfig};

use crate::Outcome;
use args::{BenchArgs, FlushMode, Workload};
use cache::{CacheDrop, drop_page_cache};
use compaction::CompactionFigures;
use disk::{DiskFigures, DiskPattern};
use fetch::AtEnd;
use progress::{Limit, Phase};
use report::Report;
use settings::Settings;
use settle::Settles;

/// The topic every run writes.
const TOPIC: &str = "seglog-bench";
/// `segment.index.bytes` of the `many-partitions` and `compaction` topics. Each active segment
/// reserves its `.index` and `.timeindex` blocks (`fallocate`), so the default 10 MiB each would
/// reserve 20 MiB per partition: 200 GB for 10,000 partitions.
pub const SMALL_SEGMENT_INDEX_BYTES: u64 = 64 * 1024;
/// With `--retention-bytes`: how often the engine checks retention (`log.retention.check.interval.ms`).
const RETENTION_CHECK_INTERVAL_MS: u64 = 1_000;
/// Share of the run that workloads reading a data set spend appending it.
const DATA_SET_SHARE: f64 = 0.3;

pub fn run(args: &BenchArgs) -> anyhow::Result<Outcome> {
    let settings = Settings::from_args(args)?;
    if let Some(listen) = &args.metrics_listen {
        crate::observability::serve_metrics(listen)?;
    }
    // The temporary directory lives until the end of the run and is removed when dropped.
    let (dir, _temporary) = match &args.dir {
        Some(dir) => {
            crate::data_dir::require_data_dir_or_new(dir)?;
            (dir.clone(), None)
        }
        None => {
            let temporary = tempfile::Builder::new()
                .prefix("seglog-bench-")
                .tempdir()
                .context("cannot create a temporary data directory")?;
            (temporary.path().to_path_buf(), Some(temporary))
        }
    };
    fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    let mut settles = Settles::new(args.settle);
    if settings.workload == Workload::Restart {
        return run_restart(args, &settings, &dir, &mut settles);
    }
    if settings.workload == Workload::CreatePartitions {
        return run_create_partitions(args, &settings, &dir, &mut settles);
    }
    let disk = if args.vs_disk {
        settles.wait("disk");
        let mut disk = measure_disk(&dir, &settings)?;
        disk.measure_limits(&scratch_parent(&dir), args.ruler_seconds)?;
        disk.measure_producers(&scratch_parent(&dir), settings.direct_io, &mut settles)?;
        Some(disk)
    } else {
        None
    };
    settles.wait("engine");
    raise_open_files_limit();
    let config = EngineConfig::default()
        .with_pin_shards(false)
        .with_backend(settings.backend)
        .with_direct_writes(settings.direct_io)
        .with_direct_cold_reads(settings.direct_cold_reads)
        .with_prewrite_synced_logs(settings.prewrite)
        .with_background_sync_bytes(settings.background_sync_bytes)
        .with_shard_count(args.shards.unwrap_or(EngineConfig::default().shard_count))
        .with_retention_check_interval_ms(match settings.retention_bytes {
            Some(_) => RETENTION_CHECK_INTERVAL_MS,
            None => EngineConfig::default().retention_check_interval_ms,
        });
    let open_partitions_max = config.open_partitions_max;
    let served_config = config.clone();
    let engine = Engine::open(&dir, config)
        .with_context(|| format!("cannot open data directory {}", dir.display()))?;
    let outcome = run_workload(&engine, &settings, &dir, args.vs_disk, &mut settles);
    let closed = engine.close().context("cannot close the data directory");
    let mut outcome = outcome?;
    closed?;
    if settings.workload == Workload::Replicated {
        // After the baseline, with its engine closed: the nodes have the machine to themselves.
        settles.wait("replicated nodes");
        let nodes_dir = dir.join(replicated::NODES_DIR);
        outcome
            .phases
            .push(replicated::replicated_phase(&settings, &nodes_dir)?);
    }
    if settings.workload == Workload::Serve {
        // After the baseline, with its engine closed: a fresh engine, configured the same.
        settles.wait("served engine");
        let serve_dir = dir.join(serve::SERVE_DIR);
        let phases = serve::serve_phases(&settings, served_config, &serve_dir)?;
        outcome.phases.extend(phases);
    }
    let mut disk = disk;
    if let Some(limits) = disk.as_mut().and_then(|disk| disk.limits.as_mut()) {
        limits.measure_random_reads(&log_files(&dir)?);
    }
    if let (Some(disk), Some(measured)) = (&mut disk, outcome.data_set_random_reads_per_s.take()) {
        disk.use_data_set_random_reads(measured);
    }
    if let (Some(disk), Some(measured)) = (&mut disk, outcome.data_set_reads.take()) {
        disk.use_data_set_sequential_reads(measured);
    }
    if let (Some(disk), Some(measured)) =
        (&mut disk, outcome.data_set_reads_through_page_cache.take())
    {
        disk.use_data_set_reads_through_page_cache(measured);
    }
    let report = Report {
        settings: &settings,
        phases: outcome.phases,
        disk,
        compaction: outcome.compaction,
        cache_drop: outcome.cache_drop,
        dir: &dir,
        open_partitions_max,
        settles: &settles.waits,
        restart: None,
        create_partitions: None,
    };
    write_outputs(args, &report)?;
    Ok(Outcome::Clean)
}

/// `restart`: its own engines and child processes ([`restart`]); a finding when an acknowledged
/// record did not come back.
fn run_restart(
    args: &BenchArgs,
    settings: &Settings,
    dir: &Path,
    settles: &mut Settles,
) -> anyhow::Result<Outcome> {
    if args.vs_disk {
        anyhow::bail!("--vs-disk: the restart workload measures opens, not the disk's rates");
    }
    settles.wait("engine");
    raise_open_files_limit();
    let (phases, figures) = restart::restart(args, settings, dir)?;
    let outcome = match figures.nothing_lost() {
        true => Outcome::Clean,
        false => Outcome::Findings,
    };
    let report = Report {
        settings,
        phases,
        disk: None,
        compaction: None,
        cache_drop: None,
        dir,
        open_partitions_max: EngineConfig::default().open_partitions_max,
        settles: &settles.waits,
        restart: Some(figures),
        create_partitions: None,
    };
    write_outputs(args, &report)?;
    Ok(outcome)
}

/// `create-partitions`: its own engines, one after the other ([`create_partitions`]).
fn run_create_partitions(
    args: &BenchArgs,
    settings: &Settings,
    dir: &Path,
    settles: &mut Settles,
) -> anyhow::Result<Outcome> {
    if args.vs_disk {
        anyhow::bail!("--vs-disk: the create-partitions workload measures topic creation");
    }
    settles.wait("engine");
    raise_open_files_limit();
    let config = EngineConfig::default()
        .with_pin_shards(false)
        .with_backend(settings.backend)
        .with_direct_writes(settings.direct_io)
        .with_shard_count(args.shards.unwrap_or(EngineConfig::default().shard_count));
    let open_partitions_max = config.open_partitions_max;
    let figures = create_partitions::create_partitions(settings, config, dir)?;
    let report = Report {
        settings,
        phases: Vec::new(),
        disk: None,
        compaction: None,
        cache_drop: None,
        dir,
        open_partitions_max,
        settles: &settles.waits,
        restart: None,
        create_partitions: Some(figures),
    };
    write_outputs(args, &report)?;
    Ok(Outcome::Clean)
}

/// The disk's buffered write runs as long as the phase, up to this.
const BUFFERED_WRITE_TIME_MAX: Duration = Duration::from_secs(30);

/// The disk's limits, in a scratch directory beside the data directory (same file system).
fn measure_disk(dir: &Path, settings: &Settings) -> anyhow::Result<DiskFigures> {
    let parent = scratch_parent(dir);
    let writers = (settings.partitions as usize)
        .min(settings.producers)
        .max(1);
    let group_sync =
        (settings.durable_appends() && settings.producers > 1).then(|| disk::GroupSyncPattern {
            writers,
            block_bytes: settings.producers * settings.batch_bytes / writers,
        });
    let buffered_write_time = match settings.limit {
        Limit::Time(duration) => duration.clamp(Duration::from_secs(1), BUFFERED_WRITE_TIME_MAX),
        Limit::Records(_) => Duration::from_secs(1),
    };
    let producers = group_sync.is_some().then_some(disk::ProducersPattern {
        producers: settings.producers,
        files: writers,
        block_bytes: settings.batch_bytes,
        // Set by `DiskFigures::measure_producers`, once `--direct-io auto` is resolved.
        direct: false,
        time: disk::ProducersPattern::time_for(buffered_write_time),
    });
    let pattern = DiskPattern {
        block_bytes: settings.batch_bytes,
        sync_each: settings.durable_appends(),
        queue_depth: settings.consumers,
        group_sync,
        producers,
        buffered_write_time,
    };
    disk::measure(&parent, pattern)
}

/// Where the disk's scratch files go: beside the data directory (the same file system).
fn scratch_parent(dir: &Path) -> PathBuf {
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn write_outputs(args: &BenchArgs, report: &Report<'_>) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    report.print_table(&mut out)?;
    out.flush()?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.to_json())?;
        fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.histogram {
        let phase = report
            .append_phase()
            .context("--histogram: this workload has no append phase")?;
        let file =
            fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut writer = BufWriter::new(file);
        distribution::write_distribution(&phase.latency, &mut writer)
            .and_then(|()| writer.flush())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        let title = format!(
            "seglog bench --workload {}: latency by percentile",
            report.settings.workload.name()
        );
        fs::write(path, plot::svg(&title, &report.phases))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// What a workload measured.
#[derive(Default)]
struct WorkloadOutcome {
    phases: Vec<Phase>,
    compaction: Option<CompactionFigures>,
    cache_drop: Option<CacheDrop>,
    /// `random-fetch` with `--vs-disk` and fio: the disk's random reads over the data set itself.
    data_set_random_reads_per_s: Option<anyhow::Result<f64>>,
    /// `fetch-cold` with `--vs-disk` and fio: the disk's sequential reads over the data set.
    data_set_reads: Option<anyhow::Result<fio::SequentialReads>>,
    /// `fetch-cold` with `--vs-disk` and fio: the same through the page cache, one reader per
    /// partition.
    data_set_reads_through_page_cache: Option<anyhow::Result<f64>>,
}

fn run_workload(
    engine: &Engine,
    settings: &Settings,
    dir: &Path,
    measure_data_set: bool,
    settles: &mut Settles,
) -> anyhow::Result<WorkloadOutcome> {
    let topic_config = match settings.workload {
        Workload::Compaction => compaction::topic_config(),
        Workload::ManyPartitions => {
            LogConfig::default().with_segment_index_bytes(SMALL_SEGMENT_INDEX_BYTES)
        }
        _ => LogConfig::default(),
    };
    let segment_bytes = settings.segment_bytes.unwrap_or(topic_config.segment_bytes);
    let topic_config = topic_config.with_segment_bytes(segment_bytes);
    let topic_config = match settings.retention_bytes {
        Some(bytes) => topic_config
            .with_retention_bytes(i64::try_from(bytes).unwrap_or(i64::MAX))
            .with_file_delete_delay_ms(0),
        None => topic_config,
    };
    let topic_config = match settings.flush {
        FlushMode::IntervalMs(ms) => {
            topic_config.with_flush_policy(seglog::config::FlushPolicy::IntervalMs(ms))
        }
        FlushMode::None | FlushMode::Batch => topic_config,
    };
    let topic = engine
        .create_topic(TOPIC, settings.partitions, topic_config)
        .with_context(|| format!("cannot create topic {TOPIC} (use a fresh --dir)"))?;
    let append =
        |limit| produce::append_phase(engine, &topic, settings, limit, settings.ack_name());
    let (data_set_limit, read_limit) = match settings.limit {
        progress::Limit::Records(_) => (settings.limit, settings.limit),
        progress::Limit::Time(_) => (
            settings.limit.share(DATA_SET_SHARE),
            settings.limit.share(1.0 - DATA_SET_SHARE),
        ),
    };
    let mut outcome = WorkloadOutcome::default();
    match settings.workload {
        // `replicated`'s single-node baseline: `group-commit`'s phase (its replicated phase runs
        // once this engine is closed, in `run`).
        Workload::Append
        | Workload::GroupCommit
        | Workload::ManyPartitions
        | Workload::Replicated
        | Workload::Serve => {
            outcome.phases = vec![append(settings.limit)?];
        }
        Workload::FetchHot => {
            let written = append(data_set_limit)?;
            let read =
                fetch::sequential_phase(engine, &topic, settings, read_limit, AtEnd::StartOver)?;
            outcome.phases = vec![written, read];
        }
        Workload::FetchCold => {
            let written = append(data_set_limit)?;
            outcome.cache_drop = Some(drop_page_cache(engine, dir)?);
            settles.wait("cold reads");
            let read = fetch::sequential_phase(engine, &topic, settings, read_limit, AtEnd::Stop)?;
            outcome.phases = vec![written, read];
            if measure_data_set && fio::installed() {
                let partitions = log_files_by_partition(dir)?;
                outcome.data_set_reads = Some(fio::sequential_reads(&partitions.concat()));
                // The limit of the path the engine read by, from a cache as cold as the engine's
                // was: only when that path was the page cache.
                if !settings.direct_cold_reads {
                    drop_page_cache(engine, dir)?;
                    settles.wait("disk's reads through the page cache");
                    outcome.data_set_reads_through_page_cache =
                        Some(fio::sequential_reads_through_page_cache(&partitions));
                }
            }
        }
        Workload::RandomFetch => {
            let written = append(data_set_limit)?;
            let ranges = fetch::partition_ranges(engine, &topic, settings)?;
            outcome.cache_drop = Some(drop_page_cache(engine, dir)?);
            settles.wait("cold reads");
            let read = fetch::random_phase(engine, &topic, settings, &ranges, read_limit)?;
            outcome.phases = vec![written, read];
            if measure_data_set && fio::installed() {
                let files = log_files(dir)?;
                outcome.data_set_random_reads_per_s =
                    Some(fio::random_reads_per_s(&files, settings.consumers));
            }
        }
        Workload::Tail => outcome.phases = tail::tail_phases(engine, &topic, settings)?,
        Workload::Restart => anyhow::bail!("restart runs its own engines (run_restart)"),
        Workload::CreatePartitions => {
            anyhow::bail!("create-partitions runs its own engines (run_create_partitions)")
        }
        Workload::Compaction => {
            let (phases, figures) = compaction::compaction_phases(engine, &topic, settings)?;
            outcome.phases = phases;
            outcome.compaction = Some(figures);
        }
    }
    Ok(outcome)
}

/// The `.log` files under the data directory.
fn log_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    Ok(log_files_by_partition(dir)?.concat())
}

/// Each partition's `.log` files, in offset order (their names are their base offsets).
fn log_files_by_partition(dir: &Path) -> anyhow::Result<Vec<Vec<PathBuf>>> {
    let mut partitions = Vec::new();
    for partition in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let partition = partition?.path();
        if !partition.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        for file in fs::read_dir(&partition)? {
            let path = file?.path();
            if path.extension().is_some_and(|extension| extension == "log") {
                files.push(path);
            }
        }
        if !files.is_empty() {
            files.sort();
            partitions.push(files);
        }
    }
    partitions.sort();
    Ok(partitions)
}

/// Raises this process's open-file limit before the engine sizes its partition cache from it:
/// the soft limit to the hard one (as Go's runtime and Seastar do), and the hard one to
/// `fs.nr_open` (at most 2^20) where the process may (root). Kafka asks operators for the same
/// (`nofile` 100,000 and more); `many-partitions` needs one descriptor per open partition.
pub(crate) fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let current = getrlimit(Resource::Nofile);
    let nr_open = fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(0)
        .min(1 << 20);
    let hard = current.maximum.map(|hard| hard.max(nr_open));
    let raised = Rlimit {
        current: hard,
        maximum: hard,
    };
    if setrlimit(Resource::Nofile, raised).is_err() {
        // Not permitted to raise the hard limit: the soft one up to it.
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: current.maximum,
                maximum: current.maximum,
            },
        );
    }
}
