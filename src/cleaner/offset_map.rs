//! The cleaner's key -> latest-offset map (Kafka's `SkimpyOffsetMap`): bounded memory, no
//! per-entry allocation, and the same probe sequence as Kafka's.
//!
//! A key is stood in for by its 16-byte MD5: collisions between distinct keys are
//! cryptographically unlikely, and every slot has the same size whatever the key's length. The
//! table is one preallocated byte array of `memory_bytes / 24` slots, each `MD5(key)` followed by
//! the key's latest offset as a big-endian `u64`:
//!
//! ```text
//! slot i: bytes 24*i .. 24*i+16   MD5(key)
//!         bytes 24*i+16 .. 24*i+24 offset (u64, big-endian)
//! ```
//!
//! A slot whose 24 bytes are all zero is empty (Kafka's convention). A key whose MD5 is all zero
//! and whose offset is 0 would look empty; the odds of such an MD5 are 2^-128, so, like Kafka,
//! the map does not spend a byte on it.
//!
//! **Probe sequence** (collisions are resolved by open addressing, never by chaining). Attempt `i`
//! (from 0) reads a big-endian `i32` from the hash at byte `min(i, 12)`, adds `max(0, i - 12)`
//! with 32-bit wrapping, and takes `abs(probe) % slots`, where `abs(i32::MIN)` is 0 (Kafka's
//! `Utils.abs`). So the first 13 attempts try the hash's own 4-byte windows, and later ones walk
//! linearly from the last window.
//!
//! **Filling.** Kafka's cleaner stops adding keys once the map holds `slots * load_factor` keys
//! (`log.cleaner.io.buffer.load.factor`, 0.9): beyond that, probe chains grow long. [`OffsetMap::put`]
//! enforces the bound itself and reports [`OffsetMapFull`] for a *new* key past it; a key already in
//! the map can always be updated. (Kafka's cleaner checks the bound before every put, so it also
//! stops at an update; accepting updates maps more records per round and changes no outcome.)
//!
//! **Termination.** The bound keeps at least one slot empty, and the linear part of the probe
//! sequence visits consecutive integers, whose `abs` runs through every residue modulo `slots`
//! within `2 * slots` steps (it may first descend to 0 and climb again). Probing therefore stops
//! after at most `2 * slots + 16` attempts, which both `put` and `get` use as their loop bound.

use md5::{Digest, Md5};
use thiserror::Error;

pub use crate::error::OffsetMapError;
use crate::limits::{OFFSET_MAP_MEMORY_BYTES_MAX, OFFSET_MAP_SLOT_BYTES};

/// Bytes of a key's hash (MD5).
pub const HASH_BYTES: usize = 16;
/// Bytes of the offset stored after each hash.
pub const OFFSET_BYTES: usize = 8;
/// Bytes of one slot: hash then offset (Kafka's `bytesPerEntry`).
pub const SLOT_BYTES: usize = HASH_BYTES + OFFSET_BYTES;
/// Kafka's `log.cleaner.io.buffer.load.factor` default.
pub const LOAD_FACTOR_DEFAULT: f64 = 0.9;
/// The largest map (`limits::OFFSET_MAP_MEMORY_BYTES_MAX`).
pub const MEMORY_BYTES_MAX: usize = OFFSET_MAP_MEMORY_BYTES_MAX;

/// The last byte at which a probe reads a 4-byte window of the hash.
const PROBE_WINDOW_LAST: usize = HASH_BYTES - 4;

const _: () = assert!(SLOT_BYTES == OFFSET_MAP_SLOT_BYTES);
const _: () = assert!(PROBE_WINDOW_LAST == 12);

/// [`OffsetMap::put`] of a new key into a map that holds as many keys as its load factor allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("offset map is full: {entry_count} keys, the most its {slot_count} slots may hold")]
#[non_exhaustive]
pub struct OffsetMapFull {
    pub entry_count: usize,
    pub slot_count: usize,
}

/// Where probing for a hash ended.
enum Probe {
    /// The hash is in this slot.
    Found(usize),
    /// The hash is absent; this is the first empty slot of its probe sequence.
    Empty(usize),
    /// Every attempt met another key (impossible below the load factor; reported, not assumed).
    Exhausted,
}

