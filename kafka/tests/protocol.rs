//! Kafka's wire protocol end to end (issue 44): a broker serving in-process on loopback, and a
//! client built from the `kafka-protocol` crate's encoders. Proven: ApiVersions lists exactly
//! what is implemented (and answers an unknown version with `UNSUPPORTED_VERSION`); Metadata
//! names this broker as every partition's leader and auto-creates topics; a produced batch is
//! fetched back byte for byte (`acks` all, 1 and 0); pipelined produces are applied and answered
//! in order, before a fetch sent after them; Fetch long-polls, limits bytes and reports
//! errors as Kafka codes; ListOffsets finds the earliest, the latest and by timestamp; topics are
//! created, grown and deleted; records are deleted; configs are described, and a topic's are
//! altered (SET, DELETE back to the default, APPEND and SUBTRACT on `cleanup.policy`,
//! `validate_only`, errors per resource as Kafka answers them); a corrupt batch is
//! refused whole, as is a produce to an unknown topic or partition; a malformed or oversized
//! frame (an array count past the frame's end included), a client that stalls mid-frame past
//! `connections.max.idle.ms`, or one past `max.connections`, closes its own connection and no
//! other; a thousand idle connections stay served; a stop is held up neither by a long-poll fetch
//! nor by a client that stopped reading.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::{Broker, Client, batch};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::FetchResponse;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiVersionsRequest, BrokerId, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteRecordsRequest, DeleteTopicsRequest, DescribeConfigsRequest, FetchRequest,
    IncrementalAlterConfigsRequest, ListOffsetsRequest, MetadataRequest, MetadataResponse,
    ProduceRequest, ProduceResponse, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use seglog_kafka::{SUPPORTED_APIS, ServeConfig};

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

fn create_request(name: &str, partitions: i32) -> CreateTopicsRequest {
    let topic = CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(1);
    CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(30_000)
}

async fn create_topic(client: &mut Client, name: &str, partitions: i32) {
    let response = client.call(&create_request(name, partitions), 7).await;
    assert_eq!(response.topics[0].error_code, 0, "{:?}", response.topics[0]);
}

fn produce_request(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
    let data = PartitionProduceData::default()
        .with_index(partition)
        .with_records(Some(records));
    let topic = TopicProduceData::default()
        .with_name(topic_name(topic))
        .with_partition_data(vec![data]);
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![topic])
}

async fn produce(client: &mut Client, topic: &str, partition: i32, records: Bytes) -> (i16, i64) {
    let response: ProduceResponse = client
        .call(&produce_request(topic, partition, records, -1), 9)
        .await;
    let answer = &response.responses[0].partition_responses[0];
    (answer.error_code, answer.base_offset)
}

fn fetch_request(topic: &str, partition: i32, offset: i64) -> FetchRequest {
    let partition = FetchPartition::default()
        .with_partition(partition)
        .with_fetch_offset(offset)
        .with_partition_max_bytes(1024 * 1024);
    let topic = FetchTopic::default()
        .with_topic(topic_name(topic))
        .with_partitions(vec![partition]);
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(50 * 1024 * 1024)
        .with_topics(vec![topic])
}

async fn list_offset(
    client: &mut Client,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> (i16, i64) {
    let partition = ListOffsetsPartition::default()
        .with_partition_index(partition)
        .with_timestamp(timestamp);
    let topic = ListOffsetsTopic::default()
        .with_name(topic_name(topic))
        .with_partitions(vec![partition]);
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![topic]);
    let response = client.call(&request, 6).await;
    let answer = &response.topics[0].partitions[0];
    (answer.error_code, answer.offset)
}

