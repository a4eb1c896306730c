//! Crash tests' machinery: hooks that fail or abort at the Nth storage operation, and this test
//! binary run again as a child process that aborts there.

use std::io::{self, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use seglog::io::hooked::{StorageHooks, StorageOp};

/// What the hooks do at the chosen step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtStep {
    /// Fail the operation with EIO.
    FailWithEio,
    /// Abort the process (saying which operation on stderr).
    Abort,
}

/// Once armed, counts the storage operations `counts` selects and fails or aborts the `step`th
/// (from 1).
#[derive(Debug)]
pub struct StepHooks {
    armed: AtomicBool,
    operations: AtomicUsize,
    step: usize,
    at_step: AtStep,
    counts: fn(StorageOp, &Path) -> bool,
}

impl StepHooks {
    pub fn new(
        step: usize,
        at_step: AtStep,
        counts: fn(StorageOp, &Path) -> bool,
    ) -> Arc<StepHooks> {
        Arc::new(StepHooks {
            armed: AtomicBool::new(false),
            operations: AtomicUsize::new(0),
            step,
            at_step,
            counts,
        })
    }

    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// The operations counted since armed.
    pub fn operations(&self) -> usize {
        self.operations.load(Ordering::SeqCst)
    }
}

impl StorageHooks for StepHooks {
    fn before(&self, op: StorageOp, path: &Path) -> io::Result<()> {
        if !self.armed.load(Ordering::SeqCst) || !(self.counts)(op, path) {
            return Ok(());
        }
        if self.operations.fetch_add(1, Ordering::SeqCst) + 1 != self.step {
            return Ok(());
        }
        if self.at_step == AtStep::FailWithEio {
            return Err(io::Error::from_raw_os_error(5));
        }
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("?");
        eprintln!("ABORT op={op:?} path={} thread={thread}", path.display());
        std::process::abort();
    }
}

/// Counts every operation.
pub fn every_op(_op: StorageOp, _path: &Path) -> bool {
    true
}

/// Starts this test binary again, running only the ignored test `test` with `spec` in the
/// environment variable `env`, in a new directory `spec` is given.
pub fn spawn_child(
    test: &str,
    env: &str,
    spec: impl Fn(&Path) -> String,
) -> (tempfile::TempDir, Child) {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            test,
            "--exact",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(env, spec(dir.path()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (dir, child)
}

/// How many children run at once: each spends most of its life waiting for fsync.
const CHILDREN_AT_ONCE: usize = 4;

/// Runs `spawn(step)` for each step from 1 to `steps`, a few children at a time; each must abort
/// (SIGABRT). Returns each step's directory and the `ABORT` line its child printed.
pub fn abort_at_each_step(
    steps: usize,
    spawn: impl Fn(usize) -> (tempfile::TempDir, Child),
    what: &str,
) -> Vec<(usize, tempfile::TempDir, String)> {
    let all: Vec<usize> = (1..=steps).collect();
    let mut aborted = Vec::new();
    for chunk in all.chunks(CHILDREN_AT_ONCE) {
        let children: Vec<_> = chunk.iter().map(|step| (*step, spawn(*step))).collect();
        for (step, (dir, mut child)) in children {
            let mut stderr = String::new();
            let mut pipe = child.stderr.take().unwrap();
            pipe.read_to_string(&mut stderr).unwrap();
            let status = child.wait().unwrap();
            assert_eq!(
                status.signal(),
                Some(6),
                "{what}: the child aborts before operation {step}: {status}\n{stderr}"
            );
            let abort = stderr.lines().find(|line| line.starts_with("ABORT "));
            aborted.push((step, dir, abort.unwrap_or_default().to_owned()));
        }
    }
    aborted
}
