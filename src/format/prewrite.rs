//! Prewritten space: what a synced log's active `.log` holds past its batches (FORMAT.md §7.4).
//!
//! A sync of an append into blocks the file already has flushes the data alone; a sync of an
//! append that grows the file also makes the new blocks' allocation and the new length durable (a
//! journal commit, or the inode's and bitmaps' blocks written in place on ext4 without a
//! journal). So a log whose syncs each cover little writes the space ahead of its appends once,
//! and its appends then overwrite it (`Segment::prewrite_for`).
//!
//! The space is zeros with a *stamp* every [`STAMP_INTERVAL_BYTES`] from the start of each
//! write: a magic, the file position the stamp was written for, and a CRC-32C of the two. Zeros
//! alone would make a misdirected write of them (R14) indistinguishable from a lost tail: landed
//! over synced batches, they would read as a torn tail and be cut. A stamp away from its own
//! position shows that a write landed in the wrong place, and recovery reports it.

use super::crc::crc32c;

/// Marks a stamp.
const STAMP_MAGIC: [u8; 8] = *b"SGLGPRE1";
/// Magic, the position as 16 lowercase hex digits, a CRC-32C of both as 8: all ASCII, so no
/// byte of prewritten space is 2, a batch's magic: a scan that reads a header anywhere in it
/// (a torn tail's, recovery's search for the next batch) never takes it for a batch.
pub const STAMP_BYTES: usize = 32;
/// One stamp every this many bytes of a prewrite: at least one per device sector.
pub const STAMP_INTERVAL_BYTES: u64 = 512;

/// The bytes to prewrite at `position`: `length` zeros stamped from their first byte on.
pub fn prewrite_bytes(position: u64, length: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; length];
    let interval = STAMP_INTERVAL_BYTES as usize;
    for (offset, chunk) in (0u64..).step_by(interval).zip(bytes.chunks_mut(interval)) {
        if let Some(head) = chunk.get_mut(..STAMP_BYTES) {
            head.copy_from_slice(&stamp_for(position + offset));
        }
    }
    bytes
}

fn stamp_for(position: u64) -> [u8; STAMP_BYTES] {
    let mut stamp = [0u8; STAMP_BYTES];
    let (head, crc_digits) = stamp.split_at_mut(STAMP_CRC_AT);
    let (magic, position_digits) = head.split_at_mut(STAMP_MAGIC.len());
    magic.copy_from_slice(&STAMP_MAGIC);
    write_hex(position_digits, position);
    write_hex(crc_digits, u64::from(crc32c(head)));
    stamp
}

/// Where a stamp's CRC digits start: after the magic and the position's 16 digits.
const STAMP_CRC_AT: usize = 24;

/// `value`'s low `digits.len()` hex digits, most significant first, lowercase.
fn write_hex(digits: &mut [u8], value: u64) {
    let count = digits.len();
    for (index, digit) in digits.iter_mut().enumerate() {
        let nibble = ((value >> (4 * (count - 1 - index))) & 0xf) as u8;
        *digit = match nibble {
            0..=9 => b'0' + nibble,
            _ => b'a' + nibble - 10,
        };
    }
}

fn read_hex(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |value, digit| {
        let nibble = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => return None,
        };
        Some(value << 4 | u64::from(nibble))
    })
}

/// The position a stamp at the start of `bytes` was written for, if one is there intact.
fn stamp_position(bytes: &[u8]) -> Option<u64> {
    let stamp = bytes.get(..STAMP_BYTES)?;
    let (head, crc_digits) = stamp.split_at(STAMP_CRC_AT);
    let (magic, position_digits) = head.split_at(STAMP_MAGIC.len());
    if magic != STAMP_MAGIC || read_hex(crc_digits)? != u64::from(crc32c(head)) {
        return None;
    }
    read_hex(position_digits)
}

/// How many bytes at the start of `bytes` (the file's bytes from `position`) end a stamp that
/// began before `position`: an append that ends inside a stamp leaves the stamp's last bytes
/// just past the log end. All of `bytes` when they are shorter than that end and match it.
pub fn stamp_remainder_bytes(bytes: &[u8], position: u64) -> usize {
    (1..STAMP_BYTES)
        .filter_map(|before| {
            let start = position.checked_sub(before as u64)?;
            let stamp = stamp_for(start);
            let remainder = stamp.get(before..)?;
            let matched = remainder.len().min(bytes.len());
            (matched > 0 && bytes.get(..matched) == remainder.get(..matched)).then_some(matched)
        })
        .next()
        .unwrap_or(0)
}

