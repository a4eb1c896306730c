//! `seglog verify`: checks a data directory (or one partition directory) read-only, without
//! opening it through the engine (which would recover and repair it).
//!
//! For every partition: every batch of every `.log` (framing, magic, CRC-32C, records), offsets
//! increasing across batches and segments, no offset gap between segments where the engine
//! refuses one (a lost segment: anywhere in a log the cleaner never compacted, at or above the
//! cleaned end of one it did), no misnamed segment file (`123.log`, which the log would ignore),
//! and every `.index` / `.timeindex` entry against the batches of its `.log`. Problems are printed
//! one per line, naming the file and the position. A directory that is neither a data directory
//! nor a partition directory is refused. `--format json` prints one document instead: `ok`, the
//! totals, and per partition what was checked and each problem ([`ReportJson`]).

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::Context;
use seglog::config::LogConfig;
use seglog::engine::TopicMetadata;
use seglog::format::file_name::{
    CLEANER_OFFSET_CHECKPOINT, FileState, LOG_START_OFFSET_CHECKPOINT, PRODUCER_ID_BLOCK,
    RECOVERY_POINT_CHECKPOINT, SegmentFileKind, SegmentFileName, parse_partition_dir_name,
};
use seglog::types::TopicName;
use serde::Serialize;

use crate::Outcome;
use crate::args::{OutputFormat, VerifyArgs};
use crate::data_dir::{DirState, inspect, list_names, require_data_dir};
use crate::dir_view::{read_checkpoint, read_registry};
use crate::index_check::{
    IndexBytes, OFFSET_ENTRY_BYTES, TIME_ENTRY_BYTES, check_offset_entry, check_time_entry,
};
use crate::log_scan::{BatchSpan, BatchWalker, LogLayout, ScanStop, WalkStep, unwritten_tail};
use crate::read_only::ReadOnlyFile;

/// One thing verification found: the file it is in (none for the topic registry's own error), the
/// byte position where there is one, and what.
#[derive(Debug)]
struct Finding {
    file: Option<String>,
    position: Option<u64>,
    text: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(file) = &self.file {
            write!(formatter, "{file}: ")?;
        }
        if let Some(position) = self.position {
            write!(formatter, "position {position}: ")?;
        }
        write!(formatter, "{}", self.text)
    }
}

/// What verification covered.
#[derive(Debug, Default, Clone, Copy, Serialize)]
struct Checked {
    segments: u64,
    batches: u64,
    records: u64,
    /// `.index` and `.timeindex` entries checked against their `.log` (zero tails excluded).
    index_entries: u64,
}

/// One partition directory's share of a [`Report`]: what was checked there, and the ranges of
/// the report's problems and notes found there.
#[derive(Debug)]
struct PartitionReport {
    dir: String,
    checked: Checked,
    problems: Range<usize>,
    notes: Range<usize>,
}

/// Everything verification found, and what it covered.
#[derive(Debug, Default)]
struct Report {
    problems: Vec<Finding>,
    notes: Vec<Finding>,
    checked: Checked,
    partitions: Vec<PartitionReport>,
}

impl Report {
    fn problem(&mut self, file: &Path, position: u64, reason: impl std::fmt::Display) {
        self.problems.push(Finding {
            file: Some(file.display().to_string()),
            position: Some(position),
            text: reason.to_string(),
        });
    }

    fn problem_in_file(&mut self, file: &Path, reason: impl std::fmt::Display) {
        self.problems.push(Finding {
            file: Some(file.display().to_string()),
            position: None,
            text: reason.to_string(),
        });
    }

    fn note(&mut self, file: &Path, text: impl std::fmt::Display) {
        self.notes.push(Finding {
            file: Some(file.display().to_string()),
            position: None,
            text: text.to_string(),
        });
    }

    /// Verifies one partition directory, keeping what it checked and found apart.
    fn partition(
        &mut self,
        dir: &Path,
        verify: impl FnOnce(&mut Report) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let (problems, notes, before) = (self.problems.len(), self.notes.len(), self.checked);
        verify(self)?;
        let after = self.checked;
        self.partitions.push(PartitionReport {
            dir: dir.display().to_string(),
            checked: Checked {
                segments: after.segments - before.segments,
                batches: after.batches - before.batches,
                records: after.records - before.records,
                index_entries: after.index_entries - before.index_entries,
            },
            problems: problems..self.problems.len(),
            notes: notes..self.notes.len(),
        });
        Ok(())
    }
}

