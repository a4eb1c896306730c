//! A simulated disk for crash and fault tests: a [`Storage`] that remembers, per file, what is
//! durable beside what is only written, and per directory, which entries are durable beside
//! those only created, renamed or removed — and that can crash, fail or misplace operations, all
//! deterministically from a seed (RELIABILITY.md: the SIM layer; RocksDB's fault-injection file
//! system and TigerBeetle's simulated storage are the models).
//!
//! # Why over a real directory, not in memory
//! Index files (`.index`, `.timeindex`) do not go through [`Storage`]: they are memory-mapped from
//! real paths. An all-in-memory disk would need a second seam for them; instead the simulator
//! performs every operation on a real directory (a tempdir, ideally on tmpfs) so paths and maps
//! work unchanged, and keeps beside it the model of what a power cut would leave:
//! - a **tracked** file (one opened through this storage) has a durable image (its bytes as of
//!   its last successful `sync_data`/`sync_all`) and the writes and length changes made since;
//! - an **untracked** file (an index, the lock file) is only known by name: its bytes live in the
//!   real file, and a crash may keep, truncate or zero them (an index is a hint, rebuilt from the
//!   `.log` whenever it fails its checks, so the engine must cope with any of these);
//! - a directory has its durable entries (as of its last successful `sync_dir`) and the links,
//!   unlinks and renames made since. Syncing a file never makes its directory entry durable.
//!
//! [`SimStorage::crash`] is a power cut: it computes one possible post-crash tree — durable
//! bytes plus, per file, none, all, a prefix torn at a 512-byte sector, a per-sector mix of old and
//! new bytes (zeros where the file had none), or a zero-filled tail (the length persisted, not
//! the data); per directory, a random prefix of the entry changes since its last sync — then
//! rewrites the real directory to it and forgets every volatile state. The caller must first drop
//! everything that holds files or maps of the old "process". Reopening over the same storage
//! *without* a crash is a process restart on the same kernel: the page cache (the real files)
//! survives.
//!
//! Faults ([`Fault`]) are scheduled on the nth read, write, file sync or directory sync from now;
//! [`SimStorage::die_after`] makes every operation after the nth mutation fail, as if the process
//! had died there. After a failed `fsync` the data it covered can never become durable (Linux marks
//! the pages clean) while reads still see it (the page cache): the fsyncgate behaviour.
//!
//! Limits: a misdirected write lands in the same file; directories are not renamed; a rename
//! across directories is an unlink and a link that a crash may split; a sector is never torn
//! inside (512-byte atomic writes).

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::UNIX_EPOCH;

use super::{OpenMode, Storage, StorageFile};

/// The unit a disk writes atomically: a torn write keeps whole sectors.
pub const SECTOR_BYTES: u64 = 512;

const EIO: i32 = 5;
const ENOSPC: i32 = 28;

/// A small deterministic PRNG (SplitMix64): the simulator's and the tests' only source of
/// randomness, so that a seed replays a run exactly.
#[derive(Debug, Clone)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng {
            state: seed ^ 0x5EC1_0600_D15C_0001,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (0 when `bound` is 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next_u64() % bound
        }
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low) + 1)
    }

    /// True with probability `numerator / denominator`.
    pub fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        self.below(denominator) < numerator
    }
}

/// A fault the simulator injects into one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The read fails with `EIO` (a latent sector error).
    ReadError,
    /// The write fails with `EIO` after a random whole-sector prefix of it landed (maybe none).
    WriteError,
    /// The write fails with `ENOSPC`; nothing lands.
    NoSpace,
    /// A random proper prefix of the write lands, then it fails with `ENOSPC`.
    ShortWrite,
    /// A file's sync fails with `EIO`; the data it covered never becomes durable (the pages are
    /// marked clean) though reads still return it.
    SyncError,
    /// A directory's sync fails with `EIO`; its entry changes stay volatile.
    DirSyncError,
    /// The write reports success but its bytes land at another sector-aligned position of the same
    /// file; the intended range keeps its old bytes, or zeros where the file grew.
    MisdirectedWrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpClass {
    Read = 0,
    Write = 1,
    Sync = 2,
    DirSync = 3,
}

impl Fault {
    fn class(self) -> OpClass {
        match self {
            Fault::ReadError => OpClass::Read,
            Fault::SyncError => OpClass::Sync,
            Fault::DirSyncError => OpClass::DirSync,
            Fault::WriteError | Fault::NoSpace | Fault::ShortWrite | Fault::MisdirectedWrite => {
                OpClass::Write
            }
        }
    }
}

/// What a crash keeps of the state that was not synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Each file and directory picks one of the modes below at random.
    Random,
    /// Nothing unsynced survives.
    DropVolatile,
    /// Everything written survives (a process crash without power loss).
    KeepVolatile,
    /// A prefix of each file's unsynced operations, the last one torn at a sector boundary; a
    /// prefix of each directory's unsynced entry changes.
    Prefix,
    /// Each sector a file's unsynced writes changed holds its old or its new bytes (zeros past the
    /// old length);
    /// the length is the old one, the new one or in between.
    Sectors,
    /// The new length survived but not the data: the region past the durable bytes reads as zeros.
    ZeroFill,
}

/// Counts of what the simulator saw and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    pub mutations: u64,
    pub reads: u64,
    pub writes: u64,
    pub syncs: u64,
    pub faults_injected: u64,
    pub crashes: u64,
}

type FileId = u64;

#[derive(Debug, Clone)]
enum FileOp {
    Write { position: u64, bytes: Vec<u8> },
    SetLength(u64),
}

#[derive(Debug, Default)]
struct FileModel {
    /// Opened through this storage: its bytes are modelled. Otherwise only its name is.
    tracked: bool,
    durable: Vec<u8>,
    volatile: Vec<FileOp>,
    /// An untracked file's bytes when it was unlinked (a crash may bring the name back).
    removed_bytes: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    File(FileId),
    Dir,
}

#[derive(Debug, Clone)]
enum DirOp {
    Link(String, Entry),
    Unlink(String),
    Rename { from: String, to: String },
}