/// Whether `bytes` (the file's bytes from `position`, where a scan of batches stopped, to the
/// end of the file) are prewritten space: zeros and stamps each at its own position, at least
/// one stamp, the first bytes perhaps the end of a stamp the last append cut. What a log synced
/// in small steps leaves past its batches when it was not closed; recovery cuts it.
pub fn is_prewritten_space(bytes: &[u8], position: u64) -> bool {
    let remainder = stamp_remainder_bytes(bytes, position);
    let rest = bytes.get(remainder..).unwrap_or_default();
    stamp_starts(rest).next().is_some()
        && check_prewritten(rest, position + remainder as u64, false).is_ok()
}

/// Whether `bytes` (the file's bytes from `position`) may be prewritten space or zeros: zeros
/// and stamps at their own positions, the first bytes perhaps the end of a stamp begun before
/// `position`, the last perhaps the start of one cut off by the end of `bytes`.
pub fn may_be_prewritten(bytes: &[u8], position: u64) -> bool {
    let remainder = stamp_remainder_bytes(bytes, position);
    let rest = bytes.get(remainder..).unwrap_or_default();
    let checked = check_prewritten(rest, position + remainder as u64, true);
    checked.is_ok_and(|checked| {
        let cut = rest.get(checked..).unwrap_or_default();
        cut.is_empty() || stamp_for(position + (remainder + checked) as u64).starts_with(cut)
    })
}

/// What a look at bytes past a log's batches found that a prewrite cannot explain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misplaced {
    /// An intact stamp at `at` written for `written_for`: a write landed in the wrong place.
    Stamp {
        /// The stamp's byte position in the file.
        at: u64,
        /// The position the stamp was written for.
        written_for: u64,
    },
    /// A non-zero byte outside any stamp at `at`, where only prewritten space should be.
    Data {
        /// The byte's position in the file.
        at: u64,
    },
}

impl Misplaced {
    /// Where in the file the misplaced bytes are.
    pub fn position(&self) -> u64 {
        match self {
            Misplaced::Stamp { at, .. } | Misplaced::Data { at } => *at,
        }
    }

    /// What was found and what it means, as one line (an error's or a recovery report's reason).
    pub fn describe(&self) -> String {
        match self {
            Misplaced::Stamp { at, written_for } => format!(
                "prewritten space stamped for position {written_for} lies at {at}: a write \
                 landed in the wrong place (a misdirected write)"
            ),
            Misplaced::Data { at } => {
                format!("data at {at} where only prewritten space belongs (a misdirected write?)")
            }
        }
    }
}

/// The first stamp in `bytes` (the file's bytes from `position`) that lies away from the
/// position it was written for. Other bytes may be anything (a torn tail's).
pub fn misplaced_stamp(bytes: &[u8], position: u64) -> Option<Misplaced> {
    stamp_starts(bytes).find_map(|index| {
        let at = position + index as u64;
        let written_for = stamp_position(bytes.get(index..)?)?;
        (written_for != at).then_some(Misplaced::Stamp { at, written_for })
    })
}

/// Where the stamp magic starts in `bytes`.
fn stamp_starts(bytes: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let magic = STAMP_MAGIC.as_slice();
    bytes
        .windows(magic.len())
        .enumerate()
        .filter(move |(_, window)| *window == magic)
        .map(|(index, _)| index)
}