pub fn run(args: &VerifyArgs) -> anyhow::Result<Outcome> {
    let mut report = Report::default();
    let targets = targets(&args.dir)?;
    let topics = match read_registry(&targets.root) {
        Ok(topics) => topics,
        Err(error) => {
            report.problems.push(Finding {
                file: None,
                position: None,
                text: crate::error_line::error_line(&error),
            });
            BTreeMap::new()
        }
    };
    if targets.whole_directory {
        verify_checkpoints(&targets.root, &mut report)?;
        verify_producer_id_block(&targets.root, &mut report)?;
    }
    for partition_dir in &targets.partition_dirs {
        let config = topic_config(&topics, partition_dir);
        report.partition(partition_dir, |report| {
            verify_partition(partition_dir, &config, report)
        })?;
    }
    let mut out = io::stdout().lock();
    match args.format {
        OutputFormat::Text => print_text(&mut out, &report)?,
        OutputFormat::Json => {
            serde_json::to_writer(&mut out, &report_json(&args.dir, &report))?;
            writeln!(out)?;
        }
    }
    match report.problems.is_empty() {
        true => Ok(Outcome::Clean),
        false => Ok(Outcome::Findings),
    }
}

fn print_text(out: &mut impl Write, report: &Report) -> io::Result<()> {
    for note in &report.notes {
        writeln!(out, "note: {note}")?;
    }
    for problem in &report.problems {
        writeln!(out, "{problem}")?;
    }
    let Checked {
        segments,
        batches,
        records,
        ..
    } = report.checked;
    let totals = format!("{segments} segments, {batches} batches, {records} records");
    match report.problems.len() {
        0 => writeln!(out, "OK {totals}"),
        count => writeln!(out, "FAILED {count} problems in {totals}"),
    }
}

/// A problem in `verify --format json`.
#[derive(Serialize)]
struct ProblemJson<'a> {
    file: Option<&'a str>,
    position: Option<u64>,
    reason: &'a str,
}

/// A note in `verify --format json`.
#[derive(Serialize)]
struct NoteJson<'a> {
    file: Option<&'a str>,
    note: &'a str,
}

/// A partition in `verify --format json`: its directory, whether it has no problem, what was
/// checked, and what was found.
#[derive(Serialize)]
struct PartitionJson<'a> {
    dir: &'a str,
    ok: bool,
    #[serde(flatten)]
    checked: Checked,
    problems: Vec<ProblemJson<'a>>,
    notes: Vec<NoteJson<'a>>,
}

/// `verify --format json`: `ok` (no problem anywhere), the totals, the problems and notes of the
/// data directory itself (registry, checkpoints, producer-id block), and each partition's.
#[derive(Serialize)]
struct ReportJson<'a> {
    dir: String,
    ok: bool,
    problem_count: usize,
    #[serde(flatten)]
    checked: Checked,
    problems: Vec<ProblemJson<'a>>,
    notes: Vec<NoteJson<'a>>,
    partitions: Vec<PartitionJson<'a>>,
}

fn report_json<'a>(dir: &Path, report: &'a Report) -> ReportJson<'a> {
    let partitions = report
        .partitions
        .iter()
        .map(|partition| PartitionJson {
            dir: &partition.dir,
            ok: partition.problems.is_empty(),
            checked: partition.checked,
            problems: problems_json(&report.problems[partition.problems.clone()]),
            notes: notes_json(&report.notes[partition.notes.clone()]),
        })
        .collect();
    let in_partition = |index: usize, range: fn(&PartitionReport) -> &Range<usize>| {
        report
            .partitions
            .iter()
            .any(|partition| range(partition).contains(&index))
    };
    let outside = |findings: &'a [Finding], range: fn(&PartitionReport) -> &Range<usize>| {
        let outside = findings
            .iter()
            .enumerate()
            .filter(move |(index, _)| !in_partition(*index, range));
        outside.map(|(_, finding)| finding)
    };
    ReportJson {
        dir: dir.display().to_string(),
        ok: report.problems.is_empty(),
        problem_count: report.problems.len(),
        checked: report.checked,
        problems: problems_json(outside(&report.problems, |partition| &partition.problems)),
        notes: notes_json(outside(&report.notes, |partition| &partition.notes)),
        partitions,
    }
}

