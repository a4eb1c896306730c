//! End-to-end tests of the `seglog` binary, run as a user runs it (a child process with pipes).
//! They prove that: `produce` routes keyed records to Kafka's murmur2 partition and unkeyed ones
//! round-robin, acknowledges every line in input order with the offset `consume` then finds the
//! record at, in text and JSON, and acknowledges a line while stdin is still open (it streams);
//! `consume` reads a partition directory written as Kafka writes it (a bare `.log`, no index, no
//! checkpoint; a `LogAppendTime` batch and a gzip-compressed one among its batches), honours
//! `--offset` inside a batch and `--max-records`, and names the valid range
//! for an offset outside it; `dump` prints `.log`, `.index` and `.timeindex` files with Kafka's
//! `DumpLogSegments` field names, flags a corrupted index entry and summarises a zero-filled index
//! tail; `verify` passes a clean directory and, after a flipped byte or a torn tail, fails naming
//! the file and the position; invalid topic names and usage errors are rejected with exit codes 1
//! and 2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use seglog::format::batch::{field, set_log_append_time};
use seglog::format::compression::compress;
use seglog::format::prewrite::prewrite_bytes;
use seglog::format::{BatchBuilder, Compression, NewRecord};
use seglog::producer::partition_for_key;

mod support;

use support::{
    RunningSeglog, assert_exit_code, assert_fails_with, assert_prints_line_starting,
    assert_success, assert_usage_error, assert_verify_finds_incomplete_batch, consume, dump,
    json_lines, parse_text_ack, path_arg, produce, run, segment_logs, stdout_lines, text_field,
    verify, words,
};

const FIRST_LOG: &str = "00000000000000000000.log";
const FIRST_INDEX: &str = "00000000000000000000.index";
const FIRST_TIME_INDEX: &str = "00000000000000000000.timeindex";

/// Produces `lines` of `value_bytes`-byte values keyed `k<i>` with 64-byte indexes (8 offset
/// entries per segment, so segments roll) and returns the data directory.
fn produce_large_records(dir: &Path, record_count: usize, value_bytes: usize) -> PathBuf {
    let data = dir.join("data");
    let mut input = String::new();
    for index in 0..record_count {
        input.push_str(&format!("k{index}:{}\n", "v".repeat(value_bytes)));
    }
    let extra = words("--key-separator : --config segment.index.bytes=64");
    let output = produce(&data, "big", &extra, input.as_bytes());
    assert_success(&output);
    assert_eq!(stdout_lines(&output).len(), record_count);
    data
}

/// The value of `name: value` in a Kafka-style dump line.
fn field(line: &str, name: &str) -> String {
    let start = line.find(&format!("{name}: ")).unwrap() + name.len() + 2;
    line[start..].split(' ').next().unwrap().to_owned()
}

/// Batch lines of a `.log` dump, as (position, lastOffset).
fn batch_positions(dump: &[String]) -> Vec<(u64, i64)> {
    dump.iter()
        .filter(|line| line.starts_with("baseOffset: "))
        .map(|line| {
            (
                field(line, "position").parse().unwrap(),
                field(line, "lastOffset").parse().unwrap(),
            )
        })
        .collect()
}

/// What a consumer must find at (partition, offset): key and value.
type ExpectedRecords = BTreeMap<(u32, u64), (Option<String>, String)>;

/// Where each `key:value` (or unkeyed) line must land in a fresh topic of `partition_count`
/// partitions, computed independently of the tool: murmur2 for keys, round-robin otherwise,
/// offsets dense per partition in input order. Returns the acknowledgements in input order.
fn expected_placements(
    lines: &[&str],
    partition_count: u32,
    records: &mut ExpectedRecords,
) -> Vec<(u32, u64)> {
    let mut next_offset = vec![0u64; partition_count as usize];
    let mut unkeyed_count = 0;
    let mut acks = Vec::new();
    for line in lines {
        let (key, value) = match line.split_once(':') {
            Some((key, value)) => (Some(key.to_owned()), value.to_owned()),
            None => (None, (*line).to_owned()),
        };
        let partition = match &key {
            Some(key) => partition_for_key(key.as_bytes(), partition_count).unwrap(),
            None => {
                unkeyed_count += 1;
                (unkeyed_count - 1) % partition_count
            }
        };
        let offset = next_offset[partition as usize];
        next_offset[partition as usize] += 1;
        acks.push((partition, offset));
        records.insert((partition, offset), (key, value));
    }
    acks
}

