//! End-to-end tests of `seglog topics`, each command a separate process (so every step reopens the
//! data directory through the engine). They prove that: `create` with `--partitions` and
//! `--config` makes a topic that `describe` shows, text and JSON, with those settings after
//! reopening, and whose settings later appends obey (a small `segment.bytes` rolls segments);
//! `list` prints one line per topic with its partition count and non-default settings; `alter`
//! adds partitions that `produce` then routes to, and changes or deletes settings that later
//! appends obey; `delete` removes a topic and its directories and
//! the name can be created again, empty; `produce` creates a missing topic with its `--partitions`
//! and `--config` while an existing one keeps its own (with a warning); every error (a topic that exists or does not, an invalid
//! name or setting, a shrinking partition count, a missing data directory) exits 1 with a clear
//! message and leaves nothing behind; and `dump`, `verify` and `topics list` read a directory
//! that a running producer holds locked, which `topics create` cannot open.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use support::{
    RunningSeglog, assert_fails_with, assert_success, assert_usage_error, consume, consumed_values,
    describe_json, dump, json_lines, parse_text_ack, path_arg, run, stderr_text, stdout_lines,
    topics, verify, words,
};

fn create(data: &Path, topic: &str, extra: &[&str]) {
    let output = topics("create", data, topic, extra);
    assert_success(&output);
    assert_eq!(stdout_lines(&output), [format!("Created topic {topic}.")]);
}

fn produce(data: &Path, topic: &str, input: &str) -> Vec<(u32, u64)> {
    let output = support::produce(data, topic, &[], input.as_bytes());
    assert_success(&output);
    stdout_lines(&output)
        .iter()
        .map(|line| parse_text_ack(line))
        .collect()
}

fn topic_names(data: &Path) -> Vec<String> {
    let output = run(&["topics", "list", "--dir", path_arg(data)]);
    assert_success(&output);
    stdout_lines(&output)
        .iter()
        .map(|line| line.split('\t').next().unwrap().to_owned())
        .collect()
}

#[test]
fn create_then_describe_shows_partitions_and_configs_after_reopening_and_appends_obey_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let configs = "--config segment.bytes=1024 --config retention.ms=60000 \
                   --config max.message.bytes=2000";
    create(
        &data,
        "orders",
        &words(&format!("--partitions 3 {configs}")),
    );

    // A new process: the topic and its settings come back from the registry.
    let output = topics("describe", &data, "orders", &[]);
    assert_success(&output);
    let mut expected = vec![
        "Topic: orders\tPartitionCount: 3\t\
         Configs: segment.bytes=1024,max.message.bytes=2000,retention.ms=60000"
            .to_owned(),
    ];
    for partition in 0..3 {
        expected.push(format!(
            "\tTopic: orders\tPartition: {partition}\tLogStartOffset: 0\tLogEndOffset: 0\t\
             DurableOffset: 0\tSizeBytes: 0\tSegmentCount: 1"
        ));
    }
    assert_eq!(stdout_lines(&output), expected);

    // 30 unkeyed 100-byte records, round-robin: 10 per partition, far more than 1024 bytes each.
    let value = "v".repeat(100);
    let input: String = (0..30).map(|_| format!("{value}\n")).collect();
    let acks = produce(&data, "orders", &input);
    assert_eq!(acks.len(), 30);

    let description = describe_json(&data, "orders");
    assert_eq!(description["topic"], "orders");
    assert_eq!(description["partition_count"], 3);
    assert_eq!(
        description["configs"],
        serde_json::json!({
            "max.message.bytes": "2000",
            "retention.ms": "60000",
            "segment.bytes": "1024",
        })
    );
    let partitions = description["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 3);
    for (index, partition) in partitions.iter().enumerate() {
        assert_eq!(partition["partition"], index);
        assert_eq!(partition["log_start_offset"], 0);
        assert_eq!(partition["log_end_offset"], 10);
        assert_eq!(
            partition["durable_offset"], 10,
            "closed cleanly: all durable"
        );
        assert!(partition["size_bytes"].as_u64().unwrap() > 1024);
        assert!(
            partition["segment_count"].as_u64().unwrap() > 1,
            "segment.bytes=1024 from the registry rolls segments: {partition}"
        );
    }
}

#[test]
fn list_prints_one_line_per_topic_with_partition_count_and_non_default_configs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create(&data, "plain", &[]);
    let configs = "--config retention.bytes=1000000 --config segment.bytes=1073741824 \
                   --config flush.messages=1";
    create(&data, "tuned", &words(&format!("--partitions 4 {configs}")));
    let list = ["topics", "list", "--dir", path_arg(&data)];
    let output = run(&list);
    assert_success(&output);
    assert_eq!(
        stdout_lines(&output),
        [
            "plain\tPartitionCount: 1\tConfigs: ",
            // segment.bytes=1073741824 is Kafka's default, so it is not listed.
            "tuned\tPartitionCount: 4\tConfigs: retention.bytes=1000000,flush.messages=1",
        ]
    );
    let output = run(&[&list[..], &["--format", "json"]].concat());
    let topics = json_lines(&output);
    assert_eq!(
        topics,
        [
            serde_json::json!({"topic": "plain", "partition_count": 1, "configs": {}}),
            serde_json::json!({"topic": "tuned", "partition_count": 4,
                "configs": {"flush.messages": "1", "retention.bytes": "1000000"}}),
        ]
    );
}

