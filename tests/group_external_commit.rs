//! Offsets committed for a group whose membership is kept outside seglog (issue 44: the Kafka
//! protocol's groups, whose broker runs Kafka's membership protocol itself). Proves that
//! `GroupCoordinator::commit_offsets` commits without any in-process member, that the offsets are
//! durable across a close and reopen, that a later commit overwrites an earlier one, that oversized
//! metadata is refused, and that `delete_group` removes them for good.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use seglog::group::{CommitError, GroupCoordinator, OffsetAndMetadata};
use seglog::types::Offset;
use support::groups::{create_topic, open_engine, tp};

mod support;

fn at(offset: u64, metadata: &str) -> OffsetAndMetadata {
    OffsetAndMetadata {
        offset: Offset(offset),
        metadata: metadata.to_owned(),
    }
}

#[test]
fn offsets_committed_without_members_survive_a_restart_and_a_delete() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path());
    create_topic(&engine, "t", 2);
    let coordinator = GroupCoordinator::open(&engine).unwrap();
    coordinator
        .commit_offsets(
            "remote",
            vec![(tp("t", 0), at(4, "a")), (tp("t", 1), at(7, ""))],
        )
        .wait()
        .unwrap();
    coordinator
        .commit_offsets("remote", vec![(tp("t", 0), at(9, "b"))])
        .wait()
        .unwrap();
    let too_large = coordinator
        .commit_offsets("remote", vec![(tp("t", 1), at(8, &"m".repeat(4097)))])
        .wait();
    assert!(
        matches!(too_large, Err(CommitError::MetadataTooLarge { .. })),
        "{too_large:?}"
    );
    assert_eq!(
        coordinator.committed("remote", &tp("t", 0)),
        Some(at(9, "b"))
    );
    drop(coordinator);
    engine.close().unwrap();

    let engine = open_engine(dir.path());
    let coordinator = GroupCoordinator::open(&engine).unwrap();
    assert_eq!(
        coordinator.committed("remote", &tp("t", 0)),
        Some(at(9, "b"))
    );
    assert_eq!(
        coordinator.committed("remote", &tp("t", 1)),
        Some(at(7, ""))
    );
    coordinator.delete_group("remote").unwrap();
    drop(coordinator);
    engine.close().unwrap();

    let engine = open_engine(dir.path());
    let coordinator = GroupCoordinator::open(&engine).unwrap();
    assert_eq!(coordinator.committed("remote", &tp("t", 0)), None);
    assert!(coordinator.list_groups().is_empty());
    drop(coordinator);
    engine.close().unwrap();
}
