//! The cleaned end of a compacted log: the offset below which the cleaner may have rewritten
//! segments (and left gaps in their offsets). Segments at or above it were only ever appended
//! to, so their offsets are dense, and recovery and reads hold them to it: a batch that lands
//! over earlier ones there (a misdirected write, RELIABILITY.md R14) is damage, not compaction.
//!
//! Kept in `seglog-cleaned-end` in the partition directory (FORMAT.md § Cleaned end): a version
//! line `0` and the offset, written with the checkpoint protocol (`.tmp`, fsync, rename, directory
//! fsync) *before* a swap raises it, so that after any crash it is at or above every cleaned
//! segment. A compacted log without the file (made by Kafka, or by an older seglog) may have been
//! cleaned anywhere: it gets the file at its log end offset on its first open.

use std::path::Path;

use crate::error::StorageError;
use crate::io::Storage;
use crate::io::{read_small_file, sync_dir, write_durably};
use crate::types::Offset;

/// The file's name in the partition directory.
pub const CLEANED_END_FILE: &str = "seglog-cleaned-end";
const TMP_SUFFIX: &str = ".tmp";
const VERSION: &str = "0";

/// The recorded cleaned end, `None` when the file is missing or unreadable (then the log may
/// have been cleaned anywhere).
pub fn read(storage: &dyn Storage, dir: &Path) -> Result<Option<Offset>, StorageError> {
    let path = dir.join(CLEANED_END_FILE);
    if !storage.exists(&path) {
        return Ok(None);
    }
    let bytes = read_small_file(storage, &path)?;
    Ok(parse(&bytes))
}

/// Where the log's offsets become dense: its recorded cleaned end, whatever its policy is now (a
/// log compacted before its `cleanup.policy` changed to `delete` keeps the gaps the cleaner
/// left); without a record, 0 for a policy that does not compact (never cleaned), `None` for
/// one that does, or when the record is unreadable (it may have been cleaned anywhere).
/// `recorded`: whether the directory holds the file.
pub fn dense_from(
    storage: &dyn Storage,
    dir: &Path,
    compacts: bool,
    recorded: bool,
) -> Result<Option<Offset>, StorageError> {
    match (recorded, compacts) {
        (false, false) => Ok(Some(Offset(0))),
        (false, true) => Ok(None),
        (true, _) => read(storage, dir),
    }
}

fn parse(bytes: &[u8]) -> Option<Offset> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()? != VERSION {
        return None;
    }
    let offset = lines.next()?.parse().ok()?;
    lines.next().is_none().then_some(Offset(offset))
}

/// Records `offset` durably (the checkpoint protocol).
pub fn write(storage: &dyn Storage, dir: &Path, offset: Offset) -> Result<(), StorageError> {
    let path = dir.join(CLEANED_END_FILE);
    let tmp = dir.join(format!("{CLEANED_END_FILE}{TMP_SUFFIX}"));
    write_durably(
        storage,
        &tmp,
        format!("{VERSION}\n{}\n", offset.0).as_bytes(),
    )?;
    storage
        .rename(&tmp, &path)
        .map_err(|source| StorageError::io("rename", &tmp, source))?;
    sync_dir(storage, dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_its_own_format() {
        assert_eq!(parse(b"0\n42\n"), Some(Offset(42)));
        assert_eq!(parse(b"0\n42"), Some(Offset(42)));
        assert_eq!(parse(b"1\n42\n"), None);
        assert_eq!(parse(b"0\n-1\n"), None);
        assert_eq!(parse(b"0\n42\n7\n"), None);
        assert_eq!(parse(b""), None);
    }
}