/// `consume` of `partition` prints exactly the expected records, in order, in text and in JSON.
fn assert_partition_holds(data: &Path, topic: &str, partition: u32, expected: &ExpectedRecords) {
    let (text, json) = (
        consume(data, topic, partition, &[]),
        consume(data, topic, partition, &["--format", "json"]),
    );
    assert_success(&text);
    assert_success(&json);
    let wanted: Vec<_> = expected
        .iter()
        .filter(|((p, _), _)| *p == partition)
        .collect();
    let (text_lines, json_lines) = (stdout_lines(&text), stdout_lines(&json));
    assert_eq!(text_lines.len(), wanted.len());
    assert_eq!(json_lines.len(), wanted.len());
    for ((((_, offset), (key, value)), text_line), json_line) in
        wanted.iter().zip(&text_lines).zip(&json_lines)
    {
        let key_text = key.clone().unwrap_or_else(|| "null".to_owned());
        assert!(
            text_line.starts_with(&format!("offset={offset} timestamp=")),
            "{text_line}"
        );
        assert!(
            text_line.ends_with(&format!(" key={key_text} value={value} headers=[]")),
            "{text_line}"
        );
        let record: serde_json::Value = serde_json::from_str(json_line).unwrap();
        assert_eq!(record["offset"], serde_json::json!(offset));
        assert_eq!(record["key"], serde_json::json!(key));
        assert_eq!(record["value"], serde_json::json!(value));
        assert_eq!(record["headers"], serde_json::json!([]));
        assert!(record["timestamp"].as_i64().unwrap() > 1_600_000_000_000);
        let keys: Vec<&str> = json_line.split('"').skip(1).step_by(2).take(2).collect();
        assert_eq!(
            keys,
            ["offset", "timestamp"],
            "JSON fields in documented order: {json_line}"
        );
    }
}

/// Appends `alpha:6` to the existing 3-partition topic `orders` with `--format json --durable`
/// and checks the acknowledgement names alpha's partition and its next offset.
fn append_alpha_durably_as_json(data: &Path, expected: &mut ExpectedRecords) {
    let extra = words("--key-separator : --format json --durable");
    let output = produce(data, "orders", &extra, b"alpha:6\n");
    assert_success(&output);
    let ack: serde_json::Value = serde_json::from_str(&stdout_lines(&output)[0]).unwrap();
    let alpha = partition_for_key(b"alpha", 3).unwrap();
    let alpha_end = expected
        .keys()
        .filter(|(partition, _)| *partition == alpha)
        .count() as u64;
    assert_eq!(
        ack,
        serde_json::json!({"partition": alpha, "offset": alpha_end})
    );
    expected.insert(
        (alpha, alpha_end),
        (Some("alpha".to_owned()), "6".to_owned()),
    );
}

#[test]
fn produce_then_consume_round_trips_keyed_and_null_keyed_records_in_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let lines = [
        "alpha:1",
        "beta:2",
        "no key here",
        "gamma:3",
        "alpha:4",
        ":empty key",
        "another unkeyed",
        "delta:5",
    ];
    let input = lines.join("\n") + "\n";
    let extra = words("--partitions 3 --key-separator :");
    let output = produce(&data, "orders", &extra, input.as_bytes());
    assert_success(&output);
    let acks: Vec<(u32, u64)> = stdout_lines(&output)
        .iter()
        .map(|line| parse_text_ack(line))
        .collect();
    let mut expected = ExpectedRecords::new();
    assert_eq!(
        acks,
        expected_placements(&lines, 3, &mut expected),
        "one acknowledgement per line, in input order"
    );

    // A second run on the existing topic (no --partitions), JSON acknowledgements, --durable.
    append_alpha_durably_as_json(&data, &mut expected);
    for partition in 0..3u32 {
        assert_partition_holds(&data, "orders", partition, &expected);
    }
}

