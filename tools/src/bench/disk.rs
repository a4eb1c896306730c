//! `--vs-disk`: the disk's own limits for the run's pattern, measured before the engine runs, in
//! a scratch directory of its own next to the data directory (same file system), with no engine
//! logic: sequential writes of the batch size, buffered and `O_DIRECT` (rounded up to 4 KiB),
//! each followed by `fdatasync` when appends are durable (else one at the end); sequential 1 MiB
//! reads of those files from the disk (the buffered file dropped from the page cache first);
//! 4 KiB random reads by `queue depth` threads. `fio` does the same when it is installed. With
//! durable appends by several producers, the same producers append durably with no engine
//! ([`ProducersPattern`], built-in with either tool): each syncing its own appends, and grouped
//! as group commit groups them at best, in each way a log finds space ([`GroupedSpace`]).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;

use super::cache::advise_dont_need;
use super::fio::{self, SequentialReads};
use super::progress::{MB, join_all, micros, new_histogram};
use super::ruler::DiskLimits;
use super::settle::Settles;

/// How long each write and random-read measurement runs.
const PHASE_TIME: Duration = Duration::from_secs(1);
/// A scratch file cannot grow past this, but for the buffered write's (below); reads read at most
/// this much of a file.
pub(crate) const FILE_MAX_BYTES: u64 = 1024 * 1024 * 1024;
/// The buffered write runs as long as the engine's phase ([`DiskPattern::buffered_write_time`])
/// and may write this much per second of it: more than the page cache takes at once, so that a
/// long phase is compared with the disk's sustained rate, not with a burst into memory.
const BUFFERED_WRITE_BYTES_PER_SECOND_MAX: u64 = 4 * 1024 * 1024 * 1024;
/// The buffered file, and the producers' files together, each take at most this share of the
/// file system's free space (a quarter): a long phase at the rate above would fill the disk
/// (fio lays its file out to the whole `--size` before writing), and the engine's phase that
/// follows needs as much room.
const SCRATCH_SHARE_DIVISOR: u64 = 4;
/// A scratch write may always take this much, whatever the free space says.
const SCRATCH_SHARE_MIN_BYTES: u64 = 64 * 1024 * 1024;
/// Block size of the sequential reads.
const READ_BLOCK_BYTES: usize = 1024 * 1024;
/// Block size and alignment of the random reads and of `O_DIRECT` buffers.
pub const PAGE_BYTES: usize = 4096;

/// The pattern to measure.
#[derive(Debug, Clone, Copy)]
pub struct DiskPattern {
    pub block_bytes: usize,
    pub sync_each: bool,
    pub queue_depth: usize,
    /// Durable appends by several producers: the engine's sync pattern, measured too (fio only).
    pub group_sync: Option<GroupSyncPattern>,
    /// Durable appends by several producers: the same producers with no engine, measured too.
    pub producers: Option<ProducersPattern>,
    /// How long the buffered sequential write runs: the engine's phase's (`--duration`), so that
    /// both write about as much — past the kernel's dirty limit when the phase does, where every
    /// writer runs at the writeback's pace —; one second for a record count.
    pub buffered_write_time: Duration,
}

impl DiskPattern {
    /// How long the buffered sequential write runs (whole seconds, at least one) and the bytes
    /// it may write in that time, within `share_bytes` ([`scratch_share`]).
    pub fn buffered_write_limits(&self, share_bytes: u64) -> (Duration, u64) {
        let seconds = self.buffered_write_time.as_secs().max(1);
        let bytes_max = (seconds * BUFFERED_WRITE_BYTES_PER_SECOND_MAX).min(share_bytes);
        (Duration::from_secs(seconds), bytes_max)
    }
}

/// Group commit on the bare disk: `writers` files (one per partition) appended at once, each in
/// `block_bytes` writes (what the producers send to one partition per sync) followed by
/// `fdatasync`.
#[derive(Debug, Clone, Copy)]
pub struct GroupSyncPattern {
    pub writers: usize,
    pub block_bytes: usize,
}

/// Durable appends by several producers on the bare disk, with no engine between them and it:
/// `producers` threads, producer `i` appending to file `i % files` (one per partition, at most one
/// per producer) in a region of its own, each append a `pwrite` of `block_bytes` (the batch)
/// followed by `fdatasync` of its file, the two timed together — the latency a durable append
/// would have if each producer wrote and synced its own appends. `O_DIRECT` when the engine
/// writes so (`--direct-io`; blocks rounded up to 4 KiB).
#[derive(Debug, Clone, Copy)]
pub struct ProducersPattern {
    pub producers: usize,
    pub files: usize,
    pub block_bytes: usize,
    /// `O_DIRECT` or not: as the engine writes (`--direct-io`, `auto` resolved from the
    /// sequential writes measured before, [`DiskFigures::measure_producers`]).
    pub direct: bool,
    /// How long they append: as long as the engine's phase, within [`PRODUCERS_TIME_MIN`] and
    /// [`PRODUCERS_TIME_MAX`] ([`ProducersPattern::time_for`]).
    pub time: Duration,
}

impl ProducersPattern {
    /// The batches one file takes per round when the producers' appends are grouped
    /// ([`grouped_producers`]): its producers' (rounded up).
    pub fn batches_per_file(&self) -> usize {
        self.producers.div_ceil(self.files.max(1)).max(1)
    }

