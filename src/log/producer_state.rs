//! Idempotent producers' state in one partition (Kafka's `ProducerStateManager`,
//! `ProducerStateEntry` and the checks of `ProducerAppendInfo`), as a pure table: no I/O.
//!
//! A batch whose `producerId` is ≥ 0 carries the producer's epoch and the sequence number of its
//! first record. Per producer the table keeps its epoch and its last
//! [`BATCHES_PER_PRODUCER_MAX`] batches (sequences, offsets, timestamp), which is what a producer
//! with at most five requests in flight can retry. Before an append is written,
//! [`ProducerStateTable::check`] decides, per batch:
//!
//! | batch | answer |
//! |---|---|
//! | producer unknown | accept, at any sequence |
//! | epoch below the producer's | refuse: `InvalidProducerEpoch` |
//! | same epoch, same first and last sequence as one of its kept batches | duplicate: answered with that batch's offsets, nothing written |
//! | epoch above the producer's | accept if its first sequence is 0, else refuse: `OutOfOrderSequence` |
//! | same epoch | accept if its first sequence follows the last batch's last (`i32::MAX` → 0), else refuse: `OutOfOrderSequence` |
//!
//! [`ProducerStateTable::update`] records a batch once it is written. Control batches (Kafka's
//! transaction markers) are neither checked nor recorded: seglog keeps no transactions.
//!
//! What survives a restart is a snapshot (`format::producer_snapshot`): per producer its epoch
//! and last batch only, as Kafka's; replaying the batch headers after the snapshot's offset
//! restores the rest.

use std::collections::{BTreeMap, VecDeque};

use crate::error::AppendError;
use crate::format::BatchHeader;
use crate::format::producer_snapshot::{
    NO_COORDINATOR_EPOCH, NO_TXN_FIRST_OFFSET, ProducerSnapshotEntry,
};
use crate::types::{Offset, TimestampMs};

/// Batches kept per producer (Kafka's `NUM_BATCHES_TO_RETAIN`): a retry of any of them is
/// recognised as a duplicate.
pub const BATCHES_PER_PRODUCER_MAX: usize = 5;
/// `baseSequence` of a batch without sequence numbers.
const NO_SEQUENCE: i32 = -1;
/// The epoch of a producer whose epoch is not known (Kafka's `NO_PRODUCER_EPOCH`).
const NO_PRODUCER_EPOCH: i16 = -1;

/// What a data batch's header says about its producer: only batches with `producerId` ≥ 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatchHeader {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// `baseSequence`.
    pub first_sequence: i32,
    /// The last record's sequence: `baseSequence + lastOffsetDelta`, wrapping past `i32::MAX`
    /// to 0 (Kafka's `DefaultRecordBatch.incrementSequence`).
    pub last_sequence: i32,
    /// `lastOffsetDelta`.
    pub offset_delta: i32,
}

impl ProducerBatchHeader {
    /// The producer fields of `header`; `None` for a batch without a producer or a control batch.
    pub fn of(header: &BatchHeader) -> Option<ProducerBatchHeader> {
        if header.producer_id < 0 || header.attributes.is_control() {
            return None;
        }
        let offset_delta = header.last_offset_delta.max(0);
        Some(ProducerBatchHeader {
            producer_id: header.producer_id,
            producer_epoch: header.producer_epoch,
            first_sequence: header.base_sequence,
            last_sequence: increment_sequence(header.base_sequence, offset_delta),
            offset_delta,
        })
    }
}

/// `sequence + increment`, wrapping from `i32::MAX` to 0; no sequence stays none.
fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence == NO_SEQUENCE {
        return NO_SEQUENCE;
    }
    match sequence.checked_add(increment) {
        Some(sum) => sum,
        None => increment - (i32::MAX - sequence) - 1,
    }
}

/// `sequence - decrement`, wrapping below 0 to `i32::MAX`.
fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    if sequence == NO_SEQUENCE {
        return NO_SEQUENCE;
    }
    if sequence < decrement {
        i32::MAX - (decrement - sequence) + 1
    } else {
        sequence - decrement
    }
}

/// Whether `next` is the sequence after `last`.
fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