#[derive(Debug, Default)]
struct DirModel {
    durable: BTreeMap<String, Entry>,
    volatile: Vec<DirOp>,
}

/// A post-crash tree, built in memory before the real directory is rewritten.
#[derive(Debug)]
enum Node {
    Dir(BTreeMap<String, Node>),
    File(Vec<u8>),
}

#[derive(Debug)]
struct State {
    root: PathBuf,
    rng: SimRng,
    files: HashMap<FileId, FileModel>,
    next_id: FileId,
    /// The live names of the files the model knows (absolute paths).
    names: HashMap<PathBuf, FileId>,
    dirs: HashMap<PathBuf, DirModel>,
    /// Bumped by each crash: handles of an earlier generation belong to a dead process.
    generation: u64,
    mutations_left: Option<u64>,
    dead: bool,
    class_counts: [u64; 4],
    /// (fault, the class count at which it fires).
    scheduled: Vec<(Fault, u64)>,
    stats: SimStats,
    /// Print every mutation and crash decision to stderr (for replaying a failing seed).
    trace: bool,
    /// Every fault injected, with the file or directory it hit.
    fired: Vec<(Fault, PathBuf)>,
    /// Where each misdirected write landed: file, start, end.
    landings: Vec<(FileId, u64, u64)>,
    /// A misdirected write landed over (part of) an earlier one's landing in the same file.
    landing_overwritten: bool,
    /// A power cut cut the file back to a length short of a misdirected write's landing that
    /// reached over durable bytes.
    landing_cut: bool,
}

