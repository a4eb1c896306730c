//! Opening a data directory through the engine, the way every command that reads or writes data
//! does (`topics`, `produce`, `consume`); `dump` and `verify` never come here.
//!
//! The engine takes the directory's lock and recovers what an unclean shutdown left; the command
//! closes it at the end (`Engine::close`), which writes the checkpoints and the clean-shutdown
//! marker.

use std::path::Path;

use anyhow::{Context, bail};
use seglog::engine::{Engine, EngineConfig};

/// Opens (creating if missing) the data directory `dir`.
///
/// Shards are not pinned to cores: a command-line tool shares the machine with whatever else runs
/// there. The shard count stays the engine's default (one per core) so that appends to many
/// partitions are written in parallel; nothing on disk depends on it.
pub fn open_engine(dir: &Path) -> anyhow::Result<Engine> {
    let config = EngineConfig {
        pin_shards: false,
        ..EngineConfig::default()
    };
    Engine::open(dir, config)
        .with_context(|| format!("cannot open data directory {}", dir.display()))
}

/// Opens the data directory `dir`, which must exist (a command that only reads or changes topics
/// does not create one by mistake).
pub fn open_existing(dir: &Path) -> anyhow::Result<Engine> {
    if !dir.is_dir() {
        bail!("data directory {} does not exist", dir.display());
    }
    open_engine(dir)
}

/// Runs `command` on the engine, then closes it even if `command` failed, so that the next open
/// need not recover; the first error is the one reported.
pub fn with_engine<T>(
    engine: Engine,
    command: impl FnOnce(&Engine) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let outcome = command(&engine);
    let closed = engine.close().context("cannot close the data directory");
    let value = outcome?;
    closed?;
    Ok(value)
}
