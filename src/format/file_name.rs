//! Segment and checkpoint file names (FORMAT.md § File names; Kafka's `LogFileUtils`).
//!
//! Every file name seglog writes or parses is built here, and nowhere else.

use std::path::{Path, PathBuf};

use crate::limits::FILE_NAME_OFFSET_DIGITS;
use crate::types::{Offset, PartitionId, TopicName, TopicPartition};

/// The kinds of per-segment files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SegmentFileKind {
    /// `.log`: the segment's record batches.
    Log,
    /// `.index`: the sparse offset index (relative offset to file position).
    Index,
    /// `.timeindex`: the sparse time index (timestamp to relative offset).
    TimeIndex,
    /// `.txnindex`: Kafka's aborted-transaction index; seglog writes none but recognises it.
    TxnIndex,
}

impl SegmentFileKind {
    /// The kind's file extension, dot included (`.log`, `.index`, ...).
    pub fn extension(self) -> &'static str {
        match self {
            SegmentFileKind::Log => ".log",
            SegmentFileKind::Index => ".index",
            SegmentFileKind::TimeIndex => ".timeindex",
            SegmentFileKind::TxnIndex => ".txnindex",
        }
    }

    pub(crate) const ALL: [SegmentFileKind; 4] = [
        SegmentFileKind::Log,
        SegmentFileKind::Index,
        SegmentFileKind::TimeIndex,
        SegmentFileKind::TxnIndex,
    ];
}

/// A transient state suffix added after the kind extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileState {
    /// An ordinary, live file.
    Live,
    /// `.deleted`: removed from the log, waiting to be unlinked.
    Deleted,
    /// `.cleaned`: compaction output still being written.
    Cleaned,
    /// `.swap`: compaction output being swapped in.
    Swap,
}

impl FileState {
    /// The suffix after the kind's extension, dot included; empty for a live file.
    pub fn suffix(self) -> &'static str {
        match self {
            FileState::Live => "",
            FileState::Deleted => ".deleted",
            FileState::Cleaned => ".cleaned",
            FileState::Swap => ".swap",
        }
    }
}

/// A parsed segment file name: `<20-digit base offset><kind extension><state suffix>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentFileName {
    /// The segment's base offset: the offset of its first record.
    pub base_offset: Offset,
    /// Which of the segment's files.
    pub kind: SegmentFileKind,
    /// Live, or on its way to deletion or swap-in.
    pub state: FileState,
}

impl SegmentFileName {
    /// The name of a live file of the segment at `base_offset`.
    pub fn live(base_offset: Offset, kind: SegmentFileKind) -> SegmentFileName {
        SegmentFileName {
            base_offset,
            kind,
            state: FileState::Live,
        }
    }

    /// The same file in another state (`00000000000000000000.log` to `...log.deleted`).
    pub fn with_state(self, state: FileState) -> SegmentFileName {
        SegmentFileName { state, ..self }
    }

    /// Parses a file name, or `None` if it is not a segment file.
    pub fn parse(name: &str) -> Option<SegmentFileName> {
        let (stem, rest) = name.split_at_checked(FILE_NAME_OFFSET_DIGITS)?;
        if !stem.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        let base_offset = Offset(stem.parse::<u64>().ok().filter(|o| *o <= i64::MAX as u64)?);
        let kind = SegmentFileKind::ALL
            .into_iter()
            .find(|kind| rest.starts_with(kind.extension()))?;
        let state = match &rest[kind.extension().len()..] {
            "" => FileState::Live,
            ".deleted" => FileState::Deleted,
            ".cleaned" => FileState::Cleaned,
            ".swap" => FileState::Swap,
            _ => return None,
        };
        Some(SegmentFileName {
            base_offset,
            kind,
            state,
        })
    }

    /// The file name: 20-digit zero-padded base offset, extension, suffix.
    pub fn file_name(&self) -> String {
        format!(
            "{:020}{}{}",
            self.base_offset.0,
            self.kind.extension(),
            self.state.suffix()
        )
    }

