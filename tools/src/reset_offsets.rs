//! `seglog groups reset-offsets`: moves a group's committed offsets on one topic, as
//! `kafka-consumer-groups --reset-offsets` does. The new offset of each partition comes from the
//! chosen target and is clamped into `[log start, log end]`, as Kafka clamps it; `--dry-run`
//! prints the plan, `--execute` commits it through the group coordinator (durably) and prints
//! it. Groups live in the process that runs them, so the group has no live member here.

use std::io::{self, Write};

use anyhow::{Context, bail};
use seglog::engine::Engine;
use seglog::group::{GroupCoordinator, OffsetAndMetadata};
use seglog::types::{Offset, TimestampMs, TopicName, TopicPartition};

use crate::args::GroupResetArgs;
use crate::engine_open::{open_existing, refuse_internal_topic, with_engine};
use crate::groups::write_table;

/// Where each partition's offset goes.
#[derive(Debug, Clone, Copy)]
enum Target {
    Earliest,
    Latest,
    Offset(u64),
    Datetime(TimestampMs),
    ShiftBy(i64),
}

impl Target {
    fn of(args: &GroupResetArgs) -> anyhow::Result<Target> {
        let target = match (args.to_offset, args.to_datetime, args.shift_by) {
            _ if args.to_earliest => Target::Earliest,
            _ if args.to_latest => Target::Latest,
            (Some(offset), _, _) => Target::Offset(offset),
            (_, Some(datetime), _) => Target::Datetime(TimestampMs(datetime)),
            (_, _, Some(shift)) => Target::ShiftBy(shift),
            // clap requires one of them.
            _ => bail!("one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by"),
        };
        Ok(target)
    }
}

pub fn reset(args: &GroupResetArgs) -> anyhow::Result<()> {
    let topic = TopicName::parse(&args.topic)?;
    refuse_internal_topic(&topic, "reset offsets on")?;
    let target = Target::of(args)?;
    let group = args.group.as_str();
    let plan = with_engine(open_existing(&args.dir)?, |engine| {
        let coordinator =
            GroupCoordinator::open(engine).context("cannot open the group coordinator")?;
        let plan = plan(engine, &coordinator, group, &topic, target)?;
        if args.execute {
            let offsets = plan
                .iter()
                .map(|(tp, offset)| (tp.clone(), OffsetAndMetadata::new(*offset)))
                .collect();
            coordinator
                .commit_offsets(group, offsets)
                .wait()
                .with_context(|| format!("cannot commit the new offsets of group {group}"))?;
        }
        Ok(plan)
    })?;
    let rows: Vec<Vec<String>> = plan
        .iter()
        .map(|(tp, offset)| {
            let cells = [group, tp.topic.as_str()].map(str::to_owned);
            let numbers = [tp.partition.to_string(), offset.0.to_string()];
            cells.into_iter().chain(numbers).collect()
        })
        .collect();
    let mut out = io::stdout().lock();
    writeln!(out)?;
    write_table(
        &mut out,
        &["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        &rows,
    )?;
    out.flush()?;
    Ok(())
}

/// Each partition of `topic` and its new offset.
fn plan(
    engine: &Engine,
    coordinator: &GroupCoordinator,
    group: &str,
    topic: &TopicName,
    target: Target,
) -> anyhow::Result<Vec<(TopicPartition, Offset)>> {
    let description = engine
        .describe_topic(topic.as_str())
        .with_context(|| format!("cannot describe topic {topic}"))?;
    let mut plan = Vec::with_capacity(description.partitions.len());
    for partition in &description.partitions {
        let tp = TopicPartition {
            topic: topic.clone(),
            partition: partition.partition,
        };
        let (start, end) = (partition.log_start_offset.0, partition.log_end_offset.0);
        let wanted = match target {
            Target::Earliest => start,
            Target::Latest => end,
            Target::Offset(offset) => offset,
            Target::Datetime(timestamp) => engine
                .fetch_by_timestamp(topic, partition.partition, timestamp)
                .wait()
                .with_context(|| format!("cannot look up {tp} by timestamp"))?
                .map_or(end, |found| found.offset.0),
            Target::ShiftBy(shift) => {
                let committed = coordinator.committed(group, &tp).with_context(|| {
                    format!("group {group} has no committed offset on {tp} to shift")
                })?;
                committed.offset.0.saturating_add_signed(shift)
            }
        };
        plan.push((tp, Offset(wanted.clamp(start, end))));
    }
    Ok(plan)
}

/// Kafka's `--to-datetime`: `YYYY-MM-DDTHH:mm:SS[.sss]`, with a zone (`Z`, `+hh:mm`) or without
/// (UTC), as milliseconds since the epoch.
pub fn parse_datetime(text: &str) -> Result<i64, String> {
    if let Ok(zoned) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(zoned.timestamp_millis());
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|format| chrono::NaiveDateTime::parse_from_str(text, format).ok())
        .map(|naive| naive.and_utc().timestamp_millis())
        .ok_or_else(|| format!("{text:?} is not YYYY-MM-DDTHH:mm:SS[.sss][zone]"))
}

#[cfg(test)]
mod tests {
    use super::parse_datetime;

    #[test]
    fn datetimes_parse_with_and_without_a_zone() {
        assert_eq!(parse_datetime("1970-01-01T00:00:01"), Ok(1_000));
        assert_eq!(parse_datetime("1970-01-01T00:00:01.250"), Ok(1_250));
        assert_eq!(parse_datetime("1970-01-01T01:00:01.250+01:00"), Ok(1_250));
        assert_eq!(parse_datetime("1970-01-01T00:00:02Z"), Ok(2_000));
        assert!(parse_datetime("yesterday").is_err());
        assert!(parse_datetime("1970-13-01T00:00:00").is_err());
    }
}