/// One written batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    pub first_sequence: i32,
    pub last_sequence: i32,
    /// The offset the batch's last record got.
    pub last_offset: Offset,
    /// Its last offset minus its first.
    pub offset_delta: i32,
    /// Its `maxTimestamp` as written.
    pub max_timestamp: TimestampMs,
}

impl ProducerBatch {
    /// The offset the batch's first record got.
    pub fn first_offset(&self) -> Offset {
        Offset(self.last_offset.0.saturating_sub(self.offset_delta.max(0) as u64))
    }

    /// How many records it holds.
    pub fn record_count(&self) -> u64 {
        self.offset_delta.max(0) as u64 + 1
    }
}

/// One producer's epoch and last batches, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    producer_epoch: i16,
    batches: VecDeque<ProducerBatch>,
}

impl ProducerEntry {
    pub fn new(producer_epoch: i16) -> ProducerEntry {
        ProducerEntry {
            producer_epoch,
            batches: VecDeque::with_capacity(BATCHES_PER_PRODUCER_MAX),
        }
    }

    pub fn producer_epoch(&self) -> i16 {
        self.producer_epoch
    }

    /// The kept batches, oldest first.
    pub fn batches(&self) -> impl Iterator<Item = &ProducerBatch> {
        self.batches.iter()
    }

    fn last_sequence(&self) -> i32 {
        self.batches
            .back()
            .map_or(NO_SEQUENCE, |batch| batch.last_sequence)
    }

    /// The kept batch with exactly `batch`'s epoch and sequences, if any.
    fn duplicate_of(&self, batch: &ProducerBatchHeader) -> Option<ProducerBatch> {
        if batch.producer_epoch != self.producer_epoch {
            return None;
        }
        self.batches
            .iter()
            .find(|kept| {
                kept.first_sequence == batch.first_sequence
                    && kept.last_sequence == batch.last_sequence
            })
            .copied()
    }

    /// Records a written batch: a new epoch forgets the old epoch's batches.
    pub fn push(&mut self, producer_epoch: i16, batch: ProducerBatch) {
        if producer_epoch != self.producer_epoch {
            self.batches.clear();
            self.producer_epoch = producer_epoch;
        }
        if self.batches.len() == BATCHES_PER_PRODUCER_MAX {
            self.batches.pop_front();
        }
        self.batches.push_back(batch);
    }
}

/// What [`ProducerStateTable::check`] decided for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerCheck {
    /// Write it.
    Accept,
    /// Already written: answer with this batch's offsets and write nothing.
    Duplicate(ProducerBatch),
    /// Refuse the append, writing nothing of it.
    Refuse(ProducerRefusal),
}

/// Why a batch was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerRefusal {
    /// Its epoch is below the producer's.
    InvalidEpoch {
        producer_id: i64,
        producer_epoch: i16,
        current_epoch: i16,
    },
    /// Its first sequence does not follow the producer's last (or a new epoch's is not 0).
    OutOfOrderSequence {
        producer_id: i64,
        producer_epoch: i16,
        first_sequence: i32,
        current_epoch: i16,
        last_sequence: i32,
    },
}

impl From<ProducerRefusal> for AppendError {
    fn from(refusal: ProducerRefusal) -> AppendError {
        match refusal {
            ProducerRefusal::InvalidEpoch {
                producer_id,
                producer_epoch,
                current_epoch,
            } => AppendError::InvalidProducerEpoch {
                producer_id,
                producer_epoch,
                current_epoch,
            },
            ProducerRefusal::OutOfOrderSequence {
                producer_id,
                producer_epoch,
                first_sequence,
                current_epoch,
                last_sequence,
            } => AppendError::OutOfOrderSequence {
                producer_id,
                producer_epoch,
                first_sequence,
                current_epoch,
                last_sequence,
            },
        }
    }
}