#[test]
fn produce_acknowledges_a_line_before_stdin_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut producer = RunningSeglog::producer(&data, "stream");
    producer.produce_one_at_a_time(&["first", "second"], 0);
    assert!(producer.finish().success());
}

/// Kafka's batch-line field names, in Kafka's order, with the values every batch the CLI writes
/// has at those fields.
const KAFKA_BATCH_FIELDS: [&str; 18] = [
    "baseOffset: 0 ",
    " lastOffset: ",
    " count: ",
    " baseSequence: -1 ",
    " lastSequence: -1 ",
    " producerId: -1 ",
    " producerEpoch: -1 ",
    " partitionLeaderEpoch: -1 ",
    " isTransactional: false ",
    " isControl: false ",
    " deleteHorizonMs: OptionalLong.empty ",
    " position: 0 ",
    " CreateTime: ",
    " size: ",
    " magic: 2 ",
    " compresscodec: none ",
    " crc: ",
    " isvalid: true",
];

fn assert_in_order(line: &str, parts: &[&str]) {
    let mut at = 0;
    for part in parts {
        at += line[at..]
            .find(part)
            .unwrap_or_else(|| panic!("{part:?} in order in {line}"));
    }
}

/// The (position, offset) of each entry of an `.index` dump.
fn index_dump_entries(output: &Output) -> Vec<(u64, i64)> {
    stdout_lines(output)[1..]
        .iter()
        .map(|line| {
            (
                field(line, "position").parse().unwrap(),
                field(line, "offset").parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn dump_prints_log_index_and_timeindex_with_kafkas_field_names() {
    let dir = tempfile::tempdir().unwrap();
    let data = produce_large_records(dir.path(), 120, 2000);
    let partition = data.join("big-0");
    assert!(
        segment_logs(&partition).len() >= 2,
        "64-byte indexes fill up and roll the segment"
    );
    let (log, index, time_index) = (
        partition.join(FIRST_LOG),
        partition.join(FIRST_INDEX),
        partition.join(FIRST_TIME_INDEX),
    );

    let output = dump(&[&log], &["--print-data-log"]);
    assert_success(&output);
    let lines = stdout_lines(&output);
    assert_eq!(lines[0], format!("Dumping {}", log.display()));
    assert_eq!(lines[1], "Log starting offset: 0");
    assert_in_order(&lines[2], &KAFKA_BATCH_FIELDS);
    let record_tail = format!(
        " keySize: 2 valueSize: 2000 sequence: -1 headerKeys: [] key: k0 payload: {}",
        "v".repeat(2000)
    );
    assert!(
        lines[3].starts_with("| offset: 0 CreateTime: ") && lines[3].ends_with(&record_tail),
        "{}",
        lines[3]
    );

    let output = dump(&[&index], &[]);
    assert_success(&output);
    let entries = index_dump_entries(&output);
    assert!(
        !entries.is_empty(),
        "4096-byte index interval with 2 KB records yields entries"
    );
    let batches = batch_positions(&lines);
    for entry in &entries {
        assert!(
            batches.contains(entry),
            "index entry (position, offset) {entry:?} names a batch start and its last offset"
        );
    }

    let output = dump(&[&time_index], &[]);
    assert_success(&output);
    let time_lines = stdout_lines(&output);
    assert_eq!(time_lines[0], format!("Dumping {}", time_index.display()));
    assert!(time_lines.len() > 1);
    for line in &time_lines[1..] {
        let timestamp: i64 = field(line, "timestamp").parse().unwrap();
        let offset: i64 = field(line, "offset").parse().unwrap();
        assert_eq!(line, &format!("timestamp: {timestamp} offset: {offset}"));
    }
}

/// The first `.index` of a partition of 40 records of 2,000 bytes, and its bytes.
fn first_index(dir: &Path) -> (PathBuf, Vec<u8>) {
    let data = produce_large_records(dir, 40, 2000);
    let index = data.join("big-0").join(FIRST_INDEX);
    let bytes = fs::read(&index).unwrap();
    (index, bytes)
}

#[test]
fn dump_flags_a_corrupted_index_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (index, mut bytes) = first_index(dir.path());
    assert!(bytes.len() >= 8);
    let position = u32::from_be_bytes(bytes[4..8].try_into().unwrap());
    let offset = u32::from_be_bytes(bytes[0..4].try_into().unwrap());
    bytes[4..8].copy_from_slice(&(position + 1).to_be_bytes());
    fs::write(&index, bytes).unwrap();

    let output = dump(&[&index], &[]);
    assert_exit_code(&output, 1);
    let lines = stdout_lines(&output);
    let flagged = format!(
        "Index entry offset: {offset} position: {} does not match: no batch starts at position {}",
        position + 1,
        position + 1
    );
    assert!(lines.contains(&flagged), "{lines:#?}");
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.contains("does not match"))
            .count(),
        1
    );
}

#[test]
fn dump_summarises_a_zero_filled_index_tail_instead_of_flagging_each_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (index, mut bytes) = first_index(dir.path());
    let entry_count = bytes.len() / 8;
    bytes.extend(std::iter::repeat_n(0u8, 8 * 400));
    fs::write(&index, bytes).unwrap();

    let output = dump(&[&index], &[]);
    assert_success(&output);
    let lines = stdout_lines(&output);
    assert!(
        !lines.iter().any(|line| line.contains("does not match")),
        "{lines:#?}"
    );
    let summary = format!("Zero-filled tail: 400 entries from entry {entry_count} ");
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.starts_with(&summary))
            .count(),
        1,
        "{lines:#?}"
    );
    assert_eq!(
        lines.len(),
        1 + entry_count + 1,
        "header, the real entries, one summary line"
    );
}

