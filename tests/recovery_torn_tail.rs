//! Recovery of a partition log whose tail a crash or a disk damaged: a last batch torn at every
//! byte, a bit flipped in it (inside the CRC: cut as a torn write; in the base offset, outside
//! it: refused as damage), garbage after it, a copy of it after it (a misdirected write:
//! refused), and a corrupt batch followed in its sector by a valid one (refused); and an unclean
//! reopen of an undamaged log, which loses nothing.
//!
//! How: a log of several segments written over the backend `SEGLOG_IO_BACKEND` names and left
//! as a crash leaves it (`support::recovery::CrashedLog`: `segment.bytes` = 1024,
//! `index.interval.bytes` = 64, the active segment holding at least three batches, and the
//! recovery point it had), copied for every case, damaged the way the case says, and the
//! partition log reopened directly as after the crash (no clean shutdown, recovering from that
//! recovery point, or from offset 0 where the case says): every complete batch
//! before the damage is served with identical bytes, nothing after it is, the log end offset is
//! the next offset of the last complete batch, a new append gets exactly that offset, and
//! lookups by timestamp agree with the records' own timestamps. Nothing may panic: corrupt input
//! gives truncation or a typed error.
//!
//! Issue 2: storage core.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

use bytes::Bytes;
use support::dirs::flip_byte;
use support::recovery::*;

mod support;

#[test]
fn a_torn_last_batch_is_cut_at_every_byte_position() {
    let crashed = CrashedLog::new();
    let (start, end) = crashed.last_batch_range();
    assert!(end - start > 61, "the last batch has records");
    for length in start..end {
        let (work, active_log) = crashed.copy();
        truncate_file(&active_log, length);
        assert_last_batch_dropped(
            &crashed,
            work.path(),
            length - start,
            &format!("cutting the .log to {length} bytes"),
        );
    }
}

/// A bit flipped where the CRC covers it is indistinguishable from a torn write of the last
/// batch: the batch is cut. A flip in the base offset (outside the CRC) leaves a batch that
/// passes its CRC with offsets out of order: damage, not a torn write, so the partition is
/// refused rather than cut.
#[test]
fn a_flipped_bit_in_the_last_batch_truncates_it() {
    let crashed = CrashedLog::new();
    let (start, end) = crashed.last_batch_range();
    let size = end - start;
    // Header fields (base offset sign and high word, batch length, magic, CRC, attributes,
    // last offset delta, both timestamps, producer id/epoch, base sequence, record count), and
    // record bytes: first, middle, last.
    let mut positions: Vec<(u64, u8)> = vec![
        (0, 7),
        (3, 0),
        (8, 7),
        (10, 0),
        (11, 0),
        (11, 5),
        (16, 0),
        (16, 7),
        (17, 0),
        (20, 7),
        (21, 0),
        (22, 1),
        (24, 3),
        (26, 0),
        (30, 2),
        (42, 0),
        (45, 4),
        (52, 0),
        (55, 6),
        (60, 0),
        (60, 1),
        (61, 0),
        (62, 0),
        (size / 2, 3),
        (size - 2, 0),
        (size - 1, 7),
    ];
    positions.sort_unstable();
    for (position, bit) in positions {
        let (work, active_log) = crashed.copy_flipping(position, 1 << bit);
        let what = format!("flipping bit {bit} of byte {position} of the last batch");
        if position < 8 {
            assert_refused_untouched(&active_log, crashed.recovery_point, &what);
        } else {
            assert_last_batch_dropped(&crashed, work.path(), size, &what);
        }
    }
}

#[test]
fn a_flipped_bit_in_the_leader_epoch_is_not_detected_as_in_kafka() {
    // `partitionLeaderEpoch` (bytes 12..16) is outside the CRC, in Kafka as here: the batch is
    // kept and served with the epoch as found.
    let crashed = CrashedLog::new();
    let (work, _) = crashed.copy_flipping(14, 0x10);
    let (mut log, _) = crashed.open(work.path()).unwrap();
    let mut expected = crashed.batches.clone();
    let mut last = expected.pop().unwrap().bytes.to_vec();
    last[14] ^= 0x10;
    expected.push(StoredBatch {
        base: crashed.last().base,
        last: crashed.last().last,
        bytes: Bytes::from(last),
    });
    assert_serves(&mut log, &expected);
}

