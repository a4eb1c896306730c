//! Large cold reads past the page cache: a read of at least [`DIRECT_READ_BYTES_MIN`] of which
//! the page cache holds no page (`cachestat`) is read with `O_DIRECT` into a window of the
//! thread's own, and copied out; the next window is read ahead while the reader uses this one.
//!
//! Such reads are a consumer catching up on data that left the page cache. Through the page cache,
//! every page of them is allocated, filled by read-ahead, copied out and evicted again, and on this
//! kind of VM a page cache page is often memory the host took back (free page reporting), faulted
//! in anew: `fetch-cold` read well below the disk's `O_DIRECT` rate that way. They also push the
//! hot tail, which other consumers read, out of the cache. A point lookup's batch is far smaller
//! and stays buffered, as does any read the cache holds part of.
//!
//! **Windows.** A window is [`WINDOW_BYTES`] of one file from a block-aligned position, read as
//! [`PIECES_PER_WINDOW`] pieces submitted to the thread's ring together; a thread keeps up to
//! [`WINDOWS_PER_THREAD`] of them (64 MiB in huge pages, `io::direct_buffer` says why; a shard
//! thread has all of them in memory from its start, `Storage::prepare_reader_thread`, and any
//! other thread allocates each when no freed one is left). A read
//! served from a window waits only for the pieces it covers, and first makes sure the window
//! after it is read ahead: those reads stay in flight after the read returns, so the device reads
//! on while the consumer decodes its fetch (as the page cache's read-ahead does), up to two
//! windows' pieces deep. Their completions are told apart by [`WINDOW_PIECE_TAG`]: whichever
//! function of the thread reaps them hands them to their window (`Ring::reap`). A read ahead never
//! takes a window that was itself read ahead and has served no read yet: with more readers than
//! windows it is skipped, and each reader fills its windows as it comes to them. A window is
//! named by its file's reader and that file's generation, which every write and length change
//! through any of the backend's descriptors on the file bumps ([`Generation`]), so no window
//! filled before a change serves a read after it. A window is reused only when none of its reads
//! is in flight, and the thread's ring, dropped with the thread, first waits for all of them
//! (`Ring::drop`): the kernel never writes into freed memory.
//!
//! The direct descriptor is the file reopened through `/proc/self/fd` (the same inode whatever
//! the file is renamed to since), on the first read that wants it. Where `cachestat` is missing
//! (before Linux 6.5) or `O_DIRECT` is refused (a file system without it, no `/proc`), the file's
//! reads stay buffered; tmpfs keeps every page cached, so none of its reads is cold. An
//! `O_DIRECT` read sees every write: the kernel writes back the dirty pages of its range first.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use io_uring::{opcode, types};

use super::{READ_POLL, Ring, result_to_io, with_ring};
use crate::io::DIRECT_IO_ALIGN_BYTES;
use crate::io::direct_buffer::DirectBuffer;

/// Reads at least this long may go past the page cache: a sequential consumer's fetch (Kafka's
/// `max.partition.fetch.bytes` is 1 MiB), never a point lookup's batch.
pub(super) const DIRECT_READ_BYTES_MIN: usize = 256 * 1024;

/// Each read of a window in flight: one 1 MiB fetch. From huge pages a piece is one segment for
/// the device however long it is; in alternating runs, 8 × 1 MiB windows read nearer fio's rate
/// than 16 × 256 KiB pieces of 4 MiB windows. From scattered pages, 256 KiB pieces had beaten
/// 64 and 128 KiB. A fetch waits only for its own.
const PIECE_BYTES: usize = 1024 * 1024;

/// The bytes of a window: eight 1 MiB fetches, so that with the window after it a reader keeps
/// up to 16 MiB in flight, as fio's deep read does (16 × 1 MiB).
const WINDOW_BYTES: usize = 8 * 1024 * 1024;

/// The pieces of a window, submitted together.
const PIECES_PER_WINDOW: usize = WINDOW_BYTES / PIECE_BYTES;

/// Windows per thread at most: the one being read and the one ahead of it, for four readers at
/// once (a shard serving four partitions' consumers). With 4, one shard serving four cold
/// readers read a small fraction of the disk's rate: each read ahead took a window another
/// reader was about to use.
pub(super) const WINDOWS_PER_THREAD: usize = 8;

