//! `seglog consume`: prints one partition's records from an offset up to the log end offset seen
//! when reading started.
//!
//! The data directory is opened through `LogDir`, so a directory that was not closed cleanly, or
//! that Kafka wrote (no checkpoints, no indexes), is recovered first, exactly as an application
//! embedding seglog would see it.

use std::io::{self, Write};
use std::sync::Arc;

use anyhow::{Context, bail};
use seglog::config::LogConfig;
use seglog::format::Batch;
use seglog::format::batch::BatchIter;
use seglog::io::pio::PositionedIo;
use seglog::log::PartitionLog;
use seglog::log_dir::LogDir;
use seglog::types::{Offset, TopicName};

use crate::Outcome;
use crate::args::{ConsumeArgs, OutputFormat};
use crate::record_view::{json_line, record_offset, text_line};

/// Bytes asked of the log per read; a read always returns at least one whole batch.
const FETCH_MAX_BYTES: u64 = 1024 * 1024;

pub fn run(args: &ConsumeArgs) -> anyhow::Result<Outcome> {
    let topic = TopicName::parse(&args.topic)
        .with_context(|| format!("invalid topic name {:?}", args.topic))?;
    if !args.dir.is_dir() {
        bail!("data directory {} does not exist", args.dir.display());
    }
    let mut log_dir = LogDir::open(&args.dir, Arc::new(PositionedIo), LogConfig::default())
        .with_context(|| format!("cannot open data directory {}", args.dir.display()))?;
    let consumed = consume(&mut log_dir, &topic, args);
    // Close (clean shutdown) even after an error, so the next open need not recover; the first
    // error is the one reported.
    let closed = log_dir.close().context("cannot close the data directory");
    consumed.and(closed)?;
    Ok(Outcome::Clean)
}

fn consume(log_dir: &mut LogDir, topic: &TopicName, args: &ConsumeArgs) -> anyhow::Result<()> {
    let partition_count = log_dir.partition_count(topic)?;
    let log = log_dir.partition(topic, args.partition).with_context(|| {
        format!(
            "cannot open {topic}-{} (the topic has {partition_count} partitions on disk)",
            args.partition
        )
    })?;
    print_records(log, args).with_context(|| format!("cannot consume {topic}-{}", args.partition))
}

/// Where printing starts and stops.
#[derive(Debug, Clone, Copy)]
struct ReadRange {
    /// Records below this offset are skipped (a read returns whole batches).
    first_offset: u64,
    /// The log end offset when reading started.
    end_offset: u64,
    max_records: u64,
}

fn print_records(log: &PartitionLog, args: &ConsumeArgs) -> anyhow::Result<()> {
    let (start_offset, end_offset) = (log.log_start_offset().0, log.log_end_offset().0);
    let first_offset = args.offset.unwrap_or(start_offset);
    if first_offset < start_offset || first_offset > end_offset {
        bail!(
            "offset {first_offset} is out of range: valid offsets are {start_offset} to {end_offset} \
             (log start offset {start_offset}, log end offset {end_offset})"
        );
    }
    let range = ReadRange {
        first_offset,
        end_offset,
        max_records: args.max_records.unwrap_or(u64::MAX),
    };
    let mut out = io::stdout().lock();
    let mut next_offset = first_offset;
    let mut printed = 0u64;
    loop {
        let fetch = log.read(Offset(next_offset), FETCH_MAX_BYTES)?;
        if fetch.records.is_empty() {
            return Ok(());
        }
        let fetched_from = next_offset;
        for batch in BatchIter::new(fetch.records, u64::MAX) {
            let batch = batch
                .with_context(|| format!("corrupt batch in the read at offset {next_offset}"))?;
            printed += print_batch(&mut out, &batch, range, printed, args.format)?;
            out.flush()?;
            next_offset =
                next_offset.max(u64::try_from(batch.last_offset().saturating_add(1)).unwrap_or(0));
            if printed >= range.max_records || next_offset >= range.end_offset {
                return Ok(());
            }
        }
        if next_offset == fetched_from {
            bail!("the log returned no batch past offset {next_offset}");
        }
    }
}

/// Prints the batch's records at or after `range.first_offset`, up to `range.max_records` in all;
/// returns how many it printed.
fn print_batch(
    out: &mut impl Write,
    batch: &Batch,
    range: ReadRange,
    printed: u64,
    format: OutputFormat,
) -> anyhow::Result<u64> {
    if batch.header().attributes.is_control() {
        // Transaction markers and other control records are not data: consumers never see them.
        return Ok(0);
    }
    let records = batch.records().with_context(|| {
        format!(
            "records of the batch at offset {} do not decode",
            batch.base_offset()
        )
    })?;
    let mut count = 0;
    for record in &records {
        let offset = record_offset(batch.header(), record);
        if offset < 0 || (offset as u64) < range.first_offset {
            continue;
        }
        if printed + count >= range.max_records {
            break;
        }
        let line = match format {
            OutputFormat::Text => text_line(batch.header(), record),
            OutputFormat::Json => json_line(batch.header(), record)?,
        };
        writeln!(out, "{line}")?;
        count += 1;
    }
    Ok(count)
}
