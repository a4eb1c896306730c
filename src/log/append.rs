//! The append path: validate the producer's batches, assign offsets, roll if needed, write, index,
//! and flush per the flush policy (Kafka's `UnifiedLog.append` with `LogValidator`, for a leader).
//!
//! Validation ([`ValidatedBatches::validate`]) is a pure function of the bytes and the config, so
//! the engine runs it on the caller's thread; the owner of the log then only assigns offsets and
//! writes. Several appends to one partition are coalesced into one positioned write
//! ([`PartitionLog::append_validated`]), and the caller decides when to sync (group commit).
//!
//! Before an append is staged its idempotent producers' batches are checked
//! (`producer_state.rs`): a refused append is answered with its error and a duplicate with the
//! offsets its original got, and neither writes anything. The table takes a batch only once the
//! write holding it was issued; a failed write fails the log, which then answers nothing from it.

use bytes::{Bytes, BytesMut};

use super::producer_state::{ProducerBatch, ProducerBatchHeader, ProducerCheck, ProducerOverlay};
use super::producers::SnapshotSync;
use super::{PartitionLog, UnsyncedSeal};
use crate::config::{CleanupPolicy, LogConfig, TimestampType};
use crate::error::{AppendError, StorageError};
use crate::failpoint::failpoint;
use crate::format::batch::{
    BatchIter, set_base_offset, set_log_append_time, set_partition_leader_epoch,
};
use crate::io::WriteMark;
use crate::segment::{ActiveSegment, AppendedBatch, IncomingAppend};
use crate::types::{Offset, TimestampMs};

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// The offset the append's first record got.
    pub first_offset: Offset,
    /// The offset the append's last record got.
    pub last_offset: Offset,
    /// How many records the append held.
    pub record_count: u64,
    /// How many batches the append held.
    pub batch_count: usize,
    /// The largest timestamp appended (the append time for `LogAppendTime`).
    pub max_timestamp: TimestampMs,
    /// `LogAppendTime` stamped on the batches, if the log uses it.
    pub log_append_time: Option<TimestampMs>,
    /// True when the append was synced before returning.
    pub durable: bool,
    /// True when the append repeated batches an idempotent producer had already written: nothing
    /// was written, and the offsets are those the original got (Kafka's `DUPLICATE_SEQUENCE`,
    /// answered as a success).
    pub duplicate: bool,
}

/// One append's answer from [`PartitionLog::append_validated`]: what it got, or why it alone was
/// refused (its producer's epoch or sequence, or a replica's expected offset).
pub type AppendOutcome = Result<AppendInfo, AppendError>;

/// One batch of a validated append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IncomingBatch {
    position: usize,
    record_count: u64,
    max_timestamp: i64,
    /// Its idempotent producer's fields, when it has one.
    producer: Option<ProducerBatchHeader>,
}

/// A producer's batches that passed every check; only offsets remain to be assigned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedBatches {
    bytes: Bytes,
    batches: Vec<IncomingBatch>,
    record_count: u64,
    /// A replica's append (boxed: an engine request carries it, and most appends are not).
    replica: Option<Box<ReplicaAppend>>,
}

/// Where a replica's append must land and the epoch it is stamped with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReplicaAppend {
    /// The offset the first record must get: the append is refused unless the log ends there.
    first_offset: Offset,
    /// Stamped into each batch's `partitionLeaderEpoch` as it is written.
    leader_epoch: i32,
}

