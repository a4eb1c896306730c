//! Consumer groups rebalance (issue 6, part 2), through the coordinator and real consumers on an
//! engine. Proves that: seed 002's example (client C1 with one thread, C2 with two: members C1-0,
//! C2-0, C2-1) is assigned exactly as the range assignor says, and as round-robin says over two
//! topics; a join, a leave, a member that stops polling past `max.poll.interval.ms`, and added
//! partitions each start a new generation, revoking and assigning through the listener on the
//! members' own threads; a member removed for not polling has its commits refused and rejoins as a
//! new member; a commit from a generation older than the group's is refused until the member
//! polls; a commit for a partition the member does not own is refused; a member asking for another
//! strategy cannot join; a second coordinator on one engine is refused; and, with consumers on
//! threads joining and leaving while they consume, every record is consumed exactly once (each
//! partition has one owner at a time, and moves only after its owner committed and released it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use seglog::group::{
    CommitError, Consumer, ConsumerConfig, CoordinatorError, Generation, GroupCoordinator,
    GroupState, JoinError, OffsetAndMetadata, RebalanceListener,
};
use seglog::types::{Offset, TopicPartition};
use support::assert_matches;
use support::groups::{
    Groups, PATIENCE, by_partition, config, config_with, fill, poll_records, produce, settle,
    subscribed, within_patience,
};

mod support;

