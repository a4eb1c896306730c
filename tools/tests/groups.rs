//! End-to-end tests of consumer groups on the command line (issue 6, part 2), each command a
//! separate process, so every run reopens the data directory and reloads the committed offsets
//! from `__consumer_offsets`. They prove that: `consume --group` prints every partition's records
//! with the partition, in text and JSON, and a second run resumes exactly where the first
//! committed (`--max-records` stops the first part-way), while another group starts over;
//! `--consumer-property auto.offset.reset=latest` skips what a group never committed; `groups
//! list` prints the groups with committed offsets, and `groups describe` prints Kafka's
//! `GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG` table (no active members, since
//! groups live in their own process) and JSON, with the lag of records appended since; an
//! unknown group, a bad property and conflicting arguments are rejected (exit 1 or 2); and a
//! directory without groups lists none and gains no offsets topic; `groups delete` forgets one
//! group's committed offsets and `groups reset-offsets` moves them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use support::{
    assert_fails_with, assert_success, groups, json_lines, path_arg, run, stdout_lines,
    sum_over_partitions, text_field as field, words,
};

/// A topic of `partitions` partitions holding `lines` (unkeyed, so spread round-robin).
fn produce(data: &Path, topic: &str, partitions: u32, lines: &[String]) {
    let partitions = partitions.to_string();
    let input = lines.join("\n") + "\n";
    let output = support::produce(
        data,
        topic,
        &["--partitions", &partitions],
        input.as_bytes(),
    );
    assert_success(&output);
}

fn consume_group(data: &Path, group: &str, extra: &[&str]) -> Vec<String> {
    let base = [
        "consume",
        "--dir",
        path_arg(data),
        "--topic",
        "t",
        "--group",
        group,
    ];
    let chosen = extra.contains(&"--format");
    let format: &[&str] = if chosen { &[] } else { &["--format", "text"] };
    let output = run(&[&base[..], format, extra].concat());
    assert_success(&output);
    stdout_lines(&output)
}

fn values(lines: &[String]) -> Vec<String> {
    lines.iter().map(|line| field(line, "value")).collect()
}

fn numbered(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{prefix}{n}")).collect()
}

fn sorted(mut values: Vec<String>) -> Vec<String> {
    values.sort();
    values
}

#[test]
fn a_second_consume_of_a_group_resumes_where_the_first_committed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let lines = numbered("v", 12);
    produce(&data, "t", 3, &lines);

    let first = consume_group(&data, "g", &["--max-records", "5"]);
    assert_eq!(first.len(), 5);
    let second = consume_group(&data, "g", &[]);
    assert_eq!(second.len(), 7);
    let mut all = values(&first);
    all.extend(values(&second));
    assert_eq!(
        sorted(all),
        sorted(lines.clone()),
        "each record exactly once"
    );
    assert!(consume_group(&data, "g", &[]).is_empty(), "nothing left");

    let other = consume_group(&data, "other", &[]);
    assert_eq!(sorted(values(&other)), sorted(lines));
}

#[test]
fn consume_group_prints_each_records_partition_in_offset_order_in_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    produce(&data, "t", 2, &numbered("v", 6));
    let text = consume_group(&data, "text", &[]);
    let mut offsets: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in &text {
        assert!(line.starts_with("partition="), "{line}");
        assert!(
            line.contains(" timestamp=") && line.ends_with("headers=[]"),
            "{line}"
        );
        offsets
            .entry(field(line, "partition"))
            .or_default()
            .push(field(line, "offset").parse().unwrap());
    }
    assert_eq!(offsets.len(), 2);
    for partition_offsets in offsets.values() {
        assert_eq!(*partition_offsets, [0, 1, 2]);
    }
    let json = consume_group(&data, "json", &["--format", "json"]);
    assert_eq!(json.len(), 6);
    for line in &json {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(record["partition"].is_u64(), "{line}");
        assert!(record["offset"].is_u64(), "{line}");
        assert!(record["value"].as_str().unwrap().starts_with('v'), "{line}");
        assert!(line.starts_with("{\"partition\":"), "{line}");
    }
}