/// The most window pieces a thread has in flight.
pub(super) const PIECES_PER_THREAD: usize = PIECES_PER_WINDOW * WINDOWS_PER_THREAD;

/// The `user_data` bit of a window piece's read; below it, the piece's number in the thread's
/// windows (`window * PIECES_PER_WINDOW + piece`).
pub(super) const WINDOW_PIECE_TAG: u64 = 1 << 63;

/// `cachestat(2)`'s number: Linux 6.5, the same on every architecture (the unified table).
const SYS_CACHESTAT: libc::c_long = 451;

/// The next reader's name: never reused, so a window never serves a file opened since.
static NEXT_READER_ID: AtomicU64 = AtomicU64::new(1);

/// One file's `O_DIRECT` read side, opened on first use.
#[derive(Debug)]
pub(super) struct ColdReader {
    /// `None` once opening it was refused.
    pub(super) file: OnceLock<Option<File>>,
    /// A direct read was refused (`EINVAL`: an alignment the device wants larger than ours) or
    /// `cachestat` is missing: this file's reads stay buffered.
    refused: AtomicBool,
    /// Names this file's windows.
    id: u64,
    /// The file's changes ([`Generation`]), shared with every descriptor the backend opened on it.
    generation: Generation,
}

impl ColdReader {
    pub(super) fn new(generation: Generation) -> ColdReader {
        ColdReader {
            file: OnceLock::new(),
            refused: AtomicBool::new(false),
            id: NEXT_READER_ID.fetch_add(1, Ordering::Relaxed),
            generation,
        }
    }
}

/// How many times a file was written or changed length through any descriptor the backend
/// opened on it with cold reads on: one counter per file (device and inode), shared by its
/// descriptors, so that an append through the segment's `O_DIRECT` writer (a descriptor of its
/// own, `segment::direct`) is a change for the windows of its buffered one. Their bytes past
/// the log end are the writer's zero padding until it appends there.
pub(super) type Generation = Arc<AtomicU64>;

/// Every file's [`Generation`], while a descriptor holds it.
static GENERATIONS: Mutex<Generations> = Mutex::new(Generations {
    by_inode: BTreeMap::new(),
    pruned_at: 0,
});

struct Generations {
    by_inode: BTreeMap<(u64, u64), Weak<AtomicU64>>,
    /// How many entries were left at the last pruning of dropped ones; pruned again at twice
    /// that, so each open costs amortized O(log n).
    pruned_at: usize,
}

/// `file`'s [`Generation`]: the one its other descriptors hold, or a new one.
pub(super) fn generation_of(file: &File) -> Generation {
    let Ok(metadata) = file.metadata() else {
        // No identity to share: a counter of its own.
        return Arc::new(AtomicU64::new(0));
    };
    let key = (metadata.dev(), metadata.ino());
    let mut generations = GENERATIONS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(shared) = generations.by_inode.get(&key).and_then(Weak::upgrade) {
        return shared;
    }
    if generations.by_inode.len() >= generations.pruned_at * 2 {
        generations
            .by_inode
            .retain(|_, held| held.strong_count() > 0);
        generations.pruned_at = generations.by_inode.len().max(64);
    }
    let generation = Arc::new(AtomicU64::new(0));
    generations
        .by_inode
        .insert(key, Arc::downgrade(&generation));
    generation
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

    /// The name of this file's windows as the file is now.
    fn window_name(&self) -> WindowName {
        WindowName {
            reader: self.id,
            generation: self.generation.load(Ordering::Acquire),
        }
    }

    /// Whether one of this thread's windows holds `position` of the file as it is now.
    #[cfg(test)]
    pub(super) fn window_holds(&self, position: u64) -> bool {
        let name = self.window_name();
        with_ring(|ring| ring.windows.find(name, position).is_some()).unwrap_or(false)
    }

    /// Reads up to `length` bytes at `position` into `destination` through `direct` (from
    /// [`ColdReader::for_read`]), from this thread's windows; the bytes read, fewer only at the
    /// end of the file. `None` when nothing was read and the caller is to read buffered: the
    /// thread has no ring, or the first read was refused (`EINVAL`), after which every read of
    /// this file is buffered.
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
        let name = self.window_name();
        let (read, error) = with_ring(|ring| {
            let mut read = 0;
            while read < length {
                // SAFETY: `read < length`: the rest of the destination is within it (our
                // contract), valid for `length - read` bytes of writes.
                let count = unsafe {
                    let rest = (destination.add(read), length - read, position + read as u64);
                    read_from_window(ring, name, direct, rest, position)
                };
                match count {
                    Ok(0) => break, // the end of the file
                    Ok(count) => read += count,
                    Err(error) => return (read, Some(error)),
                }
            }
            (read, None)
        })?;
        match error {
            None => Some(Ok(read)),
            Some(error) if read == 0 && error.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!("O_DIRECT read refused ({error}); reading through the page cache");
                self.refused.store(true, Ordering::Relaxed);
                None
            }
            Some(error) => Some(Err(error)),
        }
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
            tracing::debug!(
                "O_DIRECT reopen of {path} refused ({error}); reading through the page cache"
            );
            None
        }
    }
}

