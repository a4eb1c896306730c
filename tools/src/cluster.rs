//! The cluster commands: `seglog node` (a node of `seglog-raft` in the foreground), `cluster
//! status`, and the `--cluster` forms of `produce` and `consume`.
//!
//! `produce --cluster` reads stdin on a thread and sends what has arrived as one batch per
//! partition (up to [`BATCH_BYTES_MAX`]), each through its partition's leader, one at a time;
//! a record is acknowledged once its batch is committed. The batches carry a producer id drawn at
//! start and a sequence per partition, so a batch sent again after a lost answer is not
//! written twice. `consume --cluster` fetches committed batches from any live node and prints
//! them as `consume --dir` does.

use std::collections::BTreeMap;
use std::io::{self, BufWriter, Write};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use seglog::engine::EngineConfig;
use seglog::format::batch::BatchIter;
use seglog::format::{BatchBuilder, NewRecord};
use seglog::producer::partition_for_key;
use seglog::types::TopicName;
use seglog_raft::client::ClusterClient;
use seglog_raft::node::{Node, NodeConfig};
use seglog_raft::wire::{PartitionStatus, Retention};
use serde::Serialize;
use tokio::signal::unix::{SignalKind, signal};

use crate::Outcome;
use crate::args::{ClusterCommand, ConsumeArgs, NodeArgs, OutputFormat, ProduceArgs};
use crate::console_format::RecordPrinter;
use crate::produce::{Ack, spawn_line_reader, split_line, write_ack};

/// A batch is closed before it grows past this many bytes of records.
const BATCH_BYTES_MAX: usize = 64 * 1024;
/// Bytes one fetch asks a node for.
const FETCH_BYTES: u64 = 1024 * 1024;
/// How long `consume` and `cluster status` wait for an answer.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a membership change may take per group (a new voter first catches up).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn addresses(cluster: &str) -> Vec<String> {
    cluster.split(',').map(str::to_string).collect()
}

/// `seglog node`: runs until SIGTERM or SIGINT, then stops its groups and closes the engine.
pub fn run_node(args: &NodeArgs) -> anyhow::Result<Outcome> {
    let config = NodeConfig {
        id: args.id,
        dir: args.dir.clone(),
        peers: args.peers.clone(),
        join: args.join,
        engine: EngineConfig::default(),
    };
    runtime()?.block_on(async {
        let node = Node::start(config).await?;
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        // The handlers are in place before the node says it listens: a SIGTERM right after
        // the line stops it cleanly.
        let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        println!("node {} listening on {}", args.id, args.listen);
        io::stdout().flush()?;
        let shutdown = async {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
        };
        node.serve(listener, shutdown).await?;
        anyhow::Ok(())
    })?;
    Ok(Outcome::Clean)
}

/// `seglog cluster ...`.
pub fn run(command: &ClusterCommand) -> anyhow::Result<Outcome> {
    match command {
        ClusterCommand::Status(args) => {
            let statuses = runtime()?.block_on(async {
                let mut client = ClusterClient::new(addresses(&args.cluster), READ_TIMEOUT);
                client.status().await
            });
            if statuses.is_empty() {
                bail!("no node of {} answered", args.cluster);
            }
            print_status(&merge_statuses(statuses), args.format)?;
            Ok(Outcome::Clean)
        }
        ClusterCommand::AddNode(args) => {
            runtime()?.block_on(async {
                let mut client = ClusterClient::new(addresses(&args.cluster), CHANGE_TIMEOUT);
                client.add_node(args.id, &args.address).await
            })?;
            println!("node {} added", args.id);
            Ok(Outcome::Clean)
        }
        ClusterCommand::RemoveNode(args) => {
            runtime()?.block_on(async {
                let mut client = ClusterClient::new(addresses(&args.cluster), CHANGE_TIMEOUT);
                client.remove_node(args.id).await
            })?;
            println!("node {} removed", args.id);
            Ok(Outcome::Clean)
        }
    }
}

/// One partition's line of `cluster status`.
#[derive(Debug, Serialize)]
struct PartitionLine {
    topic: String,
    partition: u32,
    leader: Option<u64>,
    term: u64,
    commit_index: Option<u64>,
    end_offsets: BTreeMap<String, u64>,
}