#[test]
fn alter_adds_partitions_that_produce_then_routes_to_and_never_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create(&data, "grow", &[]);
    assert_eq!(produce(&data, "grow", "a\n"), [(0, 0)]);

    let output = topics("alter", &data, "grow", &["--partitions", "4"]);
    assert_success(&output);
    assert_eq!(
        stdout_lines(&output),
        ["Topic grow now has 4 partitions (it had 1)."]
    );
    let description = describe_json(&data, "grow");
    assert_eq!(description["partition_count"], 4);
    let ends: Vec<u64> = description["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|partition| partition["log_end_offset"].as_u64().unwrap())
        .collect();
    assert_eq!(ends, [1, 0, 0, 0], "partition 0 keeps its record");

    // Unkeyed records go round-robin over all four partitions now.
    let acks = produce(&data, "grow", "b\nc\nd\ne\n");
    let mut partitions: Vec<u32> = acks.iter().map(|(partition, _)| *partition).collect();
    partitions.sort_unstable();
    assert_eq!(partitions, [0, 1, 2, 3]);
    assert_eq!(ends.len(), 4);

    let output = topics("alter", &data, "grow", &["--partitions", "2"]);
    assert_fails_with(
        &output,
        "cannot grow topic grow to 2 partitions: topic grow has 4 partitions; cannot change to 2",
    );
    assert_eq!(describe_json(&data, "grow")["partition_count"], 4);
}

#[test]
fn alter_changes_and_deletes_settings_that_later_appends_obey() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create(&data, "tuned", &words("--config retention.ms=60000"));
    let args = words("--config segment.bytes=1024 --delete-config retention.ms");
    let output = topics("alter", &data, "tuned", &args);
    assert_success(&output);
    assert_eq!(
        stdout_lines(&output),
        ["Completed updating config for topic tuned. Configs: segment.bytes=1024"]
    );
    let description = describe_json(&data, "tuned");
    assert_eq!(
        description["configs"],
        serde_json::json!({"segment.bytes": "1024"})
    );
    let values: String = (0..20)
        .map(|i| format!("value-{i:04}-{}\n", "x".repeat(80)))
        .collect();
    produce(&data, "tuned", &values);
    let segments = describe_json(&data, "tuned")["partitions"][0]["segment_count"]
        .as_u64()
        .unwrap();
    assert!(segments > 1, "rolled at the new segment.bytes: {segments}");

    let output = topics("alter", &data, "tuned", &words("--config segment.bytes=10"));
    assert_fails_with(
        &output,
        "cannot reconfigure topic tuned: config segment.bytes=\"10\" is invalid",
    );
    let output = topics(
        "alter",
        &data,
        "tuned",
        &words("--delete-config no.such.key"),
    );
    assert_fails_with(&output, "unknown config \"no.such.key\"");
    assert_eq!(
        describe_json(&data, "tuned")["configs"],
        serde_json::json!({"segment.bytes": "1024"}),
        "refused changes change nothing"
    );
    // Nothing to change is a usage error.
    assert_usage_error(&topics("alter", &data, "tuned", &[]));
}

#[test]
fn delete_removes_the_topic_and_its_directories_and_the_name_can_be_created_again_empty() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create(&data, "doomed", &["--partitions", "2"]);
    create(&data, "kept", &[]);
    produce(&data, "doomed", "x\ny\n");
    produce(&data, "kept", "k\n");

    let output = topics("delete", &data, "doomed", &[]);
    assert_success(&output);
    assert_eq!(stdout_lines(&output), ["Deleted topic doomed."]);
    assert_eq!(topic_names(&data), ["kept"]);
    assert!(!data.join("doomed-0").exists());
    assert!(!data.join("doomed-1").exists());
    assert_eq!(consumed_values(&data, "kept", 0), ["k"]);
    let output = consume(&data, "doomed", 0, &[]);
    assert_fails_with(&output, "topic doomed does not exist");

    create(&data, "doomed", &[]);
    let description = describe_json(&data, "doomed");
    assert_eq!(description["partition_count"], 1);
    assert_eq!(description["partitions"][0]["log_end_offset"], 0);
}

