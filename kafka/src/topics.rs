//! CreateTopics, DeleteTopics and CreatePartitions, through the engine's blocking topic
//! administration (on tokio's blocking pool). One broker: a replication factor other than 1 (or
//! -1, the default) and a replica assignment naming another broker are refused.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsRequest, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_partitions_response::{
    CreatePartitionsResponse, CreatePartitionsTopicResult,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicsRequest;
use kafka_protocol::messages::delete_topics_response::{
    DeletableTopicResult, DeleteTopicsResponse,
};
use kafka_protocol::messages::{BrokerId, TopicName as WireTopicName};
use kafka_protocol::protocol::StrBytes;
use seglog::config::LogConfig;
use seglog::engine::Engine;
use seglog::error::TopicError;

use crate::broker::{Broker, partition_count};
use crate::describe_configs::ConfigSources;
use crate::error_code;

/// A topic request refused, with its code and why.
type Refusal = (ResponseError, String);

pub(crate) async fn create(
    broker: &Broker,
    request: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut name_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for topic in &request.topics {
        *name_counts.entry(topic.name.0.as_str()).or_default() += 1;
    }
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let duplicated = name_counts
            .get(topic.name.0.as_str())
            .is_some_and(|count| *count > 1);
        let result = CreatableTopicResult::default().with_name(topic.name.clone());
        let outcome = match duplicated {
            true => Err((
                ResponseError::InvalidRequest,
                "topic named twice".to_owned(),
            )),
            false => create_one(broker, topic, request.validate_only).await,
        };
        results.push(match outcome {
            Ok((partition_count, config)) => {
                created(broker, result, (partition_count, &config), version)
            }
            Err((error, message)) => result
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(message))),
        });
    }
    CreateTopicsResponse::default().with_topics(results)
}

async fn create_one(
    broker: &Broker,
    topic: &CreatableTopic,
    validate_only: bool,
) -> Result<(u32, LogConfig), Refusal> {
    if !matches!(topic.replication_factor, -1 | 1) {
        let message = "this broker is the only one: replication factor 1".to_owned();
        return Err((ResponseError::InvalidReplicationFactor, message));
    }
    let partition_count = requested_partition_count(broker, topic)?;
    let mut config = broker.config.topic_defaults.clone();
    for setting in &topic.configs {
        let value = setting.value.as_ref().map_or("", |value| value.as_str());
        config
            .set(&setting.name, value)
            .map_err(|error| (ResponseError::InvalidConfig, error.to_string()))?;
    }
    if validate_only {
        return Ok((partition_count, config));
    }
    let name = topic.name.0.to_string();
    let given = config.clone();
    broker
        .blocking(move |engine| engine.create_topic(&name, partition_count, given))
        .await
        .map_err(|error| (error, "the engine call failed".to_owned()))?
        .map_err(|error| (error_code::topic_error(&error), error.to_string()))?;
    Ok((partition_count, config))
}

/// The partition count asked for: `num_partitions`, `num.partitions` when -1, or the size of
/// a replica assignment, whose every partition must be on this broker alone.
fn requested_partition_count(broker: &Broker, topic: &CreatableTopic) -> Result<u32, Refusal> {
    if !topic.assignments.is_empty() {
        if topic.num_partitions != -1 {
            let message = "both a partition count and an assignment".to_owned();
            return Err((ResponseError::InvalidRequest, message));
        }
        let only_here = topic
            .assignments
            .iter()
            .all(|assignment| is_this_broker(broker, &assignment.broker_ids));
        if !only_here {
            return Err((
                ResponseError::InvalidReplicaAssignment,
                assignment_message(broker),
            ));
        }
        return u32::try_from(topic.assignments.len()).ok().ok_or((
            ResponseError::InvalidPartitions,
            "too many partitions".to_owned(),
        ));
    }
    match topic.num_partitions {
        -1 => Ok(broker.config.num_partitions),
        count => u32::try_from(count).ok().filter(|count| *count > 0).ok_or((
            ResponseError::InvalidPartitions,
            format!("{count} partitions"),
        )),
    }
}

