//! The io_uring backend: each thread that does I/O (in the engine, each shard) gets its own ring,
//! created on first use and used by that thread alone (`SINGLE_ISSUER`, with `COOP_TASKRUN` and
//! `DEFER_TASKRUN` where the kernel has them).
//!
//! Single operations are submitted and waited for at once. The gain is in groups:
//! [`Storage::sync_data_many`] submits one `fdatasync` per file in a single `io_uring_enter` and
//! waits for all of them, so the syncs of a group commit run concurrently in the kernel instead of
//! one after another. A lone file's sync is a plain `fdatasync`: the ring would punt it to an
//! io-wq worker, which only adds a hand-over. Files are opened buffered (PERFORMANCE-NOTES.md:
//! deep queues on buffered files are slow on this kind of machine). Reads are plain `pread`s:
//! each is waited for at once and a cached read completes inline either way, so the ring only
//! added its submit and reap (a fifth of a point lookup, BENCHMARKS.md). A buffered write is
//! punted to an io-wq worker and the shard would wait for it, so buffered writes are plain
//! `pwrite`s on the calling thread (append p50 420 → 265 µs, BENCHMARKS.md); writes to files
//! opened `O_DIRECT` go through the ring.
//!
//! Directory operations (create, list, rename, remove, dir fsync) are rare and go through std.
//!
//! Memory safety: the kernel writes into (or reads from) the caller's buffer until the operation's
//! completion arrives. Every function here returns only after it has reaped the completion of
//! every operation it submitted (UNSAFE.md § io/uring.rs).
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use io_uring::{IoUring, opcode, squeue, types};

use super::pio::PositionedIo;
use super::{OpenMode, Storage, StorageFile};

/// Submission queue entries per ring. Groups larger than this are submitted in chunks.
const RING_ENTRIES: u32 = 256;

/// io_uring for file data; std for directories.
#[derive(Debug, Default, Clone, Copy)]
pub struct UringIo;

impl UringIo {
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
    Ready(Box<IoUring>),
    /// Ring creation failed on this thread: operations fall back to positioned I/O.
    Unavailable,
}

