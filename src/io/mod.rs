//! The I/O seam: the only code in the crate that asks the kernel to read, write or sync log data.
//!
//! The log layer decides *what* to do (which bytes go at which position, which range to read) and
//! calls a [`Storage`] to perform it: [`uring::UringIo`] (a ring per thread: `O_DIRECT` appends
//! left in flight, reads that miss the page cache, grouped syncs), [`pio::PositionedIo`]
//! (`pread`, `pwrite`, `fdatasync`) where no ring can be made, and a simulated disk for crash
//! tests. Index files are the exception: they
//! are memory-mapped (`index::mmap`) and rebuilt from the `.log` whenever they cannot be trusted,
//! so they never carry data that is not also in a `.log`.
//!
//! Why traits and not a concrete type: the backend is chosen at open time (io_uring where the
//! kernel allows it, positioned I/O where it does not, the simulator in tests), and one
//! dynamic call per system call costs nothing next to the system call itself.

pub(crate) mod direct_buffer;
#[cfg(any(test, feature = "testing"))]
pub mod hooked;
mod metadata_files;
pub mod pio;
#[cfg(any(test, feature = "testing"))]
pub mod sim;
#[cfg(any(test, feature = "testing"))]
mod from_env;
pub mod uring;
mod write_progress;

pub(crate) use metadata_files::{lock_exclusive, read_small_file, sync_dir, write_durably};
pub use write_progress::WriteMark;
#[cfg(any(test, feature = "testing"))]
pub use from_env::{NO_IO_URING_ENV, ring_tests_must_run, storage_from_env};

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
/// or `auto`. CI runs the test suite with `uring` and with `pio`.
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
        self.storage_with_direct_cold_reads(false)
    }

    /// [`IoBackend::storage`], with io_uring's large cold reads past the page cache or not
    /// (`EngineConfig::direct_cold_reads`; positioned I/O always reads through it).
    pub fn storage_with_direct_cold_reads(
        self,
        direct_cold_reads: bool,
    ) -> io::Result<Arc<dyn Storage>> {
        let uring = uring::UringIo::with_direct_cold_reads(direct_cold_reads);
        match self {
            IoBackend::PositionedIo => Ok(Arc::new(pio::PositionedIo)),
            IoBackend::IoUring => {
                uring::UringIo::probe().map(|()| Arc::new(uring) as Arc<dyn Storage>)
            }
            IoBackend::Auto => match uring::UringIo::probe() {
                Ok(()) => Ok(Arc::new(uring)),
                Err(error) => {
                    tracing::warn!("io_uring unavailable ({error}); running on positioned I/O");
                    Ok(Arc::new(pio::PositionedIo))
                }
            },
        }
    }
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

/// The largest single [`StorageFile::write_direct_behind`].
pub const WRITE_BEHIND_BYTES_MAX: usize = 1024 * 1024;

