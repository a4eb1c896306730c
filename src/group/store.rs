//! Committed offsets and the offsets topic that keeps them durable: `__consumer_offsets`, a
//! compacted topic (`cleanup.policy=compact`) as in Kafka.
//!
//! A commit appends one record per partition (layout in `offset_record`), keyed by group, topic
//! and partition, to partition `abs(javaHashCode(group)) % partitions` of the topic (Kafka's
//! placement), so all of a group's commits are ordered in one partition, and the records of one
//! commit are appended together. Appends are [`Durability::Durable`]: a commit is acknowledged once
//! synced, and survives a crash. Reading the topic from its log start offset to its log end offset
//! and keeping the last record per key rebuilds every group's committed offsets; a tombstone (a
//! null value) deletes one. Compaction keeps the topic small without changing what it rebuilds.
//!
//! [`Durability::Durable`]: crate::engine::Durability::Durable

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::config::{CleanupPolicy, LogConfig};
use crate::engine::{Engine, FetchOptions, OFFSETS_TOPIC};
use crate::error::TopicError;
use crate::format::batch::BatchIter;
use crate::format::{Batch, BatchBuilder, NewRecord, Record};
use crate::types::{Offset, TimestampMs, TopicName, TopicPartition};

use super::error::{CoordinatorError, OffsetRecordError};
use super::offset_record::{
    CoordinatorKey, OffsetCommitKey, OffsetCommitValue, decode_key, decode_value, encode_key,
    encode_value,
};

/// `segment.bytes` of the offsets topic (Kafka's `offsets.topic.segment.bytes`).
const OFFSETS_TOPIC_SEGMENT_BYTES: u64 = 100 * 1024 * 1024;
/// Bytes asked of the log per fetch while the offsets topic is read at open.
const LOAD_FETCH_BYTES: u64 = 1024 * 1024;
/// A commit of many partitions is split into batches of about this size (far below the default
/// `max.message.bytes`), all appended together.
const COMMIT_BATCH_BYTES_MAX: usize = 256 * 1024;

/// An offset committed by a group for a partition: the next offset the group will consume, and
/// the committer's metadata (at most 4096 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    /// The next offset the group will consume.
    pub offset: Offset,
    /// The committer's metadata; empty for none.
    pub metadata: String,
}

impl OffsetAndMetadata {
    /// An offset without metadata.
    pub fn new(offset: Offset) -> OffsetAndMetadata {
        OffsetAndMetadata {
            offset,
            metadata: String::new(),
        }
    }
}

/// The last record seen for a key, and where it is in the offsets topic: a commit whose append
/// completes late never overwrites a later one.
#[derive(Debug, Clone)]
struct Entry {
    value: Option<OffsetAndMetadata>,
    log_offset: Offset,
}

/// Every group's committed offsets, as the offsets topic holds them.
#[derive(Debug, Clone, Default)]
pub struct CommittedOffsets {
    groups: BTreeMap<String, BTreeMap<TopicPartition, Entry>>,
}

impl CommittedOffsets {
    /// Reads the offsets topic of `engine`; a data directory without one has no committed
    /// offsets. Creates nothing, so it suits read-only tools (`seglog groups`).
    pub fn load(engine: &Engine) -> Result<CommittedOffsets, CoordinatorError> {
        let mut offsets = CommittedOffsets::default();
        if let Some((topic, partition_count)) = offsets_topic(engine) {
            for partition in 0..partition_count {
                let tp = TopicPartition {
                    topic: topic.clone(),
                    partition,
                };
                load_partition(engine, &tp, &mut offsets)?;
            }
        }
        Ok(offsets)
    }

    /// The groups with at least one committed offset, in name order.
    pub fn groups(&self) -> Vec<String> {
        self.groups
            .iter()
            .filter(|(_, entries)| entries.values().any(|entry| entry.value.is_some()))
            .map(|(group, _)| group.clone())
            .collect()
    }

    /// `group`'s committed offsets by partition.
    pub fn group(&self, group: &str) -> BTreeMap<TopicPartition, OffsetAndMetadata> {
        self.groups
            .get(group)
            .into_iter()
            .flatten()
            .filter_map(|(tp, entry)| Some((tp.clone(), entry.value.clone()?)))
            .collect()
    }

    /// The offset `group` committed for `tp`.
    pub fn get(&self, group: &str, tp: &TopicPartition) -> Option<&OffsetAndMetadata> {
        self.groups.get(group)?.get(tp)?.value.as_ref()
    }

