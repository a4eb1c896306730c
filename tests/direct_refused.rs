//! A file system that refuses `O_DIRECT` appends (issue 40): the engine's default `O_DIRECT`
//! segments fall back to the page cache, whether the refusal comes at the open (tmpfs before
//! Linux 6.6) or as `EINVAL` at the first write after an open that succeeded (a FUSE passthrough
//! whose daemon writes its backing file `O_DIRECT` from unaligned buffers). Every append is
//! answered and reads back. Its own test binary: the write probe is made once per device per
//! process, so no other test may have probed this device first.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine, EngineConfig, FetchOptions};
use seglog::format::{Batch, BatchBuilder, NewRecord};
use seglog::io::pio::PositionedIo;
use seglog::io::{OpenMode, Storage, StorageFile};
use seglog::types::Offset;

/// How the file system treats `O_DIRECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    AtOpen,
    AtWrite,
}

/// Positioned I/O that refuses `O_DIRECT` as `refusal` says, counting the direct writes tried.
#[derive(Debug)]
struct Refusing {
    refusal: Refusal,
    direct_writes: Arc<AtomicUsize>,
}

/// A direct descriptor whose writes fail with `EINVAL`; everything else is the real file's.
#[derive(Debug)]
struct RefusingFile {
    inner: Box<dyn StorageFile>,
    direct_writes: Arc<AtomicUsize>,
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

impl StorageFile for RefusingFile {
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        self.inner.read_at(buf, position)
    }
    fn write_all_at(&self, _buf: &[u8], _position: u64) -> io::Result<()> {
        self.direct_writes.fetch_add(1, Ordering::SeqCst);
        Err(einval())
    }
    fn write_direct_behind(
        &self,
        _length: usize,
        _position: u64,
        _fill: &mut dyn FnMut(&mut [u8]),
    ) -> io::Result<()> {
        self.direct_writes.fetch_add(1, Ordering::SeqCst);
        Err(einval())
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn length_bytes(&self) -> io::Result<u64> {
        self.inner.length_bytes()
    }
    fn set_length_bytes(&self, length_bytes: u64) -> io::Result<()> {
        self.inner.set_length_bytes(length_bytes)
    }
    fn modified_ms(&self) -> io::Result<i64> {
        self.inner.modified_ms()
    }
    fn as_file(&self) -> Option<&std::fs::File> {
        self.inner.as_file()
    }
}

impl Storage for Refusing {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        match (mode, self.refusal) {
            (OpenMode::ExistingDirect, Refusal::AtOpen) => Err(einval()),
            (OpenMode::ExistingDirect, Refusal::AtWrite) => Ok(Box::new(RefusingFile {
                inner: PositionedIo.open(path, OpenMode::Existing)?,
                direct_writes: self.direct_writes.clone(),
            })),
            _ => PositionedIo.open(path, mode),
        }
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
}

fn batch(value: &str) -> Bytes {
    let mut builder = BatchBuilder::new(0);
    builder.push(&NewRecord {
        timestamp_ms: 1_700_000_000_000,
        key: None,
        value: Some(value.as_bytes()),
        headers: &[],
    });
    builder.build().unwrap()
}

/// Appends 200 values to 2 partitions on the default (`O_DIRECT`) configuration over `refusal`,
/// durable and not, reads them back, reopens, reads them again; returns the direct writes tried.
fn appends_read_back_over(refusal: Refusal) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let direct_writes = Arc::new(AtomicUsize::new(0));
    let storage = Arc::new(Refusing {
        refusal,
        direct_writes: direct_writes.clone(),
    });
    let config = EngineConfig {
        shard_count: 1,
        pin_shards: false,
        ..EngineConfig::default()
    };
    assert!(config.direct_writes, "O_DIRECT is the default");
    let engine = Engine::open_with_storage(dir.path(), config.clone(), storage.clone()).unwrap();
    let topic = engine.create_topic("t", 2, LogConfig::default()).unwrap();
    let values: Vec<String> = (0..200)
        .map(|sequence| format!("value-{sequence}"))
        .collect();
    for (sequence, value) in values.iter().enumerate() {
        let durability = match sequence % 2 {
            0 => Durability::Durable,
            _ => Durability::Written,
        };
        engine
            .append(&topic, (sequence % 2) as u32, batch(value), durability)
            .wait()
            .unwrap();
    }
    let read_back = |engine: &Engine| -> Vec<Vec<String>> {
        (0..2)
            .map(|partition| {
                let data = engine
                    .fetch(&topic, partition, Offset(0), FetchOptions::default())
                    .wait()
                    .unwrap();
                let mut found = Vec::new();
                let mut position = 0;
                while position < data.records.len() {
                    let batch = Batch::decode(&data.records.slice(position..), u64::MAX).unwrap();
                    position += batch.size_bytes() as usize;
                    for record in batch.records().unwrap() {
                        found.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
                    }
                }
                found
            })
            .collect()
    };
    let expected: Vec<Vec<String>> = (0..2)
        .map(|partition| values.iter().skip(partition).step_by(2).cloned().collect())
        .collect();
    assert_eq!(read_back(&engine), expected);
    engine.close().unwrap();
    let engine = Engine::open_with_storage(dir.path(), config, storage).unwrap();
    assert_eq!(read_back(&engine), expected, "after a reopen");
    engine.close().unwrap();
    direct_writes.load(Ordering::SeqCst)
}

#[test]
fn a_file_system_that_refuses_o_direct_at_the_open_or_at_the_first_write_gets_buffered_appends() {
    assert_eq!(appends_read_back_over(Refusal::AtOpen), 0);
    // One probe for the device, then never again: not once per segment or per reopen.
    assert_eq!(appends_read_back_over(Refusal::AtWrite), 1);
}
