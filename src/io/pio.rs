//! The positioned-I/O backend: `pread`/`pwrite`/`fdatasync` on `std::fs::File`.
//!
//! It is the portable fallback where io_uring cannot be set up, and the reference the other
//! backends are tested against. `EINTR` is retried here (std's `*_at` helpers do it), never above.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::UNIX_EPOCH;

use super::{OpenMode, Storage, StorageFile};

/// Positioned I/O on the real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct PositionedIo;

#[derive(Debug)]
struct PositionedFile {
    file: File,
}

impl StorageFile for PositionedFile {
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        super::read_fully(buf, position, |buf, position| {
            self.file.read_at(buf, position)
        })
    }

    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        self.file.write_all_at(buf, position)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn length_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_length_bytes(&self, length_bytes: u64) -> io::Result<()> {
        self.file.set_len(length_bytes)
    }

    fn modified_ms(&self) -> io::Result<i64> {
        PositionedIo::modified_ms_of(&self.file)
    }

    fn as_file(&self) -> Option<&File> {
        Some(&self.file)
    }
}

impl PositionedIo {
    /// Opens a file for reading and writing with `mode`.
    pub(crate) fn open_file(path: &Path, mode: OpenMode) -> io::Result<File> {
        let mut options = OpenOptions::new();
        // A symlink in a log directory is never followed: a segment, index or checkpoint that is a
        // link could point the engine's writes and truncations at any file (ELOOP instead).
        options
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW);
        match mode {
            OpenMode::Existing => {}
            OpenMode::ExistingDirect => {
                options.custom_flags(libc::O_NOFOLLOW | libc::O_DIRECT);
            }
            OpenMode::CreateNew => {
                options.create_new(true);
            }
            OpenMode::CreateOrOpen => {
                options.create(true);
            }
        }
        options.open(path)
    }

    /// A file's modification time in milliseconds since the epoch.
    pub(crate) fn modified_ms_of(file: &File) -> io::Result<i64> {
        let modified = file.metadata()?.modified()?;
        let since_epoch = modified.duration_since(UNIX_EPOCH).unwrap_or_default();
        Ok(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }
}

impl Storage for PositionedIo {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let file = PositionedIo::open_file(path, mode)?;
        Ok(Box::new(PositionedFile { file }))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name();
            // Names that are not UTF-8 are never seglog's; they are left alone.
            if let Some(name) = name.to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    /// From the entries' types as the directory lists them (`d_type`): no `stat` per entry on a
    /// file system that records them.
    fn list_subdirs(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if let (true, Some(name)) = (entry.file_type()?.is_dir(), entry.file_name().to_str()) {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    fn file_length(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::symlink_metadata(path)?.len())
    }

    fn is_dir(&self, path: &Path) -> bool {
        fs::symlink_metadata(path).is_ok_and(|metadata| metadata.is_dir())
    }

    fn exists(&self, path: &Path) -> bool {
        fs::symlink_metadata(path).is_ok()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir_all(path)
    }

    /// Many directories of one parent: one `syncfs` (`sync_dirs_by_file_system`); else one
    /// `sync_dir` after another.
    fn sync_dirs_many(&self, dirs: &[&Path]) -> Vec<io::Result<()>> {
        crate::io::sync_dirs_by_file_system(dirs)
            .unwrap_or_else(|| dirs.iter().map(|dir| self.sync_dir(dir)).collect())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}
