//! `seglog recover`: truncates a partition that the engine does not open because of damage (a
//! batch that fails its CRC among synced data, impossible offsets, overlapping segments) to its
//! last valid batch, through the library (`seglog::engine::repair`).
//!
//! It takes the data directory's lock (so no engine has it open meanwhile), finds the first
//! invalid batch, prints what truncating there discards — the offsets and bytes past it, file by
//! file — and asks for confirmation on a terminal; when stdin is not a terminal it truncates only
//! with `--yes`. A partition whose batches are all valid is left alone.

use std::io::{self, BufRead, IsTerminal, Write};
use std::sync::Arc;

use anyhow::{Context, bail};
use seglog::engine::repair::{Damage, Discarded, PartitionRepair};
use seglog::io::pio::PositionedIo;
use seglog::types::{TopicName, TopicPartition};

use crate::Outcome;
use crate::args::RecoverArgs;
use crate::dir_view::DataDirView;

pub fn run(args: &RecoverArgs) -> anyhow::Result<Outcome> {
    let topic = TopicName::parse(&args.topic)
        .with_context(|| format!("invalid topic name {:?}", args.topic))?;
    let view = DataDirView::open(&args.dir)?;
    let metadata = view.topic(&topic)?;
    if args.partition >= metadata.partition_count {
        bail!(
            "topic {topic} has {} partitions: there is no partition {}",
            metadata.partition_count,
            args.partition
        );
    }
    let tp = TopicPartition {
        topic,
        partition: args.partition,
    };
    let repair = PartitionRepair::open(Arc::new(PositionedIo), &args.dir, &tp, &metadata.config)
        .with_context(|| format!("cannot read {tp} in {}", args.dir.display()))?;
    let mut out = io::stdout().lock();
    let Some(damage) = repair.damage() else {
        writeln!(out, "{tp}: every batch is valid; nothing to truncate.")?;
        return Ok(Outcome::Clean);
    };
    write_plan(&mut out, &tp, damage)?;
    out.flush()?;
    confirm(args.yes, &tp)?;
    let truncated = repair
        .truncate()
        .with_context(|| format!("cannot truncate {tp}"))?;
    if let Some(damage) = truncated {
        writeln!(
            out,
            "Truncated {tp}: it ends at offset {} now; {} bytes removed from {} files.",
            damage.valid_end_offset,
            damage.discarded_bytes(),
            damage.discarded.len()
        )?;
    }
    Ok(Outcome::Clean)
}

/// Where the damage is and what truncating there discards, file by file.
fn write_plan(out: &mut impl Write, tp: &TopicPartition, damage: &Damage) -> io::Result<()> {
    writeln!(
        out,
        "{tp}: the first invalid batch is at position {} of {}: {}",
        damage.position,
        damage.file.display(),
        damage.reason
    )?;
    let end = damage.valid_end_offset;
    let kept = match end.0.checked_sub(1) {
        Some(last) if end > damage.first_offset => {
            format!("keeps offsets {} to {last}", damage.first_offset)
        }
        _ => "keeps no record".to_owned(),
    };
    let discarded = match damage.last_readable_offset() {
        Some(last) if last >= end => format!("offsets {end} to {last}"),
        _ => format!("everything from offset {end} on"),
    };
    writeln!(
        out,
        "Truncating {tp} to its last valid batch {kept} and discards {discarded}: {} bytes in {} \
         files:",
        damage.discarded_bytes(),
        damage.discarded.len()
    )?;
    for file in &damage.discarded {
        writeln!(out, "  {}", discarded_line(file))?;
    }
    Ok(())
}

/// `<file>: <what goes> (<the offsets of the batches there that still read>)`.
fn discarded_line(discarded: &Discarded) -> String {
    let what = match discarded.whole_file {
        true => format!("the whole segment, {} bytes", discarded.bytes),
        false => format!(
            "{} bytes from position {}",
            discarded.bytes, discarded.position
        ),
    };
    let readable = match discarded.readable_offsets {
        Some((first, last)) => format!("batches that still read: offsets {first} to {last}"),
        None => "no batch there reads".to_owned(),
    };
    format!("{}: {what} ({readable})", discarded.file.display())
}

/// Goes on with `--yes`; otherwise asks on a terminal, and refuses when stdin is not one.
fn confirm(yes: bool, tp: &TopicPartition) -> anyhow::Result<()> {
    if yes {
        return Ok(());
    }
    let stdin = io::stdin();
    if !stdin.is_terminal() {
        bail!(
            "stdin is not a terminal: run again with --yes to truncate {tp} (nothing was changed)"
        );
    }
    let mut stderr = io::stderr();
    write!(stderr, "Truncate {tp} now? Type yes to confirm: ")?;
    stderr.flush()?;
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .context("cannot read the answer")?;
    if answer.trim() != "yes" {
        bail!("{tp} was not truncated (the answer was not yes; nothing was changed)");
    }
    Ok(())
}
