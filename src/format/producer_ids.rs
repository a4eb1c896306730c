//! The producer-id block file `seglog-producer-ids` (FORMAT.md § Producer-id block): the last
//! block of producer ids handed out, so that no id is given twice, across restarts included.
//!
//! ```text
//! 1
//! 1000 1999
//! ```
//!
//! Line 1 is the version; line 2 the block's first and last producer id, inclusive. An id is
//! handed out only after the block holding it is durable, so the next open starts after
//! `last`; the ids of the block not handed out before a restart are skipped, as Kafka skips
//! those of a broker's unfinished block.

use thiserror::Error;

const FILE_VERSION: &str = "1";

/// A block of producer ids, both ends inclusive: `0 <= first <= last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdBlock {
    /// The block's first producer id.
    pub first: i64,
    /// The block's last producer id.
    pub last: i64,
}

/// Why a producer-id block file cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("producer-id block: {reason}")]
pub struct ProducerIdBlockError {
    /// What is wrong with the file.
    pub reason: String,
}

/// The file's text.
pub fn encode(block: ProducerIdBlock) -> String {
    format!("{FILE_VERSION}\n{} {}\n", block.first, block.last)
}

/// Parses the file's bytes (untrusted: any content is refused or parsed, never a panic).
pub fn decode(bytes: &[u8]) -> Result<ProducerIdBlock, ProducerIdBlockError> {
    let refuse = |reason: &str| ProducerIdBlockError {
        reason: reason.to_owned(),
    };
    let text = std::str::from_utf8(bytes).map_err(|_| refuse("not UTF-8"))?;
    let mut lines = text.lines();
    if lines.next() != Some(FILE_VERSION) {
        return Err(refuse("unknown version line"));
    }
    let block_line = lines.next().ok_or_else(|| refuse("no block line"))?;
    if lines.any(|line| !line.is_empty()) {
        return Err(refuse("text after the block line"));
    }
    let mut words = block_line.split(' ');
    let (Some(first), Some(last), None) = (words.next(), words.next(), words.next()) else {
        return Err(refuse("the block line is not two ids"));
    };
    let parse = |word: &str| {
        word.parse::<i64>()
            .map_err(|_| refuse("an id is not a number"))
    };
    let block = ProducerIdBlock {
        first: parse(first)?,
        last: parse(last)?,
    };
    if block.first < 0 || block.last < block.first {
        return Err(refuse("the block's ends are out of order or negative"));
    }
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_reads_back_as_written() {
        let block = ProducerIdBlock {
            first: 1000,
            last: 1999,
        };
        assert_eq!(encode(block), "1\n1000 1999\n");
        assert_eq!(decode(encode(block).as_bytes()), Ok(block));
    }

    #[test]
    fn malformed_files_are_refused() {
        for bytes in [
            &b""[..],
            b"2\n0 999\n",
            b"1\n",
            b"1\n0\n",
            b"1\n0 999 3\n",
            b"1\n0 x\n",
            b"1\n-5 999\n",
            b"1\n999 0\n",
            b"1\n0 999\n5 6\n",
            b"1\n\xff 999\n",
            b"1\n0 99999999999999999999\n",
        ] {
            assert!(decode(bytes).is_err(), "{:?} was accepted", bytes);
        }
    }
}