    /// The producers' time for an engine phase of `phase`: as long, so that both meet as many of
    /// the device's stalls — here one stops every `fdatasync` at once every few seconds, and a
    /// few such stalls set a run's p99.9.
    pub fn time_for(phase: Duration) -> Duration {
        phase.clamp(PRODUCERS_TIME_MIN, PRODUCERS_TIME_MAX)
    }
}

/// The producers append at least this long, for enough appends that the p99.9 is not the few
/// slowest of a handful, and at most this long (each region holds it).
const PRODUCERS_TIME_MIN: Duration = Duration::from_secs(2);
const PRODUCERS_TIME_MAX: Duration = Duration::from_secs(30);
/// Each producer's region of its file: more than it can append in [`PRODUCERS_TIME_MAX`] (16
/// producers share the disk's rate).
const PRODUCER_REGION_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// The disk under several writers' durable appends (the engine's sync pattern, or the producers
/// with no engine).
#[derive(Debug, Clone, Copy)]
pub struct GroupSync {
    /// Latency across all writers: the `fdatasync` alone (the sync pattern, fio), or `pwrite` and
    /// `fdatasync` together (the producers).
    pub latency: WriteLatency,
    /// All writers together.
    pub mb_per_s: f64,
}

/// Percentiles of the disk's per-block write latency, in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct WriteLatency {
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl WriteLatency {
    pub fn of(histogram: &Histogram<u64>) -> WriteLatency {
        WriteLatency {
            p50_us: histogram.value_at_percentile(50.0),
            p99_us: histogram.value_at_percentile(99.0),
            p999_us: histogram.value_at_percentile(99.9),
            max_us: histogram.max(),
        }
    }
}

/// What `--vs-disk` measured.
#[derive(Debug)]
pub struct DiskFigures {
    /// `built-in` or `fio`.
    pub tool: &'static str,
    pub pattern: DiskPattern,
    pub write_buffered_mb_per_s: f64,
    /// `None` where `O_DIRECT` is refused (tmpfs); [`DiskFigures::notes`] says why.
    pub write_direct_mb_per_s: Option<f64>,
    /// Per block: `pwrite` and `fdatasync` (built-in), or the `fdatasync` alone (fio), buffered;
    /// when `sync_each`, the figure a durable append's latency is compared with.
    pub write_latency: Option<WriteLatency>,
    pub read_buffered_mb_per_s: f64,
    /// `read_buffered_mb_per_s` was read over the engine's data set, not the scratch file.
    pub read_buffered_from_data_set: bool,
    pub read_direct_mb_per_s: Option<f64>,
    pub random_read_iops: f64,
    /// Whether the random reads bypassed the page cache (`O_DIRECT`).
    pub random_read_direct: bool,
    /// One core copying memory in 1 MiB chunks (the ceiling `fetch-hot` is compared with).
    pub memcpy_mb_per_s: f64,
    /// The disk under [`DiskPattern::group_sync`] (fio only).
    pub group_sync: Option<GroupSync>,
    /// The disk under [`DiskPattern::producers`] (built-in, with either tool).
    pub producers: Option<GroupSync>,
    /// The same producers' appends grouped with no engine ([`grouped_producers`]), in each
    /// way of finding space ([`GroupedSpace::ALL`]).
    pub grouped_producers: Vec<GroupedProducers>,
    pub notes: Vec<String>,
    /// The disk's limits, measured with fio as a storage engineer would ([`super::ruler`]);
    /// `None` without fio (a note says so), where the figures above, of the run's own pattern,
    /// are all there is and are not the disk's limit.
    pub limits: Option<DiskLimits>,
}

impl DiskFigures {
    /// Takes the random-read rate measured over the engine's own data set, after its fetch
    /// phase, in place of the scratch file's (which the host's cache may hold: a small file
    /// written a moment before reads back far faster than the device). The scratch figure stays
    /// in a note; a failed measurement leaves it and says why.
    pub fn use_data_set_random_reads(&mut self, measured: anyhow::Result<f64>) {
        match measured {
            Ok(reads_per_s) => {
                self.notes.push(format!(
                    "random reads over the engine's data set (fio, after the fetch phase): \
                     {reads_per_s:.0}/s; over the scratch file: {:.0}/s",
                    self.random_read_iops
                ));
                self.random_read_iops = reads_per_s;
                self.random_read_direct = true;
            }
            Err(error) => self.notes.push(format!(
                "random reads over the engine's data set not measured ({}); the scratch \
                 file's figure stands",
                crate::error_line::error_line(&error)
            )),
        }
    }

    /// Takes the sequential `O_DIRECT` read rate measured over the engine's own data set, after
    /// its fetch phase, in place of the scratch file's, for the same reason as
    /// [`DiskFigures::use_data_set_random_reads`] (the scratch file's rate swung widely between
    /// runs here, the data set's held steady).
    pub fn use_data_set_sequential_reads(&mut self, measured: anyhow::Result<SequentialReads>) {
        let scratch = self
            .read_direct_mb_per_s
            .map_or("-".to_owned(), |mb| format!("{mb:.1}"));
        match measured {
            Ok(reads) => {
                let huge = reads.deep_huge_pages.map_or(
                    "none from buffers in huge pages (none reserved, or fio refused them)"
                        .to_owned(),
                    |mb| format!("16 in flight from fio's buffers in huge pages {mb:.1}"),
                );
                let mb_per_s = reads.best();
                self.notes.push(format!(
                    "sequential O_DIRECT reads over the engine's data set (fio, after the fetch \
                     phase, the best of: 1 in flight {:.1}, 16 in flight {:.1}, {huge}): \
                     {mb_per_s:.1} MB/s; over the scratch file: {scratch} MB/s",
                    reads.one_in_flight, reads.deep
                ));
                self.read_direct_mb_per_s = Some(mb_per_s);
            }
            Err(error) => self.notes.push(format!(
                "sequential reads over the engine's data set not measured ({}); the \
                 scratch file's figure stands",
                crate::error_line::error_line(&error)
            )),
        }
    }