#[test]
fn auto_offset_reset_latest_skips_what_the_group_never_committed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    produce(&data, "t", 1, &numbered("old", 3));
    let latest = ["--consumer-property", "auto.offset.reset=latest"];
    assert!(consume_group(&data, "g", &latest).is_empty());
    produce(&data, "t", 1, &numbered("new", 2));
    // Nothing was committed by the first run (it printed nothing), so `latest` applies again.
    assert!(consume_group(&data, "g", &latest).is_empty());
    let from_start = consume_group(&data, "h", &[]);
    assert_eq!(from_start.len(), 5);
}

#[test]
fn groups_list_and_describe_show_committed_offsets_log_end_offsets_and_lag() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    produce(&data, "t", 2, &numbered("v", 8));
    consume_group(&data, "beta", &[]);
    consume_group(&data, "alpha", &["--max-records", "3"]);
    produce(&data, "t", 2, &numbered("w", 2));

    let output = groups("list", &data, &[]);
    assert_success(&output);
    assert_eq!(stdout_lines(&output), ["alpha", "beta"]);
    assert_describes_beta(&groups("describe", &data, &["--group", "beta"]));

    let described = json_lines(&groups("describe", &data, &["--format", "json"]));
    assert_eq!(described.len(), 2);
    let alpha = &described[0];
    assert_eq!(alpha["group"], "alpha");
    assert_eq!(alpha["state"], "Empty");
    assert_eq!(alpha["members"], 0);
    assert_eq!(sum_over_partitions(alpha, "current_offset"), 3);
    assert_eq!(sum_over_partitions(alpha, "lag"), 10 - 3);
}

/// `groups describe --group beta` printed Kafka's table: beta committed 4 of the 5 records of
/// each of `t`'s two partitions.
fn assert_describes_beta(output: &std::process::Output) {
    assert_success(output);
    let lines = stdout_lines(output);
    assert_eq!(lines[0], "");
    assert_eq!(lines[1], "Consumer group 'beta' has no active members.");
    assert_eq!(lines[2], "");
    let columns: Vec<&str> = lines[3].split_whitespace().collect();
    let header =
        "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID";
    assert_eq!(columns, words(header));
    let rows: Vec<Vec<&str>> = lines[4..]
        .iter()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["beta", "t", "0", "4", "5", "1", "-", "-", "-"],
            ["beta", "t", "1", "4", "5", "1", "-", "-", "-"],
        ]
    );
}

#[test]
fn a_directory_without_groups_lists_none_and_gains_no_offsets_topic() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    produce(&data, "t", 1, &numbered("v", 1));
    let output = groups("list", &data, &[]);
    assert_success(&output);
    assert!(output.stdout.is_empty());
    let output = groups("describe", &data, &["--group", "missing"]);
    assert_fails_with(&output, "consumer group missing does not exist");
    assert!(!data.join("__consumer_offsets-0").exists());
}

#[test]
fn bad_group_arguments_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    produce(&data, "t", 1, &numbered("v", 1));
    let data_arg = path_arg(&data);
    let base = ["consume", "--dir", data_arg, "--topic", "t"];
    let usage = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        run(&args).status.code()
    };
    assert_eq!(usage(&[]), Some(2), "--partition or --group is required");
    assert_eq!(usage(&["--group", "g", "--partition", "0"]), Some(2));
    assert_eq!(usage(&["--group", "g", "--offset", "0"]), Some(2));
    assert_eq!(
        usage(&["--partition", "0", "--consumer-property", "a=b"]),
        Some(2)
    );
    let mut args = base.to_vec();
    args.extend_from_slice(&["--group", "g", "--consumer-property", "no.such=1"]);
    assert_fails_with(&run(&args), "invalid --consumer-property");
    let output = run(&["groups", "--help"]);
    assert_success(&output);
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(help.contains("no live members"), "{help}");
}

