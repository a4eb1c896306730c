//! `serve`'s phases over Kafka's wire protocol. After the embedded `append` phase (the baseline,
//! its engine closed), a fresh engine in [`SERVE_DIR`] under the data directory, with the same
//! configuration, is served by `seglog_kafka::serve` on a loopback port picked free, and a
//! Kafka-protocol load generator runs on the same tokio runtime, its requests encoded and its
//! responses decoded with the `kafka-protocol` crate:
//!
//! - `serve_produce`: `--producers` connections, each keeping the baseline's appends in flight
//!   as pipelined Produce requests (v9, `acks=1`: answered once written, as the baseline's
//!   appends are), one batch of one partition per request, partitions round-robin. Latency is
//!   per request, from its send to its response.
//! - `serve_fetch`: then `--consumers` connections read the partitions from offset 0 to the
//!   end the produce phase left, each its share of them in one Fetch request at a time (v12,
//!   1 MiB per partition, 4 MiB per response, no wait). Bytes are the record batches received.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::fetch_response::FetchResponse;
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::produce_response::ProduceResponse;
use kafka_protocol::messages::{RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use seglog::config::LogConfig;
use seglog::engine::{Engine, EngineConfig};
use seglog::format::batch::BatchIter;
use seglog_kafka::ServeConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::TOPIC;
use super::batches::BatchSource;
use super::progress::{Limit, Phase, Shared, TaskPhase, WorkerStats, micros};
use super::settings::Settings;

/// The produce phase's name: its row in the table and its key in the JSON.
pub const PRODUCE_PHASE: &str = "serve_produce";
/// The fetch phase's name.
pub const FETCH_PHASE: &str = "serve_fetch";
/// The served engine's directory, under the data directory.
pub const SERVE_DIR: &str = "serve";
/// Produce v9: the first flexible version, which every current client negotiates or passes.
const PRODUCE_VERSION: i16 = 9;
/// Fetch v12: topics by name, flexible.
const FETCH_VERSION: i16 = 12;
/// `partition_max_bytes` of each fetched partition.
const PARTITION_FETCH_BYTES: i32 = 1024 * 1024;
/// `max_bytes` of each Fetch request.
const FETCH_BYTES: i32 = 4 * 1024 * 1024;
/// The largest response frame the load generator reads.
const RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// How long the broker's request timeout is for a produce (`timeout_ms`).
const PRODUCE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs both phases against a fresh engine in `dir` configured as `config`.
pub fn serve_phases(
    settings: &Settings,
    config: EngineConfig,
    dir: &Path,
) -> anyhow::Result<Vec<Phase>> {
    let engine = Engine::open(dir, config)
        .with_context(|| format!("cannot open data directory {}", dir.display()))?;
    let measured = engine
        .create_topic(TOPIC, settings.partitions, LogConfig::default())
        .with_context(|| format!("cannot create topic {TOPIC} in {}", dir.display()))
        .and_then(|_| {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("seglog-bench-serve")
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(serve_and_load(engine.clone(), settings))
        });
    let closed = engine.close().context("cannot close the served engine");
    let phases = measured?;
    closed?;
    Ok(phases)
}

/// Serves `engine` on a loopback port, runs the produce then the fetch phase against it, stops it.
async fn serve_and_load(engine: Engine, settings: &Settings) -> anyhow::Result<Vec<Phase>> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen on a free loopback port")?;
    let address = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let server = tokio::spawn(seglog_kafka::serve(
        engine.clone(),
        listener,
        ServeConfig::default(),
        shutdown,
    ));
    let measured = async {
        let produced = produce_phase(settings, address).await?;
        let ends = log_end_offsets(&engine, settings.partitions).await?;
        let fetched = fetch_phase(settings, address, ends).await?;
        anyhow::Ok(vec![produced, fetched])
    }
    .await;
    // The server's task ends once every connection closed; a failure of its own comes first.
    let _ = stop.send(());
    server
        .await
        .map_err(|error| anyhow!("the server's task failed: {error}"))?
        .context("the server failed")?;
    measured
}

/// Each partition's log end offset, as the engine has it.
async fn log_end_offsets(engine: &Engine, partitions: u32) -> anyhow::Result<Vec<u64>> {
    let engine = engine.clone();
    tokio::task::spawn_blocking(move || {
        (0..partitions)
            .map(|partition| {
                let description = engine.describe_partition(TOPIC, partition)?;
                anyhow::Ok(description.log_end_offset.0)
            })
            .collect()
    })
    .await
    .map_err(|error| anyhow!("describing the partitions failed: {error}"))?
}