fn problems_json<'a>(findings: impl IntoIterator<Item = &'a Finding>) -> Vec<ProblemJson<'a>> {
    let problem = |finding: &'a Finding| ProblemJson {
        file: finding.file.as_deref(),
        position: finding.position,
        reason: &finding.text,
    };
    findings.into_iter().map(problem).collect()
}

fn notes_json<'a>(findings: impl IntoIterator<Item = &'a Finding>) -> Vec<NoteJson<'a>> {
    let note = |finding: &'a Finding| NoteJson {
        file: finding.file.as_deref(),
        note: &finding.text,
    };
    findings.into_iter().map(note).collect()
}

/// What to verify: partition directories, and the data directory they belong to.
#[derive(Debug)]
struct Targets {
    root: PathBuf,
    partition_dirs: Vec<PathBuf>,
    /// The whole data directory, not one partition of it.
    whole_directory: bool,
}

/// `dir` itself when it is a partition directory (it holds segment files, or is named like one and
/// lies in a data directory), else the partition directories of the data directory `dir`. Anything
/// else is refused.
fn targets(dir: &Path) -> anyhow::Result<Targets> {
    let parent = dir.parent().map(Path::to_owned).unwrap_or_default();
    let single = Targets {
        root: parent.clone(),
        partition_dirs: vec![dir.to_owned()],
        whole_directory: false,
    };
    if dir.is_dir()
        && list_names(dir)?
            .iter()
            .any(|name| SegmentFileName::parse(name).is_some())
    {
        return Ok(single);
    }
    let own_name = dir
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    let in_data_dir = || inspect(&parent).is_ok_and(|state| state == DirState::DataDirectory);
    if dir.is_dir() && parse_partition_dir_name(own_name).is_some() && in_data_dir() {
        return Ok(single);
    }
    require_data_dir(dir)?;
    let partition_dirs = list_names(dir)?
        .iter()
        .filter(|name| parse_partition_dir_name(name).is_some())
        .map(|name| dir.join(name))
        .filter(|path| path.is_dir())
        .collect();
    Ok(Targets {
        root: dir.to_owned(),
        partition_dirs,
        whole_directory: true,
    })
}

/// A checkpoint with copies none of which is valid: the engine opens every partition through
/// full recovery, and what the checkpoint held is lost.
fn verify_checkpoints(root: &Path, report: &mut Report) -> anyhow::Result<()> {
    for name in [
        RECOVERY_POINT_CHECKPOINT,
        LOG_START_OFFSET_CHECKPOINT,
        CLEANER_OFFSET_CHECKPOINT,
    ] {
        if let Some(cause) = read_checkpoint(root, name)?.lost {
            report.problem_in_file(
                &root.join(name),
                format!("no valid copy ({cause}); the next open recovers every partition in full, and records removed below a log start offset may reappear"),
            );
        }
    }
    Ok(())
}

/// A producer-id block file that does not parse: the engine refuses to hand out producer ids,
/// since which ones it handed out is unknown.
fn verify_producer_id_block(root: &Path, report: &mut Report) -> anyhow::Result<()> {
    let path = root.join(PRODUCER_ID_BLOCK);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    if let Err(error) = seglog::format::producer_ids::decode(&bytes) {
        let problem = format!("{error}; idempotent producers get no producer id until it is fixed");
        report.problem_in_file(&path, problem);
    }
    Ok(())
}

/// The configuration of the partition in `partition_dir`: the registry's, else the default (as the
/// engine adopts a partition the registry does not list).
fn topic_config(topics: &BTreeMap<TopicName, TopicMetadata>, partition_dir: &Path) -> LogConfig {
    partition_dir
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(parse_partition_dir_name)
        .and_then(|tp| topics.get(&tp.topic))
        .map_or_else(LogConfig::default, |metadata| metadata.config.clone())
}