#[test]
fn garbage_after_the_last_batch_is_truncated_on_unclean_reopen() {
    let crashed = CrashedLog::new();
    let end = crashed.last().last + 1;
    let mut random = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut garbage: Vec<(String, Vec<u8>)> = [1usize, 5, 12, 16, 17, 60, 61, 62, 200, 1000]
        .into_iter()
        .map(|length| (format!("{length} random bytes"), random.bytes(length)))
        .collect();
    garbage.push(("4096 zero bytes".into(), vec![0; 4096]));
    // A plausible header (next offset, magic 2) whose length runs far past the end.
    let mut huge = Vec::new();
    huge.extend_from_slice(&(end as i64).to_be_bytes());
    huge.extend_from_slice(&i32::MAX.to_be_bytes());
    huge.extend_from_slice(&(-1i32).to_be_bytes());
    huge.push(2);
    huge.extend(random.bytes(100));
    garbage.push(("a header with a huge length".into(), huge));
    // A plausible header whose length fits but whose CRC cannot match.
    let mut bad_crc = Vec::new();
    bad_crc.extend_from_slice(&(end as i64).to_be_bytes());
    bad_crc.extend_from_slice(&60i32.to_be_bytes());
    bad_crc.extend_from_slice(&(-1i32).to_be_bytes());
    bad_crc.push(2);
    bad_crc.extend(random.bytes(55));
    garbage.push(("a header with a bad CRC".into(), bad_crc));
    for (what, bytes) in garbage {
        let (work, active_log) = crashed.copy();
        append_to_file(&active_log, &bytes);
        let (mut log, report) = crashed.reopen_serving(work.path());
        assert_appends_at(&mut log, end);
        assert_eq!(report.bytes_truncated, bytes.len() as u64, "{what}");
        assert_eq!(
            report.truncated_at.unwrap().1,
            crashed.last_batch_range().1,
            "{what}"
        );
    }
}

/// A copy of the last batch after it (torn or whole) carries offsets that were never written
/// there: a misdirected write, not a torn one (R14). The partition is refused, nothing cut.
#[test]
fn a_copy_of_the_last_batch_after_it_is_refused_not_truncated() {
    let crashed = CrashedLog::new();
    let last = crashed.last().bytes.clone();
    for (what, bytes) in [
        ("a torn copy", last[..last.len() - 3].to_vec()),
        ("a whole copy", last.to_vec()),
    ] {
        let (_work, active_log) = crashed.copy();
        append_to_file(&active_log, &bytes);
        assert_refused_untouched(&active_log, crashed.recovery_point, what);
    }
}

#[test]
fn an_unclean_reopen_of_an_undamaged_log_loses_nothing() {
    let crashed = CrashedLog::new();
    let (work, _) = crashed.copy();
    // From offset 0 (no recovery-point checkpoint), every segment is re-validated.
    let dir = partition_dir(work.path());
    let (mut log, report) = reopen_serving(&dir, false, 0, &crashed.batches);
    let segments = log.segment_count();
    assert_appends_at(&mut log, crashed.last().last + 1);
    assert_eq!(report.segments_recovered, segments);
    assert_eq!(report.bytes_truncated, 0);
    assert_eq!(report.truncated_at, None);
    assert_eq!(report.segments_deleted, 0);
}

/// In the tail segment a batch that fails its CRC with a valid batch after it in the same
/// sector is not a torn write either (a crash keeps or loses a sector whole, and writes reach
/// the page cache in order): the partition is refused, nothing cut.
#[test]
fn a_corrupt_batch_followed_in_its_sector_by_a_valid_one_is_refused() {
    let closed = ClosedLog::new();
    // Opened as after a crash that left no recovery point: recovery starts at offset 0.
    let (_work, dir) = closed.copy();
    let logs = segment_logs(&dir);
    let victim = logs.last().unwrap();
    let in_victim = closed.batches_in(base_of(victim), u64::MAX);
    assert!(in_victim.len() >= 3, "the last segment holds batches");
    let bad_position = in_victim[0].bytes.len();
    let next_position = bad_position + in_victim[1].bytes.len();
    assert!(
        next_position < 512,
        "the next batch starts in the same sector"
    );
    flip_byte(victim, bad_position as u64 + 70, 0xff);
    assert_refused_untouched(victim, 0, "a corrupt middle batch");
}