/// One callback: its event and partitions.
type Event = (&'static str, Vec<String>);

/// Every callback, in order.
#[derive(Debug, Clone, Default)]
struct Recorder {
    events: Arc<Mutex<Vec<Event>>>,
}

impl Recorder {
    fn push(&self, event: &'static str, partitions: &[TopicPartition]) {
        let names = partitions.iter().map(ToString::to_string).collect();
        self.events.lock().unwrap().push((event, names));
    }

    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

impl RebalanceListener for Recorder {
    fn on_partitions_revoked(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        self.push("revoked", partitions);
    }
    fn on_partitions_assigned(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        self.push("assigned", partitions);
    }
    fn on_partitions_lost(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        self.push("lost", partitions);
    }
}

fn names(partitions: &[&str]) -> Vec<String> {
    partitions.iter().map(|name| (*name).to_owned()).collect()
}

fn assignment_names(consumer: &Consumer) -> Vec<String> {
    consumer
        .assignment()
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn seed_consumers(
    coordinator: &GroupCoordinator,
    strategy: &str,
    topics: &[&str],
) -> [Consumer; 3] {
    let member = |client: &str| {
        let settings = [
            ("client.id", client),
            ("partition.assignment.strategy", strategy),
        ];
        subscribed(coordinator, config_with("seed", &settings), topics)
    };
    [member("C1"), member("C2"), member("C2")]
}

/// A consumer of `t` with `config` whose rebalance callbacks a recorder keeps.
fn recorded(groups: &Groups, config: ConsumerConfig) -> (Consumer, Recorder) {
    let events = Recorder::default();
    let mut consumer = groups.coordinator.consumer(config);
    consumer.set_rebalance_listener(events.clone());
    consumer.subscribe(&["t"]).unwrap();
    (consumer, events)
}

#[test]
fn seed_example_through_the_coordinator_assigns_c1_0_four_partitions_under_range() {
    let groups = Groups::with_topics(&[("T1", 10)]);
    let coordinator = &groups.coordinator;
    let [mut c1_0, mut c2_0, mut c2_1] = seed_consumers(coordinator, "range", &["T1"]);
    settle(coordinator, "seed", &mut [&mut c1_0, &mut c2_0, &mut c2_1]);
    assert_eq!(c1_0.member_id().unwrap().as_str(), "C1-0");
    assert_eq!(c2_0.member_id().unwrap().as_str(), "C2-0");
    assert_eq!(c2_1.member_id().unwrap().as_str(), "C2-1");
    assert_eq!(
        assignment_names(&c1_0),
        names(&["T1-0", "T1-1", "T1-2", "T1-3"])
    );
    assert_eq!(assignment_names(&c2_0), names(&["T1-4", "T1-5", "T1-6"]));
    assert_eq!(assignment_names(&c2_1), names(&["T1-7", "T1-8", "T1-9"]));
}

#[test]
fn seed_example_over_two_topics_through_the_coordinator_deals_round_robin() {
    let groups = Groups::with_topics(&[("T1", 10), ("T2", 10)]);
    let coordinator = &groups.coordinator;
    let [mut c1_0, mut c2_0, mut c2_1] = seed_consumers(coordinator, "roundrobin", &["T1", "T2"]);
    settle(coordinator, "seed", &mut [&mut c1_0, &mut c2_0, &mut c2_1]);
    assert_eq!(
        assignment_names(&c1_0),
        names(&["T1-0", "T1-3", "T1-6", "T1-9", "T2-2", "T2-5", "T2-8"])
    );
    assert_eq!(
        assignment_names(&c2_0),
        names(&["T1-1", "T1-4", "T1-7", "T2-0", "T2-3", "T2-6", "T2-9"])
    );
    assert_eq!(
        assignment_names(&c2_1),
        names(&["T1-2", "T1-5", "T1-8", "T2-1", "T2-4", "T2-7"])
    );
}

#[test]
fn a_join_revokes_from_the_old_member_before_assigning_to_the_new_one_in_a_new_generation() {
    let groups = Groups::new(4, 0);
    let (mut first, first_events) = recorded(&groups, config("g"));
    first.poll(Duration::ZERO).unwrap();
    assert_eq!(
        first_events.take(),
        [("assigned", names(&["t-0", "t-1", "t-2", "t-3"]))]
    );
    let generation = first.generation().unwrap();

    let (mut second, second_events) = recorded(&groups, config("g"));
    assert_eq!(second.generation(), Some(Generation(generation.0 + 1)));
    // The new member's partitions are still the first member's: nothing moves yet.
    second.poll(Duration::ZERO).unwrap();
    assert!(second.assignment().is_empty());
    assert!(second_events.take().is_empty());
    assert_eq!(
        groups.coordinator.describe_group("g").unwrap().state,
        GroupState::PreparingRebalance
    );

    first.poll(Duration::ZERO).unwrap();
    assert_eq!(first_events.take(), [("revoked", names(&["t-2", "t-3"]))]);
    assert_eq!(first.generation(), Some(Generation(generation.0 + 1)));
    second.poll(Duration::ZERO).unwrap();
    assert_eq!(second_events.take(), [("assigned", names(&["t-2", "t-3"]))]);
    assert_eq!(assignment_names(&first), names(&["t-0", "t-1"]));
    assert_eq!(
        groups.coordinator.describe_group("g").unwrap().state,
        GroupState::Stable
    );
}

#[test]
fn a_member_that_leaves_has_all_its_partitions_reassigned() {
    let groups = Groups::new(5, 0);
    let coordinator = &groups.coordinator;
    let (mut stays, events) = recorded(&groups, config("g"));
    let mut leaves = groups.consumer(config("g"));
    settle(coordinator, "g", &mut [&mut stays, &mut leaves]);
    let left_behind = assignment_names(&leaves);
    assert_eq!(left_behind.len(), 2);
    let generation = stays.generation().unwrap();
    events.take();

    leaves.close().unwrap();
    stays.poll(Duration::ZERO).unwrap();
    assert_eq!(events.take(), [("assigned", left_behind)]);
    assert_eq!(stays.assignment().len(), 5);
    assert_eq!(stays.generation(), Some(Generation(generation.0 + 1)));
    let description = coordinator.describe_group("g").unwrap();
    assert_eq!(description.members.len(), 1);
    assert_eq!(description.state, GroupState::Stable);
}

#[test]
fn a_member_that_stops_polling_is_removed_fenced_and_rejoins_as_a_new_member() {
    let groups = Groups::new(4, 0);
    let coordinator = &groups.coordinator;
    let mut active = groups.consumer(config("g"));
    let slow_config = config_with("g", &[("max.poll.interval.ms", "200")]);
    let (mut slow, slow_events) = recorded(&groups, slow_config);
    settle(coordinator, "g", &mut [&mut active, &mut slow]);
    let slow_id = slow.member_id().unwrap().clone();
    let slow_partitions = slow.assignment();
    fill(&groups.engine, "t", 4, 3);
    poll_records(&mut slow, 6);
    slow_events.take();

    thread::sleep(Duration::from_millis(400));
    active.poll(Duration::ZERO).unwrap();
    assert_eq!(
        active.assignment().len(),
        4,
        "the slow member's partitions move"
    );
    let description = coordinator.describe_group("g").unwrap();
    assert_eq!(description.members.len(), 1);

    assert_matches!(
        slow.commit_sync().unwrap_err(),
        CommitError::UnknownMember { member_id, .. } if member_id == slow_id
    );
    assert_eq!(coordinator.committed("g", &slow_partitions[0]), None);

    slow.poll(Duration::ZERO).unwrap();
    let lost: Vec<String> = slow_partitions.iter().map(ToString::to_string).collect();
    assert_eq!(slow_events.take(), [("lost", lost)]);
    assert_ne!(slow.member_id(), Some(&slow_id));
    assert_eq!(coordinator.describe_group("g").unwrap().members.len(), 2);
}

#[test]
fn a_commit_from_a_stale_generation_is_refused_until_the_member_polls() {
    let groups = Groups::new(2, 2);
    let mut first = groups.committed_consumer("g", 4);
    let stale = first.generation().unwrap();

    let mut second = groups.consumer(config("g"));
    assert_matches!(
        first.commit_sync().unwrap_err(),
        CommitError::IllegalGeneration { generation, group_generation, .. }
            if generation == stale && group_generation == Generation(stale.0 + 1)
    );
    first.poll(Duration::ZERO).unwrap();
    first.commit_sync().unwrap();
    second.poll(Duration::ZERO).unwrap();
    assert_eq!(second.assignment().len(), 1);
}

#[test]
fn a_commit_for_a_partition_owned_by_another_member_is_refused() {
    let groups = Groups::new(2, 0);
    let mut first = groups.consumer(config("g"));
    let mut second = groups.consumer(config("g"));
    settle(&groups.coordinator, "g", &mut [&mut first, &mut second]);
    let theirs = second.assignment()[0].clone();
    let offsets = BTreeMap::from([(theirs.clone(), OffsetAndMetadata::new(Offset(1)))]);
    assert_matches!(
        first.commit_sync_offsets(offsets).unwrap_err(),
        CommitError::NotAssigned { partition, .. } if partition == theirs
    );
}

#[test]
fn added_partitions_start_a_rebalance_and_are_consumed() {
    let groups = Groups::new(2, 0);
    let (mut consumer, events) = recorded(&groups, config("g"));
    consumer.poll(Duration::ZERO).unwrap();
    let generation = consumer.generation().unwrap();
    events.take();

    groups.engine.add_partitions("t", 4).unwrap();
    produce(&groups.engine, "t", 3, &["new"]);
    let records = poll_records(&mut consumer, 1);
    assert_eq!(events.take(), [("assigned", names(&["t-2", "t-3"]))]);
    assert_eq!(consumer.generation(), Some(Generation(generation.0 + 1)));
    assert_eq!(records[0].partition, 3);
    assert_eq!(records[0].offset, Offset(0));
}

#[test]
fn a_member_asking_for_another_strategy_cannot_join_a_group_with_members() {
    let groups = Groups::new(2, 0);
    let coordinator = &groups.coordinator;
    let first = groups.consumer(config("g"));
    let other = config_with(
        "g",
        &[("partition.assignment.strategy", "cooperative-sticky")],
    );
    let mut refused = coordinator.consumer(other.clone());
    assert_matches!(
        refused.subscribe(&["t"]).unwrap_err(),
        JoinError::InconsistentStrategy { .. }
    );
    drop(first);
    // An empty group takes the strategy of its next member.
    let mut sticky = coordinator.consumer(other);
    sticky.subscribe(&["t"]).unwrap();
    let description = coordinator.describe_group("g").unwrap();
    assert_eq!(description.strategy.unwrap().name(), "cooperative-sticky");
}

#[test]
fn a_second_coordinator_on_the_same_engine_is_refused_until_the_first_is_dropped() {
    let Groups {
        coordinator,
        engine,
        dir: _dir,
    } = Groups::with_topics(&[]);
    assert_matches!(
        GroupCoordinator::open(&engine).unwrap_err(),
        CoordinatorError::Locked { .. }
    );
    drop(coordinator);
    GroupCoordinator::open(&engine).unwrap();
}

#[test]
fn consumers_joining_and_leaving_on_threads_consume_every_record_exactly_once() {
    const PARTITIONS: u32 = 6;
    const PER_PARTITION: usize = 300;
    let groups = Groups::new(PARTITIONS, 0);
    let (engine, coordinator) = (&groups.engine, &groups.coordinator);
    let total = PARTITIONS as usize * PER_PARTITION;
    let consumed = Arc::new(Mutex::new(Vec::new()));
    let consumed_count = Arc::new(AtomicUsize::new(0));
    // Each member consumes a few records per poll (auto-commit commits what it gave up):
    // "leaver" leaves after 300 records, "late" joins after the first half was produced, and the
    // second half is produced once it is in the group.
    let spawn = |name: &'static str, delay_ms: u64, leave_after: Option<usize>| {
        let coordinator = coordinator.clone();
        let consumed = consumed.clone();
        let consumed_count = consumed_count.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(delay_ms));
            let settings = [
                ("client.id", name),
                ("enable.auto.commit", "true"),
                ("max.poll.records", "7"),
            ];
            let mut consumer = subscribed(&coordinator, config_with("busy", &settings), &["t"]);
            let mut mine = 0usize;
            let deadline = Instant::now() + PATIENCE * 3;
            while consumed_count.load(Ordering::SeqCst) < total && Instant::now() < deadline {
                let records = consumer.poll(Duration::from_millis(20)).unwrap();
                mine += records.len();
                consumed_count.fetch_add(records.len(), Ordering::SeqCst);
                let mut consumed = consumed.lock().unwrap();
                consumed.extend(records.iter().map(|r| (r.partition, r.offset)));
                drop(consumed);
                thread::sleep(Duration::from_millis(1));
                if leave_after.is_some_and(|limit| mine >= limit) {
                    break;
                }
            }
            consumer.close().unwrap();
            (name, mine)
        })
    };
    fill(engine, "t", PARTITIONS, PER_PARTITION / 2);
    let members = [
        spawn("early", 0, None),
        spawn("leaver", 0, Some(300)),
        spawn("late", 100, None),
    ];
    within_patience("late never joined", || {
        let group = coordinator.describe_group("busy");
        let joined = group.is_ok_and(|group| group.members.iter().any(|m| m.client_id == "late"));
        joined || {
            thread::sleep(Duration::from_millis(5));
            false
        }
    });
    fill(engine, "t", PARTITIONS, PER_PARTITION / 2);
    let shares: Vec<(&str, usize)> = members.into_iter().map(|m| m.join().unwrap()).collect();
    let mut consumed = consumed.lock().unwrap().clone();
    let received = consumed.len();
    consumed.sort_unstable();
    consumed.dedup();
    assert_eq!(received, total, "duplicates or losses; shares {shares:?}");
    assert_eq!(consumed.len(), total);
    for (name, share) in &shares {
        assert!(*share > 0, "{name} consumed nothing: {shares:?}");
    }
    let per_partition = by_partition_count(&consumed);
    assert!(per_partition.values().all(|count| *count == PER_PARTITION));
}

fn by_partition_count(records: &[(u32, Offset)]) -> BTreeMap<u32, usize> {
    let mut counts = BTreeMap::new();
    for (partition, _) in records {
        *counts.entry(*partition).or_default() += 1;
    }
    counts
}

#[test]
fn records_of_a_partition_arrive_in_offset_order_across_a_hand_off() {
    let groups = Groups::new(2, 10);
    let auto = config_with(
        "g",
        &[("enable.auto.commit", "true"), ("max.poll.records", "3")],
    );
    let mut first = groups.consumer(auto.clone());
    let mut records = poll_records(&mut first, 3);
    let mut second = groups.consumer(auto);
    // `first` gives up partition 1 (committing its position) at its next poll.
    let deadline = Instant::now() + PATIENCE;
    while records.len() < 20 {
        assert!(Instant::now() < deadline);
        records.extend(first.poll(Duration::from_millis(10)).unwrap());
        records.extend(second.poll(Duration::from_millis(10)).unwrap());
    }
    let values = by_partition(&records);
    for partition in 0..2u32 {
        let expected: Vec<String> = (0..10).map(|n| format!("p{partition}-{n}")).collect();
        assert_eq!(values[&partition], expected);
    }
}