/// Checks that `bytes` (the file's bytes from `position`) hold only prewritten space: zeros,
/// and stamps each at its own position. Returns how many bytes were checked: all of them, or,
/// when `more_follows`, up to a stamp cut off by their end (check it with the bytes after).
pub fn check_prewritten(
    bytes: &[u8],
    position: u64,
    more_follows: bool,
) -> Result<usize, Misplaced> {
    let mut index = 0usize;
    while let Some(rest) = bytes.get(index..).filter(|rest| !rest.is_empty()) {
        let zeros = rest.iter().take_while(|byte| **byte == 0).count();
        if zeros > 0 {
            index += zeros;
            continue;
        }
        if more_follows && rest.len() < STAMP_BYTES {
            return Ok(index);
        }
        let at = position + index as u64;
        match stamp_position(rest) {
            Some(written_for) if written_for == at => index += STAMP_BYTES,
            Some(written_for) => return Err(Misplaced::Stamp { at, written_for }),
            None => return Err(Misplaced::Data { at }),
        }
    }
    Ok(bytes.len())
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::indexing_slicing,
        reason = "test code: an index out of range fails the test"
    )]

    use super::*;

    #[test]
    fn prewritten_bytes_are_stamped_zeros_that_check_at_their_own_position_only() {
        let bytes = prewrite_bytes(1000, 4096);
        assert_eq!(bytes.len(), 4096);
        let stamps = stamp_starts(&bytes).count();
        assert_eq!(stamps, 8, "one per 512 bytes");
        assert_eq!(check_prewritten(&bytes, 1000, false), Ok(4096));
        assert_eq!(misplaced_stamp(&bytes, 1000), None);
        let landed_at = 1512;
        let expected = Misplaced::Stamp {
            at: landed_at,
            written_for: 1000,
        };
        assert_eq!(check_prewritten(&bytes, landed_at, false), Err(expected));
        assert_eq!(misplaced_stamp(&bytes, landed_at), Some(expected));
    }

    #[test]
    fn a_sector_head_may_be_prewritten_space_with_stamps_cut_at_either_end() {
        let bytes = prewrite_bytes(490, 2000);
        // From 1010 to the sector's end at 1024: the last bytes of the stamp written for 1002.
        let head = &bytes[1010 - 490..1024 - 490];
        assert!(may_be_prewritten(head, 1010));
        assert!(
            !may_be_prewritten(head, 1010 + 512),
            "away from its position"
        );
        // From 990 to 1024: zeros, then the first bytes of the stamp for 1002, cut.
        assert!(may_be_prewritten(&bytes[990 - 490..1024 - 490], 990));
        assert!(may_be_prewritten(&[0u8; 8], 504));
        let mut base_offset = [0u8; 8];
        base_offset[7] = 11;
        assert!(
            !may_be_prewritten(&base_offset, 504),
            "a batch's base offset"
        );
    }

    #[test]
    fn no_byte_of_prewritten_space_is_a_batch_magic() {
        let bytes = prewrite_bytes(0x0202_0202_0202, 64 * 1024);
        assert!(bytes.iter().all(|byte| *byte != 2));
        assert_eq!(stamp_position(&bytes), Some(0x0202_0202_0202));
    }

    #[test]
    fn a_short_prewrite_has_no_stamp_and_damaged_stamps_are_not_stamps() {
        assert!(
            prewrite_bytes(0, STAMP_BYTES - 1)
                .iter()
                .all(|byte| *byte == 0)
        );
        let mut bytes = prewrite_bytes(0, 1024);
        bytes[10] = b'7'; // the first stamp's position
        assert_eq!(
            misplaced_stamp(&bytes, 4096),
            Some(Misplaced::Stamp {
                at: 4096 + 512,
                written_for: 512
            })
        );
        assert_eq!(
            check_prewritten(&bytes, 0, false),
            Err(Misplaced::Data { at: 0 })
        );
    }

    #[test]
    fn a_stamp_cut_off_by_the_end_of_the_bytes_is_checked_with_the_bytes_after() {
        let bytes = prewrite_bytes(0, 2048);
        let cut = 512 + 10;
        assert_eq!(check_prewritten(&bytes[..cut], 0, true), Ok(512));
        assert_eq!(check_prewritten(&bytes[512..], 512, false), Ok(2048 - 512));
        assert_eq!(
            check_prewritten(&bytes[..cut], 0, false),
            Err(Misplaced::Data { at: 512 }),
            "at the end of the file, a partial stamp is not one"
        );
    }

    #[test]
    fn the_end_of_a_stamp_an_append_cut_is_recognised_and_nothing_else() {
        let bytes = prewrite_bytes(4096, 1024);
        let log_end = 4096 + 512 + 7;
        let past_end = &bytes[519..];
        assert_eq!(stamp_remainder_bytes(past_end, log_end), STAMP_BYTES - 7);
        assert_eq!(
            stamp_remainder_bytes(past_end, log_end + 1),
            0,
            "another position"
        );
        assert_eq!(
            stamp_remainder_bytes(&bytes[512..], 4096 + 512),
            0,
            "a whole stamp"
        );
        assert_eq!(stamp_remainder_bytes(&[0u8; 64], log_end), 0);
    }

    #[test]
    fn prewritten_space_is_told_from_zeros_and_from_a_torn_batch() {
        let bytes = prewrite_bytes(4096, 2048);
        assert!(is_prewritten_space(&bytes, 4096));
        assert!(
            is_prewritten_space(&bytes[7..], 4096 + 7),
            "after a cut stamp"
        );
        assert!(!is_prewritten_space(&bytes, 4096 + 512), "stamps elsewhere");
        assert!(!is_prewritten_space(&[0u8; 2048], 0), "zeros alone");
        let mut torn = bytes.clone();
        torn[600] = 2;
        assert!(!is_prewritten_space(&torn, 4096));
    }

    #[test]
    fn batch_bytes_past_the_log_end_are_not_prewritten_space() {
        let mut bytes = prewrite_bytes(0, 2048);
        bytes[700] = 2;
        assert_eq!(
            check_prewritten(&bytes, 0, false),
            Err(Misplaced::Data { at: 700 })
        );
        assert_eq!(misplaced_stamp(&bytes, 0), None, "stamps are all in place");
    }
}
