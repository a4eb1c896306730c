//! DescribeConfigs: a topic's settings (its overrides as `DYNAMIC_TOPIC_CONFIG`, the rest as
//! `STATIC_BROKER_CONFIG` where this broker's topic defaults differ from Kafka's, else
//! `DEFAULT_CONFIG`), and this broker's own settings (read-only, `STATIC_BROKER_CONFIG`). Kafka's
//! config types and documentation are not reported (`UNKNOWN`, null).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
};
use kafka_protocol::protocol::StrBytes;
use seglog::config::LogConfig;

use crate::broker::Broker;
use crate::error_code;

/// Kafka's `ConfigResource.Type.TOPIC` and `BROKER`.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// Kafka's `ConfigSource` values.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// One setting as reported: name, value, source, read-only.
type Setting = (String, String, i8, bool);

pub(crate) async fn answer(
    broker: &Broker,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut results = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let result = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        results.push(match settings(broker, resource).await {
            Ok(settings) => result.with_configs(selected(resource, settings)),
            Err((error, message)) => result
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(message))),
        });
    }
    DescribeConfigsResponse::default().with_results(results)
}

async fn settings(
    broker: &Broker,
    resource: &DescribeConfigsResource,
) -> Result<Vec<Setting>, (ResponseError, String)> {
    match resource.resource_type {
        RESOURCE_TOPIC => {
            let topic = resource.resource_name.to_string();
            let described = broker
                .blocking(move |engine| engine.describe_topic(&topic))
                .await
                .map_err(|error| (error, "the engine call failed".to_owned()))?
                .map_err(|error| (error_code::topic_error(&error), error.to_string()))?;
            let sources = ConfigSources::new(&broker.config.topic_defaults);
            Ok(topic_settings(&described.config, &sources))
        }
        RESOURCE_BROKER if is_this_broker(broker, &resource.resource_name) => {
            Ok(broker_settings(broker))
        }
        RESOURCE_BROKER => Err((
            ResponseError::InvalidRequest,
            format!("this is broker {}", broker.config.broker_id),
        )),
        other => Err((
            ResponseError::InvalidRequest,
            format!("resource type {other} is not described"),
        )),
    }
}

/// The broker named by its id, or the empty name (the cluster-wide defaults) of this, the only
/// broker.
fn is_this_broker(broker: &Broker, name: &StrBytes) -> bool {
    name.is_empty() || name.as_str() == broker.config.broker_id.to_string()
}

/// Where each of a topic's settings comes from, as Kafka reports it. The topic registry keeps
/// every setting's value, not which ones were given: a value other than the one this broker
/// gives a topic without overrides is the topic's own (`DYNAMIC_TOPIC_CONFIG`); the broker's
/// value is its setting (`STATIC_BROKER_CONFIG`) where it differs from Kafka's default, else
/// Kafka's default (`DEFAULT_CONFIG`).
pub(crate) struct ConfigSources {
    broker: Vec<(&'static str, String)>,
    kafka: Vec<(&'static str, String)>,
}

impl ConfigSources {
    pub(crate) fn new(topic_defaults: &LogConfig) -> ConfigSources {
        ConfigSources {
            broker: topic_defaults.to_pairs(),
            kafka: LogConfig::default().to_pairs(),
        }
    }

    /// The source of `key=value` in a topic's configuration.
    pub(crate) fn of(&self, key: &'static str, value: &str) -> i8 {
        let is_in = |pairs: &[(&'static str, String)]| {
            pairs
                .iter()
                .any(|(known, known_value)| *known == key && known_value == value)
        };
        match (is_in(&self.broker), is_in(&self.kafka)) {
            (false, _) => SOURCE_DYNAMIC_TOPIC,
            (true, false) => SOURCE_STATIC_BROKER,
            (true, true) => SOURCE_DEFAULT,
        }
    }
}

fn topic_settings(config: &LogConfig, sources: &ConfigSources) -> Vec<Setting> {
    config
        .to_pairs()
        .into_iter()
        .map(|(key, value)| {
            let source = sources.of(key, &value);
            (key.to_owned(), value, source, false)
        })
        .collect()
}

fn broker_settings(broker: &Broker) -> Vec<Setting> {
    let config = &broker.config;
    let listener = format!("PLAINTEXT://{}:{}", broker.host.as_str(), broker.port);
    [
        ("node.id", config.broker_id.to_string()),
        ("advertised.listeners", listener),
        (
            "auto.create.topics.enable",
            config.auto_create_topics_enable.to_string(),
        ),
        ("num.partitions", config.num_partitions.to_string()),
        (
            "socket.request.max.bytes",
            config.socket_request_max_bytes.to_string(),
        ),
        (
            "connections.max.idle.ms",
            config.connections_max_idle_ms.to_string(),
        ),
        ("max.connections", config.max_connections.to_string()),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value, SOURCE_STATIC_BROKER, true))
    .collect()
}

/// The settings the request names (all of them when it names none).
fn selected(
    resource: &DescribeConfigsResource,
    settings: Vec<Setting>,
) -> Vec<DescribeConfigsResourceResult> {
    settings
        .into_iter()
        .filter(|(key, ..)| {
            resource
                .configuration_keys
                .as_ref()
                .is_none_or(|keys| keys.iter().any(|wanted| wanted.as_str() == key))
        })
        .map(|(key, value, source, read_only)| {
            DescribeConfigsResourceResult::default()
                .with_name(StrBytes::from_string(key))
                .with_value(Some(StrBytes::from_string(value)))
                .with_config_source(source)
                .with_read_only(read_only)
        })
        .collect()
}
