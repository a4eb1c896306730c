//! Retention planning (Kafka's `UnifiedLog.deleteOldSegments`): which prefix of a log's segments
//! to delete, by log start offset, size and time. A pure function of the segments' facts, the
//! configuration and the clock, so every rule is tested with an injected time.
//!
//! Rules, applied to the segments in base-offset order (each rule deletes a prefix; the plan is
//! the longest prefix any rule asks for):
//! 1. **Log start offset** (always, whatever `cleanup.policy`): a segment whose *next* segment's
//!    base offset is at or below the log start offset holds only deleted records.
//! 2. **Size** (policy includes `delete`, `retention.bytes >= 0`): delete the oldest segments while
//!    the log without them stays at or above `retention.bytes`.
//! 3. **Time** (policy includes `delete`, `retention.ms >= 0`): delete the oldest segments whose
//!    retention timestamp is more than `retention.ms` old.
//!
//! A segment's *retention timestamp* is its largest record timestamp, capped by the `.log` file's
//! last-modified time (and the file's time alone when no record has a timestamp). The cap keeps a
//! record stamped far in the future from pinning its segment forever: data cannot be newer than
//! the last write of its file.
//!
//! The active segment is deleted only when every segment is due and it is not empty: the log
//! then rolls a new, empty active segment first (Kafka's rule). An empty active segment is never
//! part of a plan.

/// What retention needs to know about one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentFacts {
    pub base_offset: u64,
    pub size_bytes: u64,
    /// Largest record timestamp, if any batch had one (`>= 0`).
    pub largest_timestamp_ms: Option<i64>,
    /// Last-modified time of the `.log`.
    pub modified_ms: i64,
}

impl SegmentFacts {
    /// The timestamp retention compares against (see the module documentation).
    pub fn retention_timestamp_ms(&self) -> i64 {
        match self.largest_timestamp_ms {
            Some(largest) if largest >= 0 => largest.min(self.modified_ms),
            _ => self.modified_ms,
        }
    }
}

/// The configuration retention reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionConfig {
    /// `cleanup.policy` includes `delete`.
    pub delete_enabled: bool,
    /// `retention.ms`; negative means no limit.
    pub retention_ms: i64,
    /// `retention.bytes`; negative means no limit.
    pub retention_bytes: i64,
}

/// Why a segment is deleted (the first rule that selected it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionReason {
    LogStartOffset,
    Size,
    Time,
}

/// The segments to delete: a prefix of the log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RetentionPlan {
    /// How many leading segments to delete (may include the active one, see `roll_first`).
    pub delete_count: usize,
    /// The plan deletes the active segment: roll a new, empty one first.
    pub roll_first: bool,
    /// The rule that selected each deleted segment, in order.
    pub reasons: Vec<RetentionReason>,
}

/// Plans retention for `segments` (base-offset order, the last one active).
pub fn plan_retention(
    segments: &[SegmentFacts],
    log_start_offset: u64,
    config: &RetentionConfig,
    now_ms: i64,
) -> RetentionPlan {
    let by_log_start = count_below_log_start(segments, log_start_offset);
    let (by_size, by_time) = if config.delete_enabled {
        (
            count_by_size(segments, config.retention_bytes),
            count_by_time(segments, config.retention_ms, now_ms),
        )
    } else {
        (0, 0)
    };
    let mut delete_count = by_log_start.max(by_size).max(by_time);
    let active_is_empty = segments.last().is_none_or(|active| active.size_bytes == 0);
    if delete_count == segments.len() && active_is_empty {
        delete_count -= 1;
    }
    let reasons = (0..delete_count)
        .map(|index| {
            if index < by_log_start {
                RetentionReason::LogStartOffset
            } else if index < by_size {
                RetentionReason::Size
            } else {
                RetentionReason::Time
            }
        })
        .collect();
    RetentionPlan {
        delete_count,
        roll_first: delete_count == segments.len() && delete_count > 0,
        reasons,
    }
}

fn count_below_log_start(segments: &[SegmentFacts], log_start_offset: u64) -> usize {
    segments
        .windows(2)
        .take_while(|pair| pair[1].base_offset <= log_start_offset)
        .count()
}

fn count_by_size(segments: &[SegmentFacts], retention_bytes: i64) -> usize {
    let Ok(retention_bytes) = u64::try_from(retention_bytes) else {
        return 0;
    };
    let mut remaining: u64 = segments.iter().map(|segment| segment.size_bytes).sum();
    let mut count = 0;
    for segment in segments {
        if remaining.saturating_sub(segment.size_bytes) < retention_bytes
            || remaining < segment.size_bytes
        {
            break;
        }
        remaining -= segment.size_bytes;
        count += 1;
    }
    count
}

