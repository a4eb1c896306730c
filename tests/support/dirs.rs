//! Scratch directories and the files in them.

use std::path::{Path, PathBuf};

/// A scratch directory, on tmpfs when there is one (the log fsyncs a lot; tmpfs keeps it fast).
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().unwrap()
}

/// A copy of the directory tree `from` at `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The names of the files in `dir` that end with `suffix`, sorted.
pub fn names_ending(dir: &Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(suffix))
        .collect();
    names.sort();
    names
}

/// How many files in `dir` end with `suffix`.
pub fn count_ending(dir: &Path, suffix: &str) -> usize {
    names_ending(dir, suffix).len()
}

/// The segment file of base offset `base` in `dir` with `extension` (".log", ".index", ...).
pub fn segment_file(dir: &Path, base: u64, extension: &str) -> PathBuf {
    dir.join(format!("{base:020}{extension}"))
}

/// XORs the byte at `position` of the file at `path` with `mask`, in place.
pub fn flip_byte(path: &Path, position: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, position).unwrap();
    file.write_all_at(&[byte[0] ^ mask], position).unwrap();
}

/// The length of the file at `path`.
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// The base offsets of the segments (`.log` files) in `dir`, ascending.
pub fn segment_bases(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = names_ending(dir, ".log")
        .iter()
        .filter_map(|name| name.strip_suffix(".log")?.parse().ok())
        .collect();
    bases.sort_unstable();
    bases
}
