//! The cleaner: retention (deleting old segments by time, size and log start offset) and, later,
//! compaction. Planning is pure ([`retention::plan_retention`]); the owning shard applies a plan
//! to its log, so partition state keeps a single writer.

pub mod compact;
pub mod offset_map;
pub mod retention;