async fn metadata(client: &mut Client, topics: &[&str], auto_create: bool) -> MetadataResponse {
    let topics = topics
        .iter()
        .map(|name| MetadataRequestTopic::default().with_name(Some(topic_name(name))))
        .collect();
    let request = MetadataRequest::default()
        .with_topics(Some(topics))
        .with_allow_auto_topic_creation(auto_create);
    client.call(&request, 12).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_lists_exactly_the_implemented_apis() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    for version in [0, 3, 4] {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("test"))
            .with_client_software_version(StrBytes::from_static_str("1"));
        let response = client.call(&request, version).await;
        assert_eq!(response.error_code, 0);
        let listed: Vec<(i16, i16, i16)> = response
            .api_keys
            .iter()
            .map(|api| (api.api_key, api.min_version, api.max_version))
            .collect();
        let supported: Vec<(i16, i16, i16)> = SUPPORTED_APIS
            .iter()
            .map(|api| (api.api_key, api.min_version, api.max_version))
            .collect();
        assert_eq!(listed, supported);
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_at_an_unknown_version_answers_unsupported_version_at_version_0() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    // ApiVersions (18) version 99, correlation id 7, a null client id, no tagged fields.
    let mut body = BytesMut::new();
    body.put_i16(18);
    body.put_i16(99);
    body.put_i32(7);
    body.put_i16(-1);
    body.put_u8(0);
    client.send_frame(&body).await;
    let mut frame = client.receive_frame().await.unwrap();
    let header = ResponseHeader::decode(&mut frame, 0).unwrap();
    assert_eq!(header.correlation_id, 7);
    let response = ApiVersionsResponse::decode(&mut frame, 0).unwrap();
    assert_eq!(
        response.error_code,
        ResponseError::UnsupportedVersion.code()
    );
    assert_eq!(response.api_keys.len(), SUPPORTED_APIS.len());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_names_this_broker_as_leader_and_auto_creates_topics() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    let response = metadata(&mut client, &["auto"], true).await;
    assert_eq!(response.brokers.len(), 1);
    assert_eq!(response.brokers[0].node_id.0, 0);
    assert_eq!(response.brokers[0].host.as_str(), "127.0.0.1");
    assert_eq!(response.brokers[0].port, i32::from(broker.address.port()));
    assert_eq!(response.controller_id.0, 0);
    let topic = &response.topics[0];
    assert_eq!(topic.error_code, 0);
    assert_eq!(topic.partitions.len(), 1, "num.partitions defaults to 1");
    assert_eq!(topic.partitions[0].leader_id.0, 0);
    assert_eq!(topic.partitions[0].isr_nodes, vec![BrokerId(0)]);
    assert!(broker.engine.describe_topic("auto").is_ok());

    let refused = metadata(&mut client, &["not-created"], false).await;
    assert_eq!(
        refused.topics[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    assert!(broker.engine.describe_topic("not-created").is_err());

    let all = client
        .call(&MetadataRequest::default().with_topics(None), 12)
        .await;
    let names: Vec<String> = all
        .topics
        .iter()
        .map(|topic| topic.name.as_ref().unwrap().0.to_string())
        .collect();
    assert_eq!(names, vec!["auto".to_owned()]);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_creation_follows_the_broker_setting_and_num_partitions() {
    let mut config = ServeConfig::default();
    config.set("num.partitions", "3").unwrap();
    let broker = Broker::start(config).await;
    let mut client = broker.client().await;
    let response = metadata(&mut client, &["three"], true).await;
    assert_eq!(response.topics[0].partitions.len(), 3);
    broker.stop().await;

    let mut config = ServeConfig::default();
    config.set("auto.create.topics.enable", "false").unwrap();
    let broker = Broker::start(config).await;
    let mut client = broker.client().await;
    let response = metadata(&mut client, &["never"], true).await;
    assert_eq!(
        response.topics[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produced_batch_is_fetched_back_as_sent() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "orders", 2).await;
    let first = batch(10, 1_000);
    assert_eq!(
        produce(&mut client, "orders", 1, first.clone()).await,
        (0, 0)
    );
    assert_eq!(
        produce(&mut client, "orders", 1, batch(5, 2_000)).await,
        (0, 10)
    );

    let response: FetchResponse = client.call(&fetch_request("orders", 1, 0), 12).await;
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    assert_eq!(partition.high_watermark, 15);
    assert_eq!(partition.log_start_offset, 0);
    let records = partition.records.clone().unwrap();
    assert_eq!(
        &records[..first.len()],
        &first[..],
        "the first batch as produced"
    );

    // Fetch 4, the oldest version answered, reads the same bytes.
    let old: FetchResponse = client.call(&fetch_request("orders", 1, 0), 4).await;
    assert_eq!(old.responses[0].partitions[0].records, Some(records));
    broker.stop().await;
}

/// Large record sets are written from the engine's buffers, not copied into the frame
/// (`fetch_frame.rs`): several partitions of them, beside a small one, decode at every version
/// with each partition's batches as produced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_of_large_batches_from_several_partitions_reads_them_as_produced() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "large", 3).await;
    let produced = [batch(3_000, 1_000), batch(4, 2_000), batch(6_000, 3_000)];
    for (partition, records) in produced.iter().enumerate() {
        let partition = i32::try_from(partition).unwrap();
        assert_eq!(
            produce(&mut client, "large", partition, records.clone()).await,
            (0, 0)
        );
    }
    let partitions = (0..3)
        .map(|partition| {
            FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1024 * 1024)
        })
        .collect();
    let topic = FetchTopic::default()
        .with_topic(topic_name("large"))
        .with_partitions(partitions);
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(50 * 1024 * 1024)
        .with_topics(vec![topic]);
    for version in [4, 11, 12] {
        let response: FetchResponse = client.call(&request, version).await;
        let fetched: Vec<Bytes> = response.responses[0]
            .partitions
            .iter()
            .map(|partition| partition.records.clone().unwrap())
            .collect();
        assert_eq!(fetched, produced, "v{version}");
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_produces_are_applied_and_answered_in_order_before_a_later_fetch() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "pipelined", 1).await;
    // Twenty requests sent before any answer is read: more than a connection keeps in flight.
    let mut sent = Vec::new();
    for round in 0..20 {
        let request = produce_request("pipelined", 0, batch(round + 1, 1_000), 1);
        sent.push((client.send(&request, 9).await, round + 1));
    }
    let fetch_id = client.send(&fetch_request("pipelined", 0, 0), 12).await;
    let mut expected_offset = 0;
    for (correlation_id, records) in sent {
        let response: ProduceResponse = client.receive::<ProduceRequest>(9, correlation_id).await;
        let answer = &response.responses[0].partition_responses[0];
        assert_eq!(
            (answer.error_code, answer.base_offset),
            (0, expected_offset)
        );
        expected_offset += records as i64;
    }
    // The fetch read after them sees every one.
    let response: FetchResponse = client.receive::<FetchRequest>(12, fetch_id).await;
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.high_watermark, expected_offset);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_0_is_appended_unanswered_and_a_failure_closes_the_connection() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "fire", 1).await;
    client
        .send(&produce_request("fire", 0, batch(3, 1), 0), 9)
        .await;
    // The next frame on the connection answers the next request, not the produce.
    let (code, latest) = list_offset(&mut client, "fire", 0, -1).await;
    assert_eq!((code, latest), (0, 3));
    let acks_1 = client
        .call(&produce_request("fire", 0, batch(2, 1), 1), 3)
        .await;
    assert_eq!(acks_1.responses[0].partition_responses[0].base_offset, 3);
    // A failed acks=0 produce closes the connection: the client has no other way to know.
    let unknown_topic = produce_request("nowhere", 0, batch(1, 1), 0);
    client.send(&unknown_topic, 9).await;
    assert!(client.is_closed_by_broker().await);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_long_polls_until_a_produce_arrives() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut admin = broker.client().await;
    create_topic(&mut admin, "tail", 1).await;
    let mut consumer = broker.client().await;
    // A wait far longer than the test: the fetch returns with data only if the produce wakes it.
    let request = fetch_request("tail", 0, 0).with_max_wait_ms(600_000);
    let correlation_id = consumer.send(&request, 12).await;
    assert_eq!(produce(&mut admin, "tail", 0, batch(4, 7)).await, (0, 0));
    let response = consumer.receive::<FetchRequest>(12, correlation_id).await;
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    assert!(!partition.records.as_ref().unwrap().is_empty());
    assert_eq!(partition.high_watermark, 4);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_waits_for_min_bytes_across_produces() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut admin = broker.client().await;
    create_topic(&mut admin, "gather", 1).await;
    let first = batch(2, 1);
    let second = batch(3, 2);
    produce(&mut admin, "gather", 0, first.clone()).await;
    let mut consumer = broker.client().await;
    // More than the first batch holds, and a wait far longer than the test: the fetch returns
    // both batches only if the second produce wakes it.
    let min_bytes = i32::try_from(first.len()).unwrap() + 1;
    let request = fetch_request("gather", 0, 0)
        .with_min_bytes(min_bytes)
        .with_max_wait_ms(600_000);
    let correlation_id = consumer.send(&request, 12).await;
    assert_eq!(
        produce(&mut admin, "gather", 0, second.clone()).await,
        (0, 2)
    );
    let response = consumer.receive::<FetchRequest>(12, correlation_id).await;
    let records = response.responses[0].partitions[0].records.clone().unwrap();
    assert_eq!(records.len(), first.len() + second.len());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_past_its_wait_answers_empty() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "quiet", 1).await;
    let request = fetch_request("quiet", 0, 0).with_max_wait_ms(50);
    let response = client.call(&request, 12).await;
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    assert_eq!(partition.records.as_ref().map(Bytes::len), Some(0));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_respects_max_bytes_but_returns_one_whole_batch() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "limits", 2).await;
    let big = batch(100, 1);
    for partition in [0, 1] {
        assert_eq!(
            produce(&mut client, "limits", partition, big.clone())
                .await
                .0,
            0
        );
        assert_eq!(
            produce(&mut client, "limits", partition, big.clone())
                .await
                .0,
            0
        );
    }
    let partitions = [0, 1]
        .map(|partition| {
            FetchPartition::default()
                .with_partition(partition)
                .with_partition_max_bytes(10)
        })
        .to_vec();
    let topic = FetchTopic::default()
        .with_topic(topic_name("limits"))
        .with_partitions(partitions);
    let request = FetchRequest::default()
        .with_max_bytes(10)
        .with_topics(vec![topic]);
    let response = client.call(&request, 12).await;
    let partitions = &response.responses[0].partitions;
    assert_eq!(
        partitions[0].records.as_ref().unwrap(),
        &big,
        "one whole batch"
    );
    assert_eq!(partitions[1].records.as_ref().map(Bytes::len), Some(0));
    assert_eq!(
        partitions[1].high_watermark, 200,
        "offsets reported all the same"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_errors_are_kafka_error_codes() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "errors", 1).await;
    produce(&mut client, "errors", 0, batch(2, 1)).await;
    let cases = [
        ("errors", 0, 3, ResponseError::OffsetOutOfRange),
        ("errors", 0, -5, ResponseError::OffsetOutOfRange),
        ("errors", 1, 0, ResponseError::UnknownTopicOrPartition),
        ("missing", 0, 0, ResponseError::UnknownTopicOrPartition),
        ("bad/name", 0, 0, ResponseError::UnknownTopicOrPartition),
    ];
    for (topic, partition, offset, error) in cases {
        let response = client
            .call(&fetch_request(topic, partition, offset), 12)
            .await;
        let code = response.responses[0].partitions[0].error_code;
        assert_eq!(code, error.code(), "{topic}-{partition} at {offset}");
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_finds_earliest_latest_and_by_timestamp() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "times", 1).await;
    produce(&mut client, "times", 0, batch(10, 1_000)).await;
    produce(&mut client, "times", 0, batch(10, 5_000)).await;
    assert_eq!(list_offset(&mut client, "times", 0, -2).await, (0, 0));
    assert_eq!(list_offset(&mut client, "times", 0, -1).await, (0, 20));
    assert_eq!(list_offset(&mut client, "times", 0, 1_005).await, (0, 5));
    assert_eq!(list_offset(&mut client, "times", 0, 4_000).await, (0, 10));
    assert_eq!(list_offset(&mut client, "times", 0, 9_000).await, (0, -1));
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    assert_eq!(list_offset(&mut client, "times", 4, -1).await.0, unknown);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_grown_and_deleted() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    let config = CreatableTopicConfig::default()
        .with_name(StrBytes::from_static_str("retention.ms"))
        .with_value(Some(StrBytes::from_static_str("60000")));
    let mut request = create_request("admin", 2);
    request.topics[0].configs = vec![config];
    let created = client.call(&request, 7).await;
    assert_eq!(created.topics[0].error_code, 0);
    assert_eq!(created.topics[0].num_partitions, 2);
    let described = broker.engine.describe_topic("admin").unwrap();
    assert_eq!(described.config.retention_ms, 60_000);

    let refusals = [
        (
            create_request("admin", 1),
            ResponseError::TopicAlreadyExists,
        ),
        (create_request("zero", 0), ResponseError::InvalidPartitions),
        (
            create_request("bad/name", 1),
            ResponseError::InvalidTopicException,
        ),
    ];
    for (request, error) in refusals {
        let response = client.call(&request, 7).await;
        assert_eq!(response.topics[0].error_code, error.code(), "{error:?}");
    }
    let mut replicated = create_request("replicated", 1);
    replicated.topics[0].replication_factor = 3;
    let response = client.call(&replicated, 7).await;
    let code = response.topics[0].error_code;
    assert_eq!(code, ResponseError::InvalidReplicationFactor.code());
    let mut invalid_config = create_request("configured", 1);
    invalid_config.topics[0].configs = vec![
        CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("retention.ms"))
            .with_value(Some(StrBytes::from_static_str("soon"))),
    ];
    let response = client.call(&invalid_config, 7).await;
    assert_eq!(
        response.topics[0].error_code,
        ResponseError::InvalidConfig.code()
    );
    assert!(
        broker.engine.describe_topic("configured").is_err(),
        "nothing created"
    );

    let grow = |count| {
        CreatePartitionsRequest::default().with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(topic_name("admin"))
                .with_count(count),
        ])
    };
    assert_eq!(client.call(&grow(4), 3).await.results[0].error_code, 0);
    let shrink = client.call(&grow(3), 3).await.results[0].error_code;
    assert_eq!(shrink, ResponseError::InvalidPartitions.code());
    let listed = metadata(&mut client, &["admin"], false).await;
    assert_eq!(listed.topics[0].partitions.len(), 4);

    let delete = DeleteTopicsRequest::default().with_topics(vec![
        DeleteTopicState::default().with_name(Some(topic_name("admin"))),
    ]);
    assert_eq!(client.call(&delete, 6).await.responses[0].error_code, 0);
    let again = DeleteTopicsRequest::default().with_topic_names(vec![topic_name("admin")]);
    let code = client.call(&again, 4).await.responses[0].error_code;
    assert_eq!(code, ResponseError::UnknownTopicOrPartition.code());
    assert!(broker.engine.describe_topic("admin").is_err());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_batch_is_refused_whole() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "crc", 1).await;
    let mut corrupt = BytesMut::from(&batch(3, 1)[..]);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let (code, _) = produce(&mut client, "crc", 0, corrupt.freeze()).await;
    assert_eq!(code, ResponseError::CorruptMessage.code());
    assert_eq!(list_offset(&mut client, "crc", 0, -1).await, (0, 0));
    let invalid_acks = client
        .call(&produce_request("crc", 0, batch(1, 1), 2), 9)
        .await;
    let code = invalid_acks.responses[0].partition_responses[0].error_code;
    assert_eq!(code, ResponseError::InvalidRequiredAcks.code());
    assert_eq!(list_offset(&mut client, "crc", 0, -1).await, (0, 0));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_only_their_own_connection() {
    let mut config = ServeConfig::default();
    config.set("socket.request.max.bytes", "4096").unwrap();
    let broker = Broker::start(config).await;
    let mut bystander = broker.client().await;
    create_topic(&mut bystander, "safe", 1).await;

    let mut header_only = BytesMut::new();
    header_only.put_i16(3); // Metadata
    header_only.put_i16(1);
    header_only.put_i32(1);
    header_only.put_i16(-1);
    let mut truncated_body = header_only.clone();
    truncated_body.put_i32(5); // five topics, none sent
    let mut unknown_api = BytesMut::new();
    unknown_api.put_i16(9_999);
    unknown_api.put_i16(0);
    unknown_api.put_i32(1);
    let mut unsupported_version = header_only.clone();
    unsupported_version[2..4].copy_from_slice(&77i16.to_be_bytes());
    // Metadata v1 claiming 2^31 - 1 topics in a 14-byte frame: the codec alone would reserve
    // 150 GB for them, and a failed allocation aborts the process.
    let mut array_bomb = header_only.clone();
    array_bomb.put_i32(i32::MAX);
    let frames: Vec<Vec<u8>> = vec![
        array_bomb.to_vec(),
        vec![1, 2, 3],
        truncated_body.to_vec(),
        unknown_api.to_vec(),
        unsupported_version.to_vec(),
    ];
    for frame in frames {
        let mut attacker = broker.client().await;
        attacker.send_frame(&frame).await;
        assert!(attacker.is_closed_by_broker().await, "{frame:?}");
    }
    for size in [-1i32, 0, 4097, i32::MAX] {
        let mut attacker = broker.client().await;
        tokio::io::AsyncWriteExt::write_all(&mut attacker.stream, &size.to_be_bytes())
            .await
            .unwrap();
        assert!(attacker.is_closed_by_broker().await, "size {size}");
    }
    assert_eq!(
        produce(&mut bystander, "safe", 0, batch(1, 1)).await,
        (0, 0)
    );
    broker.stop().await;
}

