//! Large cold reads past the page cache: a read of at least [`DIRECT_READ_BYTES_MIN`] of which
//! the page cache holds no page (`cachestat`) is read with `O_DIRECT`, in pieces submitted to the
//! thread's ring together, through a per-thread aligned staging area, and copied out.
//!
//! Such reads are a consumer catching up on data that left the page cache. Through the page
//! cache, every page of them is allocated, filled by read-ahead, copied out and evicted again,
//! and on this kind of VM a page cache page is often memory the host took back (free page
//! reporting), faulted in anew: `fetch-cold` read 0.5-0.6× the disk's `O_DIRECT` rate that way
//! (BENCHMARKS.md § Large cold reads past the page cache). They also push the hot tail, which
//! other consumers read, out of the cache. A point lookup's batch is far smaller and stays
//! buffered, as does any read the cache holds part of.
//!
//! The direct descriptor is the file reopened through `/proc/self/fd` (the same inode whatever
//! the file is renamed to since), on the first read that wants it. Where `cachestat` is missing
//! (before Linux 6.5) or `O_DIRECT` is refused (a file system without it, no `/proc`), the file's
//! reads stay buffered; tmpfs keeps every page cached, so none of its reads is cold. An
//! `O_DIRECT` read sees every write: the kernel writes back the dirty pages of its range first.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use io_uring::{opcode, squeue, types};

use super::{READ_POLL, result_to_io, submit_and_poll, with_ring};
use crate::io::DIRECT_IO_ALIGN_BYTES;

/// Reads at least this long may go past the page cache: a sequential consumer's fetch (Kafka's
/// `max.partition.fetch.bytes` is 1 MiB), never a point lookup's batch.
pub(super) const DIRECT_READ_BYTES_MIN: usize = 256 * 1024;

/// Each piece read in flight at once; a read is split into up to [`PIECES_MAX`] of them.
const PIECE_BYTES: usize = 256 * 1024;

/// Pieces in flight per read: one round covers `PIECE_BYTES * PIECES_MAX` (1 MiB).
const PIECES_MAX: usize = 4;

/// `cachestat(2)`'s number: Linux 6.5, the same on every architecture (the unified table).
const SYS_CACHESTAT: libc::c_long = 451;

thread_local! {
    /// One staging area per thread (per shard), shared by every file it reads: at most a round's
    /// bytes and a block on either side.
    static STAGING: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// One file's `O_DIRECT` read side, opened on first use.
#[derive(Debug, Default)]
pub(super) struct ColdReader {
    /// `None` once opening it was refused.
    pub(super) file: OnceLock<Option<File>>,
    /// A direct read was refused (`EINVAL`: an alignment the device wants larger than ours) or
    /// `cachestat` is missing: this file's reads stay buffered.
    refused: AtomicBool,
}

impl ColdReader {
    /// The direct descriptor, when `[position, position + length)` is long enough and none of
    /// its pages is in the page cache of `file`.
    pub(super) fn for_read(&self, file: &File, position: u64, length: usize) -> Option<&File> {
        if length < DIRECT_READ_BYTES_MIN || self.refused.load(Ordering::Relaxed) {
            return None;
        }
        match cached_pages(file, position, length) {
            Ok(0) => {}
            Ok(_) => return None,
            Err(_) => {
                self.refused.store(true, Ordering::Relaxed);
                return None;
            }
        }
        self.file.get_or_init(|| reopen_direct(file)).as_ref()
    }

    /// Reads up to `length` bytes at `position` into `destination` through `direct` (from
    /// [`ColdReader::for_read`]); the bytes read, fewer only at the end of the file. `None` when
    /// nothing was read and the caller is to read buffered: the thread has no ring, or the
    /// first round was refused (`EINVAL`), after which every read of this file is buffered.
    ///
    /// # Safety
    /// `destination` must be valid for writes of `length` bytes, and unaliased, for the call.
    pub(super) unsafe fn read(
        &self,
        direct: &File,
        destination: *mut u8,
        length: usize,
        position: u64,
    ) -> Option<io::Result<usize>> {
        let mut read = 0;
        while read < length {
            let round = (length - read).min(PIECE_BYTES * PIECES_MAX);
            // SAFETY: `read < length`: the rest of the destination is within it (our contract).
            let rest = unsafe { destination.add(read) };
            // SAFETY: `rest` is valid for `round` bytes of writes.
            match unsafe { read_round(direct, rest, round, position + read as u64) } {
                Ok(0) => break, // the end of the file
                Ok(count) => read += count,
                // No ring on this thread: this read is buffered, as every read of the thread.
                Err(error) if read == 0 && error.kind() == io::ErrorKind::Unsupported => {
                    return None;
                }
                Err(error) if read == 0 && error.raw_os_error() == Some(libc::EINVAL) => {
                    log::debug!("O_DIRECT read refused ({error}); reading through the page cache");
                    self.refused.store(true, Ordering::Relaxed);
                    return None;
                }
                Err(error) => return Some(Err(error)),
            }
        }
        Some(Ok(read))
    }
}

/// How many of the pages of `[position, position + length)` of `file` the page cache holds.
pub(super) fn cached_pages(file: &File, position: u64, length: usize) -> io::Result<u64> {
    /// `struct cachestat_range`.
    #[repr(C)]
    struct Range {
        offset: u64,
        length: u64,
    }
    /// `struct cachestat`: the first field is the pages cached.
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        cache: u64,
        dirty: u64,
        writeback: u64,
        evicted: u64,
        recently_evicted: u64,
    }
    let range = Range {
        offset: position,
        length: length as u64,
    };
    let mut stat = Stat::default();
    // SAFETY: the kernel reads `range` and writes `stat`, both live and of the layout it expects,
    // only during the call.
    let result = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0u32,
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat.cache)
}