/// Which file a window holds, as of which change: [`ColdReader::id`] and its [`Generation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WindowName {
    reader: u64,
    generation: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    Unread,
    InFlight,
    /// Its read's result (`cqe.res`): the bytes read, or `-errno`.
    Done(i32),
}

/// [`WINDOW_BYTES`] of a file from `start`, read into `staging` in pieces.
struct Window {
    /// `None`: serves no read (never filled, or a read of it failed).
    name: Option<WindowName>,
    start: u64,
    /// Allocated once, never resized: the pieces' reads write into it. In huge pages, so that a
    /// piece is one segment for the device (`io::direct_buffer`).
    staging: DirectBuffer,
    pieces: [Piece; PIECES_PER_WINDOW],
    /// When it last served or was filled, for choosing which to reuse.
    used: u64,
    /// It served a read since it was filled: a window read ahead and not yet served is not
    /// taken for another read ahead.
    served: bool,
}

impl Window {
    /// The staging area's first byte. A pointer, not a slice: the reads of pieces still in
    /// flight write into the area meanwhile.
    fn area(&mut self) -> *mut u8 {
        self.staging.as_mut_ptr()
    }

    fn in_flight(&self, pieces: Range<usize>) -> bool {
        self.pieces[pieces].contains(&Piece::InFlight)
    }

    /// The file ended inside it: a piece read short.
    fn ends_file(&self) -> bool {
        self.pieces
            .iter()
            .any(|piece| matches!(piece, Piece::Done(count) if *count < PIECE_BYTES as i32))
    }

    /// The bytes read from `start` through piece `last`: whole pieces up to the first short
    /// one, or the first error.
    fn filled(&self, last: usize) -> io::Result<usize> {
        let mut filled = 0;
        for piece in &self.pieces[..=last] {
            // Each was waited for; one that was not ends what is served.
            let Piece::Done(result) = *piece else {
                break;
            };
            let count = result_to_io(result)?;
            filled += count;
            if count < PIECE_BYTES {
                break;
            }
        }
        Ok(filled)
    }
}

/// A thread's windows, kept with its ring (`Ring::windows`).
#[derive(Default)]
pub(super) struct Windows {
    windows: Vec<Window>,
    clock: u64,
}

impl Windows {
    /// Records a piece's completion (`user_data` tagged [`WINDOW_PIECE_TAG`]).
    pub(super) fn complete(&mut self, user_data: u64, result: i32) {
        let number = (user_data & !WINDOW_PIECE_TAG) as usize;
        let (window, piece) = (number / PIECES_PER_WINDOW, number % PIECES_PER_WINDOW);
        if let Some(window) = self.windows.get_mut(window) {
            window.pieces[piece] = Piece::Done(result);
        }
    }

    pub(super) fn any_in_flight(&self) -> bool {
        self.windows
            .iter()
            .any(|window| window.in_flight(0..PIECES_PER_WINDOW))
    }

    /// The window named `name` that holds `position`.
    fn find(&self, name: WindowName, position: u64) -> Option<usize> {
        self.windows.iter().position(|window| {
            window.name == Some(name)
                && window.start <= position
                && position < window.start + WINDOW_BYTES as u64
        })
    }

    /// A window to fill for a read, other than `keep`: a freed or new one
    /// ([`Windows::freed_or_new`]), else the one unused longest (its reads may still be in
    /// flight).
    fn choose(&mut self, keep: Option<usize>) -> usize {
        self.freed_or_new(keep)
            .or_else(|| self.least_recently_used(keep))
            .unwrap_or(0) // never: there are more windows than one
    }