    /// Takes the sequential read rate through the page cache over the engine's own data set
    /// (one reader per partition, from a dropped cache) in place of the scratch file's, as
    /// [`DiskFigures::use_data_set_sequential_reads`] does for `O_DIRECT`: the figure a cold
    /// fetch through the page cache is held to ([`DiskFigures::read_buffered_from_data_set`]).
    pub fn use_data_set_reads_through_page_cache(&mut self, measured: anyhow::Result<f64>) {
        match measured {
            Ok(mb_per_s) => {
                self.notes.push(format!(
                    "sequential reads through the page cache over the engine's data set (fio, \
                     one reader per partition, 1 MiB reads, after dropping the page cache): \
                     {mb_per_s:.1} MB/s; over the scratch file: {:.1} MB/s",
                    self.read_buffered_mb_per_s
                ));
                self.read_buffered_mb_per_s = mb_per_s;
                self.read_buffered_from_data_set = true;
            }
            Err(error) => self.notes.push(format!(
                "reads through the page cache over the engine's data set not measured \
                 ({}); the scratch file's figure stands",
                crate::error_line::error_line(&error)
            )),
        }
    }

    /// Runs [`DiskPattern::producers`], if any, in a scratch directory under `parent`: `direct`
    /// or not, as the engine will write.
    pub fn measure_producers(
        &mut self,
        parent: &Path,
        direct: bool,
        settles: &mut Settles,
    ) -> anyhow::Result<()> {
        let Some(producers) = &mut self.pattern.producers else {
            return Ok(());
        };
        producers.direct = direct;
        let producers = *producers;
        let scratch = scratch_dir(parent)?;
        // The sequential reads dropped the buffered file's pages: let them be reported first.
        settles.wait("bare producers");
        self.producers = Some(durable_producers(scratch.path(), producers)?);
        for space in GroupedSpace::ALL {
            let grouped = grouped_producers(scratch.path(), producers, space)?;
            self.grouped_producers.push(grouped);
        }
        Ok(())
    }

    /// Runs the ruler ([`super::ruler`]) for `seconds` a job in a scratch directory under
    /// `parent`, where fio is installed; a note says so where it is not.
    pub fn measure_limits(&mut self, parent: &Path, seconds: u64) -> anyhow::Result<()> {
        if !fio::installed() {
            self.notes.push(
                "fio is not installed: the disk's limits were not measured, and the ratios \
                 below are against the run's own pattern, not the disk's limit"
                    .to_owned(),
            );
            return Ok(());
        }
        let scratch = scratch_dir(parent)?;
        self.limits = Some(super::ruler::measure(scratch.path(), seconds)?);
        Ok(())
    }

    /// The disk's best sequential write ([`DiskLimits::best_write_mb_per_s`]), or without the
    /// ruler the best of the run's own pattern, buffered or `O_DIRECT`.
    pub fn write_mb_per_s(&self) -> f64 {
        match &self.limits {
            Some(limits) => limits.best_write_mb_per_s(),
            None => self.same_pattern_write_mb_per_s(),
        }
    }

    /// The best sequential write of the run's own pattern (block size and sync policy).
    pub fn same_pattern_write_mb_per_s(&self) -> f64 {
        self.write_buffered_mb_per_s
            .max(self.write_direct_mb_per_s.unwrap_or(0.0))
    }

    /// The best sequential read rate from the disk, the ruler's included.
    pub fn read_mb_per_s(&self) -> f64 {
        let ruler = self
            .limits
            .as_ref()
            .and_then(|limits| limits.read_direct_mb_per_s);
        self.read_buffered_mb_per_s
            .max(self.read_direct_mb_per_s.unwrap_or(0.0))
            .max(ruler.unwrap_or(0.0))
    }
}

/// Measures in a fresh scratch directory under `parent`, removed afterwards; all but
/// [`DiskPattern::producers`] ([`DiskFigures::measure_producers`]).
pub fn measure(parent: &Path, pattern: DiskPattern) -> anyhow::Result<DiskFigures> {
    let scratch = scratch_dir(parent)?;
    let mut notes = Vec::new();
    let mut figures = None;
    if fio::installed() {
        match fio::measure(scratch.path(), pattern) {
            Ok(measured) => figures = Some(measured),
            Err(error) => notes.push(format!(
                "fio failed ({}); built-in loop used",
                crate::error_line::error_line(&error)
            )),
        }
    }
    let mut figures = match figures {
        Some(figures) => figures,
        None => measure_built_in(scratch.path(), pattern)?,
    };
    figures.notes.splice(0..0, notes);
    Ok(figures)
}

fn scratch_dir(parent: &Path) -> anyhow::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("seglog-bench-disk-")
        .tempdir_in(parent)
        .with_context(|| format!("cannot create a scratch directory in {}", parent.display()))
}

