//! A partition's Raft log across restarts: the entry map rebuilt from the batches and the state
//! file's anchors gives back every entry, its term and payload, after appends, a gap, a
//! truncation, a purge and a snapshot installed on a follower (before or after its purge); the
//! batches are Kafka's, the control ones marked so; retention by bytes keeps at least the limit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, RaftLogReader,
    SnapshotMeta, StoredMembership,
};
use seglog::engine::{Engine, EngineConfig, FetchOptions};
use seglog::format::batch::BatchIter;
use seglog::format::{BatchBuilder, NewRecord};
use seglog::types::{Offset, TopicName};
use seglog_raft::state_file::{Anchor, SnapshotRecord};
use seglog_raft::{Batches, LogStore, Replica, StateMachine, TypeConfig};

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

fn data(term: u64, index: u64, records: usize) -> Entry<TypeConfig> {
    let payload = EntryPayload::Normal(Batches(data_batch(&index.to_string(), records)));
    Entry {
        log_id: log_id(term, index),
        payload,
    }
}

fn membership(term: u64, index: u64) -> Entry<TypeConfig> {
    let voters: BTreeSet<u64> = [1, 2, 3].into();
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Membership(Membership::new(vec![voters], None)),
    }
}

fn blank(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Blank,
    }
}

async fn open(dir: &Path) -> (Engine, LogStore, StateMachine) {
    let (engine, replica) = open_replica(dir).await;
    (
        engine,
        LogStore::new(replica.clone()),
        StateMachine::new(replica),
    )
}

async fn open_replica(dir: &Path) -> (Engine, Replica) {
    let config = EngineConfig::default()
        .with_shard_count(1)
        .with_pin_shards(false);
    let engine = Engine::open(dir.join("log"), config).unwrap();
    let topic = match engine.describe_topic("t") {
        Ok(description) => description.topic,
        Err(_) => engine
            .create_topic("t", 1, seglog::config::LogConfig::default())
            .unwrap(),
    };
    let replica = Replica::open(engine.clone(), topic, 0, dir).await.unwrap();
    (engine, replica)
}

async fn append(store: &mut LogStore, entries: Vec<Entry<TypeConfig>>) {
    store.blocking_append(entries).await.unwrap();
}

fn summary(entries: &[Entry<TypeConfig>]) -> Vec<String> {
    entries
        .iter()
        .map(|entry| format!("{} {:?}", entry.log_id, entry.payload))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_read_back_the_same_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, mut store, _) = open(dir.path()).await;
    append(&mut store, vec![blank(1, 0), membership(1, 1)]).await;
    append(&mut store, (2..20).map(|i| data(1, i, 3)).collect()).await;
    // A new leader cuts the uncommitted suffix and writes its own.
    store.truncate(log_id(1, 15)).await.unwrap();
    append(
        &mut store,
        vec![blank(2, 15), data(2, 16, 5), data(2, 17, 1)],
    )
    .await;
    store.purge(log_id(1, 4)).await.unwrap();
    let before = store.try_get_log_entries(0..).await.unwrap();
    let state_before = store.get_log_state().await.unwrap();
    assert_eq!(before.first().unwrap().log_id, log_id(1, 5));
    assert_eq!(before.last().unwrap().log_id, log_id(2, 17));
    assert_eq!(before.len(), 13);
    drop(store);
    engine.close().unwrap();

    let (engine, mut store, _) = open(dir.path()).await;
    let after = store.try_get_log_entries(0..).await.unwrap();
    assert_eq!(summary(&after), summary(&before));
    assert_eq!(store.get_log_state().await.unwrap(), state_before);
    // Entry 16's five records sit after 5..=14 (3 each) and the blank entry 15.
    let EntryPayload::Normal(Batches(bytes)) = &after[11].payload else {
        panic!("entry 16 is data");
    };
    let batch = seglog::format::Batch::decode(bytes, u64::MAX).unwrap();
    assert_eq!(batch.header().partition_leader_epoch, 2);
    assert_eq!(batch.base_offset(), 2 + 13 * 3 + 1);
    drop(store);
    engine.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blank_and_membership_entries_are_control_batches() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, mut store, _) = open(dir.path()).await;
    append(
        &mut store,
        vec![blank(1, 0), membership(1, 1), data(1, 2, 2)],
    )
    .await;
    let topic = TopicName::parse("t").unwrap();
    let fetched = engine
        .fetch(&topic, 0, Offset(0), FetchOptions::default())
        .wait()
        .unwrap();
    let control: Vec<bool> = BatchIter::new(fetched.records, u64::MAX)
        .map(|batch| batch.unwrap().header().attributes.is_control())
        .collect();
    assert_eq!(control, vec![true, true, false]);
    drop(store);
    engine.close().unwrap();
}