fn delete_records_request(topic: &str, partition: i32, offset: i64) -> DeleteRecordsRequest {
    let partition = DeleteRecordsPartition::default()
        .with_partition_index(partition)
        .with_offset(offset);
    let topic = DeleteRecordsTopic::default()
        .with_name(topic_name(topic))
        .with_partitions(vec![partition]);
    DeleteRecordsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(30_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_moves_the_log_start_offset() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "trim", 1).await;
    produce(&mut client, "trim", 0, batch(10, 1)).await;
    produce(&mut client, "trim", 0, batch(10, 1)).await;
    let response = client.call(&delete_records_request("trim", 0, 10), 2).await;
    let result = &response.topics[0].partitions[0];
    assert_eq!((result.error_code, result.low_watermark), (0, 10));
    assert_eq!(list_offset(&mut client, "trim", 0, -2).await, (0, 10));
    let below = client.call(&fetch_request("trim", 0, 5), 12).await;
    let code = below.responses[0].partitions[0].error_code;
    assert_eq!(code, ResponseError::OffsetOutOfRange.code());

    let everything = client.call(&delete_records_request("trim", 0, -1), 0).await;
    assert_eq!(everything.topics[0].partitions[0].low_watermark, 20);
    let past_end = client.call(&delete_records_request("trim", 0, 21), 1).await;
    let code = past_end.topics[0].partitions[0].error_code;
    assert_eq!(code, ResponseError::OffsetOutOfRange.code());
    let unknown = client
        .call(&delete_records_request("nowhere", 0, 1), 2)
        .await;
    let code = unknown.topics[0].partitions[0].error_code;
    assert_eq!(code, ResponseError::UnknownTopicOrPartition.code());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_configs_reports_a_topics_settings_and_the_brokers() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    let mut request = create_request("configured", 1);
    request.topics[0].configs = vec![
        CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("cleanup.policy"))
            .with_value(Some(StrBytes::from_static_str("compact"))),
    ];
    assert_eq!(client.call(&request, 7).await.topics[0].error_code, 0);
    let resource = |resource_type: i8, name: &'static str, keys: Option<Vec<StrBytes>>| {
        DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_static_str(name))
            .with_configuration_keys(keys)
    };
    let keys = vec![
        StrBytes::from_static_str("cleanup.policy"),
        StrBytes::from_static_str("retention.ms"),
    ];
    let request = DescribeConfigsRequest::default().with_resources(vec![
        resource(2, "configured", Some(keys)),
        resource(4, "0", None),
        resource(2, "missing", None),
    ]);
    let response = client.call(&request, 4).await;
    let topic = &response.results[0];
    assert_eq!(topic.error_code, 0);
    let settings: Vec<(String, String, i8)> = topic
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.value.as_ref().unwrap().to_string(),
                c.config_source,
            )
        })
        .collect();
    assert_eq!(
        settings,
        vec![
            ("retention.ms".to_owned(), "604800000".to_owned(), 5),
            ("cleanup.policy".to_owned(), "compact".to_owned(), 1),
        ],
        "the topic's settings in their own order, overrides as the topic's"
    );
    let broker_settings = &response.results[1];
    assert_eq!(broker_settings.error_code, 0);
    assert!(
        broker_settings
            .configs
            .iter()
            .any(|c| c.name.as_str() == "num.partitions")
    );
    let code = response.results[2].error_code;
    assert_eq!(code, ResponseError::UnknownTopicOrPartition.code());
    broker.stop().await;
}

