//! Producer ids for idempotent producers (Kafka's `InitProducerId`), handed out in blocks whose
//! last id is written durably to `<data dir>/seglog-producer-ids` (FORMAT.md § Producer-id
//! block) before the first id of the block is: no id is ever given twice, across crashes
//! included. The file is read at the first allocation after open, so an engine that never
//! allocates never touches it.

use std::path::Path;

use crate::error::{ProducerIdError, StorageError};
use crate::format::file_name::{CHECKPOINT_TMP_SUFFIX, PRODUCER_ID_BLOCK};
use crate::format::producer_ids::{self, ProducerIdBlock};
use crate::io::{Storage, read_small_file, sync_dir, write_durably};

/// How many ids a block holds (Kafka's block size).
pub(crate) const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// The ids left in the current block: `next..=last`, or none before the first allocation.
#[derive(Debug, Default)]
pub(crate) struct ProducerIds {
    current: Option<(i64, i64)>,
}

impl ProducerIds {
    /// The next unused producer id, writing a new block first when the current one is spent.
    pub(crate) fn allocate(
        &mut self,
        storage: &dyn Storage,
        root: &Path,
    ) -> Result<i64, ProducerIdError> {
        let (next, last) = match self.current {
            Some((next, last)) if next <= last => (next, last),
            Some((_, last)) => write_block_after(storage, root, last)?,
            None => {
                let previous = read_block(storage, root)?;
                let last = previous.map_or(-1, |block| block.last);
                write_block_after(storage, root, last)?
            }
        };
        self.current = Some((next + 1, last));
        Ok(next)
    }
}

/// The block written by the last allocation, if any engine ever allocated here.
fn read_block(
    storage: &dyn Storage,
    root: &Path,
) -> Result<Option<ProducerIdBlock>, ProducerIdError> {
    let path = root.join(PRODUCER_ID_BLOCK);
    if !storage.exists(&path) {
        return Ok(None);
    }
    let bytes = read_small_file(storage, &path)?;
    producer_ids::decode(&bytes)
        .map(Some)
        .map_err(|source| ProducerIdError::Corrupt { file: path, source })
}

/// Writes the block after `previous_last` durably (tmp, fsync, rename, directory fsync) and
/// returns its `(first, last)`.
fn write_block_after(
    storage: &dyn Storage,
    root: &Path,
    previous_last: i64,
) -> Result<(i64, i64), ProducerIdError> {
    let first = previous_last
        .checked_add(1)
        .filter(|first| first.checked_add(PRODUCER_ID_BLOCK_SIZE).is_some())
        .ok_or(ProducerIdError::Exhausted)?;
    let block = ProducerIdBlock {
        first,
        last: first + PRODUCER_ID_BLOCK_SIZE - 1,
    };
    let path = root.join(PRODUCER_ID_BLOCK);
    let tmp = root.join(format!("{PRODUCER_ID_BLOCK}{CHECKPOINT_TMP_SUFFIX}"));
    write_durably(storage, &tmp, producer_ids::encode(block).as_bytes())?;
    storage
        .rename(&tmp, &path)
        .map_err(|source| StorageError::io("rename", &tmp, source))?;
    sync_dir(storage, root)?;
    Ok((block.first, block.last))
}
