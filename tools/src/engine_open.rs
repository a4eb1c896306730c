//! Opening a data directory through the engine, the way every command that writes does
//! (`produce`, `topics create|alter|delete`, `consume --group`, `clean`); the commands that only
//! read never come here (they use `dir_view`).
//!
//! The engine takes the directory's lock and recovers what an unclean shutdown left; the command
//! closes it at the end (`Engine::close`), which writes the checkpoints and the clean-shutdown
//! marker.

use std::path::Path;

use anyhow::Context;
use seglog::engine::{Engine, EngineConfig, is_internal_topic};
use seglog::error::TopicError;
use seglog::types::TopicName;

use crate::data_dir::{require_data_dir, require_data_dir_or_new};

/// Opens (creating if missing) the data directory `dir`; a directory that is neither empty nor a
/// data directory is refused before anything is written.
///
/// Shards are not pinned to cores: a command-line tool shares the machine with whatever else runs
/// there. The shard count stays the engine's default (one per core) so that appends to many
/// partitions are written in parallel; nothing on disk depends on it.
pub fn open_engine(dir: &Path) -> anyhow::Result<Engine> {
    require_data_dir_or_new(dir)?;
    let config = EngineConfig::default().with_pin_shards(false);
    Engine::open(dir, config)
        .with_context(|| format!("cannot open data directory {}", dir.display()))
}

/// Opens the data directory `dir`, which must be one already (a command that changes what exists
/// does not create one by mistake).
pub fn open_existing(dir: &Path) -> anyhow::Result<Engine> {
    require_data_dir(dir)?;
    open_engine(dir)
}

/// Refuses an internal topic (`__consumer_offsets`, which only the engine's group coordinator
/// writes) before the data directory is opened, as the engine itself would refuse it:
/// `cannot <action> topic <topic>: topic <topic> is internal: ...`.
pub fn refuse_internal_topic(topic: &TopicName, action: &str) -> anyhow::Result<()> {
    if !is_internal_topic(topic.as_str()) {
        return Ok(());
    }
    let refusal = TopicError::InternalTopic {
        topic: topic.to_string(),
    };
    Err(anyhow::Error::new(refusal).context(format!("cannot {action} topic {topic}")))
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
