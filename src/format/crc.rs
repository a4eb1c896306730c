//! CRC-32C (Castagnoli; `CRC-32/ISCSI` in the Rocksoft catalogue): the checksum of a RecordBatch
//! v2 and of a prewrite stamp (FORMAT.md §2.3 and §7.4).
//!
//! Computed by `crc-fast`, which folds with carry-less multiplication (`VPCLMULQDQ` on AVX-512,
//! `PCLMULQDQ` otherwise) beside the `crc32` instruction, choosing at run time: faster than the
//! `crc32c` crate's three interleaved `crc32` streams. The tests check it against `crc32c` as an
//! independent oracle.

/// The CRC-32C of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes);
    // A CRC-32 is 32 bits wide; `checksum` returns it in a u64 shared with the CRC-64s.
    crc as u32
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::indexing_slicing,
        reason = "test code: an index out of range fails the test"
    )]

    use super::*;

    #[test]
    fn the_catalogue_check_value_of_123456789() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn every_length_and_alignment_agrees_with_the_crc32c_crate() {
        let bytes: Vec<u8> = (0..70_000u32).map(|i| (i * 131 % 251) as u8).collect();
        let lengths = (0..300).chain([511, 512, 513, 4095, 4096, 10_240, 65_536, 69_000]);
        for length in lengths {
            for start in [0, 1, 3, 7, 13] {
                let slice = &bytes[start..start + length];
                assert_eq!(crc32c(slice), ::crc32c::crc32c(slice), "{start}+{length}");
            }
        }
    }
}
