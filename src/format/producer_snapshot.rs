//! Producer-state snapshots: `<offset>.snapshot` in a partition directory (FORMAT.md §5.8;
//! Kafka: `ProducerStateManager.writeSnapshot`/`readSnapshot`).
//!
//! A snapshot holds, per idempotent producer, its epoch and its last batch as of the offset in
//! the file's name (the next offset to apply). Fields are declared in the order they are stored.
//! The bytes come from disk: every length is checked, the CRC-32C is checked before any entry is
//! believed, and a bad file is a typed error, never a panic.

use thiserror::Error;

use super::crc::crc32c;

/// The only snapshot version Kafka writes and seglog reads.
pub const SNAPSHOT_VERSION: i16 = 1;
/// `version` (int16) + `crc` (uint32) + entry count (int32).
pub const SNAPSHOT_HEADER_BYTES: usize = 2 + 4 + 4;
/// Where the CRC-32C coverage starts: everything after the `crc` field.
const CRC_COVERAGE_START: usize = 2 + 4;
/// One entry: 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8 bytes.
pub const SNAPSHOT_ENTRY_BYTES: usize = 46;
/// Kafka's `coordinator_epoch` for a producer outside any transaction (seglog keeps none).
pub const NO_COORDINATOR_EPOCH: i32 = -1;
/// Kafka's `current_txn_first_offset` for a producer outside any transaction.
pub const NO_TXN_FIRST_OFFSET: i64 = -1;

/// One producer's entry, fields in file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerSnapshotEntry {
    /// `producer_id`: ≥ 0.
    pub producer_id: i64,
    /// `epoch`: the producer's current epoch.
    pub producer_epoch: i16,
    /// `last_sequence`: the last sequence of its last batch; -1 when it has none.
    pub last_sequence: i32,
    /// `last_offset`: the last offset of its last batch; -1 when it has none.
    pub last_offset: i64,
    /// `offset_delta`: last offset − first offset of that batch.
    pub offset_delta: i32,
    /// `timestamp`: that batch's max timestamp.
    pub timestamp: i64,
    /// `coordinator_epoch`: -1 ([`NO_COORDINATOR_EPOCH`]) for seglog's entries.
    pub coordinator_epoch: i32,
    /// `current_txn_first_offset`: -1 ([`NO_TXN_FIRST_OFFSET`]) for seglog's entries.
    pub current_txn_first_offset: i64,
}

/// Why bytes are not a producer snapshot.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProducerSnapshotError {
    /// The file ends before a field or entry does.
    #[error("truncated: {needed} bytes needed at byte {at}, {available} available")]
    Truncated {
        /// The byte position of the read.
        at: usize,
        /// The bytes the read needed.
        needed: usize,
        /// The bytes left from `at`.
        available: usize,
    },
    /// A `version` other than 1.
    #[error("unsupported producer snapshot version {version}")]
    UnsupportedVersion {
        /// The `version` read.
        version: i16,
    },
    /// The CRC-32C of the bytes after the `crc` field does not match it.
    #[error("CRC-32C mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// The `crc` field.
        stored: u32,
        /// The CRC-32C of the bytes read.
        computed: u32,
    },
    /// The entry count is negative or does not match the bytes after it.
    #[error("{count} entries declared, but {entry_bytes} bytes follow the count")]
    EntryCount {
        /// The count read.
        count: i32,
        /// The bytes after the count.
        entry_bytes: usize,
    },
    /// An entry names a producer id below 0 (no producer).
    #[error("entry {entry_index} has producer id {producer_id}")]
    ProducerId {
        /// The entry's index, from 0.
        entry_index: usize,
        /// The producer id read.
        producer_id: i64,
    },
}

