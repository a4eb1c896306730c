//! `seglog dump`: prints segment files the way Kafka's `kafka.tools.DumpLogSegments` does, and
//! flags what is wrong in them: a corrupt or torn batch in a `.log` (the dump stops there), and
//! index entries that do not point where they should.

use std::io::{self, Write};
use std::path::Path;

use anyhow::Context;
use seglog::format::{Batch, Record};

use crate::Outcome;
use crate::args::DumpArgs;
use crate::index_check::{
    IndexBytes, OFFSET_ENTRY_BYTES, TIME_ENTRY_BYTES, check_offset_entry, check_time_entry,
    sibling_log,
};
use crate::kafka_text::{batch_line, record_line};
use crate::log_scan::{BatchWalker, LogLayout, WalkStep, unwritten_tail};
use crate::read_only::ReadOnlyFile;

/// What to print for each record of a `.log`.
#[derive(Debug, Clone, Copy)]
struct RecordDetail {
    /// One line per record (`--deep-iteration`, implied by `--print-data-log`).
    deep: bool,
    /// Key and payload on each record line (`--print-data-log`).
    data: bool,
}

pub fn run(args: &DumpArgs) -> anyhow::Result<Outcome> {
    let detail = RecordDetail {
        deep: args.deep_iteration || args.print_data_log,
        data: args.print_data_log,
    };
    let mut out = io::stdout().lock();
    let mut outcome = Outcome::Clean;
    for path in &args.files {
        writeln!(out, "Dumping {}", path.display())?;
        let result = dump_file(&mut out, path, detail);
        out.flush()?;
        match result {
            Ok(Outcome::Clean) => {}
            Ok(Outcome::Findings) => outcome = Outcome::Findings,
            Err(error) if crate::is_broken_pipe(&error) => return Err(error),
            Err(error) => {
                let line = crate::error_line::error_line(&error);
                writeln!(io::stderr(), "seglog: error: {line}")?;
                outcome = Outcome::Findings;
            }
        }
    }
    Ok(outcome)
}

fn dump_file(out: &mut impl Write, path: &Path, detail: RecordDetail) -> anyhow::Result<Outcome> {
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    if name.ends_with(".log") {
        dump_log(out, path, detail)
    } else if name.ends_with(".index") {
        dump_offset_index(out, path)
    } else if name.ends_with(".timeindex") {
        dump_time_index(out, path)
    } else {
        writeln!(io::stderr(), "Ignoring unknown file {}", path.display())?;
        Ok(Outcome::Clean)
    }
}

/// The base offset in a segment file's name (the digits before the first `.`), as Kafka reads it.
fn base_offset_of(path: &Path) -> anyhow::Result<i64> {
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    let stem = name.split('.').next().unwrap_or_default();
    stem.parse::<i64>()
        .ok()
        .filter(|offset| *offset >= 0)
        .with_context(|| {
            format!("{name} is not named <base offset>.<kind>, so its base offset is unknown")
        })
}

fn dump_log(out: &mut impl Write, path: &Path, detail: RecordDetail) -> anyhow::Result<Outcome> {
    writeln!(out, "Log starting offset: {}", base_offset_of(path)?)?;
    let file = ReadOnlyFile::open(path)?;
    let size_bytes = file.length()?;
    let mut walker = BatchWalker::new(&file, size_bytes);
    loop {
        match walker.next_step()? {
            WalkStep::Valid { position, batch } => {
                writeln!(out, "{}", batch_line(batch.header(), position, true))?;
                if detail.deep {
                    match batch.records() {
                        Ok(records) => print_records(out, &batch, &records, detail)?,
                        Err(error) => {
                            let reason = format!("records do not decode: {error}");
                            return stop_at(out, path, position, size_bytes, &reason);
                        }
                    }
                }
            }
            WalkStep::Corrupt {
                position,
                header,
                reason,
            } => {
                writeln!(out, "{}", batch_line(&header, position, false))?;
                return stop_at(out, path, position, size_bytes, &reason);
            }
            WalkStep::Stop { position, reason } => {
                let unread = size_bytes - position;
                if let Some(what) = unwritten_tail(&file, position, unread)? {
                    writeln!(
                        out,
                        "Found {unread} bytes of {what} at the end of {} (the segment was not \
                         closed; recovery cuts them)",
                        file_name(path)
                    )?;
                    return Ok(Outcome::Clean);
                }
                return stop_at(out, path, position, size_bytes, &reason);
            }
            WalkStep::End => return Ok(Outcome::Clean),
        }
    }
}