    /// Records the commit (or, with `None`, the deletion) stored at `log_offset` of the offsets
    /// topic, unless a later record of the same key was applied already.
    pub(crate) fn apply(
        &mut self,
        group: &str,
        tp: TopicPartition,
        value: Option<OffsetAndMetadata>,
        log_offset: Offset,
    ) {
        let entries = self.groups.entry(group.to_owned()).or_default();
        match entries.get(&tp) {
            Some(entry) if entry.log_offset >= log_offset => {}
            _ => {
                entries.insert(tp, Entry { value, log_offset });
            }
        }
    }
}

/// The offsets topic and its partition count, if it exists.
pub(crate) fn offsets_topic(engine: &Engine) -> Option<(TopicName, u32)> {
    engine
        .list_topics()
        .into_iter()
        .find(|(topic, _)| topic.as_str() == OFFSETS_TOPIC)
        .map(|(topic, metadata)| (topic, metadata.partition_count))
}

/// The offsets topic, created compacted with `partition_count` partitions if it does not exist;
/// an existing one keeps its partition count.
pub(crate) fn ensure_offsets_topic(
    engine: &Engine,
    partition_count: u32,
) -> Result<(TopicName, u32), CoordinatorError> {
    if let Some(existing) = offsets_topic(engine) {
        return Ok(existing);
    }
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::Compact,
        segment_bytes: OFFSETS_TOPIC_SEGMENT_BYTES,
        ..LogConfig::default()
    };
    let topic = TopicName::parse(OFFSETS_TOPIC).map_err(|error| CoordinatorError::CreateTopic {
        topic: OFFSETS_TOPIC.to_owned(),
        source: error.into(),
    })?;
    match engine.create_internal_topic(topic, partition_count, config) {
        Ok(topic) => Ok((topic, partition_count)),
        Err(TopicError::TopicExists { .. }) => {
            offsets_topic(engine).ok_or_else(|| CoordinatorError::CreateTopic {
                topic: OFFSETS_TOPIC.to_owned(),
                source: TopicError::UnknownTopic {
                    topic: OFFSETS_TOPIC.to_owned(),
                },
            })
        }
        Err(source) => Err(CoordinatorError::CreateTopic {
            topic: OFFSETS_TOPIC.to_owned(),
            source,
        }),
    }
}

/// The partition of the offsets topic that holds `group`'s commits: Kafka's
/// `Utils.abs(groupId.hashCode()) % partitionCount`, with Java's `String.hashCode`.
pub fn partition_for_group(group: &str, partition_count: u32) -> u32 {
    let hash = group.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    // Kafka's `Utils.abs` maps `Integer.MIN_VALUE` to 0.
    let positive = if hash == i32::MIN {
        0
    } else {
        hash.unsigned_abs()
    };
    positive % partition_count.max(1)
}

fn load_partition(
    engine: &Engine,
    tp: &TopicPartition,
    offsets: &mut CommittedOffsets,
) -> Result<(), CoordinatorError> {
    let description = engine
        .describe_partition(tp.topic.as_str(), tp.partition)
        .map_err(|source| CoordinatorError::Describe {
            partition: tp.clone(),
            source,
        })?;
    let log_end_offset = description.log_end_offset;
    let mut next_offset = description.log_start_offset;
    // Each round moves `next_offset` forward or fails, so the loop ends at the log end offset.
    while next_offset < log_end_offset {
        let options = FetchOptions {
            max_bytes: LOAD_FETCH_BYTES,
            ..FetchOptions::default()
        };
        let data = engine
            .fetch(&tp.topic, tp.partition, next_offset, options)
            .wait()
            .map_err(|source| CoordinatorError::Read {
                partition: tp.clone(),
                offset: next_offset,
                source,
            })?;
        let fetched_from = next_offset;
        next_offset = apply_batches(tp, data.batches(), fetched_from, offsets)?;
        if next_offset <= fetched_from {
            return Err(CoordinatorError::NoProgress {
                partition: tp.clone(),
                offset: next_offset,
                log_end_offset,
            });
        }
    }
    Ok(())
}

/// Applies the records at or after `from` of whole batches; returns the offset after the last.
fn apply_batches(
    tp: &TopicPartition,
    batches: BatchIter,
    from: Offset,
    offsets: &mut CommittedOffsets,
) -> Result<Offset, CoordinatorError> {
    let mut next_offset = from;
    for batch in batches {
        let batch = batch.map_err(|source| CoordinatorError::Batch {
            partition: tp.clone(),
            offset: next_offset,
            source,
        })?;
        if !batch.header().attributes.is_control() {
            apply_batch(tp, &batch, from, offsets)?;
        }
        let after = u64::try_from(batch.last_offset().saturating_add(1)).unwrap_or(0);
        next_offset = next_offset.max(Offset(after));
    }
    Ok(next_offset)
}

