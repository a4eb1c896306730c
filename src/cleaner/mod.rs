//! The cleaner: retention (deleting old segments by time, size and log start offset) and log
//! compaction. Retention planning is pure ([`retention_plan::plan_retention`]) and applied by the
//! owning shard, to the partitions the cleaner's thread found due from their files
//! ([`disk_view`]); compaction's reading and writing ([`log_cleaner`]) runs on the engine's
//! cleaner thread, and only the swap of each cleaned group runs on the owning shard, so partition
//! state keeps a single writer.

pub mod batch_cleaning;
pub mod disk_view;
pub mod log_cleaner;
pub mod offset_map;
pub mod retention_plan;
pub mod scrub;
pub mod throttle;