fn print_records(
    out: &mut impl Write,
    batch: &Batch,
    records: &[Record],
    detail: RecordDetail,
) -> io::Result<()> {
    for record in records {
        writeln!(out, "{}", record_line(batch.header(), record, detail.data))?;
    }
    Ok(())
}

/// The dump of a `.log` ends at the first bad batch: name its position and the reason, and count
/// the bytes left unread (Kafka's "Found N invalid bytes at the end of" line).
fn stop_at(
    out: &mut impl Write,
    path: &Path,
    position: u64,
    size_bytes: u64,
    reason: &str,
) -> anyhow::Result<Outcome> {
    writeln!(
        out,
        "Invalid batch at position {position}: {reason}; stopping"
    )?;
    writeln!(
        out,
        "Found {} invalid bytes at the end of {}",
        size_bytes - position,
        file_name(path)
    )?;
    Ok(Outcome::Findings)
}

fn file_name(path: &Path) -> std::borrow::Cow<'_, str> {
    path.file_name()
        .map(|name| name.to_string_lossy())
        .unwrap_or_default()
}

/// The layout of the `.log` next to an index, or a note that there is none to check against.
fn sibling_layout(out: &mut impl Write, index_path: &Path) -> anyhow::Result<Option<LogLayout>> {
    let log_path = sibling_log(index_path);
    if !log_path.exists() {
        writeln!(
            out,
            "Cannot check entries: {} does not exist",
            log_path.display()
        )?;
        return Ok(None);
    }
    Ok(Some(LogLayout::read(&log_path)?))
}

fn dump_offset_index(out: &mut impl Write, path: &Path) -> anyhow::Result<Outcome> {
    let base_offset = base_offset_of(path)?;
    let index = IndexBytes::read(path, OFFSET_ENTRY_BYTES)?;
    if index.bytes.is_empty() {
        writeln!(out, "{} is empty.", path.display())?;
        return Ok(Outcome::Clean);
    }
    let layout = sibling_layout(out, path)?;
    let mut outcome = Outcome::Clean;
    let mut previous = None;
    for entry in index.offset_entries() {
        let offset = base_offset + i64::from(entry.relative_offset);
        writeln!(out, "offset: {offset} position: {}", entry.position)?;
        let finding = layout
            .as_ref()
            .and_then(|log| check_offset_entry(base_offset, previous, entry, log));
        if let Some(reason) = finding {
            writeln!(
                out,
                "Index entry offset: {offset} position: {} does not match: {reason}",
                entry.position
            )?;
            outcome = Outcome::Findings;
        }
        previous = Some(entry);
    }
    finish_index(out, &index, OFFSET_ENTRY_BYTES, outcome)
}

fn dump_time_index(out: &mut impl Write, path: &Path) -> anyhow::Result<Outcome> {
    let base_offset = base_offset_of(path)?;
    let index = IndexBytes::read(path, TIME_ENTRY_BYTES)?;
    if index.bytes.is_empty() {
        writeln!(out, "{} is empty.", path.display())?;
        return Ok(Outcome::Clean);
    }
    let layout = sibling_layout(out, path)?;
    let mut outcome = Outcome::Clean;
    let mut previous = None;
    for entry in index.time_entries() {
        let offset = base_offset + i64::from(entry.relative_offset);
        writeln!(out, "timestamp: {} offset: {offset}", entry.timestamp_ms)?;
        let finding = layout
            .as_ref()
            .and_then(|log| check_time_entry(base_offset, previous, entry, log));
        if let Some(reason) = finding {
            writeln!(
                out,
                "Time index entry timestamp: {} offset: {offset} does not match: {reason}",
                entry.timestamp_ms
            )?;
            outcome = Outcome::Findings;
        }
        previous = Some(entry);
    }
    finish_index(out, &index, TIME_ENTRY_BYTES, outcome)
}

/// Summarises the zero-filled tail (not an error) and a partial last entry (an error).
fn finish_index(
    out: &mut impl Write,
    index: &IndexBytes,
    entry_bytes: usize,
    outcome: Outcome,
) -> anyhow::Result<Outcome> {
    if let Some(tail) = index.zero_tail {
        writeln!(out, "{}", tail.describe())?;
    }
    if let Some(reason) = index.describe_trailing_bytes(entry_bytes) {
        writeln!(out, "Invalid index length: {reason}")?;
        return Ok(Outcome::Findings);
    }
    Ok(outcome)
}
