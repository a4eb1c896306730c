//! The scrubber: re-reads sealed segments in the background and checks every batch's framing
//! and CRC and the offsets' continuity (each batch inside its segment's range and after the
//! previous one, right after it in a log that is never compacted), so that corruption is reported before a reader meets it. It reads through the
//! cleaner's storage handle and rate limit, on the cleaner's low-priority thread, and changes
//! nothing: a corrupt segment is reported (log and `CleanerStats`), never truncated.

use crate::cleaner::log_cleaner::{CleanError, CleanableLog, SealedSegment, SegmentReader};
use crate::error::StorageError;
use crate::io::Storage;
use crate::types::Offset;

/// What scrubbing one log found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrubOutcome {
    /// Sealed segments read and checked.
    pub segments_scrubbed: u64,
    /// Bytes of `.log` read.
    pub bytes_scrubbed: u64,
    /// Segments that failed a check (at most one finding per segment: the first).
    pub corrupt: Vec<CorruptSegment>,
}

/// A sealed segment that failed a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptSegment {
    /// The segment's base offset.
    pub base_offset: Offset,
    /// What failed, with the file and position.
    pub reason: String,
}

/// Checks every sealed segment of `log`, counting the bytes read against `throttle`. Segments
/// gone since the snapshot (retention, compaction) are skipped.
pub fn scrub_log(
    storage: &dyn Storage,
    log: &CleanableLog,
    throttle: &mut dyn FnMut(u64),
) -> ScrubOutcome {
    let mut outcome = ScrubOutcome::default();
    for segment in &log.sealed {
        match scrub_segment(storage, log, segment, throttle) {
            Ok(false) => {}
            Ok(true) => {
                outcome.segments_scrubbed += 1;
                outcome.bytes_scrubbed += segment.size_bytes;
            }
            Err(error) => {
                outcome.segments_scrubbed += 1;
                outcome.corrupt.push(CorruptSegment {
                    base_offset: segment.base_offset,
                    reason: error.to_string(),
                });
            }
        }
    }
    outcome
}

/// One segment: `Ok(true)` checked and sound, `Ok(false)` gone, `Err` what failed.
fn scrub_segment(
    storage: &dyn Storage,
    log: &CleanableLog,
    segment: &SealedSegment,
    throttle: &mut dyn FnMut(u64),
) -> Result<bool, StorageError> {
    let Some(reader) = SegmentReader::open(storage, &log.dir, segment)? else {
        return Ok(false);
    };
    let mut expected_next = segment.base_offset.0;
    // A log that is never compacted has no offset gaps; one compacted before its policy
    // became `delete` may have them below its cleaned end.
    let dense =
        !log.config.cleanup_policy.compacts() && segment.base_offset >= log.cleaned_end;
    reader.for_each_batch(throttle, |batch| {
        let base = u64::try_from(batch.base_offset()).unwrap_or(u64::MAX);
        let last = u64::try_from(batch.last_offset()).unwrap_or(u64::MAX);
        let gap = dense && base != expected_next;
        if base < expected_next || gap || last >= segment.next_offset.0 || last < base {
            return Err(CleanError::Storage(StorageError::Corrupt {
                file: log.dir.clone(),
                position: 0,
                reason: format!(
                    "segment {}: batch {base}..={last} breaks offset continuity \
                     (expected {}{expected_next}, below {})",
                    segment.base_offset,
                    if dense { "at " } else { "at or after " },
                    segment.next_offset
                ),
            }));
        }
        expected_next = last + 1;
        Ok(true)
    })?;
    Ok(true)
}
