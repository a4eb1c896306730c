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
pub mod hooks;
pub mod logs;
