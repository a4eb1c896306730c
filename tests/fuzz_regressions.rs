//! Inputs the fuzz targets in `fuzz/` found, each fed to the library API it broke, so that a
//! finding stays fixed. One test per finding, named after what it checks; the bytes are inline
//! (minimized where the finding allowed). `fuzz/README.md` lists the targets and the runs.
//!
//! Issue 7: reliability (fuzzing).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use seglog::format::file_name::{parse_partition_dir_name, partition_dir_name};
use support::batches::{T0, keyed_batch};

mod support;

/// file_name_parse: a partition directory name with leading zeros parsed as the same partition
/// as the canonical name (`t-0` and `t-00` were both partition 0 of `t`), so a stray directory
/// was counted as a second copy of a partition. Only the name `partition_dir_name` writes parses.
#[test]
fn partition_dir_name_with_leading_zeros_is_not_a_partition() {
    let found = "00000000000800000-0000000000000000000";
    assert_eq!(parse_partition_dir_name(found), None);
    assert_eq!(parse_partition_dir_name("orders-01"), None);
    let canonical = parse_partition_dir_name("orders-10").unwrap();
    assert_eq!(partition_dir_name(&canonical), "orders-10");
    let zero = parse_partition_dir_name("orders-0").unwrap();
    assert_eq!(zero.partition, 0);
}

/// Found next to the finding above (by reading, not by the fuzzer): a partition number above
/// Kafka's `int32` range parsed, and the engine's topic scan computes `partition + 1` from it
/// (an overflow at `u32::MAX`).
#[test]
fn partition_dir_name_above_the_int32_range_is_not_a_partition() {
    assert_eq!(parse_partition_dir_name("orders-4294967295"), None);
    assert_eq!(parse_partition_dir_name("orders-2147483648"), None);
    let largest = parse_partition_dir_name("orders-2147483647").unwrap();
    assert_eq!(largest.partition, i32::MAX as u32);
}

/// checkpoint_parse: a topic registry whose last setting ends in `\r` without a final newline
/// decoded to a value `encode` writes back as `...\r\n`, which decodes without the `\r`: the
/// registry did not survive a save and load. Settings with whitespace or control characters are
/// now refused.
#[test]
fn topic_registry_setting_with_a_carriage_return_is_refused() {
    let found = b"1\n_ 2 =\r";
    assert!(seglog::format::topics::decode(found).is_err());
    let registry = seglog::format::topics::decode(b"1\n_ 2 =x\n").unwrap();
    let text = seglog::format::topics::encode(&registry);
    assert_eq!(
        seglog::format::topics::decode(text.as_bytes()).unwrap(),
        registry
    );
}

/// decompress: a 3-byte raw Snappy block (`82 fe 33`, a length varint of 851,714 bytes and no
/// data) made the decoder reserve and zero its declared length before decoding anything: any
/// batch could make the broker allocate up to the 64 MiB decompression limit. A block that
/// declares more than Snappy's densest encoding could produce from its bytes is now refused
/// before any memory is reserved.
#[test]
fn snappy_block_declaring_more_than_it_can_hold_is_refused_before_allocating() {
    use seglog::format::compression::{compress, decompress};
    use seglog::format::{Compression, DecompressError};
    let found = [0x82, 0xfe, 0x33];
    let refused = decompress(Compression::Snappy, &found, 1 << 20);
    assert!(
        matches!(refused, Err(DecompressError::Corrupt { .. })),
        "{refused:?}"
    );
    let production_limit = seglog::limits::DECOMPRESSED_BATCH_BYTES_MAX;
    let refused = decompress(Compression::Snappy, &found, production_limit);
    assert!(
        matches!(refused, Err(DecompressError::Corrupt { .. })),
        "{refused:?}"
    );
    // The densest legal blocks still decode: long runs compress far better than 1:2.
    let run = vec![7u8; 200_000];
    let compressed = compress(Compression::Snappy, &run).unwrap();
    assert_eq!(
        decompress(Compression::Snappy, &compressed, run.len()).unwrap(),
        run
    );
}

