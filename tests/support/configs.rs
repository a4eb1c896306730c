//! Log configurations: small segments and index files, so that a test's few records span
//! several segments, and topic settings by name.

use seglog::config::LogConfig;

/// Segments of `segment_bytes`, index files of 4 KiB and an index entry every
/// `index_interval_bytes`.
pub fn small_segments(segment_bytes: u64, index_interval_bytes: u64) -> LogConfig {
    LogConfig::default()
        .with_segment_bytes(segment_bytes)
        .with_segment_index_bytes(4096)
        .with_index_interval_bytes(index_interval_bytes)
}

/// `config` with each `(name, value)` set as a topic's configuration sets it.
pub fn with_settings(mut config: LogConfig, settings: &[(&str, &str)]) -> LogConfig {
    for (name, value) in settings {
        config.set(name, value).unwrap();
    }
    config
}

/// `config` with `cleanup.policy=compact`.
pub fn compacted(config: LogConfig) -> LogConfig {
    with_settings(config, &[("cleanup.policy", "compact")])
}

/// `file.delete.delay.ms` of the retention tests' logs.
pub const DELAY_MS: i64 = 60_000;

/// The retention tests' log: segments of 1,100 bytes with 4 KiB indexes, `.deleted` files kept
/// [`DELAY_MS`], and `settings`.
pub fn retention_config(settings: &[(&str, &str)]) -> LogConfig {
    let delay = DELAY_MS.to_string();
    let config = with_settings(
        small_segments(1100, 4096),
        &[("file.delete.delay.ms", &delay)],
    );
    with_settings(config, settings)
}