    /// The file's path in the partition directory `dir`.
    pub fn path_in(&self, dir: &Path) -> PathBuf {
        dir.join(self.file_name())
    }
}

/// A producer-state snapshot's name (FORMAT.md §5.8): `<20-digit offset>.snapshot`, the offset
/// the state is as of; `.snapshot.tmp` while it is written, before its atomic rename.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SnapshotFileName {
    /// The offset the snapshot's state is as of: the next offset to apply.
    pub offset: Offset,
    /// Live, or still being written.
    pub state: SnapshotFileState,
}

/// Whether a snapshot file is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SnapshotFileState {
    /// `.snapshot`: written, synced and renamed.
    Live,
    /// `.snapshot.tmp`: being written; a leftover of a crash, removed at open.
    Writing,
}

const SNAPSHOT_EXTENSION: &str = ".snapshot";

impl SnapshotFileName {
    /// The live snapshot as of `offset`.
    pub fn live(offset: Offset) -> SnapshotFileName {
        SnapshotFileName {
            offset,
            state: SnapshotFileState::Live,
        }
    }

    /// The name it is written under before its rename.
    pub fn writing(self) -> SnapshotFileName {
        SnapshotFileName {
            state: SnapshotFileState::Writing,
            ..self
        }
    }

    /// Parses a file name, or `None` if it is not a snapshot file.
    pub fn parse(name: &str) -> Option<SnapshotFileName> {
        let (stem, rest) = name.split_at_checked(FILE_NAME_OFFSET_DIGITS)?;
        if !stem.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        let offset = Offset(stem.parse::<u64>().ok().filter(|o| *o <= i64::MAX as u64)?);
        let state = match rest.strip_prefix(SNAPSHOT_EXTENSION)? {
            "" => SnapshotFileState::Live,
            CHECKPOINT_TMP_SUFFIX => SnapshotFileState::Writing,
            _ => return None,
        };
        Some(SnapshotFileName { offset, state })
    }

    /// The file name.
    pub fn file_name(&self) -> String {
        let suffix = match self.state {
            SnapshotFileState::Live => "",
            SnapshotFileState::Writing => CHECKPOINT_TMP_SUFFIX,
        };
        format!("{:020}{SNAPSHOT_EXTENSION}{suffix}", self.offset.0)
    }

    /// The file's path in the partition directory `dir`.
    pub fn path_in(&self, dir: &Path) -> PathBuf {
        dir.join(self.file_name())
    }
}

/// Path of a live segment file.
pub fn segment_path(dir: &Path, base_offset: Offset, kind: SegmentFileKind) -> PathBuf {
    SegmentFileName::live(base_offset, kind).path_in(dir)
}

/// Name of a partition directory, `<topic>-<partition>`.
pub fn partition_dir_name(topic_partition: &TopicPartition) -> String {
    topic_partition.to_string()
}

/// The largest partition id: Kafka's partition ids are non-negative `int32`s.
const PARTITION_ID_MAX: PartitionId = i32::MAX as PartitionId;

/// Parses a partition directory name; the topic is everything before the last `-`.
/// Only the name [`partition_dir_name`] writes is accepted: no leading zeros (`t-01` would
/// alias `t-1`), and a partition that fits Kafka's `int32` partition id.
pub fn parse_partition_dir_name(name: &str) -> Option<TopicPartition> {
    let (topic, partition) = name.rsplit_once('-')?;
    if partition.is_empty() || !partition.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    if partition.len() > 1 && partition.starts_with('0') {
        return None;
    }
    let partition: PartitionId = partition.parse().ok()?;
    if partition > PARTITION_ID_MAX {
        return None;
    }
    let topic = TopicName::parse(topic).ok()?;
    Some(TopicPartition { topic, partition })
}

