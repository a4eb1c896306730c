//! Segment file names and partition directory names parsed from arbitrary strings.
//!
//! Invariants: no panic; a name that parses is exactly the name the parsed value writes
//! (`name(parse(s)) == s`, so two different names never denote the same file or partition), and
//! `parse(name(x)) == x` for values built from the input; a parsed partition directory's topic is
//! a legal topic name, which can never escape the data directory.
#![no_main]

use std::path::{Component, Path};

use libfuzzer_sys::fuzz_target;
use seglog::format::file_name::{
    FileState, SegmentFileKind, SegmentFileName, parse_partition_dir_name, partition_dir_name,
};
use seglog::types::{Offset, TopicName, TopicPartition};

const KINDS: [SegmentFileKind; 4] = [
    SegmentFileKind::Log,
    SegmentFileKind::Index,
    SegmentFileKind::TimeIndex,
    SegmentFileKind::TxnIndex,
];
const STATES: [FileState; 4] = [
    FileState::Live,
    FileState::Deleted,
    FileState::Cleaned,
    FileState::Swap,
];

fuzz_target!(|data: &[u8]| {
    if let Some(value) = value_from_bytes(data) {
        check_built_names(value);
    }
    let Ok(name) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(parsed) = SegmentFileName::parse(name) {
        assert_eq!(parsed.file_name(), name, "segment name is not canonical");
        assert!(parsed.base_offset.0 <= i64::MAX as u64);
        let joined = parsed.path_in(Path::new("/data/p-0"));
        assert_eq!(joined.parent(), Some(Path::new("/data/p-0")));
    }
    if let Some(topic_partition) = parse_partition_dir_name(name) {
        assert_eq!(
            partition_dir_name(&topic_partition),
            name,
            "dir name is not canonical"
        );
        let components: Vec<_> = Path::new(name).components().collect();
        assert!(
            matches!(components[..], [Component::Normal(_)]),
            "{name:?} escapes"
        );
    }
});

struct Value {
    segment: SegmentFileName,
    topic_partition: Option<TopicPartition>,
}

/// A segment name and a partition built from the input's first bytes; the topic is the rest.
fn value_from_bytes(data: &[u8]) -> Option<Value> {
    let (head, topic) = data.split_at_checked(13)?;
    let mut offset = [0u8; 8];
    offset.copy_from_slice(&head[..8]);
    let mut partition = [0u8; 4];
    partition.copy_from_slice(&head[8..12]);
    let segment = SegmentFileName {
        base_offset: Offset(u64::from_be_bytes(offset) & i64::MAX as u64),
        kind: KINDS[usize::from(head[12] & 3)],
        state: STATES[usize::from((head[12] >> 2) & 3)],
    };
    let topic_partition = std::str::from_utf8(topic)
        .ok()
        .and_then(|topic| TopicName::parse(topic).ok())
        .map(|topic| TopicPartition {
            topic,
            partition: u32::from_be_bytes(partition) & i32::MAX as u32,
        });
    Some(Value {
        segment,
        topic_partition,
    })
}

fn check_built_names(value: Value) {
    let name = value.segment.file_name();
    assert_eq!(SegmentFileName::parse(&name), Some(value.segment), "{name}");
    if let Some(topic_partition) = value.topic_partition {
        let name = partition_dir_name(&topic_partition);
        assert_eq!(
            parse_partition_dir_name(&name),
            Some(topic_partition),
            "{name}"
        );
    }
}