/// Each partition as the nodes report it: the leader a node claims to be (else the one most
/// report), the highest term and commit index, every node's end offset.
fn merge_statuses(statuses: Vec<PartitionStatus>) -> Vec<PartitionLine> {
    let mut by_partition: BTreeMap<(String, u32), Vec<PartitionStatus>> = BTreeMap::new();
    for status in statuses {
        let key = (status.topic.clone(), status.partition);
        by_partition.entry(key).or_default().push(status);
    }
    by_partition
        .into_iter()
        .map(|((topic, partition), reports)| {
            let term = reports.iter().map(|r| r.term).max().unwrap_or_default();
            let claimed = reports
                .iter()
                .find(|r| r.leader == Some(r.node) && r.term == term)
                .map(|r| r.node);
            let leader = claimed.or_else(|| reports.iter().find(|r| r.term == term)?.leader);
            PartitionLine {
                topic,
                partition,
                leader,
                term,
                commit_index: reports.iter().filter_map(|r| r.commit_index).max(),
                end_offsets: reports
                    .iter()
                    .map(|r| (r.node.to_string(), r.end_offset))
                    .collect(),
            }
        })
        .collect()
}

fn print_status(lines: &[PartitionLine], format: OutputFormat) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    for line in lines {
        match format {
            OutputFormat::Json => writeln!(out, "{}", serde_json::to_string(line)?)?,
            OutputFormat::Text => {
                let optional = |value: Option<u64>| value.map_or("none".into(), |v| v.to_string());
                let ends: Vec<String> = line
                    .end_offsets
                    .iter()
                    .map(|(node, offset)| format!("{node}:{offset}"))
                    .collect();
                writeln!(
                    out,
                    "topic={} partition={} leader={} term={} commit_index={} end_offsets={}",
                    line.topic,
                    line.partition,
                    optional(line.leader),
                    line.term,
                    optional(line.commit_index),
                    ends.join(",")
                )?;
            }
        }
    }
    Ok(())
}

