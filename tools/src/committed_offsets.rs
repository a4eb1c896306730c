//! Every group's committed offsets, read-only: the records of `__consumer_offsets` read through a
//! [`DataDirView`] and decoded with the library's `offset_record`, keeping the last record per key
//! (a tombstone deletes the key's offset), as the group coordinator rebuilds them when it loads.
//! Kafka's other coordinator records (group metadata and the like) are skipped, as the
//! coordinator skips them. Without an offsets topic there are no groups.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use seglog::format::{Batch, Record};
use seglog::group::{
    GroupDescription, GroupState, OFFSETS_TOPIC, OffsetAndMetadata, PartitionLag,
    decode_commit_record,
};
use seglog::types::{Offset, TopicName, TopicPartition};

use crate::dir_view::DataDirView;

/// Bytes read from the offsets topic at a time.
const READ_BYTES: u64 = 1024 * 1024;

/// The offset (or, `None`, the deletion) last committed per group and partition.
#[derive(Debug, Clone, Default)]
pub struct CommittedOffsets {
    groups: BTreeMap<String, BTreeMap<TopicPartition, Option<OffsetAndMetadata>>>,
}

impl CommittedOffsets {
    /// Reads every partition of the offsets topic from its log start offset to its log end.
    pub fn load(view: &DataDirView) -> anyhow::Result<CommittedOffsets> {
        let mut offsets = CommittedOffsets::default();
        let topic = TopicName::parse(OFFSETS_TOPIC).context("the offsets topic's name")?;
        let Some(metadata) = view.topics().get(&topic) else {
            return Ok(offsets);
        };
        for partition in 0..metadata.partition_count {
            let tp = TopicPartition {
                topic: topic.clone(),
                partition,
            };
            offsets
                .load_partition(view, &tp)
                .with_context(|| format!("cannot read the committed offsets in {tp}"))?;
        }
        Ok(offsets)
    }

    /// The groups with at least one committed offset, in name order.
    pub fn groups(&self) -> Vec<String> {
        self.groups
            .iter()
            .filter(|(_, entries)| entries.values().any(Option::is_some))
            .map(|(group, _)| group.clone())
            .collect()
    }

    /// `group`'s committed offsets by partition.
    pub fn group(&self, group: &str) -> BTreeMap<TopicPartition, OffsetAndMetadata> {
        self.groups
            .get(group)
            .into_iter()
            .flatten()
            .filter_map(|(tp, value)| Some((tp.clone(), value.clone()?)))
            .collect()
    }

    fn load_partition(&mut self, view: &DataDirView, tp: &TopicPartition) -> anyhow::Result<()> {
        let partition = view.partition(tp)?;
        let mut next_offset = partition.log_start_offset;
        loop {
            let batches = partition.read_from(next_offset, READ_BYTES)?;
            if batches.is_empty() {
                return Ok(());
            }
            let from = next_offset;
            for batch in &batches {
                if !batch.header().attributes.is_control() {
                    self.apply_batch(batch, from)?;
                }
                let after = u64::try_from(batch.last_offset().saturating_add(1)).unwrap_or(0);
                next_offset = next_offset.max(after);
            }
            if next_offset == from {
                bail!("no batch past offset {from}");
            }
        }
    }

    /// Applies the records at or after `from` (records before the log start offset are gone).
    fn apply_batch(&mut self, batch: &Batch, from: u64) -> anyhow::Result<()> {
        let records = batch.records().with_context(|| {
            format!(
                "records of the batch at offset {} do not decode",
                batch.base_offset()
            )
        })?;
        for record in &records {
            let offset = batch
                .base_offset()
                .saturating_add(i64::from(record.offset_delta));
            if u64::try_from(offset).is_ok_and(|offset| offset >= from) {
                self.apply_record(record)
                    .with_context(|| format!("record at offset {offset}"))?;
            }
        }
        Ok(())
    }

    fn apply_record(&mut self, record: &Record) -> anyhow::Result<()> {
        if let Some(commit) = decode_commit_record(record)? {
            self.groups
                .entry(commit.group)
                .or_default()
                .insert(commit.topic_partition, commit.committed);
        }
        Ok(())
    }
}

/// A group from its committed offsets alone (no live members: groups live in the process that
/// runs them), each partition with its log end offset and lag, as `describe_committed` reports it.
pub fn describe_committed(
    view: &DataDirView,
    offsets: &CommittedOffsets,
    group: &str,
) -> anyhow::Result<GroupDescription> {
    let committed = offsets.group(group);
    if committed.is_empty() {
        bail!("consumer group {group} does not exist");
    }
    let mut partitions = Vec::with_capacity(committed.len());
    for (tp, committed) in committed {
        let log_end_offset = log_end_offset(view, &tp)?;
        let lag = log_end_offset.map(|end| end.0.saturating_sub(committed.offset.0));
        partitions.push(PartitionLag {
            partition: tp,
            committed: Some(committed),
            log_end_offset,
            lag,
            owner: None,
        });
    }
    Ok(GroupDescription {
        group: group.to_owned(),
        state: GroupState::Empty,
        strategy: None,
        generation: None,
        members: Vec::new(),
        partitions,
    })
}

/// `None` if the topic or partition no longer exists.
fn log_end_offset(view: &DataDirView, tp: &TopicPartition) -> anyhow::Result<Option<Offset>> {
    let exists = view
        .topics()
        .get(&tp.topic)
        .is_some_and(|metadata| tp.partition < metadata.partition_count);
    if !exists {
        return Ok(None);
    }
    Ok(Some(Offset(view.partition(tp)?.log_end_offset)))
}
