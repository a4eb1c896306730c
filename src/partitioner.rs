//! Choosing the partition a produced record is appended to.
//!
//! A Kafka topic is split into partitions, and a producer decides which one
//! each record goes to. For a record that carries a key, the Java client's
//! default partitioner hashes the serialized key bytes with its own variant of
//! 32-bit MurmurHash2 (fixed seed `0x9747b28c`), clears the sign bit of the
//! result and reduces it modulo the partition count. Every Kafka client that
//! claims to be "Java compatible" reproduces that exact computation, so that
//! records with the same key end up in the same partition whichever client
//! wrote them. This module is a bit-for-bit Rust rendition of it:
//!
//! * [`murmur2`] — the hash, returned as the signed 32-bit value Java
//!   produces (`Utils.murmur2`);
//! * [`to_positive`] — the sign-bit mask Kafka uses instead of `abs`
//!   (`Utils.toPositive`), which maps `i32::MIN` to `0` rather than
//!   overflowing;
//! * [`partition_for_key`] — the two composed with the modulo
//!   (`BuiltInPartitioner.partitionForKey`).
//!
//! Records without a key are not hashed. The Java client spreads those with a
//! "sticky" strategy that depends on batching; this crate's CLI uses the
//! simpler [`RoundRobin`] chooser instead, which just walks the partitions in
//! order.
//!
//! Note that an *empty* key is still a key: Kafka hashes the zero-length byte
//! array like any other, and so does [`partition_for_key`]. Only an absent key
//! should be routed through [`RoundRobin`].

/// Seed Kafka mixes with the input length to initialise the hash.
const SEED: u32 = 0x9747_b28c;
/// MurmurHash2's multiplicative mixing constant.
const M: u32 = 0x5bd1_e995;
/// MurmurHash2's shift used when mixing each 4-byte block.
const R: u32 = 24;

/// Kafka's murmur2 (Utils.murmur2) over the serialized key bytes, as Java's signed int.
///
/// All arithmetic is done on `u32` with wrapping multiplication and logical
/// shifts, which is exactly what Java's `int` multiply and `>>>` do to the
/// bit pattern. The final value is reinterpreted (not converted) as `i32`.
///
/// Java hashes `byte[]` whose length is an `int`; for inputs of 4 GiB or more
/// (which Kafka can never produce) the length used in the seed is taken
/// modulo 2^32.
pub fn murmur2(data: &[u8]) -> i32 {
    // Truncation is intended: Java mixes in `data.length` as a 32-bit int.
    let mut h = SEED ^ (data.len() as u32);

    // Body: whole 4-byte blocks, each read as a little-endian word.
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }

    // Tail: the last 1-3 bytes. Java's fall-through switch XORs byte 2 in at
    // bits 16..24, byte 1 at bits 8..16 and byte 0 at bits 0..8, then
    // multiplies once. XOR is order-independent, so placing byte `i` at bit
    // `8 * i` in a loop is the same thing. Bytes are treated as unsigned
    // (Java's `& 0xff`), which `u32::from(u8)` gives us directly.
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, &byte) in tail.iter().enumerate() {
            h ^= u32::from(byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }

    // Final avalanche.
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;

    // Same 32 bits, viewed as Java's signed int.
    h as i32
}

/// Kafka's Utils.toPositive.
///
/// Clears the sign bit, so the result is always in `0..=i32::MAX`. This is
/// not `abs`: negative inputs map to `value + 2^31`, and `i32::MIN` maps to 0.
pub fn to_positive(value: i32) -> u32 {
    (value as u32) & 0x7fff_ffff
}

/// The partition Kafka's default partitioner picks for a record with this key.
/// Returns None when partition_count == 0.
///
/// Computes `to_positive(murmur2(key)) % partition_count`. For every partition
/// count Kafka can express (at most `i32::MAX`) this is the same number the
/// Java client returns.
pub fn partition_for_key(key: &[u8], partition_count: u32) -> Option<u32> {
    to_positive(murmur2(key)).checked_rem(partition_count)
}

/// Round-robin chooser for records without a key (used by the CLI): returns 0,1,..,n-1,0,...
///
/// The chooser remembers only the partition it will hand out next. If the
/// partition count grows between calls, it carries on from where it was and
/// reaches the new partitions before wrapping. If the count shrinks below the
/// remembered position, that position is folded back into range with a
/// modulo, so the result is always a valid partition.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: u32,
}