async fn produce_phase(settings: &Settings, address: SocketAddr) -> anyhow::Result<Phase> {
    let phase = TaskPhase::start(PRODUCE_PHASE, settings.limit, settings.records_per_s_cap);
    let mut tasks = Vec::with_capacity(settings.producers);
    for producer in 0..settings.producers {
        let worker = KafkaProducer {
            connection: Connection::open(address).await?,
            batches: BatchSource::new(settings, producer)?,
            in_flight_max: settings.appends_inflight(),
            partitions: settings.partitions,
            next_partition: producer as u32 % settings.partitions,
            shared: phase.shared.clone(),
            limit: phase.limit,
            started: phase.started,
        };
        tasks.push(tokio::spawn(worker.run()));
    }
    phase.finish(tasks).await
}

async fn fetch_phase(
    settings: &Settings,
    address: SocketAddr,
    ends: Vec<u64>,
) -> anyhow::Result<Phase> {
    let consumers = settings.consumers.clamp(1, ends.len().max(1));
    let total: u64 = ends.iter().sum();
    let phase = TaskPhase::start(FETCH_PHASE, Limit::Records(total.max(1)), None);
    let mut tasks = Vec::with_capacity(consumers);
    for consumer in 0..consumers {
        // Partition p goes to consumer p % consumers; each starts at offset 0.
        let partitions = (consumer..ends.len())
            .step_by(consumers)
            .map(|partition| (partition as i32, 0, ends[partition]))
            .collect();
        let worker = KafkaConsumer {
            connection: Connection::open(address).await?,
            partitions,
            shared: phase.shared.clone(),
        };
        tasks.push(tokio::spawn(worker.run()));
    }
    phase.finish(tasks).await
}

/// One Kafka-protocol connection of the load generator.
struct Connection {
    stream: BufReader<TcpStream>,
    correlation_id: i32,
    frame: BytesMut,
}

impl Connection {
    async fn open(address: SocketAddr) -> anyhow::Result<Connection> {
        let stream = TcpStream::connect(address)
            .await
            .with_context(|| format!("cannot connect to {address}"))?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream: BufReader::new(stream),
            correlation_id: 0,
            frame: BytesMut::new(),
        })
    }

    /// Sends `request` at `version` without waiting for its response.
    async fn send<R: Request>(&mut self, request: &R, version: i16) -> anyhow::Result<()> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("seglog-bench")));
        self.frame.clear();
        self.frame.put_i32(0);
        header
            .encode(&mut self.frame, R::header_version(version))
            .and_then(|()| request.encode(&mut self.frame, version))
            .map_err(|error| anyhow!("cannot encode a request: {error}"))?;
        let body_bytes = i32::try_from(self.frame.len() - 4)?;
        self.frame[..4].copy_from_slice(&body_bytes.to_be_bytes());
        self.stream.get_mut().write_all(&self.frame).await?;
        Ok(())
    }

    /// Reads the next response, of a request `R` sent at `version`.
    async fn receive<R: Request>(&mut self, version: i16) -> anyhow::Result<R::Response> {
        let size_bytes = usize::try_from(self.stream.read_i32().await?)?;
        ensure!(
            size_bytes <= RESPONSE_BYTES_MAX,
            "a response of {size_bytes} bytes"
        );
        let mut body = vec![0u8; size_bytes];
        self.stream.read_exact(&mut body).await?;
        let mut body = Bytes::from(body);
        let header_version = <R::Response as HeaderVersion>::header_version(version);
        ResponseHeader::decode(&mut body, header_version)
            .map_err(|error| anyhow!("cannot decode a response header: {error}"))?;
        let response = R::Response::decode(&mut body, version)
            .map_err(|error| anyhow!("cannot decode a response: {error}"))?;
        ensure!(!body.has_remaining(), "bytes past the end of a response");
        Ok(response)
    }
}

/// One produce connection: its batches, its partitions' turn, its requests in flight.
struct KafkaProducer {
    connection: Connection,
    batches: BatchSource,
    in_flight_max: usize,
    partitions: u32,
    next_partition: u32,
    shared: Arc<Shared>,
    limit: Limit,
    started: Instant,
}

impl KafkaProducer {
    /// Keeps `in_flight_max` requests in flight until the limit; answers arrive in order.
    /// Capped (`--throughput`), each request waits until it is due, taking answers meanwhile.
    async fn run(mut self) -> anyhow::Result<WorkerStats> {
        let mut stats = WorkerStats::new()?;
        // Per request in flight: when it was due (sent, uncapped), its records and bytes.
        let mut in_flight: VecDeque<(Instant, u64, u64)> = VecDeque::new();
        let mut claiming = true;
        loop {
            while claiming && in_flight.len() < self.in_flight_max {
                let (batch, records) = self.batches.next()?;
                let Some(due) = self.shared.claim_send(self.limit, self.started, records) else {
                    claiming = false;
                    break;
                };
                while Instant::now() < due
                    && let Some(oldest) = in_flight.pop_front()
                {
                    self.answered(oldest, &mut stats).await?;
                }
                tokio::time::sleep_until(due.into()).await;
                let bytes = batch.len() as u64;
                self.send(batch).await?;
                in_flight.push_back((due, records, bytes));
            }
            let Some(oldest) = in_flight.pop_front() else {
                break;
            };
            self.answered(oldest, &mut stats).await?;
        }
        Ok(stats.finished_now())
    }

