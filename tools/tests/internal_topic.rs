//! Issue 41, item 8: the internal topic `__consumer_offsets` is protected on the command line.
//! `produce` to it, and `topics create|alter|delete` of it, exit 1 with one line naming the topic
//! and its owner, the group coordinator, and change nothing in the data directory (not a byte, not
//! a timestamp), so the groups' committed offsets stay readable by `groups describe`; `produce` to
//! it in a missing directory creates nothing; reading it (`consume --partition`, `topics
//! describe`) stays allowed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use support::{
    assert_fails_with_line as assert_refused_with, assert_success, consume, groups, path_arg,
    produce, run, snapshot, stdout_lines, with_dir,
};

const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The engine's refusal, as every command prints it after its own context.
const REFUSAL: &str = "topic __consumer_offsets is internal: the group coordinator manages it (the \
                       committed offsets of consumer groups), so it can be read but not written, \
                       created, grown or deleted directly";

/// A data directory where group `g` committed offsets of topic `t` (2 partitions, 4 records).
fn directory_with_a_group(data: &Path) {
    let produced = produce(data, "t", &["--partitions", "2"], b"a\nb\nc\nd\n");
    assert_success(&produced);
    let consumed = support::run_args(&with_dir("consume", data, "--topic t --group g"));
    assert_success(&consumed);
    assert_eq!(stdout_lines(&consumed).len(), 4);
}

fn groups_describe(data: &Path) -> Vec<String> {
    let output = groups("describe", data, &["--group", "g"]);
    assert_success(&output);
    stdout_lines(&output)
}

#[test]
fn producing_to_creating_altering_or_deleting_the_offsets_topic_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    directory_with_a_group(&data);
    let described = groups_describe(&data);
    assert!(
        described.iter().any(|line| line.starts_with("g ")),
        "{described:?}"
    );
    let before = snapshot(&data);
    let dir_arg = path_arg(&data);

    let produced = produce(
        &data,
        OFFSETS_TOPIC,
        &["--key-separator", ":"],
        b"a key:a value\n",
    );
    assert_refused_with(
        &produced,
        &format!("seglog: error: cannot produce to topic {OFFSETS_TOPIC}: {REFUSAL}"),
    );
    let cases: [(&[&str], &str); 3] = [
        (&["topics", "create", "--partitions", "1"], "create"),
        (&["topics", "alter", "--partitions", "3"], "grow"),
        (&["topics", "delete"], "delete"),
    ];
    for (command, action) in cases {
        let mut args = command.to_vec();
        args.extend_from_slice(&["--dir", dir_arg, "--topic", OFFSETS_TOPIC]);
        assert_refused_with(
            &run(&args),
            &format!("seglog: error: cannot {action} topic {OFFSETS_TOPIC}: {REFUSAL}"),
        );
    }

    assert_eq!(snapshot(&data), before, "the refusals changed nothing");
    assert_eq!(groups_describe(&data), described);
    let read = consume(&data, OFFSETS_TOPIC, 0, &[]);
    assert_success(&read);
    assert!(!stdout_lines(&read).is_empty(), "reading it is allowed");
}

#[test]
fn producing_to_the_offsets_topic_in_a_new_directory_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("fresh");
    let produced = produce(&data, OFFSETS_TOPIC, &[], b"v\n");
    assert_refused_with(
        &produced,
        &format!("seglog: error: cannot produce to topic {OFFSETS_TOPIC}: {REFUSAL}"),
    );
    assert!(!data.exists());
}