impl RoundRobin {
    /// The next partition in `0..partition_count`, cycling in order.
    ///
    /// Returns `None`, and leaves the chooser's position untouched, when
    /// `partition_count` is 0.
    pub fn next_partition(&mut self, partition_count: u32) -> Option<u32> {
        let partition = self.next.checked_rem(partition_count)?;
        // `partition < partition_count <= u32::MAX`, so `+ 1` cannot overflow.
        self.next = (partition + 1) % partition_count;
        Some(partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cases of `testMurmur2` in Kafka's
    /// `clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java`:
    /// key bytes and the signed int `Utils.murmur2` returns for them.
    const KAFKA_VECTORS: [(&[u8], i32); 6] = [
        (b"21", -973_932_308),
        (b"foobar", -790_332_482),
        (b"a-little-bit-long-string", -985_981_536),
        (b"a-little-bit-longer-string", -1_486_304_829),
        (
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        // Kafka spells this one `new byte[] {'a', 'b', 'c'}`: the bytes of "abc".
        (b"abc", 479_470_107),
    ];

    /// librdkafka's `java_murmur2_results` (`src/rdmurmur2.c`), the values its
    /// Java-compatible murmur2 must reproduce. Unlike Kafka's own vectors they
    /// include 1-byte tails and the empty key. Stored as the unsigned bit
    /// pattern, as librdkafka writes them.
    const LIBRDKAFKA_VECTORS: [(&[u8], u32); 11] = [
        (b"kafka", 0xd067_cf64),
        (b"giberish123456789", 0x8f55_2b0c),
        (b"1234", 0x9fc9_7b14),
        (b"234", 0xe7c0_09ca),
        (b"34", 0x8739_30da),
        (b"4", 0x5a4b_5ca1),
        (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x7842_4f1c),
        (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4a62_b377),
        (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0xe0e4_e09e),
        (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x62b8_b43f),
        (b"", 0x106e_08d9),
    ];

    // ---- An independent reference implementation -------------------------
    //
    // Deliberately written another way: Java's 32-bit int is emulated with
    // u64 values kept reduced modulo 2^32, words are assembled by multiplying
    // by 256 instead of shifting, the tail is handled with the `if left >= n`
    // chain instead of a loop, and the sign bit is dropped with a modulo.

    const TWO_POW_32: u64 = 1 << 32;
    const TWO_POW_31: u64 = 1 << 31;

    /// Java int multiplication on values in `0..2^32`: exact product, then
    /// keep the low 32 bits.
    fn mul_mod_2_32(a: u64, b: u64) -> u64 {
        (a * b) % TWO_POW_32
    }

    /// Kafka's murmur2 as an unsigned value in `0..2^32`.
    fn naive_murmur2(data: &[u8]) -> u64 {
        let m: u64 = 0x5bd1_e995;
        let len = data.len();
        let mut h: u64 = 0x9747_b28c ^ (len as u64 % TWO_POW_32);

        let whole = len / 4 * 4;
        let mut i = 0;
        while i < whole {
            let mut k: u64 = 0;
            for j in [3, 2, 1, 0] {
                k = k * 256 + u64::from(data[i + j]);
            }
            k = mul_mod_2_32(k, m);
            k ^= k >> 24;
            k = mul_mod_2_32(k, m);
            h = mul_mod_2_32(h, m);
            h ^= k;
            i += 4;
        }

        let left = len - whole;
        if left >= 3 {
            h ^= u64::from(data[whole + 2]) * 65_536;
        }
        if left >= 2 {
            h ^= u64::from(data[whole + 1]) * 256;
        }
        if left >= 1 {
            h ^= u64::from(data[whole]);
            h = mul_mod_2_32(h, m);
        }

        h ^= h >> 13;
        h = mul_mod_2_32(h, m);
        h ^= h >> 15;
        h
    }

    /// Java's signed reading of a value in `0..2^32`.
    fn naive_as_java_int(unsigned: u64) -> i64 {
        if unsigned >= TWO_POW_31 {
            unsigned as i64 - TWO_POW_32 as i64
        } else {
            unsigned as i64
        }
    }

    /// `toPositive(murmur2(key)) % n`: masking the sign bit of a two's
    /// complement int leaves the unsigned value modulo 2^31.
    fn naive_partition(key: &[u8], partition_count: u32) -> u64 {
        (naive_murmur2(key) % TWO_POW_31) % u64::from(partition_count)
    }

    /// SplitMix64: a tiny deterministic generator so the random test is
    /// reproducible without external crates.
    struct SplitMix64(u64);

    impl SplitMix64 {
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn next_u32(&mut self) -> u32 {
            (self.next_u64() >> 32) as u32
        }

        fn bytes(&mut self, len: usize) -> Vec<u8> {
            (0..len).map(|_| self.next_u64() as u8).collect()
        }
    }

    // ---- murmur2 ----------------------------------------------------------

    #[test]
    fn murmur2_matches_kafka_utils_test_vectors() {
        for (key, expected) in KAFKA_VECTORS {
            assert_eq!(murmur2(key), expected, "key {:?}", key.escape_ascii());
        }
    }

    #[test]
    fn murmur2_matches_librdkafka_java_compatible_vectors() {
        for (key, expected_bits) in LIBRDKAFKA_VECTORS {
            assert_eq!(
                murmur2(key) as u32,
                expected_bits,
                "key {:?}",
                key.escape_ascii()
            );
        }
    }

    #[test]
    fn naive_reference_reproduces_the_published_vectors() {
        // Anchor the reference itself, so agreement with it means something.
        for (key, expected) in KAFKA_VECTORS {
            assert_eq!(
                naive_as_java_int(naive_murmur2(key)),
                i64::from(expected),
                "key {:?}",
                key.escape_ascii()
            );
        }
        for (key, expected_bits) in LIBRDKAFKA_VECTORS {
            assert_eq!(
                naive_murmur2(key),
                u64::from(expected_bits),
                "key {:?}",
                key.escape_ascii()
            );
        }
    }

    #[test]
    fn murmur2_and_partition_for_key_agree_with_naive_reference_on_random_keys() {
        let mut rng = SplitMix64(0x5e61_0600_d15c_0001);
        let fixed_counts = [1, 2, 3, 5, 7, 10, 12, 16, 64, 100, 1000, 65_536];
        let mut tail_lengths_seen = [0usize; 4];
        let mut high_bit_bytes_seen = 0usize;

        for len in 0..=20 {
            for _ in 0..250 {
                let key = rng.bytes(len);
                tail_lengths_seen[len % 4] += 1;
                high_bit_bytes_seen += key.iter().filter(|&&b| b >= 0x80).count();

                let expected_hash = naive_murmur2(&key);
                assert_eq!(
                    i64::from(murmur2(&key)),
                    naive_as_java_int(expected_hash),
                    "murmur2 of {key:02x?}"
                );

                let random_count = rng.next_u32().max(1);
                for count in fixed_counts.into_iter().chain([random_count]) {
                    let partition = partition_for_key(&key, count);
                    assert_eq!(
                        partition.map(u64::from),
                        Some(naive_partition(&key, count)),
                        "partition of {key:02x?} among {count}"
                    );
                    assert!(partition.is_some_and(|p| p < count));
                }
            }
        }

        // Every tail length (0-3 trailing bytes) was exercised, and bytes with
        // the high bit set (negative Java bytes) showed up plenty.
        assert!(tail_lengths_seen.iter().all(|&n| n > 0));
        assert!(high_bit_bytes_seen > 1000);
    }

    // ---- partition_for_key --------------------------------------------------

    #[test]
    fn partition_for_key_matches_values_derived_from_kafka_vectors() {
        // Each expectation is to_positive(vector) % count, worked out by hand:
        // "21":                         -973932308 -> 1173551340
        // "foobar":                     -790332482 -> 1357151166
        // "a-little-bit-long-string":   -985981536 -> 1161502112
        // "a-little-bit-longer-string": -1486304829 -> 661178819
        // "lkjh...h8":                  -58897971  -> 2088585677
        // "abc":                        479470107  -> 479470107
        let long_key: &[u8] = b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8";
        let cases: [(&[u8], u32, u32); 14] = [
            (b"21", 10, 0),
            (b"21", 64, 44),
            (b"foobar", 10, 6),
            (b"foobar", 100, 66),
            (b"a-little-bit-long-string", 12, 8),
            (b"a-little-bit-long-string", 3, 2),
            (b"a-little-bit-longer-string", 10, 9),
            (b"a-little-bit-longer-string", 12, 11),
            (long_key, 10, 7),
            (long_key, 100, 77),
            (b"abc", 10, 7),
            (b"abc", 64, 27),
            (b"abc", 1, 0),
            // A count larger than any positive hash returns the hash itself.
            (b"21", i32::MAX as u32, 1_173_551_340),
        ];
        for (key, count, expected) in cases {
            assert_eq!(
                partition_for_key(key, count),
                Some(expected),
                "key {:?} among {count}",
                key.escape_ascii()
            );
        }
    }

    #[test]
    fn empty_key_is_hashed_like_any_other_key() {
        // Kafka hashes a zero-length key rather than treating it as absent;
        // librdkafka publishes its hash as 0x106e08d9 (positive as an int).
        assert_eq!(murmur2(b""), 0x106e_08d9);
        assert_eq!(to_positive(murmur2(b"")), 0x106e_08d9);
        for count in [1, 2, 3, 10, 12, 100] {
            assert_eq!(partition_for_key(b"", count), Some(0x106e_08d9 % count));
        }
    }

    #[test]
    fn partition_for_key_returns_none_for_zero_partitions() {
        assert_eq!(partition_for_key(b"foobar", 0), None);
        assert_eq!(partition_for_key(b"", 0), None);
    }

    // ---- to_positive --------------------------------------------------------

    #[test]
    fn to_positive_of_i32_min_is_zero() {
        assert_eq!(to_positive(i32::MIN), 0);
    }

    #[test]
    fn to_positive_clears_only_the_sign_bit() {
        assert_eq!(to_positive(0), 0);
        assert_eq!(to_positive(1), 1);
        assert_eq!(to_positive(i32::MAX), i32::MAX as u32);
        // Not abs: -1 is all ones, so clearing the sign bit gives i32::MAX.
        assert_eq!(to_positive(-1), i32::MAX as u32);
        assert_eq!(to_positive(-10), 2_147_483_638);
        assert_eq!(to_positive(-973_932_308), 1_173_551_340);
    }

    // ---- RoundRobin ---------------------------------------------------------

    #[test]
    fn round_robin_cycles_through_every_partition_in_order() {
        let mut rr = RoundRobin::default();
        let picks: Vec<_> = (0..9).map(|_| rr.next_partition(4)).collect();
        let expected: Vec<_> = [0, 1, 2, 3, 0, 1, 2, 3, 0].map(Some).into();
        assert_eq!(picks, expected);
    }

    #[test]
    fn round_robin_with_one_partition_always_returns_zero() {
        let mut rr = RoundRobin::default();
        for _ in 0..5 {
            assert_eq!(rr.next_partition(1), Some(0));
        }
    }

    #[test]
    fn round_robin_with_zero_partitions_returns_none_and_keeps_its_position() {
        let mut rr = RoundRobin::default();
        assert_eq!(rr.next_partition(3), Some(0));
        assert_eq!(rr.next_partition(0), None);
        assert_eq!(rr.next_partition(0), None);
        assert_eq!(rr.next_partition(3), Some(1));
    }

    #[test]
    fn round_robin_continues_into_new_partitions_when_the_count_grows() {
        let mut rr = RoundRobin::default();
        let before: Vec<_> = (0..4).map(|_| rr.next_partition(3)).collect();
        assert_eq!(before, [Some(0), Some(1), Some(2), Some(0)]);
        let after: Vec<_> = (0..6).map(|_| rr.next_partition(5)).collect();
        assert_eq!(
            after,
            [Some(1), Some(2), Some(3), Some(4), Some(0), Some(1)]
        );
    }

    #[test]
    fn round_robin_stays_in_range_when_the_count_shrinks() {
        let mut rr = RoundRobin::default();
        for expected in 0..4 {
            assert_eq!(rr.next_partition(5), Some(expected));
        }
        // Position 4 is gone with 3 partitions: 4 % 3 = 1, then on in order.
        let after: Vec<_> = (0..4).map(|_| rr.next_partition(3)).collect();
        assert_eq!(after, [Some(1), Some(2), Some(0), Some(1)]);

        // Shrinking to a single partition can only ever yield 0.
        assert_eq!(rr.next_partition(1), Some(0));
        assert_eq!(rr.next_partition(1), Some(0));
    }

    #[test]
    fn round_robin_wraps_without_overflow_at_the_largest_count() {
        let mut rr = RoundRobin { next: u32::MAX - 2 };
        assert_eq!(rr.next_partition(u32::MAX), Some(u32::MAX - 2));
        assert_eq!(rr.next_partition(u32::MAX), Some(u32::MAX - 1));
        assert_eq!(rr.next_partition(u32::MAX), Some(0));
    }
}
