//! Walking the batches of a `.log` file read-only, through the library's `LogScanner`.
//!
//! Two views: [`BatchWalker`] yields whole CRC-checked batches and steps over a batch whose CRC
//! fails (its framing is still sound), stopping only where the framing itself breaks; and
//! [`LogLayout`] records where each batch starts and which offsets it holds, from headers only,
//! which is what index entries are checked against.

use std::path::Path;

use anyhow::Context;
use seglog::format::prewrite;
use seglog::format::{Batch, BatchHeader, DecodeError};
use seglog::io::StorageFile;
use seglog::segment::scan::{LogScanner, ScanStep};

use crate::read_only::ReadOnlyFile;

/// One step of a [`BatchWalker`].
#[derive(Debug)]
pub enum WalkStep {
    /// A batch whose framing, magic and CRC are valid.
    Valid { position: u64, batch: Batch },
    /// A well-framed batch whose contents are corrupt (CRC mismatch); the walk can go on after it.
    Corrupt {
        position: u64,
        header: BatchHeader,
        reason: String,
    },
    /// The framing breaks here (torn tail, bad length or magic): nothing after it can be read.
    Stop { position: u64, reason: String },
    /// The end of the file, exactly after the last batch.
    End,
}

/// Yields the batches of a `.log` from position 0 to `end`.
pub struct BatchWalker<'a> {
    scanner: LogScanner<'a>,
    stopped: bool,
}

impl<'a> BatchWalker<'a> {
    pub fn new(file: &'a ReadOnlyFile, end: u64) -> BatchWalker<'a> {
        BatchWalker {
            scanner: LogScanner::new(file, file.path(), 0, end),
            stopped: false,
        }
    }

    pub fn next_step(&mut self) -> anyhow::Result<WalkStep> {
        if self.stopped {
            return Ok(WalkStep::End);
        }
        let step = match self.scanner.next_batch()? {
            ScanStep::Item { position, item } => WalkStep::Valid {
                position,
                batch: item,
            },
            ScanStep::End => WalkStep::End,
            ScanStep::Invalid {
                position,
                error: error @ DecodeError::CrcMismatch { .. },
            } => self.step_over_corrupt(position, &error)?,
            ScanStep::Invalid { position, error } => WalkStep::Stop {
                position,
                reason: describe_decode_error(&error),
            },
        };
        self.stopped = matches!(step, WalkStep::Stop { .. });
        Ok(step)
    }

    /// The batch at `position` failed its CRC but its prefix was sound: read its header and move
    /// past it, so the batches after it are still checked.
    fn step_over_corrupt(
        &mut self,
        position: u64,
        error: &DecodeError,
    ) -> anyhow::Result<WalkStep> {
        Ok(match self.scanner.next_header()? {
            ScanStep::Item { item, .. } => WalkStep::Corrupt {
                position,
                header: item,
                reason: describe_decode_error(error),
            },
            ScanStep::Invalid { position, error } => WalkStep::Stop {
                position,
                reason: describe_decode_error(&error),
            },
            ScanStep::End => WalkStep::End,
        })
    }
}

/// A reason for a human: the library's wording, except for a batch that runs past the end of the
/// file, which the scanner reports as truncation.
pub fn describe_decode_error(error: &DecodeError) -> String {
    match error {
        DecodeError::Truncated {
            needed, available, ..
        } => format!(
            "incomplete batch: {needed} bytes needed but only {available} left in the file \
             (a torn write, or a corrupt length field)"
        ),
        other => other.to_string(),
    }
}

/// Where one batch sits and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpan {
    pub position: u64,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

impl BatchSpan {
    pub fn new(position: u64, header: &BatchHeader) -> BatchSpan {
        BatchSpan {
            position,
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            max_timestamp: header.max_timestamp,
        }
    }
}

/// Where the readable part of a `.log` ends early, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanStop {
    pub position: u64,
    pub reason: String,
}

/// The batches of one `.log`, in file order.
#[derive(Debug, Clone, Default)]
pub struct LogLayout {
    pub size_bytes: u64,
    pub batches: Vec<BatchSpan>,
    pub stop: Option<ScanStop>,
}

impl LogLayout {
    /// Reads the batch headers of the `.log` at `path` (framing only, no CRC check).
    pub fn read(path: &Path) -> anyhow::Result<LogLayout> {
        let file = ReadOnlyFile::open(path)?;
        let size_bytes = file.length()?;
        let mut scanner = LogScanner::new(&file, path, 0, size_bytes);
        let mut layout = LogLayout {
            size_bytes,
            ..LogLayout::default()
        };
        loop {
            match scanner.next_header()? {
                ScanStep::Item { position, item } => {
                    layout.batches.push(BatchSpan::new(position, &item))
                }
                ScanStep::End => return Ok(layout),
                ScanStep::Invalid { position, error } => {
                    layout.stop = Some(ScanStop {
                        position,
                        reason: describe_decode_error(&error),
                    });
                    return Ok(layout);
                }
            }
        }
    }

    /// The batch that starts exactly at `position`.
    pub fn batch_at(&self, position: u64) -> Option<&BatchSpan> {
        let found = self
            .batches
            .binary_search_by_key(&position, |batch| batch.position);
        found.ok().map(|index| &self.batches[index])
    }

    /// The batch whose last offset is `offset`.
    pub fn batch_ending_at(&self, offset: i64) -> Option<&BatchSpan> {
        // Last offsets increase in a healthy log; fall back to a linear search in one that is not.
        match self
            .batches
            .binary_search_by_key(&offset, |batch| batch.last_offset)
        {
            Ok(index) => Some(&self.batches[index]),
            Err(_) => self
                .batches
                .iter()
                .find(|batch| batch.last_offset == offset),
        }
    }

    /// One past the last offset of the last readable batch; `base_offset` for an empty log.
    pub fn next_offset(&self, base_offset: i64) -> i64 {
        self.batches
            .last()
            .map_or(base_offset, |batch| batch.last_offset.saturating_add(1))
    }
}

/// At most this much past the last batch is read to tell prewritten space from damage (a log
/// prewrites at most 512 KiB ahead of its appends).
const PREWRITTEN_TAIL_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// What the `unread` bytes at `position`, where the batches stopped, are when they are not
/// damage: space a log synced in small steps prewrote ahead of its appends (FORMAT.md §7.4), or
/// zeros only (the padding and reserved space of an active segment written with `O_DIRECT` or
/// preallocated, §7.6; unwritten extents are skipped, not read). `None`: damage.
pub fn unwritten_tail(
    file: &ReadOnlyFile,
    position: u64,
    unread: u64,
) -> anyhow::Result<Option<&'static str>> {
    let context = || format!("cannot read {}", file.path().display());
    let end = position + unread;
    if unread <= PREWRITTEN_TAIL_BYTES_MAX {
        let bytes = file
            .read_to_vec(unread as usize, position)
            .with_context(context)?;
        if prewrite::is_prewritten_space(&bytes, position) {
            return Ok(Some("space prewritten ahead of the appends"));
        }
    }
    let zeros = seglog::io::first_non_zero_byte(file, position, end)
        .with_context(context)?
        .is_none();
    Ok(zeros.then_some(
        "zeros: the padding and reserved space of a segment written with O_DIRECT or preallocated",
    ))
}