#[test]
fn verify_passes_a_clean_directory_and_names_file_and_position_after_a_flipped_log_byte() {
    let dir = tempfile::tempdir().unwrap();
    let data = produce_large_records(dir.path(), 120, 2000);
    let output = produce(&data, "small", &["--partitions", "2"], b"a\nb\nc\n");
    assert_success(&output);

    let output = verify(&data);
    assert_success(&output);
    let lines = stdout_lines(&output);
    let ok_line = lines.last().unwrap();
    assert!(
        ok_line.starts_with("OK ") && ok_line.ends_with(" batches, 123 records"),
        "{lines:#?}"
    );

    let log = data.join("big-0").join(FIRST_LOG);
    let batches = batch_positions(&stdout_lines(&dump(&[&log], &[])));
    let (position, _) = batches[1];
    let mut bytes = fs::read(&log).unwrap();
    bytes[position as usize + 100] ^= 0x40;
    fs::write(&log, bytes).unwrap();

    let output = verify(&data);
    assert_exit_code(&output, 1);
    let problem = format!("{}: position {position}: CRC-32C mismatch", log.display());
    assert_prints_line_starting(&output, &problem);
    let lines = stdout_lines(&output);
    assert!(
        lines.last().unwrap().starts_with("FAILED 1 problems in "),
        "{lines:#?}"
    );
}

/// A partition of 12 records of 2,000 bytes, and its first segment's `.log`.
fn small_partition(dir: &Path) -> (PathBuf, PathBuf) {
    let partition = produce_large_records(dir, 12, 2000).join("big-0");
    let log = partition.join(FIRST_LOG);
    (partition, log)
}

