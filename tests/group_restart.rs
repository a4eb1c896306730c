//! Committed offsets are durable (issue 6, part 2). Proves that: members of a group that commit
//! different positions, after the engine is closed and reopened, resume each partition exactly at
//! its committed offset (not where `auto.offset.reset` would start) and then consume every later
//! record once; commits survive an engine dropped without `close` (a crash: commits are durable
//! appends); a deleted group's tombstones keep it deleted after a restart; and the offsets topic
//! is created compacted (`cleanup.policy=compact`) and holds Kafka's offset-commit records, keyed
//! by group, topic and partition, which `CommittedOffsets::load` reads without a coordinator.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use seglog::config::CleanupPolicy;
use seglog::engine::FetchOptions;
use seglog::format::batch::BatchIter;
use seglog::group::offset_record::{CoordinatorKey, decode_key, decode_value};
use seglog::group::{CommittedOffsets, GroupCoordinator, OFFSETS_TOPIC, PollOptions};
use seglog::types::{Offset, TopicName, TopicPartition};
use support::groups::{
    Groups, PATIENCE, by_partition, config, config_with, open_engine, settle, subscribed, tp,
};

mod support;

const PARTITIONS: u32 = 4;
const PER_PARTITION: usize = 20;

/// Two members of group `g` consume part of each partition and commit; returns the committed
/// offset of every partition.
fn consume_part_and_commit(coordinator: &GroupCoordinator) -> BTreeMap<TopicPartition, Offset> {
    let mut first = subscribed(coordinator, config("g"), &["t"]);
    let mut second = subscribed(coordinator, config("g"), &["t"]);
    settle(coordinator, "g", &mut [&mut first, &mut second]);
    let mut committed = BTreeMap::new();
    for (index, member) in [&mut first, &mut second].into_iter().enumerate() {
        for (step, partition) in member.assignment().into_iter().enumerate() {
            // A different position in every partition: 3, 8, 5, 10.
            let position = Offset((3 + 5 * step + 2 * index) as u64);
            member.seek(&partition, position).unwrap();
            committed.insert(partition, position);
        }
        member.commit_sync().unwrap();
    }
    first.close().unwrap();
    second.close().unwrap();
    committed
}

/// Two new members with `auto.offset.reset=latest` start at the committed offsets and consume the
/// rest of every partition exactly once.
fn assert_members_resume_at(
    engine_dir: &std::path::Path,
    committed: &BTreeMap<TopicPartition, Offset>,
) {
    let engine = open_engine(engine_dir);
    let coordinator = GroupCoordinator::open(&engine).unwrap();
    for (partition, offset) in committed {
        assert_eq!(
            coordinator.committed("g", partition).unwrap().offset,
            *offset
        );
    }
    let latest = config_with("g", &[("auto.offset.reset", "latest")]);
    let mut first = subscribed(&coordinator, latest.clone(), &["t"]);
    let mut second = subscribed(&coordinator, latest, &["t"]);
    let remaining: usize = committed
        .values()
        .map(|offset| PER_PARTITION - offset.0 as usize)
        .sum();
    let options = PollOptions {
        max_records: 1000,
        max_bytes: u64::MAX,
        timeout: Duration::from_millis(20),
    };
    let mut records = Vec::new();
    let deadline = std::time::Instant::now() + PATIENCE;
    while records.len() < remaining {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {remaining}",
            records.len()
        );
        records.extend(first.poll_with(options).unwrap());
        records.extend(second.poll_with(options).unwrap());
    }
    assert_eq!(records.len(), remaining);
    let values = by_partition(&records);
    for (partition, offset) in committed {
        let expected: Vec<String> = (offset.0 as usize..PER_PARTITION)
            .map(|n| format!("p{}-{n}", partition.partition))
            .collect();
        assert_eq!(values[&partition.partition], expected, "{partition}");
    }
    drop((first, second, coordinator));
    engine.close().unwrap();
}

/// Two members commit part of every partition of `t` ([`consume_part_and_commit`]); then the
/// engine is closed, or dropped without `close` (all appends flushed before the commits).
/// Returns the data directory and the committed offsets.
fn commit_part_then(close: bool) -> (tempfile::TempDir, BTreeMap<TopicPartition, Offset>) {
    let Groups {
        coordinator,
        engine,
        dir,
    } = Groups::new(PARTITIONS, PER_PARTITION);
    if !close {
        engine.flush_all().unwrap();
    }
    let committed = consume_part_and_commit(&coordinator);
    assert_eq!(committed.len(), PARTITIONS as usize);
    drop(coordinator);
    match close {
        true => engine.close().unwrap(),
        false => drop(engine),
    }
    (dir, committed)
}

#[test]
fn members_resume_at_their_committed_offsets_after_the_engine_is_closed_and_reopened() {
    let (dir, committed) = commit_part_then(true);
    assert_members_resume_at(dir.path(), &committed);
}

#[test]
fn commits_survive_an_engine_dropped_without_close() {
    let (dir, committed) = commit_part_then(false);
    assert_members_resume_at(dir.path(), &committed);
}

#[test]
fn a_deleted_group_stays_deleted_after_a_restart() {
    let groups = Groups::new(1, 3);
    for group in ["kept", "deleted"] {
        groups.committed_consumer(group, 3).close().unwrap();
    }
    groups.coordinator.delete_group("deleted").unwrap();
    let Groups {
        coordinator,
        engine,
        dir,
    } = groups;
    drop(coordinator);
    engine.close().unwrap();
    let engine = open_engine(dir.path());
    let offsets = CommittedOffsets::load(&engine).unwrap();
    assert_eq!(offsets.groups(), ["kept"]);
    assert_eq!(offsets.get("kept", &tp("t", 0)).unwrap().offset, Offset(3));
    assert_eq!(offsets.get("deleted", &tp("t", 0)), None);
    engine.close().unwrap();
}

#[test]
fn the_offsets_topic_is_compacted_and_holds_kafkas_offset_commit_records() {
    let groups = Groups::new(1, 2);
    let engine = &groups.engine;
    let _consumer = groups.committed_consumer("g", 2);

    let topics = engine.list_topics();
    let (offsets_topic, metadata) = topics
        .iter()
        .find(|(topic, _)| topic.as_str() == OFFSETS_TOPIC)
        .unwrap();
    assert_eq!(metadata.config.cleanup_policy, CleanupPolicy::Compact);
    let fetched = engine
        .fetch(offsets_topic, 0, Offset(0), FetchOptions::default())
        .wait()
        .unwrap();
    let batch = BatchIter::new(fetched.records, u64::MAX)
        .next()
        .unwrap()
        .unwrap();
    let records = batch.records().unwrap();
    assert_eq!(records.len(), 1);
    let key = decode_key(records[0].key.as_ref().unwrap()).unwrap();
    let CoordinatorKey::OffsetCommit(key) = key else {
        panic!("{key:?}");
    };
    assert_eq!(key.group, "g");
    assert_eq!(key.topic, TopicName::parse("t").unwrap());
    assert_eq!(key.partition, 0);
    let value = decode_value(records[0].value.as_ref().unwrap()).unwrap();
    assert_eq!(value.offset, Offset(2));
    assert_eq!(value.leader_epoch, -1);
}
