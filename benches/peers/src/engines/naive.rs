//! The naive log a user might write first: one file of length-prefixed records (u32 little-endian
//! length, then the payload) through a default `BufWriter` (8 KiB), `flush` + `File::sync_data`
//! after each batch in the sync cells; an in-memory `Vec` of record positions for lookups
//! (`pread`), rebuilt by reading the file on reopen; scans through a 1 MiB `BufReader`.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::LogStore;
use crate::workload::{BATCH_RECORDS, Payloads, PeerError, PeerResult, ScanTotals, context};

const LENGTH_BYTES: usize = 4;
const SCAN_BUFFER_BYTES: usize = 1024 * 1024;

pub struct NaiveLog {
    path: PathBuf,
    writer: BufWriter<File>,
    /// Byte position of each record's length prefix, by offset.
    positions: Vec<u64>,
    /// Bytes written through the writer (the next record's position).
    end: u64,
    buffer: Vec<u8>,
}

fn open_file(path: &Path) -> PeerResult<File> {
    OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
        .map_err(context("opening the log file"))
}

/// Reads every record of the file, calling `visit(position, payload)`.
fn read_records(path: &Path, mut visit: impl FnMut(u64, &[u8])) -> PeerResult<()> {
    let file = File::open(path).map_err(context("opening the log file"))?;
    let mut reader = BufReader::with_capacity(SCAN_BUFFER_BYTES, file);
    let mut payload = Vec::new();
    let mut position = 0u64;
    loop {
        let mut length = [0u8; LENGTH_BYTES];
        match reader.read_exact(&mut length) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(context("reading a length")(error)),
        }
        let length = u32::from_le_bytes(length) as usize;
        payload.resize(length, 0);
        reader
            .read_exact(&mut payload)
            .map_err(context("reading a record"))?;
        visit(position, &payload);
        position += (LENGTH_BYTES + length) as u64;
    }
}

impl NaiveLog {
    pub fn open(dir: &Path) -> PeerResult<NaiveLog> {
        let path = dir.join("naive.log");
        let writer = BufWriter::new(open_file(&path)?);
        Ok(NaiveLog {
            path,
            writer,
            positions: Vec::new(),
            end: 0,
            buffer: Vec::new(),
        })
    }
}

impl LogStore for NaiveLog {
    fn append_batch(
        &mut self,
        payloads: &Payloads,
        first_offset: u64,
        sync: bool,
    ) -> PeerResult<()> {
        for offset in first_offset..first_offset + BATCH_RECORDS as u64 {
            let record = payloads.record(offset);
            let length = u32::try_from(record.len()).map_err(context("record length"))?;
            self.writer
                .write_all(&length.to_le_bytes())
                .map_err(context("write"))?;
            self.writer.write_all(record).map_err(context("write"))?;
            self.positions.push(self.end);
            self.end += (LENGTH_BYTES + record.len()) as u64;
        }
        if sync {
            self.writer.flush().map_err(context("flush"))?;
            self.writer
                .get_ref()
                .sync_data()
                .map_err(context("sync_data"))?;
        }
        Ok(())
    }

    fn scan(&mut self, _payloads: &Payloads) -> PeerResult<ScanTotals> {
        self.writer.flush().map_err(context("flush"))?;
        let mut totals = ScanTotals::default();
        read_records(&self.path, |_, payload| totals.add(payload.len()))?;
        Ok(totals)
    }

    fn lookup(&mut self, payloads: &Payloads, offset: u64) -> PeerResult<()> {
        let position = *self
            .positions
            .get(offset as usize)
            .ok_or_else(|| PeerError(format!("record {offset} missing")))?;
        let next = self
            .positions
            .get(offset as usize + 1)
            .copied()
            .unwrap_or(self.end);
        self.buffer.resize((next - position) as usize, 0);
        self.writer
            .get_ref()
            .read_exact_at(&mut self.buffer, position)
            .map_err(context("pread"))?;
        payloads.check(offset, self.buffer.get(LENGTH_BYTES..).unwrap_or_default())
    }

    fn reopen(&mut self) -> PeerResult<()> {
        self.writer.flush().map_err(context("flush"))?;
        self.writer = BufWriter::new(open_file(&self.path)?);
        let mut positions = Vec::with_capacity(self.positions.len());
        read_records(&self.path, |position, _| positions.push(position))?;
        self.positions = positions;
        Ok(())
    }
}