/// Key hash -> latest offset, in a fixed amount of memory. See the module documentation.
#[derive(Clone)]
pub struct OffsetMap {
    table: Vec<u8>,
    slot_count: usize,
    entry_count: usize,
    entry_count_max: usize,
    latest_offset: Option<u64>,
}

impl std::fmt::Debug for OffsetMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetMap")
            .field("slot_count", &self.slot_count)
            .field("entry_count", &self.entry_count)
            .field("entry_count_max", &self.entry_count_max)
            .field("latest_offset", &self.latest_offset)
            .finish_non_exhaustive()
    }
}

impl OffsetMap {
    /// A map in `memory_bytes` (rounded down to whole slots) filled to Kafka's default load factor.
    pub fn new(memory_bytes: usize) -> Result<OffsetMap, OffsetMapError> {
        OffsetMap::with_load_factor(memory_bytes, LOAD_FACTOR_DEFAULT)
    }

    /// A map in `memory_bytes` holding at most `floor(slots * load_factor)` keys, which must be at
    /// least one. `load_factor` is in (0, 1): at 1 the last puts and absent-key lookups would
    /// probe the whole table.
    pub fn with_load_factor(
        memory_bytes: usize,
        load_factor: f64,
    ) -> Result<OffsetMap, OffsetMapError> {
        if !(load_factor > 0.0 && load_factor < 1.0) {
            return Err(OffsetMapError::LoadFactor { load_factor });
        }
        if memory_bytes > MEMORY_BYTES_MAX {
            return Err(OffsetMapError::TooLarge { memory_bytes });
        }
        let slot_count = memory_bytes / SLOT_BYTES;
        // Kafka's `(slots * loadFactor).toInt`: truncation toward zero. The `min` keeps one slot
        // empty, which probing relies on, whatever the floating-point product does.
        let entry_count_max =
            ((slot_count as f64 * load_factor) as usize).min(slot_count.saturating_sub(1));
        if entry_count_max == 0 {
            return Err(OffsetMapError::TooSmall {
                memory_bytes,
                load_factor,
            });
        }
        Ok(OffsetMap {
            table: vec![0; slot_count * SLOT_BYTES],
            slot_count,
            entry_count: 0,
            entry_count_max,
            latest_offset: None,
        })
    }

    /// Records `offset` as the latest for `key`, replacing the key's previous offset. The cleaner
    /// puts offsets in increasing order, so the last put for a key is its latest.
    pub fn put(&mut self, key: &[u8], offset: u64) -> Result<(), OffsetMapFull> {
        let hash = key_hash(key);
        let slot = match self.probe(&hash) {
            Probe::Found(slot) => slot,
            Probe::Empty(slot) if !self.is_full() => {
                self.slot_mut(slot)[..HASH_BYTES].copy_from_slice(&hash);
                self.entry_count += 1;
                slot
            }
            Probe::Empty(_) | Probe::Exhausted => {
                return Err(OffsetMapFull {
                    entry_count: self.entry_count,
                    slot_count: self.slot_count,
                });
            }
        };
        self.slot_mut(slot)[HASH_BYTES..].copy_from_slice(&offset.to_be_bytes());
        self.latest_offset = Some(
            self.latest_offset
                .map_or(offset, |latest| latest.max(offset)),
        );
        debug_assert!(self.entry_count <= self.entry_count_max);
        Ok(())
    }

    /// The latest offset put for `key`, if it was put since the last [`Self::clear`].
    pub fn get(&self, key: &[u8]) -> Option<u64> {
        match self.probe(&key_hash(key)) {
            Probe::Found(slot) => {
                let mut offset = [0u8; OFFSET_BYTES];
                offset.copy_from_slice(&self.slot(slot)[HASH_BYTES..]);
                Some(u64::from_be_bytes(offset))
            }
            Probe::Empty(_) | Probe::Exhausted => None,
        }
    }

    /// Distinct keys in the map.
    pub fn len(&self) -> usize {
        self.entry_count
    }

    pub fn is_empty(&self) -> bool {
        self.entry_count == 0
    }

    /// Slots in the table (`memory_bytes / 24`).
    pub fn slots(&self) -> usize {
        self.slot_count
    }

    /// The most distinct keys the map takes (`floor(slots * load_factor)`).
    pub fn capacity(&self) -> usize {
        self.entry_count_max
    }

    /// The map takes no new key (an existing key can still be updated).
    pub fn is_full(&self) -> bool {
        self.entry_count >= self.entry_count_max
    }

