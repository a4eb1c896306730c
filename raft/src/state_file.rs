//! A partition's Raft state beside its log: the vote, the committed and last purged log ids,
//! where entry numbering (re)starts in the log, and the current snapshot's metadata.
//!
//! One file per partition, `<topic>-<partition>.raft`, replaced whole as the engine's checkpoints
//! are: written to `.tmp`, `fsync`ed, renamed over, the directory `fsync`ed. Bytes: magic
//! `SGRS`, version `1` (u8), body length (u32 BE), the body (JSON), CRC-32C of the body (u32 BE).
//! A file that fails its checks is an error, never a default: a lost vote could vote twice.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use openraft::{BasicNode, LogId, SnapshotMeta, Vote};
use seglog::format::crc::crc32c;
use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 4] = b"SGRS";
const VERSION: u8 = 1;
const HEADER_BYTES: usize = 4 + 1 + 4;

/// Where entry numbering (re)starts: the entry at `offset` has index `index`; the batches after
/// it, up to the next anchor, number on from it. The first anchor is the log start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    /// The entry's index.
    pub index: u64,
    /// The base offset of the entry's batch.
    pub offset: u64,
}

/// The snapshot a lagging follower is sent: metadata only, for the log is the data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// The last entry it covers and the membership as of it.
    pub meta: SnapshotMeta<u64, BasicNode>,
    /// Where the leader's log goes on after it: a follower installing it starts its log there.
    pub next: Anchor,
}

/// Everything a partition's Raft group keeps beside its log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftState {
    /// The last vote this node made or saw.
    pub vote: Option<Vote<u64>>,
    /// A committed log id (may lag the real one: it only saves re-reading at start).
    pub committed: Option<LogId<u64>>,
    /// The last log id removed from the log's front.
    pub last_purged: Option<LogId<u64>>,
    /// Where numbering starts and restarts, by offset.
    pub anchors: Vec<Anchor>,
    /// The current snapshot.
    pub snapshot: Option<SnapshotRecord>,
}

/// Reading or writing a state file.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// The file system refused.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The bytes fail the checks.
    #[error("{path} is corrupt: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Which check failed.
        why: String,
    },
}

/// One partition's state file.
#[derive(Clone, Debug)]
pub struct StateFile {
    dir: PathBuf,
    path: PathBuf,
}

impl StateFile {
    /// The state file of `topic`-`partition` in `dir`.
    pub fn new(dir: &Path, topic: &str, partition: u32) -> StateFile {
        StateFile {
            dir: dir.to_owned(),
            path: dir.join(format!("{topic}-{partition}.raft")),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved state; the default when no file was ever written.
    pub fn load(&self) -> Result<RaftState, StateFileError> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Ok(RaftState::default());
            }
            Err(source) => return Err(self.io("read", source)),
        };
        let body = self.check(&bytes)?;
        serde_json::from_slice(body).map_err(|error| self.corrupt(format!("body: {error}")))
    }

    fn check<'a>(&self, bytes: &'a [u8]) -> Result<&'a [u8], StateFileError> {
        let (header, rest) = bytes
            .split_at_checked(HEADER_BYTES)
            .ok_or_else(|| self.corrupt("shorter than its header".into()))?;
        if &header[..4] != MAGIC || header[4] != VERSION {
            return Err(self.corrupt("wrong magic or version".into()));
        }
        let length = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) as usize;
        let (body, crc) = rest
            .split_at_checked(length)
            .ok_or_else(|| self.corrupt("shorter than its length".into()))?;
        let crc: [u8; 4] = crc
            .try_into()
            .map_err(|_| self.corrupt("no checksum after the body".into()))?;
        if u32::from_be_bytes(crc) != crc32c(body) {
            return Err(self.corrupt("checksum mismatch".into()));
        }
        Ok(body)
    }

    /// Replaces the file with `state`, durably. Blocks for two syncs.
    pub fn store(&self, state: &RaftState) -> Result<(), StateFileError> {
        let body = serde_json::to_vec(state).map_err(|error| StateFileError::Io {
            op: "encode",
            path: self.path.clone(),
            source: io::Error::other(error),
        })?;
        let mut bytes = Vec::with_capacity(HEADER_BYTES + body.len() + 4);
        bytes.extend_from_slice(MAGIC);
        bytes.push(VERSION);
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(&crc32c(&body).to_be_bytes());
        let tmp = self.path.with_extension("raft.tmp");
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|source| self.io("create", source))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(|source| self.io("write", source))?;
        fs::rename(&tmp, &self.path).map_err(|source| self.io("rename", source))?;
        File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|source| StateFileError::Io {
                op: "fsync directory",
                path: self.dir.clone(),
                source,
            })
    }

    fn io(&self, op: &'static str, source: io::Error) -> StateFileError {
        StateFileError::Io {
            op,
            path: self.path.clone(),
            source,
        }
    }

    fn corrupt(&self, why: String) -> StateFileError {
        StateFileError::Corrupt {
            path: self.path.clone(),
            why,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_stored_state_loads_back_and_a_damaged_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path(), "t", 3);
        assert_eq!(file.load().unwrap(), RaftState::default());
        let state = RaftState {
            vote: Some(Vote::new(4, 2)),
            committed: Some(LogId::new(openraft::CommittedLeaderId::new(4, 0), 17)),
            last_purged: None,
            anchors: vec![Anchor {
                index: 3,
                offset: 40,
            }],
            snapshot: None,
        };
        file.store(&state).unwrap();
        assert_eq!(file.load().unwrap(), state);
        let mut bytes = fs::read(file.path()).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        fs::write(file.path(), &bytes).unwrap();
        assert!(matches!(file.load(), Err(StateFileError::Corrupt { .. })));
        fs::write(file.path(), &bytes[..6]).unwrap();
        assert!(matches!(file.load(), Err(StateFileError::Corrupt { .. })));
    }
}
