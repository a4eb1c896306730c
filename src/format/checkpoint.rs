//! Offset checkpoint files (FORMAT.md § Checkpoints; Kafka's `CheckpointFile` and
//! `OffsetCheckpointFile`): a text file of `0` (version), the entry count, then one
//! `topic partition offset` line per partition.
//!
//! seglog keeps each checkpoint in two more copies, `<name>.0` and `<name>.1`, written
//! alternately: Kafka's text behind one header line, `seglog-checkpoint 1 <generation> <crc>`,
//! where `<crc>` is the CRC-32C (8 hex digits) of the generation (8 bytes, big-endian) followed by
//! the text. The valid copy of the highest generation wins; Kafka's own file is for Kafka's tools.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use thiserror::Error;

use crate::format::crc::crc32c;
use crate::types::{Offset, TopicName, TopicPartition};

const CHECKPOINT_VERSION: &str = "0";
/// The first word of a copy's header line, and its format version.
const COPY_MAGIC: &str = "seglog-checkpoint";
const COPY_VERSION: &str = "1";

/// Why a checkpoint file cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The text is not UTF-8.
    #[error("checkpoint is not UTF-8")]
    NotUtf8,
    /// The first line is not version `0`, the only one Kafka writes.
    #[error("line {line}: unsupported checkpoint version {version:?}")]
    Version {
        /// The line, from 1 (of Kafka's text, after a copy's header).
        line: usize,
        /// The version read.
        version: String,
    },
    /// The entry count is missing or not a number, or an entry is not `topic partition offset`.
    #[error("line {line}: {reason}")]
    Malformed {
        /// The line, from 1 (of Kafka's text, after a copy's header).
        line: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The number of entries differs from the count on line 2 (a cut-short file, or a
    /// partition listed twice).
    #[error("checkpoint declares {declared} entries but holds {found}")]
    EntryCount {
        /// The count on line 2.
        declared: usize,
        /// The distinct partitions found.
        found: usize,
    },
    /// A copy's first line is not seglog's header.
    #[error("the copy's header is not `{COPY_MAGIC} {COPY_VERSION} <generation> <crc>`")]
    CopyHeader,
    /// A copy's CRC-32C does not match its generation and text: a torn or damaged write.
    #[error("the copy's checksum {stored:08x} does not match its contents ({computed:08x})")]
    Checksum {
        /// The CRC-32C in the header.
        stored: u32,
        /// The CRC-32C of the generation and text read.
        computed: u32,
    },
}

/// A checkpoint copy's contents: Kafka's text under a header with its generation and checksum.
pub fn encode_copy(generation: u64, offsets: &BTreeMap<TopicPartition, Offset>) -> String {
    let body = encode_offsets(offsets);
    let crc = copy_crc(generation, body.as_bytes());
    format!("{COPY_MAGIC} {COPY_VERSION} {generation} {crc:08x}\n{body}")
}

/// Decodes a copy written by [`encode_copy`]: its generation and offsets, once its checksum
/// matches.
pub fn decode_copy(
    bytes: &[u8],
) -> Result<(u64, BTreeMap<TopicPartition, Offset>), CheckpointError> {
    let mut parts = bytes.splitn(2, |byte| *byte == b'\n');
    let header = parts.next().ok_or(CheckpointError::CopyHeader)?;
    let body = parts.next().ok_or(CheckpointError::CopyHeader)?;
    let header = std::str::from_utf8(header).map_err(|_| CheckpointError::CopyHeader)?;
    let fields: Vec<&str> = header.split(' ').collect();
    let [COPY_MAGIC, COPY_VERSION, generation, crc] = fields.as_slice() else {
        return Err(CheckpointError::CopyHeader);
    };
    let generation: u64 = generation
        .parse()
        .map_err(|_| CheckpointError::CopyHeader)?;
    let stored = u32::from_str_radix(crc, 16).map_err(|_| CheckpointError::CopyHeader)?;
    let computed = copy_crc(generation, body);
    if stored != computed || crc.len() != 8 {
        return Err(CheckpointError::Checksum { stored, computed });
    }
    Ok((generation, decode_offsets(body)?))
}

fn copy_crc(generation: u64, body: &[u8]) -> u32 {
    let mut covered = Vec::with_capacity(8 + body.len());
    covered.extend_from_slice(&generation.to_be_bytes());
    covered.extend_from_slice(body);
    crc32c(&covered)
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

/// A checkpoint as read at open: the offsets of its newest valid copy (FORMAT.md § Checkpoints).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointRead {
    /// Each partition's checkpointed offset.
    pub offsets: BTreeMap<TopicPartition, Offset>,
    /// The copy's generation (0 with no copy).
    pub generation: u64,
    /// Why no copy could be used, when copies exist and none is valid: `offsets` is then
    /// empty, and the caller must not trust what the checkpoint held.
    pub lost: Option<String>,
}

/// Checkpoint `name` from the files `read` returns by name (`None`: no such file): its copies,
/// else Kafka's file ([`choose_checkpoint`]). For readers with their own file access (the tools).
pub fn read_checkpoint_with<E>(
    name: &str,
    mut read: impl FnMut(&str) -> Result<Option<Vec<u8>>, E>,
) -> Result<CheckpointRead, E> {
    let mut copies = Vec::with_capacity(2);
    for copy in checkpoint_copy_names(name) {
        if let Some(bytes) = read(&copy)? {
            copies.push((copy, bytes));
        }
    }
    let kafka_file = match copies.is_empty() {
        true => read(name)?.map(|bytes| (name.to_owned(), bytes)),
        false => None,
    };
    Ok(choose_checkpoint(&copies, kafka_file))
}

/// What a checkpoint holds, from the contents of its copies found (name, bytes): the valid copy
/// of the highest generation; with no copy at all (a new directory, or one Kafka wrote), Kafka's
/// own file, if it decodes.
pub fn choose_checkpoint(
    copies: &[(String, Vec<u8>)],
    kafka_file: Option<(String, Vec<u8>)>,
) -> CheckpointRead {
    let mut newest: Option<(u64, BTreeMap<TopicPartition, Offset>)> = None;
    let mut problems = Vec::new();
    for (name, bytes) in copies {
        match decode_copy(bytes) {
            Ok((generation, offsets)) => {
                if newest
                    .as_ref()
                    .is_none_or(|(newest, _)| generation > *newest)
                {
                    newest = Some((generation, offsets));
                }
            }
            Err(error) => problems.push(format!("{name}: {error}")),
        }
    }
    match (newest, kafka_file) {
        (Some((generation, offsets)), _) => CheckpointRead {
            offsets,
            generation,
            lost: None,
        },
        (None, _) if !problems.is_empty() => CheckpointRead {
            lost: Some(problems.join("; ")),
            ..CheckpointRead::default()
        },
        (None, None) => CheckpointRead::default(),
        (None, Some((name, bytes))) => match decode_offsets(&bytes) {
            Ok(offsets) => CheckpointRead {
                offsets,
                ..CheckpointRead::default()
            },
            Err(error) => CheckpointRead {
                lost: Some(format!("{name}: {error}")),
                ..CheckpointRead::default()
            },
        },
    }
}

/// The names of checkpoint `name`'s two copies; generation `g` goes to copy `g % 2`.
pub fn checkpoint_copy_names(name: &str) -> [String; 2] {
    [format!("{name}.0"), format!("{name}.1")]
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
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
    fn a_copy_round_trips_and_any_flipped_byte_fails_its_checksum_or_header() {
        let mut offsets = BTreeMap::new();
        offsets.insert(tp("orders", 0), Offset(42));
        offsets.insert(tp("orders", 1), Offset(7));
        let copy = encode_copy(9, &offsets);
        assert!(copy.starts_with("seglog-checkpoint 1 9 "));
        assert!(copy.ends_with("0\n2\norders 0 42\norders 1 7\n"));
        assert_eq!(decode_copy(copy.as_bytes()).unwrap(), (9, offsets));
        for position in 0..copy.len() {
            let mut bytes = copy.clone().into_bytes();
            bytes[position] ^= 0x01;
            assert!(decode_copy(&bytes).is_err(), "byte {position} flipped");
        }
        for length in 0..copy.len() {
            assert!(
                decode_copy(&copy.as_bytes()[..length]).is_err(),
                "cut at {length}"
            );
        }
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
