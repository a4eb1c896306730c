//! End-to-end tests of `seglog produce --durable` (acknowledge once the batch is synced, group
//! commit). They prove that: a line typed alone is acknowledged before the next one is written,
//! while stdin stays open; a piped file's acknowledgements, many appends in flight at once, come
//! back one per line in input order with the partition (murmur2 of the key) and the dense offset
//! that `consume` then finds each record at; and records acknowledged durably are all there after
//! the producer is killed without closing the data directory.
//!
//! That the acknowledgements wait for a sync shared by the appends in flight is proven in-process,
//! where syncs can be counted: see the tests of `tools/src/produce.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use seglog::producer::partition_for_key;
use support::{
    RunningSeglog, consumed_values, describe_json, json_lines, path_arg, produce, words,
};

/// A `produce --durable` of `topic` in `data`, with `extra` arguments, its stdin open.
fn durable_producer(data: &Path, topic: &str, extra: &str) -> RunningSeglog {
    let base = [
        "produce",
        "--dir",
        path_arg(data),
        "--topic",
        topic,
        "--durable",
    ];
    RunningSeglog::spawn_quiet(&[&base[..], &words(extra)].concat())
}

#[test]
fn durable_produce_acknowledges_a_typed_line_before_the_next_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut producer = durable_producer(&data, "typed", "--partitions 2 --key-separator :");
    let mut next_offset = [0u64; 2];
    for line in ["alpha:1", "beta:2", "alpha:3", "gamma:4"] {
        producer.write_line(line);
        let key = line.split(':').next().unwrap();
        let partition = partition_for_key(key.as_bytes(), 2).unwrap();
        let offset = next_offset[partition as usize];
        next_offset[partition as usize] += 1;
        assert_eq!(
            producer.next_line(),
            format!("partition={partition} offset={offset}"),
            "{line}"
        );
    }
    assert!(producer.finish().success());
}

#[test]
fn durable_produce_of_a_piped_file_acknowledges_every_line_in_input_order() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let partition_count = 4;
    let record_count = 5000;
    // 300-byte values: a 16 KiB batch holds about 50, so there are many appends per partition.
    let padding = "p".repeat(300);
    let mut input = String::new();
    let mut expected_acks = Vec::new();
    let mut expected_values: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for index in 0..record_count {
        let key = format!("key-{}", index % 97);
        let value = format!("{index}-{padding}");
        input.push_str(&format!("{key}:{value}\n"));
        let partition = partition_for_key(key.as_bytes(), partition_count).unwrap();
        let values = expected_values.entry(partition).or_default();
        expected_acks.push(serde_json::json!({"partition": partition, "offset": values.len()}));
        values.push(value);
    }
    let extra = words("--partitions 4 --key-separator : --format json --durable");
    let acks = json_lines(&produce(&data, "piped", &extra, input.as_bytes()));
    assert_eq!(acks.len(), record_count);
    assert!(
        acks == expected_acks,
        "acknowledgements are in input order, with murmur2 partitions and dense offsets"
    );
    for (partition, values) in &expected_values {
        assert_eq!(&consumed_values(&data, "piped", *partition), values);
    }
}

#[test]
fn records_acknowledged_durably_are_kept_when_the_producer_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut producer = durable_producer(&data, "crash", "");
    let input: String = (0..200).map(|index| format!("record-{index}\n")).collect();
    producer.write(&input);
    for offset in 0..200 {
        assert_eq!(producer.next_line(), format!("partition=0 offset={offset}"));
    }
    // No clean shutdown: the engine is never closed.
    producer.child.kill().unwrap();
    producer.child.wait().unwrap();
    assert!(!data.join(".kafka_cleanshutdown").exists());

    let expected: Vec<String> = (0..200).map(|index| format!("record-{index}")).collect();
    assert_eq!(consumed_values(&data, "crash", 0), expected);
    let partition = &describe_json(&data, "crash")["partitions"][0];
    assert_eq!(partition["log_end_offset"], 200);
}
