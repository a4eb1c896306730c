//! Memory for `O_DIRECT` transfers, in transparent huge pages where the kernel gives them.
//!
//! The device receives an `O_DIRECT` transfer as one segment per physically contiguous run of
//! its buffer. A virtio disk without indirect descriptors (this machine's: bit 28 of
//! `/sys/block/vda/device/features` is 0) takes one slot of its ring per segment, and its ring
//! has about 256. A 1 MiB transfer from scattered 4 KiB pages takes some 256 segments, the whole
//! ring: the device then has one request in flight at a time. Within a 2 MiB huge page a
//! transfer is one segment.

use std::cell::RefCell;

use memmap2::{Advice, MmapMut};

use super::DIRECT_IO_ALIGN_BYTES;

/// The staging area of a thread's synchronous `O_DIRECT` writes: the largest write behind.
const STAGING_BYTES: usize = super::WRITE_BEHIND_BYTES_MAX;

thread_local! {
    /// One staging area per thread (per shard), shared by every file it writes: memory stays at
    /// one megabyte per thread however many partitions are open. Allocated on first use.
    static STAGING: RefCell<Option<DirectBuffer>> = const { RefCell::new(None) };
}

/// Runs `write` on the first `length` bytes of this thread's staging area, aligned for
/// `O_DIRECT`; the caller checked `length` (`check_write_behind_length`).
pub(crate) fn with_staging<T>(length: usize, write: impl FnOnce(&mut [u8]) -> T) -> T {
    STAGING.with(|staging| {
        let mut staging = staging.borrow_mut();
        let staging = staging.get_or_insert_with(|| DirectBuffer::new(STAGING_BYTES));
        write(&mut staging.as_mut_slice()[..length.min(STAGING_BYTES)])
    })
}

/// The transparent huge page size on x86-64, and on arm64 with 4 KiB pages.
const HUGE_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// `length` bytes from a block-aligned start, allocated once and never moved or resized.
pub(crate) struct DirectBuffer {
    memory: Memory,
    length: usize,
}

enum Memory {
    /// Anonymous memory advised `MADV_HUGEPAGE`, with room to start at a huge-page boundary and
    /// end on one, so that every huge page the buffer touches lies inside the mapping.
    Mapped(MmapMut),
    /// Where no such mapping could be made: the heap, with room to start at a block boundary.
    Heap(Vec<u8>),
}

impl DirectBuffer {
    pub(crate) fn new(length: usize) -> DirectBuffer {
        let mapped = MmapMut::map_anon(length.next_multiple_of(HUGE_PAGE_BYTES) + HUGE_PAGE_BYTES)
            .and_then(|map| {
                map.advise(Advice::HugePage)?;
                Ok(map)
            });
        let memory = match mapped {
            Ok(map) => Memory::Mapped(map),
            Err(error) => {
                tracing::debug!(
                    "no huge-page mapping for an O_DIRECT buffer ({error}); using the heap"
                );
                Memory::Heap(vec![0; length + DIRECT_IO_ALIGN_BYTES])
            }
        };
        DirectBuffer { memory, length }
    }

    /// Where the buffer starts within its allocation, and the allocation's first byte.
    fn start(&mut self) -> (usize, *mut u8) {
        let (address, align) = match &mut self.memory {
            Memory::Mapped(map) => (map.as_mut_ptr(), HUGE_PAGE_BYTES),
            Memory::Heap(heap) => (heap.as_mut_ptr(), DIRECT_IO_ALIGN_BYTES),
        };
        let offset = (address as usize).next_multiple_of(align) - address as usize;
        (offset, address)
    }

    /// The buffer's first byte, block-aligned; `length` bytes follow it. A pointer, for transfers
    /// still in flight while the owner copies out of parts that completed.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        let (offset, address) = self.start();
        // In bounds: `offset` is under the alignment, and the allocation holds `offset + length`
        // bytes (its size is `length` rounded up to the alignment, plus the alignment).
        address.wrapping_add(offset)
    }

    /// The whole buffer, block-aligned.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        let (offset, _) = self.start();
        let length = self.length;
        match &mut self.memory {
            Memory::Mapped(map) => &mut map[offset..offset + length],
            Memory::Heap(heap) => &mut heap[offset..offset + length],
        }
    }

    /// Whether the buffer lies in memory advised for huge pages (else on the heap).
    #[cfg(test)]
    fn is_mapped(&self) -> bool {
        matches!(self.memory, Memory::Mapped(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_starts_on_a_huge_page_boundary_and_holds_its_length() {
        for length in [4096, 1024 * 1024, 4 * 1024 * 1024, HUGE_PAGE_BYTES + 4096] {
            let mut buffer = DirectBuffer::new(length);
            assert!(buffer.is_mapped(), "anonymous mappings are available here");
            let start = buffer.as_mut_ptr();
            assert_eq!(start as usize % HUGE_PAGE_BYTES, 0);
            let slice = buffer.as_mut_slice();
            assert_eq!(slice.as_ptr(), start.cast_const());
            assert_eq!(slice.len(), length);
            // Every byte is writable: the mapping covers the whole buffer.
            slice.fill(0xa5);
            assert!(slice.iter().all(|byte| *byte == 0xa5));
        }
    }

    #[test]
    fn a_heap_buffer_starts_on_a_block_boundary() {
        let length = 64 * 1024;
        let mut buffer = DirectBuffer {
            memory: Memory::Heap(vec![0; length + DIRECT_IO_ALIGN_BYTES]),
            length,
        };
        assert_eq!(buffer.as_mut_ptr() as usize % DIRECT_IO_ALIGN_BYTES, 0);
        assert_eq!(buffer.as_mut_slice().len(), length);
    }
}