#[test]
fn verify_and_dump_stop_at_a_torn_last_batch_naming_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let (partition, log) = small_partition(dir.path());
    let batches = batch_positions(&stdout_lines(&dump(&[&log], &[])));
    let (last_position, _) = *batches.last().unwrap();
    let length = fs::metadata(&log).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(length - 10)
        .unwrap();

    let output = dump(&[&log], &[]);
    assert_exit_code(&output, 1);
    let stop = format!("Invalid batch at position {last_position}: incomplete batch");
    assert_prints_line_starting(&output, &stop);
    let lines = stdout_lines(&output);
    let unread = length - 10 - last_position;
    assert_eq!(
        lines.last().unwrap(),
        &format!("Found {unread} invalid bytes at the end of {FIRST_LOG}")
    );

    assert_verify_finds_incomplete_batch(&partition, &log, last_position);
}

#[test]
fn verify_and_dump_note_space_prewritten_past_the_batches_and_flag_it_misplaced() {
    let dir = tempfile::tempdir().unwrap();
    let (partition, log) = small_partition(dir.path());
    let length = fs::metadata(&log).unwrap().len();
    let append = |bytes: &[u8]| {
        use std::os::unix::fs::FileExt;
        let file = fs::OpenOptions::new().write(true).open(&log).unwrap();
        file.set_len(length).unwrap();
        file.write_all_at(bytes, length).unwrap();
    };

    // A crash of a log synced in small steps leaves its prewritten space past the batches.
    append(&prewrite_bytes(length, 64 * 1024));
    let output = verify(&partition);
    assert_success(&output);
    let note = format!(
        "note: {}: the last {} bytes are space prewritten",
        log.display(),
        64 * 1024
    );
    assert_prints_line_starting(&output, &note);
    let output = dump(&[&log], &[]);
    assert_success(&output);
    assert_eq!(
        stdout_lines(&output).last().unwrap(),
        &format!(
            "Found {} bytes of space prewritten ahead of the appends at the end of {FIRST_LOG} \
             (the segment was not closed; recovery cuts them)",
            64 * 1024
        )
    );

    // Stamped for another position: a misdirected write, a problem.
    append(&prewrite_bytes(length + 512, 64 * 1024));
    assert_exit_code(&verify(&partition), 1);
    let output = dump(&[&log], &[]);
    assert_exit_code(&output, 1);
    assert!(
        stdout_lines(&output)
            .last()
            .unwrap()
            .starts_with("Found 65536 invalid bytes at the end of"),
        "{:#?}",
        stdout_lines(&output)
    );
}

#[test]
fn consume_of_an_out_of_range_offset_prints_the_valid_range() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    assert_success(&produce(&data, "t", &[], b"a\nb\nc\n"));
    let output = consume(&data, "t", 0, &["--offset", "10"]);
    assert_fails_with(
        &output,
        "offset 10 is out of range: valid offsets are 0 to 3",
    );
}

#[test]
fn consume_starts_at_the_requested_offset_and_stops_after_max_records() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    assert_success(&produce(&data, "t", &[], b"a\nb\nc\nd\n"));
    let output = consume(&data, "t", 0, &words("--offset 1 --max-records 2"));
    assert_success(&output);
    let lines = stdout_lines(&output);
    let fields =
        |name| -> Vec<String> { lines.iter().map(|line| text_field(line, name)).collect() };
    assert_eq!(fields("value"), ["b", "c"]);
    assert_eq!(fields("offset"), ["1", "2"]);
}

#[test]
fn produce_and_consume_reject_an_invalid_topic_name() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let output = produce(&data, "../escape", &[], b"x\n");
    assert_fails_with(&output, "invalid topic name \"../escape\"");
    assert!(!dir.path().join("escape-0").exists());
    let output = consume(&data, "a b", 0, &[]);
    assert_fails_with(&output, "invalid topic name \"a b\"");
}

