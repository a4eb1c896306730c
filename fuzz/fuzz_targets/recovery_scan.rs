//! Segment recovery over an arbitrary `.log` (and, in trusted mode, arbitrary `.index` and
//! `.timeindex` files): the `LogScanner` over an in-memory file, then `Segment::load` over real
//! files in a temporary directory (on tmpfs when `/dev/shm` exists).
//!
//! Input: byte 0 = flags (bit 0 trusted mode, bits 1-2 the segment's base offset, bit 3: the
//! CRC of every batch the prefixes frame is recomputed first, so that mutations of offsets and
//! lengths get past the CRC check to the offset checks), in trusted
//! mode bytes 1 and 2 = the number of `.index` (8-byte) and `.timeindex` (12-byte) entries that
//! follow; the rest is the `.log`.
//!
//! Invariants: no panic; the header walk and the CRC-checked walk agree up to the first bad
//! batch; recovery keeps a prefix of the input made of CRC-valid batches with increasing offsets
//! inside the segment, reports a cut exactly when it cut, builds indexes that pass their own
//! checks, finds every kept batch by offset, and is idempotent (a second recovery cuts nothing, a
//! trusted reopen with the rebuilt indexes needs no recovery). In trusted mode every read returns
//! only whole CRC-valid batches.
#![no_main]

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use seglog::config::LogConfig;
use seglog::error::StorageError;
use seglog::format::batch::{BatchIter, field};
use seglog::format::file_name::{SegmentFileKind, segment_path};
use seglog::format::{Batch, BatchPrefix};
use seglog::io::StorageFile;
use seglog::io::pio::PositionedIo;
use seglog::limits::BATCH_HEADER_BYTES;
use seglog::segment::Segment;
use seglog::segment::recovery::LoadMode;
use seglog::segment::scan::{LogScanner, ScanStep};
use seglog::types::{Offset, TimestampMs};

const BASE_OFFSETS: [u64; 4] = [0, 7, 1 << 40, i64::MAX as u64 - 8];

/// A `.log` in memory, for the scanner alone.
#[derive(Debug)]
struct MemoryFile(Mutex<Vec<u8>>);

impl MemoryFile {
    fn bytes(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl StorageFile for MemoryFile {
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        let bytes = self.bytes();
        let start = usize::try_from(position)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let count = buf.len().min(bytes.len() - start);
        buf[..count].copy_from_slice(&bytes[start..start + count]);
        Ok(count)
    }
    fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(io::Error::other("read-only"))
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
    fn length_bytes(&self) -> io::Result<u64> {
        Ok(self.bytes().len() as u64)
    }
    fn set_length_bytes(&self, _: u64) -> io::Result<()> {
        Err(io::Error::other("read-only"))
    }
    fn modified_ms(&self) -> io::Result<i64> {
        Ok(0)
    }
}

struct Input<'a> {
    trusted: bool,
    base_offset: Offset,
    index: &'a [u8],
    time_index: &'a [u8],
    log: Vec<u8>,
}

fn split(data: &[u8]) -> Option<Input<'_>> {
    let (&flags, rest) = data.split_first()?;
    let base_offset = Offset(BASE_OFFSETS[usize::from((flags >> 1) & 3)]);
    let log = |bytes: &[u8]| {
        let mut log = bytes.to_vec();
        if flags & 8 != 0 {
            fix_crcs(&mut log);
        }
        log
    };
    if flags & 1 == 0 {
        return Some(Input {
            trusted: false,
            base_offset,
            index: &[],
            time_index: &[],
            log: log(rest),
        });
    }
    let [index_entries, time_entries, rest @ ..] = rest else {
        return None;
    };
    let (index, rest) = rest.split_at_checked(usize::from(*index_entries) * 8)?;
    let (time_index, rest) = rest.split_at_checked(usize::from(*time_entries) * 12)?;
    Some(Input {
        trusted: true,
        base_offset,
        index,
        time_index,
        log: log(rest),
    })
}

/// Rewrites the CRC-32C of each whole batch the prefixes frame, front to back.
fn fix_crcs(log: &mut [u8]) {
    let mut position = 0usize;
    while let Ok(prefix) = BatchPrefix::parse(&log[position..]) {
        let Some(end) = usize::try_from(prefix.size_bytes())
            .ok()
            .and_then(|size| position.checked_add(size))
            .filter(|end| *end <= log.len() && *end >= position + BATCH_HEADER_BYTES)
        else {
            return;
        };
        let crc = crc32c::crc32c(&log[position + field::ATTRIBUTES..end]);
        log[position + field::CRC..position + field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        position = end;
    }
}

fn work_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let made = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        };
        made.unwrap_or_else(|error| panic!("temporary directory: {error}"))
    })
    .path()
}

fn config() -> LogConfig {
    LogConfig::default()
        .with_segment_index_bytes(4096)
        .with_index_interval_bytes(128)
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = split(data) else { return };
    check_scanner(&input.log);
    let dir = work_dir();
    write_files(dir, &input);
    if input.trusted {
        check_trusted_load(dir, &input);
    } else {
        check_recovery(dir, &input);
    }
});

