//! Sizes fixed by Kafka's format, and the compile-time relationships between them.

/// Size of the RecordBatch v2 header (`DefaultRecordBatch.RECORD_BATCH_OVERHEAD`).
pub const BATCH_HEADER_BYTES: usize = 61;
/// `baseOffset` (8) + `batchLength` (4): the bytes not counted by `batchLength` (`LOG_OVERHEAD`).
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// Bytes needed to learn a batch's offset, length and magic (`HEADER_SIZE_UP_TO_MAGIC`).
pub const BATCH_HEADER_UP_TO_MAGIC_BYTES: usize = 17;
/// The only batch format seglog reads and writes.
pub const BATCH_MAGIC_V2: i8 = 2;
/// One `.index` entry: relative offset (4) + position (4).
pub const OFFSET_INDEX_ENTRY_BYTES: usize = 8;
/// One `.timeindex` entry: timestamp (8) + relative offset (4).
pub const TIME_INDEX_ENTRY_BYTES: usize = 12;
/// Segment file names carry the base offset as this many decimal digits.
pub const FILE_NAME_OFFSET_DIGITS: usize = 20;
/// Kafka's longest legal topic name.
pub const TOPIC_NAME_LENGTH_MAX: usize = 249;
/// Positions in a `.log` are stored as `u32` in the offset index, so a segment can never be larger.
pub const SEGMENT_BYTES_MAX: u64 = i32::MAX as u64;
/// A relative offset must fit the index's signed 32-bit field.
pub const RELATIVE_OFFSET_MAX: u64 = i32::MAX as u64;
/// Bound on the bytes one decompressed batch may expand to, whatever its header claims.
pub const DECOMPRESSED_BATCH_BYTES_MAX: usize = 64 * 1024 * 1024;
/// One slot of the cleaner's offset map: the key's MD5 hash (16) then its offset (8), Kafka's
/// `bytesPerEntry`.
pub const OFFSET_MAP_SLOT_BYTES: usize = 24;
/// Kafka sizes the offset map with an `int` (`log.cleaner.dedupe.buffer.size` per thread), so the
/// slot count and every probe fit an `i32`.
pub const OFFSET_MAP_MEMORY_BYTES_MAX: usize = i32::MAX as usize;

const _: () = assert!(SEGMENT_BYTES_MAX <= u32::MAX as u64);
const _: () = assert!(BATCH_HEADER_UP_TO_MAGIC_BYTES < BATCH_HEADER_BYTES);
const _: () = assert!(LOG_OVERHEAD_BYTES < BATCH_HEADER_UP_TO_MAGIC_BYTES);
