//! Choosing a record's partition: the [`Partitioner`] trait, and the sticky choice for keyless
//! records of Kafka's `BuiltInPartitioner`.

use crate::types::TopicName;

/// Kafka's `Partitioner` interface (`partitioner.class`): chooses the partition of every record
/// sent without an explicit one, keyed or not.
///
/// It is called with the producer's lock held, once per record, so it must be quick and must not
/// call back into the producer. It sees the key but not the value: a choice that depends on the
/// value is made by the caller, who then sets [`ProducerRecord::partition`](super::ProducerRecord).
/// It is not told when a batch fills (Kafka's deprecated `onNewBatch`): stickiness is the
/// built-in partitioner's business, and a custom one that wants it can keep its own state.
pub trait Partitioner: Send + Sync {
    /// A partition in `0..partition_count` (`partition_count` is at least 1). `send` refuses a
    /// record with `PartitionOutOfRange` if the answer is outside.
    fn partition(&self, topic: &TopicName, key: Option<&[u8]>, partition_count: u32) -> u32;
}

/// The partition keyless records of one topic stick to, and whether a record went there yet.
///
/// Kafka's rule (KIP-480): stay while the partition's open batch takes the records; when a record
/// would need a new batch there (the batch filled, or `linger.ms` sent it), move to another
/// partition picked uniformly at random. A record only ever moves the choice when the current
/// partition already received one, so each choice gets at least a batch.
#[derive(Debug, Default)]
pub(crate) struct StickyPartition {
    partition: Option<u32>,
    used: bool,
}

impl StickyPartition {
    /// The partition to try for the next keyless record, picking one if there is none yet (or if
    /// it is out of range).
    pub(crate) fn current(&mut self, random: &mut SplitMix64, partition_count: u32) -> u32 {
        match self.partition {
            Some(partition) if partition < partition_count => partition,
            _ => self.choose(random.below(partition_count)),
        }
    }

    /// True once a record went to the current partition: a record that needs a new batch there
    /// should move on.
    pub(crate) fn is_used(&self) -> bool {
        self.used
    }

    pub(crate) fn mark_used(&mut self) {
        self.used = true;
    }

    /// Moves to another partition, uniformly among the others (the same one if it is alone).
    pub(crate) fn switch(&mut self, random: &mut SplitMix64, partition_count: u32) -> u32 {
        let current = self.current(random, partition_count);
        if partition_count <= 1 {
            return self.choose(current);
        }
        let offset = 1 + random.below(partition_count - 1);
        // `current + offset` < 2 * partition_count <= 2^33: computed in u64.
        let next = (u64::from(current) + u64::from(offset)) % u64::from(partition_count);
        self.choose(next as u32)
    }

    fn choose(&mut self, partition: u32) -> u32 {
        self.partition = Some(partition);
        self.used = false;
        partition
    }
}

/// SplitMix64: a small generator for the sticky choice, which needs spread, not secrecy.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    /// Seeded from the clock, so producers started together spread differently.
    pub(crate) fn from_clock() -> SplitMix64 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64);
        SplitMix64(nanos ^ 0x5e61_0600_0000_0006)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`; 0 when `bound` is 0.
    pub(crate) fn below(&mut self, bound: u32) -> u32 {
        // Lemire's multiply-shift: the high word of a 32x32 product is below `bound`.
        (((self.next_u64() >> 32) * u64::from(bound)) >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_stays_until_switched_and_then_moves_to_another_partition() {
        let mut random = SplitMix64(1);
        let mut sticky = StickyPartition::default();
        let first = sticky.current(&mut random, 5);
        assert!(!sticky.is_used());
        sticky.mark_used();
        for _ in 0..10 {
            assert_eq!(sticky.current(&mut random, 5), first);
        }
        for _ in 0..100 {
            let before = sticky.current(&mut random, 5);
            let after = sticky.switch(&mut random, 5);
            assert_ne!(after, before);
            assert!(after < 5);
            assert!(!sticky.is_used());
        }
    }

    #[test]
    fn one_partition_is_always_chosen_and_a_shrunk_count_is_folded_back() {
        let mut random = SplitMix64(2);
        let mut sticky = StickyPartition::default();
        assert_eq!(sticky.switch(&mut random, 1), 0);
        assert_eq!(sticky.current(&mut random, 1), 0);
        sticky.partition = Some(7);
        assert!(sticky.current(&mut random, 3) < 3);
    }

    #[test]
    fn switching_reaches_every_other_partition() {
        let mut random = SplitMix64(3);
        let mut sticky = StickyPartition::default();
        let mut seen = [0u32; 4];
        for _ in 0..400 {
            seen[sticky.switch(&mut random, 4) as usize] += 1;
        }
        assert!(seen.iter().all(|&count| count > 50), "{seen:?}");
    }
}
