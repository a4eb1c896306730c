//! What a fetch reads from a segment, planned from the offset index alone: a pure function of the
//! index entries around the wanted offset, the segment's size, the fetch's byte limit and the
//! size of the last batch served. The segment then performs the plan (`Segment::read_from`).
//!
//! - **Indexed read.** When the entry at or below the offset is keyed by the offset itself (its
//!   batch ends there), or the next entry is about one batch further (every batch indexed, as
//!   when batches are larger than `index.interval.bytes`), the batch holding the offset starts at
//!   a known position: one read of `batch_bytes` there. Its header is checked before anything is
//!   served; a header that does not hold the offset falls back to the scan.
//! - **Scan.** Otherwise batch headers are scanned from the entry's position: a first window
//!   through the next entry's batch (the hops of one read), then windows of `batch_bytes`.

use crate::index::offset_index::OffsetPosition;
use crate::limits::BATCH_HEADER_BYTES;
use crate::segment::scan::LOOKUP_WINDOW_BYTES;
use crate::types::Offset;

/// A scan's first window reaches at most this far past the entry, plus one batch (Kafka's 4 KiB
/// `index.interval.bytes` keeps entries a batch or a few kilobytes apart).
const LOOKUP_GAP_BYTES_MAX: u64 = 64 * 1024;

/// What the planner is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FetchRequest {
    /// The first offset wanted.
    pub offset: Offset,
    /// The offset index entry at or below `offset`, and the one after it.
    pub entry: OffsetPosition,
    pub next_entry: Option<OffsetPosition>,
    /// Bytes in the segment's `.log`.
    pub size_bytes: u64,
    /// The fetch's byte limit (one whole batch is served even past it).
    pub max_bytes: u64,
    /// Size of the last batch a fetch of this segment started with (0 before any).
    pub batch_hint_bytes: u64,
}

/// Where to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FetchPlan {
    /// One read at a known batch start, tried first: `(position, length)`.
    pub indexed: Option<(u64, u64)>,
    /// The scan, when there is no indexed read or its header does not hold the offset.
    pub scan: ScanPlan,
    /// Bytes a read should cover to bring the first batch whole: the byte limit, or the last
    /// batch's size when larger.
    pub batch_bytes: u64,
}

/// A header scan from `start`: a first window, then windows of `window_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScanPlan {
    pub start: u64,
    pub first_window_bytes: usize,
    pub window_bytes: usize,
}

/// Plans a fetch of `request.offset` (see the module's rules).
pub(crate) fn plan_fetch(request: &FetchRequest) -> FetchPlan {
    let batch_bytes = request.max_bytes.max(request.batch_hint_bytes);
    FetchPlan {
        indexed: indexed_read(request, batch_bytes),
        scan: scan_plan(request, batch_bytes),
        batch_bytes,
    }
}

fn indexed_read(request: &FetchRequest, batch_bytes: u64) -> Option<(u64, u64)> {
    let entry = request.entry;
    // Batches of about the size of the last one served: the gap holds one batch, not two.
    let hint = request.batch_hint_bytes;
    let one_batch_apart = |next: &OffsetPosition| {
        next.position > entry.position
            && u64::from(next.position - entry.position) <= hint + hint / 2
    };
    let position = match request.next_entry {
        _ if entry.offset == request.offset => u64::from(entry.position),
        Some(next) if one_batch_apart(&next) => u64::from(next.position),
        _ => return None,
    };
    let length = batch_bytes.min(request.size_bytes.saturating_sub(position));
    (length >= BATCH_HEADER_BYTES as u64).then_some((position, length))
}

fn scan_plan(request: &FetchRequest, batch_bytes: u64) -> ScanPlan {
    let start = u64::from(request.entry.position);
    let lookup_window = LOOKUP_WINDOW_BYTES as u64;
    // Through the next entry's batch, which ends at or after the offset: the hops in one read (a
    // sparser index than Kafka's 4 KiB interval is scanned a window at a time).
    let header_window = batch_bytes.max(lookup_window);
    let first_window = request.next_entry.map_or(lookup_window, |next| {
        (u64::from(next.position).saturating_sub(start))
            .min(LOOKUP_GAP_BYTES_MAX)
            .saturating_add(header_window)
    });
    ScanPlan {
        start,
        first_window_bytes: usize::try_from(first_window).unwrap_or(usize::MAX),
        window_bytes: usize::try_from(batch_bytes)
            .map_or(usize::MAX, |bytes| bytes.max(LOOKUP_WINDOW_BYTES)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(offset: u64, position: u32) -> OffsetPosition {
        OffsetPosition {
            offset: Offset(offset),
            position,
        }
    }

    fn request(offset: u64, entry: OffsetPosition, next: Option<OffsetPosition>) -> FetchRequest {
        FetchRequest {
            offset: Offset(offset),
            entry,
            next_entry: next,
            size_bytes: 1 << 20,
            max_bytes: 4096,
            batch_hint_bytes: 0,
        }
    }

    #[test]
    fn an_entry_keyed_by_the_offset_is_read_where_it_points() {
        let plan = plan_fetch(&request(10, entry(10, 8192), Some(entry(20, 12288))));
        assert_eq!(plan.indexed, Some((8192, 4096)));
    }

    #[test]
    fn a_next_entry_one_batch_further_is_read_when_batches_are_each_indexed() {
        let mut wanted = request(15, entry(10, 8192), Some(entry(20, 12288)));
        wanted.batch_hint_bytes = 4096;
        assert_eq!(plan_fetch(&wanted).indexed, Some((12288, 4096)));
        // Two batches apart (the gap is over one and a half batches): scan instead.
        wanted.batch_hint_bytes = 2000;
        assert_eq!(plan_fetch(&wanted).indexed, None);
    }

    #[test]
    fn an_indexed_read_too_short_for_a_header_is_not_planned() {
        let mut wanted = request(10, entry(10, 8192), None);
        wanted.size_bytes = 8192 + BATCH_HEADER_BYTES as u64 - 1;
        assert_eq!(plan_fetch(&wanted).indexed, None);
    }

    #[test]
    fn the_read_covers_the_last_batch_when_it_is_larger_than_the_limit() {
        let mut wanted = request(10, entry(10, 0), None);
        wanted.batch_hint_bytes = 100_000;
        let plan = plan_fetch(&wanted);
        assert_eq!(plan.batch_bytes, 100_000);
        assert_eq!(plan.indexed, Some((0, 100_000)));
        assert_eq!(plan.scan.window_bytes, 100_000);
    }

    #[test]
    fn the_scan_first_window_reaches_through_the_next_entry_within_a_bound() {
        let lookup = LOOKUP_WINDOW_BYTES as u64;
        let near = plan_fetch(&request(15, entry(10, 1000), Some(entry(20, 5000))));
        assert_eq!(near.scan.start, 1000);
        assert_eq!(near.scan.first_window_bytes as u64, 4000 + 4096.max(lookup));
        let far = plan_fetch(&request(15, entry(10, 0), Some(entry(20, 1 << 30))));
        assert_eq!(
            far.scan.first_window_bytes as u64,
            LOOKUP_GAP_BYTES_MAX + 4096.max(lookup)
        );
        let last = plan_fetch(&request(15, entry(10, 0), None));
        assert_eq!(last.scan.first_window_bytes, LOOKUP_WINDOW_BYTES);
    }
}