/// A gzip-compressed batch as Kafka's producer writes one: the records section of `builder`'s
/// batch compressed, the codec in the attributes, the length and CRC-32C rewritten.
fn gzip_batch(builder: BatchBuilder) -> Vec<u8> {
    let plain = builder.build().unwrap();
    let mut batch = plain[..field::RECORDS].to_vec();
    batch.extend(compress(Compression::Gzip, &plain[field::RECORDS..]).unwrap());
    let batch_length = i32::try_from(batch.len() - 12).unwrap();
    batch[field::BATCH_LENGTH..field::BATCH_LENGTH + 4]
        .copy_from_slice(&batch_length.to_be_bytes());
    let attributes = u16::from_be_bytes([batch[field::ATTRIBUTES], batch[field::ATTRIBUTES + 1]]);
    let attributes = attributes | u16::from(Compression::Gzip.attribute_bits());
    batch[field::ATTRIBUTES..field::ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&batch[field::ATTRIBUTES..]);
    batch[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}

fn record<'a>(timestamp_ms: i64, key: Option<&'a [u8]>, value: Option<&'a [u8]>) -> NewRecord<'a> {
    NewRecord {
        timestamp_ms,
        key,
        value,
        headers: &[],
    }
}

/// Writes `<data>/kafka-topic-0/00000000000000000000.log` as Kafka would: three batches (the
/// second stamped `LogAppendTime` by the broker, the third gzip-compressed), headers, a null key
/// and value; no index, no checkpoint.
fn write_kafka_partition(data: &Path) -> PathBuf {
    let partition = data.join("kafka-topic-0");
    fs::create_dir_all(&partition).unwrap();
    let headers: [(&str, Option<&[u8]>); 2] = [("h1", Some(&b"x"[..])), ("h2", None)];
    let mut first = BatchBuilder::new(0);
    first.push(&record(1_700_000_000_000, Some(b"k0"), Some(b"v0")));
    first.push(&NewRecord {
        headers: &headers,
        ..record(1_700_000_000_001, Some(b"k1"), Some(b"v1"))
    });
    first.push(&record(1_700_000_000_002, None, None));
    let mut second = BatchBuilder::new(3);
    second.push(&record(1_700_000_000_005, Some(b"k3"), Some(b"v3")));
    second.push(&record(1_700_000_000_006, Some(b"k4"), Some(b"v4")));
    let mut second = second.build().unwrap().to_vec();
    set_log_append_time(&mut second, 1_700_000_009_999);
    let mut third = BatchBuilder::new(5);
    third.push(&record(1_700_000_000_010, Some(b"k5"), Some(b"v5")));
    third.push(&record(1_700_000_000_011, Some(b"k6"), Some(b"v6")));
    let mut log = first.build().unwrap().to_vec();
    log.extend_from_slice(&second);
    log.extend_from_slice(&gzip_batch(third));
    let path = partition.join(FIRST_LOG);
    fs::write(&path, log).unwrap();
    path
}

/// `dump` shows the broker's `LogAppendTime`, the record headers and the gzip batch's records;
/// `verify` accepts a partition without indexes or checkpoints.
fn assert_kafka_log_dumps_and_verifies(data: &Path, log: &Path) {
    let output = dump(&[log], &["--deep-iteration"]);
    assert_success(&output);
    let lines = stdout_lines(&output);
    for (index, at, part) in [
        (2, "contains", " position: 0 CreateTime: 1700000000002 "),
        (4, "ends", " sequence: -1 headerKeys: [h1,h2]"),
        (6, "contains", " LogAppendTime: 1700000009999 "),
        (
            7,
            "starts",
            "| offset: 3 LogAppendTime: 1700000009999 keySize: 2",
        ),
        (9, "contains", " compresscodec: gzip crc: "),
        (
            11,
            "starts",
            "| offset: 6 CreateTime: 1700000000011 keySize: 2 valueSize: 2",
        ),
    ] {
        let line = &lines[index];
        let found = match at {
            "starts" => line.starts_with(part),
            "ends" => line.ends_with(part),
            _ => line.contains(part),
        };
        assert!(found, "line {index} {at} {part:?}: {line}");
    }
    let verified = verify(data);
    assert_success(&verified);
    assert_eq!(
        stdout_lines(&verified).last().unwrap(),
        "OK 1 segments, 3 batches, 7 records"
    );
}

#[test]
fn consume_reads_a_partition_directory_written_by_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = write_kafka_partition(&data);

    assert_kafka_log_dumps_and_verifies(&data, &log);

    let output = consume(&data, "kafka-topic", 0, &["--from-beginning"]);
    assert_success(&output);
    assert_eq!(
        stdout_lines(&output),
        [
            "offset=0 timestamp=1700000000000 key=k0 value=v0 headers=[]",
            "offset=1 timestamp=1700000000001 key=k1 value=v1 headers=[h1=x,h2=null]",
            "offset=2 timestamp=1700000000002 key=null value=null headers=[]",
            "offset=3 timestamp=1700000009999 key=k3 value=v3 headers=[]",
            "offset=4 timestamp=1700000009999 key=k4 value=v4 headers=[]",
            "offset=5 timestamp=1700000000010 key=k5 value=v5 headers=[]",
            "offset=6 timestamp=1700000000011 key=k6 value=v6 headers=[]",
        ]
    );

    let output = consume(&data, "kafka-topic", 0, &words("--offset 1 --format json"));
    let records = json_lines(&output);
    assert_eq!(
        records.len(),
        6,
        "offset 1 is inside the first batch: offset 0 is skipped"
    );
    assert_eq!(
        records[0],
        serde_json::json!({"offset": 1, "timestamp": 1_700_000_000_001_i64, "key": "k1", "value": "v1",
            "headers": [{"key": "h1", "value": "x"}, {"key": "h2", "value": null}]})
    );
    assert_eq!(records[1]["key"], serde_json::Value::Null);
    assert_eq!(records[1]["value"], serde_json::Value::Null);
}