/// What one scratch write in `dir` may take: [`SCRATCH_SHARE_DIVISOR`]'s share of the space
/// free to this user there, at least [`SCRATCH_SHARE_MIN_BYTES`].
pub(crate) fn scratch_share(dir: &Path) -> anyhow::Result<u64> {
    let stat = rustix::fs::statvfs(dir)
        .with_context(|| format!("cannot read the free space of {}", dir.display()))?;
    Ok(share_of_free(stat.f_bavail.saturating_mul(stat.f_frsize)))
}

fn share_of_free(free_bytes: u64) -> u64 {
    (free_bytes / SCRATCH_SHARE_DIVISOR).max(SCRATCH_SHARE_MIN_BYTES)
}

/// Runs [`ProducersPattern`] in `dir`.
fn durable_producers(dir: &Path, pattern: ProducersPattern) -> anyhow::Result<GroupSync> {
    let files = (0..pattern.files.max(1))
        .map(|index| {
            open(
                &dir.join(format!("producers-{index}.tmp")),
                true,
                pattern.direct,
            )
        })
        .collect::<anyhow::Result<Vec<File>>>()?;
    let block_bytes = match pattern.direct {
        true => pattern.block_bytes.div_ceil(PAGE_BYTES) * PAGE_BYTES,
        false => pattern.block_bytes,
    };
    let bytes_max =
        PRODUCER_REGION_BYTES.min(scratch_share(dir)? / pattern.producers.max(1) as u64);
    let started = Instant::now();
    let producers = thread::scope(|scope| {
        let handles: Vec<_> = (0..pattern.producers)
            .map(|producer| {
                let file = &files[producer % files.len()];
                let region_start = (producer / files.len()) as u64 * PRODUCER_REGION_BYTES;
                let until = started + pattern.time;
                scope.spawn(move || {
                    append_durably(file, block_bytes, region_start, until, bytes_max)
                })
            })
            .collect();
        join_all(handles)
    })?;
    let mut latency = new_histogram()?;
    let mut mb_per_s = 0.0;
    for producer in &producers {
        latency.add(&producer.latency)?;
        mb_per_s += producer.mb_per_s;
    }
    Ok(GroupSync {
        latency: WriteLatency::of(&latency),
        mb_per_s,
    })
}

/// Where [`grouped_producers`]' rounds find their space in each file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupedSpace {
    /// The file grows with each round, as a log's does: each sync also makes the new blocks'
    /// allocation and the new length durable.
    Grow,
    /// A second thread per file keeps [`WRITTEN_AHEAD_BYTES`] of zeros written and synced past
    /// the rounds, as a log that prewrites its segments ahead would: each round's sync flushes
    /// data alone, and the disk writes every block twice.
    WrittenAhead,
    /// The rounds overwrite, in turn, a region written and synced before them
    /// ([`OVERWRITTEN_REGION_BYTES`]): each sync flushes data alone and the zeros cost nothing,
    /// the cheapest sync this file system gives (`format/prewrite.rs`) but not one a log that
    /// keeps appending new data can have for free here (the device offers no write-zeroes
    /// command, so `fallocate` leaves unwritten extents that each write converts).
    Overwrite,
}

impl GroupedSpace {
    pub const ALL: [GroupedSpace; 3] = [
        GroupedSpace::Grow,
        GroupedSpace::WrittenAhead,
        GroupedSpace::Overwrite,
    ];

    pub fn name(self) -> &'static str {
        match self {
            GroupedSpace::Grow => "grow",
            GroupedSpace::WrittenAhead => "written_ahead",
            GroupedSpace::Overwrite => "overwrite",
        }
    }
}

/// How long [`GroupedSpace::WrittenAhead`]'s writer waits when it is far enough ahead.
const WRITE_AHEAD_IDLE: Duration = Duration::from_micros(100);
/// How far ahead of the rounds [`GroupedSpace::WrittenAhead`] keeps each file written, and in
/// what pieces (each synced).
const WRITTEN_AHEAD_BYTES: u64 = 16 * 1024 * 1024;
const WRITTEN_AHEAD_PIECE_BYTES: usize = 1024 * 1024;
/// The region [`GroupedSpace::Overwrite`] cycles through, per file.
const OVERWRITTEN_REGION_BYTES: u64 = 256 * 1024 * 1024;

/// The same producers' appends grouped on the bare disk, in each way of finding space.
#[derive(Debug, Clone, Copy)]
pub struct GroupedProducers {
    pub space: GroupedSpace,
    pub measured: GroupSync,
    /// Rounds run (each file ran as many).
    pub rounds: u64,
    /// Writes of a round, one per file, that went past the space written ahead (so grew the
    /// file): the writer ahead fell behind ([`GroupedSpace::WrittenAhead`]).
    pub rounds_beyond_written: u64,
}