/// Retention by bytes lets go of the oldest committed entries only while the rest still hold
/// `retention.bytes`, as Kafka's: an entry larger than it is kept, not purged with the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_bytes_keeps_at_least_retention_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, replica) = open_replica(dir.path()).await;
    let mut store = LogStore::new(replica.clone());
    let mut state_machine = StateMachine::new(replica.clone());
    // Four entries of one size.
    let entries: Vec<Entry<TypeConfig>> = (1..=4).map(|index| data(1, index, 3)).collect();
    append(&mut store, entries.clone()).await;
    let size = engine.describe_partition("t", 0).unwrap().size_bytes / 4;
    assert_eq!(replica.retention_point(-1, 0, 0), None, "nothing committed");
    state_machine.apply(entries).await.unwrap();
    let size = i64::try_from(size).unwrap();
    // Two entries hold one entry's size and a byte: the first two go.
    assert_eq!(replica.retention_point(-1, size + 1, 0), Some(log_id(1, 2)));
    assert_eq!(replica.retention_point(-1, size, 0), Some(log_id(1, 3)));
    // Even a limit below every entry's size keeps the newest.
    assert_eq!(replica.retention_point(-1, 1, 0), Some(log_id(1, 3)));
    assert_eq!(replica.retention_point(-1, 0, 0), Some(log_id(1, 4)));
    assert_eq!(replica.retention_point(-1, 4 * size, 0), None);
    // Records of 1970 are past any `retention.ms`: every committed entry goes.
    assert_eq!(
        replica.retention_point(1_000, -1, 1_000_000),
        Some(log_id(1, 4))
    );
    drop((store, state_machine));
    engine.close().unwrap();
}

/// The snapshot of a leader whose log goes on at entry 50, offset 1,000: its metadata, and
/// the snapshot installed by `state_machine`.
async fn install_leaders_snapshot(
    state_machine: &mut StateMachine,
) -> SnapshotMeta<u64, BasicNode> {
    let voters: BTreeSet<u64> = [1, 2, 3].into();
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(3, 49)),
        last_membership: StoredMembership::new(
            Some(log_id(2, 7)),
            Membership::new(vec![voters], None),
        ),
        snapshot_id: "3-49".into(),
    };
    let record = SnapshotRecord {
        meta: meta.clone(),
        next: Anchor {
            index: 50,
            offset: 1_000,
        },
    };
    let mut data_box = state_machine.begin_receiving_snapshot().await.unwrap();
    data_box
        .get_mut()
        .extend(serde_json::to_vec(&record).unwrap());
    state_machine
        .install_snapshot(&meta, data_box)
        .await
        .unwrap();
    meta
}

/// The log of `engine`'s t-0 starts and ends at `offset`.
fn assert_log_empty_at(engine: &Engine, offset: u64) {
    let description = engine.describe_partition("t", 0).unwrap();
    assert_eq!(description.log_start_offset, Offset(offset));
    assert_eq!(description.log_end_offset, Offset(offset));
}

