//! Appends to an active segment's `.log` that bypass the page cache (`O_DIRECT`), for
//! `EngineConfig::direct_writes` (DESIGN.md § The append path; FORMAT.md §7.4, zeros past the
//! log end).
//!
//! `O_DIRECT` writes whole aligned blocks, while batches end anywhere. The writer keeps a copy of
//! the file's last partial block (`tail`) and writes each append as that block's bytes, then the
//! new bytes, zero-padded to the next block boundary, at the block's start. The bytes before the
//! append are rewritten unchanged, so whichever of a torn write's sectors land, everything below
//! the log end keeps its value. The file grows by the padding: the segment truncates it to the
//! log end when it stops being active (roll, close, release). After a crash the padding is zeros
//! past the last batch, which recovery cuts as a torn tail.
//!
//! Reads keep the segment's buffered descriptor; the kernel drops the cached pages a direct write
//! covers, so a later buffered read sees the new bytes.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Mutex, Once, PoisonError};

use crate::error::StorageError;
use crate::io::direct_buffer::with_staging;
use crate::io::{DIRECT_IO_ALIGN_BYTES, OpenMode, Storage, StorageFile, WRITE_BEHIND_BYTES_MAX};

const BLOCK_BYTES: usize = DIRECT_IO_ALIGN_BYTES;

/// The direct write side of one active segment's `.log`.
#[derive(Debug)]
pub(super) struct DirectWriter {
    file: Box<dyn StorageFile>,
    /// The bytes of the file's last partial block: `size_bytes % BLOCK_BYTES` of them.
    tail: Vec<u8>,
    /// The last block written as it was sent (a partial one with its zero padding), and where:
    /// what the device must hold there when a sync has covered it. The buffer is reused.
    last_block: Vec<u8>,
    last_block_position: Option<u64>,
    /// Whether a sync has covered `last_block` since it was written or last checked.
    synced_since_write: bool,
}

impl DirectWriter {
    /// Opens a direct descriptor on `log_path`, whose first `size_bytes` are the log. `None` when
    /// the file system refuses `O_DIRECT` (tmpfs before Linux 6.6): the segment then writes through the page
    /// cache, as it does without the option (said once per process).
    pub(super) fn open(
        storage: &dyn Storage,
        log_path: &Path,
        log: &dyn StorageFile,
        size_bytes: u64,
    ) -> Result<Option<Box<DirectWriter>>, StorageError> {
        let file = match storage.open(log_path, OpenMode::ExistingDirect) {
            Ok(file) => file,
            Err(error) if is_refusal(&error) => {
                warn_refused(log_path, &error);
                return Ok(None);
            }
            Err(source) => return Err(StorageError::io("open O_DIRECT", log_path, source)),
        };
        let mut writer = Box::new(DirectWriter {
            file,
            tail: Vec::with_capacity(BLOCK_BYTES),
            last_block: Vec::with_capacity(BLOCK_BYTES),
            last_block_position: None,
            synced_since_write: false,
        });
        writer.load_tail(log, log_path, size_bytes)?;
        if let Err(error) = writer.probe_once_per_device(log, size_bytes) {
            if !is_refusal(&error) {
                return Err(StorageError::io("write O_DIRECT", log_path, error));
            }
            warn_refused(log_path, &error);
            return Ok(None);
        }
        Ok(Some(writer))
    }

