//! Offset index lookup latency (ns): the pure search over bytes, and a lookup through a real
//! memory-mapped `.index` file of a full default-sized index (1,310,720 entries = 10 MiB).
//!
//! Expected before measuring: a binary search over 1.3 M entries is ~21 probes; with the map warm
//! in the page cache and CPU caches cold-ish, ~100–300 ns. Targets in the warm section (the last
//! 8 KiB of entries) need ~10 probes over pages that stay resident, so they should be faster.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use seglog::index::OffsetIndex;
use seglog::types::Offset;

const ENTRY_COUNT: u64 = 10 * 1024 * 1024 / 8;
const OFFSETS_PER_ENTRY: u64 = 7;

fn targets(count: usize, low: u64, high: u64) -> Vec<Offset> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            Offset(low + state % (high - low))
        })
        .collect()
}

fn bench_index(c: &mut Criterion) {
    let Ok(dir) = tempfile::tempdir() else { return };
    let path = dir.path().join("00000000000000000000.index");
    let Ok(mut index) = OffsetIndex::create(&path, Offset(0), ENTRY_COUNT * 8) else {
        return;
    };
    for entry in 0..ENTRY_COUNT {
        index.append(Offset(entry * OFFSETS_PER_ENTRY + 1), (entry * 4096) as u32);
    }
    let last_offset = ENTRY_COUNT * OFFSETS_PER_ENTRY;
    let everywhere = targets(4096, 0, last_offset);
    let warm_low = last_offset - (8192 / 8) * OFFSETS_PER_ENTRY;
    let warm = targets(4096, warm_low, last_offset);
    let mut group = c.benchmark_group("offset_index_lookup");
    group.bench_function("random_target_1.3M_entries", |b| {
        let mut next = everywhere.iter().cycle();
        b.iter(|| black_box(index.lookup(*next.next().unwrap_or(&Offset(0)))))
    });
    group.bench_function("warm_section_target", |b| {
        let mut next = warm.iter().cycle();
        b.iter(|| black_box(index.lookup(*next.next().unwrap_or(&Offset(0)))))
    });
    // Baseline in the same run: std's binary search over the same entries held in a `Vec`.
    let in_memory: Vec<(u64, u32)> = (0..ENTRY_COUNT)
        .map(|entry| (entry * OFFSETS_PER_ENTRY + 1, (entry * 4096) as u32))
        .collect();
    group.bench_function("baseline_vec_partition_point", |b| {
        let mut next = everywhere.iter().cycle();
        b.iter(|| {
            let target = next.next().map_or(0, |offset| offset.0);
            let found = in_memory.partition_point(|(offset, _)| *offset <= target);
            black_box(found.checked_sub(1).map(|entry| in_memory[entry]))
        })
    });
    group.finish();
}

criterion_group!(benches, bench_index);
criterion_main!(benches);
