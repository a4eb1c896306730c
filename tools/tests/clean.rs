//! `seglog clean` (issue 5: the CLI): on a compacted topic it compacts sealed segments down to the
//! latest record per key and says what it did; on a topic past its `retention.ms` it deletes the
//! expired segments, rolling a new active segment, and says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{
    assert_success, consumed_values, create_topic as create, path_arg, produce, run, stdout_lines,
};

#[test]
fn clean_compacts_a_compacted_topic_to_the_latest_value_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create(
        &data,
        "latest",
        &["cleanup.policy=compact", "segment.bytes=1024"],
    );
    let input: String = (0..200)
        .map(|i| format!("key-{}:value-{i:04}\n", i % 5))
        .collect();
    let produced = produce(&data, "latest", &["--key-separator", ":"], input.as_bytes());
    assert_success(&produced);
    let before = consumed_values(&data, "latest", 0);
    assert_eq!(before.len(), 200);

    let output = run(&["clean", "--dir", path_arg(&data)]);
    assert_success(&output);
    let lines = stdout_lines(&output);
    let compaction = lines
        .iter()
        .find(|line| line.starts_with("compaction latest-0:"))
        .unwrap();
    assert!(!compaction.contains("cleaned 0 segments"), "{compaction}");

    let after = consumed_values(&data, "latest", 0);
    assert!(
        after.len() < before.len(),
        "{} records left of {}",
        after.len(),
        before.len()
    );
    for key in 0..5 {
        let latest = (0..200).filter(|i| i % 5 == key).max().unwrap();
        assert!(
            after.contains(&format!("value-{latest:04}")),
            "the latest value of key-{key} is kept"
        );
    }
}

#[test]
fn clean_applies_retention_to_expired_segments() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create(&data, "short", &["retention.ms=1", "segment.bytes=1024"]);
    let input: String = (0..50).map(|i| format!("value-{i:04}\n")).collect();
    assert_success(&produce(&data, "short", &[], input.as_bytes()));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let output = run(&["clean", "--dir", path_arg(&data), "--topic", "short"]);
    assert_success(&output);
    let lines = stdout_lines(&output);
    assert!(
        lines
            .iter()
            .any(|line| line.starts_with("retention short-0: deleted") && line.contains("rolled")),
        "{lines:?}"
    );
    assert!(
        consumed_values(&data, "short", 0).is_empty(),
        "every record was older than 1 ms"
    );
}
