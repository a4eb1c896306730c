//! Idempotent produce over the wire (issue 44): InitProducerId hands out ids never given
//! before, across a restart too, and refuses a transactional id (transactions are not built);
//! a retried batch is answered with its first offsets and written once, before and after a
//! restart; a gap in the sequence and a fenced epoch are Kafka's error codes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::{Broker, Client, idempotent_batch};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    FetchRequest, InitProducerIdRequest, ProduceRequest, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use seglog::config::LogConfig;
use seglog_kafka::ServeConfig;

const TOPIC: &str = "idempotent";

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

/// InitProducerId at `version`: `(error code, producer id, epoch)`.
async fn init_producer_id(
    client: &mut Client,
    transactional_id: Option<&'static str>,
    version: i16,
) -> (i16, i64, i16) {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(
            transactional_id.map(|id| TransactionalId(StrBytes::from_static_str(id))),
        )
        .with_transaction_timeout_ms(60_000);
    let response = client.call(&request, version).await;
    (
        response.error_code,
        response.producer_id.0,
        response.producer_epoch,
    )
}

/// Now, in ms since the epoch: batches carry it, as a client's do (a producer whose last batch
/// is older than `producer.id.expiration.ms` is forgotten).
fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since_epoch.as_millis()).unwrap()
}

/// A broker with the test's topic, of one partition.
async fn broker_with_topic() -> Broker {
    let broker = Broker::start(ServeConfig::default()).await;
    broker
        .engine
        .create_topic(TOPIC, 1, LogConfig::default())
        .unwrap();
    broker
}

/// Produces one batch to partition 0 with `acks=all`: `(error code, base offset)`.
async fn produce(client: &mut Client, records: Bytes) -> (i16, i64) {
    let data = PartitionProduceData::default()
        .with_index(0)
        .with_records(Some(records));
    let topic = TopicProduceData::default()
        .with_name(topic_name())
        .with_partition_data(vec![data]);
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![topic]);
    let response = client.call(&request, 9).await;
    let answer = &response.responses[0].partition_responses[0];
    (answer.error_code, answer.base_offset)
}

/// The partition's log end offset, as a fetch from 0 reports it (its high watermark).
async fn log_end_offset(client: &mut Client) -> i64 {
    let partition = FetchPartition::default()
        .with_partition(0)
        .with_fetch_offset(0)
        .with_partition_max_bytes(1024 * 1024);
    let topic = FetchTopic::default()
        .with_topic(topic_name())
        .with_partitions(vec![partition]);
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1024 * 1024)
        .with_topics(vec![topic]);
    let response = client.call(&request, 12).await;
    let answer = &response.responses[0].partitions[0];
    assert_eq!(answer.error_code, 0);
    answer.high_watermark
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_producer_id_hands_out_ids_never_given_before_across_a_restart() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    let mut ids = Vec::new();
    for version in 0..=5 {
        let (error_code, producer_id, epoch) = init_producer_id(&mut client, None, version).await;
        assert_eq!((error_code, epoch), (0, 0), "v{version}");
        ids.push(producer_id);
    }
    let (error_code, producer_id, _) = init_producer_id(&mut client, Some("tx"), 4).await;
    assert_eq!(error_code, ResponseError::CoordinatorNotAvailable.code());
    assert_eq!(producer_id, -1);
    let dir = broker.stop_keeping_dir().await;

    let broker = Broker::start_in(dir, ServeConfig::default()).await;
    let mut client = broker.client().await;
    let (error_code, after_restart, _) = init_producer_id(&mut client, None, 4).await;
    assert_eq!(error_code, 0);
    ids.push(after_restart);
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        ids.len(),
        "an id was handed out twice: {ids:?}"
    );
    assert!(after_restart > ids[..ids.len() - 1].iter().copied().max().unwrap());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_batch_is_written_once_before_and_after_a_restart() {
    let broker = broker_with_topic().await;
    let mut client = broker.client().await;
    let (_, producer_id, epoch) = init_producer_id(&mut client, None, 4).await;
    let first = idempotent_batch(3, now_ms(), (producer_id, epoch, 0));
    let second = idempotent_batch(2, now_ms(), (producer_id, epoch, 3));
    assert_eq!(produce(&mut client, first.clone()).await, (0, 0));
    assert_eq!(
        produce(&mut client, first).await,
        (0, 0),
        "a retry gets its offsets"
    );
    assert_eq!(produce(&mut client, second.clone()).await, (0, 3));
    assert_eq!(
        log_end_offset(&mut client).await,
        5,
        "the retry wrote nothing"
    );
    let dir = broker.stop_keeping_dir().await;

    let broker = Broker::start_in(dir, ServeConfig::default()).await;
    let mut client = broker.client().await;
    assert_eq!(
        produce(&mut client, second).await,
        (0, 3),
        "the state survived"
    );
    let third = idempotent_batch(1, now_ms(), (producer_id, epoch, 5));
    assert_eq!(produce(&mut client, third).await, (0, 5));
    assert_eq!(log_end_offset(&mut client).await, 6);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_gap_and_a_fenced_epoch_are_refused_with_kafkas_codes() {
    let broker = broker_with_topic().await;
    let mut client = broker.client().await;
    let (_, producer_id, _) = init_producer_id(&mut client, None, 4).await;
    let at =
        |epoch: i16, sequence: i32| idempotent_batch(1, now_ms(), (producer_id, epoch, sequence));
    assert_eq!(produce(&mut client, at(0, 0)).await, (0, 0));
    let (error_code, base_offset) = produce(&mut client, at(0, 5)).await;
    assert_eq!(error_code, ResponseError::OutOfOrderSequenceNumber.code());
    assert_eq!(base_offset, -1);
    assert_eq!(
        produce(&mut client, at(1, 0)).await,
        (0, 1),
        "a new epoch starts at 0"
    );
    let (error_code, _) = produce(&mut client, at(0, 1)).await;
    assert_eq!(error_code, ResponseError::InvalidProducerEpoch.code());
    assert_eq!(
        log_end_offset(&mut client).await,
        2,
        "refused batches wrote nothing"
    );
    broker.stop().await;
}