fn is_this_broker(broker: &Broker, broker_ids: &[BrokerId]) -> bool {
    broker_ids == [broker.broker_id()]
}

fn assignment_message(broker: &Broker) -> String {
    format!(
        "every partition's replicas must be [{}], the only broker",
        broker.config.broker_id
    )
}

fn created(
    broker: &Broker,
    result: CreatableTopicResult,
    (partition_count, config): (u32, &LogConfig),
    version: i16,
) -> CreatableTopicResult {
    if version < 5 {
        return result;
    }
    let sources = ConfigSources::new(&broker.config.topic_defaults);
    let configs = config
        .to_pairs()
        .into_iter()
        .map(|(key, value)| {
            let source = sources.of(key, &value);
            CreatableTopicConfigs::default()
                .with_name(StrBytes::from_static_str(key))
                .with_value(Some(StrBytes::from_string(value)))
                .with_config_source(source)
        })
        .collect();
    result
        .with_num_partitions(i32::try_from(partition_count).unwrap_or(i32::MAX))
        .with_replication_factor(1)
        .with_configs(Some(configs))
}

pub(crate) async fn delete(broker: &Broker, request: DeleteTopicsRequest) -> DeleteTopicsResponse {
    // Versions 0-5 name topics in `topic_names`; 6 in `topics`, by name or by id.
    let names: Vec<Option<WireTopicName>> = match request.topic_names.is_empty() {
        false => request.topic_names.into_iter().map(Some).collect(),
        true => request.topics.into_iter().map(|topic| topic.name).collect(),
    };
    let mut responses = Vec::with_capacity(names.len());
    for name in names {
        let result = DeletableTopicResult::default().with_name(name.clone());
        let Some(name) = name else {
            responses.push(result.with_error_code(ResponseError::UnknownTopicId.code()));
            continue;
        };
        let topic = name.0.to_string();
        let deleted = broker
            .blocking(move |engine| engine.delete_topic(&topic))
            .await
            .and_then(|deleted| deleted.map_err(|error| error_code::topic_error(&error)));
        responses.push(match deleted {
            Ok(()) => result,
            Err(error) => result.with_error_code(error.code()),
        });
    }
    DeleteTopicsResponse::default().with_responses(responses)
}

pub(crate) async fn create_partitions(
    broker: &Broker,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        results.push(match grow(broker, topic, request.validate_only).await {
            Ok(()) => result,
            Err((error, message)) => result
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(message))),
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}

async fn grow(
    broker: &Broker,
    topic: &CreatePartitionsTopic,
    validate_only: bool,
) -> Result<(), Refusal> {
    let only_here = topic
        .assignments
        .iter()
        .flatten()
        .all(|assignment| is_this_broker(broker, &assignment.broker_ids));
    if !only_here {
        return Err((
            ResponseError::InvalidReplicaAssignment,
            assignment_message(broker),
        ));
    }
    let count = u32::try_from(topic.count).ok().ok_or((
        ResponseError::InvalidPartitions,
        format!("{} partitions", topic.count),
    ))?;
    let name = topic.name.0.to_string();
    broker
        .blocking(move |engine| match validate_only {
            true => validate_growth(engine, &name, count),
            false => engine.add_partitions(&name, count),
        })
        .await
        .map_err(|error| (error, "the engine call failed".to_owned()))?
        .map_err(|error| (error_code::topic_error(&error), error.to_string()))
}

/// What `add_partitions` would refuse, without growing the topic.
fn validate_growth(engine: &Engine, topic: &str, count: u32) -> Result<(), TopicError> {
    let current = partition_count(engine, topic).ok_or_else(|| TopicError::UnknownTopic {
        topic: topic.to_owned(),
    })?;
    match count > current {
        true => Ok(()),
        false => Err(TopicError::InvalidPartitionCount {
            topic: topic.to_owned(),
            current,
            requested: count,
        }),
    }
}
