//! The assignors of consumer groups (issue 6, part 2), as pure functions. Seed 002's examples are
//! written out exactly: topic T1 with 10 and with 11 partitions, and topics T1 and T2 with 10
//! each, over consumer threads C1-0, C2-0 and C2-1, under range (where C1-0 ends with two extra
//! partitions on two topics) and under round-robin. Property tests over random groups and
//! subscriptions prove that every partition of a subscribed topic has exactly one owner, which
//! subscribes to its topic, under every strategy; that loads differ by at most one under
//! round-robin and the sticky assignor when subscriptions are identical; that after a member
//! leaves, the next assignment gives all of its partitions to the remaining members; and that
//! the sticky assignor keeps every partition it can with its previous owner.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use seglog::group::assignor::{cooperative_sticky, range, round_robin};
use seglog::group::{Assignment, AssignmentStrategy, MemberId, MemberSubscription};
use seglog::types::{TopicName, TopicPartition};

const STRATEGIES: [AssignmentStrategy; 3] = [
    AssignmentStrategy::Range,
    AssignmentStrategy::RoundRobin,
    AssignmentStrategy::CooperativeSticky,
];

fn topic(name: &str) -> TopicName {
    TopicName::parse(name).unwrap()
}

/// The seed's consumer threads, each subscribed to `topics`.
fn seed_members(topics: &[&str]) -> Vec<MemberSubscription> {
    ["C1-0", "C2-0", "C2-1"]
        .into_iter()
        .map(|id| MemberSubscription::new(MemberId::new(id), topics.iter().map(|t| topic(t))))
        .collect()
}

/// Each member's partitions as `T1-0`-style names.
fn named(assignment: &Assignment) -> BTreeMap<String, Vec<String>> {
    assignment
        .iter()
        .map(|(member_id, partitions)| {
            let names = partitions.iter().map(ToString::to_string).collect();
            (member_id.to_string(), names)
        })
        .collect()
}

/// What an assignor gives the members for the partitions of each topic.
type Assignor = fn(&[MemberSubscription], &BTreeMap<TopicName, u32>) -> Assignment;

/// Asserts that `assign` gives the seed's threads C1-0, C2-0 and C2-1, each subscribed to every
/// topic of `topics` (name, partitions), the partitions `rows` names (space-separated, one row a
/// thread). Returns the assignment.
fn assert_seed_assignment(assign: Assignor, topics: &[(&str, u32)], rows: [&str; 3]) -> Assignment {
    let partitions: BTreeMap<TopicName, u32> = topics
        .iter()
        .map(|(name, count)| (topic(name), *count))
        .collect();
    let names: Vec<&str> = topics.iter().map(|(name, _)| *name).collect();
    let assignment = assign(&seed_members(&names), &partitions);
    let expected: BTreeMap<String, Vec<String>> = ["C1-0", "C2-0", "C2-1"]
        .into_iter()
        .zip(rows)
        .map(|(member, row)| {
            (
                member.to_owned(),
                row.split(' ').map(str::to_owned).collect(),
            )
        })
        .collect();
    assert_eq!(named(&assignment), expected);
    assignment
}

/// How many partitions each member got.
fn loads(assignment: &Assignment) -> Vec<usize> {
    assignment.values().map(Vec::len).collect()
}

/// One test a row: `name: assignor over topics => each thread's partitions, its loads`.
macro_rules! seed_example_tests {
    ($($name:ident: $assign:ident over $topics:expr => $rows:expr, $loads:expr;)*) => {
        $(
            #[test]
            fn $name() {
                let assignment = assert_seed_assignment($assign, &$topics, $rows);
                assert_eq!(loads(&assignment), $loads);
            }
        )*
    };
}