#[test]
fn usage_errors_exit_with_code_2() {
    for args in [
        "consume --dir /nonexistent",
        "produce --dir /nonexistent --topic t --partitions 0",
        "consume --dir d --topic t --partition 0 --offset 1 --from-beginning",
    ] {
        assert_usage_error(&run(&words(args)));
    }
    let output = run(&["--help"]);
    assert_success(&output);
    let help = String::from_utf8(output.stdout).unwrap();
    for subcommand in ["topics", "produce", "consume", "dump", "verify"] {
        assert!(help.contains(subcommand), "{help}");
    }
}

/// `produce --null-marker S` sends a value equal to S as a null value (Kafka's `null.marker`),
/// and `consume --max-messages` is `--max-records` under Kafka's console consumer's name.
#[test]
fn produce_sends_the_null_marker_as_a_null_value_and_consume_takes_max_messages() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let input = b"k1:v1\nk2:NULL\nk3:NULLish\n";
    let extra = words("--key-separator : --null-marker NULL");
    assert_success(&produce(&data, "t", &extra, input));
    let output = consume(&data, "t", 0, &words("--format json --max-messages 2"));
    assert_success(&output);
    let values: Vec<serde_json::Value> = stdout_lines(&output)
        .iter()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["value"].clone())
        .collect();
    assert_eq!(values, [serde_json::json!("v1"), serde_json::Value::Null]);
    let all = consume(&data, "t", 0, &words("--format json"));
    let last: serde_json::Value = serde_json::from_str(stdout_lines(&all).last().unwrap()).unwrap();
    assert_eq!(
        last["value"], "NULLish",
        "only a value equal to the marker is null"
    );
}