/// The simulated disk: a [`Storage`] over the real directory `root`. Cloning shares the disk.
#[derive(Debug, Clone)]
pub struct SimStorage {
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct SimFile {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    id: FileId,
    generation: u64,
    file: File,
    /// Opened with [`OpenMode::ExistingDirect`]: writes must be aligned, as `O_DIRECT` demands.
    direct: bool,
}

/// Whether a write meets `O_DIRECT`'s alignment of position, length and buffer address.
fn is_direct_aligned(buf: &[u8], position: u64) -> bool {
    let align = super::DIRECT_IO_ALIGN_BYTES;
    position.is_multiple_of(align as u64)
        && buf.len().is_multiple_of(align)
        && (buf.as_ptr() as usize).is_multiple_of(align)
}

fn error(errno: i32, what: &str) -> io::Error {
    io::Error::new(
        io::Error::from_raw_os_error(errno).kind(),
        format!(
            "simulated: {what} ({})",
            io::Error::from_raw_os_error(errno)
        ),
    )
}

fn dead_error() -> io::Error {
    error(EIO, "the process is dead")
}

fn split(path: &Path) -> Option<(PathBuf, String)> {
    let parent = path.parent()?.to_owned();
    let name = path.file_name()?.to_str()?.to_owned();
    Some((parent, name))
}

fn apply(image: &mut Vec<u8>, op: &FileOp) {
    match op {
        FileOp::Write { position, bytes } => {
            let start = *position as usize;
            let end = start + bytes.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[start..end].copy_from_slice(bytes);
        }
        FileOp::SetLength(length) => image.resize(*length as usize, 0),
    }
}

/// `bytes[range]`, zero-padded where `bytes` is shorter.
fn sector_of(bytes: &[u8], start: usize, end: usize) -> Vec<u8> {
    let mut out = vec![0u8; end - start];
    if start < bytes.len() {
        let available = bytes.len().min(end) - start;
        out[..available].copy_from_slice(&bytes[start..start + available]);
    }
    out
}

impl SimStorage {
    /// A simulated disk over `root` (which must exist). Everything already under `root` is taken
    /// as durable.
    pub fn new(root: &Path, seed: u64) -> io::Result<SimStorage> {
        let mut state = State {
            root: root.to_owned(),
            rng: SimRng::new(seed),
            files: HashMap::new(),
            next_id: 0,
            names: HashMap::new(),
            dirs: HashMap::new(),
            generation: 0,
            mutations_left: None,
            dead: false,
            class_counts: [0; 4],
            scheduled: Vec::new(),
            stats: SimStats::default(),
            trace: false,
            fired: Vec::new(),
            landings: Vec::new(),
            landing_overwritten: false,
            landing_cut: false,
        };
        state.adopt_tree(root)?;
        Ok(SimStorage {
            state: Arc::new(Mutex::new(state)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn root(&self) -> PathBuf {
        self.lock().root.clone()
    }

    pub fn stats(&self) -> SimStats {
        self.lock().stats
    }

    /// Lets `mutations` more mutating operations (writes, length changes, syncs, creations,
    /// renames, removals) succeed; every operation after them fails with `EIO`: the process died
    /// there.
    pub fn die_after(&self, mutations: u64) {
        self.lock().mutations_left = Some(mutations);
    }

    /// Every fault injected so far, with the path of the file or directory it hit.
    pub fn faults_fired(&self) -> Vec<(Fault, PathBuf)> {
        self.lock().fired.clone()
    }

    /// Whether a misdirected write landed over (part of) where an earlier one had landed in the
    /// same file: the earlier batch then survives nowhere whole, and its loss reads like a torn
    /// tail (RELIABILITY.md, R14's residual limit).
    pub fn misdirected_over_misdirected(&self) -> bool {
        self.lock().landing_overwritten
    }

    /// Whether a power cut cut a file back to a length short of where a misdirected write that
    /// reached over its durable bytes landed: the durable bytes it overwrote are damaged, and
    /// the rest of it, which would show where it came from, is gone, so the damage reads like a
    /// torn tail (RELIABILITY.md, R14's residual limit; fuzz finding F19).
    pub fn misdirected_landing_cut(&self) -> bool {
        self.lock().landing_cut
    }

    /// Prints every mutation, fault and crash decision to stderr from now on.
    pub fn set_trace(&self, trace: bool) {
        self.lock().trace = trace;
    }

    /// True once the process died (see [`SimStorage::die_after`]).
    pub fn is_dead(&self) -> bool {
        self.lock().dead
    }

    /// Injects `fault` into the `nth` (from 1) operation of its kind from now: reads for
    /// `ReadError`, file syncs for `SyncError`, directory syncs for `DirSyncError`, writes for
    /// the others.
    pub fn schedule(&self, fault: Fault, nth: u64) {
        let mut state = self.lock();
        let at = state.class_counts[fault.class() as usize] + nth.max(1);
        state.scheduled.push((fault, at));
    }

    /// A power cut with a mode chosen per file and directory at random.
    pub fn crash(&self) -> io::Result<()> {
        self.crash_with(CrashMode::Random)
    }

    /// A power cut: rewrites the real directory to a state a real disk could hold after losing
    /// power now, then starts a new "process": every file is durable, no fault is scheduled, the
    /// process is alive, and handles opened before fail. Drop every file and map of the old
    /// process first.
    pub fn crash_with(&self, mode: CrashMode) -> io::Result<()> {
        let mut state = self.lock();
        let root = state.root.clone();
        let mut memo = HashMap::new();
        let tree = state.crash_dir(&root, mode, &mut memo)?;
        write_tree(&root, &tree)?;
        state.files.clear();
        state.names.clear();
        state.dirs.clear();
        state.generation += 1;
        state.mutations_left = None;
        state.dead = false;
        state.scheduled.clear();
        state.stats.crashes += 1;
        state.adopt_tree(&root)
    }
}

/// Makes the real `dir` hold exactly `entries`, rewriting only what differs.
fn write_tree(dir: &Path, entries: &BTreeMap<String, Node>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let is_dir = entry.file_type()?.is_dir();
        let wanted = entry
            .file_name()
            .to_str()
            .and_then(|name| entries.get(name));
        match (wanted, is_dir) {
            (Some(Node::Dir(_)), true) | (Some(Node::File(_)), false) => {}
            (_, true) => fs::remove_dir_all(entry.path())?,
            (_, false) => fs::remove_file(entry.path())?,
        }
    }
    for (name, node) in entries {
        let path = dir.join(name);
        match node {
            Node::Dir(children) => {
                if !path.is_dir() {
                    fs::create_dir(&path)?;
                }
                write_tree(&path, children)?;
            }
            Node::File(bytes) => {
                if fs::read(&path).ok().as_ref() != Some(bytes) {
                    fs::write(&path, bytes)?;
                }
            }
        }
    }
    Ok(())
}

impl State {
    fn new_file(&mut self, model: FileModel) -> FileId {
        let id = self.next_id;
        self.next_id += 1;
        self.files.insert(id, model);
        id
    }

    /// Takes everything under `dir` as durable (at start and after a crash). Files are untracked
    /// until opened through the storage.
    fn adopt_tree(&mut self, dir: &Path) -> io::Result<()> {
        let mut durable = BTreeMap::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                self.adopt_tree(&path)?;
                durable.insert(name, Entry::Dir);
            } else {
                let id = self.new_file(FileModel::default());
                self.names.insert(path, id);
                durable.insert(name, Entry::File(id));
            }
        }
        self.dirs.insert(
            dir.to_owned(),
            DirModel {
                durable,
                volatile: Vec::new(),
            },
        );
        Ok(())
    }

    /// Fails the operation if the process is dead; counts a mutation, dying when none are left.
    fn mutation(&mut self, op: &str, path: &Path) -> io::Result<()> {
        if self.trace {
            eprintln!("sim: {op} {}", path.display());
        }
        if self.dead {
            return Err(dead_error());
        }
        if let Some(left) = self.mutations_left {
            if left == 0 {
                self.dead = true;
                return Err(dead_error());
            }
            self.mutations_left = Some(left - 1);
        }
        self.stats.mutations += 1;
        Ok(())
    }

    fn alive(&self) -> io::Result<()> {
        if self.dead {
            return Err(dead_error());
        }
        Ok(())
    }

    /// Counts an operation of `class` and returns the fault scheduled for it, if any.
    fn fault_for(&mut self, class: OpClass, path: &Path) -> Option<Fault> {
        self.class_counts[class as usize] += 1;
        let count = self.class_counts[class as usize];
        let index = self
            .scheduled
            .iter()
            .position(|(fault, at)| fault.class() == class && *at == count)?;
        self.stats.faults_injected += 1;
        let fault = self.scheduled.swap_remove(index).0;
        if self.trace {
            eprintln!("sim: fault {fault:?} on {}", path.display());
        }
        self.fired.push((fault, path.to_owned()));
        Some(fault)
    }

    fn record_dir_op(&mut self, dir: &Path, op: DirOp) {
        if let Some(model) = self.dirs.get_mut(dir) {
            model.volatile.push(op);
        }
    }

    /// The id of the file at `path`, registering an untracked one first seen here.
    fn id_at(&mut self, path: &Path) -> FileId {
        if let Some(id) = self.names.get(path) {
            return *id;
        }
        let id = self.new_file(FileModel::default());
        self.names.insert(path.to_owned(), id);
        id
    }

    /// Keeps an untracked file's bytes before its last name goes: a crash may bring it back.
    fn remember_untracked(&mut self, path: &Path) {
        let Some(id) = self.names.get(path).copied() else {
            return;
        };
        if let Some(model) = self.files.get_mut(&id)
            && !model.tracked
        {
            model.removed_bytes = fs::read(path).ok();
        }
    }

    fn remember_subtree(&mut self, dir: &Path) {
        let paths: Vec<PathBuf> = self
            .names
            .keys()
            .filter(|path| path.starts_with(dir))
            .cloned()
            .collect();
        for path in paths {
            self.remember_untracked(&path);
            self.names.remove(&path);
        }
    }

    fn sync_file(&mut self, id: FileId, path: &Path) -> io::Result<()> {
        self.mutation("sync", path)?;
        self.stats.syncs += 1;
        let fault = self.fault_for(OpClass::Sync, path);
        let Some(model) = self.files.get_mut(&id) else {
            return Ok(());
        };
        let volatile = std::mem::take(&mut model.volatile);
        if fault == Some(Fault::SyncError) {
            // The kernel drops the dirty pages' error state: what this sync covered is lost.
            return Err(error(EIO, "fsync failed"));
        }
        for op in &volatile {
            apply(&mut model.durable, op);
        }
        Ok(())
    }

    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        self.mutation("sync dir", dir)?;
        self.stats.syncs += 1;
        if self.fault_for(OpClass::DirSync, dir) == Some(Fault::DirSyncError) {
            return Err(error(EIO, "directory fsync failed"));
        }
        let mut durable = BTreeMap::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if entry.file_type()?.is_dir() {
                durable.insert(name, Entry::Dir);
            } else {
                durable.insert(name, Entry::File(self.id_at(&entry.path())));
            }
        }
        let model = self.dirs.entry(dir.to_owned()).or_default();
        model.durable = durable;
        model.volatile.clear();
        Ok(())
    }

