//! Issue 41, item 11: `seglog recover` truncates a partition the engine refuses to open (a batch
//! among synced data fails its CRC) to its last valid batch. The tests prove that: without `--yes`
//! and with stdin not a terminal it prints where the damage is and what truncating discards
//! (offsets and bytes, file by file), refuses in one line, and changes nothing; with `--yes` it
//! truncates, after which the engine opens the partition, serves every batch before the damage
//! and appends after it, and `verify` finds nothing; a partition with nothing invalid is left
//! alone; and it waits for no engine: a directory another process holds open is refused as
//! locked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;

use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions};
use seglog::format::{BatchBuilder, NewRecord};
use seglog::types::{Offset, TopicName};

use support::{
    DamagedPartition, RunningSeglog, assert_success, damaged_partition, path_arg, run, snapshot,
    stderr_text, stdout_lines,
};

fn recover(damaged: &DamagedPartition, extra: &[&str]) -> Output {
    let mut args = vec![
        "recover",
        "--dir",
        path_arg(&damaged.data),
        "--topic",
        "t",
        "--partition",
        "0",
    ];
    args.extend_from_slice(extra);
    run(&args)
}

/// The plan's first two lines: where the damage is, and what truncating keeps and discards.
fn assert_plan(output: &Output, damaged: &DamagedPartition) {
    let lines = stdout_lines(output);
    let first = format!(
        "t-0: the first invalid batch is at position {} of {}: CRC-32C mismatch",
        damaged.position,
        damaged.file.display()
    );
    assert!(lines[0].starts_with(&first), "{first:?} starts {lines:?}");
    let second = format!(
        "Truncating t-0 to its last valid batch keeps offsets 0 to {} and discards offsets {} \
         to {}: ",
        damaged.offset - 1,
        damaged.offset,
        damaged.records - 1
    );
    assert!(lines[1].starts_with(&second), "{second:?} starts {lines:?}");
    let damaged_file = format!(
        "  {}: {} bytes from position {} (",
        damaged.file.display(),
        damaged.file_bytes - damaged.position,
        damaged.position
    );
    assert!(
        lines[2].starts_with(&damaged_file),
        "{damaged_file:?} in {lines:?}"
    );
    let later: Vec<&String> = lines[3..]
        .iter()
        .take_while(|line| line.starts_with("  "))
        .collect();
    assert!(!later.is_empty(), "{lines:?}");
    assert!(
        later
            .iter()
            .all(|line| line.contains(": the whole segment, ")),
        "{lines:?}"
    );
}

/// Every value the engine serves from partition `t-0`, in offset order, up to its log end.
fn values_served(engine: &Engine) -> Vec<String> {
    let topic = TopicName::parse("t").unwrap();
    let log_end = engine.describe_partition("t", 0).unwrap().log_end_offset;
    let mut values = Vec::new();
    let mut offset = Offset(0);
    while offset < log_end {
        let data = engine
            .fetch(&topic, 0, offset, FetchOptions::default())
            .wait()
            .unwrap();
        for batch in data.batches() {
            let batch = batch.unwrap();
            for record in batch.records().unwrap() {
                values.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
            }
            offset = Offset(batch.header().last_offset() as u64 + 1);
        }
    }
    values
}

#[test]
fn without_yes_on_a_non_terminal_it_shows_the_damage_refuses_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let damaged = damaged_partition(&dir.path().join("data"));
    let before = snapshot(&damaged.data);
    let output = recover(&damaged, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr_text(&output));
    assert_plan(&output, &damaged);
    assert_eq!(
        stderr_text(&output),
        "seglog: error: stdin is not a terminal: run again with --yes to truncate t-0 (nothing \
         was changed)\n"
    );
    // The lock file is opened (it exists already) and released; nothing else is touched.
    assert_eq!(snapshot(&damaged.data), before);
}

#[test]
fn with_yes_it_truncates_and_the_engine_serves_every_batch_before_the_damage() {
    let dir = tempfile::tempdir().unwrap();
    let damaged = damaged_partition(&dir.path().join("data"));
    let output = recover(&damaged, &["--yes"]);
    assert_success(&output);
    assert_plan(&output, &damaged);
    let last = stdout_lines(&output).pop().unwrap();
    assert!(
        last.starts_with(&format!(
            "Truncated t-0: it ends at offset {} now; ",
            damaged.offset
        )),
        "{last}"
    );

    let config = EngineConfig::default()
        .with_shard_count(1)
        .with_pin_shards(false);
    let engine = Engine::open(&damaged.data, config).unwrap();
    let expected: Vec<String> = (0..damaged.offset).map(|n| format!("value-{n}")).collect();
    assert_eq!(values_served(&engine), expected);
    let mut batch = BatchBuilder::new(0);
    batch.push(&NewRecord {
        timestamp_ms: 1_700_000_000_000,
        key: Some(b"k"),
        value: Some(b"after"),
        headers: &[],
    });
    let topic = TopicName::parse("t").unwrap();
    let appended = engine
        .append(&topic, 0, batch.build().unwrap(), Durability::Durable)
        .wait()
        .unwrap();
    assert_eq!(appended.first_offset, Offset(damaged.offset));
    engine.close().unwrap();

    let verified = run(&["verify", "--dir", path_arg(&damaged.data)]);
    assert_success(&verified);
    let again = recover(&damaged, &[]);
    assert_success(&again);
    assert_eq!(
        stdout_lines(&again),
        ["t-0: every batch is valid; nothing to truncate."]
    );
}

#[test]
fn a_directory_another_process_holds_is_refused_as_locked() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let config = EngineConfig::default()
            .with_shard_count(1)
            .with_pin_shards(false);
        let engine = Engine::open(&data, config).unwrap();
        engine.create_topic("t", 1, LogConfig::default()).unwrap();
        engine.close().unwrap();
    }
    let data_arg = path_arg(&data);
    let mut producer = RunningSeglog::spawn(&["produce", "--dir", data_arg, "--topic", "t"]);
    producer.write_line("held");
    assert_eq!(producer.next_line(), "partition=0 offset=0");
    let output = run(&[
        "recover",
        "--dir",
        data_arg,
        "--topic",
        "t",
        "--partition",
        "0",
        "--yes",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr_text(&output),
        format!(
            "seglog: error: cannot read t-0 in {data_arg}: data directory {data_arg} is locked by \
             another seglog instance\n"
        )
    );
    assert!(producer.finish().success());
}
