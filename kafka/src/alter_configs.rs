//! IncrementalAlterConfigs: a topic's settings changed through the engine
//! (`Engine::update_topic_config`), which applies them to the partitions' live logs and keeps
//! them in its topic registry. Each operation is Kafka's: `SET` a value, `DELETE` it (back to
//! this broker's topic default), `APPEND` to or `SUBTRACT` from a list (`cleanup.policy`, the
//! only list among the topic settings); a resource's operations apply together or not at all.
//! `validate_only` checks them against the topic's settings and changes nothing.
//!
//! Refused per resource, as Kafka 3.9 refuses them (`ConfigAdminManager.preprocess`, then the
//! controller's `ConfigurationControlManager`): a resource named twice, a key named twice in a
//! resource, a null value outside `DELETE`, an unknown operation, the empty (default) topic name
//! and a resource type other than a topic are `INVALID_REQUEST` (this broker's own settings are
//! static: `seglog serve` reads them at its start); an unknown key, an invalid value and an
//! `APPEND` or `SUBTRACT` on a setting that is not a list are `INVALID_CONFIG`; an unknown topic
//! is `UNKNOWN_TOPIC_OR_PARTITION`; the internal `__consumer_offsets`, which only the group
//! coordinator manages, is `INVALID_REQUEST`.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
};
use kafka_protocol::messages::incremental_alter_configs_response::{
    AlterConfigsResourceResponse, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use seglog::config::{ConfigChange, ConfigError, LogConfig};
use seglog::engine::{Engine, is_internal_topic};
use seglog::error::TopicError;
use seglog::types::TopicName;

use crate::broker::Broker;
use crate::error_code;

/// Kafka's `ConfigResource.Type.TOPIC` and `BROKER`.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

/// Kafka's `AlterConfigOp.OpType` ids.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// A resource refused, with its code and why.
type Refusal = (ResponseError, String);

/// One operation of a resource, checked and owned (it travels to the blocking pool).
struct Operation {
    op: i8,
    key: String,
    value: String,
}

impl Operation {
    fn change(&self) -> ConfigChange<'_> {
        let (key, value) = (self.key.as_str(), self.value.as_str());
        match self.op {
            OP_SET => ConfigChange::Set { key, value },
            OP_APPEND => ConfigChange::Append { key, value },
            OP_SUBTRACT => ConfigChange::Subtract { key, value },
            // `operations` let only the four known ones through.
            _ => ConfigChange::Reset { key },
        }
    }
}

pub(crate) async fn answer(
    broker: &Broker,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut named: BTreeMap<(i8, &str), usize> = BTreeMap::new();
    for resource in &request.resources {
        *named
            .entry((resource.resource_type, resource.resource_name.as_str()))
            .or_default() += 1;
    }
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let twice = named
            .get(&(resource.resource_type, resource.resource_name.as_str()))
            .is_some_and(|count| *count > 1);
        let outcome = match twice {
            true => Err((
                ResponseError::InvalidRequest,
                "Each resource must appear at most once.".to_owned(),
            )),
            false => alter(broker, resource, request.validate_only).await,
        };
        let response = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        responses.push(match outcome {
            Ok(()) => response.with_error_message(None),
            Err((error, message)) => response
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(message))),
        });
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

async fn alter(
    broker: &Broker,
    resource: &AlterConfigsResource,
    validate_only: bool,
) -> Result<(), Refusal> {
    let operations = operations(&resource.configs)?;
    match resource.resource_type {
        RESOURCE_TOPIC => {}
        RESOURCE_BROKER => {
            let message = "this broker's settings are static (`seglog serve` reads them at its \
                           start); only topic configs can be altered";
            return Err((ResponseError::InvalidRequest, message.to_owned()));
        }
        other => {
            let message = format!("resource type {other} cannot be altered here, only topics (2)");
            return Err((ResponseError::InvalidRequest, message));
        }
    }
    if resource.resource_name.is_empty() {
        let message = "Default topic resources are not allowed.".to_owned();
        return Err((ResponseError::InvalidRequest, message));
    }
    let topic = resource.resource_name.to_string();
    let defaults = broker.config.topic_defaults.clone();
    broker
        .blocking(move |engine| {
            let changes: Vec<ConfigChange<'_>> = operations.iter().map(Operation::change).collect();
            let alter = |current: &LogConfig| current.altered(&changes, &defaults);
            match validate_only {
                true => validate_alteration(engine, &topic, alter),
                false => engine.update_topic_config(&topic, alter),
            }
        })
        .await
        .map_err(|error| (error, "the engine call failed".to_owned()))?
        .map(drop)
        .map_err(|error| (error_code::topic_error(&error), error.to_string()))
}