/// After the restart, the follower's entries 50 and 51 and its snapshot read back.
async fn assert_restarted_at_the_leaders_offset(
    dir: &Path,
    engine: Engine,
    mut store: LogStore,
    state_machine: StateMachine,
    meta: &SnapshotMeta<u64, BasicNode>,
) {
    append(&mut store, vec![data(3, 50, 2), data(3, 51, 2)]).await;
    drop((store, state_machine));
    engine.close().unwrap();

    let (engine, mut store, mut state_machine) = open(dir).await;
    let entries = store.try_get_log_entries(0..).await.unwrap();
    let ids: Vec<LogId<u64>> = entries.iter().map(|entry| entry.log_id).collect();
    assert_eq!(ids, vec![log_id(3, 50), log_id(3, 51)]);
    let EntryPayload::Normal(Batches(bytes)) = &entries[0].payload else {
        panic!("entry 50 is data");
    };
    let batch = seglog::format::Batch::decode(bytes, u64::MAX).unwrap();
    assert_eq!(batch.base_offset(), 1_000);
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(3, 49)));
    let (applied, _) = state_machine.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(3, 49)));
    let current = state_machine.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, *meta);
    drop((store, state_machine));
    engine.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_installs_a_snapshot_restarts_its_log_at_the_leaders_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, mut store, mut state_machine) = open(dir.path()).await;
    // A stale suffix this follower holds from an old term.
    append(&mut store, vec![blank(1, 0), data(1, 1, 4), data(1, 2, 4)]).await;
    let meta = install_leaders_snapshot(&mut state_machine).await;
    store.purge(log_id(3, 49)).await.unwrap();
    assert_log_empty_at(&engine, 1_000);
    assert_restarted_at_the_leaders_offset(dir.path(), engine, store, state_machine, &meta).await;
}

/// openraft's core purges the log through an installed snapshot while its state machine task
/// installs it: a purge done first restarts the log at the leader's offset all the same, with
/// no entry after the snapshot needed (the leader may have none yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_purges_before_it_installs_the_snapshot_restarts_at_the_leaders_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, mut store, mut state_machine) = open(dir.path()).await;
    append(&mut store, vec![blank(1, 0), data(1, 1, 4), data(1, 2, 4)]).await;
    store.purge(log_id(3, 49)).await.unwrap();
    let meta = install_leaders_snapshot(&mut state_machine).await;
    assert_log_empty_at(&engine, 1_000);
    assert_restarted_at_the_leaders_offset(dir.path(), engine, store, state_machine, &meta).await;
}

/// A follower stopped after it installed a snapshot, before its purge: openraft purges through
/// the snapshot at the next start, and the log restarts at the leader's offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_stopped_between_install_and_purge_restarts_at_the_leaders_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, mut store, mut state_machine) = open(dir.path()).await;
    append(&mut store, vec![blank(1, 0), data(1, 1, 4), data(1, 2, 4)]).await;
    let meta = install_leaders_snapshot(&mut state_machine).await;
    drop((store, state_machine));
    engine.close().unwrap();

    let (engine, mut store, state_machine) = open(dir.path()).await;
    store.purge(log_id(3, 49)).await.unwrap();
    assert_log_empty_at(&engine, 1_000);
    assert_restarted_at_the_leaders_offset(dir.path(), engine, store, state_machine, &meta).await;
}

fn data_batch(tag: &str, records: usize) -> bytes::Bytes {
    let mut builder = BatchBuilder::new(0);
    for record in 0..records {
        let value = format!("{tag}-{record}");
        builder.push(&NewRecord {
            timestamp_ms: 1_000,
            key: None,
            value: Some(value.as_bytes()),
            headers: &[],
        });
    }
    builder.build().unwrap()
}