/// Kafka's `AlterConfigOp.OpType` ids.
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

fn op(name: &'static str, operation: i8, value: Option<&'static str>) -> AlterableConfig {
    AlterableConfig::default()
        .with_name(StrBytes::from_static_str(name))
        .with_config_operation(operation)
        .with_value(value.map(StrBytes::from_static_str))
}

fn alter_resource(
    resource_type: i8,
    name: &'static str,
    ops: Vec<AlterableConfig>,
) -> AlterConfigsResource {
    AlterConfigsResource::default()
        .with_resource_type(resource_type)
        .with_resource_name(StrBytes::from_static_str(name))
        .with_configs(ops)
}

/// Alters the topic `topic` with `ops` at `version`; its error code and message.
async fn alter_topic(
    client: &mut Client,
    topic: &'static str,
    ops: Vec<AlterableConfig>,
    (validate_only, version): (bool, i16),
) -> (i16, Option<String>) {
    let request = IncrementalAlterConfigsRequest::default()
        .with_resources(vec![alter_resource(2, topic, ops)])
        .with_validate_only(validate_only);
    let response = client.call(&request, version).await;
    assert_eq!(response.responses.len(), 1);
    let answer = &response.responses[0];
    assert_eq!(
        (answer.resource_type, answer.resource_name.as_str()),
        (2, topic)
    );
    (
        answer.error_code,
        answer.error_message.as_ref().map(ToString::to_string),
    )
}