/// `groups delete` removes a group's committed offsets as `kafka-consumer-groups --delete`
/// does: the group is no longer listed, a consume of it starts over, other groups keep theirs,
/// and deleting it again (or a group that never committed) fails naming the group.
#[test]
fn groups_delete_forgets_a_groups_committed_offsets_and_only_its() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let lines = numbered("v", 6);
    produce(&data, "t", 2, &lines);
    assert_eq!(consume_group(&data, "gone", &[]).len(), 6);
    assert_eq!(consume_group(&data, "kept", &[]).len(), 6);

    let output = groups("delete", &data, &["--group", "gone"]);
    assert_success(&output);
    assert_eq!(
        stdout_lines(&output),
        ["Deletion of requested consumer groups ('gone') was successful."]
    );
    let listed = groups("list", &data, &[]);
    assert_eq!(stdout_lines(&listed), ["kept"]);
    assert_eq!(consume_group(&data, "gone", &[]).len(), 6, "it starts over");
    assert!(
        consume_group(&data, "kept", &[]).is_empty(),
        "the other kept its commits"
    );

    assert_success(&groups("delete", &data, &["--group", "gone"]));
    let output = groups("delete", &data, &["--group", "never"]);
    assert_fails_with(&output, "cannot delete consumer group never");
}

/// `groups reset-offsets GROUP TOPIC` rows: (partition, new offset), from Kafka's table.
fn reset_offsets(data: &Path, group: &str, extra: &[&str]) -> Vec<(u32, u64)> {
    let output = groups(
        "reset-offsets",
        data,
        &[&["--group", group, "--topic", "t"][..], extra].concat(),
    );
    assert_success(&output);
    let lines = stdout_lines(&output);
    assert_eq!(lines[0], "");
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    );
    lines[2..]
        .iter()
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cells[..2], [group, "t"]);
            (cells[2].parse().unwrap(), cells[3].parse().unwrap())
        })
        .collect()
}

/// `groups reset-offsets`, as `kafka-consumer-groups --reset-offsets`: `--dry-run` prints the new
/// offsets and commits nothing; `--execute` commits them, and the group's next consume starts
/// there; `--to-datetime` finds the first record at or after a time, `--shift-by` moves from the
/// committed offset, `--to-offset` is clamped to the log end; a target is required, and a shift
/// needs a committed offset.
#[test]
fn groups_reset_offsets_moves_committed_offsets_as_kafka_does() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    produce(&data, "t", 2, &numbered("a", 6));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let between = chrono::DateTime::from_timestamp_millis(i64::try_from(now_ms).unwrap())
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.3f")
        .to_string();
    std::thread::sleep(std::time::Duration::from_millis(20));
    produce(&data, "t", 2, &numbered("b", 4));
    assert_eq!(consume_group(&data, "g", &[]).len(), 10);

    assert_eq!(
        reset_offsets(&data, "g", &["--to-earliest", "--dry-run"]),
        [(0, 0), (1, 0)]
    );
    assert!(
        consume_group(&data, "g", &[]).is_empty(),
        "a dry run commits nothing"
    );

    let at_time = reset_offsets(&data, "g", &["--to-datetime", &between, "--execute"]);
    assert_eq!(at_time, [(0, 3), (1, 3)]);
    assert_eq!(
        sorted(values(&consume_group(&data, "g", &[]))),
        numbered("b", 4),
        "the group resumes at the first record after the time"
    );
    assert_eq!(
        reset_offsets(&data, "g", &["--shift-by", "-1", "--execute"]),
        [(0, 4), (1, 4)]
    );
    assert_eq!(consume_group(&data, "g", &[]).len(), 2);
    assert_eq!(
        reset_offsets(&data, "g", &["--to-offset", "100", "--execute"]),
        [(0, 5), (1, 5)],
        "clamped to the log end"
    );

    let no_target = groups(
        "reset-offsets",
        &data,
        &words("--group g --topic t --execute"),
    );
    assert_eq!(no_target.status.code(), Some(2), "a target is required");
    let never = groups(
        "reset-offsets",
        &data,
        &words("--group never --topic t --shift-by 1 --execute"),
    );
    assert_fails_with(
        &never,
        "group never has no committed offset on t-0 to shift",
    );
}
