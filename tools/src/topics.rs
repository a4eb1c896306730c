//! `seglog topics`: topic administration through the engine, with Kafka's vocabulary
//! (`kafka-topics --create | --list | --describe | --alter --partitions | --delete`, and
//! `kafka-configs --alter --add-config | --delete-config` as `alter --config | --delete-config`).
//!
//! `list` and `describe` only read: they open the data directory read-only ([`DataDirView`]),
//! without its lock, so they work while another process holds it and on a read-only file system.
//! `create`, `alter` and `delete` open it through the engine (taking its lock), do one thing and
//! close it. Errors (an unknown topic, one that exists, an invalid name or setting, a
//! partition count that does not grow) are reported with exit code 1.

use std::collections::BTreeMap;
use std::io::{self, Write};

use anyhow::Context;
use seglog::config::{ConfigChange, LogConfig};
use seglog::engine::{Engine, PartitionDescription, TopicDescription, TopicMetadata};
use seglog::types::TopicName;
use serde::Serialize;

use crate::Outcome;
use crate::args::{
    OutputFormat, TopicAlterArgs, TopicCreateArgs, TopicDeleteArgs, TopicDescribeArgs,
    TopicListArgs, TopicsArgs, TopicsCommand,
};
use crate::dir_view::DataDirView;
use crate::engine_open::{open_engine, open_existing, refuse_internal_topic, with_engine};
use crate::topic_config::{apply_settings, overrides, overrides_text, parse_configs};

pub fn run(args: &TopicsArgs) -> anyhow::Result<Outcome> {
    match &args.command {
        TopicsCommand::Create(args) => create(args),
        TopicsCommand::List(args) => list(args),
        TopicsCommand::Describe(args) => describe(args),
        TopicsCommand::Alter(args) => alter(args),
        TopicsCommand::Delete(args) => delete(args),
    }?;
    Ok(Outcome::Clean)
}

/// Checks the name before anything touches the disk.
fn parse_topic(name: &str) -> anyhow::Result<TopicName> {
    TopicName::parse(name).with_context(|| format!("invalid topic name {name:?}"))
}

fn create(args: &TopicCreateArgs) -> anyhow::Result<()> {
    let topic = parse_topic(&args.topic)?;
    refuse_internal_topic(&topic, "create")?;
    let config = parse_configs(&args.configs)?;
    with_engine(open_engine(&args.dir)?, |engine| {
        engine
            .create_topic(topic.as_str(), args.partitions, config)
            .with_context(|| format!("cannot create topic {topic}"))?;
        let mut out = io::stdout().lock();
        writeln!(out, "Created topic {topic}.")?;
        Ok(())
    })
}

fn list(args: &TopicListArgs) -> anyhow::Result<()> {
    let view = DataDirView::open(&args.dir)?;
    let mut out = io::stdout().lock();
    for (topic, metadata) in view.topics() {
        match args.format {
            OutputFormat::Text => writeln!(
                out,
                "{topic}\tPartitionCount: {}\tConfigs: {}",
                metadata.partition_count,
                overrides_text(&metadata.config)
            )?,
            OutputFormat::Json => writeln!(
                out,
                "{}",
                serde_json::to_string(&JsonTopic::of(topic, metadata))?
            )?,
        }
    }
    out.flush()?;
    Ok(())
}

