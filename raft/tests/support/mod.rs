//! What the cluster tests share: loopback addresses, idempotent producers' batches, and what a
//! node serves of `t-0`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use seglog::format::batch::BatchIter;
use seglog::format::{Batch, BatchBuilder, NewRecord};
use seglog_raft::client::ClusterClient;

/// `count` free loopback addresses, for nodes 1 to `count`. Ports below Linux's ephemeral range
/// (32768 and up by default), so that no outbound connection of a test running beside this one
/// takes one before its node binds it; each chosen is held until all are, so none is chosen
/// twice. (A port from `127.0.0.1:0` was once taken in between: `AddrInUse` at a node's bind.)
pub fn free_addresses(count: usize) -> BTreeMap<u64, String> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos())
        ^ std::process::id();
    let mut held = Vec::new();
    for attempt in 0..PORT_RANGE {
        if held.len() == count {
            break;
        }
        let port = FIRST_PORT + (seed.wrapping_add(attempt * 7_919) % PORT_RANGE) as u16;
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
        }
    }
    assert_eq!(held.len(), count, "no {count} free loopback ports");
    (1..=count as u64)
        .zip(&held)
        .map(|(id, listener)| (id, listener.local_addr().unwrap().to_string()))
        .collect()
}

/// The ports [`free_addresses`] chooses from: below the ephemeral range.
const FIRST_PORT: u16 = 20_000;
const PORT_RANGE: u32 = 12_000;

/// A batch of `values` from idempotent producer `producer_id`, first sequence `sequence`.
pub fn batch(producer_id: i64, sequence: i32, values: &[String]) -> Bytes {
    let mut builder = BatchBuilder::new(0).with_producer(producer_id, 0, sequence);
    for value in values {
        builder.push(&NewRecord {
            timestamp_ms: 1_000,
            key: None,
            value: Some(value.as_bytes()),
            headers: &[],
        });
    }
    builder.build().unwrap()
}

/// Every batch `address` serves of t-0, up to its high watermark.
pub async fn batches_at(address: &str) -> Vec<Batch> {
    let mut client = ClusterClient::new(vec![address.to_string()], Duration::from_secs(10));
    let mut batches = Vec::new();
    let mut offset = 0;
    loop {
        let fetched = client.fetch("t", 0, offset, 1 << 20).await.unwrap();
        let mut any = false;
        for batch in BatchIter::new(fetched.records, u64::MAX) {
            let batch = batch.unwrap();
            any = true;
            offset = batch.last_offset() as u64 + 1;
            batches.push(batch);
        }
        if !any || offset >= fetched.high_watermark {
            return batches;
        }
    }
}

/// Every record value `address` serves for t-0, with its offset.
pub async fn values_at(address: &str) -> Vec<(u64, String)> {
    let mut values = Vec::new();
    for batch in batches_at(address).await {
        if batch.header().attributes.is_control() {
            continue;
        }
        for (delta, record) in batch.records().unwrap().into_iter().enumerate() {
            let value = String::from_utf8(record.value.unwrap().to_vec()).unwrap();
            values.push((batch.base_offset() as u64 + delta as u64, value));
        }
    }
    values
}

/// What `address` serves of t-0 once it serves `count` records (or after about 10 s).
pub async fn values_once_served(address: &str, count: usize) -> Vec<(u64, String)> {
    let mut served = values_at(address).await;
    for _ in 0..200 {
        if served.len() >= count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        served = values_at(address).await;
    }
    served
}
