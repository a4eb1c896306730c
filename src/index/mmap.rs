//! A memory-mapped index file. The only code in `index/` that uses `unsafe` (see UNSAFE.md).
//!
//! Invariant: the file is never shorter than its map while the map can be read. Every length
//! change goes through [`MappedIndexFile::cut_and_resize`], which drops the map first, changes
//! the length, then maps again; or, when the file ends up at the mapped length, cuts and regrows
//! it under the map within the one call (holding `&mut self`, so nothing reads the map between
//! the two), dropping the map if the regrowth fails.
//! One engine owns a data directory (its lock file), so no other process changes the file.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use memmap2::{Advice, MmapMut, MmapOptions};

use crate::error::StorageError;

/// A read-write mapping of a whole index file. The file descriptor is closed once the file is
/// mapped (the mapping keeps the file open in the kernel) and opened again only to change the
/// length or reserve blocks, so an open segment costs one descriptor (its `.log`), not three.
#[derive(Debug)]
pub struct MappedIndexFile {
    path: PathBuf,
    map: Option<MmapMut>,
    /// The file's length while the map covers it whole (no map for an empty file); `None` after
    /// a failed length change.
    mapped_length: Option<u64>,
    /// The file's bytes as read at open, for an index read before its first length change
    /// ([`MappedIndexFile::open_existing_copied`]); `None` once that change maps it.
    copy: Option<Vec<u8>>,
    /// The file's first bytes whose blocks exist or are reserved (`fallocate`), in whole
    /// [`RESERVE_BLOCK_BYTES`]: a write through the map below this needs no new block.
    reserved_bytes: u64,
    /// Whether every map of the file is advised `MADV_RANDOM` ([`MappedIndexFile::create`]).
    random_access: bool,
}

/// The step in which blocks are reserved ahead of the entries written: one file system block
/// (ext4's default). Reserving no further than the block the last entry ends in means that
/// trimming the file to its entries frees no block: on a file system mounted with `discard` and
/// without a journal, as here, freeing blocks sends the device a discard and waits for it, which
/// waited behind the sealed segment's write-back on the shard at every roll.
const RESERVE_BLOCK_BYTES: u64 = 4096;

/// Syncs the index file at `path` through a descriptor of its own (`fdatasync`, which writes the
/// pages its maps dirtied as `msync` would): for a thread that does not hold the map. A file that
/// no longer exists (its segment was deleted) has nothing to sync.
pub fn sync_index_file(path: &Path) -> Result<(), StorageError> {
    match File::open(path) {
        Ok(file) => file
            .sync_data()
            .map_err(|source| StorageError::io("fdatasync index", path, source)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StorageError::io("open index", path, source)),
    }
}

impl MappedIndexFile {
    /// The file at `path`, neither mapped nor read yet.
    fn unmapped(path: &Path, random_access: bool) -> MappedIndexFile {
        MappedIndexFile {
            path: path.to_owned(),
            map: None,
            mapped_length: None,
            copy: None,
            reserved_bytes: 0,
            random_access,
        }
    }

    /// Creates the index file at `path` (cutting a leftover one to nothing first) at
    /// `length_bytes`, sparse. Every map of it is advised `MADV_RANDOM`: a page fault then reads
    /// (or, in a sparse stretch, zeroes) only its own page, not the device's read-ahead window
    /// around it. A new index is written an entry at a time: its first fault would otherwise zero
    /// up to `read_ahead_kb` of the sparse file.
    pub fn create(path: &Path, length_bytes: u64) -> Result<MappedIndexFile, StorageError> {
        let mut index_file = MappedIndexFile::unmapped(path, true);
        index_file.cut_and_resize(0, length_bytes)?;
        Ok(index_file)
    }

    /// Maps the existing index file at `path`; `NotFound` (an I/O error) when there is none.
    pub fn open_existing(path: &Path) -> Result<MappedIndexFile, StorageError> {
        let mut index_file = MappedIndexFile::unmapped(path, false);
        let file = index_file.open_file(false)?;
        let length_bytes = file
            .metadata()
            .map_err(|source| StorageError::io("stat index", path, source))?
            .len();
        index_file.map(&file, length_bytes)?;
        // An existing file's bytes were written: their blocks exist.
        index_file.reserved_bytes = round_up_to_block(length_bytes);
        Ok(index_file)
    }

