//! `seglog consume`: prints one partition's records from an offset up to the log end offset seen
//! when reading started.
//!
//! The data directory is opened through the engine, so a directory that was not closed cleanly, or
//! that Kafka wrote (no checkpoints, no indexes, no topic registry), is recovered first, exactly as
//! an application embedding seglog would see it. Records are read with the engine's fetch, one
//! fetch of at most [`FETCH_MAX_BYTES`] at a time, and printed as each fetch arrives.

use std::io::{self, Write};

use anyhow::{Context, bail};
use seglog::engine::{Engine, FetchOptions};
use seglog::error::ReadError;
use seglog::format::Batch;
use seglog::format::batch::BatchIter;
use seglog::log::FetchData;
use seglog::types::{Offset, TopicName};

use crate::Outcome;
use crate::args::{ConsumeArgs, OutputFormat};
use crate::engine_open::{open_existing, with_engine};
use crate::record_view::{json_line, record_offset, text_line};

/// Bytes asked of the log per fetch; a fetch always returns at least one whole batch.
const FETCH_MAX_BYTES: u64 = 1024 * 1024;

pub fn run(args: &ConsumeArgs) -> anyhow::Result<Outcome> {
    let topic = TopicName::parse(&args.topic)
        .with_context(|| format!("invalid topic name {:?}", args.topic))?;
    with_engine(open_existing(&args.dir)?, |engine| {
        consume(engine, &topic, args)
    })?;
    Ok(Outcome::Clean)
}

fn consume(engine: &Engine, topic: &TopicName, args: &ConsumeArgs) -> anyhow::Result<()> {
    let partition_count = engine
        .list_topics()
        .into_iter()
        .find(|(name, _)| name == topic)
        .map(|(_, metadata)| metadata.partition_count)
        .with_context(|| format!("topic {topic} does not exist in {}", args.dir.display()))?;
    if args.partition >= partition_count {
        bail!(
            "topic {topic} has {partition_count} partitions: there is no partition {}",
            args.partition
        );
    }
    let reader = PartitionReader {
        engine,
        topic,
        partition: args.partition,
    };
    print_records(&reader, args)
        .with_context(|| format!("cannot consume {topic}-{}", args.partition))
}

/// Where printing starts and stops.
#[derive(Debug, Clone, Copy)]
struct ReadRange {
    /// Records below this offset are skipped (a fetch returns whole batches).
    first_offset: u64,
    /// The log end offset when reading started.
    end_offset: u64,
    max_records: u64,
}

/// Fetches from one partition, answering at once (no long poll: reading stops at the log end).
struct PartitionReader<'a> {
    engine: &'a Engine,
    topic: &'a TopicName,
    partition: u32,
}

impl PartitionReader<'_> {
    fn fetch(&self, offset: u64) -> Result<FetchData, ReadError> {
        let options = FetchOptions {
            max_bytes: FETCH_MAX_BYTES,
            ..FetchOptions::default()
        };
        self.engine
            .fetch(self.topic, self.partition, Offset(offset), options)
            .wait()
    }

    /// The first fetch: at `--offset`, or at the log start offset (learnt from the bounds an
    /// out-of-range fetch at offset 0 reports, when records were deleted from the start).
    fn first_fetch(&self, requested: Option<u64>) -> anyhow::Result<(u64, FetchData)> {
        let offset = requested.unwrap_or(0);
        match (self.fetch(offset), requested) {
            (Ok(data), _) => Ok((offset, data)),
            (
                Err(ReadError::OffsetOutOfRange {
                    log_start_offset: Offset(start),
                    log_end_offset: Offset(end),
                    ..
                }),
                Some(_),
            ) => bail!(
                "offset {offset} is out of range: valid offsets are {start} to {end} \
                 (log start offset {start}, log end offset {end})"
            ),
            (
                Err(ReadError::OffsetOutOfRange {
                    log_start_offset: Offset(start),
                    ..
                }),
                None,
            ) => Ok((start, self.fetch(start)?)),
            (Err(error), _) => Err(error.into()),
        }
    }
}

fn print_records(reader: &PartitionReader<'_>, args: &ConsumeArgs) -> anyhow::Result<()> {
    let (first_offset, mut fetch) = reader.first_fetch(args.offset)?;
    let range = ReadRange {
        first_offset,
        end_offset: fetch.log_end_offset.0,
        max_records: args.max_records.unwrap_or(u64::MAX),
    };
    let mut out = io::stdout().lock();
    let mut next_offset = first_offset;
    let mut printed = 0u64;
    loop {
        if fetch.records.is_empty()
            || next_offset >= range.end_offset
            || printed >= range.max_records
        {
            return Ok(());
        }
        let fetched_from = next_offset;
        for batch in BatchIter::new(fetch.records, u64::MAX) {
            let batch = batch
                .with_context(|| format!("corrupt batch in the fetch at offset {fetched_from}"))?;
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
        fetch = reader.fetch(next_offset)?;
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