/// Checks `batch` against what is known of its producer (`None`: nothing).
pub fn check_against(entry: Option<&ProducerEntry>, batch: &ProducerBatchHeader) -> ProducerCheck {
    let Some(entry) = entry else {
        return ProducerCheck::Accept;
    };
    if let Some(duplicate) = entry.duplicate_of(batch) {
        return ProducerCheck::Duplicate(duplicate);
    }
    let current_epoch = entry.producer_epoch;
    if batch.producer_epoch < current_epoch {
        return ProducerCheck::Refuse(ProducerRefusal::InvalidEpoch {
            producer_id: batch.producer_id,
            producer_epoch: batch.producer_epoch,
            current_epoch,
        });
    }
    let accepted = if current_epoch == NO_PRODUCER_EPOCH {
        true
    } else if batch.producer_epoch > current_epoch {
        batch.first_sequence == 0
    } else {
        in_sequence(entry.last_sequence(), batch.first_sequence)
    };
    match accepted {
        true => ProducerCheck::Accept,
        false => ProducerCheck::Refuse(ProducerRefusal::OutOfOrderSequence {
            producer_id: batch.producer_id,
            producer_epoch: batch.producer_epoch,
            first_sequence: batch.first_sequence,
            current_epoch,
            last_sequence: entry.last_sequence(),
        }),
    }
}

/// Every producer's state in one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStateTable {
    producers: BTreeMap<i64, ProducerEntry>,
}

