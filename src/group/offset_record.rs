//! The records of the offsets topic `__consumer_offsets`: bytes <-> values. No I/O.
//!
//! The layout is Kafka's own (`OffsetCommitKey` and `OffsetCommitValue` of Kafka's group
//! coordinator), so a `__consumer_offsets` partition written by seglog reads as Kafka's and back.
//! Integers are big-endian; a *string* is an `int16` byte length followed by that many bytes of
//! UTF-8 (never null).
//!
//! Key (every record has one; compaction keeps the last record per key):
//!
//! | field     | type   | notes                                                        |
//! |-----------|--------|--------------------------------------------------------------|
//! | version   | int16  | 0 or 1: an offset commit (seglog writes 1). 2 and above are  |
//! |           |        | Kafka's other coordinator records (group metadata, ...), which seglog skips |
//! | group     | string | the group id                                                 |
//! | topic     | string | a legal topic name                                           |
//! | partition | int32  | >= 0                                                         |
//!
//! Value (a null value, a tombstone, deletes the key's committed offset):
//!
//! | field            | type   | versions | notes                                      |
//! |------------------|--------|----------|--------------------------------------------|
//! | version          | int16  | all      | seglog writes 3 and reads 0 to 3           |
//! | offset           | int64  | 0+       | the next offset the group will consume     |
//! | leader_epoch     | int32  | 3+       | -1 (seglog has no leader epochs)           |
//! | metadata         | string | 0+       | the committer's metadata, at most 4096 bytes |
//! | commit_timestamp | int64  | 0+       | milliseconds since the epoch               |
//! | expire_timestamp | int64  | 1 only   | read and ignored                           |
//!
//! The generation that committed is not stored: generations fence commits as they are made, and
//! groups live in one process, so no reader of the log needs it.

use crate::format::Reader;
use crate::types::{Offset, PartitionId, TimestampMs, TopicName};

use super::error::OffsetRecordError;

/// The key version seglog writes.
pub const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
/// The value version seglog writes.
pub const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
/// The most bytes of metadata kept with a committed offset (Kafka's `offset.metadata.max.bytes`).
pub const OFFSET_METADATA_BYTES_MAX: usize = 4096;
/// The longest Kafka string.
const STRING_BYTES_MAX: usize = i16::MAX as usize;

/// The key of one committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitKey {
    /// The group id.
    pub group: String,
    /// The committed partition's topic.
    pub topic: TopicName,
    /// The committed partition.
    pub partition: PartitionId,
}

/// The value of one committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitValue {
    /// The next offset the group will consume.
    pub offset: Offset,
    /// The leader epoch of the committed offset; -1 (none) from seglog and before version 3.
    pub leader_epoch: i32,
    /// The committer's metadata, at most [`OFFSET_METADATA_BYTES_MAX`] bytes.
    pub metadata: String,
    /// When the offset was committed, in milliseconds since the Unix epoch.
    pub commit_timestamp: TimestampMs,
}

/// A decoded key of the offsets topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorKey {
    /// An offset commit's key (versions 0 and 1).
    OffsetCommit(OffsetCommitKey),
    /// One of Kafka's other coordinator records (group metadata and the like), by key version.
    Other {
        /// The key version, 2 or above.
        version: i16,
    },
}

fn put_string(
    out: &mut Vec<u8>,
    field: &'static str,
    value: &str,
) -> Result<(), OffsetRecordError> {
    let length = i16::try_from(value.len())
        .ok()
        .ok_or(OffsetRecordError::TooLong {
            field,
            length: value.len(),
            max: STRING_BYTES_MAX,
        })?;
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(value.as_bytes());
    Ok(())
}

fn read_string(reader: &mut Reader<'_>, field: &'static str) -> Result<String, OffsetRecordError> {
    let length = reader.i16()?;
    let count = usize::try_from(length)
        .ok()
        .ok_or(OffsetRecordError::NegativeLength { field, length })?;
    let bytes = reader.take(count)?;
    let text = std::str::from_utf8(bytes)
        .ok()
        .ok_or(OffsetRecordError::NotUtf8 { field })?;
    Ok(text.to_owned())
}

fn no_trailing_bytes(reader: &Reader<'_>, record: &'static str) -> Result<(), OffsetRecordError> {
    match reader.remaining() {
        0 => Ok(()),
        count => Err(OffsetRecordError::TrailingBytes { record, count }),
    }
}

/// Encodes a key (version [`OFFSET_COMMIT_KEY_VERSION`]).
pub fn encode_key(key: &OffsetCommitKey) -> Result<Vec<u8>, OffsetRecordError> {
    let mut out = Vec::with_capacity(10 + key.group.len() + key.topic.as_str().len());
    out.extend_from_slice(&OFFSET_COMMIT_KEY_VERSION.to_be_bytes());
    put_string(&mut out, "group", &key.group)?;
    put_string(&mut out, "topic", key.topic.as_str())?;
    let partition = i32::try_from(key.partition)
        .ok()
        .ok_or(OffsetRecordError::Negative {
            field: "partition",
            value: i64::from(key.partition),
        })?;
    out.extend_from_slice(&partition.to_be_bytes());
    Ok(out)
}