    /// Some file systems accept an `O_DIRECT` open and refuse the writes (`EINVAL`: a FUSE
    /// passthrough whose daemon opens its backing files `O_DIRECT` and writes from unaligned
    /// buffers). The first segment opened on a device of a process rewrites its last block as an
    /// append would (the bytes below the log end unchanged, zeros past it) and waits for it; a
    /// refusal sends that device's segments through the page cache. Nothing on a backend with no
    /// real file (the simulator).
    fn probe_once_per_device(&mut self, log: &dyn StorageFile, size_bytes: u64) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        static PROBED: Mutex<BTreeMap<u64, bool>> = Mutex::new(BTreeMap::new());
        let Some(device) = log.as_file().map(|file| file.metadata()).transpose()? else {
            return Ok(());
        };
        let device = device.dev();
        let mut probed = PROBED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(accepted) = probed.get(&device) {
            return match accepted {
                true => Ok(()),
                false => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            };
        }
        let position = size_bytes - self.tail.len() as u64;
        let tail = &self.tail;
        let result = self
            .file
            .write_direct_behind(BLOCK_BYTES, position, &mut |area| {
                area[..tail.len()].copy_from_slice(tail);
                area[tail.len()..].fill(0);
            })
            .and_then(|()| self.file.complete_own_writes());
        match &result {
            Ok(()) => probed.insert(device, true),
            Err(error) if is_refusal(error) => probed.insert(device, false),
            Err(_) => None,
        };
        result
    }

    /// Reads the file's last partial block below `size_bytes` into `tail` (after open or after
    /// the log was truncated).
    pub(super) fn load_tail(
        &mut self,
        log: &dyn StorageFile,
        log_path: &Path,
        size_bytes: u64,
    ) -> Result<(), StorageError> {
        let tail_bytes = (size_bytes % BLOCK_BYTES as u64) as usize;
        self.tail.resize(tail_bytes, 0);
        self.last_block_position = None;
        let read = log
            .read_at(&mut self.tail, size_bytes - tail_bytes as u64)
            .map_err(|source| StorageError::io("read", log_path, source))?;
        if read < tail_bytes {
            let error = io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the file ends {} bytes before the log end",
                    tail_bytes - read
                ),
            );
            return Err(StorageError::io("read", log_path, error));
        }
        Ok(())
    }

    /// Writes `bytes` at `position`, the log end, in aligned blocks of at most
    /// [`WRITE_BEHIND_BYTES_MAX`], each a write behind (`StorageFile::write_direct_behind`): on
    /// io_uring they are left in flight, and [`DirectWriter::take_write_error`] (or the owner's
    /// fence and it) says whether they landed.
    pub(super) fn append(&mut self, bytes: &[u8], position: u64) -> io::Result<()> {
        debug_assert_eq!(position % BLOCK_BYTES as u64, self.tail.len() as u64);
        // This write rewrites the partial block an earlier write of this file ended in: that
        // one lands first (two writes of one block in flight could land in either order). The
        // thread's writes to other files stay in flight.
        if !self.tail.is_empty() && self.file.writes_behind_in_flight() {
            self.finish_own_writes()?;
        }
        let mut block_position = position - self.tail.len() as u64;
        let mut rest = bytes;
        while !rest.is_empty() {
            // A partial block's rewrite goes alone: ext4 takes a direct write that starts in
            // written blocks and runs on into reserved (unwritten) ones for more than an
            // overwrite, and io_uring then hands it to a worker thread; either kind alone goes
            // to the device from this thread.
            let room = match self.tail.len() {
                0 => WRITE_BEHIND_BYTES_MAX,
                tail => BLOCK_BYTES - tail,
            };
            let piece = rest.len().min(room);
            let (data, after) = rest.split_at(piece);
            let used = self.tail.len() + piece;
            let padded = used.next_multiple_of(BLOCK_BYTES);
            let tail = &self.tail;
            let last_block = &mut self.last_block;
            self.file
                .write_direct_behind(padded, block_position, &mut |area| {
                    area[..tail.len()].copy_from_slice(tail);
                    area[tail.len()..used].copy_from_slice(data);
                    area[used..].fill(0);
                    last_block.clear();
                    last_block.extend_from_slice(&area[padded - BLOCK_BYTES..]);
                })?;
            self.last_block_position = Some(block_position + (padded - BLOCK_BYTES) as u64);
            self.synced_since_write = false;
            let whole_blocks = used - used % BLOCK_BYTES;
            self.tail = next_tail(&self.tail, data, whole_blocks);
            block_position += whole_blocks as u64;
            rest = after;
        }
        Ok(())
    }

    /// Notes that a sync covered everything written so far: the next append first checks that
    /// the device holds the last block as it was sent ([`DirectWriter::check_last_block`]).
    pub(super) fn note_synced(&mut self) {
        self.synced_since_write = self.last_block_position.is_some();
    }

    /// Before an append after a sync: the last block written reads back as it was sent, read
    /// through the direct descriptor, so that no page of it enters the page cache (a cached page
    /// in a direct write's range makes io_uring hand that write to a worker thread). A write the
    /// device put elsewhere (a misdirected write, R14) left older bytes there; the append would
    /// rewrite that block or write over where the write landed, and the acknowledged records it
    /// carried would then read as a torn tail after a crash. One 4 KiB read per append that
    /// follows a sync.
    pub(super) fn check_last_block(&mut self, log_path: &Path) -> Result<(), StorageError> {
        if !std::mem::take(&mut self.synced_since_write) {
            return Ok(());
        }
        let Some(position) = self.last_block_position else {
            return Ok(());
        };
        self.finish_own_writes()
            .map_err(|source| StorageError::io("write", log_path, source))?;
        let (file, sent) = (&self.file, &self.last_block);
        let differs = with_staging(BLOCK_BYTES, |held| {
            let read = file.read_at(held, position)?;
            let differs = held[..read]
                .iter()
                .zip(sent)
                .position(|(held, sent)| held != sent);
            io::Result::Ok(differs.or((read < sent.len()).then_some(read)))
        })
        .map_err(|source| StorageError::io("read", log_path, source))?;
        match differs {
            None => Ok(()),
            Some(at) => Err(StorageError::Corrupt {
                file: log_path.to_path_buf(),
                position: position + at as u64,
                reason: "the last block written does not read back as it was sent after a sync \
                         covered it (a misdirected write?)"
                    .to_owned(),
            }),
        }
    }

    /// Waits for this file's writes behind, if any is in flight (not for the thread's writes to
    /// other files), and returns the first failure not taken yet, theirs or an earlier one's: with
    /// the shard's pipeline a failed write may have completed before its group was checked, and
    /// the next append must fail with its error, not read the block it did not write.
    fn finish_own_writes(&self) -> io::Result<()> {
        self.file.complete_own_writes()
    }

    /// A mark after this file's writes behind so far (`StorageFile::write_mark`).
    pub(super) fn write_mark(&self) -> Option<crate::io::WriteMark> {
        self.file.write_mark()
    }

    /// Completes the thread's writes behind and returns the first failure of this file's.
    pub(super) fn take_write_error(&self) -> io::Result<()> {
        self.file.take_write_error()
    }
}