fn build_ring() -> io::Result<IoUring> {
    let attempts: [fn(&mut io_uring::Builder); 3] = [
        |builder| {
            builder
                .setup_single_issuer()
                .setup_coop_taskrun()
                .setup_defer_taskrun();
        },
        |builder| {
            builder.setup_coop_taskrun();
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
fn with_ring<T>(operation: impl FnOnce(&mut IoUring) -> T) -> Option<T> {
    RING.with(|slot| {
        let mut slot = slot.borrow_mut();
        if matches!(*slot, RingSlot::Unset) {
            *slot = match build_ring() {
                Ok(ring) => RingSlot::Ready(Box::new(ring)),
                Err(error) => {
                    log::warn!(
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

/// Submits `entries` and returns each one's result (`cqe.res`), in order.
///
/// # Safety
/// Every buffer an entry points at must stay valid (and, for reads, unaliased) until this
/// function returns. It returns only after the completions of all submitted entries were reaped.
unsafe fn submit_and_reap(ring: &mut IoUring, entries: &[squeue::Entry]) -> Vec<i32> {
    let mut results = vec![0i32; entries.len()];
    for (chunk_index, chunk) in entries.chunks(RING_ENTRIES as usize).enumerate() {
        let first = chunk_index * RING_ENTRIES as usize;
        for (index, entry) in chunk.iter().enumerate() {
            let entry = entry.clone().user_data((first + index) as u64);
            // SAFETY: the caller keeps every buffer valid until we return, and we return only
            // after reaping this entry's completion (the loop below). The queue has room: the
            // chunk is at most the ring's size and the queue was drained by the previous chunk.
            let pushed = unsafe { ring.submission().push(&entry) };
            debug_assert!(pushed.is_ok());
        }
        let mut outstanding = chunk.len();
        while outstanding > 0 {
            if let Err(error) = ring.submit_and_wait(1) {
                // Interrupted or the completion queue is momentarily full: wait again. Returning
                // here would free buffers the kernel may still use.
                log::debug!("io_uring_enter: {error}; waiting again");
                continue;
            }
            for completion in ring.completion() {
                if let Some(slot) = results.get_mut(completion.user_data() as usize) {
                    *slot = completion.result();
                    outstanding -= 1;
                }
            }
        }
    }
    results
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
    /// Opened with `O_DIRECT` ([`OpenMode::ExistingDirect`]): its writes go through the ring.
    direct: bool,
}

impl UringFile {
    fn write_once(&self, buf: &[u8], position: u64) -> io::Result<usize> {
        if !self.direct {
            return self.file.write_at(buf, position);
        }
        let fd = types::Fd(self.file.as_raw_fd());
        let length = buf.len().min(u32::MAX as usize) as u32;
        let entry = opcode::Write::new(fd, buf.as_ptr(), length)
            .offset(position)
            .build();
        // SAFETY: `buf` is borrowed for this whole call, and `submit_and_reap` returns only after
        // the write completed.
        let result = with_ring(|ring| unsafe { submit_and_reap(ring, &[entry]) }[0]);
        match result {
            Some(result) => result_to_io(result),
            None => self.file.write_at(buf, position),
        }
    }
}

impl StorageFile for UringFile {
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        // A plain `pread`: nothing waits on a read but the caller, and a cached read completes
        // inline through the ring as well, after a submit and a reap (DESIGN.md § I/O backends).
        super::read_fully(buf, position, |buf, position| {
            self.file.read_at(buf, position)
        })
    }

    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        let mut written = 0;
        while written < buf.len() {
            match self.write_once(&buf[written..], position + written as u64) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(count) => written += count,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            }
        }
        Ok(())
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

/// `fdatasync`s every file in one submission; one result per file. A lone file is synced by a
/// plain `fdatasync` on the calling thread: the ring punts every fsync to an io-wq worker, and the
/// hand-over to it and back costs a lone durable writer 10-15 % of its appends/s (BENCHMARKS.md).
fn sync_files(files: &[&File]) -> Vec<io::Result<()>> {
    if let [file] = files {
        return vec![file.sync_data()];
    }
    let entries: Vec<squeue::Entry> = files
        .iter()
        .map(|file| {
            opcode::Fsync::new(types::Fd(file.as_raw_fd()))
                .flags(types::FsyncFlags::DATASYNC)
                .build()
        })
        .collect();
    // SAFETY: fsync entries point at no memory; the files stay open for this whole call.
    match with_ring(|ring| unsafe { submit_and_reap(ring, &entries) }) {
        Some(results) => results
            .into_iter()
            .map(|result| result_to_io(result).map(drop))
            .collect(),
        None => files.iter().map(|file| file.sync_data()).collect(),
    }
}

impl Storage for UringIo {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(UringFile {
            file: PositionedIo::open_file(path, mode)?,
            direct: mode == OpenMode::ExistingDirect,
        }))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        PositionedIo.create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        PositionedIo.list_dir(dir)
    }

    fn is_dir(&self, path: &Path) -> bool {
        PositionedIo.is_dir(path)
    }

    fn exists(&self, path: &Path) -> bool {
        PositionedIo.exists(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        PositionedIo.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        PositionedIo.remove_file(path)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        PositionedIo.remove_dir_all(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        PositionedIo.sync_dir(dir)
    }

    fn sync_data_many(&self, files: &[&dyn StorageFile]) -> Vec<io::Result<()>> {
        let std_files: Option<Vec<&File>> = files.iter().map(|file| file.as_file()).collect();
        match std_files {
            Some(std_files) => sync_files(&std_files),
            None => files.iter().map(|file| file.sync_data()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_writes_and_group_syncs_go_through_the_ring_and_reads_see_them() {
        if let Err(error) = UringIo::probe() {
            eprintln!("skipped: io_uring unavailable here: {error}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let storage = UringIo;
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
        if UringIo::probe().is_err() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ro");
        std::fs::write(&path, b"x").unwrap();
        let read_only = File::open(&path).unwrap();
        let file = UringFile {
            file: read_only,
            direct: false,
        };
        let error = file.write_all_at(b"y", 0).unwrap_err();
        assert_eq!(
            error.raw_os_error(),
            Some(9),
            "EBADF from the ring, not a panic"
        );
    }
}
