//! The io_uring backend: each thread that does I/O (in the engine, each shard) gets its own ring,
//! created on first use and used by that thread alone (`SINGLE_ISSUER`, with `COOP_TASKRUN` and
//! `DEFER_TASKRUN` where the kernel has them).
//!
//! Single operations are submitted and waited for at once. The gain is in groups:
//! [`Storage::sync_data_many`] submits one `fdatasync` per file in a single `io_uring_enter` and
//! waits for all of them, so the syncs of a group commit run concurrently in the kernel instead of
//! one after another. A lone file's sync is a plain `fdatasync`: the ring would punt it to an
//! io-wq worker, which only adds a hand-over. Files are opened buffered (PERFORMANCE-NOTES.md:
//! deep queues on buffered files are slow on this kind of machine).
//!
//! Reads first copy what the page cache holds with `preadv2(RWF_NOWAIT)`, as cheap as a `pread`
//! (through the ring a cached read cost a point lookup more, BENCHMARKS.md § Tried and not kept).
//! Only the bytes that must come from the device go through the ring, and the thread polls for
//! their completion for up to `READ_POLL` instead of sleeping in the kernel: a thread that slept
//! through the read is woken when it completes, and in a VM whose idle vCPUs halt that wake-up is
//! the host starting the vCPU again (polled, cold point lookups ran faster in alternating runs).
//! Past `READ_POLL` (a slow device, a large read) it waits asleep. Writes are plain `pwrite`s on
//! the calling thread: the ring punts a buffered write, and an `O_DIRECT` write into blocks ext4
//! must allocate or convert, to an io-wq worker, and the shard would wait for it (BENCHMARKS.md §
//! Tried and not kept).
//!
//! Directory operations (create, list, rename, remove, dir fsync) are rare and go through std.
//!
//! Memory safety: the kernel writes into (or reads from) the caller's buffer until the operation's
//! completion arrives. Every function here returns only after it has reaped the completion of
//! every operation it submitted, except the windows' reads ahead of large cold reads, whose
//! buffers the thread's ring owns (`cold.rs`; UNSAFE.md § io/uring.rs).
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, squeue, types};

use super::pio::PositionedIo;
use super::{OpenMode, Storage, StorageFile};

mod cold;
mod writes;

/// Submission queue entries per ring (the completion queue holds twice as many).
const RING_ENTRIES: u32 = 256;

/// The entries of a group submitted at once: larger groups are submitted in chunks. Half the
/// ring, so that with every window piece (`cold.rs`) and every write behind (`writes.rs`) in
/// flight the completions fit the completion queue and the submission queue has room.
const CHUNK_ENTRIES: usize = RING_ENTRIES as usize / 2;
const _: () = assert!(
    CHUNK_ENTRIES + cold::PIECES_PER_THREAD + writes::IN_FLIGHT_MAX <= RING_ENTRIES as usize
);

/// How long a read from the device is polled for before the thread waits for it asleep: a few
/// small reads' time on an SSD at queue depth 1, so a point lookup's or a
/// fetch's read is polled while a read held up by a slow or busy device does not keep the CPU.
const READ_POLL: Duration = Duration::from_micros(500);

/// io_uring for file data; std for directories.
#[derive(Debug, Clone, Copy)]
pub struct UringIo {
    /// Large reads the page cache holds none of go past it (`O_DIRECT`, `cold.rs`).
    direct_cold_reads: bool,
}

impl Default for UringIo {
    /// Every read through the page cache.
    fn default() -> UringIo {
        UringIo::with_direct_cold_reads(false)
    }
}

impl UringIo {
    /// The backend with large cold reads past the page cache (`true`) or through it (`false`, the
    /// default; `EngineConfig::direct_cold_reads`).
    pub fn with_direct_cold_reads(direct_cold_reads: bool) -> UringIo {
        UringIo { direct_cold_reads }
    }

    /// Checks that this process may create a ring (kernel support, `io_uring_disabled`, seccomp,
    /// memlock limits). Returns the reason when it may not.
    pub fn probe() -> io::Result<()> {
        build_ring().map(drop)
    }
}

thread_local! {
    static RING: RefCell<RingSlot> = const { RefCell::new(RingSlot::Unset) };
}

enum RingSlot {
    Unset,
    Ready(Box<Ring>),
    /// Ring creation failed on this thread: operations fall back to positioned I/O.
    Unavailable,
}

/// A thread's ring, the windows its large cold reads fill ahead (`cold.rs`) and its writes
/// behind (`writes.rs`): the only operations that stay in flight after the function that
/// submitted them returns.
struct Ring {
    uring: IoUring,
    windows: cold::Windows,
    writes: writes::WritesBehind,
}

impl Ring {
    /// Takes every completion posted: a window piece's (tagged [`cold::WINDOW_PIECE_TAG`]) to its
    /// window, any other's result to `results[user_data]`. Returns how many of the latter.
    fn reap(&mut self, results: &mut [i32]) -> usize {
        let mut reaped = 0;
        let mut again = Vec::new();
        for completion in self.uring.completion() {
            let user_data = completion.user_data();
            if user_data & cold::WINDOW_PIECE_TAG != 0 {
                self.windows.complete(user_data, completion.result());
            } else if user_data & writes::WRITE_TAG != 0 {
                again.extend(self.writes.complete(user_data, completion.result()));
            } else if let Some(slot) = results.get_mut(user_data as usize) {
                *slot = completion.result();
                reaped += 1;
            }
        }
        for entry in &again {
            // SAFETY: the rest of a write behind, whose buffer `writes` owns until the write's
            // completion is reaped.
            unsafe { self.push(entry) };
        }
        if !again.is_empty()
            && let Err(error) = self.uring.submit()
        {
            tracing::debug!("io_uring_enter: {error}; the next enter submits them");
        }
        reaped
    }

    /// Waits until no write behind is in flight.
    fn complete_writes(&mut self) {
        self.wait_until(Duration::ZERO, |ring| {
            ring.reap(&mut []);
            ring.writes.in_flight() == 0
        });
    }

    /// Starts writing `buffer[..length]` at `position` of `fd`, after waiting for room
    /// (`writes::IN_FLIGHT_MAX`).
    fn write_behind(
        &mut self,
        buffer: crate::io::direct_buffer::DirectBuffer,
        (fd, length, position): (std::os::fd::RawFd, usize, u64),
        progress: std::sync::Arc<crate::io::write_progress::WriteProgress>,
    ) {
        if self.writes.in_flight() >= writes::IN_FLIGHT_MAX {
            self.wait_until(Duration::ZERO, |ring| {
                ring.reap(&mut []);
                ring.writes.in_flight() < writes::IN_FLIGHT_MAX
            });
        }
        let entry = self.writes.start(buffer, fd, length, position, progress);
        // SAFETY: `writes` owns the buffer until the write's completion is reaped.
        unsafe { self.push(&entry) };
        if let Err(error) = self.uring.submit() {
            tracing::debug!("io_uring_enter: {error}; the next enter submits it");
        }
    }

    /// Reaps completions until `done` says so, polling for up to `poll` without sleeping
    /// (`spin::pause` between checks), then asleep in the kernel. `done` reaps (`Ring::reap`).
    ///
    /// While the thread polls, a completion is posted by the thread's own task work: the kernel
    /// sets the queue's `TASKRUN` flag and the next `io_uring_enter` runs it (with `DEFER_TASKRUN`
    /// only an enter does; on a ring without the flags, any system call's return does, a yield
    /// among them). `done` must turn true once what it waits for completed, which must be in
    /// flight: asleep, the thread waits for a completion.
    fn wait_until(&mut self, poll: Duration, mut done: impl FnMut(&mut Ring) -> bool) {
        let started = Instant::now();
        while !done(self) {
            if started.elapsed() >= poll {
                if let Err(error) = self.uring.submit_and_wait(1) {
                    // Interrupted or the completion queue is momentarily full: wait again.
                    // Returning would free a buffer the kernel may still write.
                    tracing::debug!("io_uring_enter: {error}; waiting again");
                }
            } else if self.uring.submission().taskrun() {
                let _ = self.uring.submit();
            } else {
                crate::spin::pause(started);
            }
        }
    }

