//! Writes behind: `O_DIRECT` appends submitted to the thread's ring and left in flight while the
//! thread goes on (a shard stages its next partition's write while this one's runs), completed
//! at the thread's next fence ([`super::fence`]): any other operation through the backend on that
//! thread, or [`crate::io::Storage::complete_writes`].
//!
//! Each write owns an aligned buffer from the thread's pool (`DirectBuffer`, huge pages where the
//! kernel gives them) until its completion is reaped, so the caller's bytes are copied once, as
//! the synchronous path copied them into its staging area. At most [`IN_FLIGHT_MAX`] writes are
//! in flight per thread: one more waits for a completion first (back-pressure; a full ring is
//! never an error). A write that completes short is submitted again for the rest; a failure is
//! kept in the file's [`WriteProgress`] until the owner takes it, and nothing the write carried
//! may be acknowledged before then.

use std::os::fd::RawFd;
use std::sync::Arc;

use io_uring::{opcode, squeue, types};

use crate::io::DIRECT_IO_ALIGN_BYTES;
use crate::io::direct_buffer::DirectBuffer;
use crate::io::write_progress::WriteProgress;

/// The `user_data` bit of a write behind; below it, the write's slot. Distinct from the cold
/// reads' window pieces (`cold::WINDOW_PIECE_TAG`, bit 63).
pub(super) const WRITE_TAG: u64 = 1 << 62;

/// Writes in flight per thread at most, and pooled buffers kept.
pub(super) const IN_FLIGHT_MAX: usize = 32;

/// The largest write behind, and the size of every pooled buffer.
const WRITE_BYTES_MAX: usize = crate::io::WRITE_BEHIND_BYTES_MAX;

/// One write in flight.
struct InFlight {
    buffer: DirectBuffer,
    fd: RawFd,
    position: u64,
    length: usize,
    /// Bytes the kernel reported written so far (a short write goes on from there).
    written: usize,
    progress: Arc<WriteProgress>,
    /// The write's number in its file's progress.
    number: u64,
}

/// What a completion leaves to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Done,
    /// Submit the rest again: `written` bytes are on the file.
    Again {
        written: usize,
    },
    Failed {
        errno: i32,
    },
}

/// The step after a completion with `result` (`cqe.res`) for a write of `length` bytes of which
/// `written` were already done. `EINTR` and `EAGAIN` go again; a short write goes on where it
/// stopped if that is block-aligned (`O_DIRECT` requires it), else fails with `EIO`, as does a
/// write that wrote nothing.
pub(super) fn step_after(result: i32, written: usize, length: usize) -> Step {
    if result == -libc::EINTR || result == -libc::EAGAIN {
        return Step::Again { written };
    }
    if result < 0 {
        return Step::Failed { errno: -result };
    }
    let written = written + result as usize;
    if written >= length {
        return Step::Done;
    }
    if result == 0 || !written.is_multiple_of(DIRECT_IO_ALIGN_BYTES) {
        return Step::Failed { errno: libc::EIO };
    }
    Step::Again { written }
}

/// A thread's writes behind and its pool of buffers.
#[derive(Default)]
pub(super) struct WritesBehind {
    slots: Vec<Option<InFlight>>,
    free_slots: Vec<usize>,
    buffers: Vec<DirectBuffer>,
    in_flight: usize,
}

impl WritesBehind {
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// A buffer of [`WRITE_BYTES_MAX`] bytes for the next write, from the pool.
    pub(super) fn take_buffer(&mut self) -> DirectBuffer {
        self.buffers
            .pop()
            .unwrap_or_else(|| DirectBuffer::new(WRITE_BYTES_MAX))
    }

    /// Records a write of `buffer[..length]` to `fd` at `position` and returns its entry.
    pub(super) fn start(
        &mut self,
        mut buffer: DirectBuffer,
        fd: RawFd,
        length: usize,
        position: u64,
        progress: Arc<WriteProgress>,
    ) -> squeue::Entry {
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        let address = buffer.as_mut_ptr();
        let number = progress.begin();
        self.slots[slot] = Some(InFlight {
            buffer,
            fd,
            position,
            length,
            written: 0,
            progress,
            number,
        });
        self.in_flight += 1;
        write_entry(fd, address, length, position, slot)
    }

    /// Records the completion of slot `user_data & !WRITE_TAG`; returns the entry that submits
    /// the rest of a short write.
    pub(super) fn complete(&mut self, user_data: u64, result: i32) -> Option<squeue::Entry> {
        let slot = (user_data & !WRITE_TAG) as usize;
        let write = self.slots.get_mut(slot)?.as_mut()?;
        match step_after(result, write.written, write.length) {
            Step::Again { written } => {
                write.written = written;
                // SAFETY of the pointer: `written < length <= WRITE_BYTES_MAX`, within the buffer.
                let address = write.buffer.as_mut_ptr().wrapping_add(written);
                let rest = write.length - written;
                let position = write.position + written as u64;
                Some(write_entry(write.fd, address, rest, position, slot))
            }
            step => {
                let errno = match step {
                    Step::Failed { errno } => Some(errno),
                    _ => None,
                };
                self.finish(slot, errno);
                None
            }
        }
    }

    fn finish(&mut self, slot: usize, errno: Option<i32>) {
        if let Some(write) = self.slots.get_mut(slot).and_then(Option::take) {
            write.progress.end(write.number, errno);
            self.in_flight -= 1;
            self.free_slots.push(slot);
            if self.buffers.len() < IN_FLIGHT_MAX {
                self.buffers.push(write.buffer);
            }
        }
    }
}

fn write_entry(
    fd: RawFd,
    address: *mut u8,
    length: usize,
    position: u64,
    slot: usize,
) -> squeue::Entry {
    opcode::Write::new(types::Fd(fd), address.cast_const(), length as u32)
        .offset(position)
        .build()
        .user_data(WRITE_TAG | slot as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_write_is_done_and_a_failure_keeps_its_errno() {
        assert_eq!(step_after(8192, 0, 8192), Step::Done);
        assert_eq!(step_after(4096, 4096, 8192), Step::Done);
        assert_eq!(
            step_after(-libc::ENOSPC, 0, 8192),
            Step::Failed {
                errno: libc::ENOSPC
            }
        );
        assert_eq!(
            step_after(-libc::EIO, 4096, 8192),
            Step::Failed { errno: libc::EIO }
        );
    }

    #[test]
    fn a_short_write_goes_on_where_it_stopped_and_interrupted_ones_go_again() {
        assert_eq!(step_after(4096, 0, 3 * 4096), Step::Again { written: 4096 });
        assert_eq!(
            step_after(4096, 4096, 3 * 4096),
            Step::Again { written: 8192 }
        );
        assert_eq!(
            step_after(-libc::EINTR, 4096, 8192),
            Step::Again { written: 4096 }
        );
        assert_eq!(
            step_after(-libc::EAGAIN, 0, 8192),
            Step::Again { written: 0 }
        );
    }

    #[test]
    fn a_write_that_stops_off_a_block_or_writes_nothing_fails() {
        assert_eq!(step_after(100, 0, 8192), Step::Failed { errno: libc::EIO });
        assert_eq!(step_after(0, 0, 8192), Step::Failed { errno: libc::EIO });
    }
}