fn count_by_time(segments: &[SegmentFacts], retention_ms: i64, now_ms: i64) -> usize {
    if retention_ms < 0 {
        return 0;
    }
    segments
        .iter()
        .take_while(|segment| {
            now_ms.saturating_sub(segment.retention_timestamp_ms()) > retention_ms
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: i64 = 1_700_000_000_000;
    const HOUR: i64 = 3_600_000;

    fn segment(base_offset: u64, size_bytes: u64, age_ms: i64) -> SegmentFacts {
        SegmentFacts {
            base_offset,
            size_bytes,
            largest_timestamp_ms: Some(NOW - age_ms),
            modified_ms: NOW - age_ms,
        }
    }

    fn delete_only(retention_ms: i64, retention_bytes: i64) -> RetentionConfig {
        RetentionConfig {
            delete_enabled: true,
            retention_ms,
            retention_bytes,
        }
    }

    #[test]
    fn time_deletes_the_prefix_older_than_retention_ms() {
        let segments = [
            segment(0, 100, 5 * HOUR),
            segment(10, 100, 3 * HOUR),
            segment(20, 100, HOUR),
        ];
        let plan = plan_retention(&segments, 0, &delete_only(2 * HOUR, -1), NOW);
        assert_eq!(plan.delete_count, 2);
        assert_eq!(plan.reasons, vec![RetentionReason::Time; 2]);
        assert!(!plan.roll_first);
        assert_eq!(
            plan_retention(&segments, 0, &delete_only(-1, -1), NOW).delete_count,
            0
        );
    }

    #[test]
    fn time_stops_at_the_first_young_segment_even_if_later_ones_are_old() {
        let segments = [
            segment(0, 100, HOUR),
            segment(10, 100, 9 * HOUR),
            segment(20, 100, 0),
        ];
        assert_eq!(
            plan_retention(&segments, 0, &delete_only(2 * HOUR, -1), NOW).delete_count,
            0
        );
    }

    #[test]
    fn size_keeps_the_log_at_or_above_retention_bytes() {
        let segments = [
            segment(0, 100, 0),
            segment(10, 100, 0),
            segment(20, 100, 0),
            segment(30, 50, 0),
        ];
        // 350 bytes, limit 200: deleting 100 leaves 250 ≥ 200, another 100 leaves 150 < 200.
        let plan = plan_retention(&segments, 0, &delete_only(-1, 200), NOW);
        assert_eq!(plan.delete_count, 1);
        assert_eq!(plan.reasons, vec![RetentionReason::Size]);
        assert_eq!(
            plan_retention(&segments, 0, &delete_only(-1, 150), NOW).delete_count,
            2
        );
        assert_eq!(
            plan_retention(&segments, 0, &delete_only(-1, 1000), NOW).delete_count,
            0
        );
    }

    #[test]
    fn log_start_offset_deletes_segments_whose_successor_starts_at_or_below_it() {
        let segments = [segment(0, 100, 0), segment(10, 100, 0), segment(20, 100, 0)];
        let compact_only = RetentionConfig {
            delete_enabled: false,
            retention_ms: 0,
            retention_bytes: 0,
        };
        let plan = plan_retention(&segments, 15, &compact_only, NOW);
        assert_eq!(
            plan.delete_count, 1,
            "applies even without the delete policy"
        );
        assert_eq!(plan.reasons, vec![RetentionReason::LogStartOffset]);
        assert_eq!(
            plan_retention(&segments, 20, &compact_only, NOW).delete_count,
            2
        );
        assert_eq!(
            plan_retention(&segments, 9, &compact_only, NOW).delete_count,
            0
        );
    }

    #[test]
    fn the_active_segment_goes_only_by_rolling_first_and_never_when_empty() {
        let all_old = [segment(0, 100, 9 * HOUR), segment(10, 100, 9 * HOUR)];
        let plan = plan_retention(&all_old, 0, &delete_only(HOUR, -1), NOW);
        assert_eq!(plan.delete_count, 2);
        assert!(plan.roll_first);
        let empty_active = [
            segment(0, 100, 9 * HOUR),
            SegmentFacts {
                size_bytes: 0,
                ..segment(10, 0, 9 * HOUR)
            },
        ];
        let plan = plan_retention(&empty_active, 0, &delete_only(HOUR, -1), NOW);
        assert_eq!(plan.delete_count, 1);
        assert!(!plan.roll_first);
    }

    #[test]
    fn a_timestamp_far_in_the_future_is_capped_by_the_file_time() {
        let pinned = SegmentFacts {
            base_offset: 0,
            size_bytes: 100,
            largest_timestamp_ms: Some(NOW + 100 * 365 * 24 * HOUR),
            modified_ms: NOW - 5 * HOUR,
        };
        let segments = [pinned, segment(10, 100, 0)];
        assert_eq!(
            plan_retention(&segments, 0, &delete_only(HOUR, -1), NOW).delete_count,
            1
        );
        let no_timestamps = SegmentFacts {
            largest_timestamp_ms: None,
            ..pinned
        };
        assert_eq!(no_timestamps.retention_timestamp_ms(), NOW - 5 * HOUR);
    }

    fn facts() -> impl Strategy<Value = Vec<SegmentFacts>> {
        proptest::collection::vec((1u64..500, 0i64..10 * HOUR), 1..12).prop_map(|segments| {
            segments
                .iter()
                .enumerate()
                .map(|(index, (size, age))| segment(index as u64 * 10, *size, *age))
                .collect()
        })
    }

    proptest! {
        #[test]
        fn a_plan_is_a_prefix_that_never_takes_an_empty_active_segment(
            segments in facts(),
            log_start in 0u64..200,
            retention_ms in -1i64..10 * HOUR,
            retention_bytes in -1i64..3000,
        ) {
            let config = delete_only(retention_ms, retention_bytes);
            let plan = plan_retention(&segments, log_start, &config, NOW);
            prop_assert!(plan.delete_count <= segments.len());
            prop_assert_eq!(plan.reasons.len(), plan.delete_count);
            prop_assert_eq!(plan.roll_first, plan.delete_count == segments.len() && plan.delete_count > 0);
            if retention_bytes >= 0 && plan.reasons.iter().all(|reason| *reason == RetentionReason::Size) {
                let kept: u64 = segments[plan.delete_count..].iter().map(|segment| segment.size_bytes).sum();
                prop_assert!(plan.delete_count == 0 || kept >= retention_bytes as u64);
            }
        }
    }
}