/// A batch the scanner accepted: position, size, offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Walked {
    position: u64,
    size_bytes: u64,
    base_offset: i64,
    last_offset: i64,
}

/// Walks `log` with `next_batch` and with `next_header`; they agree up to the first bad batch.
fn check_scanner(log: &[u8]) -> Vec<Walked> {
    let file = MemoryFile(Mutex::new(log.to_vec()));
    let path = PathBuf::from("memory.log");
    let end = log.len() as u64;
    let batches = walk(&file, &path, end, true);
    let headers = walk(&file, &path, end, false);
    assert!(headers.len() >= batches.len());
    assert_eq!(headers[..batches.len()], batches[..]);
    batches
}

fn walk(file: &MemoryFile, path: &Path, end: u64, whole: bool) -> Vec<Walked> {
    let mut scanner = LogScanner::new(file, path, 0, end);
    let mut walked = Vec::new();
    let mut expected_position = 0;
    loop {
        let step = if whole {
            scanner
                .next_batch()
                .map(|step| map_step(step, |batch| *batch.header()))
        } else {
            scanner.next_header()
        };
        let step = step.unwrap_or_else(|error| panic!("in-memory read failed: {error}"));
        match step {
            ScanStep::Item { position, item } => {
                assert_eq!(position, expected_position);
                assert!(item.size_bytes() >= 61 && position + item.size_bytes() <= end);
                expected_position = position + item.size_bytes();
                assert_eq!(scanner.position(), expected_position);
                walked.push(Walked {
                    position,
                    size_bytes: item.size_bytes(),
                    base_offset: item.base_offset,
                    last_offset: item.last_offset(),
                });
            }
            ScanStep::End => {
                assert_eq!(expected_position, end, "End before the end of the file");
                return walked;
            }
            ScanStep::Invalid { position, .. } => {
                assert_eq!(position, expected_position);
                assert!(position < end, "Invalid at or past the end");
                return walked;
            }
        }
    }
}

fn map_step<T, U>(step: ScanStep<T>, map: impl FnOnce(T) -> U) -> ScanStep<U> {
    match step {
        ScanStep::Item { position, item } => ScanStep::Item {
            position,
            item: map(item),
        },
        ScanStep::End => ScanStep::End,
        ScanStep::Invalid { position, error } => ScanStep::Invalid { position, error },
    }
}

fn write_files(dir: &Path, input: &Input<'_>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let _ = std::fs::remove_file(entry.path());
    }
    let write = |kind, bytes: &[u8]| {
        let path = segment_path(dir, input.base_offset, kind);
        std::fs::write(&path, bytes).unwrap_or_else(|error| panic!("write {path:?}: {error}"));
    };
    write(SegmentFileKind::Log, &input.log);
    if input.trusted {
        write(SegmentFileKind::Index, input.index);
        write(SegmentFileKind::TimeIndex, input.time_index);
    }
}

fn load(dir: &Path, base_offset: Offset, mode: LoadMode) -> Result<Segment, StorageError> {
    Segment::load(
        &PositionedIo,
        dir,
        base_offset,
        &config(),
        mode,
        TimestampMs(0),
    )
    .map(|loaded| loaded.segment)
}

fn check_recovery(dir: &Path, input: &Input<'_>) {
    let base_offset = input.base_offset;
    let loaded = Segment::load(
        &PositionedIo,
        dir,
        base_offset,
        &config(),
        LoadMode::Recover,
        TimestampMs(0),
    );
    let loaded = match loaded {
        Ok(loaded) => loaded,
        Err(StorageError::UnsupportedFormat { .. }) => return,
        // Bytes no crash can leave (a batch that passes its CRC out of order, a torn region a
        // later batch proves was written, R14): refused, and nothing cut.
        Err(StorageError::Corrupt { .. }) => {
            assert_eq!(read_log(dir, base_offset)[..], input.log[..]);
            return;
        }
        Err(error) => panic!("recovery failed: {error}"),
    };
    let mut segment = loaded.segment;
    let Some(recovery) = loaded.recovery else {
        panic!("LoadMode::Recover reported no recovery");
    };
    let size = segment.size_bytes();
    assert!(size <= input.log.len() as u64);
    assert_eq!(recovery.bytes_truncated, input.log.len() as u64 - size);
    assert_eq!(
        recovery.truncated_at.is_some(),
        recovery.bytes_truncated > 0
    );
    let on_disk = read_log(dir, base_offset);
    assert_eq!(
        on_disk[..],
        input.log[..size as usize],
        "kept bytes are not a prefix"
    );
    let kept = check_kept_batches(&on_disk, base_offset, segment.next_offset());
    assert!(segment.offset_index().check(size).is_ok());
    assert!(segment.time_index().check(segment.next_offset()).is_ok());
    check_every_batch_is_found(&segment, &kept);
    let next_offset = segment.next_offset();
    let again = match Segment::load(
        &PositionedIo,
        dir,
        base_offset,
        &config(),
        LoadMode::Recover,
        TimestampMs(0),
    ) {
        Ok(again) => again,
        Err(error) => panic!("second recovery failed: {error}"),
    };
    assert_eq!(again.recovery.as_ref().map(|r| r.bytes_truncated), Some(0));
    assert_eq!(again.segment.next_offset(), next_offset);
    drop(again);
    if let Err(error) = segment.seal_indexes() {
        panic!("trim indexes: {error}");
    }
    drop(segment);
    let trusted = match Segment::load(
        &PositionedIo,
        dir,
        base_offset,
        &config(),
        LoadMode::Trusted,
        TimestampMs(0),
    ) {
        Ok(trusted) => trusted,
        Err(error) => panic!("trusted reopen failed: {error}"),
    };
    assert!(
        trusted.recovery.is_none(),
        "rebuilt indexes were not trusted: {:?}",
        trusted.recovery
    );
    assert_eq!(trusted.segment.next_offset(), next_offset);
    assert_eq!(trusted.segment.size_bytes(), size);
}