impl ValidatedBatches {
    /// Checks every batch: framing, CRC, magic 2, `max.message.bytes`, at least one record, record
    /// count and dense offset deltas. Runs anywhere: it touches no log state.
    pub fn validate(bytes: Bytes, config: &LogConfig) -> Result<ValidatedBatches, AppendError> {
        let max_bytes = config.max_message_bytes;
        if bytes.len() as u64 > config.segment_bytes {
            return Err(AppendError::AppendTooLarge {
                size_bytes: bytes.len() as u64,
                segment_bytes: config.segment_bytes,
            });
        }
        let mut batches = Vec::new();
        let mut iter = BatchIter::new(bytes.clone(), u64::MAX);
        loop {
            let position = iter.position();
            let Some(batch) = iter.next() else { break };
            let invalid = |source| AppendError::InvalidBatch { position, source };
            let batch = batch.map_err(invalid)?;
            if batch.size_bytes() > max_bytes {
                return Err(AppendError::BatchTooLarge {
                    size_bytes: batch.size_bytes(),
                    max_bytes,
                });
            }
            let mut null_key = false;
            batch
                .validate_records(|record| null_key |= record.key.is_none())
                .map_err(invalid)?;
            if config.cleanup_policy != CleanupPolicy::Delete && null_key {
                return Err(AppendError::NullKeyInCompactedTopic { position });
            }
            batches.push(IncomingBatch {
                position,
                record_count: u64::from(batch.header().records_count as u32),
                max_timestamp: batch.header().max_timestamp,
                producer: ProducerBatchHeader::of(batch.header()),
            });
        }
        if batches.is_empty() {
            return Err(AppendError::Empty);
        }
        let record_count = batches.iter().map(|batch| batch.record_count).sum();
        Ok(ValidatedBatches {
            bytes,
            batches,
            record_count,
            replica: None,
        })
    }

    /// Makes this a replica's append: refused unless its first record gets `first_offset` (the
    /// log ends there when it is written), each batch stamped with `leader_epoch` in its
    /// `partitionLeaderEpoch`, as Kafka's leader stamps its epoch.
    pub fn into_replica_append(mut self, first_offset: Offset, leader_epoch: i32) -> ValidatedBatches {
        self.replica = Some(Box::new(ReplicaAppend {
            first_offset,
            leader_epoch,
        }));
        self
    }

    /// The offset the first record must get, if the append names one.
    pub fn expected_first_offset(&self) -> Option<Offset> {
        self.replica.as_ref().map(|replica| replica.first_offset)
    }

    pub fn size_bytes(&self) -> usize {
        self.bytes.len()
    }

    pub fn record_count(&self) -> u64 {
        self.record_count
    }

    /// How many batches it holds.
    pub fn batch_count(&self) -> usize {
        self.batches.len()
    }

    /// The idempotent producers' batches, in order.
    fn producer_batches(&self) -> impl Iterator<Item = ProducerBatchHeader> + '_ {
        self.batches.iter().filter_map(|batch| batch.producer)
    }

    /// The largest `maxTimestamp` of the batches.
    pub fn max_timestamp(&self) -> TimestampMs {
        TimestampMs(
            self.batches
                .iter()
                .map(|batch| batch.max_timestamp)
                .max()
                .unwrap_or(-1),
        )
    }
}

/// Appends gathered for the next write of the active segment.
#[derive(Debug, Default)]
struct PendingWrite {
    bytes: BytesMut,
    batches: Vec<AppendedBatch>,
    first_batch_timestamp: Option<TimestampMs>,
    /// The producers whose batches the write holds: the table takes their overlay entries once
    /// it is issued.
    producer_ids: Vec<i64>,
}

impl PartitionLog {
    /// Appends one or more whole batches (as a producer sends them) and flushes per the flush
    /// policy. Offsets in the batches are ignored: the log assigns them from the log end offset,
    /// as Kafka's leader does.
    pub fn append(&mut self, batches: Bytes, now: TimestampMs) -> Result<AppendInfo, AppendError> {
        let validated = ValidatedBatches::validate(batches, &self.config)?;
        let mut outcomes = self.append_validated(std::slice::from_ref(&validated), now)?;
        let mut info = outcomes.pop().ok_or(AppendError::Empty)??;
        if self.flush_due(now) {
            self.flush()?;
            info.durable = true;
        }
        Ok(info)
    }