/// Encodes `entries` as a snapshot file's bytes.
pub fn encode(entries: &[ProducerSnapshotEntry]) -> Vec<u8> {
    let mut bytes =
        Vec::with_capacity(SNAPSHOT_HEADER_BYTES + entries.len() * SNAPSHOT_ENTRY_BYTES);
    bytes.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
    bytes.extend_from_slice(&[0; 4]);
    let count = i32::try_from(entries.len()).unwrap_or(i32::MAX);
    bytes.extend_from_slice(&count.to_be_bytes());
    for entry in entries.iter().take(count as usize) {
        bytes.extend_from_slice(&entry.producer_id.to_be_bytes());
        bytes.extend_from_slice(&entry.producer_epoch.to_be_bytes());
        bytes.extend_from_slice(&entry.last_sequence.to_be_bytes());
        bytes.extend_from_slice(&entry.last_offset.to_be_bytes());
        bytes.extend_from_slice(&entry.offset_delta.to_be_bytes());
        bytes.extend_from_slice(&entry.timestamp.to_be_bytes());
        bytes.extend_from_slice(&entry.coordinator_epoch.to_be_bytes());
        bytes.extend_from_slice(&entry.current_txn_first_offset.to_be_bytes());
    }
    let crc = crc32c(bytes.get(CRC_COVERAGE_START..).unwrap_or_default());
    if let Some(field) = bytes.get_mut(2..CRC_COVERAGE_START) {
        field.copy_from_slice(&crc.to_be_bytes());
    }
    bytes
}

/// Decodes a snapshot file's bytes: version 1, a matching CRC-32C, and exactly the entries its
/// count declares.
pub fn decode(bytes: &[u8]) -> Result<Vec<ProducerSnapshotEntry>, ProducerSnapshotError> {
    let mut reader = SnapshotReader { bytes, position: 0 };
    let version = i16::from_be_bytes(reader.array()?);
    if version != SNAPSHOT_VERSION {
        return Err(ProducerSnapshotError::UnsupportedVersion { version });
    }
    let stored = u32::from_be_bytes(reader.array()?);
    let computed = crc32c(bytes.get(CRC_COVERAGE_START..).unwrap_or_default());
    if stored != computed {
        return Err(ProducerSnapshotError::CrcMismatch { stored, computed });
    }
    let count = i32::from_be_bytes(reader.array()?);
    let entry_bytes = bytes.len().saturating_sub(SNAPSHOT_HEADER_BYTES);
    let declared_bytes = usize::try_from(count)
        .ok()
        .and_then(|count| count.checked_mul(SNAPSHOT_ENTRY_BYTES));
    if declared_bytes != Some(entry_bytes) {
        return Err(ProducerSnapshotError::EntryCount { count, entry_bytes });
    }
    let mut entries = Vec::with_capacity(entry_bytes / SNAPSHOT_ENTRY_BYTES);
    for entry_index in 0..entry_bytes / SNAPSHOT_ENTRY_BYTES {
        let entry = reader.entry()?;
        if entry.producer_id < 0 {
            return Err(ProducerSnapshotError::ProducerId {
                entry_index,
                producer_id: entry.producer_id,
            });
        }
        entries.push(entry);
    }
    Ok(entries)
}

