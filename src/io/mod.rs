//! The I/O seam: the only code in the crate that asks the kernel to read, write or sync log data.
//!
//! The log layer decides *what* to do (which bytes go at which position, which range to read) and
//! calls a [`Storage`] to perform it. Today the backend is [`pio::PositionedIo`] (`pread`,
//! `pwrite`, `fdatasync`); the engine's shards put the same calls on an io_uring per core, and a
//! simulated disk for crash tests implements the same traits. Index files are the exception: they
//! are memory-mapped (`index::mmap`) and rebuilt from the `.log` whenever they cannot be trusted,
//! so they never carry data that is not also in a `.log`.
//!
//! Why traits and not a concrete type: the backend is chosen at open time (io_uring where the
//! kernel allows it, positioned I/O where it does not, the simulator in tests), and one
//! dynamic call per system call costs nothing next to the system call itself.

pub mod hooked;
pub mod pio;
pub mod sim;
pub mod uring;

use std::fmt::Debug;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Which backend performs file I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoBackend {
    /// io_uring where this process may create a ring, positioned I/O otherwise.
    #[default]
    Auto,
    /// io_uring, or an error at open.
    IoUring,
    /// `pread`/`pwrite`/`fdatasync`.
    PositionedIo,
}

/// The environment variable that picks the backend for [`IoBackend::from_env`]: `uring`, `pio`
/// or `auto`. The test suite and CI run once with each.
pub const IO_BACKEND_ENV: &str = "SEGLOG_IO_BACKEND";

impl IoBackend {
    /// The backend named by `SEGLOG_IO_BACKEND`, or `Auto` when it is unset or unknown.
    pub fn from_env() -> IoBackend {
        match std::env::var(IO_BACKEND_ENV).as_deref() {
            Ok("uring") => IoBackend::IoUring,
            Ok("pio") => IoBackend::PositionedIo,
            _ => IoBackend::Auto,
        }
    }

    /// The storage for this backend. `Auto` falls back to positioned I/O, saying so once, when
    /// io_uring cannot be set up (old kernel, `io_uring_disabled`, seccomp, memlock limits).
    pub fn storage(self) -> io::Result<Arc<dyn Storage>> {
        match self {
            IoBackend::PositionedIo => Ok(Arc::new(pio::PositionedIo)),
            IoBackend::IoUring => {
                uring::UringIo::probe().map(|()| Arc::new(uring::UringIo) as Arc<dyn Storage>)
            }
            IoBackend::Auto => match uring::UringIo::probe() {
                Ok(()) => Ok(Arc::new(uring::UringIo)),
                Err(error) => {
                    log::warn!("io_uring unavailable ({error}); running on positioned I/O");
                    Ok(Arc::new(pio::PositionedIo))
                }
            },
        }
    }
}

/// The storage chosen by `SEGLOG_IO_BACKEND` (see [`IoBackend::from_env`]); positioned I/O if the
/// chosen backend cannot be set up.
pub fn storage_from_env() -> Arc<dyn Storage> {
    IoBackend::from_env()
        .storage()
        .unwrap_or_else(|_| Arc::new(pio::PositionedIo))
}

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Open an existing file for reading and writing.
    Existing,
    /// Create the file, failing if it exists.
    CreateNew,
    /// Open, creating it if missing.
    CreateOrOpen,
    /// Open an existing file for writes that bypass the page cache (`O_DIRECT`): each write's
    /// position, length and buffer address must be multiples of [`DIRECT_IO_ALIGN_BYTES`]. A file
    /// system without `O_DIRECT` (tmpfs) refuses the open with `EINVAL`.
    ExistingDirect,
}

/// The alignment of `O_DIRECT` writes: positions, lengths and buffer addresses. 4 KiB covers
/// devices with 512-byte and 4 KiB logical blocks and the page size.
pub const DIRECT_IO_ALIGN_BYTES: usize = 4096;

/// A file opened through a [`Storage`]. Positions are absolute byte offsets.
pub trait StorageFile: Debug + Send + Sync {
    /// Reads into `buf` from `position`, retrying short reads; returns the bytes read, fewer than
    /// `buf.len()` only at the end of the file.
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `position`.
    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()>;
    /// Makes written data durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Makes written data and metadata durable (`fsync`).
    fn sync_all(&self) -> io::Result<()>;
    /// The file's length in bytes.
    fn length_bytes(&self) -> io::Result<u64>;
    /// Truncates or extends the file.
    fn set_length_bytes(&self, length_bytes: u64) -> io::Result<()>;
    /// The file's modification time in milliseconds since the epoch.
    fn modified_ms(&self) -> io::Result<i64>;
    /// The underlying file, for backends that batch operations on real files.
    fn as_file(&self) -> Option<&std::fs::File> {
        None
    }

    /// Reserves the blocks of `[position, position + length)` and makes the file at least that
    /// long (`fallocate`, mode 0): later writes there allocate nothing and do not extend the
    /// file. `Ok(false)` where the backend or file system cannot (nothing changed).
    fn allocate(&self, position: u64, length: u64) -> io::Result<bool> {
        let Some(file) = self.as_file() else {
            return Ok(false);
        };
        let flags = rustix::fs::FallocateFlags::empty();
        match rustix::fs::fallocate(file, flags, position, length) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => Ok(false),
            Err(errno) => Err(errno.into()),
        }
    }

    /// Starts reading `length` bytes at `position` into the page cache in the background
    /// (`posix_fadvise(POSIX_FADV_WILLNEED)`), so that a sequential reader's next read finds
    /// them there. Advice only: a backend without a real file, or a refusal, changes nothing.
    fn prefetch(&self, position: u64, length: u64) {
        if let Some(file) = self.as_file() {
            let length = std::num::NonZeroU64::new(length);
            let _ = rustix::fs::fadvise(file, position, length, rustix::fs::Advice::WillNeed);
        }
    }

    /// Drops the file's clean cached pages (`posix_fadvise(POSIX_FADV_DONTNEED)`), so that the
    /// next reads come from the device. Recovery calls it before scanning a segment: after a
    /// failed `fsync` the kernel may keep pages that never reached the device, marked clean, and
    /// recovery must not take them as durable (RELIABILITY.md, R10). Dirty pages stay (they are
    /// written back, not dropped).
    fn drop_cache(&self) -> io::Result<()> {
        match self.as_file() {
            Some(file) => rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed)
                .map_err(io::Error::from),
            None => Ok(()),
        }
    }
}

/// Calls `read_once(buf, position)` until `buf` is full or a read returns 0 (end of file),
/// retrying `EINTR`; returns the bytes read. Shared by the backends' `read_at`.
pub(crate) fn read_fully(
    buf: &mut [u8],
    position: u64,
    mut read_once: impl FnMut(&mut [u8], u64) -> io::Result<usize>,
) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match read_once(&mut buf[filled..], position + filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// A file system: files and directories.
pub trait Storage: Debug + Send + Sync {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>>;
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names of the entries of `dir` (files and directories), in no particular order.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn is_dir(&self, path: &Path) -> bool;
    fn exists(&self, path: &Path) -> bool;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Makes `dir`'s entries durable (creations, renames, removals).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Makes the written data of every file durable, one result per file, in order. Group commit
    /// calls this once per turn for every partition that must sync; a backend that can run the
    /// syncs concurrently (io_uring) overrides it.
    fn sync_data_many(&self, files: &[&dyn StorageFile]) -> Vec<io::Result<()>> {
        files.iter().map(|file| file.sync_data()).collect()
    }
}