/// The topic's settings named `keys` as DescribeConfigs reports them: (name, value, source).
async fn described(
    client: &mut Client,
    topic: &'static str,
    keys: &[&'static str],
) -> Vec<(String, String, i8)> {
    let keys = keys
        .iter()
        .map(|key| StrBytes::from_static_str(key))
        .collect();
    let resource = DescribeConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_static_str(topic))
        .with_configuration_keys(Some(keys));
    let request = DescribeConfigsRequest::default().with_resources(vec![resource]);
    let response = client.call(&request, 4).await;
    assert_eq!(response.results[0].error_code, 0);
    response.results[0]
        .configs
        .iter()
        .map(|c| {
            let value = c.value.as_ref().unwrap().to_string();
            (c.name.to_string(), value, c.config_source)
        })
        .collect()
}

fn setting(name: &str, value: &str, source: i8) -> (String, String, i8) {
    (name.to_owned(), value.to_owned(), source)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_configs_sets_and_deletes_a_topics_settings() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "tuned", 2).await;
    for version in [0, 1] {
        let ops = vec![
            op("retention.ms", SET, Some("3600000")),
            op("segment.bytes", SET, Some("1048576")),
        ];
        let answer = alter_topic(&mut client, "tuned", ops, (false, version)).await;
        assert_eq!(answer, (0, None), "v{version}");
    }
    let keys = ["segment.bytes", "retention.ms", "cleanup.policy"];
    assert_eq!(
        described(&mut client, "tuned", &keys).await,
        vec![
            setting("segment.bytes", "1048576", 1),
            setting("retention.ms", "3600000", 1),
            setting("cleanup.policy", "delete", 5),
        ],
        "altered values are the topic's own (DYNAMIC_TOPIC_CONFIG)"
    );
    let config = broker.engine.describe_topic("tuned").unwrap().config;
    assert_eq!(
        (config.retention_ms, config.segment_bytes),
        (3_600_000, 1 << 20)
    );

    let ops = vec![op("retention.ms", DELETE, None)];
    assert_eq!(
        alter_topic(&mut client, "tuned", ops, (false, 1)).await.0,
        0
    );
    assert_eq!(
        described(&mut client, "tuned", &keys).await,
        vec![
            setting("segment.bytes", "1048576", 1),
            setting("retention.ms", "604800000", 5),
            setting("cleanup.policy", "delete", 5),
        ],
        "DELETE goes back to the default (DEFAULT_CONFIG)"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_configs_deletes_back_to_this_brokers_topic_default() {
    let mut config = ServeConfig::default();
    config.set("retention.ms", "86400000").unwrap();
    let broker = Broker::start(config).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "inherits", 1).await;
    let keys = ["retention.ms"];
    let ops = vec![op("retention.ms", SET, Some("1000"))];
    assert_eq!(
        alter_topic(&mut client, "inherits", ops, (false, 1))
            .await
            .0,
        0
    );
    assert_eq!(
        described(&mut client, "inherits", &keys).await,
        vec![setting("retention.ms", "1000", 1)]
    );
    let ops = vec![op("retention.ms", DELETE, None)];
    assert_eq!(
        alter_topic(&mut client, "inherits", ops, (false, 1))
            .await
            .0,
        0
    );
    assert_eq!(
        described(&mut client, "inherits", &keys).await,
        vec![setting("retention.ms", "86400000", 4)],
        "the broker's own topic default (STATIC_BROKER_CONFIG)"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_configs_validate_only_changes_nothing() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "checked", 1).await;
    let ops = || vec![op("retention.ms", SET, Some("1000"))];
    assert_eq!(
        alter_topic(&mut client, "checked", ops(), (true, 1))
            .await
            .0,
        0
    );
    assert_eq!(
        described(&mut client, "checked", &["retention.ms"]).await,
        vec![setting("retention.ms", "604800000", 5)]
    );
    let bad = vec![op("segment.bytes", SET, Some("ten"))];
    let (code, _) = alter_topic(&mut client, "checked", bad, (true, 1)).await;
    assert_eq!(
        code,
        ResponseError::InvalidConfig.code(),
        "validated all the same"
    );
    let (code, _) = alter_topic(&mut client, "nowhere", ops(), (true, 1)).await;
    assert_eq!(code, ResponseError::UnknownTopicOrPartition.code());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_configs_appends_to_and_subtracts_from_the_cleanup_policy() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "policy", 1).await;
    let keys = ["cleanup.policy"];
    let append = vec![op("cleanup.policy", APPEND, Some("compact"))];
    assert_eq!(
        alter_topic(&mut client, "policy", append, (false, 1))
            .await
            .0,
        0
    );
    assert_eq!(
        described(&mut client, "policy", &keys).await,
        vec![setting("cleanup.policy", "compact,delete", 1)]
    );
    let again = vec![op("cleanup.policy", APPEND, Some("delete,compact"))];
    assert_eq!(
        alter_topic(&mut client, "policy", again, (false, 1))
            .await
            .0,
        0
    );
    let subtract = vec![op("cleanup.policy", SUBTRACT, Some("delete"))];
    assert_eq!(
        alter_topic(&mut client, "policy", subtract, (false, 0))
            .await
            .0,
        0
    );
    assert_eq!(
        described(&mut client, "policy", &keys).await,
        vec![setting("cleanup.policy", "compact", 1)]
    );
    let everything = vec![op("cleanup.policy", SUBTRACT, Some("compact"))];
    let (code, _) = alter_topic(&mut client, "policy", everything, (false, 1)).await;
    assert_eq!(
        code,
        ResponseError::InvalidConfig.code(),
        "a policy is needed"
    );
    let scalar = vec![op("retention.ms", APPEND, Some("1"))];
    let (code, message) = alter_topic(&mut client, "policy", scalar, (false, 1)).await;
    assert_eq!(code, ResponseError::InvalidConfig.code(), "{message:?}");
    assert_eq!(
        described(&mut client, "policy", &keys).await,
        vec![setting("cleanup.policy", "compact", 1)],
        "refused changes changed nothing"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_configs_answers_each_resource_with_kafkas_error() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "fine", 1).await;
    create_topic(&mut client, "twice", 1).await;
    create_topic(&mut client, "bad", 1).await;
    let retention = || vec![op("retention.ms", SET, Some("1000"))];
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        alter_resource(2, "fine", retention()),
        alter_resource(2, "missing", retention()),
        alter_resource(2, "twice", retention()),
        alter_resource(2, "twice", retention()),
        alter_resource(4, "0", vec![op("num.partitions", SET, Some("3"))]),
        alter_resource(8, "0", vec![op("kafka.server", SET, Some("DEBUG"))]),
        alter_resource(2, "", retention()),
        alter_resource(2, "__consumer_offsets", retention()),
        alter_resource(2, "bad", vec![op("segment.bytes", SET, Some("ten"))]),
        alter_resource(2, "bad", vec![op("no.such.config", SET, Some("1"))]),
        alter_resource(
            2,
            "fine",
            vec![
                op("retention.ms", SET, Some("1")),
                op("retention.ms", DELETE, None),
            ],
        ),
    ]);
    let response = client.call(&request, 1).await;
    let codes: Vec<(String, i16)> = response
        .responses
        .iter()
        .map(|r| (r.resource_name.to_string(), r.error_code))
        .collect();
    let invalid_request = ResponseError::InvalidRequest.code();
    assert_eq!(
        codes,
        vec![
            ("fine".to_owned(), invalid_request),
            (
                "missing".to_owned(),
                ResponseError::UnknownTopicOrPartition.code()
            ),
            ("twice".to_owned(), invalid_request),
            ("twice".to_owned(), invalid_request),
            ("0".to_owned(), invalid_request),
            ("0".to_owned(), invalid_request),
            (String::new(), invalid_request),
            ("__consumer_offsets".to_owned(), invalid_request),
            ("bad".to_owned(), invalid_request),
            ("bad".to_owned(), invalid_request),
            ("fine".to_owned(), invalid_request),
        ],
        "a resource named twice is refused each time, whatever its operations"
    );
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        alter_resource(2, "fine", retention()),
        alter_resource(2, "missing", retention()),
        alter_resource(2, "twice", vec![op("segment.bytes", SET, Some("ten"))]),
        alter_resource(2, "bad", vec![op("no.such.config", SET, Some("1"))]),
        alter_resource(
            2,
            "__consumer_offsets",
            vec![
                op("retention.ms", SET, Some("1")),
                op("retention.ms", DELETE, None),
            ],
        ),
    ]);
    let response = client.call(&request, 0).await;
    let codes: Vec<i16> = response.responses.iter().map(|r| r.error_code).collect();
    assert_eq!(
        codes,
        vec![
            0,
            ResponseError::UnknownTopicOrPartition.code(),
            ResponseError::InvalidConfig.code(),
            ResponseError::InvalidConfig.code(),
            invalid_request,
        ]
    );
    assert_eq!(
        described(&mut client, "fine", &["retention.ms"]).await,
        vec![setting("retention.ms", "1000", 1)],
        "the valid resource was altered beside the refused ones"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_or_vanished_client_is_closed_without_harm() {
    let mut config = ServeConfig::default();
    config.set("connections.max.idle.ms", "100").unwrap();
    let broker = Broker::start(config).await;
    // Half a frame, then silence: closed once it idles past connections.max.idle.ms.
    let mut staller = broker.client().await;
    tokio::io::AsyncWriteExt::write_all(&mut staller.stream, &[0, 0, 0, 100, 0, 3])
        .await
        .unwrap();
    assert!(staller.is_closed_by_broker().await);
    // Half a frame, then gone.
    let mut vanisher = broker.client().await;
    tokio::io::AsyncWriteExt::write_all(&mut vanisher.stream, &[0, 0, 0, 100, 0, 3])
        .await
        .unwrap();
    drop(vanisher);
    let mut client = broker.client().await;
    create_topic(&mut client, "after", 1).await;
    assert_eq!(produce(&mut client, "after", 0, batch(1, 1)).await, (0, 0));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_max_connections_are_closed() {
    let mut config = ServeConfig::default();
    config.set("max.connections", "1").unwrap();
    let broker = Broker::start(config).await;
    let mut first = broker.client().await;
    create_topic(&mut first, "one", 1).await;
    let mut second = broker.client().await;
    assert!(second.is_closed_by_broker().await);
    assert_eq!(produce(&mut first, "one", 0, batch(1, 1)).await, (0, 0));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_to_an_unknown_topic_or_partition_is_refused() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "known", 1).await;
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    assert_eq!(
        produce(&mut client, "unknown", 0, batch(1, 1)).await.0,
        unknown
    );
    assert_eq!(
        produce(&mut client, "known", 1, batch(1, 1)).await.0,
        unknown
    );
    assert_eq!(
        produce(&mut client, "known", -1, batch(1, 1)).await.0,
        unknown
    );
    assert!(
        broker.engine.describe_topic("unknown").is_err(),
        "produce creates nothing"
    );
    broker.stop().await;
}

/// The soft limit on this process's open files (`/proc/self/limits`), if readable.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_stay_served() {
    const IDLE_CONNECTIONS: usize = 1000;
    let test = "a_thousand_idle_connections_stay_served";
    // Both ends of every connection are in this process, with the engine's files.
    let needed = 2 * IDLE_CONNECTIONS as u64 + 500;
    if open_files_limit().is_none_or(|limit| limit < needed) {
        seglog::testing::skip(test, format!("needs {needed} open files (ulimit -n)"));
        return;
    }
    let broker = Broker::start(ServeConfig::default()).await;
    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for _ in 0..IDLE_CONNECTIONS {
        idle.push(broker.client().await);
    }
    let mut active = broker.client().await;
    create_topic(&mut active, "busy", 1).await;
    assert_eq!(produce(&mut active, "busy", 0, batch(1, 1)).await, (0, 0));
    for client in &mut idle {
        let response = client.call(&ApiVersionsRequest::default(), 0).await;
        assert_eq!(response.error_code, 0);
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_past_the_inline_validation_bound_is_appended_and_fetched_back() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "large", 1).await;
    let value = vec![7u8; 1024];
    let mut builder = seglog::format::BatchBuilder::new(0);
    for i in 0..600 {
        builder.push(&seglog::format::NewRecord {
            timestamp_ms: i,
            key: None,
            value: Some(&value),
            headers: &[],
        });
    }
    let large = builder.build().unwrap();
    assert!(large.len() > 256 * 1024, "past the inline validation bound");
    assert_eq!(
        produce(&mut client, "large", 0, large.clone()).await,
        (0, 0)
    );
    let response = client.call(&fetch_request("large", 0, 0), 12).await;
    assert_eq!(response.responses[0].partitions[0].records, Some(large));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_server_does_not_wait_for_a_long_poll_fetch() {
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "waiting", 1).await;
    // Answered after a day unless the stop cuts the wait short: `stop` returns only once every
    // connection finished, so a stop that waited would hang this test.
    let request = fetch_request("waiting", 0, 0).with_max_wait_ms(86_400_000);
    let correlation_id = client.send(&request, 12).await;
    // Most likely the fetch is parked by now (nothing here can tell for sure); if its frame was
    // not read yet, the stop closes the connection unanswered instead.
    let mut other = broker.client().await;
    metadata(&mut other, &["waiting"], false).await;
    broker.stop().await;
    if let Some(mut frame) = client.receive_frame().await {
        let header = ResponseHeader::decode(&mut frame, 1).unwrap();
        assert_eq!(header.correlation_id, correlation_id);
        let response = FetchResponse::decode(&mut frame, 12).unwrap();
        let partition = &response.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0);
        assert_eq!(partition.records.as_ref().map(Bytes::len), Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_server_does_not_wait_for_a_client_that_stopped_reading() {
    const BATCH_COUNT: i64 = 32;
    let broker = Broker::start(ServeConfig::default()).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "unread", 1).await;
    let value = vec![1u8; 1000];
    for batch_index in 0..BATCH_COUNT {
        let mut builder = seglog::format::BatchBuilder::new(0);
        for i in 0..900 {
            builder.push(&seglog::format::NewRecord {
                timestamp_ms: i,
                key: None,
                value: Some(&value),
                headers: &[],
            });
        }
        let appended = produce(&mut client, "unread", 0, builder.build().unwrap()).await;
        assert_eq!(appended, (0, batch_index * 900));
    }
    // One response of about 30 MB that nobody reads: more than the sockets buffer, so the server
    // blocks writing it; `stop` returns only once every connection finished.
    let mut request = fetch_request("unread", 0, 0);
    request.topics[0].partitions[0].partition_max_bytes = i32::MAX;
    client.send(&request, 12).await;
    let mut other = broker.client().await;
    metadata(&mut other, &["unread"], false).await;
    broker.stop().await;
}