    fn pick_mode(&mut self, mode: CrashMode) -> CrashMode {
        const MODES: [CrashMode; 5] = [
            CrashMode::DropVolatile,
            CrashMode::KeepVolatile,
            CrashMode::Prefix,
            CrashMode::Sectors,
            CrashMode::ZeroFill,
        ];
        match mode {
            CrashMode::Random => MODES[self.rng.below(MODES.len() as u64) as usize],
            other => other,
        }
    }

    /// The post-crash entries of `dir`.
    fn crash_dir(
        &mut self,
        dir: &Path,
        mode: CrashMode,
        memo: &mut HashMap<FileId, Option<Vec<u8>>>,
    ) -> io::Result<BTreeMap<String, Node>> {
        let (mut entries, volatile) = match self.dirs.get(dir) {
            Some(model) => (model.durable.clone(), model.volatile.clone()),
            None => (BTreeMap::new(), Vec::new()),
        };
        let dir_mode = self.pick_mode(mode);
        let kept = match dir_mode {
            CrashMode::DropVolatile => 0,
            CrashMode::KeepVolatile => volatile.len(),
            _ => self.rng.below(volatile.len() as u64 + 1) as usize,
        };
        for op in &volatile[..kept] {
            match op {
                DirOp::Link(name, entry) => {
                    entries.insert(name.clone(), *entry);
                }
                DirOp::Unlink(name) => {
                    entries.remove(name);
                }
                DirOp::Rename { from, to } => {
                    if let Some(entry) = entries.remove(from) {
                        entries.insert(to.clone(), entry);
                    }
                }
            }
        }
        if self.trace {
            eprintln!(
                "sim: crash {}: {dir_mode:?}, kept {kept} of {:?}",
                dir.display(),
                volatile
            );
        }
        self.add_unsynced_untracked(dir, dir_mode, &mut entries)?;
        let mut nodes = BTreeMap::new();
        for (name, entry) in entries {
            let node = match entry {
                Entry::Dir => Some(Node::Dir(self.crash_dir(&dir.join(&name), mode, memo)?)),
                Entry::File(id) => match memo.get(&id) {
                    Some(bytes) => bytes.clone().map(Node::File),
                    None => {
                        let bytes = self.crash_file(id, mode)?;
                        if self.trace {
                            let length = bytes.as_ref().map(Vec::len);
                            eprintln!("sim: crash {name}: {length:?} bytes");
                        }
                        memo.insert(id, bytes.clone());
                        bytes.map(Node::File)
                    }
                },
            };
            if let Some(node) = node {
                nodes.insert(name, node);
            }
        }
        Ok(nodes)
    }

    /// Untracked files created in `dir` since its last sync (index files, the lock file): a
    /// crash keeps their names or not.
    fn add_unsynced_untracked(
        &mut self,
        dir: &Path,
        dir_mode: CrashMode,
        entries: &mut BTreeMap<String, Entry>,
    ) -> io::Result<()> {
        let Ok(listing) = fs::read_dir(dir) else {
            return Ok(());
        };
        for entry in listing {
            let entry = entry?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if entries.contains_key(&name)
                || self.names.contains_key(&path)
                || entry.file_type()?.is_dir()
            {
                continue;
            }
            let keep = match dir_mode {
                CrashMode::DropVolatile => false,
                CrashMode::KeepVolatile => true,
                _ => self.rng.chance(1, 2),
            };
            if keep {
                let id = self.id_at(&path);
                entries.insert(name, Entry::File(id));
            }
        }
        Ok(())
    }

    /// The post-crash bytes of file `id`; `None` if they are gone (an untracked file unlinked
    /// without a copy).
    fn crash_file(&mut self, id: FileId, mode: CrashMode) -> io::Result<Option<Vec<u8>>> {
        let file_mode = self.pick_mode(mode);
        let Some(model) = self.files.get(&id) else {
            return Ok(None);
        };
        if !model.tracked {
            let live = self
                .names
                .iter()
                .find(|(_, candidate)| **candidate == id)
                .map(|(path, _)| path.clone());
            let bytes = match live.and_then(|path| fs::read(path).ok()) {
                Some(bytes) => Some(bytes),
                None => model.removed_bytes.clone(),
            };
            return Ok(bytes.map(|bytes| self.damage_untracked(bytes, file_mode)));
        }
        let durable = model.durable.clone();
        let volatile = model.volatile.clone();
        let mut target = durable.clone();
        for op in &volatile {
            apply(&mut target, op);
        }
        if self.trace {
            let (durable_bytes, target_bytes) = (durable.len(), target.len());
            eprintln!(
                "sim: crash file {id}: {file_mode:?}, durable {durable_bytes}, written {target_bytes}"
            );
        }
        let durable_length = durable.len() as u64;
        let bytes = match file_mode {
            CrashMode::DropVolatile | CrashMode::Random => durable,
            CrashMode::KeepVolatile => target,
            CrashMode::Prefix => self.torn_prefix(durable, &volatile),
            CrashMode::Sectors => self.sector_mix(&durable, &target),
            CrashMode::ZeroFill => {
                let mut bytes = vec![0u8; target.len()];
                let kept = durable.len().min(target.len());
                bytes[..kept].copy_from_slice(&durable[..kept]);
                bytes
            }
        };
        let length = bytes.len() as u64;
        self.landing_cut |= self.landings.iter().any(|(landing_id, start, end)| {
            *landing_id == id && *start < durable_length && length < *end
        });
        Ok(Some(bytes))
    }