/// [`ProducersPattern`]'s appends grouped as group commit groups them at best, with no engine
/// between them and the disk: in each round every file takes all its producers' batches
/// (`producers / files` of them) in one `pwrite` and is synced (`fdatasync`), all files at once,
/// one thread each; the next round starts when the last sync returned. A round's time is the
/// durable latency each of its appends would have if every producer's batch arrived together and
/// no append ever waited for a sync it came too late for. `space` says where the rounds write.
fn grouped_producers(
    dir: &Path,
    pattern: ProducersPattern,
    space: GroupedSpace,
) -> anyhow::Result<GroupedProducers> {
    let files = pattern.files.max(1);
    let batches_per_file = pattern.batches_per_file();
    let share_bytes = match pattern.direct {
        true => (batches_per_file * pattern.block_bytes).div_ceil(PAGE_BYTES) * PAGE_BYTES,
        false => batches_per_file * pattern.block_bytes,
    } as u64;
    let file_bytes_max = scratch_share(dir)? / files as u64;
    let rounds_max = match space {
        GroupedSpace::Overwrite => OVERWRITTEN_REGION_BYTES.min(file_bytes_max) / share_bytes,
        GroupedSpace::Grow => file_bytes_max / share_bytes,
        GroupedSpace::WrittenAhead => {
            file_bytes_max.saturating_sub(WRITTEN_AHEAD_BYTES) / share_bytes
        }
    }
    .max(1);
    let paths: Vec<_> = (0..files)
        .map(|index| dir.join(format!("grouped-{}-{index}.tmp", space.name())))
        .collect();
    let measured = measure_rounds(&paths, pattern, space, share_bytes, rounds_max);
    // The next way's files, and the engine after them, need the room.
    for path in &paths {
        let _ = std::fs::remove_file(path);
    }
    measured
}

/// [`grouped_producers`]' rounds in the files at `paths`.
fn measure_rounds(
    paths: &[PathBuf],
    pattern: ProducersPattern,
    space: GroupedSpace,
    share_bytes: u64,
    rounds_max: u64,
) -> anyhow::Result<GroupedProducers> {
    let prepared_bytes = match space {
        GroupedSpace::Overwrite => rounds_max * share_bytes,
        GroupedSpace::WrittenAhead => WRITTEN_AHEAD_BYTES,
        GroupedSpace::Grow => 0,
    };
    let files = paths
        .iter()
        .map(|path| {
            let file = open(path, true, pattern.direct)?;
            write_zeros(&file, prepared_bytes)?;
            Ok(GroupedFile {
                file,
                written_ahead: AtomicU64::new(prepared_bytes),
                rounds_reached: AtomicU64::new(0),
            })
        })
        .collect::<anyhow::Result<Vec<GroupedFile>>>()?;
    let histograms = files
        .iter()
        .map(|_| new_histogram())
        .collect::<anyhow::Result<Vec<_>>>()?;
    let started = Instant::now();
    let rounds = Rounds {
        barrier: Barrier::new(files.len()),
        stop: AtomicBool::new(false),
        until: started + pattern.time,
        share_bytes,
        rounds_max,
        space,
        rounds_beyond_written: AtomicU64::new(0),
    };
    let per_file = thread::scope(|scope| {
        let rounds = &rounds;
        let writers_ahead: Vec<_> = files
            .iter()
            .filter(|_| space == GroupedSpace::WrittenAhead)
            .map(|file| scope.spawn(move || rounds.write_ahead(file)))
            .collect();
        let handles: Vec<_> = files
            .iter()
            .zip(histograms)
            .map(|(file, latency)| scope.spawn(move || rounds.run(file, latency)))
            .collect();
        let per_file = join_all(handles);
        join_all(writers_ahead)?;
        per_file
    })?;
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    let mut latency = new_histogram()?;
    let mut written = 0u64;
    for (file_rounds, histogram) in &per_file {
        latency.add(histogram)?;
        written += file_rounds * share_bytes;
    }
    Ok(GroupedProducers {
        space,
        measured: GroupSync {
            latency: WriteLatency::of(&latency),
            mb_per_s: written as f64 / MB / seconds,
        },
        rounds: per_file.first().map_or(0, |(rounds, _)| *rounds),
        rounds_beyond_written: rounds.rounds_beyond_written.into_inner(),
    })
}

/// One file of [`grouped_producers`] and, for [`GroupedSpace::WrittenAhead`], how much of it
/// is written and synced.
struct GroupedFile {
    file: File,
    written_ahead: AtomicU64,
    /// The end of the round that last started.
    rounds_reached: AtomicU64,
}

/// The rounds of [`grouped_producers`], shared by its threads (one per file, and one more per
/// file writing ahead).
struct Rounds {
    barrier: Barrier,
    /// Set by the round's last thread when the time is up, the space is used or a write or sync
    /// failed: every thread reads it after the same barrier, so all leave after the same round.
    stop: AtomicBool,
    until: Instant,
    share_bytes: u64,
    /// The rounds a file has space for (cycled through for [`GroupedSpace::Overwrite`]).
    rounds_max: u64,
    space: GroupedSpace,
    /// Rounds of a file that wrote past its written-ahead space ([`GroupedSpace::WrittenAhead`]).
    rounds_beyond_written: AtomicU64,
}

impl Rounds {
    /// One file's rounds: returns how many ran and `latency` with the times of the rounds this
    /// thread finished last. Nothing fails before the rounds, so no thread is left at a barrier.
    fn run(
        &self,
        file: &GroupedFile,
        mut latency: Histogram<u64>,
    ) -> anyhow::Result<(u64, Histogram<u64>)> {
        let mut storage = Vec::new();
        let block = aligned(&mut storage, self.share_bytes as usize);
        block.fill(b'g');
        let mut round = 0u64;
        loop {
            self.barrier.wait();
            let sent = Instant::now();
            let position = self.position(round);
            let end = position + self.share_bytes;
            file.rounds_reached.store(end, Ordering::Release);
            if self.space == GroupedSpace::WrittenAhead
                && end > file.written_ahead.load(Ordering::Acquire)
            {
                self.rounds_beyond_written.fetch_add(1, Ordering::Relaxed);
            }
            let written = file
                .file
                .write_all_at(block, position)
                .and_then(|()| file.file.sync_data())
                .context("cannot write and sync a scratch file");
            round += 1;
            if self.barrier.wait().is_leader() {
                latency.saturating_record(micros(sent.elapsed()));
                let done = Instant::now() >= self.until
                    || (self.space != GroupedSpace::Overwrite && round >= self.rounds_max);
                self.stop.fetch_or(done, Ordering::AcqRel);
            }
            if written.is_err() {
                self.stop.store(true, Ordering::Release);
            }
            self.barrier.wait();
            written?;
            if self.stop.load(Ordering::Acquire) {
                return Ok((round, latency));
            }
        }
    }

