//! Per-log configuration, with Kafka's topic-level names and defaults (`LogConfig`).

use std::fmt;

use thiserror::Error;

use crate::format::compression::Compression;

/// How appends become durable (Kafka's `flush.messages` / `flush.ms`, plus "every append").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPolicy {
    /// `fdatasync` after every append: each acknowledged append is durable.
    EveryAppend,
    /// `fdatasync` once this many records are unflushed (`flush.messages`).
    Messages(u64),
    /// `fdatasync` once the oldest unflushed append is this old (`flush.ms`).
    IntervalMs(u64),
    /// Never sync on append; only on roll, explicit flush and close (Kafka's default).
    Never,
}

/// Which timestamp a batch carries (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// The producer's timestamps are kept as sent (`CreateTime`, Kafka's default).
    CreateTime,
    /// The log stamps each batch with the time it appends it (`LogAppendTime`).
    LogAppendTime,
}

/// What the cleaner does with old data (`cleanup.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanupPolicy {
    /// `delete`: retention deletes old segments by time and size (Kafka's default).
    Delete,
    /// `compact`: the cleaner keeps the last record of each key; no retention by time or size.
    Compact,
    /// `compact,delete`: both compaction and retention.
    CompactAndDelete,
}

impl CleanupPolicy {
    /// Whether the cleaner compacts logs with this policy (which leaves gaps in their offsets).
    pub fn compacts(self) -> bool {
        self != CleanupPolicy::Delete
    }

    /// The policy a `cleanup.policy` list names (Kafka's list type: items separated by commas,
    /// each `delete` or `compact`, in any order, at least one); `None` for anything else.
    pub fn from_list(value: &str) -> Option<CleanupPolicy> {
        let (mut delete, mut compact) = (false, false);
        for item in value.split(',').map(str::trim) {
            match item {
                "delete" => delete = true,
                "compact" => compact = true,
                _ => return None,
            }
        }
        match (delete, compact) {
            (true, false) => Some(CleanupPolicy::Delete),
            (false, true) => Some(CleanupPolicy::Compact),
            (true, true) => Some(CleanupPolicy::CompactAndDelete),
            (false, false) => None,
        }
    }

    /// The policy's `cleanup.policy` value: `delete`, `compact` or `compact,delete`.
    pub fn name(self) -> &'static str {
        match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactAndDelete => "compact,delete",
        }
    }
}

/// Configuration of one partition log. Field names are Kafka's, units last.
#[derive(Debug, Clone, derive_setters::Setters)]
#[setters(prefix = "with_")]
#[non_exhaustive]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active `.log` would grow past this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment is older than this.
    pub segment_ms: u64,
    /// `segment.index.bytes`: preallocated size of each `.index` and `.timeindex`.
    pub segment_index_bytes: u64,
    /// `index.interval.bytes`: log bytes between two index entries.
    pub index_interval_bytes: u64,
    /// `max.message.bytes`: the largest batch accepted, header included.
    pub max_message_bytes: u64,
    /// `message.timestamp.type`.
    pub message_timestamp_type: TimestampType,
    /// `flush.messages` / `flush.ms`.
    pub flush_policy: FlushPolicy,
    /// `compression.type` of batches written by seglog's own tools (`none` here).
    pub compression: Compression,
    /// `retention.ms`: delete segments older than this; -1 keeps them forever.
    pub retention_ms: i64,
    /// `retention.bytes`: delete the oldest segments while the log is larger; -1 means no limit.
    pub retention_bytes: i64,
    /// `cleanup.policy`.
    pub cleanup_policy: CleanupPolicy,
    /// `file.delete.delay.ms`: how long a deleted segment's files stay as `.deleted`.
    pub file_delete_delay_ms: u64,
    /// `delete.retention.ms`: how long a tombstone survives after the first cleaning that kept it.
    pub delete_retention_ms: u64,
    /// `min.cleanable.dirty.ratio`: the dirty share of a log above which the cleaner compacts it.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: a record stays uncompacted at least this long after it was
    /// appended (the cleaner leaves segments holding newer records alone).
    pub min_compaction_lag_ms: u64,
    /// Which of `retention.ms` / `.minutes` / `.hours` set `retention_ms` (Kafka's precedence:
    /// milliseconds over minutes over hours), so that a less precise one set later does not win.
    pub retention_precedence: RetentionPrecedence,
    /// `preallocate`: reserve the active `.log`'s blocks ahead of the appends (`fallocate`,
    /// doubling up to `segment.bytes`) and cut the file back to its batches when the segment
    /// stops being active. Default `false`, as Kafka's: on ext4 the reserved blocks are
    /// unwritten extents that each write still converts, and appends measured no faster with
    /// them (BENCHMARKS.md § Tried and not kept).
    pub preallocate: bool,
}