    /// The durable bytes with a random prefix of `volatile` applied, the next write torn at a
    /// sector boundary.
    fn torn_prefix(&mut self, mut image: Vec<u8>, volatile: &[FileOp]) -> Vec<u8> {
        let kept = self.rng.below(volatile.len() as u64 + 1) as usize;
        for op in &volatile[..kept] {
            apply(&mut image, op);
        }
        if let Some(FileOp::Write { position, bytes }) = volatile.get(kept) {
            let end = position + bytes.len() as u64;
            let first_boundary = (position / SECTOR_BYTES + 1) * SECTOR_BYTES;
            if first_boundary < end {
                let boundaries = (end - 1 - first_boundary) / SECTOR_BYTES + 1;
                let cut = first_boundary + self.rng.below(boundaries) * SECTOR_BYTES;
                let torn = FileOp::Write {
                    position: *position,
                    bytes: bytes[..(cut - position) as usize].to_vec(),
                };
                apply(&mut image, &torn);
            }
        }
        image
    }

    /// Each sector that differs between `old` and `new` holds old or new bytes (or zeros, past
    /// the old length).
    fn sector_mix(&mut self, old: &[u8], new: &[u8]) -> Vec<u8> {
        let (short, long) = (old.len().min(new.len()), old.len().max(new.len()));
        let length = match self.rng.below(3) {
            0 => old.len(),
            1 => new.len(),
            _ => self.rng.between(short as u64, long as u64) as usize,
        };
        let mut bytes = Vec::with_capacity(length);
        let sector = SECTOR_BYTES as usize;
        for start in (0..length).step_by(sector) {
            let end = (start + sector).min(length);
            let old_sector = sector_of(old, start, end);
            let new_sector = sector_of(new, start, end);
            // A sector is written atomically: it holds its old or its new bytes; zeros only
            // where the file had no bytes (its length persisted before its data).
            let choices = if start >= old.len() { 3 } else { 2 };
            let chosen = if old_sector == new_sector {
                old_sector
            } else {
                match self.rng.below(choices) {
                    0 => old_sector,
                    1 => new_sector,
                    _ => vec![0u8; end - start],
                }
            };
            bytes.extend_from_slice(&chosen);
        }
        bytes
    }

    /// What a crash does to a file whose bytes are not modelled: leaves it, truncates it, or
    /// zeroes it from a sector boundary on.
    fn damage_untracked(&mut self, mut bytes: Vec<u8>, mode: CrashMode) -> Vec<u8> {
        if mode == CrashMode::KeepVolatile {
            return bytes;
        }
        match self.rng.below(8) {
            0 => bytes.truncate(self.rng.below(bytes.len() as u64 + 1) as usize),
            1 => {
                let sectors = bytes.len() as u64 / SECTOR_BYTES + 1;
                let from = (self.rng.below(sectors) * SECTOR_BYTES) as usize;
                if from < bytes.len() {
                    bytes[from..].fill(0);
                }
            }
            _ => {}
        }
        bytes
    }

    /// Makes `path` a tracked file, created now (`created`) or adopting its current bytes.
    fn track(&mut self, path: &Path, created: bool) -> io::Result<FileId> {
        if created {
            self.remember_untracked(path);
            let id = self.new_file(FileModel {
                tracked: true,
                ..FileModel::default()
            });
            self.names.insert(path.to_owned(), id);
            if let Some((dir, name)) = split(path) {
                self.record_dir_op(&dir, DirOp::Link(name, Entry::File(id)));
            }
            return Ok(id);
        }
        let id = self.id_at(path);
        let model = self.files.entry(id).or_default();
        if !model.tracked {
            model.tracked = true;
            model.durable = fs::read(path)?;
            model.volatile.clear();
        }
        Ok(id)
    }

    fn misdirect(
        &mut self,
        id: FileId,
        file: &File,
        buf: &[u8],
        position: u64,
    ) -> io::Result<Vec<FileOp>> {
        let length = file.metadata()?.len();
        let span = position.max(length) / SECTOR_BYTES;
        let mut landing = self.rng.below(span + 1) * SECTOR_BYTES;
        if landing == position {
            landing = if position >= SECTOR_BYTES {
                position - SECTOR_BYTES
            } else {
                position + SECTOR_BYTES
            };
        }
        let mut ops = Vec::new();
        let intended_end = position + buf.len() as u64;
        if length < intended_end {
            file.set_len(intended_end)?;
            ops.push(FileOp::SetLength(intended_end));
        }
        file.write_all_at(buf, landing)?;
        let landing_end = landing + buf.len() as u64;
        if self.trace {
            eprintln!(
                "sim: misdirected write {position}+{} landed at {landing}",
                buf.len()
            );
        }
        let over_earlier = self.landings.iter().any(|(earlier_id, start, end)| {
            *earlier_id == id && landing < *end && *start < landing_end
        });
        self.landing_overwritten |= over_earlier;
        self.landings.push((id, landing, landing_end));
        ops.push(FileOp::Write {
            position: landing,
            bytes: buf.to_vec(),
        });
        Ok(ops)
    }
}

impl SimFile {
    fn lock(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.generation != self.generation {
            return Err(error(EIO, "handle from before a crash"));
        }
        state.alive()?;
        Ok(state)
    }

    fn record(state: &mut State, id: FileId, ops: Vec<FileOp>) {
        if let Some(model) = state.files.get_mut(&id) {
            model.volatile.extend(ops);
        }
    }

    /// The part of a failed write that landed, and the error.
    fn failed_write(state: &mut State, fault: Fault, buf: &[u8]) -> (usize, io::Error) {
        let length = buf.len() as u64;
        match fault {
            Fault::WriteError => {
                let sectors = length / SECTOR_BYTES;
                let landed = state.rng.below(sectors + 1) * SECTOR_BYTES;
                (landed as usize, error(EIO, "write failed"))
            }
            Fault::ShortWrite => {
                let landed = state.rng.below(length.max(1));
                (landed as usize, error(ENOSPC, "short write"))
            }
            _ => (0, error(ENOSPC, "no space left")),
        }
    }
}

