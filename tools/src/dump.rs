//! `seglog dump`: prints segment files the way Kafka's `kafka.tools.DumpLogSegments` does, and
//! flags what is wrong in them: a corrupt or torn batch in a `.log` (the dump stops there), and
//! index entries that do not point where they should.
//!
//! `--format json` writes the same as JSON lines, streamed: one object per file, batch, record,
//! index entry, note and problem, each naming its `type` and `file` ([`Printer`]).

use std::fmt::Display;
use std::io::{self, Write};
use std::path::Path;

use anyhow::Context;
use seglog::format::{Batch, Record};
use serde::Serialize;

use crate::Outcome;
use crate::args::{DumpArgs, OutputFormat};
use crate::index_check::{
    IndexBytes, OFFSET_ENTRY_BYTES, TIME_ENTRY_BYTES, check_offset_entry, check_time_entry,
    sibling_log,
};
use crate::kafka_text::{batch_json, batch_line, record_json, record_line};
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

/// Where the dump of one file goes: Kafka's text lines, or JSON lines (`--format json`).
struct Printer<W> {
    out: W,
    format: OutputFormat,
    /// The file being dumped, as named on the command line.
    file: String,
}

/// One JSON line: its `type`, the file, then `fields`.
#[derive(Serialize)]
struct JsonLine<'a, T> {
    #[serde(rename = "type")]
    line_type: &'static str,
    file: &'a str,
    #[serde(flatten)]
    fields: T,
}

/// `{"type":"file"}`: a file's kind (`log`, `index`, `timeindex`, `unknown`) and the base offset
/// in its name.
#[derive(Serialize)]
struct FileJson {
    kind: &'static str,
    base_offset: Option<i64>,
}

/// `{"type":"offset_entry"}`: an `.index` entry.
#[derive(Serialize)]
struct OffsetEntryJson {
    offset: i64,
    position: u32,
}

/// `{"type":"time_entry"}`: a `.timeindex` entry.
#[derive(Serialize)]
struct TimeEntryJson {
    timestamp: i64,
    offset: i64,
}

/// `{"type":"note"}`: something worth knowing that is not wrong.
#[derive(Serialize)]
struct NoteJson {
    note: String,
}

/// `{"type":"problem"}`: what is wrong, at a byte position of the file; `invalid_bytes` counts
/// what a `.log`'s dump left unread from there.
#[derive(Serialize)]
struct ProblemJson {
    position: u64,
    reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    invalid_bytes: Option<u64>,
}

/// `{"type":"error"}`: the file could not be dumped (the same line goes to stderr).
#[derive(Serialize)]
struct ErrorJson {
    error: String,
}

impl<W: Write> Printer<W> {
    /// A text line; nothing in JSON.
    fn text(&mut self, line: impl Display) -> io::Result<()> {
        match self.format {
            OutputFormat::Text => writeln!(self.out, "{line}"),
            OutputFormat::Json => Ok(()),
        }
    }

    /// A JSON line of `line_type`; nothing in text.
    fn json(&mut self, line_type: &'static str, fields: impl Serialize) -> anyhow::Result<()> {
        if self.format == OutputFormat::Json {
            let line = JsonLine {
                line_type,
                file: &self.file,
                fields,
            };
            serde_json::to_writer(&mut self.out, &line)?;
            writeln!(self.out)?;
        }
        Ok(())
    }

    /// A note: `text` in text, `{"type":"note","note":json}` in JSON.
    fn note(&mut self, text: impl Display, json: impl Display) -> anyhow::Result<()> {
        self.text(text)?;
        self.json(
            "note",
            NoteJson {
                note: json.to_string(),
            },
        )
    }
}

pub fn run(args: &DumpArgs) -> anyhow::Result<Outcome> {
    let detail = RecordDetail {
        deep: args.deep_iteration || args.print_data_log,
        data: args.print_data_log,
    };
    let mut outcome = Outcome::Clean;
    for path in &args.files {
        let mut printer = Printer {
            out: io::stdout().lock(),
            format: args.format,
            file: path.display().to_string(),
        };
        printer.text(format_args!("Dumping {}", path.display()))?;
        let result = dump_file(&mut printer, path, detail);
        printer.out.flush()?;
        match result {
            Ok(Outcome::Clean) => {}
            Ok(Outcome::Findings) => outcome = Outcome::Findings,
            Err(error) if crate::is_broken_pipe(&error) => return Err(error),
            Err(error) => {
                let line = crate::error_line::error_line(&error);
                printer.json(
                    "error",
                    ErrorJson {
                        error: line.clone(),
                    },
                )?;
                printer.out.flush()?;
                writeln!(io::stderr(), "seglog: error: {line}")?;
                outcome = Outcome::Findings;
            }
        }
    }
    Ok(outcome)
}

