//! `seglog groups`: consumer groups as `kafka-consumer-groups --list | --describe | --delete`
//! handles them.
//!
//! Groups live in the process that runs them (`seglog::group::GroupCoordinator`), so a data
//! directory opened here has no live members: the commands show what is durable, the offsets each
//! group committed to `__consumer_offsets`, with each partition's log end offset and lag. Every
//! group is therefore `Empty`. The directory is read read-only ([`DataDirView`], without its
//! lock): nothing is created or changed, and without an offsets topic there are no groups.
//! `delete` opens the engine (its lock) and appends the group's tombstones through the group
//! coordinator.

use std::io::{self, Write};

use anyhow::Context;
use seglog::group::{GroupCoordinator, GroupDescription, PartitionLag};
use serde::Serialize;

use crate::Outcome;
use crate::args::{
    GroupDeleteArgs, GroupDescribeArgs, GroupListArgs, GroupsArgs, GroupsCommand, OutputFormat,
};
use crate::committed_offsets::{CommittedOffsets, describe_committed};
use crate::dir_view::DataDirView;
use crate::engine_open::{open_existing, with_engine};

pub fn run(args: &GroupsArgs) -> anyhow::Result<Outcome> {
    match &args.command {
        GroupsCommand::List(args) => list(args),
        GroupsCommand::Describe(args) => describe(args),
        GroupsCommand::Delete(args) => delete(args),
        GroupsCommand::ResetOffsets(args) => crate::reset_offsets::reset(args),
    }?;
    Ok(Outcome::Clean)
}

fn list(args: &GroupListArgs) -> anyhow::Result<()> {
    let view = DataDirView::open(&args.dir)?;
    let offsets = CommittedOffsets::load(&view)?;
    let mut out = io::stdout().lock();
    for group in offsets.groups() {
        match args.format {
            OutputFormat::Text => writeln!(out, "{group}")?,
            OutputFormat::Json => {
                let listing = JsonListing {
                    group: &group,
                    state: "Empty",
                    member_count: 0,
                };
                writeln!(out, "{}", serde_json::to_string(&listing)?)?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// Kafka's words: `Deletion of requested consumer groups ('G') was successful.`
fn delete(args: &GroupDeleteArgs) -> anyhow::Result<()> {
    let group = args.group.as_str();
    with_engine(open_existing(&args.dir)?, |engine| {
        let coordinator =
            GroupCoordinator::open(engine).context("cannot open the group coordinator")?;
        coordinator
            .delete_group(group)
            .with_context(|| format!("cannot delete consumer group {group}"))
    })?;
    println!("Deletion of requested consumer groups ('{group}') was successful.");
    Ok(())
}

fn describe(args: &GroupDescribeArgs) -> anyhow::Result<()> {
    let view = DataDirView::open(&args.dir)?;
    let offsets = CommittedOffsets::load(&view)?;
    let groups = match &args.group {
        Some(group) => vec![group.clone()],
        None => offsets.groups(),
    };
    let mut out = io::stdout().lock();
    for group in groups {
        let description = describe_committed(&view, &offsets, &group)
            .with_context(|| format!("cannot describe consumer group {group}"))?;
        match args.format {
            OutputFormat::Text => write_description(&mut out, &description)?,
            OutputFormat::Json => writeln!(
                out,
                "{}",
                serde_json::to_string(&JsonDescription::of(&description))?
            )?,
        }
    }
    out.flush()?;
    Ok(())
}

/// One row of the table, every cell as printed (`-` for an unknown value).
fn row(group: &str, partition: &PartitionLag) -> [String; 9] {
    let known = |value: Option<u64>| value.map_or_else(|| "-".to_owned(), |v| v.to_string());
    [
        group.to_owned(),
        partition.partition.topic.to_string(),
        partition.partition.partition.to_string(),
        known(partition.committed.as_ref().map(|c| c.offset.0)),
        known(partition.log_end_offset.map(|offset| offset.0)),
        known(partition.lag),
        partition
            .owner
            .as_ref()
            .map_or_else(|| "-".to_owned(), ToString::to_string),
        "-".to_owned(),
        "-".to_owned(),
    ]
}

const HEADER: [&str; 9] = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
];

/// Kafka's layout: a blank line, the member notice, a blank line, then the table with columns
/// as wide as their widest cell.
fn write_description(out: &mut impl Write, description: &GroupDescription) -> io::Result<()> {
    writeln!(out)?;
    if description.members.is_empty() {
        writeln!(
            out,
            "Consumer group '{}' has no active members.",
            description.group
        )?;
        writeln!(out)?;
    }
    let rows: Vec<Vec<String>> = description
        .partitions
        .iter()
        .map(|partition| Vec::from(row(&description.group, partition)))
        .collect();
    write_table(out, &HEADER, &rows)
}

/// Kafka's tables: `header` and `rows`, each column as wide as its widest cell.
pub(crate) fn write_table(
    out: &mut impl Write,
    header: &[&str],
    rows: &[Vec<String>],
) -> io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.len()).collect();
    for cells in rows {
        for (width, cell) in widths.iter_mut().zip(cells) {
            *width = (*width).max(cell.len());
        }
    }
    let header: Vec<String> = header.iter().map(|cell| (*cell).to_owned()).collect();
    for cells in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (index, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if index + 1 == cells.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$} "));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct JsonListing<'a> {
    group: &'a str,
    state: &'a str,
    member_count: usize,
}

/// One partition of a JSON group description.
#[derive(Debug, Serialize)]
struct JsonPartition<'a> {
    topic: &'a str,
    partition: u32,
    current_offset: Option<u64>,
    metadata: Option<&'a str>,
    log_end_offset: Option<u64>,
    lag: Option<u64>,
    consumer_id: Option<&'a str>,
}

/// A JSON group description; field order is the documented output order.
#[derive(Debug, Serialize)]
struct JsonDescription<'a> {
    group: &'a str,
    state: &'a str,
    members: usize,
    partitions: Vec<JsonPartition<'a>>,
}

impl<'a> JsonDescription<'a> {
    fn of(description: &'a GroupDescription) -> JsonDescription<'a> {
        JsonDescription {
            group: &description.group,
            state: description.state.name(),
            members: description.members.len(),
            partitions: description
                .partitions
                .iter()
                .map(|partition| JsonPartition {
                    topic: partition.partition.topic.as_str(),
                    partition: partition.partition.partition,
                    current_offset: partition.committed.as_ref().map(|c| c.offset.0),
                    metadata: partition.committed.as_ref().map(|c| c.metadata.as_str()),
                    log_end_offset: partition.log_end_offset.map(|offset| offset.0),
                    lag: partition.lag,
                    consumer_id: partition.owner.as_ref().map(|owner| owner.as_str()),
                })
                .collect(),
        }
    }
}