    /// The largest offset put since the last [`Self::clear`].
    pub fn latest_offset(&self) -> Option<u64> {
        self.latest_offset
    }

    /// Fraction of the slots in use (Kafka's `utilization`, reported in the cleaner's stats).
    pub fn utilization(&self) -> f64 {
        self.entry_count as f64 / self.slot_count as f64
    }

    /// Empties the map for the next cleaning round, keeping its memory.
    pub fn clear(&mut self) {
        self.table.fill(0);
        self.entry_count = 0;
        self.latest_offset = None;
    }

    fn probe(&self, hash: &[u8; HASH_BYTES]) -> Probe {
        let attempts_max = 2 * self.slot_count + HASH_BYTES;
        for attempt in 0..attempts_max {
            let slot = probe_slot(hash, attempt, self.slot_count);
            let bytes = self.slot(slot);
            if bytes.iter().all(|byte| *byte == 0) {
                return Probe::Empty(slot);
            }
            if bytes[..HASH_BYTES] == hash[..] {
                return Probe::Found(slot);
            }
        }
        Probe::Exhausted
    }

    fn slot(&self, slot: usize) -> &[u8] {
        &self.table[slot * SLOT_BYTES..(slot + 1) * SLOT_BYTES]
    }

    fn slot_mut(&mut self, slot: usize) -> &mut [u8] {
        &mut self.table[slot * SLOT_BYTES..(slot + 1) * SLOT_BYTES]
    }
}

/// MD5 of the key's bytes (Kafka's default `hashAlgorithm`).
fn key_hash(key: &[u8]) -> [u8; HASH_BYTES] {
    Md5::digest(key).into()
}