fn dump_file(
    printer: &mut Printer<impl Write>,
    path: &Path,
    detail: RecordDetail,
) -> anyhow::Result<Outcome> {
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    let kind = ["log", "index", "timeindex"]
        .into_iter()
        .find(|kind| {
            name.strip_suffix(kind)
                .is_some_and(|stem| stem.ends_with('.'))
        })
        .unwrap_or("unknown");
    let base_offset = base_offset_of(path).ok();
    printer.json("file", FileJson { kind, base_offset })?;
    match kind {
        "log" => dump_log(printer, path, detail),
        "index" => dump_offset_index(printer, path),
        "timeindex" => dump_time_index(printer, path),
        _ => {
            writeln!(io::stderr(), "Ignoring unknown file {}", path.display())?;
            Ok(Outcome::Clean)
        }
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

fn dump_log(
    printer: &mut Printer<impl Write>,
    path: &Path,
    detail: RecordDetail,
) -> anyhow::Result<Outcome> {
    printer.text(format_args!(
        "Log starting offset: {}",
        base_offset_of(path)?
    ))?;
    let file = ReadOnlyFile::open(path)?;
    let size_bytes = file.length()?;
    let mut walker = BatchWalker::new(&file, size_bytes);
    loop {
        match walker.next_step()? {
            WalkStep::Valid { position, batch } => {
                print_batch(printer, &batch, position)?;
                if detail.deep {
                    match batch.records() {
                        Ok(records) => print_records(printer, &batch, &records, detail)?,
                        Err(error) => {
                            let reason = format!("records do not decode: {error}");
                            return stop_at(printer, path, position, size_bytes, &reason);
                        }
                    }
                }
            }
            WalkStep::Corrupt {
                position,
                header,
                reason,
            } => {
                printer.text(batch_line(&header, position, false))?;
                printer.json("batch", batch_json(&header, position, false))?;
                return stop_at(printer, path, position, size_bytes, &reason);
            }
            WalkStep::Stop { position, reason } => {
                let unread = size_bytes - position;
                if let Some(what) = unwritten_tail(&file, position, unread)? {
                    printer.note(
                        format_args!(
                            "Found {unread} bytes of {what} at the end of {} (the segment was \
                             not closed; recovery cuts them)",
                            file_name(path)
                        ),
                        format_args!(
                            "the last {unread} bytes, from position {position}, are {what} (the \
                             segment was not closed; recovery cuts them)"
                        ),
                    )?;
                    return Ok(Outcome::Clean);
                }
                return stop_at(printer, path, position, size_bytes, &reason);
            }
            WalkStep::End => return Ok(Outcome::Clean),
        }
    }
}

fn print_batch(
    printer: &mut Printer<impl Write>,
    batch: &Batch,
    position: u64,
) -> anyhow::Result<()> {
    printer.text(batch_line(batch.header(), position, true))?;
    printer.json("batch", batch_json(batch.header(), position, true))
}

fn print_records(
    printer: &mut Printer<impl Write>,
    batch: &Batch,
    records: &[Record],
    detail: RecordDetail,
) -> anyhow::Result<()> {
    for record in records {
        printer.text(record_line(batch.header(), record, detail.data))?;
        printer.json("record", record_json(batch.header(), record, detail.data))?;
    }
    Ok(())
}

/// The dump of a `.log` ends at the first bad batch: name its position and the reason, and count
/// the bytes left unread (Kafka's "Found N invalid bytes at the end of" line).
fn stop_at(
    printer: &mut Printer<impl Write>,
    path: &Path,
    position: u64,
    size_bytes: u64,
    reason: &str,
) -> anyhow::Result<Outcome> {
    let invalid_bytes = size_bytes - position;
    printer.text(format_args!(
        "Invalid batch at position {position}: {reason}; stopping"
    ))?;
    printer.text(format_args!(
        "Found {invalid_bytes} invalid bytes at the end of {}",
        file_name(path)
    ))?;
    printer.json(
        "problem",
        ProblemJson {
            position,
            reason: format!("invalid batch: {reason}"),
            invalid_bytes: Some(invalid_bytes),
        },
    )?;
    Ok(Outcome::Findings)
}

fn file_name(path: &Path) -> std::borrow::Cow<'_, str> {
    path.file_name()
        .map(|name| name.to_string_lossy())
        .unwrap_or_default()
}

/// The layout of the `.log` next to an index, or a note that there is none to check against.
fn sibling_layout(
    printer: &mut Printer<impl Write>,
    index_path: &Path,
) -> anyhow::Result<Option<LogLayout>> {
    let log_path = sibling_log(index_path);
    if !log_path.exists() {
        let text = format!(
            "Cannot check entries: {} does not exist",
            log_path.display()
        );
        printer.note(&text, &text)?;
        return Ok(None);
    }
    Ok(Some(LogLayout::read(&log_path)?))
}

/// An index with no bytes at all.
fn note_empty(printer: &mut Printer<impl Write>, path: &Path) -> anyhow::Result<Outcome> {
    printer.note(format_args!("{} is empty.", path.display()), "empty")?;
    Ok(Outcome::Clean)
}

fn dump_offset_index(printer: &mut Printer<impl Write>, path: &Path) -> anyhow::Result<Outcome> {
    let base_offset = base_offset_of(path)?;
    let index = IndexBytes::read(path, OFFSET_ENTRY_BYTES)?;
    if index.bytes.is_empty() {
        return note_empty(printer, path);
    }
    let layout = sibling_layout(printer, path)?;
    let mut outcome = Outcome::Clean;
    let mut previous = None;
    for (entry_index, entry) in index.offset_entries().enumerate() {
        let offset = base_offset + i64::from(entry.relative_offset);
        let position = entry.position;
        printer.text(format_args!("offset: {offset} position: {position}"))?;
        printer.json("offset_entry", OffsetEntryJson { offset, position })?;
        let finding = layout
            .as_ref()
            .and_then(|log| check_offset_entry(base_offset, previous, entry, log));
        if let Some(reason) = finding {
            let what = format!("entry offset: {offset} position: {position} does not match");
            printer.text(format_args!("Index {what}: {reason}"))?;
            printer.json(
                "problem",
                ProblemJson {
                    position: (entry_index * OFFSET_ENTRY_BYTES) as u64,
                    reason: format!("index {what}: {reason}"),
                    invalid_bytes: None,
                },
            )?;
            outcome = Outcome::Findings;
        }
        previous = Some(entry);
    }
    finish_index(printer, &index, OFFSET_ENTRY_BYTES, outcome)
}

fn dump_time_index(printer: &mut Printer<impl Write>, path: &Path) -> anyhow::Result<Outcome> {
    let base_offset = base_offset_of(path)?;
    let index = IndexBytes::read(path, TIME_ENTRY_BYTES)?;
    if index.bytes.is_empty() {
        return note_empty(printer, path);
    }
    let layout = sibling_layout(printer, path)?;
    let mut outcome = Outcome::Clean;
    let mut previous = None;
    for (entry_index, entry) in index.time_entries().enumerate() {
        let offset = base_offset + i64::from(entry.relative_offset);
        let timestamp = entry.timestamp_ms;
        printer.text(format_args!("timestamp: {timestamp} offset: {offset}"))?;
        printer.json("time_entry", TimeEntryJson { timestamp, offset })?;
        let finding = layout
            .as_ref()
            .and_then(|log| check_time_entry(base_offset, previous, entry, log));
        if let Some(reason) = finding {
            let what =
                format!("index entry timestamp: {timestamp} offset: {offset} does not match");
            printer.text(format_args!("Time {what}: {reason}"))?;
            printer.json(
                "problem",
                ProblemJson {
                    position: (entry_index * TIME_ENTRY_BYTES) as u64,
                    reason: format!("time {what}: {reason}"),
                    invalid_bytes: None,
                },
            )?;
            outcome = Outcome::Findings;
        }
        previous = Some(entry);
    }
    finish_index(printer, &index, TIME_ENTRY_BYTES, outcome)
}

/// Summarises the zero-filled tail (not an error) and a partial last entry (an error).
fn finish_index(
    printer: &mut Printer<impl Write>,
    index: &IndexBytes,
    entry_bytes: usize,
    outcome: Outcome,
) -> anyhow::Result<Outcome> {
    if let Some(tail) = index.zero_tail {
        printer.note(tail.describe(), tail.describe())?;
    }
    if let Some(reason) = index.describe_trailing_bytes(entry_bytes) {
        printer.text(format_args!("Invalid index length: {reason}"))?;
        printer.json(
            "problem",
            ProblemJson {
                position: (index.bytes.len() - index.trailing_bytes) as u64,
                reason: format!("invalid index length: {reason}"),
                invalid_bytes: Some(index.trailing_bytes as u64),
            },
        )?;
        return Ok(Outcome::Findings);
    }
    Ok(outcome)
}
