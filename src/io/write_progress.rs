//! A file's writes behind as its owner sees them: which are still in flight, and the first
//! failure until it is taken. Writes of one file may complete out of order (the pieces of one
//! large append, or an append that starts on a block boundary while the last one is in flight),
//! so a [`WriteMark`] asks for every write started before it, not for a count.

use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Shared between a file and its writes in flight. Only the writing thread changes it; the lock
/// is never contended.
#[derive(Debug, Default)]
pub(crate) struct WriteProgress {
    /// The first failure (an errno; 0 for none) until it is taken.
    errno: AtomicI32,
    writes: Mutex<Started>,
}

#[derive(Debug, Default)]
struct Started {
    /// Writes started so far; the next write's number.
    count: u64,
    /// The numbers of the writes in flight.
    in_flight: BTreeSet<u64>,
}

impl WriteProgress {
    fn started(&self) -> std::sync::MutexGuard<'_, Started> {
        self.writes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a write starting; returns its number for [`WriteProgress::end`].
    pub(crate) fn begin(&self) -> u64 {
        let mut started = self.started();
        let number = started.count;
        started.count += 1;
        started.in_flight.insert(number);
        number
    }

    /// Records the completion of write `number`, with its failure if it failed.
    pub(crate) fn end(&self, number: u64, errno: Option<i32>) {
        if let Some(errno) = errno {
            let _ =
                self.errno
                    .compare_exchange(0, errno.max(1), Ordering::AcqRel, Ordering::Acquire);
        }
        self.started().in_flight.remove(&number);
    }

    /// The error recorded since the last call, if any.
    pub(crate) fn take(&self) -> io::Result<()> {
        match self.errno.swap(0, Ordering::AcqRel) {
            0 => Ok(()),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }

    /// Whether a write of this file is in flight.
    pub(crate) fn any_in_flight(&self) -> bool {
        !self.started().in_flight.is_empty()
    }

    /// A mark after every write started so far.
    pub(crate) fn mark(self: &Arc<Self>) -> WriteMark {
        WriteMark {
            progress: Arc::clone(self),
            before: self.started().count,
        }
    }
}

/// A point in one file's writes behind (`StorageFile::write_mark`): done when every write started
/// before it has completed. The shard keeps one per group of appends it wrote and answers the
/// group when it is done, without waiting for the writes that came after.
#[derive(Debug, Clone)]
pub struct WriteMark {
    progress: Arc<WriteProgress>,
    before: u64,
}

impl WriteMark {
    /// Whether every write started before the mark has completed.
    pub fn is_done(&self) -> bool {
        let started = self.progress.started();
        started
            .in_flight
            .first()
            .is_none_or(|first| *first >= self.before)
    }

    /// The file's first write failure since it was last taken, taken now. The error may be a
    /// later write's: whoever takes it fails the log, which fails the later appends too.
    pub fn take_error(&self) -> io::Result<()> {
        self.progress.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_done_when_the_writes_before_it_are_even_if_later_ones_are_not() {
        let progress = Arc::new(WriteProgress::default());
        let first = progress.begin();
        let second = progress.begin();
        let mark = progress.mark();
        let third = progress.begin();
        progress.end(third, None);
        progress.end(second, None);
        assert!(!mark.is_done(), "the first write is still in flight");
        let later = progress.begin();
        progress.end(first, None);
        assert!(mark.is_done(), "only a write after the mark is in flight");
        assert!(progress.any_in_flight());
        progress.end(later, None);
        assert!(!progress.any_in_flight());
    }

    #[test]
    fn the_first_error_is_kept_until_taken() {
        let progress = Arc::new(WriteProgress::default());
        let mark = progress.mark();
        assert!(mark.take_error().is_ok());
        let (a, b) = (progress.begin(), progress.begin());
        progress.end(a, Some(libc::ENOSPC));
        progress.end(b, Some(libc::EIO));
        assert_eq!(
            mark.take_error().unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        assert!(progress.take().is_ok());
    }
}
