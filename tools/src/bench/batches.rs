//! The records a run writes: values of `--record-size` bytes that start with the microsecond
//! clock at which they were made (what `tail` measures end-to-end latency from), followed by
//! lowercase letters taken from a per-producer random pool (so codecs find what they find in
//! text logs: repeats within a batch, no long runs); keys `key-N` with N uniform over
//! `--key-space` when set.

use std::io::Write;

use anyhow::{Context, anyhow};
use bytes::Bytes;
use seglog::format::{BatchBuilder, NewRecord};

use super::progress::now_micros;

use super::settings::Settings;

/// Bytes of the letter pool beyond one value.
const POOL_EXTRA_BYTES: usize = 4096;

pub struct RecordMaker {
    record_size: usize,
    key_space: Option<u64>,
    pool: Vec<u8>,
    rng: fastrand::Rng,
    value: Vec<u8>,
    key: Vec<u8>,
}

impl RecordMaker {
    pub fn new(settings: &Settings, seed: u64) -> RecordMaker {
        let mut rng = fastrand::Rng::with_seed(seed);
        let pool = (0..settings.record_size + POOL_EXTRA_BYTES)
            .map(|_| rng.u8(b'a'..=b'z'))
            .collect();
        RecordMaker {
            record_size: settings.record_size,
            key_space: settings.key_space,
            pool,
            rng,
            value: Vec::with_capacity(settings.record_size),
            key: Vec::with_capacity(24),
        }
    }

    /// Makes the next record's key and value, stamped with `stamp_us`; returns them.
    pub fn next(&mut self, stamp_us: u64) -> (Option<&[u8]>, &[u8]) {
        let start = self.rng.usize(..POOL_EXTRA_BYTES);
        self.value.clear();
        self.value
            .extend_from_slice(&self.pool[start..start + self.record_size]);
        let stamp = stamp_us.to_le_bytes();
        let stamped = stamp.len().min(self.value.len());
        self.value[..stamped].copy_from_slice(&stamp[..stamped]);
        let key = match self.key_space {
            Some(key_space) => {
                self.key.clear();
                let key = self.rng.u64(..key_space);
                // Writing into a Vec cannot fail.
                let _ = write!(self.key, "key-{key}");
                Some(self.key.as_slice())
            }
            None => None,
        };
        (key, &self.value)
    }
}

/// Builds batches of about `--batch-bytes` from a [`RecordMaker`], compressed with
/// `--compression-type`.
pub struct BatchMaker {
    records: RecordMaker,
    batch_bytes: usize,
    compression: seglog::format::Compression,
}

impl BatchMaker {
    pub fn new(settings: &Settings, seed: u64) -> BatchMaker {
        BatchMaker {
            records: RecordMaker::new(settings, seed),
            batch_bytes: settings.batch_bytes,
            compression: settings.compression,
        }
    }

    /// One batch whose records are stamped `stamp_us`, and how many records it holds.
    pub fn batch(&mut self, stamp_us: u64) -> anyhow::Result<(Bytes, u64)> {
        let timestamp_ms = i64::try_from(stamp_us / 1000).unwrap_or(i64::MAX);
        let mut builder = BatchBuilder::with_capacity(0, self.batch_bytes);
        loop {
            let (key, value) = self.records.next(stamp_us);
            let record = NewRecord {
                timestamp_ms,
                key,
                value: Some(value),
                headers: &[],
            };
            if builder.records_count() > 0 && builder.size_bytes_with(&record) > self.batch_bytes {
                break;
            }
            builder.push(&record);
        }
        let records = u64::try_from(builder.records_count()).unwrap_or(0);
        let batch = builder
            .build_compressed(self.compression)
            .context("cannot compress a benchmark batch")?
            .ok_or_else(|| anyhow!("an empty benchmark batch"))?;
        Ok((batch, records))
    }
}

/// Where a network producer's batches come from: one prebuilt batch sent again and again, or a
/// fresh one per produce (keys, compression), as `produce.rs` appends them.
pub enum BatchSource {
    Prebuilt(Bytes, u64),
    Fresh(BatchMaker),
}

impl BatchSource {
    pub fn new(settings: &Settings, producer: usize) -> anyhow::Result<BatchSource> {
        let mut maker = BatchMaker::new(settings, producer as u64 + 1);
        Ok(match settings.fresh_batches() {
            true => BatchSource::Fresh(maker),
            false => {
                let (batch, records) = maker.batch(now_micros())?;
                BatchSource::Prebuilt(batch, records)
            }
        })
    }

    /// The next batch and how many records it holds.
    pub fn next(&mut self) -> anyhow::Result<(Bytes, u64)> {
        match self {
            BatchSource::Prebuilt(batch, records) => Ok((batch.clone(), *records)),
            BatchSource::Fresh(maker) => maker.batch(now_micros()),
        }
    }
}