seed_example_tests! {
    range_over_ten_partitions_gives_c1_0_four_and_the_others_three: range over [("T1", 10)]
        => ["T1-0 T1-1 T1-2 T1-3", "T1-4 T1-5 T1-6", "T1-7 T1-8 T1-9"], [4, 3, 3];
    range_over_eleven_partitions_gives_the_first_two_threads_four: range over [("T1", 11)]
        => ["T1-0 T1-1 T1-2 T1-3", "T1-4 T1-5 T1-6 T1-7", "T1-8 T1-9 T1-10"], [4, 4, 3];
    range_over_two_topics_gives_c1_0_two_more_than_the_others: range
        over [("T1", 10), ("T2", 10)]
        => ["T1-0 T1-1 T1-2 T1-3 T2-0 T2-1 T2-2 T2-3", "T1-4 T1-5 T1-6 T2-4 T2-5 T2-6",
            "T1-7 T1-8 T1-9 T2-7 T2-8 T2-9"], [8, 6, 6];
    round_robin_over_two_topics_continues_the_turn_across_topics_and_stays_balanced: round_robin
        over [("T1", 10), ("T2", 10)]
        => [
            "T1-0 T1-3 T1-6 T1-9 T2-2 T2-5 T2-8",
            "T1-1 T1-4 T1-7 T2-0 T2-3 T2-6 T2-9",
            "T1-2 T1-5 T1-8 T2-1 T2-4 T2-7",
        ], [7, 7, 6];
    round_robin_over_ten_partitions_deals_them_out_in_turn: round_robin over [("T1", 10)]
        => ["T1-0 T1-3 T1-6 T1-9", "T1-1 T1-4 T1-7", "T1-2 T1-5 T1-8"], [4, 3, 3];
    round_robin_over_eleven_partitions_deals_them_out_in_turn: round_robin over [("T1", 11)]
        => ["T1-0 T1-3 T1-6 T1-9", "T1-1 T1-4 T1-7 T1-10", "T1-2 T1-5 T1-8"], [4, 4, 3];
}

#[test]
fn the_strategy_enum_dispatches_to_the_assignors() {
    let partitions = BTreeMap::from([(topic("T1"), 10), (topic("T2"), 10)]);
    let members = seed_members(&["T1", "T2"]);
    assert_eq!(
        AssignmentStrategy::Range.assign(&members, &partitions),
        range(&members, &partitions)
    );
    assert_eq!(
        AssignmentStrategy::RoundRobin.assign(&members, &partitions),
        round_robin(&members, &partitions)
    );
    assert_eq!(
        AssignmentStrategy::CooperativeSticky.assign(&members, &partitions),
        cooperative_sticky(&members, &partitions)
    );
}

/// A random group: topics `t0..` with 1 to 12 partitions, 1 to 8 members each subscribed to a
/// non-empty subset of them (or, with `identical`, all to every topic).
fn group_strategy(
    identical: bool,
) -> impl Strategy<Value = (Vec<MemberSubscription>, BTreeMap<TopicName, u32>)> {
    (
        proptest::collection::vec(1u32..=12, 1..=4),
        proptest::collection::vec(proptest::collection::vec(any::<bool>(), 4), 1..=8),
    )
        .prop_map(move |(counts, subscriptions)| {
            let topics: Vec<TopicName> = (0..counts.len())
                .map(|index| topic(&format!("t{index}")))
                .collect();
            let partitions = topics.iter().cloned().zip(counts).collect();
            let members = subscriptions
                .iter()
                .enumerate()
                .map(|(index, picks)| {
                    let mut chosen: BTreeSet<TopicName> = topics
                        .iter()
                        .zip(picks)
                        .filter(|(_, pick)| identical || **pick)
                        .map(|(topic, _)| topic.clone())
                        .collect();
                    if chosen.is_empty() {
                        chosen.insert(topics[index % topics.len()].clone());
                    }
                    MemberSubscription::new(MemberId::new(format!("m{index}")), chosen)
                })
                .collect();
            (members, partitions)
        })
}

/// Every partition of a subscribed topic has exactly one owner, subscribed to its topic; no other
/// partition is assigned; every member appears.
fn assert_one_owner_each(
    members: &[MemberSubscription],
    partitions: &BTreeMap<TopicName, u32>,
    assignment: &Assignment,
) -> Result<(), TestCaseError> {
    let mut owners: BTreeMap<&TopicPartition, usize> = BTreeMap::new();
    for member in members {
        let owned = assignment
            .get(&member.member_id)
            .ok_or_else(|| TestCaseError::fail("a member is missing"))?;
        for tp in owned {
            prop_assert!(
                member.topics.contains(&tp.topic),
                "{tp} to a non-subscriber"
            );
            *owners.entry(tp).or_default() += 1;
        }
    }
    for (topic, &count) in partitions {
        let subscribed = members.iter().any(|member| member.topics.contains(topic));
        for partition in 0..count {
            let tp = TopicPartition {
                topic: topic.clone(),
                partition,
            };
            let expected = usize::from(subscribed);
            prop_assert_eq!(owners.get(&tp).copied().unwrap_or(0), expected, "{}", tp);
        }
    }
    let assigned: usize = owners.values().sum();
    let expected: u32 = partitions
        .iter()
        .filter(|(topic, _)| members.iter().any(|m| m.topics.contains(*topic)))
        .map(|(_, count)| count)
        .sum();
    prop_assert_eq!(assigned, expected as usize);
    Ok(())
}