    /// A window to read ahead into, other than `keep`, as [`Windows::choose`]; `None` where the
    /// one unused longest was itself read ahead and has served no read yet: with more readers
    /// than windows, reading ahead would only take the window another reader comes to next.
    fn choose_ahead(&mut self, keep: usize) -> Option<usize> {
        self.freed_or_new(Some(keep)).or_else(|| {
            self.least_recently_used(Some(keep))
                .filter(|&index| self.windows[index].served)
        })
    }

    /// A freed window other than `keep`, else a new one while there are fewer than
    /// [`WINDOWS_PER_THREAD`].
    fn freed_or_new(&mut self, keep: Option<usize>) -> Option<usize> {
        self.freed(keep)
            .or_else(|| (self.windows.len() < WINDOWS_PER_THREAD).then(|| self.allocate()))
    }

    fn freed(&self, keep: Option<usize>) -> Option<usize> {
        (0..self.windows.len())
            .find(|&index| Some(index) != keep && self.windows[index].name.is_none())
    }

    fn least_recently_used(&self, keep: Option<usize>) -> Option<usize> {
        (0..self.windows.len())
            .filter(|&index| Some(index) != keep)
            .min_by_key(|&index| self.windows[index].used)
    }

    fn allocate(&mut self) -> usize {
        self.windows.push(Window {
            name: None,
            start: 0,
            staging: DirectBuffer::new(WINDOW_BYTES),
            pieces: [Piece::Unread; PIECES_PER_WINDOW],
            used: 0,
            served: false,
        });
        self.windows.len() - 1
    }

    /// Allocates every window the thread may keep and writes each through, so that its memory
    /// is there before the first read (`Storage::prepare_reader_thread`).
    pub(super) fn reserve(&mut self) {
        while self.windows.len() < WINDOWS_PER_THREAD {
            let index = self.allocate();
            self.windows[index].staging.as_mut_slice().fill(0);
        }
    }

    /// How many windows the thread has.
    #[cfg(test)]
    pub(super) fn count(&self) -> usize {
        self.windows.len()
    }

    fn touch(&mut self, index: usize) {
        self.clock += 1;
        self.windows[index].used = self.clock;
    }
}

/// Fills window `index` with `WINDOW_BYTES` of `direct` from `start`: waits for the reads still
/// in flight into it, then submits one read per piece.
fn fill(ring: &mut Ring, name: WindowName, direct: &File, start: u64, index: usize) {
    ring.wait_until(READ_POLL, |ring| {
        ring.reap(&mut []);
        !ring.windows.windows[index].in_flight(0..PIECES_PER_WINDOW)
    });
    ring.windows.touch(index);
    let window = &mut ring.windows.windows[index];
    window.name = Some(name);
    window.start = start;
    window.served = false;
    window.pieces = [Piece::InFlight; PIECES_PER_WINDOW];
    let area = window.area();
    let fd = types::Fd(direct.as_raw_fd());
    for piece in 0..PIECES_PER_WINDOW {
        let offset = piece * PIECE_BYTES;
        // SAFETY: the piece lies inside the staging area (`WINDOW_BYTES` from `area`).
        let buffer = unsafe { area.add(offset) };
        let entry = opcode::Read::new(fd, buffer, PIECE_BYTES as u32)
            .offset(start + offset as u64)
            .build()
            .user_data(WINDOW_PIECE_TAG | (index * PIECES_PER_WINDOW + piece) as u64);
        // SAFETY: the staging area is the window's, never resized and freed only with the ring,
        // which first waits for every piece in flight (`Ring::drop`); the window is not filled
        // again before this piece completed (the wait above). Nothing else reads or writes it
        // while the piece is in flight: a read copies out only pieces that completed.
        unsafe { ring.push(&entry) };
    }
    // An error leaves the entries queued: the next enter submits them.
    let _ = ring.uring.submit();
}