    /// Queues `entry`, submitting what is queued first when the queue is full (which the chunks
    /// of `submit_and_reap` and a window's 16 pieces, each submitted at once, never make it).
    ///
    /// # Safety
    /// As `io_uring::SubmissionQueue::push`: every buffer `entry` points at stays valid until its
    /// completion is reaped.
    unsafe fn push(&mut self, entry: &squeue::Entry) {
        loop {
            // SAFETY: our contract.
            if unsafe { self.uring.submission().push(entry) }.is_ok() {
                return;
            }
            if let Err(error) = self.uring.submit() {
                tracing::debug!("io_uring_enter: {error}; submitting again");
            }
        }
    }
}

impl Drop for Ring {
    /// Waits for the windows' reads still in flight (a thread ending with reads ahead that it
    /// did not use): their buffers are freed with the windows, right after.
    fn drop(&mut self) {
        self.wait_until(Duration::ZERO, |ring| {
            ring.reap(&mut []);
            !ring.windows.any_in_flight() && ring.writes.in_flight() == 0
        });
    }
}

fn build_ring() -> io::Result<IoUring> {
    // `TASKRUN_FLAG`: the kernel flags the submission queue when a completion waits for this
    // thread to run its task work, so a polled read enters the kernel only then
    // (`submit_and_poll`).
    let attempts: [fn(&mut io_uring::Builder); 3] = [
        |builder| {
            builder
                .setup_single_issuer()
                .setup_coop_taskrun()
                .setup_defer_taskrun()
                .setup_taskrun_flag();
        },
        |builder| {
            builder.setup_coop_taskrun().setup_taskrun_flag();
        },
        |_| {},
    ];
    let mut last_error = io::Error::from(io::ErrorKind::Unsupported);
    for configure in attempts {
        let mut builder = IoUring::builder();
        configure(&mut builder);
        match builder.build(RING_ENTRIES) {
            Ok(ring) => return Ok(ring),
            // EINVAL: a flag this kernel does not know; try fewer flags. Anything else is final.
            Err(error) if error.raw_os_error() == Some(22) => last_error = error,
            Err(error) => return Err(error),
        }
    }
    Err(last_error)
}

/// Runs `operation` with this thread's ring, or returns `None` when the thread has no ring.
fn with_ring<T>(operation: impl FnOnce(&mut Ring) -> T) -> Option<T> {
    RING.with(|slot| {
        let mut slot = slot.borrow_mut();
        if matches!(*slot, RingSlot::Unset) {
            *slot = match build_ring() {
                Ok(uring) => RingSlot::Ready(Box::new(Ring {
                    uring,
                    windows: cold::Windows::default(),
                    writes: writes::WritesBehind::default(),
                })),
                Err(error) => {
                    tracing::warn!(
                        "io_uring unavailable on this thread ({error}); using positioned I/O"
                    );
                    RingSlot::Unavailable
                }
            };
        }
        match &mut *slot {
            RingSlot::Ready(ring) => Some(operation(ring)),
            _ => None,
        }
    })
}

/// Runs `operation` with this thread's ring if it has one already (never creates it).
fn with_ready_ring<T>(operation: impl FnOnce(&mut Ring) -> T) -> Option<T> {
    RING.with(|slot| match &mut *slot.borrow_mut() {
        RingSlot::Ready(ring) => Some(operation(ring)),
        _ => None,
    })
}

/// Completes this thread's writes behind, if it has any in flight: every operation of the backend
/// but a write behind calls it first, so that no read, sync, length change or other write sees
/// the file before a write behind landed.
fn fence() {
    RING.with(|slot| match slot.try_borrow_mut() {
        Ok(mut slot) => {
            if let RingSlot::Ready(ring) = &mut *slot
                && ring.writes.in_flight() > 0
            {
                ring.complete_writes();
            }
        }
        // Only a ring operation borrows the slot, and none calls back into the backend.
        Err(_) => debug_assert!(false, "fence inside a ring operation"),
    });
}

/// Submits `entries` and returns each one's result (`cqe.res`), in order.
///
/// # Safety
/// Every buffer an entry points at must stay valid (and, for reads, unaliased) until this
/// function returns. It returns only after the completions of all submitted entries were reaped.
unsafe fn submit_and_reap(ring: &mut Ring, entries: &[squeue::Entry]) -> Vec<i32> {
    let mut results = vec![0i32; entries.len()];
    // In chunks, each reaped before the next is pushed, so that with the windows' pieces in
    // flight the completions never outnumber the completion queue (twice `RING_ENTRIES`).
    for (chunk_index, chunk) in entries.chunks(CHUNK_ENTRIES).enumerate() {
        let first = chunk_index * CHUNK_ENTRIES;
        for (index, entry) in chunk.iter().enumerate() {
            // SAFETY: the caller keeps every buffer valid until we return, and we return only
            // after reaping this entry's completion (below).
            unsafe { ring.push(&entry.clone().user_data((first + index) as u64)) };
        }
        let mut outstanding = chunk.len();
        // Asleep at once: a sync or a write, not worth polling for.
        ring.wait_until(Duration::ZERO, |ring| {
            outstanding -= ring.reap(&mut results);
            outstanding == 0
        });
    }
    results
}

/// Submits `entries` and polls for their completions, for up to `poll` without sleeping, then
/// asleep (`Ring::wait_until`); writes each one's result (`cqe.res`) to `results`, in order.
///
/// # Safety
/// Every buffer an entry points at must stay valid, and unaliased, until this function returns.
/// It returns only after every entry's completion was reaped. `results` is as long as `entries`.
unsafe fn submit_and_poll(
    ring: &mut Ring,
    entries: &[squeue::Entry],
    results: &mut [i32],
    poll: Duration,
) {
    debug_assert_eq!(entries.len(), results.len());
    for (index, entry) in entries.iter().enumerate() {
        // SAFETY: the caller keeps every buffer valid until we return, and we return only after
        // reaping every completion (below).
        unsafe { ring.push(&entry.clone().user_data(index as u64)) };
    }
    // An error leaves the entries queued: the next enter submits them.
    let _ = ring.uring.submit();
    let mut outstanding = entries.len();
    ring.wait_until(poll, |ring| {
        outstanding -= ring.reap(results);
        outstanding == 0
    });
}