fn group_entry(term: u64, index: u64, batches: &[bytes::Bytes]) -> Entry<TypeConfig> {
    let payload = EntryPayload::Normal(Batches(seglog_raft::entry_codec::group(batches)));
    Entry {
        log_id: log_id(term, index),
        payload,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_entry_reads_back_whole_and_answers_each_batch_its_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, mut store, _) = open(dir.path()).await;
    let batches = [data_batch("a", 2), data_batch("b", 3), data_batch("c", 1)];
    append(
        &mut store,
        vec![
            blank(1, 0),
            group_entry(1, 1, &batches),
            data(1, 2, 4),
            group_entry(1, 3, &batches[..2]),
        ],
    )
    .await;
    let before = store.try_get_log_entries(0..).await.unwrap();
    drop(store);
    engine.close().unwrap();

    let (engine, mut store, mut state_machine) = open(dir.path()).await;
    let after = store.try_get_log_entries(0..).await.unwrap();
    assert_eq!(summary(&after), summary(&before));
    // The group's first batch (offset 1) counts the three batches after it; each is answered.
    let answers = state_machine.apply(after).await.unwrap();
    let offsets: Vec<Vec<(u64, u64)>> = answers
        .iter()
        .map(|batches| {
            batches
                .iter()
                .map(|a| (a.base_offset, a.last_offset))
                .collect()
        })
        .collect();
    let expected: Vec<Vec<(u64, u64)>> = vec![
        vec![],
        vec![(2, 3), (4, 6), (7, 7)],
        vec![(8, 11)],
        vec![(13, 14), (15, 17)],
    ];
    assert_eq!(offsets, expected);
    // In the log: a control batch before each group, the producers' batches as sent.
    let topic = TopicName::parse("t").unwrap();
    let fetched = engine
        .fetch(&topic, 0, Offset(0), FetchOptions::default())
        .wait()
        .unwrap();
    let control: Vec<(i64, bool)> = BatchIter::new(fetched.records, u64::MAX)
        .map(|batch| {
            let batch = batch.unwrap();
            (batch.base_offset(), batch.header().attributes.is_control())
        })
        .collect();
    let expected_control = vec![
        (0, true),
        (1, true),
        (2, false),
        (4, false),
        (7, false),
        (8, false),
        (12, true),
        (13, false),
        (15, false),
    ];
    assert_eq!(control, expected_control);
    drop(store);
    engine.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_a_crash_cut_short_is_cut_from_the_log_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, mut store, _) = open(dir.path()).await;
    append(&mut store, vec![blank(1, 0), data(1, 1, 2)]).await;
    let before = store.try_get_log_entries(0..).await.unwrap();
    drop(store);
    // A group whose last batch never reached the disk: its first batch and one of two.
    let batches = [data_batch("a", 2), data_batch("b", 3)];
    let group = seglog_raft::entry_codec::group(&batches);
    let torn = group.slice(..group.len() - batches[1].len());
    let topic = TopicName::parse("t").unwrap();
    let durable = seglog::engine::Durability::Durable;
    engine
        .append_at(&topic, 0, torn, Offset(3), 1, durable)
        .wait()
        .unwrap();
    engine.close().unwrap();

    let (engine, mut store, _) = open(dir.path()).await;
    let after = store.try_get_log_entries(0..).await.unwrap();
    assert_eq!(summary(&after), summary(&before));
    let description = engine.describe_partition("t", 0).unwrap();
    assert_eq!(
        description.log_end_offset,
        Offset(3),
        "cut back to the group"
    );
    // The next entry goes where the group would have.
    append(&mut store, vec![data(1, 2, 1)]).await;
    let entries = store.try_get_log_entries(2..).await.unwrap();
    let EntryPayload::Normal(Batches(bytes)) = &entries[0].payload else {
        panic!("entry 2 is data");
    };
    let batch = seglog::format::Batch::decode(bytes, u64::MAX).unwrap();
    assert_eq!(batch.base_offset(), 3);
    drop(store);
    engine.close().unwrap();
}

#[test]
fn malformed_groups_are_refused_as_entries() {
    use seglog_raft::entry_codec::{encode, group};
    let (a, b) = (data_batch("a", 1), data_batch("b", 1));
    let entry = |bytes: bytes::Bytes| Entry::<TypeConfig> {
        log_id: log_id(1, 1),
        payload: EntryPayload::Normal(Batches(bytes)),
    };
    let whole = group(&[a.clone(), b.clone()]);
    assert_eq!(encode(&entry(whole.clone())).unwrap().record_count, 3);
    let mut two = a.to_vec();
    two.extend_from_slice(&b);
    assert!(encode(&entry(two.into())).is_err(), "two batches, no group");
    let short = whole.slice(..whole.len() - b.len());
    assert!(encode(&entry(short)).is_err(), "a group missing a batch");
    let first_only = whole.slice(..whole.len() - a.len() - b.len());
    assert!(
        encode(&entry(first_only)).is_err(),
        "a group's first batch alone"
    );
    let mut extra = whole.to_vec();
    extra.extend_from_slice(&a);
    assert!(
        encode(&entry(extra.into())).is_err(),
        "a batch past the group"
    );
    let cut = whole.slice(..whole.len() - 1);
    assert!(encode(&entry(cut)).is_err(), "a batch cut short");
}
