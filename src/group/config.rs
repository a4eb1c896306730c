//! A consumer's configuration, with Kafka's consumer-config names and, where they make sense in
//! process, Kafka's defaults ([`ConsumerConfig`]).
//!
//! Kafka settings that describe a network client (`bootstrap.servers`, `session.timeout.ms`,
//! `heartbeat.interval.ms`, ...) are refused by [`ConsumerConfig::set`] rather than silently
//! ignored: in process a member has no heartbeat. It is live while it polls at least every
//! `max.poll.interval.ms` (a poll that waits for records counts as polling throughout), and it
//! leaves its group when it is closed or dropped.

use crate::config::ConfigError;

use super::assignor::AssignmentStrategy;

/// Where a consumer starts in a partition that has no committed offset for its group, or whose
/// position fell out of the log (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    /// The log start offset.
    Earliest,
    /// The log end offset: only records appended from now on (Kafka's default).
    #[default]
    Latest,
    /// No reset: `poll` and `position` answer an error.
    None,
}

impl AutoOffsetReset {
    /// The `auto.offset.reset` value: `earliest`, `latest` or `none`.
    pub fn name(self) -> &'static str {
        match self {
            AutoOffsetReset::Earliest => "earliest",
            AutoOffsetReset::Latest => "latest",
            AutoOffsetReset::None => "none",
        }
    }
}

/// Configuration of one consumer. Field names are Kafka's, units last.
#[derive(Debug, Clone, PartialEq, Eq, derive_setters::Setters)]
#[setters(prefix = "with_")]
#[non_exhaustive]
pub struct ConsumerConfig {
    /// `group.id`: the group the consumer joins when it subscribes.
    pub group_id: String,
    /// `client.id`: member ids are `<client.id>-<n>`, `n` counting the members this coordinator
    /// has seen join with that client id, from 0 (as Kafka's old consumer named its threads `C1-0`).
    pub client_id: String,
    /// `partition.assignment.strategy`: fixed for a group by its first member; a member asking for
    /// another cannot join while the group has members.
    pub partition_assignment_strategy: AssignmentStrategy,
    /// `auto.offset.reset`.
    pub auto_offset_reset: AutoOffsetReset,
    /// `enable.auto.commit`: commit the positions of owned partitions every
    /// `auto.commit.interval.ms` (in `poll`), before partitions are revoked, and at `close`.
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms`.
    pub auto_commit_interval_ms: u64,
    /// `max.poll.interval.ms`: a member that does not poll for this long is removed from its group
    /// and its partitions are reassigned; its later commits are refused. Keep it well above
    /// `fetch.max.wait.ms`, the longest a waiting poll goes without looking at its group.
    pub max_poll_interval_ms: u64,
    /// `max.poll.records`: the most records one `poll` returns.
    pub max_poll_records: usize,
    /// `fetch.max.bytes`: bounds the bytes one round of fetches asks for across partitions (and the
    /// bytes of keys, values and headers one `poll` returns, one record always excepted).
    pub fetch_max_bytes: u64,
    /// `max.partition.fetch.bytes`: bytes asked of one partition per fetch; a fetch always returns
    /// at least one whole batch.
    pub max_partition_fetch_bytes: u64,
    /// `fetch.max.wait.ms`: the longest one long-poll fetch waits for data before `poll` looks at
    /// its group again (rebalances are noticed at least this often while a poll waits).
    pub fetch_max_wait_ms: u64,
    /// `metadata.max.age.ms`: how often the group looks for added partitions. Default 1000, not
    /// Kafka's 300000: the partition counts are read from the engine in process, not over the network.
    pub metadata_max_age_ms: u64,
}

impl ConsumerConfig {
    /// Kafka's defaults (except `metadata.max.age.ms`, see its field) for a member of `group_id`.
    pub fn new(group_id: impl Into<String>) -> ConsumerConfig {
        ConsumerConfig {
            group_id: group_id.into(),
            client_id: "consumer".to_owned(),
            partition_assignment_strategy: AssignmentStrategy::Range,
            auto_offset_reset: AutoOffsetReset::Latest,
            enable_auto_commit: true,
            auto_commit_interval_ms: 5000,
            max_poll_interval_ms: 300_000,
            max_poll_records: 500,
            fetch_max_bytes: 52_428_800,
            max_partition_fetch_bytes: 1_048_576,
            fetch_max_wait_ms: 500,
            metadata_max_age_ms: 1000,
        }
    }

    /// Applies one `key=value` setting with Kafka's consumer-config name. On error the
    /// configuration is unchanged.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let invalid = |reason| ConfigError::InvalidValue {
            key: key.to_owned(),
            value: value.to_owned(),
            reason,
        };
        let positive = || {
            value
                .parse::<u64>()
                .ok()
                .filter(|number| *number > 0)
                .ok_or(invalid("expected a positive number"))
        };
        match key {
            "group.id" => self.group_id = value.to_owned(),
            "client.id" => self.client_id = value.to_owned(),
            "partition.assignment.strategy" => {
                self.partition_assignment_strategy = AssignmentStrategy::parse(value)
                    .ok_or(invalid("expected range, roundrobin or cooperative-sticky"))?;
            }
            "auto.offset.reset" => {
                self.auto_offset_reset = match value {
                    "earliest" => AutoOffsetReset::Earliest,
                    "latest" => AutoOffsetReset::Latest,
                    "none" => AutoOffsetReset::None,
                    _ => return Err(invalid("expected earliest, latest or none")),
                };
            }
            "enable.auto.commit" => {
                self.enable_auto_commit = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(invalid("expected true or false")),
                };
            }
            "auto.commit.interval.ms" => self.auto_commit_interval_ms = positive()?,
            "max.poll.interval.ms" => self.max_poll_interval_ms = positive()?,
            "max.poll.records" => {
                self.max_poll_records = usize::try_from(positive()?)
                    .ok()
                    .ok_or(invalid("too large"))?;
            }
            "fetch.max.bytes" => self.fetch_max_bytes = positive()?,
            "max.partition.fetch.bytes" => self.max_partition_fetch_bytes = positive()?,
            "fetch.max.wait.ms" => self.fetch_max_wait_ms = positive()?,
            "metadata.max.age.ms" => {
                self.metadata_max_age_ms = value
                    .parse()
                    .ok()
                    .ok_or(invalid("expected a non-negative number"))?;
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: key.to_owned(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_use_kafkas_names_and_refuse_bad_values_unchanged() {
        let mut config = ConsumerConfig::new("g");
        config
            .set("partition.assignment.strategy", "roundrobin")
            .unwrap();
        config.set("auto.offset.reset", "earliest").unwrap();
        config.set("enable.auto.commit", "false").unwrap();
        config.set("max.poll.records", "7").unwrap();
        assert_eq!(
            config.partition_assignment_strategy,
            AssignmentStrategy::RoundRobin
        );
        assert_eq!(config.auto_offset_reset, AutoOffsetReset::Earliest);
        assert!(!config.enable_auto_commit);
        assert_eq!(config.max_poll_records, 7);
        let before = config.clone();
        assert!(config.set("max.poll.records", "0").is_err());
        assert!(config.set("auto.offset.reset", "smallest").is_err());
        assert!(matches!(
            config.set("session.timeout.ms", "10000"),
            Err(ConfigError::UnknownKey { .. })
        ));
        assert_eq!(config, before);
    }
}