fn apply_batch(
    tp: &TopicPartition,
    batch: &Batch,
    from: Offset,
    offsets: &mut CommittedOffsets,
) -> Result<(), CoordinatorError> {
    let records = batch.records().map_err(|source| CoordinatorError::Batch {
        partition: tp.clone(),
        offset: Offset(u64::try_from(batch.base_offset()).unwrap_or(0)),
        source,
    })?;
    for record in &records {
        let offset = batch
            .base_offset()
            .saturating_add(i64::from(record.offset_delta));
        let offset = Offset(u64::try_from(offset).unwrap_or(0));
        if offset < from {
            continue;
        }
        apply_record(record, offset, offsets).map_err(|source| CoordinatorError::Record {
            partition: tp.clone(),
            offset,
            source,
        })?;
    }
    Ok(())
}

fn apply_record(
    record: &Record,
    log_offset: Offset,
    offsets: &mut CommittedOffsets,
) -> Result<(), OffsetRecordError> {
    if let Some(commit) = decode_commit_record(record)? {
        offsets.apply(
            &commit.group,
            commit.topic_partition,
            commit.committed,
            log_offset,
        );
    }
    Ok(())
}

/// One offset commit as `__consumer_offsets` holds it: `committed` is `None` for a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRecord {
    /// The group id.
    pub group: String,
    /// The committed partition.
    pub topic_partition: TopicPartition,
    /// The committed offset and metadata; `None` for a tombstone, which deletes the commit.
    pub committed: Option<OffsetAndMetadata>,
}

/// The offset commit a record of `__consumer_offsets` holds; `None` for Kafka's other
/// coordinator records (group metadata), which seglog skips.
pub fn decode_commit_record(record: &Record) -> Result<Option<CommitRecord>, OffsetRecordError> {
    let key = record.key.as_ref().ok_or(OffsetRecordError::NullKey)?;
    let CoordinatorKey::OffsetCommit(key) = decode_key(key)? else {
        return Ok(None);
    };
    let committed = match &record.value {
        Some(value) => {
            let value = decode_value(value)?;
            Some(OffsetAndMetadata {
                offset: value.offset,
                metadata: value.metadata,
            })
        }
        None => None,
    };
    Ok(Some(CommitRecord {
        group: key.group,
        topic_partition: TopicPartition {
            topic: key.topic,
            partition: key.partition,
        },
        committed,
    }))
}

/// The records of one commit (a `None` value is a tombstone), as whole batches ready to append.
pub(crate) fn commit_records(
    group: &str,
    entries: &[(TopicPartition, Option<OffsetAndMetadata>)],
    now: TimestampMs,
) -> Result<Bytes, OffsetRecordError> {
    let mut out = Vec::new();
    let mut builder = BatchBuilder::new(0);
    for (tp, value) in entries {
        let key = encode_key(&OffsetCommitKey {
            group: group.to_owned(),
            topic: tp.topic.clone(),
            partition: tp.partition,
        })?;
        let value = value
            .as_ref()
            .map(|value| {
                encode_value(&OffsetCommitValue {
                    offset: value.offset,
                    leader_epoch: -1,
                    metadata: value.metadata.clone(),
                    commit_timestamp: now,
                })
            })
            .transpose()?;
        let record = NewRecord {
            timestamp_ms: now.0,
            key: Some(&key),
            value: value.as_deref(),
            headers: &[],
        };
        if builder.records_count() > 0 && builder.size_bytes_with(&record) > COMMIT_BATCH_BYTES_MAX
        {
            let full = std::mem::replace(&mut builder, BatchBuilder::new(0));
            out.extend_from_slice(&full.build().unwrap_or_default());
        }
        builder.push(&record);
    }
    out.extend_from_slice(&builder.build().unwrap_or_default());
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_land_on_kafkas_partition() {
        // Java: "my-group".hashCode() == -1_906_497_762, and 1_906_497_762 % 50 == 12.
        assert_eq!(partition_for_group("my-group", 50), 12);
        assert_eq!(partition_for_group("", 50), 0);
        assert_eq!(partition_for_group("anything", 1), 0);
    }

    #[test]
    fn a_later_record_wins_whatever_the_order_it_is_applied_in() {
        let tp = TopicPartition {
            topic: TopicName::parse("t").unwrap(),
            partition: 0,
        };
        let mut offsets = CommittedOffsets::default();
        offsets.apply(
            "g",
            tp.clone(),
            Some(OffsetAndMetadata::new(Offset(9))),
            Offset(5),
        );
        offsets.apply(
            "g",
            tp.clone(),
            Some(OffsetAndMetadata::new(Offset(3))),
            Offset(4),
        );
        assert_eq!(offsets.get("g", &tp).unwrap().offset, Offset(9));
        offsets.apply("g", tp.clone(), None, Offset(6));
        assert_eq!(offsets.get("g", &tp), None);
        assert!(offsets.groups().is_empty());
    }
}