/// A batch from `BatchBuilder` with `base_offset` and `last_offset_delta` rewritten and its CRC
/// recomputed: a batch whose offsets only a damaged or hostile file would hold.
fn batch_with_offsets(base_offset: i64, last_offset_delta: i32) -> Vec<u8> {
    use seglog::format::batch::field;
    let mut batch = keyed_batch(Some(b"k"), Some(b"v"), T0).to_vec();
    batch[field::BASE_OFFSET..field::BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    batch[field::LAST_OFFSET_DELTA..field::LAST_OFFSET_DELTA + 4]
        .copy_from_slice(&last_offset_delta.to_be_bytes());
    let crc = crc32c::crc32c(&batch[field::ATTRIBUTES..]);
    batch[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}

fn load_segment(
    log: &[u8],
    base_offset: u64,
    mode: seglog::segment::recovery::LoadMode,
) -> (
    tempfile::TempDir,
    Result<seglog::segment::recovery::LoadedSegment, seglog::error::StorageError>,
) {
    use seglog::format::file_name::{SegmentFileKind, segment_path};
    use seglog::types::{Offset, TimestampMs};
    let dir = tempfile::tempdir().unwrap();
    let base_offset = Offset(base_offset);
    std::fs::write(
        segment_path(dir.path(), base_offset, SegmentFileKind::Log),
        log,
    )
    .unwrap();
    if mode == seglog::segment::recovery::LoadMode::Trusted {
        for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            std::fs::write(segment_path(dir.path(), base_offset, kind), b"").unwrap();
        }
    }
    let config = seglog::config::LogConfig::default()
        .with_segment_index_bytes(4096)
        .with_index_interval_bytes(1);
    let loaded = seglog::segment::Segment::load(
        &seglog::io::pio::PositionedIo,
        dir.path(),
        base_offset,
        &config,
        mode,
        TimestampMs(0),
    );
    (dir, loaded)
}

/// recovery_scan (input built by hand from a reading of `check_offsets`, confirmed through the
/// target; the timed runs had not reached it): in a segment based at `i64::MAX - 8`, a batch
/// whose `baseOffset + lastOffsetDelta` overflows saturates to `i64::MAX`, the expected next
/// offset becomes 2^63, whose cast to `i64` is negative, so a following batch at offset 0 passes
/// the "not below the next offset" check and recovery panics adding it to the offset index.
/// Fixed in `src/segment/recovery.rs` (`check_offsets`); a batch that passes its CRC with bad
/// offsets now fails the open (`Corrupt`) instead of being cut as a torn tail.
#[test]
fn recovery_refuses_a_batch_whose_offsets_overflow_and_one_that_goes_back() {
    let first = batch_with_offsets(i64::MAX - 8, 100);
    let second = batch_with_offsets(0, 0);
    let log = [first.clone(), second].concat();
    let base_offset = i64::MAX as u64 - 8;
    let (_dir, loaded) = load_segment(
        &log,
        base_offset,
        seglog::segment::recovery::LoadMode::Recover,
    );
    // Both batches pass their CRC, so their offsets were damaged: refused, never truncated.
    let error = loaded.unwrap_err();
    assert!(
        matches!(error, seglog::error::StorageError::Corrupt { .. }),
        "{error}"
    );
}

/// recovery_scan (found the same way): a trusted segment whose tail holds a batch based at
/// `i64::MAX` overflows computing its next offset (`last_offset() + 1` in `load_tail`): a panic
/// with overflow checks, a next offset of 0 without. Fixed in `src/segment/recovery.rs`
/// (`load_tail` computes the next offset in `u64`).
#[test]
fn trusted_load_of_a_batch_at_the_largest_offset_does_not_overflow() {
    let log = batch_with_offsets(i64::MAX, 0);
    let (_dir, loaded) = load_segment(&log, 0, seglog::segment::recovery::LoadMode::Trusted);
    let segment = loaded.unwrap().segment;
    // Either recovery cut the batch, or the next offset is past it: never wrapped to 0.
    if segment.size_bytes() > 0 {
        assert!(segment.next_offset().0 > i64::MAX as u64);
    }
}

/// A batch of one record at `base_offset` whose encoding is exactly `size_bytes` long.
fn batch_of_size(base_offset: i64, size_bytes: usize) -> Vec<u8> {
    for value_bytes in 0..size_bytes {
        let batch = batch_with_value(base_offset, &vec![b'v'; value_bytes]);
        if batch.len() == size_bytes {
            return batch;
        }
    }
    panic!("no one-record batch of {size_bytes} bytes");
}

/// Batches for offsets 0, 1, … of `sizes` bytes each, one after another.
fn batches_of_sizes(sizes: &[usize]) -> Vec<u8> {
    let batches = sizes.iter().enumerate();
    batches
        .flat_map(|(offset, size)| batch_of_size(offset as i64, *size))
        .collect()
}

/// [`batches_of_sizes`] with `landed` written over them from `position` (a misdirected write),
/// longer if it reaches past their end.
fn landed_at(sizes: &[usize], position: usize, landed: Vec<u8>) -> Vec<u8> {
    let mut log = batches_of_sizes(sizes);
    let end = position + landed.len();
    log.resize(log.len().max(end), 0);
    log[position..end].copy_from_slice(&landed);
    log
}

/// A batch of one unkeyed record holding `value`, at `base_offset`.
fn batch_with_value(base_offset: i64, value: &[u8]) -> Vec<u8> {
    use seglog::format::batch::field;
    let mut batch = keyed_batch(None, Some(value), T0).to_vec();
    batch[field::BASE_OFFSET..field::BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    batch
}

/// sim_ops (helper run, 2026-11-30; minimised input
/// `AwAAAAAAAgAARjAwMDAwMDACAAAAMDAwMDAwMTQubQIEMDgw`): a plain power cut kept a segment's old
/// first sector (its synced batch, then zeros) and a new second sector holding all but the
/// first byte of a later unsynced batch — a byte that is 0 either way (the top byte of its base
/// offset). That batch passes its CRC although it starts in the invalid bytes' sector, and
/// recovery refused to open the partition ("damage to synced data"). A batch found there is
/// evidence only with a non-zero byte in that sector: this tail is cut, as a torn one.
#[test]
fn a_batch_whose_only_byte_in_the_torn_sector_is_zero_is_a_torn_tail() {
    let lost = batch_of_size(1, 511 - 270);
    let survived = batch_of_size(2, 73);
    assert_eq!(survived[0], 0, "the base offset's top byte");
    let log = [batch_of_size(0, 270), vec![0; lost.len()], survived].concat();
    assert_eq!(log.len(), 584);
    assert_cut_to(&log, 270, 1);
}

/// The same layout with the next batch starting 12 bytes before the sector's end (its base
/// offset and length there, non-zero): the sector holds new bytes, so the invalid bytes before
/// them in that sector were written whole — damage, and the partition is refused.
#[test]
fn a_batch_with_new_bytes_in_the_torn_sector_is_damage_not_a_torn_tail() {
    let lost = batch_of_size(1, 500 - 270);
    let torn_sector = [vec![0; lost.len()], batch_of_size(2, 84)].concat();
    assert_refused(&[batch_of_size(0, 270), torn_sector].concat());
}

/// sim_ops (F7, a local run of the CI smoke's seeds, 2026-12-01; input
/// `AwAAAAAAAAACAGdGAgQAAUYwMDAwMDAwMDAwMDAwMDAwMDAzMC5pbmRleFdXPzBXV1dXAAIJAA0=`): an unsynced
/// batch at 504 spans a sector boundary; a power cut kept its second sector and lost its first,
/// which held only the base offset (outside the CRC) and reads as zeros. The batch passes its
/// CRC with base offset 0 where 1 is next, and recovery refused the partition as damage. Its
/// first sector holds what was there before, so it is a torn write: cut.
#[test]
fn a_batch_whose_first_sector_reverted_to_zeros_is_a_torn_tail() {
    let mut torn = batch_of_size(1, 73);
    torn[..8].fill(0);
    assert_cut_to(&[batch_of_size(0, 504), torn].concat(), 504, 1);
}

/// The same with prewritten space there before: the first sector reverted to the end of a stamp.
#[test]
fn a_batch_whose_first_sector_reverted_to_prewritten_space_is_a_torn_tail() {
    use seglog::format::prewrite::prewrite_bytes;
    let mut log = vec![0u8; 490];
    log.extend(prewrite_bytes(490, 2000));
    // The batch at 1016 kept all but its base offset, where the stamp written for 1002 was.
    let synced = batch_of_size(0, 1016);
    log[..1016].copy_from_slice(&synced);
    let torn = batch_of_size(1, 100);
    log[1024..1116].copy_from_slice(&torn[1024 - 1016..]);
    assert_cut_to(&log, 1016, 1);
}

/// A batch whose first sector holds a base offset other than the next one (not zeros, not
/// prewritten space) was written whole there: damage, refused.
#[test]
fn a_batch_spanning_sectors_with_a_wrong_base_offset_is_refused() {
    assert_refused(&[batch_of_size(0, 504), batch_of_size(7, 73)].concat());
}

/// sim_ops (F9, a local CI-like run, 2026-12-01; input
/// `AwAAAAAAAADnNjE1LmluZDAwMFsAMDI5LmluMDAwMDAwMDD//////////////zAw//////9kZXhXVz9XV3hleD8wV1dXVwACCQAN`):
/// a misdirected write of the batch for offset 2 landed at 512, over the synced batch for offset
/// 1 at 504 (all but its base offset). The batch at 504 failed its CRC, its header (across two
/// sectors) did not parse, and no batch for offset 1 was anywhere: recovery cut offset 1, which
/// was acknowledged. A batch starting inside the header that belongs at 504 was never written
/// there by a torn write: refused.
#[test]
fn a_batch_found_inside_the_header_of_the_invalid_one_is_damage_not_a_torn_tail() {
    assert_refused(&landed_at(&[504, 73], 512, batch_of_size(2, 82)));
}

/// The same further on: the batch for offset 2 landed at 1024, inside the batch for offset 1
/// (504 to 1104), whose header crosses a sector boundary but is intact and names offset 1: the
/// extent it claims holds the batch that follows it, so it was written whole and then damaged.
#[test]
fn a_batch_found_inside_the_extent_a_header_across_sectors_claims_is_damage() {
    assert_refused(&landed_at(&[504, 600], 1024, batch_of_size(2, 82)));
}

/// sim_ops (F11, a local CI-like run, 2026-12-01; input
/// `A4AAAAMAAABGAAAATQQCAiAgIAEEIAFGAgRjNTg5/zBGAgQAKQIATgQAAyYCBEwAAAAAAAAA//8wMDBkYsMEHgIBHgAB//8=`):
/// a misdirected write of the batch for offset 3 landed at 512, over the end of the synced batch
/// for offset 1 (342 to 553) and the start of the one for offset 2. The batch at 342 failed its
/// CRC; the one that landed carries neither the offset expected nor the one after the batch at
/// 342, so recovery cut offsets 1-3, which were acknowledged. A batch that starts inside the
/// extent the invalid batch's intact header claims and reaches past it is neither that batch's
/// own bytes nor what a crash leaves there: refused.
#[test]
fn a_batch_reaching_past_the_extent_the_invalid_one_claims_is_damage() {
    assert_refused(&landed_at(&[342, 211, 73], 512, batch_of_size(3, 73)));
}

/// A batch stored in a record's value lies inside its batch's extent: when that batch is torn
/// (its second sector lost), the stored batch passes its CRC with later offsets and is no
/// evidence of damage. The tail is cut.
#[test]
fn a_batch_stored_in_a_torn_batchs_value_does_not_make_it_damage() {
    let synced = batch_of_size(0, 100);
    let mut value = batch_of_size(9, 73);
    value.resize(600, b'v');
    let torn = batch_with_value(1, &value);
    let mut log = [synced.clone(), torn].concat();
    log[512..].fill(0);
    assert_cut_to(&log, synced.len() as u64, 1);
}

/// sim_ops (F14, a CI-like local run, 2026-12-01; input
/// `AwAAAAAAADAKgAA1TQIATgQAJgP/LgA5YmQ3NDk5ZDBmZGLDAQAAAAAAAAQEHgIBXgAB//8=`): three unsynced
/// batches, the last at 504 across a sector boundary; a crash lost the first sector and kept the
/// second. The last batch then passes its CRC with its base offset (in the lost sector) read as
/// 0, the offset expected at the empty segment's start, and recovery took it for the batch for
/// offset 0 written to the wrong place, refusing the partition. A batch whose bytes in its first
/// sector are what a crash leaves there says nothing of its offset: the tail is cut.
#[test]
fn a_batch_whose_lost_first_sector_held_only_its_base_offset_is_not_misplaced() {
    let mut torn = batch_of_size(5, 73);
    torn[..8].fill(0);
    assert_cut_to(&[vec![0u8; 504], torn].concat(), 0, 0);
}

/// sim_ops (F15, a CI-like local run, 2026-12-01; input
/// `AwAAAAAAAADnNjGbm5ubm5ubm5ubWwAwMjkuaW4wMP////////8wMP//AAAA/wD/////////MDD//wAAAP8AAAD/`):
/// a misdirected prewrite of zeros landed over the synced batch for offset 1 (448 to 529, across
/// a sector boundary), and the next batch was written right after it; a crash put back the first
/// sector. The batch at 448 failed its CRC with its second sector's bytes zeros, which reads as a
/// torn tail, but the next batch, intact, starts in that same sector: the sector was kept, so the
/// batch's bytes there were written whole and then damaged. Refused.
#[test]
fn a_batch_whose_last_sector_holds_the_next_batch_is_damage_not_a_torn_tail() {
    let mut log = batches_of_sizes(&[448, 81, 85]);
    log[512..529].fill(0);
    assert_refused(&log);
}

/// The same with the batch ending at a sector boundary: the next batch starts in a sector of its
/// own, which a crash may keep while losing the one before. A torn tail, cut.
#[test]
fn a_next_batch_in_a_sector_of_its_own_does_not_make_a_torn_batch_damage() {
    let mut log = batches_of_sizes(&[448, 576, 85]);
    log[512..1024].fill(0);
    assert_cut_to(&log, 448, 1);
}

/// sim_ops (F18, a CI-like local run, 2026-12-01): the batch for offset 2 landed at 512, a byte
/// before the synced batch for offset 1 (513 to 586), over that batch and the last byte of the
/// one before, a zero like the landed batch's first (the top of its base offset). The batch
/// before still passed its CRC, the one at 513 failed, and nothing after it did: recovery cut
/// offsets 1 and 2, acknowledged. A batch of the expected offset or later that passes its CRC,
/// starts in the invalid bytes' sector before them and reaches past their start was written over
/// them: refused.
#[test]
fn a_batch_starting_just_before_the_invalid_one_and_reaching_into_it_is_damage() {
    let mut log = batches_of_sizes(&[513, 73]);
    let landed = batch_of_size(2, 73);
    assert_eq!((log[512], landed[0]), (0, 0));
    log[512..585].copy_from_slice(&landed);
    assert_refused(&log);
}

/// sim_crash (misdirected writes, seed 5080 once producer snapshots were written, 2026-12-07): an
/// `O_DIRECT` rewrite of the block holding the batches for offsets 0 and 1 (the latter at 508,
/// four bytes before a sector boundary) landed at 2048 and was synced: the batch for offset 1
/// was acknowledged. Recovery found zeros at 508 and the batch for offset 1 at 2556, but took it
/// for a torn write whose first sector was lost, since its four bytes there (the top of its base
/// offset) are zeros: it cut acknowledged records. A lost first sector holding at most the top
/// four bytes of the base offset cannot make a batch read as the expected offset (the offsets of
/// one segment lie within 2^31 of each other): the batch is misplaced, and the partition refused.
#[test]
fn a_misplaced_batch_with_only_its_base_offsets_top_bytes_in_its_first_sector_is_damage() {
    let written = batches_of_sizes(&[508, 73]);
    let mut log = written.clone();
    log[508..].fill(0);
    log.resize(2048, 0);
    log.extend_from_slice(&written);
    assert_eq!(&log[2556..2560], &[0, 0, 0, 0]);
    assert_refused(&log);
}

/// Recovery of `log` (a segment based at 0) cuts it as a torn tail: the segment keeps its first
/// `kept_bytes`, and its next offset is `next_offset`.
fn assert_cut_to(log: &[u8], kept_bytes: u64, next_offset: u64) {
    let (_dir, loaded) = load_segment(log, 0, seglog::segment::recovery::LoadMode::Recover);
    let segment = loaded.unwrap().segment;
    assert_eq!(segment.size_bytes(), kept_bytes);
    assert_eq!(segment.next_offset().0, next_offset);
}

/// Recovery of `log` (a segment based at 0) refuses it as damage (`Corrupt`), cutting nothing.
fn assert_refused(log: &[u8]) {
    let (_dir, loaded) = load_segment(log, 0, seglog::segment::recovery::LoadMode::Recover);
    let error = loaded.unwrap_err();
    assert!(
        matches!(error, seglog::error::StorageError::Corrupt { .. }),
        "{error}"
    );
}