/// The live files of each segment, by base offset.
type SegmentFiles = BTreeMap<u64, Vec<SegmentFileKind>>;

/// The partition's segment files by base offset; leftovers and misnamed files are reported.
fn segment_files(dir: &Path, report: &mut Report) -> anyhow::Result<SegmentFiles> {
    let mut segments = SegmentFiles::new();
    for name in list_names(dir)? {
        let Some(parsed) = SegmentFileName::parse(&name) else {
            if is_misnamed_segment_file(&name) {
                report.problem_in_file(
                    &dir.join(&name),
                    "misnamed segment file: segment files are named by a 20-digit base offset \
                     (e.g. 00000000000000000123.log), so the log ignores this one and any \
                     batches in it",
                );
            }
            continue;
        };
        if parsed.state == FileState::Live {
            segments
                .entry(parsed.base_offset.0)
                .or_default()
                .push(parsed.kind);
        } else {
            let note =
                "leftover of an interrupted delete or compaction; opening the log settles it";
            report.note(&dir.join(&name), note);
        }
    }
    Ok(segments)
}

/// A name with a segment file's extension (and maybe a state suffix) that is not a segment file
/// name: `123.log`, `00000000000000000abc.index`.
fn is_misnamed_segment_file(name: &str) -> bool {
    let without_state = [".deleted", ".cleaned", ".swap"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name);
    [".log", ".index", ".timeindex", ".txnindex"]
        .iter()
        .any(|extension| without_state.ends_with(extension))
}

/// The name of the cleaned-end file in a partition directory (FORMAT.md § Cleaned end; the
/// library keeps its own constant private).
const CLEANED_END_FILE: &str = "seglog-cleaned-end";

/// Where the partition's offsets must be dense: from the cleaned end of a compacted log (from
/// nowhere if it has no record of it: it may have been cleaned anywhere), from 0 for any other.
fn dense_from(dir: &Path, config: &LogConfig) -> u64 {
    if !config.cleanup_policy.compacts() {
        return 0;
    }
    read_cleaned_end(dir).unwrap_or(u64::MAX)
}