/// `position` as a system call's file offset; `EINVAL` past `off_t`'s range, as the kernel says.
fn file_offset(position: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(position).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn result_to_io(result: i32) -> io::Result<usize> {
    if result < 0 {
        Err(io::Error::from_raw_os_error(-result))
    } else {
        Ok(result as usize)
    }
}

#[derive(Debug)]
struct UringFile {
    file: File,
    /// The file system refused `RWF_NOWAIT` reads (`EOPNOTSUPP`): reads are plain `pread`s.
    nowait_refused: AtomicBool,
    /// Large cold reads' `O_DIRECT` side; `None` when they go through the page cache.
    cold: Option<cold::ColdReader>,
    /// The file's changes, bumped before each write and length change, when cold reads are on
    /// (whether this descriptor reads or is a segment's `O_DIRECT` writer).
    generation: Option<cold::Generation>,
    /// This descriptor's writes behind in flight (`writes.rs`) and their first failure.
    write_progress: std::sync::Arc<crate::io::write_progress::WriteProgress>,
}

impl UringFile {
    fn new(file: File, direct: bool, direct_cold_reads: bool) -> UringFile {
        let generation = direct_cold_reads.then(|| cold::generation_of(&file));
        UringFile {
            // A file opened `O_DIRECT` is only written (`segment::direct`).
            cold: generation
                .clone()
                .filter(|_| !direct)
                .map(cold::ColdReader::new),
            file,
            nowait_refused: AtomicBool::new(false),
            generation,
            write_progress: Default::default(),
        }
    }

    /// The file is about to be written or change length: no window read before serves it.
    fn file_changed(&self) {
        if let Some(generation) = &self.generation {
            generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The cold reader and its descriptor when `[position, position + length)` is to be read
    /// past the page cache (`cold.rs`).
    fn direct_reader(&self, position: u64, length: usize) -> Option<(&cold::ColdReader, &File)> {
        let cold = self.cold.as_ref()?;
        let direct = cold.for_read(&self.file, position, length)?;
        Some((cold, direct))
    }

    /// Reads up to `length` bytes at `position` into `destination`, retrying short reads; returns
    /// the bytes read, fewer only at the end of the file. A large read the page cache holds none
    /// of is read past it (`cold.rs`). Otherwise what the page cache holds is copied by
    /// `preadv2(RWF_NOWAIT)`, and a read that would wait for the device goes through the ring,
    /// polled (`submit_and_poll`).
    ///
    /// # Safety
    /// `destination` must be valid for writes of `length` bytes, and unaliased, for the call.
    unsafe fn read_raw(
        &self,
        destination: *mut u8,
        length: usize,
        position: u64,
    ) -> io::Result<usize> {
        if let Some((cold, direct)) = self.direct_reader(position, length) {
            // SAFETY: our contract is the cold reader's.
            if let Some(read) = unsafe { cold.read(direct, destination, length, position) } {
                return read;
            }
        }
        let asleep = crate::io::reads_wait_asleep();
        let mut read = 0;
        while read < length {
            // SAFETY: `read < length`: the rest of the destination is within it.
            let rest = unsafe { destination.add(read) };
            let (rest_length, at) = (length - read, position + read as u64);
            // SAFETY: `rest` is valid for `rest_length` bytes of writes (our contract).
            let count = match unsafe { self.read_cached_unless(asleep, rest, rest_length, at) } {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    // SAFETY: as above.
                    unsafe { self.read_from_device(rest, rest_length, at, READ_POLL) }
                }
                other => other,
            };
            match count {
                Ok(0) => break,
                Ok(count) => read += count,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(read)
    }

    /// [`UringFile::read_cached`], or a plain `pread` on a thread whose reads wait `asleep`.
    ///
    /// # Safety
    /// As [`UringFile::read_raw`].
    unsafe fn read_cached_unless(
        &self,
        asleep: bool,
        destination: *mut u8,
        length: usize,
        position: u64,
    ) -> io::Result<usize> {
        match asleep {
            // SAFETY: our contract is `pread`'s.
            true => unsafe { self.pread(destination, length, position) },
            // SAFETY: our contract is `read_cached`'s.
            false => unsafe { self.read_cached(destination, length, position) },
        }
    }

    /// One `preadv2(RWF_NOWAIT)`: the bytes from `position` that the page cache holds, or
    /// `WouldBlock` when the first of them is not there. A file system without such reads gets a
    /// plain `pread`, from then on.
    ///
    /// # Safety
    /// As [`UringFile::read_raw`].
    unsafe fn read_cached(
        &self,
        destination: *mut u8,
        length: usize,
        position: u64,
    ) -> io::Result<usize> {
        if !self.nowait_refused.load(Ordering::Relaxed) {
            let slice = libc::iovec {
                iov_base: destination.cast(),
                iov_len: length,
            };
            let fd = self.file.as_raw_fd();
            // SAFETY: the one iovec covers `length` bytes the caller lets us write; the kernel
            // writes at most that and only during the call.
            let count =
                unsafe { libc::preadv2(fd, &slice, 1, file_offset(position)?, libc::RWF_NOWAIT) };
            if count >= 0 {
                return Ok(count as usize);
            }
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(error);
            }
            self.nowait_refused.store(true, Ordering::Relaxed);
        }
        // SAFETY: our contract is `pread`'s.
        unsafe { self.pread(destination, length, position) }
    }

    /// One plain `pread`, asleep while it waits for the device.
    ///
    /// # Safety
    /// As [`UringFile::read_raw`].
    unsafe fn pread(
        &self,
        destination: *mut u8,
        length: usize,
        position: u64,
    ) -> io::Result<usize> {
        let (fd, offset) = (self.file.as_raw_fd(), file_offset(position)?);
        // SAFETY: the kernel writes at most `length` bytes at `destination`, which the caller
        // lets us write, and only during the call.
        let count = unsafe { libc::pread(fd, destination.cast(), length, offset) };
        if count < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(count as usize)
    }

    /// One read that waits for the device: through this thread's ring, polled for up to `poll`,
    /// or a `pread` where the thread has no ring.
    ///
    /// # Safety
    /// As [`UringFile::read_raw`].
    unsafe fn read_from_device(
        &self,
        destination: *mut u8,
        length: usize,
        position: u64,
        poll: Duration,
    ) -> io::Result<usize> {
        let fd = types::Fd(self.file.as_raw_fd());
        let length = length.min(u32::MAX as usize);
        let entry = opcode::Read::new(fd, destination, length as u32)
            .offset(position)
            .build();
        let mut result = [0];
        // SAFETY: the destination stays valid for the call (our contract) and `submit_and_poll`
        // returns only after the read completed.
        match with_ring(|ring| unsafe { submit_and_poll(ring, &[entry], &mut result, poll) }) {
            Some(()) => result_to_io(result[0]),
            // SAFETY: our contract is `pread`'s.
            None => unsafe { self.pread(destination, length, position) },
        }
    }
}

impl StorageFile for UringFile {
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        fence();
        // SAFETY: `buf` is borrowed mutably for the whole call.
        unsafe { self.read_raw(buf.as_mut_ptr(), buf.len(), position) }
    }

    fn read_to_vec(&self, length: usize, position: u64) -> io::Result<Vec<u8>> {
        fence();
        // Into the spare capacity, never zeroed first (the trait's default says why).
        let mut buffer = Vec::with_capacity(length);
        // SAFETY: the spare capacity holds at least `length` bytes, owned by this call.
        let read = unsafe { self.read_raw(buffer.as_mut_ptr(), length, position)? };
        // SAFETY: `read_raw` wrote the first `read <= length` bytes.
        unsafe { buffer.set_len(read) };
        Ok(buffer)
    }

    /// `pwrite`s on the calling thread, for every file, `O_DIRECT` or not (the module
    /// documentation says why).
    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        fence();
        self.file_changed();
        self.file.write_all_at(buf, position)
    }

    /// On the thread's ring, left in flight (`writes.rs`), from a buffer of the ring's pool; a
    /// plain write from the staging area where the thread has no ring.
    fn write_direct_behind(
        &self,
        length: usize,
        position: u64,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> io::Result<()> {
        crate::io::check_write_behind_length(length)?;
        self.file_changed();
        let fd = self.file.as_raw_fd();
        let progress = std::sync::Arc::clone(&self.write_progress);
        let started = with_ring(|ring| {
            let mut buffer = ring.writes.take_buffer();
            fill(&mut buffer.as_mut_slice()[..length]);
            ring.write_behind(buffer, (fd, length, position), progress);
        });
        match started {
            Some(()) => Ok(()),
            None => crate::io::direct_buffer::with_staging(length, |area| {
                fill(area);
                self.file.write_all_at(area, position)
            }),
        }
    }

    fn writes_behind_in_flight(&self) -> bool {
        self.write_progress.any_in_flight()
    }

    fn take_write_error(&self) -> io::Result<()> {
        fence();
        self.write_progress.take()
    }

    fn complete_own_writes(&self) -> io::Result<()> {
        if self.write_progress.any_in_flight() {
            with_ring(|ring| {
                ring.wait_until(Duration::ZERO, |ring| {
                    ring.reap(&mut []);
                    !self.write_progress.any_in_flight()
                })
            });
        }
        self.write_progress.take()
    }

    fn write_mark(&self) -> Option<crate::io::WriteMark> {
        Some(self.write_progress.mark())
    }

    fn sync_data(&self) -> io::Result<()> {
        fence();
        self.file.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        fence();
        self.file.sync_all()
    }

    fn length_bytes(&self) -> io::Result<u64> {
        fence();
        Ok(self.file.metadata()?.len())
    }

    fn set_length_bytes(&self, length_bytes: u64) -> io::Result<()> {
        fence();
        self.file_changed();
        self.file.set_len(length_bytes)
    }

    /// Without a fence: reserving space changes no byte a write behind covers (a segment
    /// reserves past its writes), and the thread's writes to other files stay in flight.
    fn allocate(&self, position: u64, length: u64) -> io::Result<bool> {
        crate::io::allocate_file(&self.file, position, length)
    }

    fn next_data(&self, position: u64) -> io::Result<Option<u64>> {
        fence();
        crate::io::next_data_of(&self.file, position)
    }

    fn next_hole(&self, position: u64) -> io::Result<u64> {
        fence();
        crate::io::next_hole_of(&self.file, position)
    }

    fn modified_ms(&self) -> io::Result<i64> {
        fence();
        PositionedIo::modified_ms_of(&self.file)
    }

    fn as_file(&self) -> Option<&File> {
        Some(&self.file)
    }

    /// `POSIX_FADV_WILLNEED`, except over a range a cold read would read past the page cache:
    /// pages brought in ahead would only turn the next read into a buffered one.
    fn prefetch(&self, position: u64, length: u64) {
        let length_bytes = usize::try_from(length).unwrap_or(usize::MAX);
        if self.direct_reader(position, length_bytes).is_some() {
            return;
        }
        let length = std::num::NonZeroU64::new(length);
        let _ = rustix::fs::fadvise(&self.file, position, length, rustix::fs::Advice::WillNeed);
    }
}

/// `fdatasync`s every file in one submission; one result per file. A lone file is synced by a
/// plain `fdatasync` on the calling thread: the ring punts every fsync to an io-wq worker, and the
/// hand-over to it and back costs a lone durable writer some of its appends/s (BENCHMARKS.md §
/// Tried and not kept).
fn sync_files(files: &[&File], kind: SyncKind) -> Vec<io::Result<()>> {
    let sync_alone = |file: &File| match kind {
        SyncKind::Data => file.sync_data(),
        SyncKind::All => file.sync_all(),
    };
    if let [file] = files {
        return vec![sync_alone(file)];
    }
    let flags = match kind {
        SyncKind::Data => types::FsyncFlags::DATASYNC,
        SyncKind::All => types::FsyncFlags::empty(),
    };
    let entries: Vec<squeue::Entry> = files
        .iter()
        .map(|file| {
            opcode::Fsync::new(types::Fd(file.as_raw_fd()))
                .flags(flags)
                .build()
        })
        .collect();
    // SAFETY: fsync entries point at no memory; the files stay open for this whole call.
    match with_ring(|ring| unsafe { submit_and_reap(ring, &entries) }) {
        Some(results) => results
            .into_iter()
            .map(|result| result_to_io(result).map(drop))
            .collect(),
        None => files.iter().map(|file| sync_alone(file)).collect(),
    }
}

/// What [`sync_files`] makes durable.
#[derive(Debug, Clone, Copy)]
enum SyncKind {
    /// The data (`fdatasync`): a segment's appends.
    Data,
    /// Data and metadata (`fsync`): a directory's entries.
    All,
}

/// Directories [`UringIo::sync_dirs_many`] holds open at once per thread: each is opened, its
/// fsync submitted with the others', and closed once reaped. Their descriptors come out of the
/// engine's reserve (`FILES_RESERVED`); the ring's workers run fewer fsyncs than this at once.
const DIR_SYNCS_OPEN_MAX: usize = 32;

/// `fsync`s every directory of `dirs` in one submission; one result per directory (a directory
/// that cannot be opened fails alone).
fn sync_dirs(dirs: &[&Path]) -> Vec<io::Result<()>> {
    let opened: Vec<io::Result<File>> = dirs.iter().map(File::open).collect();
    let files: Vec<&File> = opened.iter().filter_map(|file| file.as_ref().ok()).collect();
    let mut synced = sync_files(&files, SyncKind::All).into_iter();
    opened
        .into_iter()
        .map(|file| file.and_then(|_| synced.next().unwrap_or(Ok(()))))
        .collect()
}

impl Storage for UringIo {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        fence();
        let file = PositionedIo::open_file(path, mode)?;
        let direct = mode == OpenMode::ExistingDirect;
        Ok(Box::new(UringFile::new(
            file,
            direct,
            self.direct_cold_reads,
        )))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fence();
        PositionedIo.create_dir_all(dir)
    }

    fn complete_writes(&self) {
        fence();
    }

    /// Registers `eventfd` with the thread's ring (`IORING_REGISTER_EVENTFD`): the kernel signals
    /// it when a completion is posted or, with `DEFER_TASKRUN`, queued for the thread to post.
    fn attach_waker(&self, eventfd: std::os::fd::BorrowedFd<'_>) -> bool {
        let registered =
            with_ring(|ring| ring.uring.submitter().register_eventfd(eventfd.as_raw_fd()));
        match registered {
            Some(Err(error)) => {
                tracing::warn!(
                    "io_uring: registering an eventfd failed ({error}); writes behind complete at the end of each turn"
                );
                false
            }
            // Registered, or no ring: every write is done before it returns.
            _ => true,
        }
    }

    fn completions_waiting(&self) -> bool {
        with_ready_ring(|ring| {
            ring.uring.submission().taskrun() || !ring.uring.completion().is_empty()
        })
        .unwrap_or(false)
    }

    fn reap_completions(&self) {
        with_ready_ring(|ring| {
            if ring.uring.submission().taskrun()
                && let Err(error) = ring.uring.submit()
            {
                tracing::debug!("io_uring_enter: {error}; the next enter runs the completions");
            }
            ring.reap(&mut []);
        });
    }

    /// With cold reads past the page cache, every window the thread may use, in memory now: a
    /// first cold read then waits for the device only, not for 64 MiB of huge pages to be found
    /// and zeroed (after free page reporting, faulted in from the host): a settled
    /// `fetch-cold --direct-reads` read faster from its start, and its longest fetch was shorter.
    fn prepare_reader_thread(&self) {
        if self.direct_cold_reads {
            with_ring(|ring| ring.windows.reserve());
        }
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        fence();
        PositionedIo.list_dir(dir)
    }

    fn list_subdirs(&self, dir: &Path) -> io::Result<Vec<String>> {
        PositionedIo.list_subdirs(dir)
    }

    fn file_length(&self, path: &Path) -> io::Result<u64> {
        PositionedIo.file_length(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        PositionedIo.is_dir(path)
    }

    fn exists(&self, path: &Path) -> bool {
        PositionedIo.exists(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fence();
        PositionedIo.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fence();
        PositionedIo.remove_file(path)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        fence();
        PositionedIo.remove_dir_all(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        fence();
        PositionedIo.sync_dir(dir)
    }

    fn sync_data_many(&self, files: &[&dyn StorageFile]) -> Vec<io::Result<()>> {
        fence();
        let std_files: Option<Vec<&File>> = files.iter().map(|file| file.as_file()).collect();
        match std_files {
            Some(std_files) => sync_files(&std_files, SyncKind::Data),
            None => files.iter().map(|file| file.sync_data()).collect(),
        }
    }

    /// Many directories of one parent: one `syncfs` (`sync_dirs_by_file_system`). Else the
    /// directories' fsyncs go through the ring together, `DIR_SYNCS_OPEN_MAX` at a time.
    fn sync_dirs_many(&self, dirs: &[&Path]) -> Vec<io::Result<()>> {
        fence();
        if let Some(results) = crate::io::sync_dirs_by_file_system(dirs) {
            return results;
        }
        dirs.chunks(DIR_SYNCS_OPEN_MAX).flat_map(sync_dirs).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::ring_tests_must_run;

    #[test]
    fn group_syncs_go_through_the_ring_and_reads_see_buffered_and_direct_writes() {
        if !ring_tests_must_run(
            "io::uring::tests::group_syncs_go_through_the_ring_and_reads_see_buffered_and_direct_writes",
        ) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let storage = UringIo::default();
        let first = storage
            .open(&dir.path().join("a"), OpenMode::CreateNew)
            .unwrap();
        let second = storage
            .open(&dir.path().join("b"), OpenMode::CreateNew)
            .unwrap();
        let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        first.write_all_at(&payload, 4096).unwrap();
        second.write_all_at(b"hello", 0).unwrap();
        let results = storage.sync_data_many(&[first.as_ref(), second.as_ref()]);
        assert!(results.iter().all(Result::is_ok));
        let mut read = vec![0u8; payload.len() + 10];
        let count = first.read_at(&mut read, 4096).unwrap();
        assert_eq!(count, payload.len(), "a read stops at the end of the file");
        assert_eq!(&read[..count], &payload[..]);
        assert_eq!(first.length_bytes().unwrap(), 4096 + payload.len() as u64);
        // A direct write: one aligned block over the first one.
        let direct = storage
            .open(&dir.path().join("a"), OpenMode::ExistingDirect)
            .unwrap();
        let mut memory = vec![7u8; 3 * 4096];
        let start = (memory.as_ptr() as usize).next_multiple_of(4096) - memory.as_ptr() as usize;
        direct
            .write_all_at(&memory[start..start + 4096], 0)
            .unwrap();
        memory.clear();
        let mut head = vec![0u8; 4096];
        first.read_at(&mut head, 0).unwrap();
        assert!(head.iter().all(|byte| *byte == 7));
        assert!(RING.with(|slot| matches!(*slot.borrow(), RingSlot::Ready(_))));
    }

    #[test]
    fn errors_come_back_as_io_errors() {
        if !ring_tests_must_run("io::uring::tests::errors_come_back_as_io_errors") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ro");
        std::fs::write(&path, b"x").unwrap();
        let read_only = File::open(&path).unwrap();
        let file = UringFile::new(read_only, false, true);
        let error = file.write_all_at(b"y", 0).unwrap_err();
        assert_eq!(
            error.raw_os_error(),
            Some(9),
            "EBADF as an io::Error, not a panic"
        );
    }

    /// The number of writes behind this thread's ring has in flight.
    fn writes_in_flight() -> usize {
        RING.with(|slot| match &*slot.borrow() {
            RingSlot::Ready(ring) => ring.writes.in_flight(),
            _ => 0,
        })
    }

    fn direct_file(path: &Path) -> Box<dyn StorageFile> {
        UringIo::default()
            .open(path, OpenMode::ExistingDirect)
            .unwrap()
    }

    #[test]
    fn writes_behind_stay_in_flight_together_until_a_fence_and_land_whole() {
        if !ring_tests_must_run(
            "io::uring::tests::writes_behind_stay_in_flight_together_until_a_fence_and_land_whole",
        ) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let paths = [dir.path().join("a"), dir.path().join("b")];
        let pieces = 8;
        let piece_bytes = crate::io::WRITE_BEHIND_BYTES_MAX;
        let mut files = Vec::new();
        for (index, path) in paths.iter().enumerate() {
            std::fs::write(path, b"").unwrap();
            let file = direct_file(path);
            // Reserved first, as a direct segment is: no write needs a worker thread.
            assert!(file.allocate(0, (pieces * piece_bytes) as u64).unwrap());
            for piece in 0..pieces {
                let byte = (index * pieces + piece) as u8;
                let position = (piece * piece_bytes) as u64;
                file.write_direct_behind(piece_bytes, position, &mut |area| area.fill(byte))
                    .unwrap();
            }
            files.push(file);
        }
        // Nothing waited: every piece of both files may still be in flight (those already
        // reaped while submitting the next have landed).
        assert!(writes_in_flight() <= 2 * pieces);
        UringIo::default().complete_writes();
        assert_eq!(writes_in_flight(), 0);
        for (index, (path, file)) in paths.iter().zip(&files).enumerate() {
            file.take_write_error().unwrap();
            let bytes = std::fs::read(path).unwrap();
            assert_eq!(bytes.len(), pieces * piece_bytes);
            for (piece, chunk) in bytes.chunks(piece_bytes).enumerate() {
                let byte = (index * pieces + piece) as u8;
                assert!(
                    chunk.iter().all(|b| *b == byte),
                    "file {index} piece {piece}"
                );
            }
        }
    }

    #[test]
    fn a_write_behind_signals_the_attached_eventfd_and_is_done_once_reaped_without_a_fence() {
        if !ring_tests_must_run(
            "io::uring::tests::a_write_behind_signals_the_attached_eventfd_and_is_done_once_reaped_without_a_fence",
        ) {
            return;
        }
        use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};
        use std::os::fd::AsFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, b"").unwrap();
        let file = direct_file(&path);
        file.allocate(0, 2 * 65536).unwrap();
        let eventfd = rustix::event::eventfd(0, EventfdFlags::NONBLOCK).unwrap();
        let storage = UringIo::default();
        assert!(storage.attach_waker(eventfd.as_fd()));
        let before = file.write_mark().unwrap();
        assert!(before.is_done(), "nothing written before it");
        file.write_direct_behind(65536, 0, &mut |area| area.fill(3))
            .unwrap();
        let first = file.write_mark().unwrap();
        file.write_direct_behind(65536, 65536, &mut |area| area.fill(4))
            .unwrap();
        // Asleep on the eventfd alone, as a shard sleeps: the completions wake it.
        while !first.is_done() {
            let mut fds = [PollFd::new(&eventfd, PollFlags::IN)];
            let timeout = Timespec {
                tv_sec: 10,
                tv_nsec: 0,
            };
            let ready = rustix::event::poll(&mut fds, Some(&timeout)).unwrap();
            assert_eq!(ready, 1, "a completion signals the eventfd");
            let mut count = [0u8; 8];
            let _ = rustix::io::read(&eventfd, &mut count);
            storage.reap_completions();
        }
        first.take_error().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes[..65536].iter().all(|byte| *byte == 3));
        storage.complete_writes();
        assert!(file.write_mark().unwrap().is_done());
    }

    #[test]
    fn each_file_knows_whether_its_own_writes_behind_are_in_flight() {
        if !ring_tests_must_run(
            "io::uring::tests::each_file_knows_whether_its_own_writes_behind_are_in_flight",
        ) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let [a, b] = ["a", "b"].map(|name| {
            let path = dir.path().join(name);
            std::fs::write(&path, b"").unwrap();
            direct_file(&path)
        });
        a.allocate(0, 65536).unwrap();
        assert!(!a.writes_behind_in_flight());
        a.write_direct_behind(65536, 0, &mut |area| area.fill(1))
            .unwrap();
        // Nothing reaps a completion before a wait: A's write is counted until the fence.
        assert!(a.writes_behind_in_flight());
        assert!(!b.writes_behind_in_flight(), "B has none of its own");
        UringIo::default().complete_writes();
        assert!(!a.writes_behind_in_flight());
        a.take_write_error().unwrap();
    }

    #[test]
    fn a_read_after_writes_behind_waits_for_them_and_sees_their_bytes() {
        if !ring_tests_must_run(
            "io::uring::tests::a_read_after_writes_behind_waits_for_them_and_sees_their_bytes",
        ) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        std::fs::write(&path, b"").unwrap();
        let reader = UringIo::default().open(&path, OpenMode::Existing).unwrap();
        let writer = direct_file(&path);
        for round in 0..16u8 {
            let position = u64::from(round) * 65536;
            writer
                .write_direct_behind(65536, position, &mut |area| area.fill(round + 1))
                .unwrap();
            let mut read = vec![0; 65536];
            assert_eq!(reader.read_at(&mut read, position).unwrap(), 65536);
            assert!(read.iter().all(|b| *b == round + 1), "round {round}");
            assert_eq!(writes_in_flight(), 0);
        }
    }

    #[test]
    fn a_write_behind_that_fails_in_the_kernel_is_kept_for_its_file_until_taken() {
        use std::os::unix::fs::OpenOptionsExt;
        if !ring_tests_must_run(
            "io::uring::tests::a_write_behind_that_fails_in_the_kernel_is_kept_for_its_file_until_taken",
        ) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ro");
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        // Read-only: the submission succeeds and the write fails at completion (EBADF).
        let read_only = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap();
        let failing = UringFile::new(read_only, true, false);
        let other_path = dir.path().join("rw");
        std::fs::write(&other_path, b"").unwrap();
        let other = direct_file(&other_path);
        failing
            .write_direct_behind(4096, 0, &mut |area| area.fill(1))
            .unwrap();
        other
            .write_direct_behind(4096, 0, &mut |area| area.fill(2))
            .unwrap();
        UringIo::default().complete_writes();
        // Each file keeps its own outcome: the other file's write landed.
        other.take_write_error().unwrap();
        let error = failing.take_write_error().unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EBADF));
        assert!(failing.take_write_error().is_ok(), "taken once");
        assert_eq!(std::fs::read(&other_path).unwrap(), vec![2u8; 4096]);
    }

    /// `length` bytes of a pattern written to a new file in a new directory (on a disk:
    /// `/var/tmp` where it can) and synced, then dropped from the page cache. `None`, after a
    /// `SKIP:` line (a failure under `CI=true`), where `SEGLOG_NO_IO_URING=1` says this runner has
    /// no ring (a panic where it has none and the variable does not say so), where the kernel has
    /// no `cachestat` (before 6.5) to tell, or where the file system keeps the pages (tmpfs).
    /// Probing with a `RWF_NOWAIT` read would not do: a miss starts the kernel's read-ahead.
    fn cold_file(length: usize) -> Option<(tempfile::TempDir, UringFile, Vec<u8>)> {
        // The test's name where the harness named its thread, not on threads the test spawned.
        let test = crate::testing::current_test("an io::uring cold-read test");
        if !ring_tests_must_run(&test) {
            return None;
        }
        let dir = tempfile::tempdir_in("/var/tmp")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let path = dir.path().join("cold");
        let payload: Vec<u8> = (0..length as u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &payload).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        file.sync_all().unwrap();
        let file = UringFile::new(file, false, true);
        file.drop_cache().unwrap();
        match cold::cached_pages(&file.file, 0, length) {
            Ok(0) => Some((dir, file, payload)),
            Ok(pages) => {
                let place = dir.path().display();
                let reason = format!("{place} keeps {pages} dropped pages cached");
                crate::testing::skip(&test, reason);
                None
            }
            Err(error) => {
                crate::testing::skip(&test, format_args!("no cachestat here ({error})"));
                None
            }
        }
    }

    /// `payload` in a new file on tmpfs (`/dev/shm`), opened with direct cold reads on; `None`,
    /// after a `SKIP:` line (a failure under `CI=true`), where there is no `/dev/shm`.
    fn tmpfs_file(payload: &[u8]) -> Option<(tempfile::TempDir, UringFile)> {
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            let test = crate::testing::current_test("an io::uring tmpfs test");
            crate::testing::skip(&test, "no /dev/shm");
            return None;
        }
        let dir = tempfile::tempdir_in(shm).unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, payload).unwrap();
        let file = UringFile::new(File::open(&path).unwrap(), false, true);
        Some((dir, file))
    }

    fn ring_is_ready_on_this_thread() -> bool {
        RING.with(|slot| matches!(*slot.borrow(), RingSlot::Ready(_)))
    }

    #[test]
    fn reads_of_pages_not_in_the_page_cache_go_through_the_ring_and_come_back_whole() {
        // A thread of its own: its ring is made by the first read that needs one.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let Some((_dir, file, payload)) = cold_file(300_000) else {
                    return;
                };
                assert!(!ring_is_ready_on_this_thread());
                let read = file.read_to_vec(100_000, 12_345).unwrap();
                assert_eq!(read, payload[12_345..112_345]);
                assert!(
                    ring_is_ready_on_this_thread(),
                    "the cold read used the ring"
                );

                file.drop_cache().unwrap();
                let mut buffer = vec![0xee; 4];
                assert_eq!(file.read_into(&mut buffer, 9_000, 200_001).unwrap(), 9_000);
                assert_eq!(buffer, payload[200_001..209_001]);

                file.drop_cache().unwrap();
                let tail = file.read_to_vec(10_000, 295_000).unwrap();
                assert_eq!(tail, payload[295_000..], "a cold read stops at the end");
                assert!(file.read_to_vec(10, 400_000).unwrap().is_empty());
            });
        });
    }

    #[test]
    fn a_read_partly_in_the_page_cache_copies_that_part_and_reads_the_rest_from_the_device() {
        let Some((_dir, file, payload)) = cold_file(200_000) else {
            return;
        };
        // The first four pages in the page cache, the rest on the device only.
        assert_eq!(file.read_to_vec(200_000, 0).unwrap(), payload);
        let rest = std::num::NonZeroU64::new(200_000 - 16_384);
        rustix::fs::fadvise(&file.file, 16_384, rest, rustix::fs::Advice::DontNeed).unwrap();
        let mut cached = [0u8; 50_000];
        // SAFETY: `cached` is borrowed mutably for the call.
        let count = unsafe { file.read_cached(cached.as_mut_ptr(), 50_000, 0) };
        assert_eq!(
            count.unwrap(),
            16_384,
            "RWF_NOWAIT stops where the cached pages end"
        );
        let read = file.read_to_vec(50_000, 10_000).unwrap();
        assert_eq!(read, payload[10_000..60_000]);
    }

    #[test]
    fn a_read_polled_past_its_time_is_waited_for_asleep_and_completes() {
        let Some((_dir, file, payload)) = cold_file(100_000) else {
            return;
        };
        let mut buffer = vec![0u8; 30_000];
        // SAFETY: `buffer` is borrowed mutably for the call.
        let read =
            unsafe { file.read_from_device(buffer.as_mut_ptr(), 30_000, 4_321, Duration::ZERO) };
        assert_eq!(read.unwrap(), 30_000);
        assert_eq!(buffer, payload[4_321..34_321]);
    }

    #[test]
    fn a_file_system_without_nowait_reads_is_read_with_pread() {
        // tmpfs refuses `RWF_NOWAIT` with `EOPNOTSUPP` (its pages never wait for a device).
        let payload: Vec<u8> = (0..20_000u32).map(|i| (i % 249) as u8).collect();
        let Some((_dir, file)) = tmpfs_file(&payload) else {
            return;
        };
        assert_eq!(
            file.read_to_vec(15_000, 1_000).unwrap(),
            payload[1_000..16_000]
        );
        assert_eq!(file.read_to_vec(15_000, 10_000).unwrap(), payload[10_000..]);
        let mut probe = [0u8; 1];
        // SAFETY: `probe` is borrowed mutably for the call.
        let refused = unsafe {
            libc::preadv2(
                file.file.as_raw_fd(),
                &libc::iovec {
                    iov_base: probe.as_mut_ptr().cast(),
                    iov_len: 1,
                },
                1,
                0,
                libc::RWF_NOWAIT,
            )
        } < 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::EOPNOTSUPP);
        assert_eq!(file.nowait_refused.load(Ordering::Relaxed), refused);
    }

    /// How many pages of `[position, position + length)` the page cache holds.
    fn cached(file: &UringFile, position: u64, length: usize) -> u64 {
        cold::cached_pages(&file.file, position, length).unwrap()
    }

    #[test]
    fn a_large_read_the_page_cache_holds_none_of_goes_past_it_and_comes_back_whole() {
        let Some((_dir, file, payload)) = cold_file(3 * 1024 * 1024) else {
            return;
        };
        let (position, length) = (5_001, 2 * 1024 * 1024 + 777);
        let read = file.read_to_vec(length, position as u64).unwrap();
        assert_eq!(read, payload[position..position + length]);
        assert_eq!(
            cached(&file, position as u64, length),
            0,
            "an O_DIRECT read leaves the page cache as it was"
        );
        let reader = file.cold.as_ref().unwrap().file.get().unwrap();
        assert!(reader.is_some(), "the direct descriptor was opened");

        let tail = file
            .read_to_vec(1024 * 1024, 3 * 1024 * 1024 - 300_001)
            .unwrap();
        assert_eq!(
            tail,
            payload[3 * 1024 * 1024 - 300_001..],
            "it stops at the end"
        );
        assert_eq!(cached(&file, 0, payload.len()), 0);
    }

    #[test]
    fn a_large_read_the_page_cache_holds_part_of_is_read_through_it() {
        let Some((_dir, file, payload)) = cold_file(1024 * 1024) else {
            return;
        };
        assert_eq!(
            file.read_to_vec(4096, 500_000).unwrap(),
            payload[500_000..504_096]
        );
        let read = file.read_to_vec(600_000, 100_000).unwrap();
        assert_eq!(read, payload[100_000..700_000]);
        assert!(
            cached(&file, 100_000, 600_000) >= 600_000 / 4096,
            "buffered: the range is in the page cache now"
        );
        assert!(
            file.cold.as_ref().unwrap().file.get().is_none(),
            "never reopened"
        );
    }

    #[test]
    fn with_direct_cold_reads_off_a_large_cold_read_fills_the_page_cache() {
        let Some((dir, file, payload)) = cold_file(1024 * 1024) else {
            return;
        };
        let buffered = UringFile::new(File::open(dir.path().join("cold")).unwrap(), false, false);
        drop(file);
        assert!(buffered.cold.is_none());
        assert_eq!(
            buffered.read_to_vec(900_000, 10).unwrap(),
            payload[10..900_010]
        );
        assert!(cached(&buffered, 10, 900_000) >= 900_000 / 4096);
    }

    #[test]
    fn a_direct_read_sees_writes_still_in_the_page_cache() {
        let Some((_dir, file, mut payload)) = cold_file(1024 * 1024) else {
            return;
        };
        // Dirty pages in the middle of a range read past the page cache: the kernel writes them
        // back before it reads the device.
        let fresh = [0xabu8; 10_000];
        file.write_all_at(&fresh, 400_000).unwrap();
        payload[400_000..410_000].copy_from_slice(&fresh);
        let cold = file.cold.as_ref().unwrap();
        let direct = cold::reopen_direct(&file.file).expect("O_DIRECT on the test file system");
        let mut read = vec![0u8; 700_000];
        // SAFETY: `read` is borrowed mutably for the call.
        let count = unsafe { cold.read(&direct, read.as_mut_ptr(), 700_000, 300_003) };
        assert_eq!(count.unwrap().unwrap(), 700_000);
        assert_eq!(read, payload[300_003..1_000_003]);
    }

    #[test]
    fn a_prefetch_over_a_range_to_be_read_past_the_page_cache_brings_nothing_in() {
        let Some((dir, file, _payload)) = cold_file(4 * 1024 * 1024) else {
            return;
        };
        file.prefetch(0, 2 * 1024 * 1024);
        assert_eq!(cached(&file, 0, 2 * 1024 * 1024), 0);
        let buffered = UringFile::new(File::open(dir.path().join("cold")).unwrap(), false, false);
        buffered.prefetch(0, 2 * 1024 * 1024);
        assert!(
            cached(&buffered, 0, 2 * 1024 * 1024) > 0,
            "WILLNEED without direct reads"
        );
    }

    #[test]
    fn a_file_system_that_keeps_its_pages_cached_keeps_large_reads_buffered() {
        // tmpfs: its pages live in the page cache (`cachestat` counts them all), so no read is
        // cold, whether or not it accepts O_DIRECT (Linux 6.6 and later do).
        let Some((_dir, file)) = tmpfs_file(&[3u8; 600_000]) else {
            return;
        };
        assert_eq!(file.read_to_vec(600_000, 0).unwrap(), vec![3u8; 600_000]);
        assert!(
            file.cold.as_ref().unwrap().file.get().is_none(),
            "never reopened"
        );
    }

    #[test]
    fn sequential_cold_reads_are_served_from_windows_read_ahead() {
        let Some((_dir, file, payload)) = cold_file(10 * 1024 * 1024 + 12_345) else {
            return;
        };
        let cold = file.cold.as_ref().unwrap();
        let first = file.read_to_vec(1024 * 1024, 777).unwrap();
        assert_eq!(first, payload[777..777 + 1024 * 1024]);
        assert!(
            cold.window_holds(777 + 1024 * 1024),
            "the rest of its window"
        );
        assert!(
            cold.window_holds(777 + 4 * 1024 * 1024),
            "the window after it is read ahead"
        );
        let mut position = 777 + 1024 * 1024;
        while position < payload.len() {
            let read = file.read_to_vec(1024 * 1024, position as u64).unwrap();
            let end = (position + 1024 * 1024).min(payload.len());
            assert_eq!(read, payload[position..end], "the read at {position}");
            position = end;
        }
        assert!(
            file.read_to_vec(1024 * 1024, position as u64)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            cached(&file, 0, payload.len()),
            0,
            "all of it past the page cache"
        );
    }

    /// A [`cold_file`] of `length` (at least 4 MiB) whose first 1 MiB was read: this thread's
    /// window holds its first 4 MiB.
    fn cold_file_in_a_window(length: usize) -> Option<(tempfile::TempDir, UringFile, Vec<u8>)> {
        let (dir, file, payload) = cold_file(length)?;
        assert_eq!(
            file.read_to_vec(1024 * 1024, 0).unwrap(),
            payload[..1024 * 1024]
        );
        assert!(
            file.cold
                .as_ref()
                .unwrap()
                .window_holds(4 * 1024 * 1024 - 1)
        );
        Some((dir, file, payload))
    }

    #[test]
    fn a_cold_read_after_a_write_through_the_file_does_not_see_the_window_read_before_it() {
        let Some((_dir, file, mut payload)) = cold_file_in_a_window(6 * 1024 * 1024) else {
            return;
        };
        let fresh = [0x5au8; 10_000];
        file.write_all_at(&fresh, 2 * 1024 * 1024).unwrap();
        payload[2 * 1024 * 1024..][..10_000].copy_from_slice(&fresh);
        file.sync_data().unwrap();
        file.drop_cache().unwrap();
        assert_eq!(cached(&file, 0, payload.len()), 0);
        let read = file
            .read_to_vec(1024 * 1024, 2 * 1024 * 1024 - 5_000)
            .unwrap();
        assert_eq!(read, payload[2 * 1024 * 1024 - 5_000..][..1024 * 1024]);
    }

    #[test]
    fn a_cold_read_after_a_write_through_an_o_direct_descriptor_does_not_see_the_window_before_it()
    {
        let Some((dir, file, mut payload)) = cold_file_in_a_window(5 * 1024 * 1024) else {
            return;
        };
        // The segment's O_DIRECT writer: a descriptor of its own on the same file, which
        // rewrites a block below the end (as it rewrites the last partial block on each append).
        let Ok(direct) =
            PositionedIo::open_file(&dir.path().join("cold"), OpenMode::ExistingDirect)
        else {
            return; // no O_DIRECT here
        };
        let writer = UringFile::new(direct, true, true);
        let mut memory = vec![0x77u8; 3 * 4096];
        let start = (memory.as_ptr() as usize).next_multiple_of(4096) - memory.as_ptr() as usize;
        writer
            .write_all_at(&memory[start..start + 4096], 3 * 1024 * 1024)
            .unwrap();
        memory.clear();
        payload[3 * 1024 * 1024..][..4096].fill(0x77);
        file.drop_cache().unwrap();
        let read = file
            .read_to_vec(512 * 1024, 3 * 1024 * 1024 - 100_000)
            .unwrap();
        assert_eq!(read, payload[3 * 1024 * 1024 - 100_000..][..512 * 1024]);
    }

    #[test]
    fn a_cold_read_past_where_a_window_found_the_end_sees_what_was_appended_since() {
        let Some((dir, file, mut payload)) = cold_file(1024 * 1024 + 100) else {
            return;
        };
        let read = file.read_to_vec(2 * 1024 * 1024, 0).unwrap();
        assert_eq!(read, payload, "stops at the end");
        // Appended through another descriptor, as an O_DIRECT writer's appends are.
        let appended: Vec<u8> = (0..600_000u32).map(|i| (i % 13) as u8).collect();
        let other = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("cold"))
            .unwrap();
        std::io::Write::write_all(&mut &other, &appended).unwrap();
        other.sync_all().unwrap();
        payload.extend_from_slice(&appended);
        file.drop_cache().unwrap();
        let read = file.read_to_vec(512 * 1024, 1024 * 1024).unwrap();
        assert_eq!(read, payload[1024 * 1024..][..512 * 1024]);
    }

    #[test]
    fn other_reads_and_syncs_on_the_ring_complete_while_windows_are_read_ahead() {
        let Some((dir, file, payload)) = cold_file(9 * 1024 * 1024) else {
            return;
        };
        let Some((other_dir, other, other_payload)) = cold_file(200_000) else {
            return;
        };
        assert_eq!(
            file.read_to_vec(2 * 1024 * 1024, 0).unwrap(),
            payload[..2 * 1024 * 1024]
        );
        assert!(file.cold.as_ref().unwrap().window_holds(4 * 1024 * 1024));
        // A small cold read (polled on the ring) and a group sync (reaped) while the window
        // after the first is still being read.
        assert_eq!(
            other.read_to_vec(8192, 100_000).unwrap(),
            other_payload[100_000..108_192]
        );
        // More files than a chunk: the group is submitted in two.
        let storage = UringIo::default();
        let synced: Vec<Box<dyn StorageFile>> = (0..CHUNK_ENTRIES + 20)
            .map(|index| {
                let place = [dir.path(), other_dir.path()][index % 2];
                let path = place.join(format!("s{index}"));
                storage.open(&path, OpenMode::CreateNew).unwrap()
            })
            .collect();
        for each in &synced {
            each.write_all_at(b"x", 0).unwrap();
        }
        let refs: Vec<&dyn StorageFile> = synced.iter().map(|each| each.as_ref()).collect();
        assert!(storage.sync_data_many(&refs).iter().all(Result::is_ok));
        let mut position = 2 * 1024 * 1024;
        while position < payload.len() {
            let read = file.read_to_vec(1024 * 1024, position as u64).unwrap();
            assert_eq!(read, payload[position..position + 1024 * 1024]);
            position += 1024 * 1024;
        }
    }

    #[test]
    fn a_reader_thread_prepared_with_cold_reads_has_every_window_before_its_first_read() {
        if !ring_tests_must_run(
            "io::uring::tests::a_reader_thread_prepared_with_cold_reads_has_every_window_before_its_first_read",
        ) {
            return;
        }
        let windows = |direct_cold_reads: bool| {
            std::thread::spawn(move || {
                UringIo::with_direct_cold_reads(direct_cold_reads).prepare_reader_thread();
                with_ring(|ring| ring.windows.count()).unwrap()
            })
            .join()
            .unwrap()
        };
        assert_eq!(windows(true), cold::WINDOWS_PER_THREAD);
        assert_eq!(windows(false), 0, "no cold reads, no windows");
    }

    #[test]
    fn cold_reads_on_a_prepared_thread_are_served_from_its_windows() {
        let Some((_dir, file, payload)) = cold_file(20 * 1024 * 1024) else {
            return;
        };
        std::thread::scope(|scope| {
            scope.spawn(|| {
                UringIo::with_direct_cold_reads(true).prepare_reader_thread();
                for position in (0..payload.len()).step_by(1024 * 1024) {
                    let read = file.read_to_vec(1024 * 1024, position as u64).unwrap();
                    assert_eq!(read, payload[position..position + 1024 * 1024]);
                }
                let windows = with_ring(|ring| ring.windows.count()).unwrap();
                assert_eq!(windows, cold::WINDOWS_PER_THREAD, "none allocated since");
            });
        });
        assert_eq!(cached(&file, 0, payload.len()), 0, "past the page cache");
    }

    #[test]
    fn two_sequential_readers_on_one_thread_keep_their_windows_read_ahead() {
        let length = 12 * 1024 * 1024;
        let Some((_dir, first, first_payload)) = cold_file(length) else {
            return;
        };
        let Some((_other_dir, second, second_payload)) = cold_file(length) else {
            return;
        };
        let (step, window) = (1024 * 1024, 4 * 1024 * 1024);
        let readers = [(&first, &first_payload), (&second, &second_payload)];
        for position in (0..length).step_by(step) {
            for (reader, (file, payload)) in readers.iter().enumerate() {
                let read = file.read_to_vec(step, position as u64).unwrap();
                assert_eq!(read, payload[position..position + step]);
                // Each reader has read up to here: the one that just read through
                // `position + step`, the other (if it reads second) up to `position`.
                for (other, (file, _)) in readers.iter().enumerate() {
                    let read_to = if other <= reader {
                        position + step
                    } else {
                        position
                    };
                    let next_window = (read_to.max(1) - 1) / window * window + window;
                    assert!(
                        read_to == 0
                            || next_window >= length
                            || file.cold.as_ref().unwrap().window_holds(next_window as u64),
                        "reader {other}'s window at {next_window} read ahead, \
                         after reader {reader}'s read at {position}"
                    );
                }
            }
        }
    }
}
