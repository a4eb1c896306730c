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
