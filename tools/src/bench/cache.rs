//! Dropping a data set from the page cache before a cold read: `sync`, then `1` written to
//! `/proc/sys/vm/drop_caches` where permitted (root, outside a read-only `/proc/sys`), else
//! `posix_fadvise(POSIX_FADV_DONTNEED)` on every file of the data directory (pages of files
//! that are memory-mapped, the engine's indexes, may stay).

use std::fs::{self, File};
use std::path::Path;

use anyhow::Context;
use rustix::fs::Advice;
use seglog::engine::Engine;

/// How the page cache was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheDrop {
    DropCaches,
    Fadvise,
}

impl CacheDrop {
    pub fn name(self) -> &'static str {
        match self {
            CacheDrop::DropCaches => "drop_caches",
            CacheDrop::Fadvise => "fadvise",
        }
    }
}

/// Syncs everything the engine wrote, then drops it from the page cache.
pub fn drop_page_cache(engine: &Engine, dir: &Path) -> anyhow::Result<CacheDrop> {
    engine
        .flush_all()
        .context("cannot sync the data set before dropping the page cache")?;
    rustix::fs::sync();
    if fs::write("/proc/sys/vm/drop_caches", "1").is_ok() {
        return Ok(CacheDrop::DropCaches);
    }
    advise_dont_need(dir)?;
    Ok(CacheDrop::Fadvise)
}

/// `posix_fadvise(DONTNEED)` on every regular file under `path`.
pub fn advise_dont_need(path: &Path) -> anyhow::Result<()> {
    let metadata =
        fs::symlink_metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    if metadata.is_dir() {
        for entry in
            fs::read_dir(path).with_context(|| format!("cannot list {}", path.display()))?
        {
            advise_dont_need(&entry?.path())?;
        }
    } else if metadata.is_file() {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        rustix::fs::fadvise(&file, 0, None, Advice::DontNeed)
            .with_context(|| format!("posix_fadvise({}, DONTNEED) failed", path.display()))?;
    }
    Ok(())
}
