//! Decompression of an arbitrary records section with every codec, under an output limit.
//!
//! Input: byte 0 picks the codec, byte 1 the limit, the rest is the compressed section.
//! Invariants: no panic; the output never exceeds the limit; the Rust heap never grows by more
//! than the output the limit allows plus the codec's bounded working state, and never by more
//! than the codec's largest possible expansion of the input (so a few bytes cannot make the
//! decoder reserve megabytes); and every input compressed by `compress` decompresses back to
//! itself.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;
use seglog::format::compression::{compress, decompress};
use seglog::format::{Compression, DecompressError};
use seglog::limits::DECOMPRESSED_BATCH_BYTES_MAX;

/// Counts live heap bytes and their peak since the last reset.
struct CountingAllocator;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only counters are updated.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            record_growth(layout.size());
        }
        pointer
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            record_growth(layout.size());
        }
        pointer
    }
    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(pointer, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's pointer, layout and size.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
            record_growth(new_size);
        }
        moved
    }
}

fn record_growth(bytes: usize) {
    let live = LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

const LIMITS: [usize; 6] = [0, 1, 61, 4096, 1 << 20, DECOMPRESSED_BATCH_BYTES_MAX];

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Heap a decoder may use besides its output: gzip's window and inflate state, lz4's two block
/// buffers of at most 4 MiB, the first 32 KiB read step, and allocator rounding.
fn working_state_bytes(codec: Compression) -> usize {
    match codec {
        Compression::Lz4 => 8 * MIB + 256 * KIB,
        _ => 256 * KIB,
    }
}

/// The largest output a codec's format can produce per input byte, where the format has one:
/// a snappy copy element of 3 bytes yields at most 64, deflate at most 1032 per byte, an lz4
/// sequence at most about 255. zstd's RLE blocks have no useful bound.
fn expansion_max(codec: Compression) -> Option<usize> {
    match codec {
        Compression::None => Some(1),
        Compression::Snappy => Some(22),
        Compression::Gzip => Some(1032),
        Compression::Lz4 => Some(256),
        Compression::Zstd => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let [codec_byte, limit_byte, input @ ..] = data else {
        return;
    };
    let codec = CODECS[usize::from(*codec_byte) % CODECS.len()];
    let limit = LIMITS[usize::from(*limit_byte) % LIMITS.len()];
    check_bounded(codec, input, limit);
    check_round_trip(codec, input);
});

fn check_bounded(codec: Compression, input: &[u8], limit: usize) {
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    PEAK_BYTES.store(before, Ordering::Relaxed);
    let result = decompress(codec, input, limit);
    let grown = PEAK_BYTES.load(Ordering::Relaxed).saturating_sub(before);
    if let Ok(output) = &result {
        assert!(output.len() <= limit, "{codec}: {} > {limit}", output.len());
    }
    if let Err(DecompressError::UnknownCodec(_) | DecompressError::UnknownCodecName(_)) = result {
        panic!("{codec}: a known codec reported as unknown");
    }
    // The output buffer doubles as it fills, so it may hold twice what was produced.
    let state = working_state_bytes(codec);
    let by_limit = limit.saturating_add(1).saturating_mul(2) + state;
    assert!(
        grown <= by_limit,
        "{codec}: heap grew {grown} bytes, limit {limit}"
    );
    if let Some(expansion) = expansion_max(codec) {
        let by_input = input.len().saturating_mul(expansion).saturating_mul(2) + state;
        assert!(
            grown <= by_input,
            "{codec}: heap grew {grown} bytes for {} input bytes",
            input.len()
        );
    }
}

fn check_round_trip(codec: Compression, input: &[u8]) {
    let compressed = match compress(codec, input) {
        Ok(compressed) => compressed,
        Err(error) => panic!("{codec}: compress failed: {error}"),
    };
    match decompress(codec, &compressed, input.len()) {
        Ok(output) => assert_eq!(output[..], input[..], "{codec}: round trip differs"),
        Err(error) => panic!("{codec}: own output does not decompress: {error}"),
    }
}