#[test]
fn errors_exit_1_with_a_clear_message_and_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let dir_arg = path_arg(&data);

    // Checked before the data directory is touched.
    for (args, message) in [
        (
            vec!["--topic", "a b"],
            "invalid topic name \"a b\": topic name \"a b\" contains ' '",
        ),
        (vec!["--topic", ".."], "invalid topic name \"..\""),
        (
            vec!["--topic", "t", "--config", "no.such.key=1"],
            "invalid --config \"no.such.key=1\": unknown config \"no.such.key\"",
        ),
        (
            vec!["--topic", "t", "--config", "segment.bytes=10"],
            "config segment.bytes=\"10\" is invalid: must be between 61 and 2147483647",
        ),
        (
            vec!["--topic", "t", "--config", "retention.ms"],
            "--config \"retention.ms\" is not KEY=VALUE",
        ),
    ] {
        let output = run(&[&["topics", "create", "--dir", dir_arg][..], &args].concat());
        assert_fails_with(&output, message);
    }
    assert!(!data.exists(), "a rejected create leaves no data directory");

    for command in ["describe", "alter", "delete"] {
        let mut args = vec!["topics", command, "--dir", dir_arg, "--topic", "t"];
        if command == "alter" {
            args.extend(["--partitions", "2"]);
        }
        let output = run(&args);
        assert_fails_with(&output, &format!("data directory {dir_arg} does not exist"));
    }
    let output = run(&["topics", "list", "--dir", dir_arg]);
    assert_fails_with(&output, &format!("data directory {dir_arg} does not exist"));
    assert!(!data.exists(), "only create makes a data directory");

    create(&data, "t", &[]);
    for (args, message) in [
        (
            "create --topic t",
            "cannot create topic t: topic t already exists",
        ),
        (
            "describe --topic nope",
            "cannot describe topic nope: topic nope does not exist",
        ),
        (
            "alter --topic nope --partitions 3",
            "topic nope does not exist",
        ),
        (
            "delete --topic nope",
            "cannot delete topic nope: topic nope does not exist",
        ),
    ] {
        let (command, rest) = args.split_once(' ').unwrap();
        let args = [&["topics", command, "--dir", dir_arg][..], &words(rest)].concat();
        assert_fails_with(&run(&args), message);
    }
    assert_eq!(topic_names(&data), ["t"]);

    // A zero partition count is a usage error (exit 2), caught by the argument parser.
    let output = topics("create", &data, "z", &["--partitions", "0"]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn read_commands_read_a_directory_a_running_producer_holds_locked_which_topics_create_cannot_open()
{
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = ["produce", "--dir", path_arg(&data), "--topic", "live"];
    let mut producer = RunningSeglog::spawn_quiet(&args);
    // One line at a time: each is its own batch.
    for (offset, line) in ["one", "two"].iter().enumerate() {
        producer.write_line(line);
        assert_eq!(producer.next_line(), format!("partition=0 offset={offset}"));
    }

    // The producer is still running, with the directory locked: a writing command cannot open it,
    // the read commands read it without the lock.
    let output = topics("create", &data, "other", &[]);
    assert_fails_with(&output, "is locked by another seglog instance");
    let output = run(&["topics", "list", "--dir", path_arg(&data)]);
    assert_success(&output);
    assert_eq!(topic_names(&data), ["live"]);
    let output = verify(&data);
    assert_success(&output);
    assert_eq!(
        stdout_lines(&output).last().unwrap(),
        "OK 1 segments, 2 batches, 2 records"
    );
    let log = data.join("live-0").join("00000000000000000000.log");
    let output = dump(&[&log], &[]);
    assert_success(&output);
    let lines = stdout_lines(&output);
    assert!(
        lines[2].starts_with("baseOffset: 0 lastOffset: 0 count: 1 "),
        "{lines:?}"
    );
    assert!(
        lines[3].starts_with("baseOffset: 1 lastOffset: 1 count: 1 "),
        "{lines:?}"
    );

    assert!(producer.finish().success());
    assert_eq!(topic_names(&data), ["live"]);
}

#[test]
fn produce_creates_a_missing_topic_with_partitions_and_config_and_an_existing_one_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let output = support::produce(
        &data,
        "auto",
        &words("--partitions 2 --config retention.ms=1000"),
        b"a\nb\n",
    );
    assert_success(&output);
    assert_keeps_its_first_settings(&data);

    let extra = words("--partitions 5 --config retention.ms=2000");
    let output = support::produce(&data, "auto", &extra, b"c\n");
    assert_success(&output);
    let warnings = stderr_text(&output);
    assert!(
        warnings.contains("topic auto exists with 2 partitions; --partitions 5 is ignored"),
        "{warnings}"
    );
    assert!(
        warnings.contains("topic auto exists with its own settings; --config is ignored"),
        "{warnings}"
    );
    assert_keeps_its_first_settings(&data);
}

/// Topic `auto` has 2 partitions and `retention.ms=1000`.
fn assert_keeps_its_first_settings(data: &Path) {
    let description = describe_json(data, "auto");
    assert_eq!(description["partition_count"], 2);
    assert_eq!(
        description["configs"],
        serde_json::json!({"retention.ms": "1000"})
    );
}