impl StorageFile for SimFile {
    /// What `posix_fadvise(DONTNEED)` exposes: the device's bytes with the still-dirty writes on
    /// top. Writes a failed sync dropped (fsyncgate) disappear from reads here, as they do on a
    /// real kernel once their clean-marked pages are evicted.
    fn drop_cache(&self) -> io::Result<()> {
        let state = self.lock()?;
        let Some(model) = state.files.get(&self.id).filter(|model| model.tracked) else {
            return Ok(());
        };
        let mut image = model.durable.clone();
        for op in &model.volatile {
            apply(&mut image, op);
        }
        self.file.set_len(0)?;
        std::os::unix::fs::FileExt::write_all_at(&self.file, &image, 0)?;
        self.file.set_len(image.len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        let mut state = self.lock()?;
        state.stats.reads += 1;
        if state.fault_for(OpClass::Read, &self.path) == Some(Fault::ReadError) {
            return Err(error(EIO, "read failed"));
        }
        drop(state);
        super::read_fully(buf, position, |buf, position| {
            self.file.read_at(buf, position)
        })
    }

    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        if self.direct && !is_direct_aligned(buf, position) {
            return Err(error(libc::EINVAL, "unaligned O_DIRECT write"));
        }
        let mut state = self.lock()?;
        state.mutation(&format!("write {position}+{}", buf.len()), &self.path)?;
        state.stats.writes += 1;
        match state.fault_for(OpClass::Write, &self.path) {
            None => {
                self.file.write_all_at(buf, position)?;
                let bytes = buf.to_vec();
                SimFile::record(&mut state, self.id, vec![FileOp::Write { position, bytes }]);
                Ok(())
            }
            Some(Fault::MisdirectedWrite) => {
                let ops = state.misdirect(self.id, &self.file, buf, position)?;
                SimFile::record(&mut state, self.id, ops);
                Ok(())
            }
            Some(fault) => {
                let (landed, failure) = SimFile::failed_write(&mut state, fault, buf);
                if landed > 0 {
                    self.file.write_all_at(&buf[..landed], position)?;
                    let bytes = buf[..landed].to_vec();
                    SimFile::record(&mut state, self.id, vec![FileOp::Write { position, bytes }]);
                }
                Err(failure)
            }
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        self.lock()?.sync_file(self.id, &self.path)
    }

    fn sync_all(&self) -> io::Result<()> {
        self.lock()?.sync_file(self.id, &self.path)
    }

    fn length_bytes(&self) -> io::Result<u64> {
        drop(self.lock()?);
        Ok(self.file.metadata()?.len())
    }

    /// The simulated disk models the length, not block reservation: it extends the file.
    fn allocate(&self, position: u64, length: u64) -> io::Result<bool> {
        let end = position + length;
        if end > self.length_bytes()? {
            self.set_length_bytes(end)?;
        }
        Ok(true)
    }

    fn set_length_bytes(&self, length_bytes: u64) -> io::Result<()> {
        let mut state = self.lock()?;
        state.mutation(&format!("set length {length_bytes}"), &self.path)?;
        self.file.set_len(length_bytes)?;
        SimFile::record(&mut state, self.id, vec![FileOp::SetLength(length_bytes)]);
        Ok(())
    }

    fn modified_ms(&self) -> io::Result<i64> {
        drop(self.lock()?);
        let modified = self.file.metadata()?.modified()?;
        let since_epoch = modified.duration_since(UNIX_EPOCH).unwrap_or_default();
        Ok(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }
}

impl Storage for SimStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let mut state = self.lock();
        state.alive()?;
        let exists = fs::symlink_metadata(path).is_ok();
        let creates = match mode {
            OpenMode::Existing | OpenMode::ExistingDirect => false,
            OpenMode::CreateNew => true,
            OpenMode::CreateOrOpen => !exists,
        };
        if creates {
            state.mutation("create", path)?;
        }
        // The simulator's own writes (torn, misdirected) are not aligned: its backing file is
        // opened without O_DIRECT, and a direct handle checks the caller's alignment instead.
        let direct = mode == OpenMode::ExistingDirect;
        let backing_mode = if direct { OpenMode::Existing } else { mode };
        let file = super::pio::PositionedIo::open_file(path, backing_mode)?;
        let id = state.track(path, creates)?;
        Ok(Box::new(SimFile {
            state: self.state.clone(),
            path: path.to_owned(),
            id,
            generation: state.generation,
            file,
            direct,
        }))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.alive()?;
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|ancestor| !ancestor.exists())
            .map(Path::to_path_buf)
            .collect();
        for path in missing.into_iter().rev() {
            state.mutation("create dir", &path)?;
            fs::create_dir(&path)?;
            state.dirs.insert(path.clone(), DirModel::default());
            if let Some((parent, name)) = split(&path) {
                state.record_dir_op(&parent, DirOp::Link(name, Entry::Dir));
            }
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.lock().alive()?;
        super::pio::PositionedIo.list_dir(dir)
    }

    fn is_dir(&self, path: &Path) -> bool {
        !self.lock().dead && super::pio::PositionedIo.is_dir(path)
    }

