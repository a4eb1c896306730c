//! Read-only access to segment files for `dump` and `verify`.
//!
//! The library's scanner reads through its `StorageFile` seam, and the library's own backend opens
//! every file for writing. The tools inspect files that may belong to a running or crashed log, so
//! they open them read-only here: every write through this type fails, and nothing is resized.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use anyhow::Context;
use seglog::io::StorageFile;

/// A file opened for reading only.
#[derive(Debug)]
pub struct ReadOnlyFile {
    file: File,
    path: PathBuf,
}

impl ReadOnlyFile {
    pub fn open(path: &Path) -> anyhow::Result<ReadOnlyFile> {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        Ok(ReadOnlyFile {
            file,
            path: path.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn length(&self) -> anyhow::Result<u64> {
        let metadata = self
            .file
            .metadata()
            .with_context(|| format!("cannot stat {}", self.path.display()))?;
        Ok(metadata.len())
    }

    fn refuse_write(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is opened read-only by the seglog tool",
                self.path.display()
            ),
        )
    }
}

impl StorageFile for ReadOnlyFile {
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            match self
                .file
                .read_at(&mut buf[filled..], position + filled as u64)
            {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            }
        }
        Ok(filled)
    }

    fn write_all_at(&self, _buf: &[u8], _position: u64) -> io::Result<()> {
        Err(self.refuse_write())
    }

    fn next_data(&self, position: u64) -> io::Result<Option<u64>> {
        seglog::io::next_data_of(&self.file, position)
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }

    fn length_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_length_bytes(&self, _length_bytes: u64) -> io::Result<()> {
        Err(self.refuse_write())
    }

    fn modified_ms(&self) -> io::Result<i64> {
        let modified = self.file.metadata()?.modified()?;
        let since_epoch = modified.duration_since(UNIX_EPOCH).unwrap_or_default();
        Ok(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }
}