/// The partial block after a write of `tail` then `data`, of which `whole_blocks` bytes filled
/// whole blocks.
fn next_tail(tail: &[u8], data: &[u8], whole_blocks: usize) -> Vec<u8> {
    let mut next = Vec::with_capacity(BLOCK_BYTES);
    match whole_blocks.checked_sub(tail.len()) {
        Some(from) => next.extend_from_slice(&data[from..]),
        None => {
            next.extend_from_slice(&tail[whole_blocks..]);
            next.extend_from_slice(data);
        }
    }
    next
}

/// Said once per process.
fn warn_refused(log_path: &Path, error: &io::Error) {
    static WARNED: Once = Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "O_DIRECT refused for {} ({error}); writing through the page cache",
            log_path.display()
        );
    });
}

/// `EINVAL` (the file system has no `O_DIRECT`) or a backend without it.
fn is_refusal(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::EINVAL) || error.kind() == io::ErrorKind::Unsupported
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::pio::PositionedIo;
    use crate::io::sim::SimStorage;

    fn write_through(storage: &dyn Storage, dir: &Path, appends: &[&[u8]]) -> Vec<u8> {
        let path = dir.join("a.log");
        let log = storage.open(&path, OpenMode::CreateNew).unwrap();
        let mut writer = DirectWriter::open(storage, &path, log.as_ref(), 0)
            .unwrap()
            .expect("O_DIRECT on the test file system");
        let mut size = 0u64;
        for bytes in appends {
            writer.append(bytes, size).unwrap();
            size += bytes.len() as u64;
            assert!(
                log.length_bytes()
                    .unwrap()
                    .is_multiple_of(BLOCK_BYTES as u64)
            );
        }
        drop(writer);
        log.set_length_bytes(size).unwrap(); // as the segment does when it stops being active
        std::fs::read(&path).unwrap()
    }

    fn pattern(length: usize, seed: u8) -> Vec<u8> {
        (0..length)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    #[test]
    fn appends_of_any_length_land_exactly_and_the_padding_is_cut() {
        let pieces = [
            pattern(1, 1),
            pattern(100, 2),
            pattern(4095, 3),
            pattern(4096, 4),
            pattern(3 * 1024 * 1024 + 17, 5),
            pattern(61, 6),
        ];
        let appends: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
        let dir = tempfile::tempdir().unwrap();
        let written = write_through(&PositionedIo, dir.path(), &appends);
        assert_eq!(written, pieces.concat());
    }

    #[test]
    fn the_simulator_refuses_unaligned_direct_writes_and_accepts_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let storage = SimStorage::new(dir.path(), 7).unwrap();
        let path = dir.path().join("b.log");
        let log = storage.open(&path, OpenMode::CreateNew).unwrap();
        let direct = storage.open(&path, OpenMode::ExistingDirect).unwrap();
        let error = direct.write_all_at(&[1u8; 100], 0).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        drop((log, direct));
        let pieces = [pattern(10, 1), pattern(5000, 2), pattern(300, 3)];
        let appends: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
        let written = write_through(&storage, dir.path(), &appends);
        assert_eq!(written, pieces.concat());
    }

    /// A direct descriptor whose writes complete at once with ENOSPC, kept until taken, and land
    /// nothing: a write behind that failed before the shard checked its group.
    #[derive(Debug, Default)]
    struct FailedWrites {
        failure: std::sync::Mutex<Option<i32>>,
    }

    impl StorageFile for FailedWrites {
        fn read_at(&self, buf: &mut [u8], _position: u64) -> io::Result<usize> {
            buf.fill(0);
            Ok(buf.len())
        }
        fn write_all_at(&self, _buf: &[u8], _position: u64) -> io::Result<()> {
            unreachable!("a direct writer writes behind")
        }
        fn write_direct_behind(
            &self,
            length: usize,
            _position: u64,
            fill: &mut dyn FnMut(&mut [u8]),
        ) -> io::Result<()> {
            fill(&mut vec![0u8; length]);
            *self.failure.lock().unwrap() = Some(libc::ENOSPC);
            Ok(())
        }
        fn take_write_error(&self) -> io::Result<()> {
            match self.failure.lock().unwrap().take() {
                Some(errno) => Err(io::Error::from_raw_os_error(errno)),
                None => Ok(()),
            }
        }
        fn sync_data(&self) -> io::Result<()> {
            Ok(())
        }
        fn sync_all(&self) -> io::Result<()> {
            Ok(())
        }
        fn length_bytes(&self) -> io::Result<u64> {
            Ok(0)
        }
        fn set_length_bytes(&self, _length_bytes: u64) -> io::Result<()> {
            Ok(())
        }
        fn modified_ms(&self) -> io::Result<i64> {
            Ok(0)
        }
    }

    #[test]
    fn a_failed_write_not_yet_checked_fails_the_next_append_with_its_error_not_as_misdirected() {
        let mut writer = DirectWriter {
            file: Box::new(FailedWrites::default()),
            tail: Vec::new(),
            last_block: Vec::new(),
            last_block_position: None,
            synced_since_write: false,
        };
        writer.append(&pattern(5000, 1), 0).unwrap();
        // A sync of earlier appends reported meanwhile; the next append checks the last block.
        writer.note_synced();
        let error = writer.check_last_block(Path::new("x.log")).unwrap_err();
        match error {
            StorageError::Io { source, .. } => {
                assert_eq!(source.raw_os_error(), Some(libc::ENOSPC))
            }
            other => panic!("the write's own error expected, got {other:?}"),
        }
    }

    #[test]
    fn a_writer_opened_on_a_partial_block_keeps_the_bytes_below_the_log_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.log");
        let head = pattern(5000, 9);
        std::fs::write(&path, &head).unwrap();
        let log = PositionedIo.open(&path, OpenMode::Existing).unwrap();
        let mut writer = DirectWriter::open(&PositionedIo, &path, log.as_ref(), 5000)
            .unwrap()
            .unwrap();
        let more = pattern(700, 1);
        writer.append(&more, 5000).unwrap();
        drop(writer);
        log.set_length_bytes(5700).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), [head, more].concat());
    }
}