    fn exists(&self, path: &Path) -> bool {
        !self.lock().dead && super::pio::PositionedIo.exists(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.mutation(&format!("rename to {}", to.display()), from)?;
        if fs::symlink_metadata(from)?.is_dir() {
            return Err(error(EIO, "renaming directories is not simulated"));
        }
        state.remember_untracked(to);
        fs::rename(from, to)?;
        let id = match state.names.remove(from) {
            Some(id) => id,
            None => state.new_file(FileModel::default()),
        };
        state.names.insert(to.to_owned(), id);
        match (split(from), split(to)) {
            (Some((from_dir, from_name)), Some((to_dir, to_name))) if from_dir == to_dir => {
                let op = DirOp::Rename {
                    from: from_name,
                    to: to_name,
                };
                state.record_dir_op(&from_dir, op);
            }
            (Some((from_dir, from_name)), Some((to_dir, to_name))) => {
                state.record_dir_op(&from_dir, DirOp::Unlink(from_name));
                state.record_dir_op(&to_dir, DirOp::Link(to_name, Entry::File(id)));
            }
            _ => {}
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.mutation("remove", path)?;
        fs::symlink_metadata(path)?;
        state.id_at(path);
        state.remember_untracked(path);
        fs::remove_file(path)?;
        state.names.remove(path);
        if let Some((dir, name)) = split(path) {
            state.record_dir_op(&dir, DirOp::Unlink(name));
        }
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.mutation("remove dir", path)?;
        state.remember_subtree(path);
        fs::remove_dir_all(path)?;
        if let Some((dir, name)) = split(path) {
            state.record_dir_op(&dir, DirOp::Unlink(name));
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.lock().sync_dir(dir)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn disk(seed: u64) -> (tempfile::TempDir, SimStorage) {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimStorage::new(dir.path(), seed).unwrap();
        (dir, sim)
    }

    fn write(sim: &SimStorage, path: &Path, bytes: &[u8]) -> Box<dyn StorageFile> {
        let file = sim.open(path, OpenMode::CreateOrOpen).unwrap();
        file.write_all_at(bytes, 0).unwrap();
        file
    }

    #[test]
    fn synced_data_and_entries_survive_every_crash_mode() {
        for mode in [
            CrashMode::DropVolatile,
            CrashMode::Prefix,
            CrashMode::Sectors,
            CrashMode::ZeroFill,
            CrashMode::Random,
        ] {
            let (dir, sim) = disk(1);
            let path = dir.path().join("a.log");
            let file = write(&sim, &path, &[7u8; 1500]);
            file.sync_data().unwrap();
            sim.sync_dir(dir.path()).unwrap();
            file.write_all_at(&[9u8; 700], 1500).unwrap();
            drop(file);
            sim.crash_with(mode).unwrap();
            let bytes = fs::read(&path).unwrap();
            assert_eq!(&bytes[..1500], &[7u8; 1500][..], "{mode:?}");
        }
    }

    #[test]
    fn a_crash_drops_unsynced_bytes_and_unsynced_entries() {
        let (dir, sim) = disk(2);
        let synced = dir.path().join("synced");
        let unsynced_entry = dir.path().join("unsynced-entry");
        write(&sim, &synced, b"durable").sync_data().unwrap();
        sim.sync_dir(dir.path()).unwrap();
        let file = write(&sim, &unsynced_entry, b"data synced, name not");
        file.sync_data().unwrap();
        drop(file);
        write(&sim, &synced, b"DURABLE, more");
        sim.crash_with(CrashMode::DropVolatile).unwrap();
        assert_eq!(fs::read(&synced).unwrap(), b"durable");
        assert!(
            !unsynced_entry.exists(),
            "a file's sync does not make its name durable"
        );
    }

    #[test]
    fn unsynced_renames_and_removals_revert_and_synced_ones_stay() {
        let (dir, sim) = disk(3);
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        write(&sim, &a, b"A").sync_all().unwrap();
        write(&sim, &c, b"C").sync_all().unwrap();
        sim.sync_dir(dir.path()).unwrap();
        sim.rename(&a, &b).unwrap();
        sim.sync_dir(dir.path()).unwrap();
        sim.remove_file(&c).unwrap();
        sim.rename(&b, &a).unwrap();
        sim.crash_with(CrashMode::DropVolatile).unwrap();
        assert!(!a.exists());
        assert_eq!(fs::read(&b).unwrap(), b"A");
        assert_eq!(
            fs::read(&c).unwrap(),
            b"C",
            "an unsynced removal comes back"
        );
    }

    #[test]
    fn a_directory_whose_creation_was_not_synced_goes_with_its_files() {
        let (dir, sim) = disk(12);
        let partition = dir.path().join("topic-0");
        sim.create_dir_all(&partition).unwrap();
        let file = write(&sim, &partition.join("0.log"), b"x");
        file.sync_all().unwrap();
        sim.sync_dir(&partition).unwrap();
        drop(file);
        sim.crash_with(CrashMode::DropVolatile).unwrap();
        assert!(
            !partition.exists(),
            "the parent's entry for the directory was never synced"
        );
    }

    #[test]
    fn files_written_outside_the_storage_are_kept_truncated_or_zeroed() {
        let mut outcomes = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let (dir, sim) = disk(seed);
            let index = dir.path().join("0.index");
            fs::write(&index, [7u8; 1024]).unwrap();
            sim.sync_dir(dir.path()).unwrap();
            sim.crash_with(CrashMode::DropVolatile).unwrap();
            let bytes = fs::read(&index).unwrap();
            let outcome = if bytes.len() < 1024 {
                "truncated"
            } else if bytes.contains(&0) {
                "zeroed"
            } else {
                "kept"
            };
            outcomes.insert(outcome);
        }
        assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    }

    #[test]
    fn keep_volatile_keeps_everything_written() {
        let (dir, sim) = disk(4);
        let path = dir.path().join("f");
        let file = write(&sim, &path, b"hello");
        file.write_all_at(b" world", 5).unwrap();
        drop(file);
        sim.crash_with(CrashMode::KeepVolatile).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"hello world");
    }

    #[test]
    fn a_torn_prefix_keeps_whole_sectors_of_the_write() {
        for seed in 0..32 {
            let (dir, sim) = disk(seed);
            let path = dir.path().join("f");
            write(&sim, &path, &[]).sync_all().unwrap();
            sim.sync_dir(dir.path()).unwrap();
            let file = sim.open(&path, OpenMode::Existing).unwrap();
            file.write_all_at(&[1u8; 2048], 0).unwrap();
            drop(file);
            sim.crash_with(CrashMode::Prefix).unwrap();
            let bytes = fs::read(&path).unwrap();
            assert_eq!(bytes.len() as u64 % SECTOR_BYTES, 0, "seed {seed}");
            assert!(bytes.iter().all(|byte| *byte == 1));
        }
    }

    #[test]
    fn zero_fill_keeps_the_new_length_with_zeros() {
        let (dir, sim) = disk(5);
        let path = dir.path().join("f");
        write(&sim, &path, b"old").sync_all().unwrap();
        sim.sync_dir(dir.path()).unwrap();
        let file = sim.open(&path, OpenMode::Existing).unwrap();
        file.write_all_at(b"new!", 3).unwrap();
        drop(file);
        sim.crash_with(CrashMode::ZeroFill).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"old\0\0\0\0");
    }

    #[test]
    fn after_a_failed_fsync_the_data_never_becomes_durable_but_still_reads() {
        let (dir, sim) = disk(6);
        let path = dir.path().join("f");
        let file = write(&sim, &path, b"acked");
        file.sync_data().unwrap();
        sim.sync_dir(dir.path()).unwrap();
        file.write_all_at(b"-lost", 5).unwrap();
        sim.schedule(Fault::SyncError, 1);
        assert!(file.sync_data().is_err());
        assert!(
            file.sync_data().is_ok(),
            "a retry reports success, as Linux does"
        );
        let mut buf = [0u8; 10];
        assert_eq!(
            file.read_at(&mut buf, 0).unwrap(),
            10,
            "the page cache still has it"
        );
        drop(file);
        sim.crash_with(CrashMode::KeepVolatile).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"acked");
    }