/// `file` opened again, read-only and `O_DIRECT`; `None` where that is refused.
pub(super) fn reopen_direct(file: &File) -> Option<File> {
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
    {
        Ok(direct) => Some(direct),
        Err(error) => {
            log::debug!(
                "O_DIRECT reopen of {path} refused ({error}); reading through the page cache"
            );
            None
        }
    }
}

/// One round: `[position, position + length)` widened to whole blocks, read into the staging
/// area in up to `PIECES_MAX` pieces at once, the wanted bytes copied to `destination`. Returns
/// them, fewer when the file ends in the round.
///
/// # Safety
/// As [`ColdReader::read`].
unsafe fn read_round(
    direct: &File,
    destination: *mut u8,
    length: usize,
    position: u64,
) -> io::Result<usize> {
    let block = DIRECT_IO_ALIGN_BYTES as u64;
    let start = position - position % block;
    let skip = (position - start) as usize;
    let span = (skip + length).next_multiple_of(DIRECT_IO_ALIGN_BYTES);
    STAGING.with(|staging| {
        let mut staging = staging.borrow_mut();
        let area = crate::io::aligned_mut(&mut staging, span);
        let fd = types::Fd(direct.as_raw_fd());
        // The last piece takes what is left (the blocks the widening added).
        let pieces = span.div_ceil(PIECE_BYTES).min(PIECES_MAX);
        let piece_length = |index: usize| {
            if index + 1 == pieces {
                span - index * PIECE_BYTES
            } else {
                PIECE_BYTES
            }
        };
        let entries: [squeue::Entry; PIECES_MAX] = std::array::from_fn(|index| {
            if index >= pieces {
                return opcode::Nop::new().build();
            }
            let piece = &mut area[index * PIECE_BYTES..][..piece_length(index)];
            opcode::Read::new(fd, piece.as_mut_ptr(), piece.len() as u32)
                .offset(start + (index * PIECE_BYTES) as u64)
                .build()
        });
        let mut results = [0i32; PIECES_MAX];
        // SAFETY: every entry points into `area`, borrowed for this whole closure, and
        // `submit_and_poll` returns only after all of them completed.
        with_ring(|ring| unsafe {
            submit_and_poll(ring, &entries[..pieces], &mut results[..pieces], READ_POLL)
        })
        .ok_or_else(|| io::Error::from(io::ErrorKind::Unsupported))?;
        // The bytes read from `start`: whole pieces, up to the first short one (the file's end).
        let mut filled = 0;
        for (index, result) in results[..pieces].iter().enumerate() {
            let count = result_to_io(*result)?;
            filled += count;
            if count < piece_length(index) {
                break;
            }
        }
        let count = filled.saturating_sub(skip).min(length);
        // SAFETY: `destination` is valid for `length >= count` bytes of writes (our contract)
        // and does not overlap the staging area, which this thread owns.
        unsafe { std::ptr::copy_nonoverlapping(area[skip..].as_ptr(), destination, count) };
        Ok(count)
    })
}