/// Two configurations are equal when every setting is; how `retention_ms` was given is not a
/// setting.
impl PartialEq for LogConfig {
    fn eq(&self, other: &Self) -> bool {
        let (left, right) = (self, other);
        left.segment_bytes == right.segment_bytes
            && left.segment_ms == right.segment_ms
            && left.segment_index_bytes == right.segment_index_bytes
            && left.index_interval_bytes == right.index_interval_bytes
            && left.max_message_bytes == right.max_message_bytes
            && left.message_timestamp_type == right.message_timestamp_type
            && left.flush_policy == right.flush_policy
            && left.compression == right.compression
            && left.retention_ms == right.retention_ms
            && left.retention_bytes == right.retention_bytes
            && left.cleanup_policy == right.cleanup_policy
            && left.file_delete_delay_ms == right.file_delete_delay_ms
            && left.delete_retention_ms == right.delete_retention_ms
            && left.min_cleanable_dirty_ratio == right.min_cleanable_dirty_ratio
            && left.min_compaction_lag_ms == right.min_compaction_lag_ms
    }
}

/// Where `retention_ms` came from, in Kafka's order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum RetentionPrecedence {
    /// No retention setting was given: the default `retention.ms`.
    #[default]
    Default,
    /// From `retention.hours`, the least precise.
    Hours,
    /// From `retention.minutes`.
    Minutes,
    /// From `retention.ms`, which overrides the other two.
    Milliseconds,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            segment_index_bytes: 10 * 1024 * 1024,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
            message_timestamp_type: TimestampType::CreateTime,
            flush_policy: FlushPolicy::Never,
            compression: Compression::None,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            cleanup_policy: CleanupPolicy::Delete,
            file_delete_delay_ms: 60_000,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            retention_precedence: RetentionPrecedence::Default,
            preallocate: false,
        }
    }
}

/// A configuration value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The key names no setting seglog knows.
    #[error("unknown config {key:?}")]
    UnknownKey {
        /// The key given.
        key: String,
    },
    /// The value does not parse, is out of its setting's range, or conflicts with another
    /// setting.
    #[error("config {key}={value:?} is invalid: {reason}")]
    InvalidValue {
        /// The setting's key, Kafka's name (`segment.bytes`, `cleanup.policy`, ...).
        key: String,
        /// The value given, as text.
        value: String,
        /// What the value must be.
        reason: &'static str,
    },
    /// An append to or subtraction from a setting that is not a list: only `cleanup.policy` is
    /// (Kafka's `INVALID_CONFIG`, "its type is not LIST").
    #[error(
        "config {key} is not a list: only cleanup.policy can be appended to or subtracted from"
    )]
    NotAList {
        /// The key given.
        key: String,
    },
}

/// One change of an incremental alteration, as Kafka's IncrementalAlterConfigs names them
/// ([`LogConfig::altered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigChange<'a> {
    /// `SET`: the setting `key` takes `value`.
    Set {
        /// The setting's Kafka name.
        key: &'a str,
        /// Its new value, as text.
        value: &'a str,
    },
    /// `DELETE`: the setting `key` goes back to its default.
    Reset {
        /// The setting's Kafka name.
        key: &'a str,
    },
    /// `APPEND`: the comma-separated items of `value` join the list `key`, those not in it yet.
    Append {
        /// The list setting's Kafka name (`cleanup.policy`).
        key: &'a str,
        /// The items to add, separated by commas.
        value: &'a str,
    },
    /// `SUBTRACT`: the comma-separated items of `value` leave the list `key`.
    Subtract {
        /// The list setting's Kafka name (`cleanup.policy`).
        key: &'a str,
        /// The items to remove, separated by commas.
        value: &'a str,
    },
}