    /// The existing index file at `path`, read into memory rather than mapped, up to its first
    /// hole (`SEEK_HOLE`; what follows reads as zeros): for recovery, which reads the entries and
    /// then cuts the file. Its first length change maps it; nothing else writes it. Cutting a
    /// file that was never mapped unmaps no page, so it costs no TLB flush on the process's
    /// other CPUs. The copy holds whole entries of `entry_bytes` (zeros past the hole).
    /// `NotFound` (an I/O error) when there is none.
    pub fn open_existing_copied(
        path: &Path,
        entry_bytes: u64,
    ) -> Result<MappedIndexFile, StorageError> {
        let mut index_file = MappedIndexFile::unmapped(path, false);
        let file = index_file.open_file(false)?;
        let io_error = |source| StorageError::io("read index", path, source);
        let length_bytes = file.metadata().map_err(io_error)?.len();
        let data_end = crate::io::next_hole_of(&file, 0).map_or(length_bytes, |hole| {
            hole.min(length_bytes)
        });
        let copied_bytes = data_end
            .next_multiple_of(entry_bytes.max(1))
            .min(length_bytes);
        let too_long = |bytes: u64| StorageError::Corrupt {
            file: path.to_owned(),
            position: 0,
            reason: format!("index file of {bytes} bytes cannot be read"),
        };
        let data = usize::try_from(data_end).map_err(|_| too_long(data_end))?;
        let length = usize::try_from(copied_bytes).map_err(|_| too_long(copied_bytes))?;
        let mut copy = vec![0; length];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut copy[..data], 0)
            .map_err(io_error)?;
        index_file.copy = Some(copy);
        index_file.reserved_bytes = round_up_to_block(length_bytes);
        Ok(index_file)
    }

    fn open_file(&self, create: bool) -> Result<File, StorageError> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)
            .map_err(|source| StorageError::io("open index", &self.path, source))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mapped bytes: the whole file.
    pub fn bytes(&self) -> &[u8] {
        self.map
            .as_deref()
            .or(self.copy.as_deref())
            .unwrap_or(&[])
    }

    /// The mapped bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.map.as_deref_mut().unwrap_or(&mut [])
    }

    pub fn length_bytes(&self) -> u64 {
        self.bytes().len() as u64
    }

    fn apply_advice(&self) {
        if let (true, Some(map)) = (self.random_access, &self.map) {
            // Advice only: where the kernel refuses it, faults read ahead as before.
            let _ = map.advise(Advice::Random);
        }
    }

    /// Changes the file's length: unmaps, sets the length, maps again (nothing when it is mapped
    /// whole at that length: an open regrows what recovery grew). Growing leaves the new bytes
    /// sparse (no block reserved: [`MappedIndexFile::reserve_through`] does that as
    /// entries reach them); shrinking keeps the blocks below the new length.
    pub fn resize(&mut self, length_bytes: u64) -> Result<(), StorageError> {
        self.cut_and_resize(length_bytes, length_bytes)
    }

    /// Cuts the file at `cut_bytes`, then sets its length to `length_bytes`, with one open and
    /// one map: the bytes between the two read as zeros. Nothing is cut when the file ends at
    /// `cut_bytes` already, and nothing changes when it is mapped whole at `length_bytes` and
    /// holds nothing past `cut_bytes`.
    pub fn cut_and_resize(&mut self, cut_bytes: u64, length_bytes: u64) -> Result<(), StorageError> {
        let cut = match self.mapped_length {
            Some(mapped) if mapped == length_bytes && cut_bytes >= mapped => return Ok(()),
            Some(mapped) if mapped <= cut_bytes => None,
            _ => Some(cut_bytes),
        };
        self.copy = None;
        let kept = cut_bytes.min(length_bytes);
        self.reserved_bytes = self.reserved_bytes.min(round_up_to_block(kept));
        let keep_map = self.map.is_some() && self.mapped_length == Some(length_bytes);
        if !keep_map {
            self.map = None;
            self.mapped_length = None;
        }
        let file = self.open_file(true)?;
        let set_length = |length| {
            file.set_len(length)
                .map_err(|source| StorageError::io("resize index", &self.path, source))
        };
        let resized = match cut.filter(|cut| *cut != length_bytes) {
            Some(cut) => set_length(cut).and_then(|()| set_length(length_bytes)),
            None => set_length(length_bytes),
        };
        if let Err(error) = resized {
            // The file may be shorter than the map now: the map goes.
            self.map = None;
            self.mapped_length = None;
            return Err(error);
        }
        match keep_map {
            // The cut dropped the pages past it from the map; they read as zeros again.
            true => Ok(()),
            false => self.map(&file, length_bytes),
        }
    }

    /// Reserves the disk blocks of the file's first `end_bytes` (`fallocate`, in whole
    /// `RESERVE_BLOCK_BYTES`) unless they are already, so that a write through the map there
    /// never needs a block the disk does not have: on a full file system that would be a SIGBUS
    /// killing the process; here it is an `ENOSPC` error, and the entry is not written. File
    /// systems without `fallocate` keep the sparse file.
    pub fn reserve_through(&mut self, end_bytes: u64) -> Result<(), StorageError> {
        if end_bytes <= self.reserved_bytes {
            return Ok(());
        }
        let to = round_up_to_block(end_bytes).min(self.length_bytes().max(end_bytes));
        let file = self.open_file(true)?;
        let flags = rustix::fs::FallocateFlags::KEEP_SIZE;
        match rustix::fs::fallocate(&file, flags, self.reserved_bytes, to - self.reserved_bytes) {
            Ok(()) | Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => {
                self.reserved_bytes = to;
                Ok(())
            }
            Err(errno) => Err(StorageError::io(
                "reserve index blocks",
                &self.path,
                std::io::Error::from(errno),
            )),
        }
    }

    /// Writes dirty pages of the map, and the metadata needed to read them back (the length), to
    /// the device: `msync(MS_SYNC)`, which Linux runs as an `fdatasync` of the mapped range. An
    /// empty file has no map and nothing to write.
    pub fn flush(&self) -> Result<(), StorageError> {
        match &self.map {
            Some(map) => map
                .flush()
                .map_err(|source| StorageError::io("msync index", &self.path, source)),
            None => self
                .open_file(true)?
                .sync_data()
                .map_err(|source| StorageError::io("fdatasync index", &self.path, source)),
        }
    }

    /// Maps `file`, whose length is `length_bytes` (just read or set).
    fn map(&mut self, file: &File, length_bytes: u64) -> Result<(), StorageError> {
        if length_bytes == 0 {
            self.map = None;
            self.mapped_length = Some(0);
            return Ok(());
        }
        let length = usize::try_from(length_bytes).map_err(|_| StorageError::Corrupt {
            file: self.path.clone(),
            position: 0,
            reason: format!("index file of {length_bytes} bytes cannot be mapped"),
        })?;
        // SAFETY: the mapping covers exactly the file's current length, and the file is never
        // shorter than the map while it can be read: every length change goes through
        // `cut_and_resize`, which drops this map first, or cuts and regrows the file to the
        // mapped length within one `&mut self` call (dropping the map if that fails). The data directory's lock file keeps other seglog processes out, so no one else
        // shrinks the file under us. The map stays valid after `file` is closed (the kernel keeps
        // the file open for it). The bytes are treated as untrusted input by every reader.
        let map = unsafe { MmapOptions::new().len(length).map_mut(file) }
            .map_err(|source| StorageError::io("mmap index", &self.path, source))?;
        self.map = Some(map);
        self.mapped_length = Some(length_bytes);
        self.apply_advice();
        Ok(())
    }
}