    /// Appends several validated appends in order, coalesced into as few positioned writes as the
    /// segment boundaries allow (one, unless a roll falls in between), and waits for the writes.
    /// Each append has its own outcome: one refused or found a duplicate writes nothing and the
    /// others go on; an `Err` of the whole is a storage failure (the log failed).
    /// Does not sync: the caller calls [`PartitionLog::flush`] (or syncs
    /// [`PartitionLog::active_log_file`] with others and then [`PartitionLog::mark_flushed`])
    /// when durability is due.
    pub fn append_validated(
        &mut self,
        appends: &[ValidatedBatches],
        now: TimestampMs,
    ) -> Result<Vec<AppendOutcome>, AppendError> {
        let outcomes = self.append_validated_behind(appends, now)?;
        self.finish_writes_behind()?;
        Ok(outcomes)
    }

    /// [`PartitionLog::append_validated`], leaving `O_DIRECT` writes on io_uring in flight
    /// (writes behind, `segment/direct.rs`), so that a caller appending to several partitions has
    /// all their writes in flight at once. Nothing it returns may be acknowledged before
    /// [`PartitionLog::finish_writes_behind`] said `Ok`.
    pub fn append_validated_behind(
        &mut self,
        appends: &[ValidatedBatches],
        now: TimestampMs,
    ) -> Result<Vec<AppendOutcome>, AppendError> {
        self.check_not_failed()?;
        self.expire_producers(now);
        let total_records: u64 = appends.iter().map(ValidatedBatches::record_count).sum();
        let first_offset = self.log_end_offset();
        first_offset
            .checked_add(total_records)
            .filter(|end| end.0 <= i64::MAX as u64)
            .ok_or(AppendError::OffsetOverflow {
                next_offset: first_offset,
                record_count: total_records,
            })?;
        let log_append_time =
            (self.config.message_timestamp_type == TimestampType::LogAppendTime).then_some(now);
        let mut outcomes = Vec::with_capacity(appends.len());
        let mut pending = PendingWrite::default();
        let mut overlay = ProducerOverlay::default();
        let mut next_offset = first_offset;
        let mut written_records = 0;
        for append in appends {
            if let Some(refused) = self.refusal(append, next_offset, &overlay) {
                outcomes.push(refused);
                continue;
            }
            let incoming = IncomingAppend {
                size_bytes: append.size_bytes() as u64,
                last_offset: Offset(next_offset.0 + append.record_count - 1),
                max_timestamp: log_append_time.unwrap_or(append.max_timestamp()),
                now,
            };
            // A batch adds at most one index entry. When the batches gathered so far could fill an
            // index, write them first, so that the roll check sees the index as it would after
            // appending one at a time (a full index rolls the segment; entries are never dropped).
            if pending.batches.len() >= self.active().index_entries_free() {
                self.write_pending(&mut pending, &overlay)?;
            }
            let pending_bytes = pending.bytes.len() as u64;
            if self
                .active()
                .should_roll(&self.config, pending_bytes, &incoming)
            {
                self.write_pending(&mut pending, &overlay)?;
                self.roll(now)?;
            }
            let staged = Staged {
                first_offset: next_offset,
                log_append_time,
            };
            let info = stage_append(&mut pending, append, staged, &self.producers, &mut overlay);
            next_offset = info.last_offset.next();
            written_records += append.record_count;
            self.bytes_since_sync += append.size_bytes() as u64;
            self.bytes_since_background_sync += append.size_bytes() as u64;
            outcomes.push(Ok(info));
        }
        self.write_pending(&mut pending, &overlay)?;
        if written_records > 0 {
            self.unflushed_records += written_records;
            self.first_unflushed_at.get_or_insert(now);
        }
        Ok(outcomes)
    }