    fn position(&self, round: u64) -> u64 {
        match self.space {
            GroupedSpace::Overwrite => (round % self.rounds_max) * self.share_bytes,
            GroupedSpace::Grow | GroupedSpace::WrittenAhead => round * self.share_bytes,
        }
    }

    /// [`GroupedSpace::WrittenAhead`]'s second thread of `file`: keeps zeros written and synced
    /// up to [`WRITTEN_AHEAD_BYTES`] past the round that last started, until the rounds stop.
    fn write_ahead(&self, file: &GroupedFile) -> anyhow::Result<()> {
        let mut storage = Vec::new();
        let piece = aligned(&mut storage, WRITTEN_AHEAD_PIECE_BYTES);
        let rounds_end = (self.rounds_max * self.share_bytes).saturating_add(WRITTEN_AHEAD_BYTES);
        while !self.stop.load(Ordering::Acquire) {
            let ahead = file.written_ahead.load(Ordering::Acquire);
            let wanted =
                (file.rounds_reached.load(Ordering::Acquire) + WRITTEN_AHEAD_BYTES).min(rounds_end);
            if ahead >= wanted {
                thread::sleep(WRITE_AHEAD_IDLE);
                continue;
            }
            let written = file
                .file
                .write_all_at(piece, ahead)
                .and_then(|()| file.file.sync_data())
                .context("cannot write ahead in a scratch file");
            if written.is_err() {
                self.stop.store(true, Ordering::Release);
            }
            written?;
            file.written_ahead
                .store(ahead + piece.len() as u64, Ordering::Release);
        }
        Ok(())
    }
}

/// Writes `bytes` of zeros at the start of `file`, in 1 MiB pieces, then syncs it.
fn write_zeros(file: &File, bytes: u64) -> anyhow::Result<()> {
    let mut storage = Vec::new();
    let piece = aligned(&mut storage, WRITTEN_AHEAD_PIECE_BYTES);
    let mut done = 0;
    while done < bytes {
        let length = (bytes - done).min(piece.len() as u64) as usize;
        file.write_all_at(&piece[..length], done)
            .context("cannot write a scratch file")?;
        done += length as u64;
    }
    file.sync_data().context("cannot sync a scratch file")
}

/// One producer of [`durable_producers`]: `pwrite` + `fdatasync` of `block_bytes` at a time from
/// `region_start` on, until `until` or `bytes_max` (at most its region) are written.
fn append_durably(
    file: &File,
    block_bytes: usize,
    region_start: u64,
    until: Instant,
    bytes_max: u64,
) -> anyhow::Result<WriteFigures> {
    let started = Instant::now();
    let mut storage = Vec::new();
    let block = aligned(&mut storage, block_bytes);
    block.fill(b'p');
    let (written, latency) = timed_writes(file, block, region_start, true, until, bytes_max)?;
    Ok(WriteFigures {
        mb_per_s: written as f64 / MB / started.elapsed().as_secs_f64().max(1e-9),
        latency,
    })
}

/// `pwrite`s of `block` into `file` at increasing offsets from `start` on, each followed by
/// `fdatasync` when `sync_each` and timed with it, until `until` or as many whole blocks as fit
/// in `bytes_max`. Returns the bytes written and the latencies.
fn timed_writes(
    file: &File,
    block: &[u8],
    start: u64,
    sync_each: bool,
    until: Instant,
    bytes_max: u64,
) -> anyhow::Result<(u64, Histogram<u64>)> {
    let mut latency = new_histogram()?;
    let mut written = 0u64;
    while Instant::now() < until && written + block.len() as u64 <= bytes_max {
        let sent = Instant::now();
        file.write_all_at(block, start + written)
            .context("cannot write a scratch file")?;
        if sync_each {
            file.sync_data().context("cannot sync a scratch file")?;
        }
        latency.saturating_record(micros(sent.elapsed()));
        written += block.len() as u64;
    }
    Ok((written, latency))
}

/// Bytes the memcpy baseline copies between, and the chunk it copies at a time.
const MEMCPY_BUFFER_BYTES: usize = 64 * 1024 * 1024;
const MEMCPY_CHUNK_BYTES: usize = 1024 * 1024;

