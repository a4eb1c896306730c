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

use seglog::config::LogConfig;
use seglog::engine::{Durability, Engine};
use seglog::io::pio::PositionedIo;
use seglog::io::{OpenMode, Storage, StorageFile};
use support::batches::value_batch;
use support::engines::{engine_config, fetch_values};

mod support;

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

/// Methods that do what the same methods of the field `inner`, or of `PositionedIo`, do; or
/// that count a direct write and refuse it.
macro_rules! methods {
    (inner; $($name:ident($($arg:ident: $type:ty),*) -> $answer:ty;)*) => {
        $(fn $name(&self, $($arg: $type),*) -> $answer {
            self.inner.$name($($arg),*)
        })*
    };
    (PositionedIo; $($name:ident($($arg:ident: $type:ty),*) -> $answer:ty;)*) => {
        $(fn $name(&self, $($arg: $type),*) -> $answer {
            PositionedIo.$name($($arg),*)
        })*
    };
    (refused; $($name:ident($($type:ty),*);)*) => {
        $(fn $name(&self, $(_: $type),*) -> io::Result<()> {
            self.direct_writes.fetch_add(1, Ordering::SeqCst);
            Err(einval())
        })*
    };
}

impl StorageFile for RefusingFile {
    methods! { inner;
        read_at(buf: &mut [u8], position: u64) -> io::Result<usize>;
        sync_data() -> io::Result<()>;
        sync_all() -> io::Result<()>;
        length_bytes() -> io::Result<u64>;
        set_length_bytes(length_bytes: u64) -> io::Result<()>;
        modified_ms() -> io::Result<i64>;
        as_file() -> Option<&std::fs::File>;
    }
    methods! { refused;
        write_all_at(&[u8], u64);
        write_direct_behind(usize, u64, &mut dyn FnMut(&mut [u8]));
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
    methods! { PositionedIo;
        create_dir_all(dir: &Path) -> io::Result<()>;
        list_dir(dir: &Path) -> io::Result<Vec<String>>;
        is_dir(path: &Path) -> bool;
        exists(path: &Path) -> bool;
        rename(from: &Path, to: &Path) -> io::Result<()>;
        remove_file(path: &Path) -> io::Result<()>;
        remove_dir_all(path: &Path) -> io::Result<()>;
        sync_dir(dir: &Path) -> io::Result<()>;
    }
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
    let config = engine_config(1);
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
            .append(
                &topic,
                (sequence % 2) as u32,
                value_batch(value),
                durability,
            )
            .wait()
            .unwrap();
    }
    let read_back = |engine: &Engine| -> Vec<Vec<String>> {
        let values = |partition| fetch_values(engine, &topic, partition);
        (0..2)
            .map(|partition| {
                values(partition)
                    .into_iter()
                    .map(|(_, value)| value)
                    .collect()
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