    /// The answer for an append that must not be written: a replica's that would not land at the
    /// offset it expects, one its producer's state refuses, or a duplicate (answered with the
    /// offsets of the batch it repeats). `None` when it is to be written.
    fn refusal(
        &self,
        append: &ValidatedBatches,
        next_offset: Offset,
        overlay: &ProducerOverlay,
    ) -> Option<AppendOutcome> {
        if let Some(expected) = append.expected_first_offset() {
            // A replica's batches were checked by its leader; they are recorded unchecked.
            return (expected != next_offset).then_some(Err(AppendError::LogEndMismatch {
                expected,
                log_end_offset: next_offset,
            }));
        }
        match overlay.check_append(&self.producers, append.producer_batches()) {
            ProducerCheck::Accept => None,
            ProducerCheck::Refuse(refusal) => Some(Err(refusal.into())),
            ProducerCheck::Duplicate(original) => Some(Ok(self.duplicate_info(&original))),
        }
    }

    /// What a duplicate append is answered with: the offsets and timestamp its original got.
    fn duplicate_info(&self, original: &ProducerBatch) -> AppendInfo {
        let log_append_time = self.config.message_timestamp_type == TimestampType::LogAppendTime;
        AppendInfo {
            first_offset: original.first_offset(),
            last_offset: original.last_offset,
            record_count: original.record_count(),
            batch_count: 1,
            max_timestamp: original.max_timestamp,
            log_append_time: log_append_time.then_some(original.max_timestamp),
            durable: original.last_offset < self.recovery_point,
            duplicate: true,
        }
    }

    /// Completes the thread's writes behind and checks the active segment's: a failure fails the
    /// log (its appends since the last check may not have landed).
    pub fn finish_writes_behind(&mut self) -> Result<(), StorageError> {
        let result = self.active().take_write_error();
        self.fail_on(result)
    }

    /// A mark after the active segment's writes behind so far, for
    /// [`PartitionLog::check_written`]; `None` when the writes are done when they return. A roll
    /// completes the sealed segment's writes, so the active segment's mark covers the log's.
    pub fn write_mark(&self) -> Option<WriteMark> {
        self.active().write_mark()
    }

    /// Checks the writes behind before `mark` (done: [`WriteMark::is_done`]) without waiting for
    /// the thread's others: a failure among them, or an earlier one, fails the log, and nothing
    /// written since the last check may be acknowledged.
    pub fn check_written(&mut self, mark: Option<&WriteMark>) -> Result<(), StorageError> {
        self.check_not_failed()?;
        let result = match mark {
            Some(mark) => mark
                .take_error()
                .map_err(|source| StorageError::io("write", self.active().log_path(), source)),
            None => Ok(()),
        };
        self.fail_on(result)
    }

    /// Writes what `pending` gathered with one positioned write to the active segment; once it
    /// is issued, the producer table takes the producers' entries from `overlay`.
    fn write_pending(
        &mut self,
        pending: &mut PendingWrite,
        overlay: &ProducerOverlay,
    ) -> Result<(), StorageError> {
        let Some(first_batch_timestamp) = pending.first_batch_timestamp else {
            return Ok(());
        };
        failpoint!("append.before_write");
        let interval = self.config.index_interval_bytes;
        let result = self.active_mut().append(
            &pending.bytes,
            &pending.batches,
            first_batch_timestamp,
            interval,
        );
        let producer_ids = std::mem::take(&mut pending.producer_ids);
        *pending = PendingWrite::default();
        self.fail_on(result)?;
        for producer_id in producer_ids {
            if let Some(entry) = overlay.changed(producer_id) {
                self.producers.insert(producer_id, entry.clone());
            }
        }
        failpoint!("append.after_write");
        Ok(())
    }