/// Decodes a key of the offsets topic.
pub fn decode_key(bytes: &[u8]) -> Result<CoordinatorKey, OffsetRecordError> {
    let mut reader = Reader::new(bytes);
    let version = reader.i16()?;
    match version {
        0 | 1 => {}
        version if version < 0 => return Err(OffsetRecordError::InvalidKeyVersion { version }),
        version => return Ok(CoordinatorKey::Other { version }),
    }
    let group = read_string(&mut reader, "group")?;
    let topic = TopicName::parse(&read_string(&mut reader, "topic")?)?;
    let partition = reader.i32()?;
    let partition = PartitionId::try_from(partition)
        .ok()
        .ok_or(OffsetRecordError::Negative {
            field: "partition",
            value: i64::from(partition),
        })?;
    no_trailing_bytes(&reader, "key")?;
    Ok(CoordinatorKey::OffsetCommit(OffsetCommitKey {
        group,
        topic,
        partition,
    }))
}

/// Encodes a value (version [`OFFSET_COMMIT_VALUE_VERSION`]).
pub fn encode_value(value: &OffsetCommitValue) -> Result<Vec<u8>, OffsetRecordError> {
    let offset = i64::try_from(value.offset.0)
        .ok()
        .ok_or(OffsetRecordError::OffsetTooLarge {
            offset: value.offset,
        })?;
    let mut out = Vec::with_capacity(24 + value.metadata.len());
    out.extend_from_slice(&OFFSET_COMMIT_VALUE_VERSION.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&value.leader_epoch.to_be_bytes());
    put_string(&mut out, "metadata", &value.metadata)?;
    out.extend_from_slice(&value.commit_timestamp.0.to_be_bytes());
    Ok(out)
}

/// Decodes a value of versions 0 to 3.
pub fn decode_value(bytes: &[u8]) -> Result<OffsetCommitValue, OffsetRecordError> {
    let mut reader = Reader::new(bytes);
    let version = reader.i16()?;
    if !(0..=3).contains(&version) {
        return Err(OffsetRecordError::UnsupportedValueVersion { version });
    }
    let offset = reader.i64()?;
    let offset = u64::try_from(offset)
        .ok()
        .ok_or(OffsetRecordError::Negative {
            field: "offset",
            value: offset,
        })?;
    let leader_epoch = if version >= 3 { reader.i32()? } else { -1 };
    let metadata = read_string(&mut reader, "metadata")?;
    let commit_timestamp = TimestampMs(reader.i64()?);
    if version == 1 {
        let _expire_timestamp = reader.i64()?;
    }
    no_trailing_bytes(&reader, "value")?;
    Ok(OffsetCommitValue {
        offset: Offset(offset),
        leader_epoch,
        metadata,
        commit_timestamp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(group: &str, topic: &str, partition: u32) -> OffsetCommitKey {
        OffsetCommitKey {
            group: group.to_owned(),
            topic: TopicName::parse(topic).unwrap(),
            partition,
        }
    }

    #[test]
    fn key_and_value_have_kafkas_bytes() {
        let encoded = encode_key(&key("g", "t", 2)).unwrap();
        assert_eq!(encoded, [0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 2]);
        let value = OffsetCommitValue {
            offset: Offset(5),
            leader_epoch: -1,
            metadata: "m".to_owned(),
            commit_timestamp: TimestampMs(7),
        };
        let encoded = encode_value(&value).unwrap();
        let expected: Vec<u8> = [
            &[0, 3][..],
            &5i64.to_be_bytes(),
            &(-1i32).to_be_bytes(),
            &[0, 1, b'm'],
            &7i64.to_be_bytes(),
        ]
        .concat();
        assert_eq!(encoded, expected);
    }

    #[test]
    fn older_value_versions_decode() {
        let version_1: Vec<u8> = [
            &[0, 1][..],
            &9i64.to_be_bytes(),
            &[0, 0],
            &3i64.to_be_bytes(),
            &4i64.to_be_bytes(),
        ]
        .concat();
        let value = decode_value(&version_1).unwrap();
        assert_eq!(value.offset, Offset(9));
        assert_eq!(value.leader_epoch, -1);
        assert_eq!(value.commit_timestamp, TimestampMs(3));
    }

    #[test]
    fn other_record_types_are_recognised_and_bad_bytes_are_errors() {
        assert_eq!(
            decode_key(&[0, 2, 0, 1, b'g']).unwrap(),
            CoordinatorKey::Other { version: 2 }
        );
        assert!(matches!(
            decode_key(&[0xff, 0xff]),
            Err(OffsetRecordError::InvalidKeyVersion { version: -1 })
        ));
        assert!(decode_key(&[0, 1, 0, 5, b'g']).is_err());
        let mut trailing = encode_key(&key("g", "t", 0)).unwrap();
        trailing.push(0);
        assert!(matches!(
            decode_key(&trailing),
            Err(OffsetRecordError::TrailingBytes { .. })
        ));
        assert!(matches!(
            decode_value(&[0, 4]),
            Err(OffsetRecordError::UnsupportedValueVersion { version: 4 })
        ));
    }

    proptest! {
        #[test]
        fn keys_and_values_round_trip(
            group in ".{1,40}",
            topic in "[a-zA-Z0-9._-]{3,20}",
            partition in 0u32..=i32::MAX as u32,
            offset in 0u64..=i64::MAX as u64,
            metadata in ".{0,40}",
            timestamp in any::<i64>(),
        ) {
            let key = key(&group, &topic, partition);
            prop_assert_eq!(
                decode_key(&encode_key(&key).unwrap()).unwrap(),
                CoordinatorKey::OffsetCommit(key)
            );
            let value = OffsetCommitValue {
                offset: Offset(offset),
                leader_epoch: -1,
                metadata,
                commit_timestamp: TimestampMs(timestamp),
            };
            prop_assert_eq!(decode_value(&encode_value(&value).unwrap()).unwrap(), value);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_key(&bytes);
            let _ = decode_value(&bytes);
        }
    }
}