fn round_up_to_block(bytes: u64) -> u64 {
    bytes.div_ceil(RESERVE_BLOCK_BYTES) * RESERVE_BLOCK_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::offset_index::OffsetIndex;
    use crate::types::Offset;

    /// The `VmFlags` line of this process's mapping of `path` (`/proc/self/smaps`).
    fn vm_flags_of(path: &Path) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let name = path.to_str().unwrap();
        let mut lines = smaps.lines().skip_while(|line| !line.ends_with(name));
        lines.next().expect("the file is mapped");
        let flags = lines.find(|line| line.starts_with("VmFlags:")).unwrap();
        flags.to_owned()
    }

    #[test]
    fn a_new_index_is_mapped_for_random_access_through_every_resize() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        let mut index = OffsetIndex::create(&path, Offset(0), 64 * 1024).unwrap();
        // `rr`: the map was advised `MADV_RANDOM` (proc(5)).
        assert!(vm_flags_of(&path).contains(" rr"), "{}", vm_flags_of(&path));
        index.append(Offset(10), 4096);
        index.trim_to_valid_size().unwrap();
        assert!(vm_flags_of(&path).contains(" rr"), "{}", vm_flags_of(&path));
    }

    #[test]
    fn an_existing_index_keeps_the_kernels_read_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("existing.index");
        std::fs::write(&path, [0u8; 8192]).unwrap();
        let mapped = MappedIndexFile::open_existing(&path).unwrap();
        assert_eq!(mapped.length_bytes(), 8192);
        assert!(
            !vm_flags_of(&path).contains(" rr"),
            "{}",
            vm_flags_of(&path)
        );
    }
}
