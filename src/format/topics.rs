//! The topic registry file `seglog-topics` (FORMAT.md § Topic registry): which topics exist, how
//! many partitions each has, and each topic's configuration with Kafka's config names.
//!
//! ```text
//! 1
//! orders 3 segment.bytes=1073741824 retention.ms=604800000 ...
//! ```
//!
//! Line 1 is the version. Each further line is a topic name, its partition count, then its
//! settings as `key=value` words (values never contain spaces).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use thiserror::Error;

use crate::types::TopicName;

const REGISTRY_VERSION: &str = "1";

/// One topic's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicEntry {
    /// How many partitions the topic has.
    pub partition_count: u32,
    /// The topic's settings as Kafka's `key=value` pairs, in file order.
    pub settings: Vec<(String, String)>,
}

/// Why a registry cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}: {reason}")]
pub struct TopicRegistryError {
    /// The offending line, from 1; 0 when the file is not UTF-8.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// The registry file's text: the version line, then one line per topic in name order.
pub fn encode(topics: &BTreeMap<TopicName, TopicEntry>) -> String {
    let mut text = format!("{REGISTRY_VERSION}\n");
    for (topic, entry) in topics {
        let _ = write!(text, "{topic} {}", entry.partition_count);
        for (key, value) in &entry.settings {
            let _ = write!(text, " {key}={value}");
        }
        text.push('\n');
    }
    text
}

/// Reads a registry file's bytes back into its topics.
pub fn decode(bytes: &[u8]) -> Result<BTreeMap<TopicName, TopicEntry>, TopicRegistryError> {
    let error = |line, reason: &str| TopicRegistryError {
        line,
        reason: reason.to_owned(),
    };
    let text = std::str::from_utf8(bytes).map_err(|_| error(0, "not UTF-8"))?;
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, version)) if version.trim() == REGISTRY_VERSION => {}
        _ => return Err(error(1, "unsupported version")),
    }
    let mut topics = BTreeMap::new();
    for (line_index, line) in lines {
        let line_number = line_index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut words = line.split(' ');
        let topic = words
            .next()
            .and_then(|name| TopicName::parse(name).ok())
            .ok_or_else(|| error(line_number, "illegal topic name"))?;
        let partition_count = words
            .next()
            .and_then(|count| count.parse().ok())
            .ok_or_else(|| error(line_number, "partition count is not a number"))?;
        let settings = words
            .map(|word| {
                // `encode` cannot write these back: a line ending would eat a trailing `\r`.
                if word.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(error(
                        line_number,
                        "setting holds whitespace or a control character",
                    ));
                }
                word.split_once('=')
                    .map(|(key, value)| (key.to_owned(), value.to_owned()))
                    .ok_or_else(|| error(line_number, "setting is not key=value"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        topics.insert(
            topic,
            TopicEntry {
                partition_count,
                settings,
            },
        );
    }
    Ok(topics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_round_trips() {
        let mut topics = BTreeMap::new();
        topics.insert(
            TopicName::parse("orders").unwrap(),
            TopicEntry {
                partition_count: 3,
                settings: vec![("segment.bytes".into(), "1024".into())],
            },
        );
        topics.insert(
            TopicName::parse("empty").unwrap(),
            TopicEntry {
                partition_count: 1,
                settings: vec![],
            },
        );
        let text = encode(&topics);
        assert_eq!(text, "1\nempty 1\norders 3 segment.bytes=1024\n");
        assert_eq!(decode(text.as_bytes()).unwrap(), topics);
    }

    #[test]
    fn malformed_registries_are_rejected() {
        assert!(decode(b"").is_err());
        assert!(decode(b"2\n").is_err());
        assert!(decode(b"1\n../etc 1\n").is_err());
        assert!(decode(b"1\norders many\n").is_err());
        assert!(decode(b"1\norders 1 segment.bytes\n").is_err());
        assert!(decode(&[0xff]).is_err());
    }
}
