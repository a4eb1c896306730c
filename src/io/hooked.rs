//! A storage wrapper that calls a hook before every operation: for tests that count syncs, slow
//! them down, make them wait, fail the Nth rename, or panic in a shard — without each test
//! writing its own `Storage` implementation.
//!
//! A hook that returns an error fails the operation without performing it; `after` hears of
//! completed syncs. Group syncs
//! ([`Storage::sync_data_many`]) call the hook once with [`StorageOp::SyncGroup`] and then sync
//! each file through its own hooked `sync_data`, one after another: the wrapper trades the inner
//! backend's batching for hooks that see every file.

use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{OpenMode, Storage, StorageFile};

/// The operation a hook is called before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageOp {
    Open,
    Read,
    Write,
    SyncData,
    SyncAll,
    SetLength,
    CreateDir,
    Rename,
    RemoveFile,
    RemoveDir,
    SyncDir,
    /// A group commit: `sync_data_many` over several files (then `SyncData` for each).
    SyncGroup,
}

/// Called before each operation of a [`HookedStorage`].
pub trait StorageHooks: Debug + Send + Sync {
    /// `path` is the file or directory operated on (the source, for a rename; empty for a
    /// group sync). An error fails the operation.
    fn before(&self, op: StorageOp, path: &Path) -> io::Result<()>;

    /// Called after `op` on `path` succeeded.
    fn after(&self, op: StorageOp, path: &Path) {
        let _ = (op, path);
    }

    /// Called after a read of `path` returned `bytes` bytes.
    fn after_read(&self, path: &Path, bytes: usize) {
        let _ = (path, bytes);
    }
}

/// `inner` with `hooks` called before every operation.
#[derive(Debug, Clone)]
pub struct HookedStorage {
    inner: Arc<dyn Storage>,
    hooks: Arc<dyn StorageHooks>,
}

impl HookedStorage {
    pub fn new(inner: Arc<dyn Storage>, hooks: Arc<dyn StorageHooks>) -> HookedStorage {
        HookedStorage { inner, hooks }
    }
}

#[derive(Debug)]
struct HookedFile {
    path: PathBuf,
    inner: Box<dyn StorageFile>,
    hooks: Arc<dyn StorageHooks>,
}

impl HookedFile {
    fn before(&self, op: StorageOp) -> io::Result<()> {
        self.hooks.before(op, &self.path)
    }
}

impl StorageFile for HookedFile {
    fn drop_cache(&self) -> io::Result<()> {
        self.inner.drop_cache()
    }

    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        self.before(StorageOp::Read)?;
        let read = self.inner.read_at(buf, position)?;
        self.hooks.after_read(&self.path, read);
        Ok(read)
    }
    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        self.before(StorageOp::Write)?;
        self.inner.write_all_at(buf, position)
    }
    fn write_direct_behind(
        &self,
        length: usize,
        position: u64,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> io::Result<()> {
        self.before(StorageOp::Write)?;
        self.inner.write_direct_behind(length, position, fill)
    }
    fn writes_behind_in_flight(&self) -> bool {
        self.inner.writes_behind_in_flight()
    }
    fn take_write_error(&self) -> io::Result<()> {
        self.inner.take_write_error()
    }
    fn complete_own_writes(&self) -> io::Result<()> {
        self.inner.complete_own_writes()
    }
    fn write_mark(&self) -> Option<crate::io::WriteMark> {
        self.inner.write_mark()
    }
    fn sync_data(&self) -> io::Result<()> {
        self.before(StorageOp::SyncData)?;
        self.inner.sync_data()?;
        self.hooks.after(StorageOp::SyncData, &self.path);
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        self.before(StorageOp::SyncAll)?;
        self.inner.sync_all()
    }
    fn length_bytes(&self) -> io::Result<u64> {
        self.inner.length_bytes()
    }
    fn set_length_bytes(&self, length_bytes: u64) -> io::Result<()> {
        self.before(StorageOp::SetLength)?;
        self.inner.set_length_bytes(length_bytes)
    }
    fn allocate(&self, position: u64, length: u64) -> io::Result<bool> {
        self.before(StorageOp::SetLength)?;
        self.inner.allocate(position, length)
    }
    fn modified_ms(&self) -> io::Result<i64> {
        self.inner.modified_ms()
    }
}

impl Storage for HookedStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        self.hooks.before(StorageOp::Open, path)?;
        Ok(Box::new(HookedFile {
            path: path.to_owned(),
            inner: self.inner.open(path, mode)?,
            hooks: self.hooks.clone(),
        }))
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.hooks.before(StorageOp::CreateDir, dir)?;
        self.inner.create_dir_all(dir)
    }
    fn prepare_reader_thread(&self) {
        self.inner.prepare_reader_thread();
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }
    fn list_subdirs(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_subdirs(dir)
    }
    fn file_length(&self, path: &Path) -> io::Result<u64> {
        self.inner.file_length(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.inner.is_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.hooks.before(StorageOp::Rename, from)?;
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.hooks.before(StorageOp::RemoveFile, path)?;
        self.inner.remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.hooks.before(StorageOp::RemoveDir, path)?;
        self.inner.remove_dir_all(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.hooks.before(StorageOp::SyncDir, dir)?;
        self.inner.sync_dir(dir)
    }
    fn complete_writes(&self) {
        self.inner.complete_writes();
    }
    fn attach_waker(&self, eventfd: std::os::fd::BorrowedFd<'_>) -> bool {
        self.inner.attach_waker(eventfd)
    }
    fn completions_waiting(&self) -> bool {
        self.inner.completions_waiting()
    }
    fn reap_completions(&self) {
        self.inner.reap_completions();
    }
    /// Each directory's hook first (a refused one fails alone), then the others together.
    fn sync_dirs_many(&self, dirs: &[&Path]) -> Vec<io::Result<()>> {
        let allowed: Vec<io::Result<()>> = dirs
            .iter()
            .map(|dir| self.hooks.before(StorageOp::SyncDir, dir))
            .collect();
        let passed: Vec<&Path> = dirs
            .iter()
            .zip(&allowed)
            .filter(|(_, allowed)| allowed.is_ok())
            .map(|(dir, _)| *dir)
            .collect();
        let mut synced = self.inner.sync_dirs_many(&passed).into_iter();
        allowed
            .into_iter()
            .map(|allowed| allowed.and_then(|()| synced.next().unwrap_or(Ok(()))))
            .collect()
    }
    fn sync_data_many(&self, files: &[&dyn StorageFile]) -> Vec<io::Result<()>> {
        if files.is_empty() {
            return Vec::new();
        }
        if let Err(error) = self.hooks.before(StorageOp::SyncGroup, Path::new("")) {
            let kind = error.kind();
            return files
                .iter()
                .map(|_| Err(io::Error::new(kind, error.to_string())))
                .collect();
        }
        files.iter().map(|file| file.sync_data()).collect()
    }
}