/// One core's memory copy rate: 1 MiB chunks from one 64 MiB buffer into another (larger than
/// the caches, as fetched data is), for [`PHASE_TIME`].
pub fn measure_memcpy() -> f64 {
    let source = vec![0x5au8; MEMCPY_BUFFER_BYTES];
    let mut destination = vec![0u8; MEMCPY_BUFFER_BYTES];
    let start = Instant::now();
    let mut copied = 0usize;
    while start.elapsed() < PHASE_TIME {
        for (to, from) in destination
            .chunks_mut(MEMCPY_CHUNK_BYTES)
            .zip(source.chunks(MEMCPY_CHUNK_BYTES))
        {
            to.copy_from_slice(from);
        }
        std::hint::black_box(&destination);
        copied += MEMCPY_BUFFER_BYTES;
    }
    copied as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn measure_built_in(dir: &Path, pattern: DiskPattern) -> anyhow::Result<DiskFigures> {
    let mut notes = Vec::new();
    let buffered_path = dir.join("buffered.tmp");
    let buffered = write_sequential(
        &buffered_path,
        pattern.block_bytes,
        pattern.sync_each,
        false,
        pattern.buffered_write_limits(scratch_share(dir)?),
    )?;
    let direct_path = dir.join("direct.tmp");
    let direct_block = pattern.block_bytes.div_ceil(PAGE_BYTES) * PAGE_BYTES;
    let direct = match write_sequential(
        &direct_path,
        direct_block,
        pattern.sync_each,
        true,
        (PHASE_TIME, FILE_MAX_BYTES),
    ) {
        Ok(direct) => Some(direct),
        Err(error) => {
            notes.push(format!(
                "O_DIRECT refused here: {}",
                crate::error_line::error_line(&error)
            ));
            None
        }
    };
    advise_dont_need(&buffered_path)?;
    let read_buffered_mb_per_s = read_sequential(&buffered_path, false)?;
    let read_direct_mb_per_s = match direct {
        Some(_) => Some(read_sequential(&direct_path, true)?),
        None => None,
    };
    let (random_path, random_direct) = match direct {
        Some(_) => (&direct_path, true),
        None => {
            advise_dont_need(&buffered_path)?;
            notes.push("random reads buffered: they warm the page cache as they go".into());
            (&buffered_path, false)
        }
    };
    let random_read_iops = read_random(random_path, random_direct, pattern.queue_depth)?;
    Ok(DiskFigures {
        tool: "built-in",
        pattern,
        write_buffered_mb_per_s: buffered.mb_per_s,
        write_direct_mb_per_s: direct.as_ref().map(|direct| direct.mb_per_s),
        write_latency: Some(WriteLatency::of(&buffered.latency)),
        read_buffered_mb_per_s,
        read_buffered_from_data_set: false,
        read_direct_mb_per_s,
        random_read_iops,
        random_read_direct: random_direct,
        memcpy_mb_per_s: measure_memcpy(),
        group_sync: None,
        producers: None,
        grouped_producers: Vec::new(),
        notes,
        limits: None,
    })
}

/// A zeroed buffer of `length` bytes starting at a 4 KiB boundary, cut out of `storage` (which
/// is over-allocated by a page so that the aligned slice always fits).
fn aligned(storage: &mut Vec<u8>, length: usize) -> &mut [u8] {
    storage.clear();
    storage.resize(length + PAGE_BYTES, 0);
    let start = storage.as_ptr().align_offset(PAGE_BYTES).min(PAGE_BYTES);
    &mut storage[start..start + length]
}

fn open(path: &Path, write: bool, direct: bool) -> anyhow::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    if write {
        options.write(true).create(true).truncate(true);
    }
    if direct {
        options.custom_flags(libc::O_DIRECT);
    }
    options
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))
}

struct WriteFigures {
    mb_per_s: f64,
    latency: Histogram<u64>,
}

/// `pwrite`s of `block_bytes` at increasing offsets for `limits.0` or until `limits.1` bytes
/// ([`timed_writes`]), each followed by `fdatasync` when `sync_each`; else an `O_DIRECT` write syncs once at the end
/// (timed too) and a buffered one not at all.
fn write_sequential(
    path: &Path,
    block_bytes: usize,
    sync_each: bool,
    direct: bool,
    (time, bytes_max): (Duration, u64),
) -> anyhow::Result<WriteFigures> {
    let file = open(path, true, direct)?;
    let mut storage = Vec::new();
    let block = aligned(&mut storage, block_bytes);
    block.fill(b'd');
    let started = Instant::now();
    let (written, latency) = timed_writes(&file, block, 0, sync_each, started + time, bytes_max)
        .with_context(|| format!("writing {}", path.display()))?;
    // Without a sync per write the buffered write does not sync at all, as the engine's phase
    // does not; `O_DIRECT` data is synced once at the end (the device's cache).
    if !sync_each && direct {
        file.sync_data()?;
    }
    Ok(WriteFigures {
        mb_per_s: written as f64 / MB / started.elapsed().as_secs_f64().max(1e-9),
        latency,
    })
}

/// 1 MiB `pread`s from the start to the end of the file.
fn read_sequential(path: &Path, direct: bool) -> anyhow::Result<f64> {
    let file = open(path, false, direct)?;
    let mut storage = Vec::new();
    let buffer = aligned(&mut storage, READ_BLOCK_BYTES);
    let started = Instant::now();
    let mut position = 0u64;
    while position < FILE_MAX_BYTES {
        let read = file
            .read_at(buffer, position)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if read == 0 {
            break;
        }
        position += read as u64;
    }
    Ok(position as f64 / MB / started.elapsed().as_secs_f64().max(1e-9))
}