/// The partition's recorded cleaned end (FORMAT.md § Cleaned end: `0`, then the offset), if it
/// has a readable one.
fn read_cleaned_end(dir: &Path) -> Option<u64> {
    let text = fs::read_to_string(dir.join(CLEANED_END_FILE)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "0" {
        return None;
    }
    let offset = lines.next()?.parse().ok()?;
    lines.next().is_none().then_some(offset)
}

/// What the previous segment left for the next one.
#[derive(Debug, Clone, Copy)]
struct PreviousSegment {
    base_offset: i64,
    next_offset: i64,
    /// Its batches ran to the end of its file (no torn or corrupt tail).
    whole: bool,
}

fn verify_partition(dir: &Path, config: &LogConfig, report: &mut Report) -> anyhow::Result<()> {
    let segments = segment_files(dir, report)?;
    let dense_from = i64::try_from(dense_from(dir, config)).unwrap_or(i64::MAX);
    let mut previous: Option<PreviousSegment> = None;
    for (base_offset, kinds) in &segments {
        let log_path =
            SegmentFileName::live(seglog::types::Offset(*base_offset), SegmentFileKind::Log)
                .path_in(dir);
        if !kinds.contains(&SegmentFileKind::Log) {
            report.note(
                &log_path,
                "missing: its index files are orphans, which opening the log removes",
            );
            continue;
        }
        let base_offset = i64::try_from(*base_offset).context("base offset exceeds i64")?;
        if let Some(previous) = previous.filter(|p| p.whole && p.base_offset >= dense_from) {
            check_no_gap(&log_path, base_offset, previous.next_offset, report);
        }
        let previous_next_offset = previous.map(|previous| previous.next_offset);
        let layout = verify_log(&log_path, base_offset, previous_next_offset, report)?;
        verify_indexes(&log_path, base_offset, &layout, report)?;
        previous = Some(PreviousSegment {
            base_offset,
            next_offset: layout.next_offset(base_offset),
            whole: layout.stop.is_none(),
        });
    }
    if segments.is_empty() {
        report.note(dir, "no segments");
    }
    Ok(())
}

/// A segment must start where the previous one ends, unless the cleaner may have left a gap
/// there: otherwise offsets are missing (a segment file was lost), and the engine refuses to open
/// the partition.
fn check_no_gap(log_path: &Path, base_offset: i64, previous_end: i64, report: &mut Report) {
    if base_offset > previous_end {
        let last_missing = base_offset - 1;
        report.problem(
            log_path,
            0,
            format!(
                "offset gap: offsets {previous_end} to {last_missing} are in no segment (the \
                 previous segment ends at offset {previous_end}, this one is based at \
                 {base_offset}: a segment is missing); opening the log refuses the partition"
            ),
        );
    }
}

/// Offsets a batch must respect, given what came before it.
#[derive(Debug, Clone, Copy)]
struct OffsetFloor {
    /// The segment's base offset.
    segment_base: i64,
    /// One past the last offset seen so far (previous batch, or previous segment).
    next_offset: Option<i64>,
}

fn verify_log(
    path: &Path,
    base_offset: i64,
    previous_next_offset: Option<i64>,
    report: &mut Report,
) -> anyhow::Result<LogLayout> {
    if let Some(previous) = previous_next_offset.filter(|previous| base_offset < *previous) {
        let last = previous - 1;
        let reason = format!(
            "segment base offset {base_offset} overlaps the previous segment (last offset {last})"
        );
        report.problem(path, 0, reason);
    }
    let file = ReadOnlyFile::open(path)?;
    let size_bytes = file.length()?;
    let mut layout = LogLayout {
        size_bytes,
        ..LogLayout::default()
    };
    let mut floor = OffsetFloor {
        segment_base: base_offset,
        next_offset: previous_next_offset,
    };
    let mut walker = BatchWalker::new(&file, size_bytes);
    report.checked.segments += 1;
    loop {
        let span = match walker.next_step()? {
            WalkStep::Valid { position, batch } => {
                report.checked.records += check_records(path, position, &batch, report);
                BatchSpan::new(position, batch.header())
            }
            WalkStep::Corrupt {
                position,
                header,
                reason,
            } => {
                report.problem(path, position, reason);
                BatchSpan::new(position, &header)
            }
            WalkStep::Stop { position, reason } => {
                let unread = size_bytes - position;
                if let Some(what) = unwritten_tail(&file, position, unread)? {
                    report.note(
                        path,
                        format!(
                            "the last {unread} bytes are {what} (the segment was not closed; \
                             recovery cuts them)"
                        ),
                    );
                    return Ok(layout);
                }
                report.problem(
                    path,
                    position,
                    format!("{reason}; the last {unread} bytes cannot be read"),
                );
                layout.stop = Some(ScanStop { position, reason });
                return Ok(layout);
            }
            WalkStep::End => return Ok(layout),
        };
        report.checked.batches += 1;
        check_batch_offsets(path, &span, &mut floor, report);
        layout.batches.push(span);
    }
}

/// A batch must not start below the segment's base offset nor below the end of what came before,
/// must end at or after its start, and must fit the index's 32-bit relative offsets.
fn check_batch_offsets(
    path: &Path,
    span: &BatchSpan,
    floor: &mut OffsetFloor,
    report: &mut Report,
) {
    let BatchSpan {
        position,
        base_offset,
        last_offset,
        ..
    } = *span;
    if base_offset < floor.segment_base {
        report.problem(
            path,
            position,
            format!(
                "batch base offset {base_offset} is below the segment's base offset {}",
                floor.segment_base
            ),
        );
    }
    if let Some(next_offset) = floor.next_offset.filter(|next| base_offset < *next) {
        let last = next_offset - 1;
        let reason = format!(
            "batch base offset {base_offset} does not follow the previous batch (last offset {last})"
        );
        report.problem(path, position, reason);
    }
    if last_offset < base_offset {
        report.problem(
            path,
            position,
            format!("batch last offset {last_offset} is below its base offset {base_offset}"),
        );
    }
    if last_offset.saturating_sub(floor.segment_base) > i64::from(i32::MAX) {
        report.problem(
            path,
            position,
            format!(
                "batch last offset {last_offset} does not fit a segment based at {}",
                floor.segment_base
            ),
        );
    }
    floor.next_offset = Some(
        floor
            .next_offset
            .unwrap_or(i64::MIN)
            .max(last_offset.saturating_add(1)),
    );
}

/// Decodes the records (decompressing them) and checks their offset deltas; returns the count.
fn check_records(
    path: &Path,
    position: u64,
    batch: &seglog::format::Batch,
    report: &mut Report,
) -> u64 {
    let records = match batch.records() {
        Ok(records) => records,
        Err(error) => {
            report.problem(path, position, format!("records do not decode: {error}"));
            return 0;
        }
    };
    let last_offset_delta = batch.header().last_offset_delta;
    let mut previous_delta: Option<i32> = None;
    for (index, record) in records.iter().enumerate() {
        let delta = record.offset_delta;
        if delta < 0
            || delta > last_offset_delta
            || previous_delta.is_some_and(|previous| delta <= previous)
        {
            let allowed = format!("0..={last_offset_delta}");
            let reason = format!(
                "record {index} has offset delta {delta}: out of order or outside {allowed}"
            );
            report.problem(path, position, reason);
            break;
        }
        previous_delta = Some(delta);
    }
    records.len() as u64
}

fn verify_indexes(
    log_path: &Path,
    base_offset: i64,
    layout: &LogLayout,
    report: &mut Report,
) -> anyhow::Result<()> {
    let index_path = log_path.with_extension("index");
    match index_path.exists() {
        true => verify_offset_index(&index_path, base_offset, layout, report)?,
        false => report.note(&index_path, "missing (opening the log rebuilds it)"),
    }
    let time_index_path = log_path.with_extension("timeindex");
    match time_index_path.exists() {
        true => verify_time_index(&time_index_path, base_offset, layout, report)?,
        false => report.note(&time_index_path, "missing (opening the log rebuilds it)"),
    }
    Ok(())
}

fn verify_offset_index(
    path: &Path,
    base_offset: i64,
    layout: &LogLayout,
    report: &mut Report,
) -> anyhow::Result<()> {
    let index = IndexBytes::read(path, OFFSET_ENTRY_BYTES)?;
    report.checked.index_entries += index.entry_count as u64;
    let mut previous = None;
    for (entry_index, entry) in index.offset_entries().enumerate() {
        if let Some(reason) = check_offset_entry(base_offset, previous, entry, layout) {
            let offset = base_offset + i64::from(entry.relative_offset);
            let what = format!(
                "entry {entry_index} (offset: {offset} position: {})",
                entry.position
            );
            report.problem(
                path,
                (entry_index * OFFSET_ENTRY_BYTES) as u64,
                format!("{what}: {reason}"),
            );
        }
        previous = Some(entry);
    }
    finish_index(path, &index, OFFSET_ENTRY_BYTES, report);
    Ok(())
}

fn verify_time_index(
    path: &Path,
    base_offset: i64,
    layout: &LogLayout,
    report: &mut Report,
) -> anyhow::Result<()> {
    let index = IndexBytes::read(path, TIME_ENTRY_BYTES)?;
    report.checked.index_entries += index.entry_count as u64;
    let mut previous = None;
    for (entry_index, entry) in index.time_entries().enumerate() {
        if let Some(reason) = check_time_entry(base_offset, previous, entry, layout) {
            let offset = base_offset + i64::from(entry.relative_offset);
            let what = format!(
                "entry {entry_index} (timestamp: {} offset: {offset})",
                entry.timestamp_ms
            );
            report.problem(
                path,
                (entry_index * TIME_ENTRY_BYTES) as u64,
                format!("{what}: {reason}"),
            );
        }
        previous = Some(entry);
    }
    finish_index(path, &index, TIME_ENTRY_BYTES, report);
    Ok(())
}

fn finish_index(path: &Path, index: &IndexBytes, entry_bytes: usize, report: &mut Report) {
    if let Some(tail) = index.zero_tail {
        report.note(path, tail.describe());
    }
    if let Some(reason) = index.describe_trailing_bytes(entry_bytes) {
        report.problem(
            path,
            (index.bytes.len() - index.trailing_bytes) as u64,
            reason,
        );
    }
}
