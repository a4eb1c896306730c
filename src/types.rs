//! Vocabulary types shared by every module: offsets, positions, timestamps and names.
//!
//! Numbers that cross module boundaries are newtypes so that an offset is never passed where a file
//! position is expected. `TopicName::parse` is the only way to make a topic name, so no unvalidated
//! string ever becomes a directory name.

use std::fmt;
use std::sync::Arc;

use thiserror::Error;

use crate::limits::TOPIC_NAME_LENGTH_MAX;

/// A record's offset in its partition: dense, increasing, starting at the log start offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub u64);

impl Offset {
    /// The offset `delta` records after this one, or `None` on overflow.
    pub fn checked_add(self, delta: u64) -> Option<Offset> {
        self.0.checked_add(delta).map(Offset)
    }

    /// The next offset.
    pub fn next(self) -> Offset {
        Offset(self.0.saturating_add(1))
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A millisecond Unix timestamp, as Kafka stores it (signed: -1 means "no timestamp").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TimestampMs(pub i64);

impl TimestampMs {
    /// Kafka's `RecordBatch.NO_TIMESTAMP`.
    pub const NONE: TimestampMs = TimestampMs(-1);

    /// The current wall-clock time.
    pub fn now() -> TimestampMs {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        TimestampMs(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }
}

impl fmt::Display for TimestampMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A partition number inside a topic.
pub type PartitionId = u32;

/// Why a string is not a legal topic name.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TopicNameError {
    /// The name is the empty string.
    #[error("topic name is empty")]
    Empty,
    /// The name is longer than Kafka's 249 characters.
    #[error("topic name is {length} characters long; the maximum is {TOPIC_NAME_LENGTH_MAX}")]
    TooLong {
        /// The name's length, in bytes.
        length: usize,
    },
    /// The name is `.` or `..`, which Kafka forbids.
    #[error("topic name cannot be '.' or '..'")]
    Dots,
    /// The name holds a character outside `[a-zA-Z0-9._-]`.
    #[error("topic name {name:?} contains {character:?}; legal characters are [a-zA-Z0-9._-]")]
    IllegalCharacter {
        /// The name given.
        name: String,
        /// The first illegal character in it.
        character: char,
    },
}

/// A validated topic name: Kafka's rule `[a-zA-Z0-9._-]{1,249}`, not `.` or `..`. Shared, not
/// copied, when cloned: every request and every record a read returns carries one, across
/// threads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicName(Arc<str>);

impl TopicName {
    /// Validates `name` with Kafka's rule (`org.apache.kafka.common.internals.Topic.validate`).
    pub fn parse(name: &str) -> Result<TopicName, TopicNameError> {
        if name.is_empty() {
            return Err(TopicNameError::Empty);
        }
        if name == "." || name == ".." {
            return Err(TopicNameError::Dots);
        }
        if name.len() > TOPIC_NAME_LENGTH_MAX {
            return Err(TopicNameError::TooLong { length: name.len() });
        }
        let legal = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-';
        if let Some(character) = name.chars().find(|c| !legal(*c)) {
            return Err(TopicNameError::IllegalCharacter {
                name: name.to_owned(),
                character,
            });
        }
        Ok(TopicName(Arc::from(name)))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A topic and one of its partitions; names the partition directory `<topic>-<partition>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: TopicName,
    /// The partition's number in the topic, from 0.
    pub partition: PartitionId,
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafkas_rule() {
        assert!(TopicName::parse("orders").is_ok());
        assert!(TopicName::parse("a.b_c-D9").is_ok());
        assert!(TopicName::parse(&"x".repeat(249)).is_ok());
        assert_eq!(TopicName::parse(""), Err(TopicNameError::Empty));
        assert_eq!(TopicName::parse("."), Err(TopicNameError::Dots));
        assert_eq!(TopicName::parse(".."), Err(TopicNameError::Dots));
        assert_eq!(
            TopicName::parse(&"x".repeat(250)),
            Err(TopicNameError::TooLong { length: 250 })
        );
        for bad in ["a/b", "../etc", "a b", "é", "a\0b", "a:b"] {
            assert!(
                matches!(
                    TopicName::parse(bad),
                    Err(TopicNameError::IllegalCharacter { .. })
                ),
                "{bad:?} must be rejected"
            );
        }
    }

    #[test]
    fn topic_partition_names_its_directory() {
        let tp = TopicPartition {
            topic: TopicName::parse("orders").unwrap(),
            partition: 7,
        };
        assert_eq!(tp.to_string(), "orders-7");
    }
}