/// A file opened through a [`Storage`]. Positions are absolute byte offsets.
pub trait StorageFile: Debug + Send + Sync {
    /// Reads into `buf` from `position`, retrying short reads; returns the bytes read, fewer than
    /// `buf.len()` only at the end of the file.
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize>;
    /// Reads up to `length` bytes from `position` into a new buffer, shorter only at the end of
    /// the file. On a real file the bytes are read into the buffer's spare capacity
    /// (`rustix::io::pread`), with no zeroing first: for a fetch of a whole batch the zeroing
    /// cost as much as the copy out of the page cache.
    fn read_to_vec(&self, length: usize, position: u64) -> io::Result<Vec<u8>> {
        let mut buffer = Vec::with_capacity(length);
        let Some(file) = self.as_file() else {
            buffer.resize(length, 0);
            let read = self.read_at(&mut buffer, position)?;
            buffer.truncate(read);
            return Ok(buffer);
        };
        while buffer.len() < length {
            let at = position + buffer.len() as u64;
            match rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buffer), at) {
                Ok(0) => break,
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(errno) => return Err(errno.into()),
            }
        }
        // `with_capacity` may give more than `length`: bytes read past it are not wanted.
        buffer.truncate(length);
        Ok(buffer)
    }

    /// Reads up to `length` bytes from `position` into `buffer[..length]`, growing `buffer` (zeroed)
    /// when it is shorter; returns the bytes read, fewer only at the end of the file. For a buffer
    /// kept between reads: its bytes past the read are left as they were.
    fn read_into(&self, buffer: &mut Vec<u8>, length: usize, position: u64) -> io::Result<usize> {
        if buffer.len() < length {
            buffer.resize(length, 0);
        }
        self.read_at(&mut buffer[..length], position)
    }

    /// Writes all of `buf` at `position`.
    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()>;
    /// Writes `length` bytes at `position` on a file opened [`OpenMode::ExistingDirect`]: the
    /// bytes `fill` puts at the start of an aligned buffer of `length` bytes (both multiples of
    /// [`DIRECT_IO_ALIGN_BYTES`], `length` at most [`WRITE_BEHIND_BYTES_MAX`]). Where the backend
    /// can (io_uring), the write is left in flight, a write behind: it completes by the calling
    /// thread's next fence (any other call through the same storage on that thread, or
    /// [`Storage::complete_writes`]), and a failure is kept for
    /// [`StorageFile::take_write_error`]. Elsewhere it is written before this returns.
    fn write_direct_behind(
        &self,
        length: usize,
        position: u64,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> io::Result<()> {
        check_write_behind_length(length)?;
        direct_buffer::with_staging(length, |area| {
            fill(area);
            self.write_all_at(area, position)
        })
    }

    /// Whether a write behind of this file may still be in flight (never where writes are not
    /// left in flight).
    fn writes_behind_in_flight(&self) -> bool {
        false
    }

    /// Completes the calling thread's writes behind, then returns the first failure of this
    /// file's since the last call. Nothing a write behind carried may be acknowledged before
    /// this (or the owner's own fence and this, or a done [`WriteMark`]'s `take_error`) said
    /// `Ok`.
    fn take_write_error(&self) -> io::Result<()> {
        Ok(())
    }

    /// Waits for this file's writes behind only (the thread's others stay in flight), then
    /// returns the first failure of this file's since the last call.
    fn complete_own_writes(&self) -> io::Result<()> {
        self.take_write_error()
    }

    /// A mark after this file's writes behind so far, to ask later whether they completed
    /// without waiting for them; `None` where writes are never left in flight.
    fn write_mark(&self) -> Option<WriteMark> {
        None
    }

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
        match self.as_file() {
            Some(file) => allocate_file(file, position, length),
            None => Ok(false),
        }
    }

    /// The first position at or after `position` that may hold data (`lseek(SEEK_DATA)`: holes
    /// and unwritten extents skipped), or `None` when only holes follow. A backend without the
    /// call says `position`: everything may hold data.
    fn next_data(&self, position: u64) -> io::Result<Option<u64>> {
        match self.as_file() {
            Some(file) => next_data_of(file, position),
            None => Ok(Some(position)),
        }
    }

    /// The first hole at or after `position`, which may hold data (`lseek(SEEK_HOLE)`; the
    /// file's end counts as one). A backend without the call says `u64::MAX`: no hole.
    fn next_hole(&self, position: u64) -> io::Result<u64> {
        match self.as_file() {
            Some(file) => next_hole_of(file, position),
            None => Ok(u64::MAX),
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

thread_local! {
    /// Set on a thread whose reads wait for the device asleep ([`wait_for_reads_asleep`]).
    static READS_ASLEEP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// From now on this thread's reads are plain `pread`s, asleep while the device answers: no
/// `RWF_NOWAIT` attempt, no ring, no polling. For threads that read mostly cold pages side by side
/// with others (a shard's open threads), where polling would keep a CPU the others need.
pub(crate) fn wait_for_reads_asleep() {
    READS_ASLEEP.set(true);
}

/// Whether this thread's reads wait asleep ([`wait_for_reads_asleep`]).
pub(crate) fn reads_wait_asleep() -> bool {
    READS_ASLEEP.get()
}

/// From this many directories on, [`sync_dirs_by_file_system`] syncs their file system instead.
pub(crate) const SYNCFS_DIRS_MIN: usize = 256;

/// The directories' entries made durable with one `syncfs` of their file system, when there are
/// at least [`SYNCFS_DIRS_MIN`] of them and they share one parent directory (so one file system:
/// a partition directory is never a mount point); `None` otherwise. One result per directory,
/// the same for all. A shard creating a topic of thousands of partitions syncs them so: one
/// journal commit, not one per directory. It also writes whatever else the file system holds
/// dirty, which such a rare request can afford.
pub(crate) fn sync_dirs_by_file_system(dirs: &[&Path]) -> Option<Vec<io::Result<()>>> {
    let parent = dirs.first()?.parent()?;
    if dirs.len() < SYNCFS_DIRS_MIN || dirs.iter().any(|dir| dir.parent() != Some(parent)) {
        return None;
    }
    let synced = std::fs::File::open(parent).and_then(|parent| {
        rustix::fs::syncfs(&parent).map_err(io::Error::from)
    });
    Some(
        dirs.iter()
            .map(|_| match &synced {
                Ok(()) => Ok(()),
                Err(error) => Err(match error.raw_os_error() {
                    Some(errno) => io::Error::from_raw_os_error(errno),
                    None => io::Error::new(error.kind(), error.to_string()),
                }),
            })
            .collect(),
    )
}

/// `EINVAL` for a write behind longer than [`WRITE_BEHIND_BYTES_MAX`].
pub(crate) fn check_write_behind_length(length: usize) -> io::Result<()> {
    match length <= WRITE_BEHIND_BYTES_MAX {
        true => Ok(()),
        false => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    }
}

/// [`StorageFile::allocate`] on a real file: `fallocate` mode 0; `Ok(false)` where the file
/// system has none.
pub(crate) fn allocate_file(file: &std::fs::File, position: u64, length: u64) -> io::Result<bool> {
    let flags = rustix::fs::FallocateFlags::empty();
    match rustix::fs::fallocate(file, flags, position, length) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => Ok(false),
        Err(errno) => Err(errno.into()),
    }
}

/// The position of the first non-zero byte of `file` in `from..to`, reading only what holds
/// data ([`StorageFile::next_data`]: holes and unwritten extents are skipped, not read), a chunk
/// at a time.
pub fn first_non_zero_byte(file: &dyn StorageFile, from: u64, to: u64) -> io::Result<Option<u64>> {
    const CHUNK_BYTES: u64 = 256 * 1024;
    let mut position = from;
    while position < to {
        let Some(data_at) = file.next_data(position)?.filter(|at| *at < to) else {
            return Ok(None);
        };
        let length = (to - data_at).min(CHUNK_BYTES);
        let bytes = file.read_to_vec(length as usize, data_at)?;
        if let Some(at) = bytes.iter().position(|byte| *byte != 0) {
            return Ok(Some(data_at + at as u64));
        }
        position = data_at + length;
    }
    Ok(None)
}

/// [`StorageFile::next_data`] on a real file (`SEEK_DATA`; `Some(position)` where the file
/// system has no `SEEK_DATA`).
pub fn next_data_of(file: &std::fs::File, position: u64) -> io::Result<Option<u64>> {
    match rustix::fs::seek(file, rustix::fs::SeekFrom::Data(position)) {
        Ok(found) => Ok(Some(found)),
        Err(rustix::io::Errno::NXIO) => Ok(None),
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => Ok(Some(position)),
        Err(errno) => Err(errno.into()),
    }
}

/// [`StorageFile::next_hole`] on a real file (`SEEK_HOLE`; `u64::MAX` where the file system has
/// no `SEEK_HOLE`).
pub fn next_hole_of(file: &std::fs::File, position: u64) -> io::Result<u64> {
    match rustix::fs::seek(file, rustix::fs::SeekFrom::Hole(position)) {
        Ok(found) => Ok(found),
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => Ok(u64::MAX),
        Err(errno) => Err(errno.into()),
    }
}

/// Where a file held data when it was mapped ([`DataRanges::map`]), for scans that must not
/// read the rest. Mapped once, before anything is read: a read of an unwritten extent leaves
/// zero pages in the page cache, which `SEEK_DATA` then reports as data, and readahead extends
/// them ahead of every later read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataRanges {
    /// Sorted, disjoint; `None` when not mapped: everything may hold data.
    ranges: Option<Vec<std::ops::Range<u64>>>,
}

impl DataRanges {
    /// Maps `file`'s data in `from..to` ([`StorageFile::next_data`], [`StorageFile::next_hole`]).
    pub fn map(file: &dyn StorageFile, from: u64, to: u64) -> io::Result<DataRanges> {
        let mut ranges = Vec::new();
        let mut position = from;
        while position < to {
            let Some(data_at) = file.next_data(position)?.filter(|at| *at < to) else {
                break;
            };
            let hole_at = file.next_hole(data_at)?.clamp(data_at + 1, to);
            ranges.push(data_at..hole_at);
            position = hole_at;
        }
        Ok(DataRanges {
            ranges: Some(ranges),
        })
    }

    /// The data at or after `position` when mapped, up to the next hole; everything from
    /// `position` on when not mapped.
    pub fn data_from(&self, position: u64) -> Option<std::ops::Range<u64>> {
        let Some(ranges) = &self.ranges else {
            return Some(position..u64::MAX);
        };
        let index = ranges.partition_point(|range| range.end <= position);
        ranges
            .get(index)
            .map(|range| range.start.max(position)..range.end)
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
    /// Names of the directories in `dir` (not following symbolic links), in no particular order.
    fn list_subdirs(&self, dir: &Path) -> io::Result<Vec<String>> {
        let names = self.list_dir(dir)?;
        Ok(names
            .into_iter()
            .filter(|name| self.is_dir(&dir.join(name)))
            .collect())
    }
    fn is_dir(&self, path: &Path) -> bool;
    /// The length of the file at `path`, without opening it where the backend can.
    fn file_length(&self, path: &Path) -> io::Result<u64> {
        self.open(path, OpenMode::Existing)?.length_bytes()
    }
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

    /// Makes the entries of every directory durable, one result per directory, in order. A shard
    /// creating many partitions calls this once for all their directories instead of one
    /// [`Storage::sync_dir`] after another; a backend that can run the syncs concurrently
    /// (io_uring) overrides it. By default each is a `sync_dir` of its own, which is also how
    /// the simulated disk models them.
    fn sync_dirs_many(&self, dirs: &[&Path]) -> Vec<io::Result<()>> {
        dirs.iter().map(|dir| self.sync_dir(dir)).collect()
    }

    /// Completes every write behind the calling thread has in flight
    /// ([`StorageFile::write_direct_behind`]); each file keeps its failures for
    /// [`StorageFile::take_write_error`]. Nothing where writes are never left in flight.
    fn complete_writes(&self) {}

    /// Has the calling thread's ring signal `eventfd` whenever a completion waits for it, so
    /// that a thread asleep on the eventfd wakes for its writes behind as for new work. `false`
    /// when writes behind may be in flight that will not signal it: the caller then completes
    /// them itself before it sleeps. `true` where writes are never left in flight.
    fn attach_waker(&self, _eventfd: std::os::fd::BorrowedFd<'_>) -> bool {
        true
    }

    /// Whether a completion of the calling thread's ring waits to be taken
    /// ([`Storage::reap_completions`]).
    fn completions_waiting(&self) -> bool {
        false
    }

    /// Takes the completions that wait on the calling thread's ring, without waiting for any:
    /// writes behind that completed are recorded in their files' progress.
    fn reap_completions(&self) {}

    /// Called by a thread that will serve reads (a shard) as it starts, so that what its reads
    /// need is set up before the first one (io_uring with cold reads past the page cache: the
    /// thread's windows, allocated and faulted in). Nothing by default.
    fn prepare_reader_thread(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_directories_of_one_parent_are_synced_by_their_file_system_and_others_one_by_one() {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<std::path::PathBuf> = (0..SYNCFS_DIRS_MIN)
            .map(|index| root.path().join(format!("topic-{index}")))
            .collect();
        for dir in &dirs {
            std::fs::create_dir(dir).unwrap();
        }
        let paths: Vec<&Path> = dirs.iter().map(std::path::PathBuf::as_path).collect();
        let synced = sync_dirs_by_file_system(&paths).expect("one syncfs");
        assert_eq!(synced.len(), paths.len());
        assert!(synced.iter().all(Result::is_ok));
        assert!(sync_dirs_by_file_system(&paths[1..]).is_none(), "too few");
        let nested = root.path().join("topic-0").join("inner");
        std::fs::create_dir(&nested).unwrap();
        let mut mixed = paths.clone();
        mixed.push(&nested);
        assert!(sync_dirs_by_file_system(&mixed).is_none(), "two parents");
        let missing_parent = Path::new("/nonexistent-seglog-parent/topic-0");
        let missing = vec![missing_parent; SYNCFS_DIRS_MIN];
        let failed = sync_dirs_by_file_system(&missing).expect("one parent");
        assert!(failed.iter().all(|result| result.as_ref().is_err_and(|error| {
            error.kind() == io::ErrorKind::NotFound
        })));
        for storage in [&pio::PositionedIo as &dyn Storage, &uring::UringIo::default()] {
            assert!(storage.sync_dirs_many(&paths).iter().all(Result::is_ok));
        }
    }

    /// Every backend, the simulated one included (which has no real file and reads through
    /// `read_at`).
    fn storages(root: &Path) -> Vec<Arc<dyn Storage>> {
        let mut storages: Vec<Arc<dyn Storage>> = vec![Arc::new(pio::PositionedIo)];
        if ring_tests_must_run("io::tests::storages") {
            storages.push(Arc::new(uring::UringIo::default()));
        }
        storages.push(Arc::new(sim::SimStorage::new(root, 1).unwrap()));
        storages
    }

    #[test]
    fn read_to_vec_reads_what_was_written_and_stops_at_the_end_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        for (index, storage) in storages(dir.path()).into_iter().enumerate() {
            let path = dir.path().join(format!("file-{index}"));
            let file = storage.open(&path, OpenMode::CreateNew).unwrap();
            file.write_all_at(&payload, 0).unwrap();
            assert_eq!(file.read_to_vec(1000, 5).unwrap(), payload[5..1005]);
            let tail = file.read_to_vec(10_000, 299_000).unwrap();
            assert_eq!(tail, payload[299_000..], "storage {storage:?}");
            assert!(file.read_to_vec(10, 400_000).unwrap().is_empty());
            assert!(file.read_to_vec(0, 0).unwrap().is_empty());
        }
    }

    #[test]
    fn sync_dirs_many_answers_each_directory_and_fails_a_missing_one_alone() {
        let dir = tempfile::tempdir().unwrap();
        for (index, storage) in storages(dir.path()).into_iter().enumerate() {
            let dirs: Vec<std::path::PathBuf> = (0..40)
                .map(|number| dir.path().join(format!("{index}-{number}")))
                .collect();
            for created in &dirs {
                storage.create_dir_all(created).unwrap();
            }
            let missing = dir.path().join(format!("{index}-missing"));
            let mut paths: Vec<&Path> = dirs.iter().map(|dir| dir.as_path()).collect();
            paths.insert(7, &missing);
            let results = storage.sync_dirs_many(&paths);
            assert_eq!(results.len(), paths.len(), "storage {storage:?}");
            for (path, result) in paths.iter().zip(&results) {
                assert_eq!(result.is_ok(), *path != missing, "{}: {result:?}", path.display());
            }
        }
    }

    #[test]
    fn read_into_reads_into_a_kept_buffer_and_stops_at_the_end_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        for (index, storage) in storages(dir.path()).into_iter().enumerate() {
            let path = dir.path().join(format!("file-{index}"));
            let file = storage.open(&path, OpenMode::CreateNew).unwrap();
            file.write_all_at(&payload, 0).unwrap();
            let mut buffer = vec![0xee; 8];
            assert_eq!(file.read_into(&mut buffer, 1000, 5).unwrap(), 1000);
            assert_eq!(buffer, payload[5..1005], "storage {storage:?}");
            assert_eq!(file.read_into(&mut buffer, 10, 7).unwrap(), 10);
            assert_eq!(buffer[..10], payload[7..17]);
            assert_eq!(
                buffer[10..],
                payload[15..1005],
                "bytes past the read are kept"
            );
            assert_eq!(file.read_into(&mut buffer, 500, 299_900).unwrap(), 100);
            assert_eq!(buffer[..100], payload[299_900..]);
            assert_eq!(file.read_into(&mut buffer, 10, 400_000).unwrap(), 0);
        }
    }

    #[test]
    fn data_ranges_skip_reserved_space_even_after_it_was_read() {
        let dir = tempfile::tempdir().unwrap();
        const MIB: u64 = 1024 * 1024;
        for (index, storage) in storages(dir.path()).into_iter().enumerate() {
            let path = dir.path().join(format!("file-{index}"));
            let file = storage.open(&path, OpenMode::CreateNew).unwrap();
            file.write_all_at(&[7u8; 4096], 0).unwrap();
            let reserved = file.allocate(4096, 16 * MIB).unwrap();
            file.write_all_at(&[9u8; 4096], 8 * MIB).unwrap();
            let ranges = DataRanges::map(file.as_ref(), 0, 16 * MIB + 4096).unwrap();
            // Reading the reserved space leaves zero pages that `SEEK_DATA` reports as data; the
            // map taken before does not change.
            file.read_to_vec((8 * MIB) as usize, 4096).unwrap();
            let data_from = |position| ranges.data_from(position);
            if reserved && file.as_file().is_some() {
                assert_eq!(data_from(0), Some(0..4096), "storage {index}");
                assert_eq!(data_from(100), Some(100..4096));
                assert_eq!(data_from(4096), Some(8 * MIB..8 * MIB + 4096));
                assert_eq!(data_from(8 * MIB + 4096), None);
            } else {
                // No `SEEK_DATA` (the simulated disk): everything may hold data.
                assert_eq!(data_from(4096), Some(4096..16 * MIB + 4096), "storage {index}");
            }
        }
    }
}
