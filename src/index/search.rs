//! Binary search for the greatest index entry whose key is at most a target.
//!
//! Like Kafka's `AbstractIndex`, the newest entries (the last 8192 bytes, the "warm section") are
//! searched first: fetches mostly read near the tail, and those pages stay in the page cache, so a
//! lookup there never touches a cold page of a large index.

#![deny(clippy::indexing_slicing)]

/// Bytes at the end of an index that stay warm in the page cache (Kafka's `warmEntries`).
pub const WARM_SECTION_BYTES: usize = 8192;

/// Index of the greatest entry whose key is `<= target`, or `None` if every key is larger (or
/// there are no entries). `key_at(i)` must be non-decreasing in `i` for `i < entry_count`.
pub fn greatest_at_most(
    entry_count: usize,
    entry_bytes: usize,
    target: i64,
    key_at: impl Fn(usize) -> i64,
) -> Option<usize> {
    if entry_count == 0 || key_at(0) > target {
        return None;
    }
    let warm_entries = (WARM_SECTION_BYTES / entry_bytes).max(1);
    let first_warm = entry_count.saturating_sub(warm_entries);
    if key_at(first_warm) <= target {
        return Some(binary_search(first_warm, entry_count - 1, target, &key_at));
    }
    Some(binary_search(0, first_warm, target, &key_at))
}

/// Greatest `i` in `[low, high]` with `key_at(i) <= target`, given `key_at(low) <= target`.
fn binary_search(
    mut low: usize,
    mut high: usize,
    target: i64,
    key_at: &impl Fn(usize) -> i64,
) -> usize {
    while low < high {
        let middle = low + (high - low).div_ceil(2);
        if key_at(middle) <= target {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    low
}

/// Index of the smallest entry whose key is `>= target`, or `None` if every key is smaller.
pub fn least_at_least(
    entry_count: usize,
    target: i64,
    key_at: impl Fn(usize) -> i64,
) -> Option<usize> {
    let (mut low, mut high) = (0usize, entry_count);
    while low < high {
        let middle = low + (high - low) / 2;
        if key_at(middle) < target {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    (low < entry_count).then_some(low)
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::indexing_slicing,
        reason = "test code: an index out of range fails the test"
    )]

    use super::*;
    use proptest::prelude::*;

    fn linear_greatest_at_most(keys: &[i64], target: i64) -> Option<usize> {
        keys.iter().rposition(|key| *key <= target)
    }

    #[test]
    fn seed_example_resolves_to_the_right_entry() {
        // The seed's `00000000000000206233.index`: offset 208050 → entry (208047, 39321).
        let entries = [
            (206782, 5189),
            (206783, 12094),
            (207236, 22092),
            (207800, 34400),
            (208047, 39321),
            (208920, 57194),
            (209129, 61302),
        ];
        let found = greatest_at_most(entries.len(), 8, 208050, |i| entries[i].0).unwrap();
        assert_eq!(entries[found], (208047, 39321));
    }

    proptest! {
        #[test]
        fn lookup_equals_a_linear_scan(
            mut keys in proptest::collection::vec(0i64..100_000, 0..3000),
            target in -10i64..100_010,
            entry_bytes in prop_oneof![Just(8usize), Just(12usize)],
        ) {
            keys.sort_unstable();
            keys.dedup();
            let found = greatest_at_most(keys.len(), entry_bytes, target, |i| keys[i]);
            prop_assert_eq!(found, linear_greatest_at_most(&keys, target));
            let least = least_at_least(keys.len(), target, |i| keys[i]);
            prop_assert_eq!(least, keys.iter().position(|key| *key >= target));
        }
    }
}
