//! Small metadata files (checkpoints, the topic registry, the cleaner's `.cleaned` end): read
//! whole, written durably, and the directory syncs that make their names durable.

use std::fs::{File, TryLockError};
use std::path::Path;

use super::{OpenMode, Storage};
use crate::error::StorageError;

/// Files read whole (checkpoints, the topic registry) are at most this large.
const SMALL_FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Reads a small metadata file whole, at most `SMALL_FILE_BYTES_MAX` bytes of it.
pub(crate) fn read_small_file(storage: &dyn Storage, path: &Path) -> Result<Vec<u8>, StorageError> {
    let file = storage
        .open(path, OpenMode::Existing)
        .map_err(|source| StorageError::io("open", path, source))?;
    let length = file
        .length_bytes()
        .map_err(|source| StorageError::io("stat", path, source))?;
    let mut bytes = vec![0u8; length.min(SMALL_FILE_BYTES_MAX) as usize];
    let read = file
        .read_at(&mut bytes, 0)
        .map_err(|source| StorageError::io("read", path, source))?;
    bytes.truncate(read);
    Ok(bytes)
}

/// Writes `bytes` as the whole of `path` (created if needed) and syncs the file.
pub(crate) fn write_durably(
    storage: &dyn Storage,
    path: &Path,
    bytes: &[u8],
) -> Result<(), StorageError> {
    let file = storage
        .open(path, OpenMode::CreateOrOpen)
        .map_err(|source| StorageError::io("create", path, source))?;
    file.set_length_bytes(0)
        .and_then(|()| file.write_all_at(bytes, 0))
        .and_then(|()| file.sync_all())
        .map_err(|source| StorageError::io("write", path, source))
}

/// Takes an exclusive `flock` on the lock file `path` (created if needed), held while the returned
/// file is open; `None` while another opener holds it.
pub(crate) fn lock_exclusive(path: &Path) -> Result<Option<File>, StorageError> {
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| StorageError::io("open", path, source))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(source)) => Err(StorageError::io("lock", path, source)),
    }
}

/// Syncs directory `dir`, making the names created, renamed or removed in it durable.
pub(crate) fn sync_dir(storage: &dyn Storage, dir: &Path) -> Result<(), StorageError> {
    storage
        .sync_dir(dir)
        .map_err(|source| StorageError::io("fsync directory", dir, source))
}