    /// Reads the answer to the oldest request in flight, `(due, records, bytes)`.
    async fn answered(
        &mut self,
        (due, records, bytes): (Instant, u64, u64),
        stats: &mut WorkerStats,
    ) -> anyhow::Result<()> {
        let response = self
            .connection
            .receive::<ProduceRequest>(PRODUCE_VERSION)
            .await?;
        check_produced(&response)?;
        stats.latency.saturating_record(micros(due.elapsed()));
        stats.records += records;
        stats.bytes += bytes;
        self.shared.appended.fetch_add(records, Ordering::Relaxed);
        Ok(())
    }

    async fn send(&mut self, batch: Bytes) -> anyhow::Result<()> {
        let partition = self.next_partition;
        self.next_partition = (partition + 1) % self.partitions;
        let data = PartitionProduceData::default()
            .with_index(i32::try_from(partition)?)
            .with_records(Some(batch));
        let topic = TopicProduceData::default()
            .with_name(topic_name())
            .with_partition_data(vec![data]);
        let request = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(i32::try_from(PRODUCE_TIMEOUT.as_millis())?)
            .with_topic_data(vec![topic]);
        self.connection.send(&request, PRODUCE_VERSION).await
    }
}

fn check_produced(response: &ProduceResponse) -> anyhow::Result<()> {
    for topic in &response.responses {
        for partition in &topic.partition_responses {
            if partition.error_code != 0 {
                bail!(
                    "produce to {TOPIC}-{} answered error {}: {:?}",
                    partition.index,
                    partition.error_code,
                    partition.error_message
                );
            }
        }
    }
    Ok(())
}

/// One fetch connection and its partitions: `(partition, next offset, end offset)`.
struct KafkaConsumer {
    connection: Connection,
    partitions: Vec<(i32, u64, u64)>,
    shared: Arc<Shared>,
}

impl KafkaConsumer {
    /// Fetches until every partition reached its end offset.
    async fn run(mut self) -> anyhow::Result<WorkerStats> {
        let mut stats = WorkerStats::new()?;
        while self.partitions.iter().any(|(_, next, end)| next < end) {
            let sent = Instant::now();
            self.connection
                .send(&self.request()?, FETCH_VERSION)
                .await?;
            let response = self
                .connection
                .receive::<FetchRequest>(FETCH_VERSION)
                .await?;
            let (records, bytes) = self.take(response)?;
            stats.latency.saturating_record(micros(sent.elapsed()));
            stats.records += records;
            stats.bytes += bytes;
            self.shared.appended.fetch_add(records, Ordering::Relaxed);
        }
        Ok(stats.finished_now())
    }

    /// One request for every partition not yet read to its end.
    fn request(&self) -> anyhow::Result<FetchRequest> {
        let partitions = self
            .partitions
            .iter()
            .filter(|(_, next, end)| next < end)
            .map(|(partition, next, _)| {
                Ok(FetchPartition::default()
                    .with_partition(*partition)
                    .with_fetch_offset(i64::try_from(*next)?)
                    .with_partition_max_bytes(PARTITION_FETCH_BYTES))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let topic = FetchTopic::default()
            .with_topic(topic_name())
            .with_partitions(partitions);
        Ok(FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(FETCH_BYTES)
            .with_topics(vec![topic]))
    }

    /// Moves each partition past the batches `response` holds; their records and bytes.
    fn take(&mut self, response: FetchResponse) -> anyhow::Result<(u64, u64)> {
        ensure!(
            response.error_code == 0,
            "fetch answered error {}",
            response.error_code
        );
        let (mut records, mut bytes) = (0, 0);
        for data in response
            .responses
            .iter()
            .flat_map(|topic| &topic.partitions)
        {
            ensure!(
                data.error_code == 0,
                "fetch of {TOPIC}-{} answered error {}",
                data.partition_index,
                data.error_code
            );
            let Some(entry) = self
                .partitions
                .iter_mut()
                .find(|(partition, _, _)| *partition == data.partition_index)
            else {
                bail!("fetch answered partition {} unasked", data.partition_index);
            };
            let batches = data.records.clone().unwrap_or_default();
            bytes += batches.len() as u64;
            for batch in BatchIter::without_crc_check(batches, u64::MAX) {
                let batch = batch.context("a fetched batch does not frame")?;
                records += u64::from(batch.header().records_count as u32);
                entry.1 = batch.last_offset() as u64 + 1;
            }
        }
        Ok((records, bytes))
    }
}

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}
