//! Sparse offset and time indexes: preallocated, memory-mapped files of fixed-size entries
//! (FORMAT.md § Offset index, § Time index).
//!
//! The search is a pure function over `&[u8]` ([`search`]); the files are [`mmap::MappedIndexFile`];
//! [`offset_index::OffsetIndex`] and [`time_index::TimeIndex`] add Kafka's rules on top.

mod entries;
pub mod mmap;
pub mod offset_index;
pub mod search;
pub mod time_index;

pub use entries::{IndexEntry, IndexFile};
pub use offset_index::OffsetIndex;
pub use time_index::TimeIndex;

use crate::types::Offset;

/// `offset` relative to a segment's `base_offset`, as both indexes store it; `None` below the
/// base offset or past the signed 32-bit field (`limits::RELATIVE_OFFSET_MAX`).
fn relative_offset(base_offset: Offset, offset: Offset) -> Option<u32> {
    offset
        .0
        .checked_sub(base_offset.0)
        .filter(|relative| *relative <= crate::limits::RELATIVE_OFFSET_MAX)
        .map(|relative| relative as u32)
}
