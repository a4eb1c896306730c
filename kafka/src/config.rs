//! The broker's settings, under Kafka's broker-config names, and the defaults of the topics it
//! creates, under Kafka's topic-config names.

use seglog::config::ConfigError as TopicConfigError;
use seglog::config::LogConfig;
use thiserror::Error;

/// How [`serve`](crate::serve) answers. `Default` is Kafka's defaults for a single broker.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    /// This broker's id (`node.id`, or `broker.id`), named as every partition's leader.
    pub broker_id: i32,
    /// The cluster id Metadata reports (`cluster.id`).
    pub cluster_id: String,
    /// The host and port Metadata gives clients to connect to (`advertised.listeners`, as
    /// `PLAINTEXT://HOST:PORT`); `None`: the listener's own address.
    pub advertised_listener: Option<(String, u16)>,
    /// Whether Metadata for an unknown topic creates it (`auto.create.topics.enable`).
    pub auto_create_topics_enable: bool,
    /// The partition count of a topic created without one (`num.partitions`).
    pub num_partitions: u32,
    /// The largest request frame accepted; a larger one closes the connection
    /// (`socket.request.max.bytes`).
    pub socket_request_max_bytes: u32,
    /// A connection that sends no whole request for this long is closed
    /// (`connections.max.idle.ms`).
    pub connections_max_idle_ms: u64,
    /// Connections served at once; more are closed as they arrive (`max.connections`).
    pub max_connections: usize,
    /// The configuration of a topic created without overrides: every setting not named above is
    /// a topic config (`retention.ms`, `segment.bytes`, ...) for the topics this broker creates.
    pub topic_defaults: LogConfig,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            broker_id: 0,
            cluster_id: "seglog".to_owned(),
            advertised_listener: None,
            auto_create_topics_enable: true,
            num_partitions: 1,
            socket_request_max_bytes: 100 * 1024 * 1024,
            connections_max_idle_ms: 10 * 60 * 1000,
            max_connections: 4096,
            topic_defaults: LogConfig::default(),
        }
    }
}

/// A setting that [`ServeConfig::set`] refuses.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The value does not parse as the setting's type, or is out of its range.
    #[error("invalid value {value:?} for {key}: {reason}")]
    InvalidValue {
        /// The setting's name.
        key: String,
        /// The value given.
        value: String,
        /// What the setting accepts.
        reason: &'static str,
    },
    /// Not a broker setting, and the topic configuration refuses it.
    #[error("invalid topic default {key}={value}: {source}")]
    TopicDefault {
        /// The setting's name.
        key: String,
        /// The value given.
        value: String,
        /// Why the topic configuration refuses it.
        #[source]
        source: TopicConfigError,
    },
}

impl ServeConfig {
    /// Applies one setting: a broker setting by its Kafka name, else a topic default.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let invalid = |reason| ConfigError::InvalidValue {
            key: key.to_owned(),
            value: value.to_owned(),
            reason,
        };
        match key {
            "node.id" | "broker.id" => {
                self.broker_id = parse_in(value, 0..=i32::MAX).ok_or(invalid("0 to 2^31-1"))?;
            }
            "cluster.id" => self.cluster_id = value.to_owned(),
            "advertised.listeners" => {
                let listener = parse_listener(value).ok_or(invalid("PLAINTEXT://HOST:PORT"))?;
                self.advertised_listener = Some(listener);
            }
            "auto.create.topics.enable" => {
                self.auto_create_topics_enable =
                    value.parse().ok().ok_or(invalid("true or false"))?;
            }
            "num.partitions" => {
                self.num_partitions = parse_in(value, 1..=u32::MAX).ok_or(invalid("at least 1"))?;
            }
            "socket.request.max.bytes" => {
                self.socket_request_max_bytes =
                    parse_in(value, 1..=i32::MAX as u32).ok_or(invalid("1 to 2^31-1"))?;
            }
            "connections.max.idle.ms" => {
                self.connections_max_idle_ms =
                    parse_in(value, 1..=u64::MAX).ok_or(invalid("at least 1"))?;
            }
            "max.connections" => {
                self.max_connections =
                    parse_in(value, 1..=usize::MAX).ok_or(invalid("at least 1"))?;
            }
            _ => self.set_topic_default(key, value)?,
        }
        Ok(())
    }

    fn set_topic_default(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        self.topic_defaults
            .set(key, value)
            .map_err(|source| ConfigError::TopicDefault {
                key: key.to_owned(),
                value: value.to_owned(),
                source,
            })
    }
}

fn parse_in<T: std::str::FromStr + PartialOrd>(
    value: &str,
    range: std::ops::RangeInclusive<T>,
) -> Option<T> {
    value.parse().ok().filter(|parsed| range.contains(parsed))
}

/// `PLAINTEXT://HOST:PORT` (one listener: this broker has no other security protocol).
fn parse_listener(value: &str) -> Option<(String, u16)> {
    let address = value.strip_prefix("PLAINTEXT://")?;
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return None;
    }
    Some((host.to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_settings_and_topic_defaults_are_told_apart() {
        let mut config = ServeConfig::default();
        config.set("num.partitions", "3").unwrap();
        config.set("auto.create.topics.enable", "false").unwrap();
        config
            .set("advertised.listeners", "PLAINTEXT://kafka.local:19092")
            .unwrap();
        config.set("retention.ms", "1000").unwrap();
        assert_eq!(config.num_partitions, 3);
        assert!(!config.auto_create_topics_enable);
        assert_eq!(
            config.advertised_listener,
            Some(("kafka.local".to_owned(), 19092))
        );
        assert_eq!(config.topic_defaults.retention_ms, 1000);
    }

    #[test]
    fn out_of_range_and_unknown_settings_are_refused() {
        let mut config = ServeConfig::default();
        assert!(config.set("num.partitions", "0").is_err());
        assert!(config.set("socket.request.max.bytes", "-1").is_err());
        assert!(
            config
                .set("advertised.listeners", "SASL_SSL://host:1")
                .is_err()
        );
        assert!(config.set("no.such.setting", "1").is_err());
        assert_eq!(config, ServeConfig::default());
    }
}
