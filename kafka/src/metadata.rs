//! Metadata: this broker, the only one, leads every partition. A request for an unknown topic
//! creates it when `auto.create.topics.enable` is on and the client allows it (Metadata 4+), as
//! Kafka does.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::TopicName as WireTopicName;
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::metadata_response::{
    MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::protocol::StrBytes;
use seglog::config::LogConfig;
use seglog::engine::{Engine, is_internal_topic};
use seglog::error::TopicError;

use crate::broker::{Broker, partition_count};
use crate::error_code;

pub(crate) async fn answer(
    broker: &Broker,
    request: MetadataRequest,
    version: i16,
) -> MetadataResponse {
    let topics = match requested_topics(&request, version) {
        None => all_topics(broker).await,
        Some(names) => {
            let auto_create = broker.config.auto_create_topics_enable
                && (version < 4 || request.allow_auto_topic_creation);
            let known = broker.blocking(partition_counts).await.unwrap_or_default();
            let mut topics = Vec::with_capacity(names.len());
            for name in names {
                topics.push(named_topic(broker, &known, name, auto_create).await);
            }
            topics
        }
    };
    MetadataResponse::default()
        .with_brokers(vec![this_broker(broker)])
        .with_cluster_id(Some(StrBytes::from_string(
            broker.config.cluster_id.clone(),
        )))
        .with_controller_id(broker.broker_id())
        .with_topics(topics)
}

/// The topics asked for by name; `None`: every topic (a null list, or an empty one in version
/// 0). A topic asked for by id only has no name here, and is answered as unknown.
fn requested_topics(request: &MetadataRequest, version: i16) -> Option<Vec<Option<StrBytes>>> {
    let topics = request.topics.as_ref()?;
    if version == 0 && topics.is_empty() {
        return None;
    }
    Some(
        topics
            .iter()
            .map(|topic| topic.name.as_ref().map(|name| name.0.clone()))
            .collect(),
    )
}

fn this_broker(broker: &Broker) -> MetadataResponseBroker {
    MetadataResponseBroker::default()
        .with_node_id(broker.broker_id())
        .with_host(broker.host.clone())
        .with_port(broker.port)
}

async fn all_topics(broker: &Broker) -> Vec<MetadataResponseTopic> {
    match broker.blocking(|engine| engine.list_topics()).await {
        Ok(topics) => topics
            .into_iter()
            .map(|(topic, metadata)| {
                let name = StrBytes::from_string(topic.to_string());
                topic_entry(broker, name, metadata.partition_count)
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

async fn named_topic(
    broker: &Broker,
    known: &BTreeMap<String, u32>,
    name: Option<StrBytes>,
    auto_create: bool,
) -> MetadataResponseTopic {
    let Some(name) = name else {
        return MetadataResponseTopic::default()
            .with_name(None)
            .with_error_code(ResponseError::UnknownTopicId.code());
    };
    let found = match known.get(name.as_str()) {
        Some(count) => Ok(*count),
        None if auto_create && !is_internal_topic(&name) => {
            let creation = TopicCreation {
                topic: name.to_string(),
                partition_count: broker.config.num_partitions,
                config: broker.config.topic_defaults.clone(),
            };
            broker
                .blocking(move |engine| creation.create(engine))
                .await
                .and_then(|created| created)
        }
        None => Err(ResponseError::UnknownTopicOrPartition),
    };
    match found {
        Ok(count) => topic_entry(broker, name, count),
        Err(error) => MetadataResponseTopic::default()
            .with_name(Some(WireTopicName(name)))
            .with_error_code(error.code()),
    }
}

/// Every topic's partition count, by name.
fn partition_counts(engine: &Engine) -> BTreeMap<String, u32> {
    engine
        .list_topics()
        .into_iter()
        .map(|(topic, metadata)| (topic.to_string(), metadata.partition_count))
        .collect()
}

/// How Metadata creates a topic it names (`num.partitions`, the topic defaults).
struct TopicCreation {
    topic: String,
    partition_count: u32,
    config: LogConfig,
}

impl TopicCreation {
    /// The new topic's partition count; a topic another connection created meanwhile is
    /// answered as found.
    fn create(self, engine: &Engine) -> Result<u32, ResponseError> {
        let topic = self.topic.as_str();
        match engine.create_topic(topic, self.partition_count, self.config) {
            Ok(_) => {
                tracing::info!(
                    "created topic {topic} ({} partitions) for Metadata",
                    self.partition_count
                );
                Ok(self.partition_count)
            }
            Err(TopicError::TopicExists { .. }) => {
                partition_count(engine, topic).ok_or(ResponseError::UnknownTopicOrPartition)
            }
            Err(error) => Err(error_code::topic_error(&error)),
        }
    }
}

fn topic_entry(broker: &Broker, name: StrBytes, partition_count: u32) -> MetadataResponseTopic {
    let leader = broker.broker_id();
    let partitions = (0..partition_count)
        .filter_map(|partition| i32::try_from(partition).ok())
        .map(|partition| {
            MetadataResponsePartition::default()
                .with_partition_index(partition)
                .with_leader_id(leader)
                .with_leader_epoch(0)
                .with_replica_nodes(vec![leader])
                .with_isr_nodes(vec![leader])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_is_internal(is_internal_topic(&name))
        .with_name(Some(WireTopicName(name)))
        .with_partitions(partitions)
}