    /// Seals the active segment and starts a new, empty one at the log end offset. The sync of
    /// the old segment and of the directory is left to the owner (`seal_sync.rs`); the recovery
    /// point moves past the old segment once that sync is reported.
    pub fn roll(&mut self, now: TimestampMs) -> Result<(), StorageError> {
        self.check_not_failed()?;
        let new_base_offset = self.log_end_offset();
        if self.active().is_empty() {
            return Ok(());
        }
        let sealed = self.active_mut().finish_appends();
        self.fail_on(sealed)?;
        failpoint!("roll.after_seal");
        let seal = UnsyncedSeal::of(self.active(), self.dir.clone());
        self.pending_seal_ends.push_back(seal.through);
        self.unsynced_seals.push(seal);
        let segment = ActiveSegment::create(
            self.storage.as_ref(),
            &self.dir,
            new_base_offset,
            &self.config,
            self.mode.direct_writes,
            now,
        );
        let segment = self.fail_on(segment)?;
        self.segments.push_active(segment);
        let prewrite_bytes = self.prewrite_bytes;
        self.active_mut().set_prewrite_bytes(prewrite_bytes);
        // The state as of the new segment's base, from which a later open replays. Its syncs
        // are the seal's, off the append path, as Kafka flushes it with the rolled segment.
        let snapshot_path = self.write_producer_snapshot(SnapshotSync::WithSeal)?;
        if let Some(seal) = self.unsynced_seals.last_mut() {
            seal.snapshot_path = Some(snapshot_path);
        }
        failpoint!("roll.after_create");
        Ok(())
    }
}

/// Where a staged append's offsets start, and the append time it is stamped with.
struct Staged {
    first_offset: Offset,
    log_append_time: Option<TimestampMs>,
}

/// Copies `append` into `pending`, stamping base offsets from `first_offset` (and
/// `LogAppendTime`), and returns what the append got. Each batch is recorded separately, so the
/// segment indexes batch by batch exactly as recovery rebuilds the index; its producers' batches
/// go to `overlay`, on top of `table`.
fn stage_append(
    pending: &mut PendingWrite,
    append: &ValidatedBatches,
    staged: Staged,
    table: &super::producer_state::ProducerStateTable,
    overlay: &mut ProducerOverlay,
) -> AppendInfo {
    let Staged {
        first_offset,
        log_append_time,
    } = staged;
    let start = pending.bytes.len();
    pending.bytes.extend_from_slice(&append.bytes);
    let mut next_offset = first_offset.0;
    let mut max_timestamp = i64::MIN;
    for (batch_index, batch) in append.batches.iter().enumerate() {
        let end = append
            .batches
            .get(batch_index + 1)
            .map_or(append.bytes.len(), |next| next.position);
        let batch_bytes = &mut pending.bytes[start + batch.position..start + end];
        set_base_offset(batch_bytes, next_offset as i64);
        if let Some(replica) = &append.replica {
            set_partition_leader_epoch(batch_bytes, replica.leader_epoch);
        }
        let timestamp = match log_append_time {
            Some(now) => {
                set_log_append_time(batch_bytes, now.0);
                now.0
            }
            None => batch.max_timestamp,
        };
        next_offset += batch.record_count;
        max_timestamp = max_timestamp.max(timestamp);
        pending
            .first_batch_timestamp
            .get_or_insert(TimestampMs(timestamp));
        pending.batches.push(AppendedBatch {
            position_in_write: (start + batch.position) as u64,
            size_bytes: (end - batch.position) as u64,
            last_offset: Offset(next_offset - 1),
            max_timestamp: TimestampMs(timestamp),
        });
        if let Some(producer) = &batch.producer {
            overlay.update(table, producer, Offset(next_offset - 1), TimestampMs(timestamp));
            pending.producer_ids.push(producer.producer_id);
        }
    }
    AppendInfo {
        first_offset,
        last_offset: Offset(next_offset - 1),
        record_count: append.record_count,
        batch_count: append.batches.len(),
        max_timestamp: TimestampMs(max_timestamp),
        log_append_time,
        durable: false,
        duplicate: false,
    }
}