fn describe(args: &TopicDescribeArgs) -> anyhow::Result<()> {
    let topic = args.topic.as_deref().map(parse_topic).transpose()?;
    let view = DataDirView::open(&args.dir)?;
    let topics = match topic {
        Some(topic) => vec![topic],
        None => view.topics().keys().cloned().collect(),
    };
    let mut out = io::stdout().lock();
    for topic in topics {
        let description = view
            .describe_topic(&topic)
            .with_context(|| format!("cannot describe topic {topic}"))?;
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

/// Kafka's `--describe` layout: a topic line, then one tab-indented line per partition, with the
/// storage figures in place of leaders and replicas.
fn write_description(out: &mut impl Write, description: &TopicDescription) -> io::Result<()> {
    let topic = &description.topic;
    writeln!(
        out,
        "Topic: {topic}\tPartitionCount: {}\tConfigs: {}",
        description.partitions.len(),
        overrides_text(&description.config)
    )?;
    for partition in &description.partitions {
        writeln!(
            out,
            "\tTopic: {topic}\tPartition: {}\tLogStartOffset: {}\tLogEndOffset: {}\t\
             DurableOffset: {}\tSizeBytes: {}\tSegmentCount: {}",
            partition.partition,
            partition.log_start_offset.0,
            partition.log_end_offset.0,
            partition.durable_offset.0,
            partition.size_bytes,
            partition.segment_count
        )?;
    }
    Ok(())
}

/// Grows the topic, then changes its settings (each step reported as it is done).
fn alter(args: &TopicAlterArgs) -> anyhow::Result<()> {
    let topic = parse_topic(&args.topic)?;
    let action = match args.partitions {
        Some(_) => "grow",
        None => "reconfigure",
    };
    refuse_internal_topic(&topic, action)?;
    let settings = config_changes(args)?;
    with_engine(open_existing(&args.dir)?, |engine| {
        if let Some(partitions) = args.partitions {
            grow(engine, &topic, partitions)?;
        }
        if !settings.is_empty() {
            reconfigure(engine, &topic, &settings)?;
        }
        Ok(())
    })
}

/// `--config KEY=VALUE` and `--delete-config KEY`, as (key, new value or the default).
fn config_changes(args: &TopicAlterArgs) -> anyhow::Result<Vec<(String, Option<String>)>> {
    let mut changes = Vec::new();
    apply_settings(&args.configs, |key, value| {
        changes.push((key.to_owned(), Some(value.to_owned())));
        Ok::<(), std::convert::Infallible>(())
    })?;
    changes.extend(
        args.delete_configs
            .iter()
            .map(|key| (key.trim().to_owned(), None)),
    );
    Ok(changes)
}

fn grow(engine: &Engine, topic: &TopicName, partitions: u32) -> anyhow::Result<()> {
    let before = partition_count(engine, topic);
    engine
        .add_partitions(topic.as_str(), partitions)
        .with_context(|| format!("cannot grow topic {topic} to {partitions} partitions"))?;
    let mut out = io::stdout().lock();
    writeln!(
        out,
        "Topic {topic} now has {partitions} partitions (it had {}).",
        before.unwrap_or(0)
    )?;
    Ok(())
}

/// Changes the topic's settings on its live logs (`Engine::update_topic_config`); a deleted
/// setting goes back to Kafka's default, as `topics create` starts from it.
fn reconfigure(
    engine: &Engine,
    topic: &TopicName,
    settings: &[(String, Option<String>)],
) -> anyhow::Result<()> {
    let changes: Vec<ConfigChange<'_>> = settings
        .iter()
        .map(|(key, value)| match value {
            Some(value) => ConfigChange::Set { key, value },
            None => ConfigChange::Reset { key },
        })
        .collect();
    let defaults = LogConfig::default();
    let config = engine
        .update_topic_config(topic.as_str(), |current| {
            current.altered(&changes, &defaults)
        })
        .with_context(|| format!("cannot reconfigure topic {topic}"))?;
    let mut out = io::stdout().lock();
    writeln!(
        out,
        "Completed updating config for topic {topic}. Configs: {}",
        overrides_text(&config)
    )?;
    Ok(())
}

fn delete(args: &TopicDeleteArgs) -> anyhow::Result<()> {
    let topic = parse_topic(&args.topic)?;
    refuse_internal_topic(&topic, "delete")?;
    with_engine(open_existing(&args.dir)?, |engine| {
        engine
            .delete_topic(topic.as_str())
            .with_context(|| format!("cannot delete topic {topic}"))?;
        let mut out = io::stdout().lock();
        writeln!(out, "Deleted topic {topic}.")?;
        Ok(())
    })
}

fn partition_count(engine: &Engine, topic: &TopicName) -> Option<u32> {
    engine
        .list_topics()
        .into_iter()
        .find(|(name, _)| name == topic)
        .map(|(_, metadata)| metadata.partition_count)
}

/// One `topics list --format json` line; field order is the output order.
#[derive(Debug, Serialize)]
struct JsonTopic<'a> {
    topic: &'a str,
    partition_count: u32,
    /// Settings that differ from Kafka's defaults.
    configs: BTreeMap<&'static str, String>,
}

impl<'a> JsonTopic<'a> {
    fn of(topic: &'a TopicName, metadata: &TopicMetadata) -> Self {
        JsonTopic {
            topic: topic.as_str(),
            partition_count: metadata.partition_count,
            configs: overrides(&metadata.config).into_iter().collect(),
        }
    }
}

/// One `topics describe --format json` line.
#[derive(Debug, Serialize)]
struct JsonDescription<'a> {
    topic: &'a str,
    partition_count: usize,
    /// Settings that differ from Kafka's defaults.
    configs: BTreeMap<&'static str, String>,
    partitions: Vec<JsonPartition>,
}

#[derive(Debug, Serialize)]
struct JsonPartition {
    partition: u32,
    log_start_offset: u64,
    log_end_offset: u64,
    durable_offset: u64,
    size_bytes: u64,
    segment_count: usize,
}

impl<'a> JsonDescription<'a> {
    fn of(description: &'a TopicDescription) -> Self {
        JsonDescription {
            topic: description.topic.as_str(),
            partition_count: description.partitions.len(),
            configs: overrides(&description.config).into_iter().collect(),
            partitions: description
                .partitions
                .iter()
                .map(JsonPartition::of)
                .collect(),
        }
    }
}

impl JsonPartition {
    fn of(partition: &PartitionDescription) -> Self {
        JsonPartition {
            partition: partition.partition,
            log_start_offset: partition.log_start_offset.0,
            log_end_offset: partition.log_end_offset.0,
            durable_offset: partition.durable_offset.0,
            size_bytes: partition.size_bytes,
            segment_count: partition.segment_count,
        }
    }
}
