//! `create-partitions`: how long creating a topic of many partitions takes, and describing them
//! (issue 47). One engine creates the topic (`--partitions`, 100,000 by default, with
//! `segment.index.bytes` 65536 as `many-partitions`), describes it and closes; a second opens the
//! cleanly closed directory and describes the topic again. Each step is timed on its own.

use std::io::{self, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use seglog::config::LogConfig;
use seglog::engine::{Engine, EngineConfig};
use serde_json::{Value, json};

use super::settings::Settings;
use super::{SMALL_SEGMENT_INDEX_BYTES, TOPIC};

/// Partitions of `create-partitions` unless `--partitions`.
pub const CREATE_PARTITIONS: u32 = 100_000;

/// The timed steps, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `Engine::create_topic`: the directories and first segments, durable.
    Create,
    /// `Engine::describe_topic` right after.
    Describe,
    /// `Engine::close`.
    Close,
    /// `Engine::open` of the cleanly closed directory.
    Reopen,
    /// `Engine::describe_topic` after the reopen.
    DescribeReopened,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Create => "create",
            Step::Describe => "describe",
            Step::Close => "close",
            Step::Reopen => "reopen",
            Step::DescribeReopened => "describe_reopened",
        }
    }
}

/// The workload's figures: seconds per step.
#[derive(Debug, Clone)]
pub struct CreatePartitionsFigures {
    pub partitions: u32,
    pub shards: usize,
    pub steps: Vec<(Step, f64)>,
}

impl CreatePartitionsFigures {
    pub fn print(&self, out: &mut impl Write) -> io::Result<()> {
        writeln!(
            out,
            "create-partitions: {} partitions on {} shards",
            self.partitions, self.shards
        )?;
        writeln!(
            out,
            "{:<18} {:>9} {:>16}",
            "step", "seconds", "partitions/s"
        )?;
        for (step, seconds) in &self.steps {
            let per_s = match step {
                Step::Close | Step::Reopen => "-".to_owned(),
                _ => format!("{:.0}", f64::from(self.partitions) / seconds.max(1e-9)),
            };
            writeln!(out, "{:<18} {seconds:>9.3} {per_s:>16}", step.name())?;
        }
        Ok(())
    }

    pub fn to_json(&self) -> Value {
        let mut steps = serde_json::Map::new();
        for (step, seconds) in &self.steps {
            steps.insert(step.name().into(), json!({ "seconds": seconds }));
        }
        json!({
            "partitions": self.partitions,
            "shards": self.shards,
            "steps": steps,
        })
    }
}

/// Runs `f`, returning its value and the seconds it took.
fn timed<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<(T, f64)> {
    let started = Instant::now();
    let value = f()?;
    Ok((value, started.elapsed().as_secs_f64()))
}

/// Creates, describes, closes, reopens and describes again, in `dir`.
pub fn create_partitions(
    settings: &Settings,
    config: EngineConfig,
    dir: &Path,
) -> anyhow::Result<CreatePartitionsFigures> {
    let partitions = settings.partitions;
    let open = || {
        Engine::open(dir, config.clone())
            .with_context(|| format!("cannot open data directory {}", dir.display()))
    };
    let topic_config = LogConfig::default().with_segment_index_bytes(SMALL_SEGMENT_INDEX_BYTES);
    let engine = open()?;
    let shards = engine.shard_count();
    let mut steps = Vec::new();
    let ((), create_s) = timed(|| {
        engine
            .create_topic(TOPIC, partitions, topic_config)
            .map(drop)
            .with_context(|| format!("cannot create topic {TOPIC} (use a fresh --dir)"))
    })?;
    steps.push((Step::Create, create_s));
    steps.push((Step::Describe, describe(&engine, partitions)?));
    let ((), close_s) = timed(|| engine.close().context("cannot close the data directory"))?;
    steps.push((Step::Close, close_s));
    let (engine, reopen_s) = timed(open)?;
    steps.push((Step::Reopen, reopen_s));
    steps.push((Step::DescribeReopened, describe(&engine, partitions)?));
    engine.close().context("cannot close the data directory")?;
    Ok(CreatePartitionsFigures {
        partitions,
        shards,
        steps,
    })
}

/// Seconds `describe_topic` took; an error unless it described every partition, online and
/// empty.
fn describe(engine: &Engine, partitions: u32) -> anyhow::Result<f64> {
    let (description, seconds) = timed(|| {
        engine
            .describe_topic(TOPIC)
            .with_context(|| format!("cannot describe topic {TOPIC}"))
    })?;
    let described = description.partitions.len();
    if described != partitions as usize {
        bail!("described {described} partitions of {partitions}");
    }
    if let Some(partition) = description
        .partitions
        .iter()
        .find(|partition| partition.offline.is_some() || partition.log_end_offset.0 != 0)
    {
        bail!(
            "partition {} is not new and online: {partition:?}",
            partition.partition
        );
    }
    Ok(seconds)
}