impl LogConfig {
    /// Applies one `key=value` setting with Kafka's topic-config name. On error the
    /// configuration is unchanged.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let mut changed = self.clone();
        changed.apply(key, value)?;
        changed.validate()?;
        *self = changed;
        Ok(())
    }

    fn apply(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let invalid = |reason| ConfigError::InvalidValue {
            key: key.to_owned(),
            value: value.to_owned(),
            reason,
        };
        let number = || value.parse::<u64>().map_err(|_| invalid("not a number"));
        let signed = || {
            value
                .parse::<i64>()
                .ok()
                .filter(|number| *number >= -1)
                .ok_or(invalid("expected -1 or a non-negative number"))
        };
        match key {
            "segment.bytes" => self.segment_bytes = number()?,
            "segment.ms" => self.segment_ms = number()?,
            "segment.index.bytes" => self.segment_index_bytes = number()?,
            "index.interval.bytes" => self.index_interval_bytes = number()?,
            "max.message.bytes" => self.max_message_bytes = number()?,
            "flush.messages" => self.flush_policy = flush_policy_messages(number()?),
            "flush.ms" => self.flush_policy = FlushPolicy::IntervalMs(number()?),
            "message.timestamp.type" => {
                self.message_timestamp_type = match value {
                    "CreateTime" => TimestampType::CreateTime,
                    "LogAppendTime" => TimestampType::LogAppendTime,
                    _ => return Err(invalid("expected CreateTime or LogAppendTime")),
                }
            }
            "retention.ms" => self.set_retention(signed()?, 1, RetentionPrecedence::Milliseconds),
            "retention.minutes" => {
                self.set_retention(signed()?, 60_000, RetentionPrecedence::Minutes)
            }
            "retention.hours" => {
                self.set_retention(signed()?, 3_600_000, RetentionPrecedence::Hours)
            }
            "file.delete.delay.ms" => self.file_delete_delay_ms = number()?,
            "delete.retention.ms" => self.delete_retention_ms = number()?,
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = number()?,
            "preallocate" => {
                self.preallocate = value
                    .parse::<bool>()
                    .map_err(|_| invalid("expected true or false"))?
            }
            "min.cleanable.dirty.ratio" => {
                self.min_cleanable_dirty_ratio = value
                    .parse::<f64>()
                    .ok()
                    .filter(|ratio| (0.0..=1.0).contains(ratio))
                    .ok_or(invalid("expected a number between 0 and 1"))?
            }
            "retention.bytes" => self.retention_bytes = signed()?,
            "cleanup.policy" => {
                self.cleanup_policy = CleanupPolicy::from_list(value)
                    .ok_or(invalid("expected delete, compact or compact,delete"))?
            }
            "compression.type" => {
                self.compression = value
                    .parse()
                    .map_err(|_| invalid("expected none, gzip, snappy, lz4 or zstd"))?
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: key.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// This configuration with `changes` applied in order, a `Reset` taking the setting's value
    /// in `defaults` (Kafka's IncrementalAlterConfigs on one topic). The retention settings are
    /// ranked afresh: within the changes, `retention.ms` wins over `.minutes` over `.hours`,
    /// whatever the configuration was given with. The result is validated; on error nothing is
    /// changed.
    pub fn altered(
        &self,
        changes: &[ConfigChange<'_>],
        defaults: &LogConfig,
    ) -> Result<LogConfig, ConfigError> {
        let mut altered = self.clone();
        altered.retention_precedence = RetentionPrecedence::Default;
        for change in changes {
            match *change {
                ConfigChange::Set { key, value } => altered.apply(key, value)?,
                ConfigChange::Reset { key } => altered.reset(key, defaults)?,
                ConfigChange::Append { key, value } => {
                    let mut items = altered.list_items(key)?;
                    for item in value.split(',').map(str::trim) {
                        if !items.iter().any(|present| present == item) {
                            items.push(item.to_owned());
                        }
                    }
                    altered.apply(key, &items.join(","))?;
                }
                ConfigChange::Subtract { key, value } => {
                    let mut items = altered.list_items(key)?;
                    let removed: Vec<&str> = value.split(',').map(str::trim).collect();
                    items.retain(|item| !removed.contains(&item.as_str()));
                    altered.apply(key, &items.join(","))?;
                }
            }
        }
        altered.validate()?;
        Ok(altered)
    }

    /// The items of the list setting `key` (`cleanup.policy`, the only list among the topic
    /// settings); `NotAList` for any other key.
    fn list_items(&self, key: &str) -> Result<Vec<String>, ConfigError> {
        match key {
            "cleanup.policy" => Ok(self
                .cleanup_policy
                .name()
                .split(',')
                .map(str::to_owned)
                .collect()),
            _ => Err(ConfigError::NotAList {
                key: key.to_owned(),
            }),
        }
    }

    /// Gives the setting `key` its value in `defaults`. `flush.messages` and `flush.ms` share
    /// one policy: resetting either restores the default policy when the current one is that
    /// setting's (a `flush.ms` policy stays when `flush.messages` is reset). A retention unit
    /// less precise than the one that set `retention_ms` leaves it alone, as setting it would.
    fn reset(&mut self, key: &str, defaults: &LogConfig) -> Result<(), ConfigError> {
        match key {
            "segment.bytes" => self.segment_bytes = defaults.segment_bytes,
            "segment.ms" => self.segment_ms = defaults.segment_ms,
            "segment.index.bytes" => self.segment_index_bytes = defaults.segment_index_bytes,
            "index.interval.bytes" => self.index_interval_bytes = defaults.index_interval_bytes,
            "max.message.bytes" => self.max_message_bytes = defaults.max_message_bytes,
            "message.timestamp.type" => {
                self.message_timestamp_type = defaults.message_timestamp_type;
            }
            "flush.messages" => {
                if matches!(
                    self.flush_policy,
                    FlushPolicy::EveryAppend | FlushPolicy::Messages(_)
                ) {
                    self.flush_policy = defaults.flush_policy;
                }
            }
            "flush.ms" => {
                if matches!(self.flush_policy, FlushPolicy::IntervalMs(_)) {
                    self.flush_policy = defaults.flush_policy;
                }
            }
            "retention.ms" | "retention.minutes" | "retention.hours" => {
                let precedence = match key {
                    "retention.ms" => RetentionPrecedence::Milliseconds,
                    "retention.minutes" => RetentionPrecedence::Minutes,
                    _ => RetentionPrecedence::Hours,
                };
                if precedence >= self.retention_precedence {
                    self.retention_ms = defaults.retention_ms;
                    self.retention_precedence = RetentionPrecedence::Default;
                }
            }
            "file.delete.delay.ms" => self.file_delete_delay_ms = defaults.file_delete_delay_ms,
            "delete.retention.ms" => self.delete_retention_ms = defaults.delete_retention_ms,
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = defaults.min_compaction_lag_ms,
            "preallocate" => self.preallocate = defaults.preallocate,
            "min.cleanable.dirty.ratio" => {
                self.min_cleanable_dirty_ratio = defaults.min_cleanable_dirty_ratio;
            }
            "retention.bytes" => self.retention_bytes = defaults.retention_bytes,
            "cleanup.policy" => self.cleanup_policy = defaults.cleanup_policy,
            "compression.type" => self.compression = defaults.compression,
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: key.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Applies a retention setting in `unit_ms` units unless a more precise one was set (`-1`
    /// stays `-1`: no limit).
    fn set_retention(&mut self, value: i64, unit_ms: i64, precedence: RetentionPrecedence) {
        if precedence < self.retention_precedence {
            return;
        }
        self.retention_precedence = precedence;
        self.retention_ms = if value < 0 {
            -1
        } else {
            value.saturating_mul(unit_ms)
        };
    }

    /// Every setting as Kafka's `key=value` pairs; `set` applied to each rebuilds this config.
    pub fn to_pairs(&self) -> Vec<(&'static str, String)> {
        let timestamp_type = match self.message_timestamp_type {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        };
        let mut pairs = vec![
            ("segment.bytes", self.segment_bytes.to_string()),
            ("segment.ms", self.segment_ms.to_string()),
            ("segment.index.bytes", self.segment_index_bytes.to_string()),
            (
                "index.interval.bytes",
                self.index_interval_bytes.to_string(),
            ),
            ("max.message.bytes", self.max_message_bytes.to_string()),
            ("message.timestamp.type", timestamp_type.to_owned()),
            ("compression.type", self.compression.name().to_owned()),
            ("retention.ms", self.retention_ms.to_string()),
            ("retention.bytes", self.retention_bytes.to_string()),
            ("cleanup.policy", self.cleanup_policy.name().to_owned()),
            (
                "file.delete.delay.ms",
                self.file_delete_delay_ms.to_string(),
            ),
            ("delete.retention.ms", self.delete_retention_ms.to_string()),
            (
                "min.cleanable.dirty.ratio",
                self.min_cleanable_dirty_ratio.to_string(),
            ),
            (
                "min.compaction.lag.ms",
                self.min_compaction_lag_ms.to_string(),
            ),
            ("preallocate", self.preallocate.to_string()),
        ];
        match self.flush_policy {
            FlushPolicy::EveryAppend => pairs.push(("flush.messages", "1".to_owned())),
            FlushPolicy::Messages(count) => pairs.push(("flush.messages", count.to_string())),
            FlushPolicy::IntervalMs(ms) => pairs.push(("flush.ms", ms.to_string())),
            FlushPolicy::Never => {}
        }
        pairs
    }

    /// Checks the relationships between settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, value: u64, reason| ConfigError::InvalidValue {
            key: key.to_owned(),
            value: value.to_string(),
            reason,
        };
        if self.segment_bytes < crate::limits::BATCH_HEADER_BYTES as u64
            || self.segment_bytes > crate::limits::SEGMENT_BYTES_MAX
        {
            return Err(invalid(
                "segment.bytes",
                self.segment_bytes,
                "must be between 61 and 2147483647",
            ));
        }
        if self.segment_index_bytes < 4 * crate::limits::TIME_INDEX_ENTRY_BYTES as u64
            || self.segment_index_bytes > u64::from(u32::MAX)
        {
            return Err(invalid(
                "segment.index.bytes",
                self.segment_index_bytes,
                "must be between 48 and 4294967295",
            ));
        }
        if self.max_message_bytes < crate::limits::BATCH_HEADER_BYTES as u64 {
            return Err(invalid(
                "max.message.bytes",
                self.max_message_bytes,
                "must be at least the 61-byte batch header",
            ));
        }
        Ok(())
    }
}

fn flush_policy_messages(count: u64) -> FlushPolicy {
    if count == u64::MAX || count == i64::MAX as u64 {
        FlushPolicy::Never
    } else if count <= 1 {
        FlushPolicy::EveryAppend
    } else {
        FlushPolicy::Messages(count)
    }
}

impl fmt::Display for FlushPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlushPolicy::EveryAppend => write!(f, "every append"),
            FlushPolicy::Messages(count) => write!(f, "every {count} messages"),
            FlushPolicy::IntervalMs(ms) => write!(f, "every {ms} ms"),
            FlushPolicy::Never => write!(f, "on roll and close"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas() {
        let config = LogConfig::default();
        assert_eq!(config.segment_bytes, 1 << 30);
        assert_eq!(config.segment_index_bytes, 10 << 20);
        assert_eq!(config.index_interval_bytes, 4096);
        assert_eq!(config.max_message_bytes, 1_048_588);
        assert_eq!(config.flush_policy, FlushPolicy::Never);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn retention_milliseconds_win_over_minutes_over_hours_in_any_order() {
        let mut config = LogConfig::default();
        config.set("retention.hours", "2").unwrap();
        assert_eq!(config.retention_ms, 7_200_000);
        config.set("retention.minutes", "3").unwrap();
        assert_eq!(config.retention_ms, 180_000);
        config.set("retention.hours", "5").unwrap();
        assert_eq!(
            config.retention_ms, 180_000,
            "hours do not override minutes"
        );
        config.set("retention.ms", "42").unwrap();
        config.set("retention.minutes", "9").unwrap();
        assert_eq!(
            config.retention_ms, 42,
            "minutes do not override milliseconds"
        );
        config.set("retention.ms", "-1").unwrap();
        assert_eq!(config.retention_ms, -1);
    }

    #[test]
    fn pairs_rebuild_the_same_config() {
        let mut config = LogConfig::default();
        config.set("flush.ms", "250").unwrap();
        config.set("cleanup.policy", "compact").unwrap();
        config.set("retention.bytes", "1000000").unwrap();
        config.set("delete.retention.ms", "5000").unwrap();
        config.set("min.cleanable.dirty.ratio", "0.25").unwrap();
        config.set("min.compaction.lag.ms", "60000").unwrap();
        let mut rebuilt = LogConfig::default();
        for (key, value) in config.to_pairs() {
            rebuilt.set(key, &value).unwrap();
        }
        assert_eq!(rebuilt, config);
    }

    #[test]
    fn cleanup_policy_is_a_list_in_any_order() {
        let mut config = LogConfig::default();
        for (value, policy) in [
            ("compact", CleanupPolicy::Compact),
            ("delete, compact", CleanupPolicy::CompactAndDelete),
            ("compact,delete", CleanupPolicy::CompactAndDelete),
            ("delete", CleanupPolicy::Delete),
        ] {
            config.set("cleanup.policy", value).unwrap();
            assert_eq!(config.cleanup_policy, policy, "{value}");
        }
        for value in ["", "compact,", "archive", "delete,archive"] {
            let refused = config.set("cleanup.policy", value);
            assert!(
                matches!(refused, Err(ConfigError::InvalidValue { .. })),
                "{value:?}"
            );
        }
    }

    #[test]
    fn altered_applies_sets_resets_appends_and_subtracts_in_order() {
        let defaults = LogConfig {
            retention_ms: 1000,
            ..LogConfig::default()
        };
        let mut current = LogConfig::default();
        current.set("retention.ms", "5").unwrap();
        current.set("segment.bytes", "4096").unwrap();
        let altered = current
            .altered(
                &[
                    ConfigChange::Append {
                        key: "cleanup.policy",
                        value: "compact,delete",
                    },
                    ConfigChange::Reset {
                        key: "segment.bytes",
                    },
                    ConfigChange::Set {
                        key: "retention.hours",
                        value: "2",
                    },
                ],
                &defaults,
            )
            .unwrap();
        assert_eq!(altered.cleanup_policy, CleanupPolicy::CompactAndDelete);
        assert_eq!(altered.segment_bytes, defaults.segment_bytes);
        assert_eq!(
            altered.retention_ms, 7_200_000,
            "the retention units are ranked afresh within one alteration"
        );
        let subtracted = altered
            .altered(
                &[ConfigChange::Subtract {
                    key: "cleanup.policy",
                    value: "delete",
                }],
                &defaults,
            )
            .unwrap();
        assert_eq!(subtracted.cleanup_policy, CleanupPolicy::Compact);
        let reset = subtracted
            .altered(
                &[ConfigChange::Reset {
                    key: "retention.ms",
                }],
                &defaults,
            )
            .unwrap();
        assert_eq!(reset.retention_ms, 1000);
    }

    #[test]
    fn altered_refuses_what_kafka_refuses_and_changes_nothing() {
        let current = LogConfig::default();
        let defaults = LogConfig::default();
        let refused = |change: ConfigChange<'_>| current.altered(&[change], &defaults).unwrap_err();
        assert!(matches!(
            refused(ConfigChange::Append {
                key: "retention.ms",
                value: "1"
            }),
            ConfigError::NotAList { key } if key == "retention.ms"
        ));
        assert!(matches!(
            refused(ConfigChange::Subtract {
                key: "cleanup.policy",
                value: "delete"
            }),
            ConfigError::InvalidValue { key, .. } if key == "cleanup.policy"
        ));
        assert!(matches!(
            refused(ConfigChange::Reset { key: "no.such.key" }),
            ConfigError::UnknownKey { .. }
        ));
        assert!(matches!(
            refused(ConfigChange::Set {
                key: "segment.bytes",
                value: "12"
            }),
            ConfigError::InvalidValue { .. }
        ));
        assert_eq!(current, LogConfig::default());
    }

    #[test]
    fn resetting_a_flush_setting_restores_the_default_policy_only_when_it_set_it() {
        let defaults = LogConfig::default();
        let mut current = LogConfig::default();
        current.set("flush.ms", "250").unwrap();
        let reset = |config: &LogConfig, key| {
            config
                .altered(&[ConfigChange::Reset { key }], &defaults)
                .unwrap()
                .flush_policy
        };
        assert_eq!(
            reset(&current, "flush.messages"),
            FlushPolicy::IntervalMs(250)
        );
        assert_eq!(reset(&current, "flush.ms"), FlushPolicy::Never);
        current.set("flush.messages", "10").unwrap();
        assert_eq!(reset(&current, "flush.messages"), FlushPolicy::Never);
    }

    #[test]
    fn set_parses_kafka_names_and_rejects_bad_values() {
        let mut config = LogConfig::default();
        config.set("segment.bytes", "1048576").unwrap();
        assert_eq!(config.segment_bytes, 1 << 20);
        config.set("flush.messages", "1").unwrap();
        assert_eq!(config.flush_policy, FlushPolicy::EveryAppend);
        config
            .set("message.timestamp.type", "LogAppendTime")
            .unwrap();
        assert_eq!(config.message_timestamp_type, TimestampType::LogAppendTime);
        assert!(matches!(
            config.set("segment.bytes", "ten"),
            Err(ConfigError::InvalidValue { .. })
        ));
        assert!(matches!(
            config.set("segment.bytes", "12"),
            Err(ConfigError::InvalidValue { .. })
        ));
        assert_eq!(
            config.segment_bytes,
            1 << 20,
            "a rejected value changes nothing"
        );
        assert!(matches!(
            config.set("no.such.key", "1"),
            Err(ConfigError::UnknownKey { .. })
        ));
    }
}