/// Each partition's recovery point: the offset below which its data was synced, where recovery
/// starts. This checkpoint and the marker files below have Kafka's names.
pub const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
/// Each partition's log start offset, which DeleteRecords and retention move.
pub const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";
/// Written at a clean close and removed at open: an open that finds it recovers nothing.
pub const CLEAN_SHUTDOWN_MARKER: &str = ".kafka_cleanshutdown";
/// The cleaner's progress: each compacted partition's first dirty offset.
pub const CLEANER_OFFSET_CHECKPOINT: &str = "cleaner-offset-checkpoint";
/// The data directory's lock: one opener at a time.
pub const LOCK_FILE: &str = ".lock";
/// The topic registry (seglog's own; Kafka keeps topics in its metadata log).
pub const TOPIC_REGISTRY: &str = "seglog-topics";
/// The last block of producer ids handed out (seglog's own; Kafka keeps it in its metadata log).
pub const PRODUCER_ID_BLOCK: &str = "seglog-producer-ids";
/// Suffix a partition directory gets while it is being deleted (Kafka's `-delete`).
pub const DELETE_DIR_SUFFIX: &str = "-delete";
/// Suffix of a checkpoint being written, before its atomic rename.
pub const CHECKPOINT_TMP_SUFFIX: &str = ".tmp";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_have_twenty_digits() {
        let name = SegmentFileName::live(Offset(368_769), SegmentFileKind::Log);
        assert_eq!(name.file_name(), "00000000000000368769.log");
        assert_eq!(
            SegmentFileName::parse("00000000000000368769.log"),
            Some(name)
        );
        let swap = name.with_state(FileState::Swap);
        assert_eq!(swap.file_name(), "00000000000000368769.log.swap");
        assert_eq!(SegmentFileName::parse(&swap.file_name()), Some(swap));
        let index = SegmentFileName::parse("00000000000000000000.timeindex.deleted").unwrap();
        assert_eq!(index.kind, SegmentFileKind::TimeIndex);
        assert_eq!(index.state, FileState::Deleted);
    }

    #[test]
    fn non_segment_names_are_not_parsed() {
        for name in [
            "",
            "0.log",
            "0000000000000036876a.log",
            "00000000000000368769.log.bak",
            "00000000000000368769.snapshot",
            "99999999999999999999.log",
            "leader-epoch-checkpoint",
            "00000000000000368769",
        ] {
            assert_eq!(SegmentFileName::parse(name), None, "{name:?}");
        }
    }

    #[test]
    fn snapshot_names_have_twenty_digits() {
        let name = SnapshotFileName::live(Offset(368_769));
        assert_eq!(name.file_name(), "00000000000000368769.snapshot");
        assert_eq!(
            SnapshotFileName::parse("00000000000000368769.snapshot"),
            Some(name)
        );
        let writing = name.writing();
        assert_eq!(writing.file_name(), "00000000000000368769.snapshot.tmp");
        assert_eq!(SnapshotFileName::parse(&writing.file_name()), Some(writing));
        for other in [
            "00000000000000368769.log",
            "00000000000000368769.snapshot.deleted",
            "0000000000000036876a.snapshot",
            "99999999999999999999.snapshot",
            "368769.snapshot",
        ] {
            assert_eq!(SnapshotFileName::parse(other), None, "{other:?}");
        }
    }

    #[test]
    fn partition_dir_names_round_trip() {
        let tp = parse_partition_dir_name("my-topic-12").unwrap();
        assert_eq!(tp.topic.as_str(), "my-topic");
        assert_eq!(tp.partition, 12);
        assert_eq!(partition_dir_name(&tp), "my-topic-12");
        assert_eq!(parse_partition_dir_name("topic"), None);
        assert_eq!(parse_partition_dir_name("topic-"), None);
        assert_eq!(parse_partition_dir_name("-1"), None);
        assert_eq!(parse_partition_dir_name("bad/name-1"), None);
    }
}