/// The resource's operations, once none repeats a key, has a null value outside `DELETE` or an
/// unknown operation (Kafka's checks before it reads any setting, in its order).
fn operations(configs: &[AlterableConfig]) -> Result<Vec<Operation>, Refusal> {
    let mut keys: BTreeMap<&str, usize> = BTreeMap::new();
    for config in configs {
        *keys.entry(config.name.as_str()).or_default() += 1;
    }
    if keys.values().any(|count| *count > 1) {
        let message = "Error due to duplicate config keys".to_owned();
        return Err((ResponseError::InvalidRequest, message));
    }
    let null_updates: Vec<&str> = configs
        .iter()
        .filter(|config| config.config_operation != OP_DELETE && config.value.is_none())
        .map(|config| config.name.as_str())
        .collect();
    if !null_updates.is_empty() {
        let message = format!("Null value not supported for : {}", null_updates.join(", "));
        return Err((ResponseError::InvalidRequest, message));
    }
    configs
        .iter()
        .map(|config| match config.config_operation {
            OP_SET | OP_DELETE | OP_APPEND | OP_SUBTRACT => Ok(Operation {
                op: config.config_operation,
                key: config.name.to_string(),
                value: config
                    .value
                    .as_ref()
                    .map_or_else(String::new, ToString::to_string),
            }),
            other => Err((
                ResponseError::InvalidRequest,
                format!("Unknown operation type {other} for config {}", config.name),
            )),
        })
        .collect()
}

/// What `update_topic_config` would refuse, without changing the topic.
fn validate_alteration(
    engine: &Engine,
    topic: &str,
    alter: impl FnOnce(&LogConfig) -> Result<LogConfig, ConfigError>,
) -> Result<LogConfig, TopicError> {
    let name = TopicName::parse(topic)?;
    if is_internal_topic(topic) {
        return Err(TopicError::InternalTopic {
            topic: topic.to_owned(),
        });
    }
    let current = engine
        .list_topics()
        .into_iter()
        .find(|(known, _)| *known == name)
        .map(|(_, metadata)| metadata.config)
        .ok_or_else(|| TopicError::UnknownTopic {
            topic: topic.to_owned(),
        })?;
    Ok(alter(&current)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &'static str, op: i8, value: Option<&'static str>) -> AlterableConfig {
        AlterableConfig::default()
            .with_name(StrBytes::from_static_str(name))
            .with_config_operation(op)
            .with_value(value.map(StrBytes::from_static_str))
    }

    #[test]
    fn repeated_keys_null_values_and_unknown_operations_are_invalid_requests() {
        let refused = |configs: &[AlterableConfig]| match operations(configs) {
            Ok(_) => panic!("accepted"),
            Err((error, message)) => (error, message),
        };
        let twice = refused(&[
            config("retention.ms", OP_SET, Some("1")),
            config("retention.ms", OP_DELETE, None),
        ]);
        assert_eq!(
            twice,
            (
                ResponseError::InvalidRequest,
                "Error due to duplicate config keys".to_owned()
            )
        );
        let nulls = refused(&[
            config("a", OP_SET, None),
            config("b", OP_DELETE, None),
            config("c", OP_APPEND, None),
        ]);
        assert_eq!(nulls.1, "Null value not supported for : a, c");
        let unknown = refused(&[config("retention.ms", 7, Some("1"))]);
        assert_eq!(unknown.0, ResponseError::InvalidRequest);
        let accepted = operations(&[
            config("retention.ms", OP_DELETE, None),
            config("cleanup.policy", OP_APPEND, Some("compact")),
        ])
        .unwrap();
        let changes: Vec<ConfigChange<'_>> = accepted.iter().map(Operation::change).collect();
        assert_eq!(
            changes,
            vec![
                ConfigChange::Reset {
                    key: "retention.ms"
                },
                ConfigChange::Append {
                    key: "cleanup.policy",
                    value: "compact"
                },
            ]
        );
    }
}
