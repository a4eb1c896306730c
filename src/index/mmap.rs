//! A memory-mapped index file. The only code in `index/` that uses `unsafe` (see UNSAFE.md).
//!
//! Invariant: the file is never truncated while it is mapped. Every length change goes through
//! [`MappedIndexFile::resize`], which drops the map first, changes the length, then maps again.
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
    /// The file's first bytes whose blocks exist or are reserved (`fallocate`), in whole
    /// [`RESERVE_BLOCK_BYTES`]: a write through the map below this needs no new block.
    reserved_bytes: u64,
    /// Whether every map of the file is advised `MADV_RANDOM` ([`MappedIndexFile::advise_random`]).
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
    /// Opens (creating if missing) `path` and maps it. With `length_bytes`, the file is first
    /// resized to that length (preallocation for an active segment, or trimming).
    pub fn open(path: &Path, length_bytes: Option<u64>) -> Result<MappedIndexFile, StorageError> {
        let mut index_file = MappedIndexFile {
            path: path.to_owned(),
            map: None,
            reserved_bytes: 0,
            random_access: false,
        };
        match length_bytes {
            Some(length_bytes) => index_file.resize(length_bytes)?,
            None => {
                let file = index_file.open_file()?;
                index_file.map(&file)?;
                // An existing file's bytes were written: their blocks exist.
                index_file.reserved_bytes = round_up_to_block(index_file.length_bytes());
            }
        }
        Ok(index_file)
    }

    fn open_file(&self) -> Result<File, StorageError> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
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
        self.map.as_deref().unwrap_or(&[])
    }

    /// The mapped bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.map.as_deref_mut().unwrap_or(&mut [])
    }

    pub fn length_bytes(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// Advises this map and every later one `MADV_RANDOM`: a page fault then reads (or, in a
    /// sparse stretch, zeroes) only its own page, not the device's read-ahead window around it.
    /// For a new index written an entry at a time: its first fault would otherwise zero up to
    /// `read_ahead_kb` of the sparse file (here the whole 64 KiB index of each of
    /// `many-partitions`' 10,000 segments, twice per partition).
    pub fn advise_random(&mut self) {
        self.random_access = true;
        self.apply_advice();
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
        if self.map.is_some() && self.length_bytes() == length_bytes {
            return Ok(());
        }
        self.map = None;
        let file = self.open_file()?;
        file.set_len(length_bytes)
            .map_err(|source| StorageError::io("resize index", &self.path, source))?;
        self.reserved_bytes = self.reserved_bytes.min(round_up_to_block(length_bytes));
        self.map(&file)
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
        let file = self.open_file()?;
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
                .open_file()?
                .sync_data()
                .map_err(|source| StorageError::io("fdatasync index", &self.path, source)),
        }
    }

    fn map(&mut self, file: &File) -> Result<(), StorageError> {
        let length_bytes = file
            .metadata()
            .map_err(|source| StorageError::io("stat index", &self.path, source))?
            .len();
        if length_bytes == 0 {
            self.map = None;
            return Ok(());
        }
        let length = usize::try_from(length_bytes).map_err(|_| StorageError::Corrupt {
            file: self.path.clone(),
            position: 0,
            reason: format!("index file of {length_bytes} bytes cannot be mapped"),
        })?;
        // SAFETY: the mapping covers exactly the file's current length, and the file is never
        // truncated while mapped: every length change goes through `resize`, which drops this map
        // first. The data directory's lock file keeps other seglog processes out, so no one else
        // shrinks the file under us. The map stays valid after `file` is closed (the kernel keeps
        // the file open for it). The bytes are treated as untrusted input by every reader.
        let map = unsafe { MmapOptions::new().len(length).map_mut(file) }
            .map_err(|source| StorageError::io("mmap index", &self.path, source))?;
        self.map = Some(map);
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
        let mapped = MappedIndexFile::open(&path, None).unwrap();
        assert_eq!(mapped.length_bytes(), 8192);
        assert!(
            !vm_flags_of(&path).contains(" rr"),
            "{}",
            vm_flags_of(&path)
        );
    }
}
