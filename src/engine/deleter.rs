//! A shard's file deleter: the thread that unlinks the `.deleted` files of the segments that
//! retention, `deleteRecords` and the cleaner took out of the shard's logs, once their
//! `file.delete.delay.ms` has passed (Kafka's `LocalLog.deleteSegmentFiles` runs the same on its
//! background scheduler).
//!
//! `unlink` of a file's last name frees its blocks before it returns; on a file system mounted
//! with `discard` that waits for the device to discard them, time a shard would otherwise not
//! serve its partitions.
//!
//! Invariant: a file named `.deleted` is garbage whenever it goes. No reader holds one (a read
//! returns owned bytes within the shard's turn), nothing renames one back, and a log's open
//! removes leftovers. So the deleter needs no ordering with the shard: a file already gone counts
//! as deleted (the open of a log may sweep it first), a failed unlink is retried after
//! [`RETRY_AFTER_FAILURE`], and the files still queued when the shard stops are unlinked before
//! the thread ends; what fails then is left for the next open.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::io::Storage;

/// How long after a failed unlink the deleter tries the file again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// The shard's end of its file deleter; dropping it unlinks what is queued and joins the thread.
pub(crate) struct FileDeleter {
    files: Option<Sender<Vec<PathBuf>>>,
    thread: Option<JoinHandle<()>>,
    storage: Arc<dyn Storage>,
}

impl FileDeleter {
    /// Starts the file deleter of shard `shard_id`.
    pub(crate) fn start(shard_id: usize, storage: Arc<dyn Storage>) -> io::Result<FileDeleter> {
        let (files, inbox) = crossbeam_channel::unbounded();
        let thread_storage = Arc::clone(&storage);
        let thread = std::thread::Builder::new()
            .name(format!("seglog-delete-{shard_id}"))
            .spawn(move || run(thread_storage.as_ref(), &inbox))?;
        Ok(FileDeleter {
            files: Some(files),
            thread: Some(thread),
            storage,
        })
    }

    /// A deleter without a thread, for an inline engine: files are unlinked in
    /// [`FileDeleter::delete`].
    pub(crate) fn inline(storage: Arc<dyn Storage>) -> FileDeleter {
        FileDeleter {
            files: None,
            thread: None,
            storage,
        }
    }

    /// Unlinks `paths` on the deleter's thread (here, if that thread is gone).
    pub(crate) fn delete(&self, paths: Vec<PathBuf>) {
        if paths.is_empty() {
            return;
        }
        let unsent = match &self.files {
            Some(files) => files.send(paths).map_err(|unsent| unsent.0),
            None => Err(paths),
        };
        if let Err(paths) = unsent {
            log_left(&unlink_all(self.storage.as_ref(), paths, true));
        }
    }
}

impl Drop for FileDeleter {
    fn drop(&mut self) {
        drop(self.files.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("a file deleter thread panicked; the next open removes what it left");
        }
    }
}

fn run(storage: &dyn Storage, inbox: &Receiver<Vec<PathBuf>>) {
    let mut failed: Vec<PathBuf> = Vec::new();
    let mut retry_at = Instant::now();
    loop {
        let message = if failed.is_empty() {
            inbox.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            inbox.recv_deadline(retry_at)
        };
        match message {
            Ok(paths) => {
                let newly_failed = unlink_all(storage, paths, true);
                if failed.is_empty() {
                    retry_at = Instant::now() + RETRY_AFTER_FAILURE;
                }
                failed.extend(newly_failed);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return log_left(&unlink_all(storage, failed, false));
            }
        }
        if !failed.is_empty() && Instant::now() >= retry_at {
            failed = unlink_all(storage, failed, false);
            retry_at = Instant::now() + RETRY_AFTER_FAILURE;
        }
    }
}

/// Unlinks each of `paths`; returns those that failed (a file already gone does not). Logs a
/// failure on the first attempt only, so that a storage that keeps failing is reported once.
fn unlink_all(storage: &dyn Storage, paths: Vec<PathBuf>, first_attempt: bool) -> Vec<PathBuf> {
    paths
        .into_iter()
        .filter(
            |path| match crate::segment::remove_if_present(storage, path) {
                Ok(()) => false,
                Err(error) => {
                    if first_attempt {
                        tracing::error!("{error}; retrying");
                    }
                    true
                }
            },
        )
        .collect()
}

fn log_left(paths: &[PathBuf]) {
    for path in paths {
        tracing::warn!(
            "{} was not removed; the next open of its log removes it",
            path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::hooked::{HookedStorage, StorageHooks, StorageOp};
    use crate::io::pio::PositionedIo;
    use std::path::Path;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Fails the first `failures` removals.
    #[derive(Debug)]
    struct FailRemovals(AtomicUsize);

    impl StorageHooks for FailRemovals {
        fn before(&self, op: StorageOp, _path: &Path) -> io::Result<()> {
            let fail = op == StorageOp::RemoveFile
                && self
                    .0
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                        left.checked_sub(1)
                    })
                    .is_ok();
            if fail {
                return Err(io::Error::other("injected unlink failure"));
            }
            Ok(())
        }
    }

    fn files(dir: &Path, names: &[&str]) -> Vec<PathBuf> {
        names
            .iter()
            .map(|name| {
                let path = dir.join(name);
                std::fs::write(&path, b"garbage").unwrap();
                path
            })
            .collect()
    }

    #[test]
    fn queued_files_are_unlinked_by_the_time_the_deleter_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(PositionedIo);
        let deleter = FileDeleter::start(0, storage).unwrap();
        let paths = files(dir.path(), &["0.log.deleted", "0.index.deleted"]);
        let gone_already = dir.path().join("0.timeindex.deleted");
        deleter.delete(paths.iter().cloned().chain([gone_already]).collect());
        drop(deleter);
        assert!(paths.iter().all(|path| !path.exists()));
    }

    #[test]
    fn a_failed_unlink_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = Arc::new(FailRemovals(AtomicUsize::new(1)));
        let storage: Arc<dyn Storage> =
            Arc::new(HookedStorage::new(Arc::new(PositionedIo), hooks.clone()));
        let deleter = FileDeleter::start(0, storage).unwrap();
        let paths = files(dir.path(), &["5.log.deleted"]);
        deleter.delete(paths.clone());
        let deadline = Instant::now() + Duration::from_secs(30);
        while paths[0].exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!paths[0].exists(), "unlinked on the retry");
        assert_eq!(hooks.0.load(Ordering::SeqCst), 0, "the first unlink failed");
    }
}