/// Without `--format`, `consume` prints as `kafka-console-consumer` does: the value alone, and
/// with `--property print.*=true` Kafka's columns before it, joined by `key.separator`.
#[test]
fn consume_prints_values_alone_by_default_and_kafkas_columns_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let extra = words("--key-separator : --null-marker NULL");
    assert_success(&produce(&data, "t", &extra, b"k1:v1\nk2:NULL\nunkeyed\n"));
    let run_consume = |extra: &[&str]| {
        let base = [
            "consume",
            "--dir",
            path_arg(&data),
            "--topic",
            "t",
            "--partition",
            "0",
        ];
        let output = run(&[&base[..], extra].concat());
        assert_success(&output);
        stdout_lines(&output)
    };
    assert_eq!(run_consume(&[]), ["v1", "null", "unkeyed"]);
    let columns = run_consume(&words(
        "--property print.key=true --property print.offset=true --property print.partition=true \
         --property key.separator=|",
    ));
    assert_eq!(
        columns,
        [
            "Partition:0|Offset:0|k1|v1",
            "Partition:0|Offset:1|k2|null",
            "Partition:0|Offset:2|null|unkeyed"
        ]
    );
    let timestamped = run_consume(&words("--property print.timestamp=true --max-messages 1"));
    assert!(timestamped[0].starts_with("CreateTime:"), "{timestamped:?}");
    let refused = run(&[
        &[
            "consume",
            "--dir",
            path_arg(&data),
            "--topic",
            "t",
            "--partition",
            "0",
        ][..],
        &words("--property print.everything=true"),
    ]
    .concat());
    assert_fails_with(&refused, "unknown --property \"print.everything\"");
}

/// `seglog completions SHELL` prints the shell's completion script and `seglog man` the man
/// page, both generated from the command-line definitions, so they name every subcommand.
#[test]
fn completions_and_the_man_page_name_every_subcommand() {
    let subcommands = ["topics", "produce", "consume", "groups", "verify", "serve"];
    for shell in ["bash", "zsh", "fish"] {
        let output = run(&["completions", shell]);
        assert_success(&output);
        let script = String::from_utf8(output.stdout).unwrap();
        for subcommand in subcommands.iter().chain(&["reset-offsets"]) {
            assert!(script.contains(subcommand), "{shell}: no {subcommand}");
        }
    }
    let output = run(&["man"]);
    assert_success(&output);
    let page = String::from_utf8(output.stdout).unwrap();
    assert!(page.contains(".TH seglog 1"), "a roff man page");
    for subcommand in subcommands {
        assert!(page.contains(subcommand), "man: no {subcommand}");
    }
    assert_usage_error(&run(&["completions", "tcsh"]));
}

/// Bytes that are not text survive `consume --format json --encoding base64|hex`, and the
/// text formats escape control characters instead of writing them to the terminal.
#[test]
fn consume_writes_any_bytes_safely() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let value = b"a\x1b[31mred\x00\xff";
    let mut input = b"k:".to_vec();
    input.extend_from_slice(value);
    input.push(b'\n');
    assert_success(&produce(&data, "t", &words("--key-separator :"), &input));
    let json_value = |encoding: &str| {
        let output = consume(&data, "t", 0, &["--format", "json", "--encoding", encoding]);
        assert_success(&output);
        let record: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        record["value"].as_str().unwrap().to_owned()
    };
    assert_eq!(json_value("hex"), "611b5b33316d72656400ff");
    assert_eq!(json_value("base64"), "YRtbMzFtcmVkAP8=");
    let text = consume(&data, "t", 0, &["--format", "text"]);
    assert_eq!(
        text_field(&stdout_lines(&text)[0], "value"),
        "a\\x1b[31mred\\x00\u{fffd}"
    );
    let console = run(&[
        "consume",
        "--dir",
        path_arg(&data),
        "--topic",
        "t",
        "--partition",
        "0",
    ]);
    assert_eq!(stdout_lines(&console), ["a\\x1b[31mred\\x00\u{fffd}"]);
    let refused = consume(&data, "t", 0, &["--format", "text", "--encoding", "hex"]);
    assert_fails_with(&refused, "--encoding applies to --format json");
}
