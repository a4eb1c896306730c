//! What makes a directory a seglog data directory, and the check every command makes before it
//! reads or writes one.
//!
//! A directory is a **seglog data directory** when it holds, at its top level, one of the files the
//! engine writes there — the topic registry `seglog-topics`, the lock file `.lock`, or one of
//! Kafka's log-directory files `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
//! `cleaner-offset-checkpoint`, `.kafka_cleanshutdown` — or, failing those, a partition directory
//! (`<topic>-<partition>`) whose first segment starts with a valid RecordBatch v2 (a partition
//! copied from a Kafka broker, with no log-directory files). A missing or empty directory is
//! *new*: the writing commands (`produce`, `topics create`) make a data directory of it, and every
//! other command refuses it. Any other directory is *foreign*, and every command refuses it,
//! naming it, before touching anything: a directory of unrelated files is never adopted, created
//! in or truncated.

use std::fs;
use std::io;
use std::path::Path;

use anyhow::{Context, bail};
use seglog::format::file_name::{
    CLEAN_SHUTDOWN_MARKER, CLEANER_OFFSET_CHECKPOINT, FileState, LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, SegmentFileKind, SegmentFileName,
    TOPIC_REGISTRY, parse_partition_dir_name,
};
use seglog::segment::scan::{LogScanner, ScanStep};

use crate::read_only::ReadOnlyFile;

/// Files the engine writes at the top of every data directory it opens.
const DATA_DIR_MARKERS: [&str; 6] = [
    TOPIC_REGISTRY,
    LOCK_FILE,
    RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT,
    CLEAN_SHUTDOWN_MARKER,
];

/// What a directory given as `--dir` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirState {
    /// Nothing exists at the path.
    Missing,
    /// A directory with no entries.
    Empty,
    /// A seglog (or Kafka) data directory.
    DataDirectory,
    /// A non-empty directory that is not a data directory.
    Foreign,
}

/// Classifies `dir`, reading only directory listings and the first batch of at most one segment
/// per partition directory.
pub fn inspect(dir: &Path) -> anyhow::Result<DirState> {
    let metadata = match fs::metadata(dir) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(DirState::Missing),
        Err(error) => {
            if let Some(file) = dir.ancestors().skip(1).find(|path| path.is_file()) {
                bail!("{} is a file, not a directory", file.display());
            }
            return Err(error).with_context(|| format!("cannot stat {}", dir.display()));
        }
    };
    if metadata.is_file() {
        bail!("{} is a file, not a directory", dir.display());
    }
    if !metadata.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let names = list_names(dir)?;
    if names.is_empty() {
        return Ok(DirState::Empty);
    }
    if names
        .iter()
        .any(|name| DATA_DIR_MARKERS.contains(&name.as_str()))
    {
        return Ok(DirState::DataDirectory);
    }
    for name in &names {
        if parse_partition_dir_name(name).is_some() && first_segment_is_valid(&dir.join(name))? {
            return Ok(DirState::DataDirectory);
        }
    }
    Ok(DirState::Foreign)
}

/// For commands that only read, or change what exists (`topics alter|delete`, `clean`,
/// `consume --group`): `dir` must be a data directory.
pub fn require_data_dir(dir: &Path) -> anyhow::Result<()> {
    match inspect(dir)? {
        DirState::DataDirectory => Ok(()),
        DirState::Missing => bail!("data directory {} does not exist", dir.display()),
        DirState::Empty => bail!(
            "data directory {} is empty: it holds no topics",
            dir.display()
        ),
        DirState::Foreign => Err(foreign(dir)),
    }
}

/// For commands that may create a data directory (`produce`, `topics create`, `bench --dir`):
/// `dir` must be a data directory, empty, or missing.
pub fn require_data_dir_or_new(dir: &Path) -> anyhow::Result<()> {
    match inspect(dir)? {
        DirState::Foreign => Err(foreign(dir)),
        DirState::Missing | DirState::Empty | DirState::DataDirectory => Ok(()),
    }
}

fn foreign(dir: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "{} is not a seglog data directory (it holds no {TOPIC_REGISTRY}, {LOCK_FILE} or \
         checkpoint file, and no partition directory whose first segment starts with a valid \
         batch); refusing to touch it",
        dir.display()
    )
}

/// The names in `dir` (those that are not UTF-8 cannot be seglog's and are left out), sorted.
pub fn list_names(dir: &Path) -> anyhow::Result<Vec<String>> {
    let entries =
        fs::read_dir(dir).with_context(|| format!("cannot read directory {}", dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read directory {}", dir.display()))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Whether the partition directory `dir` holds a live `.log` and the one with the lowest base
/// offset starts with a whole, CRC-valid batch.
fn first_segment_is_valid(dir: &Path) -> anyhow::Result<bool> {
    if !dir.is_dir() {
        return Ok(false);
    }
    let first_log = list_names(dir)?
        .iter()
        .filter_map(|name| SegmentFileName::parse(name))
        .filter(|parsed| parsed.state == FileState::Live && parsed.kind == SegmentFileKind::Log)
        .min();
    let Some(first_log) = first_log else {
        return Ok(false);
    };
    let path = first_log.path_in(dir);
    let file = ReadOnlyFile::open(&path)?;
    let mut scanner = LogScanner::new(&file, &path, 0, file.length()?);
    Ok(matches!(
        scanner
            .next_batch()
            .with_context(|| format!("cannot read {}", path.display()))?,
        ScanStep::Item { .. }
    ))
}
