//! Offset checkpoint files (FORMAT.md § Checkpoints; Kafka's `CheckpointFile` and
//! `OffsetCheckpointFile`): a text file of `0` (version), the entry count, then one
//! `topic partition offset` line per partition.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use thiserror::Error;

use crate::types::{Offset, TopicName, TopicPartition};

const CHECKPOINT_VERSION: &str = "0";

/// Why a checkpoint file cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CheckpointError {
    #[error("checkpoint is not UTF-8")]
    NotUtf8,
    #[error("line {line}: unsupported checkpoint version {version:?}")]
    Version { line: usize, version: String },
    #[error("line {line}: {reason}")]
    Malformed { line: usize, reason: &'static str },
    #[error("checkpoint declares {declared} entries but holds {found}")]
    EntryCount { declared: usize, found: usize },
}

/// Encodes `offsets` in Kafka's text format.
pub fn encode_offsets(offsets: &BTreeMap<TopicPartition, Offset>) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "{CHECKPOINT_VERSION}");
    let _ = writeln!(text, "{}", offsets.len());
    for (topic_partition, offset) in offsets {
        let _ = writeln!(
            text,
            "{} {} {}",
            topic_partition.topic, topic_partition.partition, offset
        );
    }
    text
}

/// Decodes Kafka's text format.
pub fn decode_offsets(bytes: &[u8]) -> Result<BTreeMap<TopicPartition, Offset>, CheckpointError> {
    let text = std::str::from_utf8(bytes).map_err(|_| CheckpointError::NotUtf8)?;
    let mut lines = text.lines().enumerate();
    let malformed = |line, reason| CheckpointError::Malformed { line, reason };
    let (_, version) = lines.next().ok_or(malformed(1, "missing version"))?;
    if version.trim() != CHECKPOINT_VERSION {
        return Err(CheckpointError::Version {
            line: 1,
            version: version.to_owned(),
        });
    }
    let (_, count) = lines.next().ok_or(malformed(2, "missing entry count"))?;
    let declared: usize = count
        .trim()
        .parse()
        .map_err(|_| malformed(2, "entry count is not a number"))?;
    let mut offsets = BTreeMap::new();
    for (line_index, line) in lines {
        let line_number = line_index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let (topic_partition, offset) = decode_entry(line).ok_or(malformed(
            line_number,
            "expected `topic partition offset` with a legal topic name",
        ))?;
        offsets.insert(topic_partition, offset);
    }
    if offsets.len() != declared {
        return Err(CheckpointError::EntryCount {
            declared,
            found: offsets.len(),
        });
    }
    Ok(offsets)
}

fn decode_entry(line: &str) -> Option<(TopicPartition, Offset)> {
    let mut fields = line.split(' ');
    let topic = TopicName::parse(fields.next()?).ok()?;
    let partition = fields.next()?.parse().ok()?;
    let offset: i64 = fields.next()?.parse().ok()?;
    if fields.next().is_some() || offset < 0 {
        return None;
    }
    Some((TopicPartition { topic, partition }, Offset(offset as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partition: u32) -> TopicPartition {
        TopicPartition {
            topic: TopicName::parse(topic).unwrap(),
            partition,
        }
    }

    #[test]
    fn encodes_kafkas_text_format() {
        let mut offsets = BTreeMap::new();
        offsets.insert(tp("orders", 0), Offset(42));
        offsets.insert(tp("orders", 1), Offset(7));
        let text = encode_offsets(&offsets);
        assert_eq!(text, "0\n2\norders 0 42\norders 1 7\n");
        assert_eq!(decode_offsets(text.as_bytes()).unwrap(), offsets);
    }

    #[test]
    fn rejects_malformed_checkpoints() {
        assert!(decode_offsets(b"").is_err());
        assert!(decode_offsets(b"1\n0\n").is_err());
        assert!(decode_offsets(b"0\n2\norders 0 42\n").is_err());
        assert!(decode_offsets(b"0\n1\norders zero 42\n").is_err());
        assert!(decode_offsets(b"0\n1\n../x 0 42\n").is_err());
        assert!(decode_offsets(b"0\n1\norders 0 -5\n").is_err());
        assert!(decode_offsets(&[0xff, 0xfe]).is_err());
    }
}