/// The slot of attempt `attempt` for `hash` in a table of `slot_count` slots (Kafka's
/// `positionOf`, divided by the slot size). `attempt` stays below `2 * slot_count + 16`, which
/// fits an `i32` because `slot_count <= MEMORY_BYTES_MAX / 24`.
fn probe_slot(hash: &[u8; HASH_BYTES], attempt: usize, slot_count: usize) -> usize {
    let window = attempt.min(PROBE_WINDOW_LAST);
    let mut int = [0u8; 4];
    int.copy_from_slice(&hash[window..window + 4]);
    let linear_steps = attempt.saturating_sub(PROBE_WINDOW_LAST) as i32;
    let probe = i32::from_be_bytes(int).wrapping_add(linear_steps);
    // `Utils.abs`: `Math.abs` except that `Integer.MIN_VALUE`, which has no positive, maps to 0.
    let magnitude = if probe == i32::MIN {
        0
    } else {
        probe.unsigned_abs()
    };
    magnitude as usize % slot_count
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map_of_slots(slot_count: usize) -> OffsetMap {
        OffsetMap::new(slot_count * SLOT_BYTES).unwrap()
    }

    /// The slot holding `key`, for tests of placement.
    fn slot_of(map: &OffsetMap, key: &[u8]) -> Option<usize> {
        match map.probe(&key_hash(key)) {
            Probe::Found(slot) => Some(slot),
            _ => None,
        }
    }

    /// Kafka's `positionOf(hash, attempt) / bytesPerEntry`, written the way the Java reads:
    /// `ByteUtils.readIntBE(hash, min(attempt, 12)) + max(0, attempt - 12)` in 32-bit arithmetic,
    /// then `Utils.abs(probe) % slots`, where `Utils.abs(n) = n == MIN ? 0 : Math.abs(n)`.
    fn kafka_position(hash: &[u8; 16], attempt: i32, slots: i32) -> i32 {
        let at = attempt.min(16 - 4) as usize;
        let read_int_be = ((hash[at] as i32) << 24)
            | ((hash[at + 1] as i32) << 16)
            | ((hash[at + 2] as i32) << 8)
            | (hash[at + 3] as i32);
        let probe = (i64::from(read_int_be) + i64::from(0.max(attempt - 16 + 4))) as i32;
        let utils_abs = if probe == i32::MIN { 0 } else { probe.abs() };
        utils_abs % slots
    }

    #[test]
    fn keys_hash_with_md5() {
        assert_eq!(
            key_hash(b""),
            *b"\xd4\x1d\x8c\xd9\x8f\x00\xb2\x04\xe9\x80\x09\x98\xec\xf8\x42\x7e"
        );
        assert_eq!(
            key_hash(b"abc"),
            *b"\x90\x01\x50\x98\x3c\xd2\x4f\xb0\xd6\x96\x3f\x7d\x28\xe1\x7f\x72"
        );
    }

    #[test]
    fn put_then_get_and_an_update_replaces_the_offset() {
        let mut map = map_of_slots(100);
        assert_eq!(map.get(b"a"), None);
        map.put(b"a", 3).unwrap();
        map.put(b"b", 4).unwrap();
        assert_eq!(map.get(b"a"), Some(3));
        assert_eq!(map.get(b"b"), Some(4));
        map.put(b"a", 7).unwrap();
        assert_eq!(map.get(b"a"), Some(7));
        assert_eq!(map.len(), 2, "an update adds no key");
        assert_eq!(map.latest_offset(), Some(7));
        assert_eq!(map.get(b"c"), None);
        assert_eq!(map.get(b""), None);
        map.put(b"", 8).unwrap();
        assert_eq!(map.get(b""), Some(8), "the empty key is a key");
    }

    #[test]
    fn a_zero_offset_is_stored_not_mistaken_for_an_empty_slot() {
        let mut map = map_of_slots(10);
        map.put(b"first", 0).unwrap();
        assert_eq!(map.get(b"first"), Some(0));
        map.put(b"second", 1).unwrap();
        assert_eq!(map.get(b"first"), Some(0));
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn keys_whose_first_probe_collides_are_all_found() {
        let slot_count = 101;
        let colliding: Vec<Vec<u8>> = (0u32..)
            .map(|index| format!("key-{index}").into_bytes())
            .filter(|key| probe_slot(&key_hash(key), 0, slot_count) == 7)
            .take(20)
            .collect();
        let mut map = map_of_slots(slot_count);
        map.put(&colliding[0], 0).unwrap();
        map.put(&colliding[1], 1).unwrap();
        assert_eq!(
            slot_of(&map, &colliding[0]),
            Some(7),
            "the first takes its slot"
        );
        let second = key_hash(&colliding[1]);
        let next_free = (1..)
            .map(|attempt| probe_slot(&second, attempt, slot_count))
            .find(|slot| *slot != 7);
        assert_eq!(
            slot_of(&map, &colliding[1]),
            next_free,
            "the second takes the next slot of its own probe sequence"
        );
        for (offset, key) in colliding.iter().enumerate().skip(2) {
            map.put(key, offset as u64).unwrap();
        }
        for (offset, key) in colliding.iter().enumerate() {
            assert_eq!(map.get(key), Some(offset as u64));
        }
        assert_eq!(map.len(), 20);
    }

    #[test]
    fn many_keys_in_a_tiny_map_collide_and_are_all_found() {
        let mut map = map_of_slots(4);
        assert_eq!(map.capacity(), 3);
        for (offset, key) in [b"x", b"y", b"z"].iter().enumerate() {
            map.put(*key, offset as u64).unwrap();
        }
        assert_eq!(map.get(b"x"), Some(0));
        assert_eq!(map.get(b"y"), Some(1));
        assert_eq!(map.get(b"z"), Some(2));
        for absent in 0..100u32 {
            assert_eq!(map.get(format!("absent-{absent}").as_bytes()), None);
        }
    }

    #[test]
    fn the_map_is_full_at_ninety_percent_of_its_slots() {
        let mut map = map_of_slots(100);
        assert_eq!(map.slots(), 100);
        assert_eq!(map.capacity(), 90);
        for index in 0..90u64 {
            assert!(!map.is_full());
            map.put(format!("k{index}").as_bytes(), index).unwrap();
        }
        assert!(map.is_full());
        assert_eq!(
            map.put(b"one too many", 90),
            Err(OffsetMapFull {
                entry_count: 90,
                slot_count: 100
            })
        );
        assert_eq!(map.get(b"one too many"), None);
        map.put(b"k5", 91).unwrap();
        assert_eq!(
            map.get(b"k5"),
            Some(91),
            "a full map still updates its keys"
        );
        assert_eq!(map.len(), 90);
        assert!((map.utilization() - 0.9).abs() < 1e-9);
    }

    #[test]
    fn memory_is_rounded_down_to_whole_slots_and_must_hold_a_key() {
        let map = OffsetMap::new(10 * SLOT_BYTES + SLOT_BYTES - 1).unwrap();
        assert_eq!(map.slots(), 10);
        assert_eq!(map.capacity(), 9);
        assert_eq!(OffsetMap::new(2 * SLOT_BYTES).unwrap().capacity(), 1);
        for memory_bytes in [0, SLOT_BYTES, 2 * SLOT_BYTES - 1] {
            assert!(matches!(
                OffsetMap::new(memory_bytes),
                Err(OffsetMapError::TooSmall { .. })
            ));
        }
        assert!(matches!(
            OffsetMap::new(MEMORY_BYTES_MAX + 1),
            Err(OffsetMapError::TooLarge { .. })
        ));
        for load_factor in [0.0, 1.0, -0.5, f64::NAN] {
            assert!(matches!(
                OffsetMap::with_load_factor(1024, load_factor),
                Err(OffsetMapError::LoadFactor { .. })
            ));
        }
    }

    #[test]
    fn clear_forgets_every_key_and_the_latest_offset() {
        let mut map = map_of_slots(10);
        for index in 0..9u64 {
            map.put(&index.to_be_bytes(), index).unwrap();
        }
        assert!(map.is_full());
        map.clear();
        assert!(map.is_empty());
        assert!(!map.is_full());
        assert_eq!(map.latest_offset(), None);
        assert_eq!(map.utilization(), 0.0);
        for index in 0..9u64 {
            assert_eq!(map.get(&index.to_be_bytes()), None);
        }
        map.put(b"again", 1).unwrap();
        assert_eq!(map.get(b"again"), Some(1));
    }

    #[test]
    fn the_probe_sequence_is_kafkas() {
        let mut hashes: Vec<[u8; 16]> = [&b""[..], b"abc", b"key-1", b"orders/42"]
            .iter()
            .map(|key| key_hash(key))
            .collect();
        // Windows at the sign boundary and the linear part's wrap from i32::MAX to i32::MIN.
        hashes.push([0xff; 16]);
        hashes.push([
            0x80, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xfe,
        ]);
        hashes.push([
            0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 0, 1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfd,
        ]);
        hashes.push(std::array::from_fn(|index| index as u8));
        for hash in &hashes {
            for slots in [1usize, 2, 7, 100, 1 << 20, 89_478_485] {
                for attempt in 0..40usize {
                    assert_eq!(
                        probe_slot(hash, attempt, slots) as i32,
                        kafka_position(hash, attempt as i32, slots as i32),
                        "hash {hash:02x?}, slots {slots}, attempt {attempt}"
                    );
                }
            }
        }
    }

    #[test]
    fn probe_slots_on_a_known_hash_match_hand_computed_values() {
        let hash: [u8; 16] = std::array::from_fn(|index| index as u8);
        // 0x00010203 = 66051, 0x01020304 = 16909060, 0x0c0d0e0f = 202182159.
        assert_eq!(probe_slot(&hash, 0, 1000), 51);
        assert_eq!(probe_slot(&hash, 1, 1000), 60);
        assert_eq!(probe_slot(&hash, 12, 1000), 159);
        assert_eq!(probe_slot(&hash, 13, 1000), 160);
        assert_eq!(probe_slot(&hash, 20, 1000), 167);
        let minimum = [0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(probe_slot(&minimum, 0, 7), 0, "Utils.abs(MIN_VALUE) is 0");
        let wrapping = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff];
        assert_eq!(probe_slot(&wrapping, 13, 1000), 0, "MAX + 1 wraps to MIN");
        assert_eq!(probe_slot(&wrapping, 14, 1000), 2_147_483_647 % 1000);
    }

    proptest! {
        #[test]
        fn a_map_filled_to_capacity_finds_every_key_and_no_other(
            slot_count in 2usize..64,
            keys in proptest::collection::hash_set(proptest::collection::vec(any::<u8>(), 0..8), 1..64),
        ) {
            let mut map = map_of_slots(slot_count);
            let keys: Vec<Vec<u8>> = keys.into_iter().collect();
            let (stored, rest) = keys.split_at(keys.len().min(map.capacity()));
            for (offset, key) in stored.iter().enumerate() {
                map.put(key, offset as u64).unwrap();
            }
            for (offset, key) in stored.iter().enumerate() {
                prop_assert_eq!(map.get(key), Some(offset as u64));
            }
            for key in rest {
                prop_assert_eq!(map.get(key), None);
                prop_assert!(map.put(key, 0).is_err());
            }
        }
    }
}
