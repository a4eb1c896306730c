//! Named failpoints at every step of append, flush, roll, checkpoint, compaction swap and
//! retention deletion, for crash-matrix tests (`tests/failpoints.rs`).
//!
//! Built only with the `failpoints` feature (the `fail` crate); without it `failpoint!` expands
//! to nothing. A test configures a point by name (`fail::cfg`), e.g. `return` to make the step fail
//! with an injected I/O error, or a callback that aborts the process to crash right there. The
//! names are listed in [`NAMES`], which the crash-matrix test walks.

/// Every failpoint, in the order a full workload passes them.
pub const NAMES: &[&str] = &[
    "append.before_write",
    "append.after_write",
    "flush.before_sync",
    "flush.after_sync",
    "roll.after_seal",
    "roll.after_create",
    "checkpoint.after_tmp_write",
    "checkpoint.after_rename",
    "retention.before_rename",
    "retention.before_dir_sync",
    "retention.before_unlink",
    "compaction.after_cleaned_written",
    "compaction.after_swap_rename",
    "compaction.after_swap_dir_sync",
    "compaction.after_deleted_renames",
    "compaction.after_live_rename",
    "compaction.after_live_dir_sync",
];

/// The error a `return` failpoint makes its step fail with.
#[cfg(feature = "failpoints")]
pub(crate) fn injected(name: &str) -> crate::error::StorageError {
    crate::error::StorageError::io(
        "failpoint",
        std::path::Path::new(name),
        std::io::Error::other(format!("failpoint {name}")),
    )
}

/// `failpoint!("name")` in a function returning `Result<_, StorageError>` (or an error type
/// with `From<StorageError>`): with the `failpoints` feature, the named point's configured action
/// runs there (`return` makes the function return the injected error).
macro_rules! failpoint {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        fail::fail_point!($name, |_| Err(crate::failpoint::injected($name).into()));
    };
}

pub(crate) use failpoint;
