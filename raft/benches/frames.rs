//! What the wire costs: an AppendEntries request of 64 entries of one 64 KiB batch each, encoded
//! and decoded with postcard (the frames' encoding, `wire.rs`) and, for scale, serde_json. Prints
//! MB/s of batch bytes and the bytes each encoding adds per entry.
//!
//! `cargo bench -p seglog-raft --bench frames`

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use openraft::raft::AppendEntriesRequest;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
use seglog::format::{BatchBuilder, NewRecord};
use seglog_raft::wire::{GroupId, Request};
use seglog_raft::{Batches, TypeConfig};

const ENTRIES: usize = 64;
const RECORD_BYTES: usize = 1024;
const BATCH_RECORDS: usize = 63;

fn request() -> (Request, u64) {
    let value = vec![b'x'; RECORD_BYTES];
    let mut builder = BatchBuilder::new(0);
    for _ in 0..BATCH_RECORDS {
        builder.push(&NewRecord {
            timestamp_ms: 1_000,
            key: None,
            value: Some(&value),
            headers: &[],
        });
    }
    let batch: Bytes = builder.build().unwrap_or_default();
    let entries: Vec<Entry<TypeConfig>> = (0..ENTRIES as u64)
        .map(|index| Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 0), index + 100),
            payload: EntryPayload::Normal(Batches(batch.clone())),
        })
        .collect();
    let rpc = AppendEntriesRequest {
        vote: Vote::new_committed(3, 1),
        prev_log_id: Some(LogId::new(CommittedLeaderId::new(3, 0), 99)),
        entries,
        leader_commit: Some(LogId::new(CommittedLeaderId::new(3, 0), 90)),
    };
    let group = GroupId::Partition {
        topic: "t".into(),
        partition: 0,
    };
    (
        Request::AppendEntries(group, rpc),
        (batch.len() * ENTRIES) as u64,
    )
}

/// MB/s of batch bytes for `work`, run for about a second.
fn rate(data_bytes: u64, mut work: impl FnMut()) -> f64 {
    let started = Instant::now();
    let mut rounds = 0u64;
    while started.elapsed() < Duration::from_secs(1) {
        work();
        rounds += 1;
    }
    (data_bytes * rounds) as f64 / started.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let (request, data_bytes) = request();
    let postcard_frame = postcard::to_stdvec(&request).unwrap_or_default();
    let json_frame = serde_json::to_vec(&request).unwrap_or_default();
    let overhead = |frame: &[u8]| (frame.len() as f64 - data_bytes as f64) / ENTRIES as f64;
    let encode_postcard = rate(data_bytes, || {
        black_box(postcard::to_stdvec(black_box(&request)).unwrap_or_default());
    });
    let decode_postcard = rate(data_bytes, || {
        black_box(postcard::from_bytes::<Request>(black_box(&postcard_frame)).ok());
    });
    let encode_json = rate(data_bytes, || {
        black_box(serde_json::to_vec(black_box(&request)).unwrap_or_default());
    });
    let decode_json = rate(data_bytes, || {
        black_box(serde_json::from_slice::<Request>(black_box(&json_frame)).ok());
    });
    println!(
        "AppendEntries of {ENTRIES} entries x {} KiB",
        data_bytes / ENTRIES as u64 / 1024
    );
    println!("encoding  encode MB/s  decode MB/s  bytes added per entry");
    println!(
        "postcard  {encode_postcard:>11.0}  {decode_postcard:>11.0}  {:>21.1}",
        overhead(&postcard_frame)
    );
    println!(
        "json      {encode_json:>11.0}  {decode_json:>11.0}  {:>21.1}",
        overhead(&json_frame)
    );
}