    #[test]
    fn a_dead_process_fails_every_operation_until_the_crash() {
        let (dir, sim) = disk(7);
        sim.die_after(1);
        let path = dir.path().join("f");
        let file = sim.open(&path, OpenMode::CreateNew).unwrap();
        assert!(file.write_all_at(b"x", 0).is_err());
        assert!(sim.is_dead());
        assert!(sim.list_dir(dir.path()).is_err());
        drop(file);
        sim.crash().unwrap();
        assert!(!sim.is_dead());
        assert!(sim.list_dir(dir.path()).is_ok());
    }

    #[test]
    fn handles_from_before_a_crash_fail() {
        let (dir, sim) = disk(8);
        let file = write(&sim, &dir.path().join("f"), b"x");
        sim.crash().unwrap();
        assert!(file.write_all_at(b"y", 0).is_err());
    }

    #[test]
    fn scheduled_write_faults_fail_the_nth_write() {
        let (dir, sim) = disk(9);
        let file = write(&sim, &dir.path().join("f"), b"first");
        sim.schedule(Fault::NoSpace, 2);
        file.write_all_at(b"second", 5).unwrap();
        let failure = file.write_all_at(b"third", 11).unwrap_err();
        assert_eq!(failure.kind(), io::ErrorKind::StorageFull);
        assert_eq!(file.length_bytes().unwrap(), 11, "ENOSPC lands nothing");
        sim.schedule(Fault::ShortWrite, 1);
        assert!(file.write_all_at(&[3u8; 100], 11).is_err());
        assert!(
            file.length_bytes().unwrap() < 111,
            "a short write lands a proper prefix"
        );
        sim.schedule(Fault::ReadError, 1);
        assert!(file.read_at(&mut [0u8; 4], 0).is_err());
        assert_eq!(sim.stats().faults_injected, 3);
    }

    #[test]
    fn a_misdirected_write_lands_elsewhere_and_leaves_zeros_where_intended() {
        let (dir, sim) = disk(10);
        let path = dir.path().join("f");
        let file = write(&sim, &path, &[1u8; 1024]);
        sim.schedule(Fault::MisdirectedWrite, 1);
        file.write_all_at(&[2u8; 512], 1024).unwrap();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 1536);
        assert_eq!(&bytes[1024..], &[0u8; 512][..]);
        assert_eq!(bytes.iter().filter(|byte| **byte == 2).count(), 512);
    }

    #[test]
    fn a_misdirected_write_over_an_earlier_ones_landing_is_recorded() {
        let (dir, sim) = disk(10);
        let path = dir.path().join("f");
        let file = write(&sim, &path, &[1u8; 100]);
        // Below one sector, a misdirected write can only land at 0.
        sim.schedule(Fault::MisdirectedWrite, 1);
        file.write_all_at(&[2u8; 50], 100).unwrap();
        assert!(!sim.misdirected_over_misdirected());
        sim.schedule(Fault::MisdirectedWrite, 1);
        file.write_all_at(&[3u8; 50], 150).unwrap();
        assert!(sim.misdirected_over_misdirected());
    }

    #[test]
    fn a_misdirected_write_over_synced_bytes_cut_back_by_a_power_cut_is_recorded() {
        let (dir, sim) = disk(10);
        let path = dir.path().join("f");
        let file = write(&sim, &path, &[1u8; 100]);
        file.sync_data().unwrap();
        // Below one sector, it lands at 0: over the synced bytes, and past their end.
        sim.schedule(Fault::MisdirectedWrite, 1);
        file.write_all_at(&[2u8; 150], 100).unwrap();
        drop(file);
        sim.crash_with(CrashMode::KeepVolatile).unwrap();
        assert!(!sim.misdirected_landing_cut(), "0 to 150, kept whole");
        let file = sim.open(&path, OpenMode::CreateOrOpen).unwrap();
        file.sync_data().unwrap();
        sim.schedule(Fault::MisdirectedWrite, 1);
        file.write_all_at(&[3u8; 300], 250).unwrap();
        drop(file);
        sim.crash_with(CrashMode::DropVolatile).unwrap();
        assert!(
            sim.misdirected_landing_cut(),
            "0 to 300, cut back to 250 bytes"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_crash() {
        let run = |seed| {
            let (dir, sim) = disk(seed);
            let path = dir.path().join("f");
            let file = write(&sim, &path, &[5u8; 3000]);
            file.write_all_at(&[6u8; 3000], 1000).unwrap();
            sim.sync_dir(dir.path()).unwrap();
            drop(file);
            sim.crash_with(CrashMode::Sectors).unwrap();
            fs::read(&path).unwrap()
        };
        assert_eq!(run(11), run(11));
    }
}