/// Copies up to `length` bytes at `position` of `direct` to `destination` from the window that
/// holds `position` (filled now if there is none), having made sure the window after it is read
/// ahead when the read (from `read_start`) starts in it. Returns the bytes copied: fewer than
/// `length` where the window ends first, 0 past the end of the file (as a window read now finds
/// it).
///
/// # Safety
/// `destination` must be valid for writes of `length` bytes, and unaliased, for the call.
unsafe fn read_from_window(
    ring: &mut Ring,
    name: WindowName,
    direct: &File,
    (destination, length, position): (*mut u8, usize, u64),
    read_start: u64,
) -> io::Result<usize> {
    let (index, fresh) = match ring.windows.find(name, position) {
        Some(index) => (index, false),
        None => {
            let start = position - position % DIRECT_IO_ALIGN_BYTES as u64;
            let index = ring.windows.choose(None);
            fill(ring, name, direct, start, index);
            (index, true)
        }
    };
    ring.windows.touch(index);
    let window = &ring.windows.windows[index];
    let (start, ends_file) = (window.start, window.ends_file());
    let skip = (position - start) as usize;
    if read_start >= start {
        // A read that starts in this window: the reader has moved on from the window before it
        // (its next read starts where this one's last whole batch ends, further on), which is
        // free for the one after this. A read's rest, continued here from the window before,
        // may be read again from there: the last batch it holds may end in this window.
        if let Some(behind) = start
            .checked_sub(WINDOW_BYTES as u64)
            .and_then(|behind| ring.windows.find(name, behind))
        {
            ring.windows.windows[behind].name = None;
        }
        let ahead = start + WINDOW_BYTES as u64;
        if !ends_file
            && ring.windows.find(name, ahead).is_none()
            && let Some(target) = ring.windows.choose_ahead(index)
        {
            fill(ring, name, direct, ahead, target);
        }
    }
    let wanted = length.min(WINDOW_BYTES - skip);
    let last = (skip + wanted - 1) / PIECE_BYTES;
    ring.wait_until(READ_POLL, |ring| {
        ring.reap(&mut []);
        !ring.windows.windows[index].in_flight(0..last + 1)
    });
    let window = &mut ring.windows.windows[index];
    window.served = true;
    let filled = match window.filled(last) {
        Ok(filled) => filled,
        Err(error) => {
            window.name = None;
            return Err(error);
        }
    };
    let count = filled.saturating_sub(skip).min(wanted);
    if count == 0 && !fresh {
        // The file ended before `position` when the window was read. It may have grown since
        // (appended to through another descriptor, such as an `O_DIRECT` writer's): read anew.
        window.name = None;
        // SAFETY: our contract; the window is found no more, so this reads a fresh one.
        let read = (destination, length, position);
        return unsafe { read_from_window(ring, name, direct, read, read_start) };
    }
    // SAFETY: `skip + count <= WINDOW_BYTES` lie in the staging area, in pieces whose reads
    // completed; `destination` is valid for `length >= count` bytes of writes (our contract) and
    // does not overlap the staging area, which this thread owns.
    unsafe { std::ptr::copy_nonoverlapping(window.area().add(skip), destination, count) };
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(reader: u64) -> WindowName {
        WindowName {
            reader,
            generation: 0,
        }
    }

    /// Every window a thread may keep, each named for a reader of its own and touched in turn.
    fn filled_windows(served: bool) -> Windows {
        let mut windows = Windows::default();
        for reader in 0..WINDOWS_PER_THREAD as u64 {
            let index = windows.choose(None);
            windows.touch(index);
            windows.windows[index].name = Some(name(reader));
            windows.windows[index].served = served;
        }
        windows
    }

    #[test]
    fn a_freed_window_is_reused_before_another_is_allocated() {
        let mut windows = Windows::default();
        let first = windows.choose(None);
        windows.windows[first].name = Some(name(1));
        let second = windows.choose(Some(first));
        assert_ne!(first, second);
        windows.windows[first].name = None;
        assert_eq!(windows.choose(Some(second)), first);
        assert_eq!(windows.windows.len(), 2);
    }

    #[test]
    fn reading_ahead_takes_no_window_read_ahead_and_not_yet_served() {
        let mut windows = filled_windows(false);
        assert_eq!(windows.choose_ahead(0), None);
        // A read of its own still takes the one unused longest.
        assert_eq!(windows.choose(Some(0)), 1);
    }

    #[test]
    fn reading_ahead_takes_the_served_window_unused_longest() {
        let mut windows = filled_windows(true);
        assert_eq!(windows.choose_ahead(0), Some(1));
        windows.touch(1);
        assert_eq!(windows.choose_ahead(0), Some(2));
    }
}