struct SnapshotReader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl SnapshotReader<'_> {
    fn array<const N: usize>(&mut self) -> Result<[u8; N], ProducerSnapshotError> {
        let array = self
            .bytes
            .get(self.position..)
            .and_then(<[u8]>::first_chunk::<N>)
            .copied()
            .ok_or(ProducerSnapshotError::Truncated {
                at: self.position,
                needed: N,
                available: self.bytes.len().saturating_sub(self.position),
            })?;
        self.position += N;
        Ok(array)
    }

    fn entry(&mut self) -> Result<ProducerSnapshotEntry, ProducerSnapshotError> {
        Ok(ProducerSnapshotEntry {
            producer_id: i64::from_be_bytes(self.array()?),
            producer_epoch: i16::from_be_bytes(self.array()?),
            last_sequence: i32::from_be_bytes(self.array()?),
            last_offset: i64::from_be_bytes(self.array()?),
            offset_delta: i32::from_be_bytes(self.array()?),
            timestamp: i64::from_be_bytes(self.array()?),
            coordinator_epoch: i32::from_be_bytes(self.array()?),
            current_txn_first_offset: i64::from_be_bytes(self.array()?),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::indexing_slicing,
        reason = "test code: an index out of range fails the test"
    )]

    use super::*;

    fn entry(producer_id: i64) -> ProducerSnapshotEntry {
        ProducerSnapshotEntry {
            producer_id,
            producer_epoch: 3,
            last_sequence: 41,
            last_offset: 1000,
            offset_delta: 9,
            timestamp: 1_700_000_000_000,
            coordinator_epoch: NO_COORDINATOR_EPOCH,
            current_txn_first_offset: NO_TXN_FIRST_OFFSET,
        }
    }

    /// The layout of FORMAT.md §5.8, built by hand field by field.
    fn hand_built(entries: &[ProducerSnapshotEntry]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&(entries.len() as i32).to_be_bytes());
        for e in entries {
            body.extend_from_slice(&e.producer_id.to_be_bytes());
            body.extend_from_slice(&e.producer_epoch.to_be_bytes());
            body.extend_from_slice(&e.last_sequence.to_be_bytes());
            body.extend_from_slice(&e.last_offset.to_be_bytes());
            body.extend_from_slice(&e.offset_delta.to_be_bytes());
            body.extend_from_slice(&e.timestamp.to_be_bytes());
            body.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            body.extend_from_slice(&e.current_txn_first_offset.to_be_bytes());
        }
        let mut bytes = vec![0x00, 0x01];
        bytes.extend_from_slice(&::crc32c::crc32c(&body).to_be_bytes());
        bytes.extend_from_slice(&body);
        bytes
    }

    #[test]
    fn encodes_the_documented_layout_byte_for_byte() {
        let entries = [entry(7), entry(1 << 40)];
        let bytes = encode(&entries);
        assert_eq!(bytes, hand_built(&entries));
        assert_eq!(
            bytes.len(),
            SNAPSHOT_HEADER_BYTES + 2 * SNAPSHOT_ENTRY_BYTES
        );
        // The first entry's producer id starts right after the count, big-endian.
        assert_eq!(&bytes[10..18], &[0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(decode(&bytes), Ok(entries.to_vec()));
    }

    #[test]
    fn an_empty_snapshot_is_ten_bytes() {
        let bytes = encode(&[]);
        // CRC-32C of the four zero bytes of the count.
        let crc = ::crc32c::crc32c(&[0, 0, 0, 0]).to_be_bytes();
        assert_eq!(bytes, [0, 1, crc[0], crc[1], crc[2], crc[3], 0, 0, 0, 0]);
        assert_eq!(decode(&bytes), Ok(Vec::new()));
    }

    #[test]
    fn a_bad_crc_is_refused() {
        let mut bytes = encode(&[entry(7)]);
        bytes[20] ^= 0x01;
        assert!(matches!(
            decode(&bytes),
            Err(ProducerSnapshotError::CrcMismatch { .. })
        ));
        let mut bytes = encode(&[entry(7)]);
        bytes[3] ^= 0x80;
        assert!(matches!(
            decode(&bytes),
            Err(ProducerSnapshotError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = encode(&[entry(7), entry(8)]);
        for length in 0..bytes.len() {
            assert!(decode(&bytes[..length]).is_err(), "length {length}");
        }
        assert!(matches!(
            decode(&bytes[..1]),
            Err(ProducerSnapshotError::Truncated { at: 0, .. })
        ));
    }

    #[test]
    fn a_count_that_does_not_match_the_bytes_is_refused() {
        let mut entries_bytes = hand_built(&[entry(7)]);
        // Declare two entries, recomputing the CRC so that only the count is wrong.
        entries_bytes[6..10].copy_from_slice(&2i32.to_be_bytes());
        let crc = ::crc32c::crc32c(&entries_bytes[6..]);
        entries_bytes[2..6].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            decode(&entries_bytes),
            Err(ProducerSnapshotError::EntryCount {
                count: 2,
                entry_bytes: SNAPSHOT_ENTRY_BYTES,
            })
        );
        let mut negative = hand_built(&[]);
        negative[6..10].copy_from_slice(&(-1i32).to_be_bytes());
        let crc = ::crc32c::crc32c(&negative[6..]);
        negative[2..6].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            decode(&negative),
            Err(ProducerSnapshotError::EntryCount { count: -1, .. })
        ));
    }

    #[test]
    fn other_versions_and_negative_producer_ids_are_refused() {
        let mut bytes = encode(&[entry(7)]);
        bytes[1] = 2;
        assert_eq!(
            decode(&bytes),
            Err(ProducerSnapshotError::UnsupportedVersion { version: 2 })
        );
        let bytes = hand_built(&[entry(-1)]);
        assert_eq!(
            decode(&bytes),
            Err(ProducerSnapshotError::ProducerId {
                entry_index: 0,
                producer_id: -1
            })
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for length in 0..200 {
            let bytes: Vec<u8> = (0..length)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let _ = decode(&bytes);
        }
    }
}