impl ProducerStateTable {
    /// How many producers it knows.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// What it knows of `producer_id`.
    pub fn entry(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Decides whether `batch` may be written (see the module's table).
    pub fn check(&self, batch: &ProducerBatchHeader) -> ProducerCheck {
        check_against(self.entry(batch.producer_id), batch)
    }

    /// Records `batch`, written with its last record at `last_offset`. No checks: a replayed or
    /// replicated batch is recorded as it is.
    pub fn update(
        &mut self,
        batch: &ProducerBatchHeader,
        last_offset: Offset,
        max_timestamp: TimestampMs,
    ) {
        let entry = self
            .producers
            .entry(batch.producer_id)
            .or_insert_with(|| ProducerEntry::new(batch.producer_epoch));
        entry.push(batch.producer_epoch, written(batch, last_offset, max_timestamp));
    }

    /// Records an entry another table worked out (an append's own view, `log/append.rs`).
    pub fn insert(&mut self, producer_id: i64, entry: ProducerEntry) {
        self.producers.insert(producer_id, entry);
    }

    /// Forgets every producer whose last batch's `maxTimestamp` is `expiration_ms` or more before
    /// `now` (Kafka's `producer.id.expiration.ms`; a producer with no batch has timestamp −1):
    /// a batch of it that comes later is taken as a new producer's. Returns how many it forgot.
    pub fn remove_expired(&mut self, now: TimestampMs, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, entry| {
            let last_timestamp = entry.batches.back().map_or(-1, |batch| batch.max_timestamp.0);
            now.0.saturating_sub(last_timestamp) < expiration_ms
        });
        before - self.producers.len()
    }

    /// Forgets every producer.
    pub fn clear(&mut self) {
        self.producers.clear();
    }

    /// The snapshot's entries: per producer, in producer id order, its epoch and last batch.
    pub fn to_snapshot(&self) -> Vec<ProducerSnapshotEntry> {
        self.producers
            .iter()
            .map(|(producer_id, entry)| {
                let last = entry.batches.back();
                ProducerSnapshotEntry {
                    producer_id: *producer_id,
                    producer_epoch: entry.producer_epoch,
                    last_sequence: last.map_or(NO_SEQUENCE, |batch| batch.last_sequence),
                    last_offset: last.map_or(-1, |batch| batch.last_offset.0 as i64),
                    offset_delta: last.map_or(0, |batch| batch.offset_delta),
                    timestamp: last.map_or(-1, |batch| batch.max_timestamp.0),
                    coordinator_epoch: NO_COORDINATOR_EPOCH,
                    current_txn_first_offset: NO_TXN_FIRST_OFFSET,
                }
            })
            .collect()
    }

    /// The table a snapshot describes: each producer with its epoch and (when `last_offset` ≥ 0)
    /// its last batch. A later entry for the same producer replaces an earlier one.
    pub fn from_snapshot(entries: &[ProducerSnapshotEntry]) -> ProducerStateTable {
        let mut table = ProducerStateTable::default();
        for snapshot in entries {
            let mut entry = ProducerEntry::new(snapshot.producer_epoch);
            if snapshot.last_offset >= 0 {
                let offset_delta = snapshot.offset_delta.clamp(0, i32::MAX);
                entry.batches.push_back(ProducerBatch {
                    first_sequence: decrement_sequence(snapshot.last_sequence, offset_delta),
                    last_sequence: snapshot.last_sequence,
                    last_offset: Offset(snapshot.last_offset as u64),
                    offset_delta,
                    max_timestamp: TimestampMs(snapshot.timestamp),
                });
            }
            table.producers.insert(snapshot.producer_id, entry);
        }
        table
    }
}

/// The kept record of `batch` once written with its last record at `last_offset`.
pub fn written(
    batch: &ProducerBatchHeader,
    last_offset: Offset,
    max_timestamp: TimestampMs,
) -> ProducerBatch {
    ProducerBatch {
        first_sequence: batch.first_sequence,
        last_sequence: batch.last_sequence,
        last_offset,
        offset_delta: batch.offset_delta,
        max_timestamp,
    }
}

/// An append's view of the producers it touches: their entries as the table has them plus the
/// append's batches so far, for checking each batch against the ones before it. The table takes
/// them only once they are written ([`ProducerStateTable::insert`]).
#[derive(Debug, Default)]
pub struct ProducerOverlay {
    changed: BTreeMap<i64, ProducerEntry>,
}

impl ProducerOverlay {
    /// The entry as the table and the batches recorded here make it.
    pub fn entry<'a>(
        &'a self,
        table: &'a ProducerStateTable,
        producer_id: i64,
    ) -> Option<&'a ProducerEntry> {
        self.changed
            .get(&producer_id)
            .or_else(|| table.entry(producer_id))
    }

    /// Checks one append's batches in order: each against its producer as the table, this
    /// overlay and the append's earlier batches leave it. The first batch that repeats one
    /// already kept makes the whole append a duplicate, answered with that batch (Kafka's rule); a
    /// batch repeating an earlier one of the same append is out of order.
    pub fn check_append(
        &self,
        table: &ProducerStateTable,
        batches: impl Iterator<Item = ProducerBatchHeader>,
    ) -> ProducerCheck {
        // The entries this append's batches changed so far; appends carry few producers.
        let mut local: Vec<(i64, ProducerEntry)> = Vec::new();
        for batch in batches {
            let local_index = local.iter().position(|(id, _)| *id == batch.producer_id);
            let entry = match local_index.and_then(|index| local.get(index)) {
                Some((_, entry)) => Some(entry),
                None => self.entry(table, batch.producer_id),
            };
            match check_against(entry, &batch) {
                ProducerCheck::Accept => {}
                ProducerCheck::Duplicate(original) if local_index.is_none() => {
                    return ProducerCheck::Duplicate(original);
                }
                ProducerCheck::Duplicate(_) => {
                    let last_sequence = entry.map_or(NO_SEQUENCE, ProducerEntry::last_sequence);
                    return ProducerCheck::Refuse(ProducerRefusal::OutOfOrderSequence {
                        producer_id: batch.producer_id,
                        producer_epoch: batch.producer_epoch,
                        first_sequence: batch.first_sequence,
                        current_epoch: batch.producer_epoch,
                        last_sequence,
                    });
                }
                refused @ ProducerCheck::Refuse(_) => return refused,
            }
            let mut changed = entry
                .cloned()
                .unwrap_or_else(|| ProducerEntry::new(batch.producer_epoch));
            // Offsets are not known yet; only sequences matter to the batches after it.
            changed.push(batch.producer_epoch, written(&batch, Offset(0), TimestampMs(-1)));
            match local_index.and_then(|index| local.get_mut(index)) {
                Some((_, entry)) => *entry = changed,
                None => local.push((batch.producer_id, changed)),
            }
        }
        ProducerCheck::Accept
    }

    /// Records `batch` on top of the table's entry.
    pub fn update(
        &mut self,
        table: &ProducerStateTable,
        batch: &ProducerBatchHeader,
        last_offset: Offset,
        max_timestamp: TimestampMs,
    ) {
        let entry = self.changed.entry(batch.producer_id).or_insert_with(|| {
            table
                .entry(batch.producer_id)
                .cloned()
                .unwrap_or_else(|| ProducerEntry::new(batch.producer_epoch))
        });
        entry.push(batch.producer_epoch, written(batch, last_offset, max_timestamp));
    }

    /// The entry for `producer_id` as recorded here, if the overlay changed it.
    pub fn changed(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.changed.get(&producer_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_expired_forgets_producers_by_their_last_batch_timestamp() {
        let mut table = ProducerStateTable::default();
        for (producer_id, timestamp_ms) in [(1, 1_000), (2, 5_000), (3, 9_999)] {
            let batch = ProducerBatchHeader {
                producer_id,
                producer_epoch: 0,
                first_sequence: 0,
                last_sequence: 0,
                offset_delta: 0,
            };
            table.update(&batch, Offset(producer_id as u64), TimestampMs(timestamp_ms));
        }
        table.insert(4, ProducerEntry::new(0));
        assert_eq!(table.remove_expired(TimestampMs(10_000), 5_000), 3);
        assert!(table.entry(3).is_some(), "within the expiration: kept");
        assert_eq!(table.producer_count(), 1);
    }

    fn batch(producer_id: i64, epoch: i16, first: i32, records: i32) -> ProducerBatchHeader {
        ProducerBatchHeader {
            producer_id,
            producer_epoch: epoch,
            first_sequence: first,
            last_sequence: increment_sequence(first, records - 1),
            offset_delta: records - 1,
        }
    }

    fn table_with(batches: &[(ProducerBatchHeader, u64)]) -> ProducerStateTable {
        let mut table = ProducerStateTable::default();
        for (batch, last_offset) in batches {
            table.update(batch, Offset(*last_offset), TimestampMs(7));
        }
        table
    }

    #[test]
    fn an_unknown_producer_is_accepted_at_any_sequence() {
        let table = ProducerStateTable::default();
        for first in [0, 1, 42, i32::MAX] {
            assert_eq!(table.check(&batch(1, 0, first, 1)), ProducerCheck::Accept);
        }
    }

    #[test]
    fn the_next_sequence_is_accepted_and_a_gap_or_repeat_refused() {
        let table = table_with(&[(batch(1, 0, 0, 10), 9)]);
        assert_eq!(table.check(&batch(1, 0, 10, 5)), ProducerCheck::Accept);
        for first in [11, 9, 5, 0] {
            let refused = table.check(&batch(1, 0, first, 3));
            assert_eq!(
                refused,
                ProducerCheck::Refuse(ProducerRefusal::OutOfOrderSequence {
                    producer_id: 1,
                    producer_epoch: 0,
                    first_sequence: first,
                    current_epoch: 0,
                    last_sequence: 9,
                }),
                "first sequence {first}"
            );
        }
    }

    #[test]
    fn sequences_wrap_from_i32_max_to_zero() {
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(i32::MAX, 0), i32::MAX);
        assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
        let last_at_max = batch(1, 0, i32::MAX - 2, 3);
        assert_eq!(last_at_max.last_sequence, i32::MAX);
        let table = table_with(&[(last_at_max, 2)]);
        assert_eq!(table.check(&batch(1, 0, 0, 1)), ProducerCheck::Accept);
        let wrapping = batch(1, 0, i32::MAX - 1, 4);
        assert_eq!(wrapping.last_sequence, 1);
        let table = table_with(&[(wrapping, 3)]);
        assert_eq!(table.check(&batch(1, 0, 2, 1)), ProducerCheck::Accept);
        // The snapshot's view of the wrapped batch keeps its first sequence.
        let reloaded = ProducerStateTable::from_snapshot(&table.to_snapshot());
        assert_eq!(reloaded, table);
    }

    #[test]
    fn an_older_epoch_is_refused() {
        let table = table_with(&[(batch(1, 5, 0, 1), 0)]);
        assert_eq!(
            table.check(&batch(1, 4, 1, 1)),
            ProducerCheck::Refuse(ProducerRefusal::InvalidEpoch {
                producer_id: 1,
                producer_epoch: 4,
                current_epoch: 5,
            })
        );
    }

    #[test]
    fn a_newer_epoch_starts_at_sequence_zero() {
        let table = table_with(&[(batch(1, 5, 0, 3), 2)]);
        assert_eq!(table.check(&batch(1, 6, 0, 1)), ProducerCheck::Accept);
        assert!(matches!(
            table.check(&batch(1, 6, 3, 1)),
            ProducerCheck::Refuse(ProducerRefusal::OutOfOrderSequence {
                current_epoch: 5,
                ..
            })
        ));
        // Recorded, the new epoch forgets the old epoch's batches.
        let mut table = table;
        table.update(&batch(1, 6, 0, 1), Offset(10), TimestampMs(0));
        let entry = table.entry(1).unwrap();
        assert_eq!(entry.producer_epoch(), 6);
        assert_eq!(entry.batches().count(), 1);
    }

    #[test]
    fn each_of_the_last_five_batches_is_a_duplicate_and_older_ones_are_not() {
        let batches: Vec<_> = (0..7).map(|i| (batch(1, 0, i * 2, 2), (i * 2 + 1) as u64)).collect();
        let table = table_with(&batches);
        assert_eq!(table.entry(1).unwrap().batches().count(), BATCHES_PER_PRODUCER_MAX);
        for (header, last_offset) in &batches[2..] {
            let ProducerCheck::Duplicate(original) = table.check(header) else {
                panic!("{header:?} is a duplicate");
            };
            assert_eq!(original.last_offset, Offset(*last_offset));
            assert_eq!(original.first_offset(), Offset(last_offset - 1));
            assert_eq!(original.record_count(), 2);
        }
        for (header, _) in &batches[..2] {
            assert!(matches!(
                table.check(header),
                ProducerCheck::Refuse(ProducerRefusal::OutOfOrderSequence { .. })
            ));
        }
    }

    #[test]
    fn a_duplicate_needs_the_same_epoch_and_both_sequences() {
        let table = table_with(&[(batch(1, 0, 0, 4), 3)]);
        // Same first sequence, other length: out of order, not a duplicate.
        assert!(matches!(
            table.check(&batch(1, 0, 0, 2)),
            ProducerCheck::Refuse(ProducerRefusal::OutOfOrderSequence { .. })
        ));
        // Same sequences in a newer epoch: a new batch (first sequence 0).
        assert_eq!(table.check(&batch(1, 1, 0, 4)), ProducerCheck::Accept);
        // Other producers are independent.
        assert_eq!(table.check(&batch(2, 0, 0, 4)), ProducerCheck::Accept);
    }

    #[test]
    fn a_producer_without_a_known_epoch_accepts_any_sequence() {
        let table = ProducerStateTable::from_snapshot(&[ProducerSnapshotEntry {
            producer_id: 1,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_sequence: -1,
            last_offset: -1,
            offset_delta: 0,
            timestamp: -1,
            coordinator_epoch: -1,
            current_txn_first_offset: -1,
        }]);
        assert_eq!(table.check(&batch(1, 0, 17, 1)), ProducerCheck::Accept);
    }

    #[test]
    fn a_known_epoch_without_batches_expects_sequence_zero() {
        let table = ProducerStateTable::from_snapshot(&[ProducerSnapshotEntry {
            producer_id: 1,
            producer_epoch: 3,
            last_sequence: -1,
            last_offset: -1,
            offset_delta: 0,
            timestamp: -1,
            coordinator_epoch: -1,
            current_txn_first_offset: -1,
        }]);
        assert_eq!(table.check(&batch(1, 3, 0, 1)), ProducerCheck::Accept);
        assert!(matches!(
            table.check(&batch(1, 3, 1, 1)),
            ProducerCheck::Refuse(_)
        ));
    }

    #[test]
    fn a_snapshot_keeps_each_producers_epoch_and_last_batch() {
        let table = table_with(&[
            (batch(9, 2, 0, 3), 2),
            (batch(9, 2, 3, 2), 6),
            (batch(4, 0, 100, 1), 7),
        ]);
        let snapshot = table.to_snapshot();
        assert_eq!(snapshot.len(), 2);
        assert_eq!(snapshot[0].producer_id, 4);
        assert_eq!(
            snapshot[1],
            ProducerSnapshotEntry {
                producer_id: 9,
                producer_epoch: 2,
                last_sequence: 4,
                last_offset: 6,
                offset_delta: 1,
                timestamp: 7,
                coordinator_epoch: -1,
                current_txn_first_offset: -1,
            }
        );
        let reloaded = ProducerStateTable::from_snapshot(&snapshot);
        // Only the last batch survives: it is still a duplicate, and the next sequence follows it.
        assert!(matches!(
            reloaded.check(&batch(9, 2, 3, 2)),
            ProducerCheck::Duplicate(ProducerBatch {
                last_offset: Offset(6),
                ..
            })
        ));
        assert_eq!(reloaded.check(&batch(9, 2, 5, 1)), ProducerCheck::Accept);
        assert!(matches!(
            reloaded.check(&batch(9, 2, 0, 3)),
            ProducerCheck::Refuse(_)
        ));
    }

    #[test]
    fn an_overlay_sees_its_own_batches_and_leaves_the_table_alone() {
        let table = table_with(&[(batch(1, 0, 0, 1), 0)]);
        let mut overlay = ProducerOverlay::default();
        let next = batch(1, 0, 1, 1);
        assert_eq!(
            check_against(overlay.entry(&table, 1), &next),
            ProducerCheck::Accept
        );
        overlay.update(&table, &next, Offset(1), TimestampMs(0));
        assert!(matches!(
            check_against(overlay.entry(&table, 1), &next),
            ProducerCheck::Duplicate(_)
        ));
        assert_eq!(
            check_against(overlay.entry(&table, 1), &batch(1, 0, 2, 1)),
            ProducerCheck::Accept
        );
        assert_eq!(table.entry(1).unwrap().batches().count(), 1);
        let mut table = table;
        table.insert(1, overlay.changed(1).unwrap().clone());
        assert_eq!(table.entry(1).unwrap().batches().count(), 2);
    }

    #[test]
    fn only_data_batches_with_a_producer_are_tracked() {
        use crate::format::{BatchBuilder, NewRecord};
        let record = NewRecord {
            timestamp_ms: 0,
            key: Some(b"k"),
            value: Some(b"v"),
            headers: &[],
        };
        let header_of = |builder: BatchBuilder, control: bool| {
            let mut builder = builder;
            builder.push(&record);
            builder.push(&record);
            let bytes = match control {
                true => builder.build_control(),
                false => builder.build(),
            };
            BatchHeader::parse(&bytes.expect("two records")).expect("a header")
        };
        let plain = header_of(BatchBuilder::new(0), false);
        assert_eq!(ProducerBatchHeader::of(&plain), None);
        let control = header_of(BatchBuilder::new(0).with_producer(3, 0, 0), true);
        assert_eq!(ProducerBatchHeader::of(&control), None);
        let data = header_of(BatchBuilder::new(0).with_producer(3, 2, 8), false);
        assert_eq!(
            ProducerBatchHeader::of(&data),
            Some(ProducerBatchHeader {
                producer_id: 3,
                producer_epoch: 2,
                first_sequence: 8,
                last_sequence: 9,
                offset_delta: 1,
            })
        );
    }

    #[test]
    fn an_append_is_checked_batch_by_batch_and_a_repeat_inside_it_is_out_of_order() {
        let table = table_with(&[(batch(1, 0, 0, 2), 1)]);
        let overlay = ProducerOverlay::default();
        let in_order = [batch(1, 0, 2, 2), batch(1, 0, 4, 1), batch(2, 0, 9, 1)];
        assert_eq!(
            overlay.check_append(&table, in_order.into_iter()),
            ProducerCheck::Accept
        );
        let gap = [batch(1, 0, 2, 2), batch(1, 0, 5, 1)];
        assert!(matches!(
            overlay.check_append(&table, gap.into_iter()),
            ProducerCheck::Refuse(ProducerRefusal::OutOfOrderSequence {
                first_sequence: 5,
                last_sequence: 3,
                ..
            })
        ));
        let repeated = [batch(1, 0, 2, 2), batch(1, 0, 2, 2)];
        assert!(matches!(
            overlay.check_append(&table, repeated.into_iter()),
            ProducerCheck::Refuse(ProducerRefusal::OutOfOrderSequence { .. })
        ));
        let retried = [batch(1, 0, 0, 2), batch(1, 0, 2, 1)];
        assert!(matches!(
            overlay.check_append(&table, retried.into_iter()),
            ProducerCheck::Duplicate(ProducerBatch {
                last_offset: Offset(1),
                ..
            })
        ));
    }
}