fn read_log(dir: &Path, base_offset: Offset) -> Vec<u8> {
    let path = segment_path(dir, base_offset, SegmentFileKind::Log);
    std::fs::read(&path).unwrap_or_else(|error| panic!("read {path:?}: {error}"))
}

/// The kept bytes are whole CRC-valid batches, offsets increasing inside the segment, ending at
/// `next_offset`.
fn check_kept_batches(kept: &[u8], base_offset: Offset, next_offset: Offset) -> Vec<Walked> {
    let walked = check_scanner(kept);
    let end: u64 = walked.iter().map(|batch| batch.size_bytes).sum();
    assert_eq!(end, kept.len() as u64, "kept bytes hold an invalid batch");
    let mut expected = base_offset.0;
    for batch in &walked {
        assert!(batch.base_offset >= 0 && batch.base_offset as u64 >= expected);
        assert!(batch.last_offset >= batch.base_offset);
        assert!(batch.last_offset as u64 - base_offset.0 <= i32::MAX as u64);
        expected = batch.last_offset as u64 + 1;
    }
    assert_eq!(next_offset.0, expected);
    walked
}

fn check_every_batch_is_found(segment: &Segment, kept: &[Walked]) {
    for batch in kept {
        let location = segment
            .locate(Offset(batch.last_offset as u64), segment.size_bytes())
            .unwrap_or_else(|error| panic!("locate in recovered data: {error}"));
        let Some(location) = location else {
            panic!("offset {} not found", batch.last_offset);
        };
        assert_eq!(location.position, batch.position);
        let read = segment
            .read_batch(location)
            .unwrap_or_else(|error| panic!("read recovered batch: {error}"));
        assert_eq!(read.size_bytes(), batch.size_bytes);
    }
    let mut visited = 0;
    segment
        .for_each_batch(|_| {
            visited += 1;
            true
        })
        .unwrap_or_else(|error| panic!("for_each_batch over recovered data: {error}"));
    assert_eq!(visited, kept.len());
}

/// Trusted mode: the indexes are arbitrary, the `.log` is not re-validated. Whatever loads must
/// serve only whole, CRC-valid batches.
fn check_trusted_load(dir: &Path, input: &Input<'_>) {
    let segment = match load(dir, input.base_offset, LoadMode::Trusted) {
        Ok(segment) => segment,
        Err(StorageError::UnsupportedFormat { .. }) => return,
        // A trusted load that fails its checks recovers, which may refuse damage (R14).
        Err(StorageError::Corrupt { .. }) => {
            assert_eq!(read_log(dir, input.base_offset)[..], input.log[..]);
            return;
        }
        Err(error) => panic!("trusted load failed: {error}"),
    };
    let size = segment.size_bytes();
    assert!(size <= input.log.len() as u64);
    let base = input.base_offset.0;
    let next = segment.next_offset().0;
    let targets = [
        base,
        base + 1,
        next.saturating_sub(1),
        next,
        (base + next) / 2,
    ];
    for target in targets {
        let Ok(Some(location)) = segment.locate(Offset(target), size) else {
            continue;
        };
        assert!(location.position + location.size_bytes <= size);
        let Ok(bytes) = segment.read_batches(location, Offset(target), 4096, size, false) else {
            continue;
        };
        assert_only_valid_batches(&bytes);
        let _ = segment.find_offset_by_timestamp(TimestampMs(target as i64), Offset(base));
    }
    let _ = segment.for_each_batch(|batch: Batch| {
        assert!(batch.size_bytes() >= 61);
        true
    });
}

fn assert_only_valid_batches(bytes: &Bytes) {
    let mut length = 0;
    for batch in BatchIter::new(bytes.clone(), u64::MAX) {
        match batch {
            Ok(batch) => length += batch.size_bytes() as usize,
            Err(error) => panic!("a read returned an invalid batch: {error}"),
        }
    }
    assert_eq!(length, bytes.len());
}