/// 4 KiB `pread`s at uniformly random 4 KiB-aligned offsets by `queue_depth` threads for
/// [`PHASE_TIME`]; returns reads per second.
fn read_random(path: &Path, direct: bool, queue_depth: usize) -> anyhow::Result<f64> {
    let length = std::fs::metadata(path)?.len();
    let blocks = (length / PAGE_BYTES as u64).max(1);
    let started = Instant::now();
    let reads = thread::scope(|scope| {
        let handles: Vec<_> = (0..queue_depth)
            .map(|thread| {
                scope.spawn(move || -> anyhow::Result<u64> {
                    let file = open(path, false, direct)?;
                    let mut storage = Vec::new();
                    let buffer = aligned(&mut storage, PAGE_BYTES);
                    let mut rng = fastrand::Rng::with_seed(thread as u64 + 1);
                    let mut reads = 0;
                    while started.elapsed() < PHASE_TIME {
                        let offset = rng.u64(..blocks) * PAGE_BYTES as u64;
                        file.read_at(buffer, offset)?;
                        reads += 1;
                    }
                    Ok(reads)
                })
            })
            .collect();
        join_all(handles)
    })?
    .into_iter()
    .sum::<u64>();
    Ok(reads as f64 / started.elapsed().as_secs_f64().max(1e-9))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1024 * 1024 * 1024;

    #[test]
    fn a_long_buffered_write_takes_at_most_its_share_of_the_free_space() {
        let pattern = |seconds| DiskPattern {
            block_bytes: 65536,
            sync_each: true,
            queue_depth: 1,
            group_sync: None,
            producers: None,
            buffered_write_time: Duration::from_secs(seconds),
        };
        let free_bytes = 100 * GIB;
        assert_eq!(share_of_free(free_bytes), 25 * GIB);
        assert_eq!(
            pattern(3600).buffered_write_limits(share_of_free(free_bytes)),
            (Duration::from_secs(3600), 25 * GIB)
        );
        // A short phase writes what its seconds allow, well within the share.
        assert_eq!(
            pattern(2).buffered_write_limits(share_of_free(free_bytes)),
            (
                Duration::from_secs(2),
                2 * BUFFERED_WRITE_BYTES_PER_SECOND_MAX
            )
        );
        // A nearly full disk still gets the minimum, and a real directory has some share.
        assert_eq!(share_of_free(0), SCRATCH_SHARE_MIN_BYTES);
        let dir = tempfile::tempdir().unwrap();
        assert!(scratch_share(dir.path()).unwrap() >= SCRATCH_SHARE_MIN_BYTES);
    }

    #[test]
    fn durable_producers_share_the_files_each_in_a_region_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = ProducersPattern {
            producers: 3,
            files: 2,
            block_bytes: 4096,
            direct: false,
            time: ProducersPattern::time_for(Duration::ZERO),
        };
        let measured = durable_producers(dir.path(), pattern).unwrap();
        assert!(measured.mb_per_s > 0.0);
        let latency = measured.latency;
        assert!(latency.p50_us <= latency.p99_us && latency.p99_us <= latency.p999_us);
        assert!(latency.p999_us <= latency.max_us);
        // Producers 0 and 2 append to file 0, 2 in its second region; producer 1 to file 1.
        let length = |index: usize| {
            std::fs::metadata(dir.path().join(format!("producers-{index}.tmp")))
                .unwrap()
                .len()
        };
        assert!(length(0) > PRODUCER_REGION_BYTES, "{}", length(0));
        assert!(
            (1..=PRODUCER_REGION_BYTES).contains(&length(1)),
            "{}",
            length(1)
        );
        let file = File::open(dir.path().join("producers-0.tmp")).unwrap();
        let mut first = [0u8; 4096];
        file.read_exact_at(&mut first, PRODUCER_REGION_BYTES)
            .unwrap();
        assert!(first.iter().all(|&byte| byte == b'p'));
    }

    #[test]
    fn grouped_producers_run_rounds_in_every_way_and_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = ProducersPattern {
            producers: 4,
            files: 2,
            block_bytes: 4096,
            direct: false,
            time: Duration::from_millis(300),
        };
        for space in GroupedSpace::ALL {
            let grouped = grouped_producers(dir.path(), pattern, space).unwrap();
            assert_eq!(grouped.space, space);
            assert!(grouped.rounds > 0, "{space:?}");
            let (latency, mb_per_s) = (grouped.measured.latency, grouped.measured.mb_per_s);
            // Each round wrote 2 × 4096 B into each of the 2 files.
            let bytes = grouped.rounds as f64 * 2.0 * 2.0 * 4096.0;
            assert!(mb_per_s > 0.0 && mb_per_s <= bytes / MB / 0.3, "{space:?}");
            assert!(latency.p50_us <= latency.p999_us && latency.p999_us <= latency.max_us);
            if space != GroupedSpace::WrittenAhead {
                assert_eq!(grouped.rounds_beyond_written, 0, "{space:?}");
            }
            let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
            assert!(left.is_empty(), "{space:?} left its files");
        }
    }

    #[test]
    fn grouped_rounds_grow_the_files_or_overwrite_their_region() {
        let rounds = |space, rounds_max| Rounds {
            barrier: Barrier::new(1),
            stop: AtomicBool::new(false),
            until: Instant::now(),
            share_bytes: 8192,
            rounds_max,
            space,
            rounds_beyond_written: AtomicU64::new(0),
        };
        assert_eq!(rounds(GroupedSpace::Grow, 3).position(5), 5 * 8192);
        assert_eq!(rounds(GroupedSpace::WrittenAhead, 3).position(5), 5 * 8192);
        assert_eq!(rounds(GroupedSpace::Overwrite, 3).position(5), 2 * 8192);
    }
}