fn load_spread(assignment: &Assignment) -> usize {
    let loads: Vec<usize> = assignment.values().map(Vec::len).collect();
    loads.iter().max().unwrap() - loads.iter().min().unwrap()
}

/// The assignment as each member's `owned`, for the next round.
fn with_owned(members: &[MemberSubscription], assignment: &Assignment) -> Vec<MemberSubscription> {
    members
        .iter()
        .map(|member| MemberSubscription {
            owned: assignment[&member.member_id].clone(),
            ..member.clone()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_partition_has_exactly_one_subscribed_owner_under_every_strategy(
        (members, partitions) in group_strategy(false)
    ) {
        for strategy in STRATEGIES {
            let assignment = strategy.assign(&members, &partitions);
            assert_one_owner_each(&members, &partitions, &assignment)?;
        }
    }

    #[test]
    fn round_robin_and_sticky_loads_differ_by_at_most_one_with_identical_subscriptions(
        (members, partitions) in group_strategy(true)
    ) {
        let assignment = round_robin(&members, &partitions);
        prop_assert!(load_spread(&assignment) <= 1, "{:?}", assignment);
        let first = cooperative_sticky(&members, &partitions);
        prop_assert!(load_spread(&first) <= 1, "{:?}", first);
        // Still balanced when it starts from a previous (round-robin) assignment.
        let sticky = cooperative_sticky(&with_owned(&members, &assignment), &partitions);
        prop_assert!(load_spread(&sticky) <= 1, "{:?}", sticky);
    }

    #[test]
    fn after_a_member_leaves_its_partitions_all_go_to_the_remaining_members(
        (members, partitions) in group_strategy(false),
        leaver in any::<prop::sample::Index>(),
    ) {
        prop_assume!(members.len() >= 2);
        for strategy in STRATEGIES {
            let before = strategy.assign(&members, &partitions);
            let leaver = &members[leaver.index(members.len())];
            let remaining: Vec<MemberSubscription> = with_owned(&members, &before)
                .into_iter()
                .filter(|member| member.member_id != leaver.member_id)
                .collect();
            let after = strategy.assign(&remaining, &partitions);
            prop_assert!(!after.contains_key(&leaver.member_id));
            assert_one_owner_each(&remaining, &partitions, &after)?;
            for tp in &before[&leaver.member_id] {
                let subscribed = remaining.iter().any(|member| member.topics.contains(&tp.topic));
                let owned = after.values().flatten().any(|owned| owned == tp);
                prop_assert_eq!(owned, subscribed, "{} of the member that left", tp);
            }
        }
    }

    #[test]
    fn sticky_keeps_previous_owners_as_far_as_balance_allows(
        (members, partitions) in group_strategy(true),
        joiners in 0usize..3,
    ) {
        let before = cooperative_sticky(&members, &partitions);
        let mut next = with_owned(&members, &before);
        let topics = members[0].topics.clone();
        for index in 0..joiners {
            next.push(MemberSubscription::new(MemberId::new(format!("new{index}")), topics.clone()));
        }
        let after = cooperative_sticky(&next, &partitions);
        let total: usize = after.values().map(Vec::len).sum();
        let floor = total / next.len();
        for member in &members {
            let kept = after[&member.member_id]
                .iter()
                .filter(|tp| before[&member.member_id].contains(tp))
                .count();
            let owned_before = before[&member.member_id].len();
            prop_assert!(
                kept >= owned_before.min(floor),
                "{} kept {} of {} (floor {})", member.member_id, kept, owned_before, floor
            );
        }
    }
}
