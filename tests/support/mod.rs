//! Helpers shared by the library's test files: record batches, log and engine configurations,
//! scratch directories, partition logs and engines opened over `storage_from_env()`, reading
//! back what they serve, consumer groups, and the recovery scenarios' logs. Each test file says
//! `mod support;` and uses what it needs.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod batches;
pub mod configs;
pub mod crash;
pub mod dirs;
pub mod engines;
pub mod groups;
pub mod hooks;
pub mod logs;
pub mod recovery;

/// Asserts that `$value` matches `$pattern` (with an optional `if` guard), showing the value
/// when it does not.
#[allow(unused_macros)]
macro_rules! assert_matches {
    ($value:expr, $pattern:pat $(if $guard:expr)? $(,)?) => {
        match $value {
            $pattern $(if $guard)? => {}
            ref other => panic!("{other:?} does not match {}", stringify!($pattern)),
        }
    };
}
#[allow(unused_imports)]
pub(crate) use assert_matches;

/// Asserts that `$result` is the error `$error::OffsetOutOfRange` for offset `$requested` of a
/// log whose offsets run from `$start` to `$end`.
#[allow(unused_macros)]
macro_rules! assert_out_of_range {
    ($result:expr, $error:ident, $requested:expr, $start:expr, $end:expr) => {
        match $result {
            Err($error::OffsetOutOfRange {
                requested,
                log_start_offset,
                log_end_offset,
            }) => assert_eq!(
                (requested, log_start_offset, log_end_offset),
                (
                    seglog::types::Offset($requested),
                    seglog::types::Offset($start),
                    seglog::types::Offset($end),
                )
            ),
            other => panic!("offset {} gave {other:?}", $requested),
        }
    };
}
#[allow(unused_imports)]
pub(crate) use assert_out_of_range;