/// The topic's partition count, asked until the node that answers knows the topic: the
/// metadata leader answered its creation once it applied it, and the other nodes apply it
/// moments later.
async fn partition_count_once_known(
    client: &mut ClusterClient,
    topic: &TopicName,
    timeout: Duration,
) -> anyhow::Result<u32> {
    const POLL_INTERVAL: Duration = Duration::from_millis(20);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(count) = client.topics().await?.get(topic.as_str()) {
            return Ok(*count);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("topic {topic} is not in the cluster");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// `seglog produce --cluster`.
pub fn produce(cluster: &str, topic: &TopicName, args: &ProduceArgs) -> anyhow::Result<Outcome> {
    let timeout = Duration::from_millis(args.request_timeout_ms);
    let retention = retention_of(&args.configs)?;
    let lines = spawn_line_reader()?;
    runtime()?.block_on(async {
        let mut client = ClusterClient::new(addresses(cluster), timeout);
        client
            .create_topic(topic.as_str(), args.partitions.unwrap_or(1), retention)
            .await
            .with_context(|| format!("cannot create topic {topic}"))?;
        let partition_count = partition_count_once_known(&mut client, topic, timeout).await?;
        let mut producer = ClusterProducer {
            client,
            topic: topic.to_string(),
            partition_count,
            producer_id: (fastrand::u64(..) >> 1) as i64,
            sequences: vec![0; partition_count as usize],
            next_partition: 0,
        };
        let mut out = BufWriter::new(io::stdout());
        let separator = args.key_separator.as_deref().map(str::as_bytes);
        while let Some(lines) = next_lines(&lines)? {
            producer
                .send(&lines, separator, args.format, &mut out)
                .await?;
            out.flush()?;
        }
        anyhow::Ok(())
    })?;
    Ok(Outcome::Clean)
}

/// A replicated topic takes `retention.ms` and `retention.bytes` (carried out through Raft);
/// other settings are refused.
fn retention_of(configs: &[String]) -> anyhow::Result<Retention> {
    let mut retention = Retention::default();
    for config in configs {
        let (key, value) = config
            .split_once('=')
            .with_context(|| format!("{config:?} is not KEY=VALUE"))?;
        let value: i64 = value
            .parse()
            .with_context(|| format!("{key}: {value:?} is not a number"))?;
        match key {
            "retention.ms" => retention.ms = value,
            "retention.bytes" => retention.bytes = value,
            other => bail!(
                "{other} cannot be set on a replicated topic (only retention.ms, retention.bytes)"
            ),
        }
    }
    Ok(retention)
}

/// The lines that arrived (waiting for one if none did), up to a batch's worth; `None` at the
/// end of the input.
fn next_lines(lines: &Receiver<io::Result<Vec<u8>>>) -> anyhow::Result<Option<Vec<Vec<u8>>>> {
    let Ok(first) = lines.recv() else {
        return Ok(None);
    };
    let mut taken = vec![first.context("cannot read stdin")?];
    let mut bytes = taken[0].len();
    while bytes < BATCH_BYTES_MAX {
        match lines.try_recv() {
            Ok(line) => {
                let line = line.context("cannot read stdin")?;
                bytes += line.len();
                taken.push(line);
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
        }
    }
    Ok(Some(taken))
}

struct ClusterProducer {
    client: ClusterClient,
    topic: String,
    partition_count: u32,
    producer_id: i64,
    sequences: Vec<i32>,
    next_partition: u32,
}

impl ClusterProducer {
    /// Sends `lines` as one batch per partition, each committed before the next is sent, and
    /// prints their acknowledgements in input order.
    async fn send(
        &mut self,
        lines: &[Vec<u8>],
        separator: Option<&[u8]>,
        format: OutputFormat,
        out: &mut impl Write,
    ) -> anyhow::Result<()> {
        let mut by_partition: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        let routed: Vec<(Option<&[u8]>, &[u8])> = lines
            .iter()
            .map(|line| split_line(line, separator))
            .collect();
        for (index, (key, _)) in routed.iter().enumerate() {
            let partition = key
                .and_then(|key| partition_for_key(key, self.partition_count))
                .unwrap_or_else(|| self.round_robin());
            by_partition.entry(partition).or_default().push(index);
        }
        let mut acks = vec![None; lines.len()];
        for (partition, indexes) in by_partition {
            let batch = self.batch(partition, indexes.iter().map(|i| routed[*i]));
            let appended = self
                .client
                .produce(&self.topic, partition, batch)
                .await
                .with_context(|| format!("cannot append to {}-{partition}", self.topic))?;
            for (delta, index) in indexes.iter().enumerate() {
                let offset = appended.base_offset + delta as u64;
                acks[*index] = Some(Ack { partition, offset });
            }
        }
        for ack in acks.into_iter().flatten() {
            write_ack(out, ack, format)?;
        }
        Ok(())
    }

    fn round_robin(&mut self) -> u32 {
        let partition = self.next_partition;
        self.next_partition = (self.next_partition + 1) % self.partition_count;
        partition
    }

    fn batch<'a>(
        &mut self,
        partition: u32,
        records: impl Iterator<Item = (Option<&'a [u8]>, &'a [u8])>,
    ) -> Bytes {
        let sequence = &mut self.sequences[partition as usize];
        let mut builder = BatchBuilder::new(0).with_producer(self.producer_id, 0, *sequence);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64);
        for (key, value) in records {
            builder.push(&NewRecord {
                timestamp_ms: now_ms,
                key,
                value: Some(value),
                headers: &[],
            });
        }
        *sequence = sequence.wrapping_add(builder.records_count());
        builder.build().unwrap_or_default()
    }
}

/// `seglog consume --cluster`: committed records from `--offset` (or the log start) to the
/// committed end, at most `--max-records`.
pub fn consume(
    cluster: &str,
    topic: &TopicName,
    partition: u32,
    args: &ConsumeArgs,
) -> anyhow::Result<()> {
    let max_records = args.max_records.unwrap_or(u64::MAX);
    runtime()?.block_on(async {
        let mut client = ClusterClient::new(addresses(cluster), READ_TIMEOUT);
        let printer = RecordPrinter::of(args)?;
        let mut offset = args.offset.unwrap_or(0);
        let mut printed = 0u64;
        let mut out = io::stdout().lock();
        while printed < max_records {
            let fetched = client
                .fetch(topic.as_str(), partition, offset, FETCH_BYTES)
                .await
                .with_context(|| format!("cannot read {topic}-{partition}"))?;
            let from = offset.max(fetched.log_start_offset);
            let mut next = from;
            for batch in BatchIter::new(fetched.records, u64::MAX) {
                let batch = batch.context("a fetched batch does not decode")?;
                let to_print = crate::consume::BatchToPrint {
                    batch: &batch,
                    partition,
                    from_offset: from,
                    max_records: max_records - printed,
                };
                printed += crate::consume::print_batch(&mut out, &to_print, &printer)?;
                next = next.max(batch.last_offset() as u64 + 1);
                if printed >= max_records {
                    break;
                }
            }
            out.flush()?;
            if next == from || next >= fetched.high_watermark {
                break;
            }
            offset = next;
        }
        anyhow::Ok(())
    })
}
