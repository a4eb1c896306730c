//! Compression codecs for the records section of a Kafka RecordBatch (v2).
//!
//! A v2 batch stores its codec in bits 0-2 of the `attributes` field; Kafka's
//! `CompressionType` enum assigns 0 = none, 1 = gzip, 2 = snappy, 3 = lz4 and
//! 4 = zstd, and uses the lowercase names of those codecs as the values of the
//! `compression.type` setting. Only the records section (everything after the
//! fixed 61-byte batch header) is compressed; the header, and the CRC-32C that
//! covers the compressed bytes, stay in the clear.
//!
//! Kafka does not compress with "just the codec": each codec is wrapped in the
//! stream format of the Java library the broker and the Java producer use, and
//! those wrappers are what end up on disk. This module reads and writes exactly
//! those wrappers:
//!
//! * **gzip** - an ordinary RFC 1952 gzip stream, as written by the JDK's
//!   `GZIPOutputStream`. We write one member at the default deflate level and
//!   read any number of concatenated members.
//! * **snappy** - not the official "framing format" of Snappy but snappy-java's
//!   own stream format produced by its `SnappyOutputStream` (sometimes called
//!   the *xerial* framing): a 16-byte header made of the 8 magic bytes
//!   `0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00` and two big-endian 32-bit integers
//!   (format version and minimum compatible version, both 1), followed by
//!   chunks, each a big-endian 32-bit length and that many bytes of a plain
//!   ("raw") Snappy block. The writer cuts its input into chunks of 32 KiB.
//!   snappy-java's reader also accepts input that lacks the header and then
//!   treats the whole input as one raw block (some non-Java clients produce
//!   that), and it accepts a second header in the middle of the stream when two
//!   streams were concatenated; both are supported here. The format has no end
//!   marker and no checksum, so a stream cut exactly at a chunk boundary still
//!   decodes (to a prefix of the data); the batch CRC is what catches that.
//! * **lz4** - since Kafka 0.10 (message format v1 and later) the standard LZ4
//!   *frame* format, written by Kafka's own `KafkaLZ4BlockOutputStream`: frame
//!   magic `0x184D2204`, a descriptor announcing independent blocks of at most
//!   64 KiB, no block or content checksums and no content size, and a correct
//!   header checksum byte (the broken checksum of the pre-0.10 format is not
//!   relevant to v2 batches). Before handing a frame to the decoder we walk its
//!   block structure ourselves, so that a frame missing its end mark is
//!   reported as truncated instead of being silently accepted.
//! * **zstd** - a standard Zstandard frame as written by zstd-jni's
//!   `ZstdOutputStream`; we compress at level 3, Kafka's default.
//!
//! # Resource limits
//!
//! [`decompress`] is meant to be fed untrusted bytes. It never panics, and the
//! output buffer it builds never has a capacity above `limit_bytes + 1`, no
//! matter what sizes the input claims: streaming codecs are read through a
//! buffer that grows geometrically but is capped at `limit_bytes + 1` (reading
//! that extra byte is how an oversized output is detected), and each Snappy
//! block's declared length is checked against the remaining budget before any
//! memory is reserved for it. Besides the output, the decoders keep bounded
//! working state: about 32 KiB for gzip, at most two buffers of the declared
//! LZ4 block size (4 MiB at most), and for zstd a window whose size is declared
//! by the frame and capped by the decoder at 2^27 bytes (zstd's own default; a
//! Kafka producer configured with `compression.zstd.level=22` legitimately
//! declares that size). zstd reserves the window lazily, so only the part it
//! actually writes to, which is bounded by the output we accept, is touched.

use std::fmt;
use std::io::{self, Read, Write};
use std::str::FromStr;

use bytes::Bytes;

/// Compression codec from bits 0-2 of a RecordBatch's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Compression {
    /// Records are stored uncompressed.
    None = 0,
    /// A gzip stream (`GZIPOutputStream`).
    Gzip = 1,
    /// snappy-java's `SnappyOutputStream` ("xerial") framing around raw Snappy blocks.
    Snappy = 2,
    /// An LZ4 frame (`KafkaLZ4BlockOutputStream`).
    Lz4 = 3,
    /// A Zstandard frame.
    Zstd = 4,
}

impl Compression {
    /// Mask selecting the codec bits of a batch's `attributes`.
    const ATTRIBUTE_MASK: u8 = 0b111;

    /// Decodes the codec from bits 0-2 of a batch's attributes.
    ///
    /// Only the low three bits of `bits` are looked at, so the low byte of the
    /// attributes can be passed as is. Returns
    /// `Err(DecompressError::UnknownCodec(bits))` for the unassigned values 5, 6 and 7.
    pub fn from_attribute_bits(bits: u8) -> Result<Compression, DecompressError> {
        match bits & Self::ATTRIBUTE_MASK {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(DecompressError::UnknownCodec(other)),
        }
    }

    /// The value of bits 0-2 of a batch's attributes for this codec.
    pub fn attribute_bits(self) -> u8 {
        self as u8
    }

    /// The codec's name as used by Kafka's `compression.type` setting.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Compression {
    type Err = DecompressError;

    /// Parses one of Kafka's `compression.type` names: `none`, `gzip`,
    /// `snappy`, `lz4` or `zstd` (exact, lowercase, as Kafka's `CompressionType.forName`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Compression::None),
            "gzip" => Ok(Compression::Gzip),
            "snappy" => Ok(Compression::Snappy),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            other => Err(DecompressError::UnknownCodecName(other.to_owned())),
        }
    }
}

/// Why a codec could not be identified or a records section could not be decompressed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecompressError {
    /// Bits 0-2 of the batch attributes hold a value that names no codec (5, 6 or 7).
    #[error("unknown compression codec id {0} in batch attributes")]
    UnknownCodec(u8),
    /// A string that is not one of Kafka's `compression.type` names.
    #[error("unknown compression codec name {0:?} (expected none, gzip, snappy, lz4 or zstd)")]
    UnknownCodecName(String),
    /// The decompressed output would exceed the limit.
    #[error("decompressed records would exceed the limit of {limit_bytes} bytes")]
    TooLarge {
        /// The limit that was passed to [`decompress`].
        limit_bytes: usize,
    },
    /// The compressed bytes are not a valid stream of this codec, or are truncated.
    #[error("corrupt or truncated {codec}-compressed records")]
    Corrupt {
        /// The codec that was being decoded.
        codec: Compression,
        /// What the decoder reported.
        #[source]
        source: io::Error,
    },
}

impl DecompressError {
    fn corrupt(codec: Compression, source: io::Error) -> Self {
        DecompressError::Corrupt { codec, source }
    }

    fn corrupt_msg(codec: Compression, kind: io::ErrorKind, msg: &'static str) -> Self {
        DecompressError::Corrupt {
            codec,
            source: io::Error::new(kind, msg),
        }
    }
}

/// Decompresses the records section of a compressed Kafka batch (everything after the 61-byte header).
///
/// Never panics on any input; never allocates more than `limit_bytes` (+ small constant) of output
/// regardless of what sizes the input claims; returns [`DecompressError::TooLarge`] if the output
/// would exceed `limit_bytes`. An output of exactly `limit_bytes` bytes is accepted.
pub fn decompress(
    codec: Compression,
    input: &[u8],
    limit_bytes: usize,
) -> Result<Bytes, DecompressError> {
    let out = match codec {
        Compression::None => {
            if input.len() > limit_bytes {
                return Err(DecompressError::TooLarge { limit_bytes });
            }
            input.to_vec()
        }
        Compression::Gzip => {
            require_non_empty(codec, input)?;
            read_capped(
                codec,
                flate2::bufread::MultiGzDecoder::new(input),
                limit_bytes,
            )?
        }
        Compression::Snappy => snappy::decompress(input, limit_bytes)?,
        Compression::Lz4 => {
            lz4::check_frames(input).map_err(|e| DecompressError::corrupt(codec, e))?;
            read_capped(
                codec,
                lz4_flex::frame::FrameDecoder::new(input),
                limit_bytes,
            )?
        }
        Compression::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(input)
                .map_err(|e| DecompressError::corrupt(codec, e))?;
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| DecompressError::corrupt(codec, e))?;
            read_capped(codec, decoder, limit_bytes)?
        }
    };
    Ok(Bytes::from(out))
}

/// Compresses a records section the way Kafka's Java producer does (so Kafka can read it).
pub fn compress(codec: Compression, input: &[u8]) -> Result<Vec<u8>, io::Error> {
    match codec {
        Compression::None => Ok(input.to_vec()),
        Compression::Gzip => {
            // The JDK's Deflater default (level 6), which is also Kafka's default gzip level.
            let mut encoder = flate2::write::GzEncoder::new(
                Vec::with_capacity(input.len() / 2 + 64),
                flate2::Compression::default(),
            );
            encoder.write_all(input)?;
            encoder.finish()
        }
        Compression::Snappy => snappy::compress(input),
        Compression::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent)
                .block_checksums(false)
                .content_checksum(false)
                .content_size(None);
            let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(
                info,
                Vec::with_capacity(input.len() / 2 + 64),
            );
            encoder.write_all(input)?;
            Ok(encoder.finish()?)
        }
        Compression::Zstd => zstd::bulk::compress(input, ZSTD_LEVEL),
    }
}

/// Kafka's default `compression.zstd.level`.
const ZSTD_LEVEL: i32 = 3;

/// Largest zstd window (as a power of two) a frame may ask the decoder for.
/// This is zstd's own default limit; it is set explicitly so that the bound on
/// the decoder's working memory is visible here.
const ZSTD_WINDOW_LOG_MAX: u32 = 27;

/// First growth step of [`read_capped`]'s output buffer.
const READ_STEP: usize = 32 * 1024;

/// gzip, LZ4 and zstd all need at least a header; Kafka's readers reject an
/// empty records section for them, so we do too.
fn require_non_empty(codec: Compression, input: &[u8]) -> Result<(), DecompressError> {
    if input.is_empty() {
        Err(DecompressError::corrupt_msg(
            codec,
            io::ErrorKind::UnexpectedEof,
            "empty input",
        ))
    } else {
        Ok(())
    }
}

/// Reads `reader` to its end, but never holds more than `limit + 1` bytes.
///
/// The buffer doubles as it fills, starting at [`READ_STEP`], and its length
/// and capacity are clamped to `limit + 1`. Once `limit + 1` bytes have been
/// produced the output is known to be too large and reading stops.
fn read_capped<R: Read>(
    codec: Compression,
    mut reader: R,
    limit: usize,
) -> Result<Vec<u8>, DecompressError> {
    let cap = limit.saturating_add(1);
    let mut out: Vec<u8> = Vec::new();
    let mut filled = 0usize;
    loop {
        if filled == out.len() {
            if filled >= cap {
                return Err(DecompressError::TooLarge { limit_bytes: limit });
            }
            let new_len = filled.saturating_add(filled.max(READ_STEP)).min(cap);
            out.reserve_exact(new_len - filled);
            out.resize(new_len, 0);
        }
        // `filled` never passes `out.len()`, and the room after it is never empty here.
        let room = out.get_mut(filled..).unwrap_or_default();
        match reader.read(room) {
            Ok(0) => break,
            // A well-behaved reader never reports more than it was given room for;
            // `min` keeps us in bounds even if one does.
            Ok(n) => filled = filled.saturating_add(n).min(out.len()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(DecompressError::corrupt(codec, e)),
        }
    }
    out.truncate(filled);
    if filled > limit {
        return Err(DecompressError::TooLarge { limit_bytes: limit });
    }
    Ok(out)
}

/// snappy-java's `SnappyOutputStream` stream format.
mod snappy {
    use super::{Compression, DecompressError};
    use std::io;

    /// The 8 magic bytes that open a `SnappyOutputStream` stream.
    pub(super) const MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
    /// Magic, then the format version and the minimum compatible version.
    pub(super) const HEADER_LEN: usize = 16;
    /// Version fields written by current snappy-java (and by us).
    const VERSION: i32 = 1;
    /// snappy-java refuses streams whose version field is below this.
    const MIN_SUPPORTED_VERSION: i32 = 1;
    /// snappy-java's default block size: each chunk holds at most this much uncompressed data.
    pub(super) const BLOCK_SIZE: usize = 32 * 1024;

    /// No raw Snappy block decompresses to more than this many times its size: the densest
    /// element, a 3-byte copy with a 2-byte offset, writes at most 64 bytes.
    const BLOCK_EXPANSION_MAX: usize = 22;

    const CODEC: Compression = Compression::Snappy;

    fn corrupt(kind: io::ErrorKind, msg: &'static str) -> DecompressError {
        DecompressError::corrupt_msg(CODEC, kind, msg)
    }

    fn raw_error(e: snap::Error) -> DecompressError {
        DecompressError::corrupt(CODEC, io::Error::new(io::ErrorKind::InvalidData, e))
    }

    fn read_i32(bytes: &[u8], at: usize) -> Option<i32> {
        let word = bytes.get(at..)?.first_chunk::<4>()?;
        Some(i32::from_be_bytes(*word))
    }

    /// Checks a 16-byte stream header starting at `at` (the magic is already known to match).
    fn check_header(input: &[u8], at: usize) -> Result<(), DecompressError> {
        let version = read_i32(input, at + 8);
        let compatible = read_i32(input, at + 12);
        match (version, compatible) {
            (Some(v), Some(_)) if v >= MIN_SUPPORTED_VERSION => Ok(()),
            (Some(_), Some(_)) => Err(corrupt(
                io::ErrorKind::InvalidData,
                "unsupported snappy-java stream version",
            )),
            _ => Err(corrupt(
                io::ErrorKind::UnexpectedEof,
                "truncated snappy-java stream header",
            )),
        }
    }

    /// Appends the raw Snappy block `block` to `out`, refusing to grow `out` past `limit`.
    fn decompress_block(
        decoder: &mut snap::raw::Decoder,
        block: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<(), DecompressError> {
        let len = snap::raw::decompress_len(block).map_err(raw_error)?;
        if len > limit.saturating_sub(out.len()) {
            return Err(DecompressError::TooLarge { limit_bytes: limit });
        }
        if len > block.len().saturating_mul(BLOCK_EXPANSION_MAX) {
            // Refused before reserving: a 3-byte block must not make us zero megabytes.
            return Err(corrupt(
                io::ErrorKind::InvalidData,
                "snappy block declares more bytes than it can hold",
            ));
        }
        let start = out.len();
        let needed = start + len; // <= limit, checked above
        if needed > out.capacity() {
            // Grow geometrically, as `Vec` would, but never past `limit`.
            let target = needed.max(start.saturating_mul(2)).min(limit);
            out.reserve_exact(target - start);
        }
        out.resize(needed, 0);
        let written = decoder
            .decompress(block, out.get_mut(start..).unwrap_or_default())
            .map_err(raw_error)?;
        if written != len {
            return Err(corrupt(
                io::ErrorKind::InvalidData,
                "snappy block shorter than its declared length",
            ));
        }
        Ok(())
    }

    pub(super) fn decompress(input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
        let mut decoder = snap::raw::Decoder::new();
        let mut out = Vec::new();
        // Mirrors SnappyInputStream: no input is an empty stream, and anything that
        // is not at least a full header starting with the magic is one raw block.
        if input.is_empty() {
            return Ok(out);
        }
        if input.len() < HEADER_LEN || !input.starts_with(&MAGIC) {
            decompress_block(&mut decoder, input, &mut out, limit)?;
            return Ok(out);
        }
        check_header(input, 0)?;
        let mut pos = HEADER_LEN;
        while pos < input.len() {
            // A second stream header here means two streams were concatenated.
            if input
                .get(pos..)
                .is_some_and(|rest| rest.starts_with(&MAGIC))
            {
                check_header(input, pos)?;
                pos += HEADER_LEN;
                continue;
            }
            let Some(declared) = read_i32(input, pos) else {
                return Err(corrupt(
                    io::ErrorKind::UnexpectedEof,
                    "truncated snappy chunk length",
                ));
            };
            pos += 4;
            let len = usize::try_from(declared)
                .map_err(|_| corrupt(io::ErrorKind::InvalidData, "negative snappy chunk length"))?;
            let Some(block) = pos.checked_add(len).and_then(|end| input.get(pos..end)) else {
                return Err(corrupt(
                    io::ErrorKind::UnexpectedEof,
                    "snappy chunk extends past the end of the input",
                ));
            };
            pos += len;
            decompress_block(&mut decoder, block, &mut out, limit)?;
        }
        Ok(out)
    }

    pub(super) fn compress(input: &[u8]) -> io::Result<Vec<u8>> {
        let chunk_bound = snap::raw::max_compress_len(BLOCK_SIZE);
        let chunks = input.len().div_ceil(BLOCK_SIZE);
        let mut out = Vec::with_capacity(HEADER_LEN + input.len() / 2 + chunks * 4 + 16);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&MIN_SUPPORTED_VERSION.to_be_bytes());

        let mut encoder = snap::raw::Encoder::new();
        let mut scratch = vec![0u8; chunk_bound];
        for chunk in input.chunks(BLOCK_SIZE) {
            let n = encoder.compress(chunk, &mut scratch)?;
            let len = i32::try_from(n).map_err(io::Error::other)?;
            out.extend_from_slice(&len.to_be_bytes());
            let compressed = scratch
                .get(..n)
                .ok_or_else(|| io::Error::other("snappy reported more bytes than it wrote"))?;
            out.extend_from_slice(compressed);
        }
        Ok(out)
    }
}

/// Structural checks on LZ4 frames, done before decoding.
///
/// lz4_flex's `FrameDecoder` treats running out of input where the next block
/// header should be as a clean end of stream, so a frame that lost its tail
/// exactly at a block boundary would decode to a prefix without complaint.
/// Walking the block lengths first (cheap: no data is decompressed) rejects
/// that, and anything that is not a sequence of complete standard frames.
mod lz4 {
    use std::io;

    pub(super) const FRAME_MAGIC: u32 = 0x184D_2204;
    const FLG_BLOCK_CHECKSUM: u8 = 0x10;
    const FLG_CONTENT_SIZE: u8 = 0x08;
    const FLG_CONTENT_CHECKSUM: u8 = 0x04;
    const FLG_DICT_ID: u8 = 0x01;
    const UNCOMPRESSED_BIT: u32 = 0x8000_0000;

    fn truncated() -> io::Error {
        io::Error::new(io::ErrorKind::UnexpectedEof, "truncated lz4 frame")
    }

    fn u32_at(input: &[u8], at: usize) -> io::Result<u32> {
        let word = input
            .get(at..)
            .and_then(<[u8]>::first_chunk::<4>)
            .ok_or_else(truncated)?;
        Ok(u32::from_le_bytes(*word))
    }

    fn skip(input: &[u8], pos: usize, n: usize) -> io::Result<usize> {
        match pos.checked_add(n) {
            Some(end) if end <= input.len() => Ok(end),
            _ => Err(truncated()),
        }
    }

    /// Returns `Ok(())` if `input` is one or more complete LZ4 frames and nothing else.
    /// Header checksums, block sizes and the block contents are left to the decoder.
    pub(super) fn check_frames(input: &[u8]) -> io::Result<()> {
        if input.is_empty() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "empty input"));
        }
        let mut pos = 0;
        while pos < input.len() {
            if u32_at(input, pos)? != FRAME_MAGIC {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "missing lz4 frame magic",
                ));
            }
            pos += 4;
            let flg = *input.get(pos).ok_or_else(truncated)?;
            // FLG, BD, then the optional fields, then the header checksum byte.
            let mut descriptor_len = 3;
            if flg & FLG_CONTENT_SIZE != 0 {
                descriptor_len += 8;
            }
            if flg & FLG_DICT_ID != 0 {
                descriptor_len += 4;
            }
            pos = skip(input, pos, descriptor_len)?;
            loop {
                let word = u32_at(input, pos)?;
                pos += 4;
                if word == 0 {
                    if flg & FLG_CONTENT_CHECKSUM != 0 {
                        pos = skip(input, pos, 4)?;
                    }
                    break;
                }
                // `usize` is at least 32 bits on every target Rust's std supports.
                let mut len = usize::try_from(word & !UNCOMPRESSED_BIT)
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "lz4 block too big"))?;
                if flg & FLG_BLOCK_CHECKSUM != 0 {
                    len += 4;
                }
                pos = skip(input, pos, len)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::indexing_slicing,
        reason = "test code: an index out of range fails the test"
    )]

    use super::*;
    use std::error::Error as _;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    const COMPRESSED: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    const MIB: usize = 1024 * 1024;

    /// Deterministic pseudo-random bytes (xorshift64*), incompressible in practice.
    fn pseudo_random(len: usize, mut seed: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let word = seed.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            let take = word.len().min(len - out.len());
            out.extend_from_slice(&word[..take]);
        }
        out
    }

    fn repetitive(len: usize) -> Vec<u8> {
        b"key=partition-0042 value=hello kafka record batch; "
            .iter()
            .copied()
            .cycle()
            .take(len)
            .collect()
    }

    /// Text-like data with some structure, so every codec finds both matches and literals.
    fn mixed(len: usize) -> Vec<u8> {
        let noise = pseudo_random(len, 7);
        repetitive(len)
            .into_iter()
            .zip(noise)
            .enumerate()
            .map(|(i, (r, n))| if i % 11 == 0 { n } else { r })
            .collect()
    }

    fn payloads() -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("empty", Vec::new()),
            ("one byte", vec![0x5a]),
            ("100 KiB repetitive", repetitive(100 * 1024)),
            (
                "100 KiB pseudo-random",
                pseudo_random(100 * 1024, 0x9e37_79b9_7f4a_7c15),
            ),
        ]
    }

    #[test]
    fn attribute_bits_round_trip_and_match_kafka_ids() -> TestResult {
        for (bits, codec) in ALL.iter().enumerate() {
            let bits = u8::try_from(bits)?;
            assert_eq!(codec.attribute_bits(), bits);
            assert_eq!(Compression::from_attribute_bits(bits)?, *codec);
        }
        for bits in 5u8..=7 {
            assert!(matches!(
                Compression::from_attribute_bits(bits),
                Err(DecompressError::UnknownCodec(b)) if b == bits
            ));
        }
        // Higher attribute bits (timestamp type, transactional, ...) are ignored.
        assert_eq!(
            Compression::from_attribute_bits(0b0011_0100)?,
            Compression::Zstd
        );
        Ok(())
    }

    #[test]
    fn names_parse_back_and_unknown_names_are_rejected() -> TestResult {
        let names = ["none", "gzip", "snappy", "lz4", "zstd"];
        for (codec, name) in ALL.iter().zip(names) {
            assert_eq!(codec.name(), name);
            assert_eq!(codec.to_string(), name);
            assert_eq!(name.parse::<Compression>()?, *codec);
        }
        for bad in ["", "GZIP", "lzo", "producer", "zstd "] {
            assert!(matches!(
                bad.parse::<Compression>(),
                Err(DecompressError::UnknownCodecName(ref s)) if s == bad
            ));
        }
        Ok(())
    }

    #[test]
    fn every_codec_round_trips_every_payload() -> TestResult {
        for codec in ALL {
            for (label, payload) in payloads() {
                let compressed = compress(codec, &payload)?;
                let back = decompress(codec, &compressed, payload.len())
                    .map_err(|e| format!("{codec} / {label}: {e}"))?;
                assert_eq!(back.as_ref(), payload.as_slice(), "{codec} / {label}");
            }
        }
        Ok(())
    }

    #[test]
    fn repetitive_data_actually_shrinks() -> TestResult {
        let payload = repetitive(100 * 1024);
        for codec in COMPRESSED {
            let compressed = compress(codec, &payload)?;
            assert!(
                compressed.len() < payload.len() / 4,
                "{codec}: {} bytes",
                compressed.len()
            );
        }
        Ok(())
    }

    #[test]
    fn output_of_exactly_the_limit_is_accepted_and_one_more_byte_is_not() -> TestResult {
        let payload = mixed(5000);
        for codec in ALL {
            let compressed = compress(codec, &payload)?;
            assert_eq!(
                decompress(codec, &compressed, payload.len())?.len(),
                payload.len()
            );
            assert!(
                matches!(
                    decompress(codec, &compressed, payload.len() - 1),
                    Err(DecompressError::TooLarge { limit_bytes }) if limit_bytes == payload.len() - 1
                ),
                "{codec}"
            );
        }
        Ok(())
    }

    #[test]
    fn compressed_output_starts_with_each_formats_magic() -> TestResult {
        let payload = mixed(1000);
        let expect: [(Compression, &[u8]); 4] = [
            (Compression::Gzip, &[0x1f, 0x8b]),
            (Compression::Snappy, &snappy::MAGIC),
            (Compression::Lz4, &[0x04, 0x22, 0x4d, 0x18]),
            (Compression::Zstd, &[0x28, 0xb5, 0x2f, 0xfd]),
        ];
        for (codec, magic) in expect {
            for input in [&payload[..], &[]] {
                let compressed = compress(codec, input)?;
                assert!(compressed.starts_with(magic), "{codec}: {compressed:02x?}");
            }
        }
        assert_eq!(lz4::FRAME_MAGIC.to_le_bytes(), [0x04, 0x22, 0x4d, 0x18]);
        Ok(())
    }

    #[test]
    fn snappy_output_has_xerial_header_and_32_kib_chunks() -> TestResult {
        let payload = mixed(100 * 1024);
        let compressed = compress(Compression::Snappy, &payload)?;
        assert_eq!(&compressed[..8], &snappy::MAGIC);
        assert_eq!(&compressed[8..12], &1i32.to_be_bytes(), "version");
        assert_eq!(
            &compressed[12..16],
            &1i32.to_be_bytes(),
            "min compatible version"
        );

        // Walk the chunks and check each decodes on its own to (at most) 32 KiB.
        let mut pos = snappy::HEADER_LEN;
        let mut sizes = Vec::new();
        while pos < compressed.len() {
            let len = u32::from_be_bytes(compressed[pos..pos + 4].try_into()?);
            let len = usize::try_from(len)?;
            pos += 4;
            let block = &compressed[pos..pos + len];
            sizes.push(snap::raw::decompress_len(block)?);
            pos += len;
        }
        assert_eq!(pos, compressed.len());
        assert_eq!(sizes, vec![32 * 1024, 32 * 1024, 32 * 1024, 4 * 1024]);
        Ok(())
    }

    #[test]
    fn hand_built_xerial_snappy_stream_decodes() -> TestResult {
        let first = b"first chunk of the records section ".repeat(20);
        let second = pseudo_random(3000, 99);
        let mut encoder = snap::raw::Encoder::new();

        let mut stream = Vec::new();
        stream.extend_from_slice(&[0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0x00]);
        stream.extend_from_slice(&1i32.to_be_bytes()); // version
        stream.extend_from_slice(&1i32.to_be_bytes()); // minimum compatible version
        for chunk in [&first[..], &second[..]] {
            let raw = encoder.compress_vec(chunk)?;
            stream.extend_from_slice(&i32::try_from(raw.len())?.to_be_bytes());
            stream.extend_from_slice(&raw);
        }

        let out = decompress(Compression::Snappy, &stream, MIB)?;
        assert_eq!(out.as_ref(), [first, second].concat().as_slice());
        Ok(())
    }

    #[test]
    fn headerless_raw_snappy_block_decodes() -> TestResult {
        let payload = mixed(10_000);
        let raw = snap::raw::Encoder::new().compress_vec(&payload)?;
        assert!(!raw.starts_with(&snappy::MAGIC));
        let out = decompress(Compression::Snappy, &raw, MIB)?;
        assert_eq!(out.as_ref(), payload.as_slice());
        Ok(())
    }

    #[test]
    fn concatenated_xerial_snappy_streams_decode() -> TestResult {
        let a = mixed(40_000);
        let b = pseudo_random(5_000, 3);
        let stream = [
            compress(Compression::Snappy, &a)?,
            compress(Compression::Snappy, &b)?,
        ]
        .concat();
        let out = decompress(Compression::Snappy, &stream, MIB)?;
        assert_eq!(out.as_ref(), [a, b].concat().as_slice());
        Ok(())
    }

    #[test]
    fn snappy_header_with_version_zero_is_rejected() -> TestResult {
        let mut stream = compress(Compression::Snappy, b"hello hello hello")?;
        stream[8..12].copy_from_slice(&0i32.to_be_bytes());
        assert!(matches!(
            decompress(Compression::Snappy, &stream, MIB),
            Err(DecompressError::Corrupt {
                codec: Compression::Snappy,
                ..
            })
        ));
        Ok(())
    }

    #[test]
    fn snappy_negative_or_overlong_chunk_length_is_rejected() -> TestResult {
        let good = compress(Compression::Snappy, &mixed(1000))?;
        for bad_len in [-1i32, i32::MIN + 1, i32::MAX] {
            let mut stream = good.clone();
            stream[16..20].copy_from_slice(&bad_len.to_be_bytes());
            assert!(
                matches!(
                    decompress(Compression::Snappy, &stream, MIB),
                    Err(DecompressError::Corrupt { .. })
                ),
                "length {bad_len}"
            );
        }
        Ok(())
    }

    #[test]
    fn lz4_frame_descriptor_matches_kafkas_writer() -> TestResult {
        let compressed = compress(Compression::Lz4, &mixed(200_000))?;
        // FLG: version 01, independent blocks, no block checksum, no content
        // size, no content checksum, no dictionary.
        assert_eq!(compressed[4], 0b0110_0000);
        // BD: maximum block size code 4 = 64 KiB.
        assert_eq!(compressed[5], 0b0100_0000);
        // The header checksum is the second byte of xxh32(FLG..BD, seed 0);
        // lz4_flex verifies it, so flipping it must make decoding fail.
        let mut bad_hc = compressed.clone();
        bad_hc[6] ^= 0x01;
        assert!(decompress(Compression::Lz4, &bad_hc, MIB).is_err());
        // Ends with the end mark and nothing after it (no content checksum).
        assert!(compressed.ends_with(&[0, 0, 0, 0]));
        Ok(())
    }

    #[test]
    fn decompression_bombs_hit_the_limit() -> TestResult {
        let zeros = vec![0u8; 64 * MIB];
        for codec in COMPRESSED {
            let bomb = compress(codec, &zeros)?;
            assert!(bomb.len() < 4 * MIB, "{codec}: {} bytes", bomb.len());
            let result = decompress(codec, &bomb, MIB);
            assert!(
                matches!(result, Err(DecompressError::TooLarge { limit_bytes: MIB })),
                "{codec}: {result:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn uncompressed_input_over_the_limit_is_too_large() {
        assert!(matches!(
            decompress(Compression::None, &[0u8; 11], 10),
            Err(DecompressError::TooLarge { limit_bytes: 10 })
        ));
    }

    #[test]
    fn snappy_block_claiming_4_gib_is_refused_before_decoding() {
        // A raw block whose varint length prefix claims 0xFFFF_FFFF bytes, followed by junk.
        let raw = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x01, 0x02];
        assert!(matches!(
            decompress(Compression::Snappy, &raw, MIB),
            Err(DecompressError::TooLarge { limit_bytes: MIB })
        ));
    }

    #[test]
    fn capped_reader_never_grows_past_limit_plus_one() -> TestResult {
        // An endless stream must stop at limit + 1 bytes.
        let endless = io::repeat(0xab);
        assert!(matches!(
            read_capped(Compression::None, endless, 100_000),
            Err(DecompressError::TooLarge {
                limit_bytes: 100_000
            })
        ));
        // A stream of exactly `limit` bytes fits, in a buffer of at most limit + 1.
        for limit in [0, 1, READ_STEP - 1, READ_STEP, 3 * READ_STEP + 5] {
            let data = vec![7u8; limit];
            let out = read_capped(Compression::None, &data[..], limit)?;
            assert_eq!(out, data);
            assert!(
                out.capacity() <= limit + 1,
                "limit {limit}: {}",
                out.capacity()
            );
        }
        Ok(())
    }

    #[test]
    fn snappy_output_buffer_never_grows_past_the_limit() -> TestResult {
        for len in [40_000, 100 * 1024, 100 * 1024 + 1] {
            let payload = mixed(len);
            let compressed = compress(Compression::Snappy, &payload)?;
            let out = snappy::decompress(&compressed, len)?;
            assert_eq!(out, payload);
            assert!(out.capacity() <= len, "len {len}: {}", out.capacity());
        }
        Ok(())
    }

    #[test]
    fn empty_input_is_corrupt_except_for_none_and_snappy() -> TestResult {
        for codec in [Compression::Gzip, Compression::Lz4, Compression::Zstd] {
            assert!(
                matches!(
                    decompress(codec, &[], MIB),
                    Err(DecompressError::Corrupt { codec: c, .. }) if c == codec
                ),
                "{codec}"
            );
        }
        // Empty is a valid (empty) passthrough, and SnappyInputStream reads an
        // empty input as an empty stream.
        assert!(decompress(Compression::None, &[], MIB)?.is_empty());
        assert!(decompress(Compression::Snappy, &[], MIB)?.is_empty());
        Ok(())
    }

    #[test]
    fn every_strict_prefix_is_rejected_for_gzip_lz4_and_zstd() -> TestResult {
        let payload = mixed(6000);
        for codec in [Compression::Gzip, Compression::Lz4, Compression::Zstd] {
            let compressed = compress(codec, &payload)?;
            for cut in 0..compressed.len() {
                let result = decompress(codec, &compressed[..cut], MIB);
                assert!(
                    matches!(result, Err(DecompressError::Corrupt { .. })),
                    "{codec} cut at {cut} of {}: {result:?}",
                    compressed.len()
                );
            }
        }
        Ok(())
    }

    #[test]
    fn lz4_frame_missing_its_end_mark_is_rejected() -> TestResult {
        // Two full 64 KiB blocks; drop the end mark, and also drop the whole last block.
        let compressed = compress(Compression::Lz4, &mixed(128 * 1024))?;
        let without_end_mark = &compressed[..compressed.len() - 4];
        assert!(decompress(Compression::Lz4, without_end_mark, MIB).is_err());
        let first_block_len = u32::from_le_bytes(compressed[7..11].try_into()?) & 0x7fff_ffff;
        let first_block_end = 11 + usize::try_from(first_block_len)?;
        assert!(first_block_end < without_end_mark.len());
        assert!(decompress(Compression::Lz4, &compressed[..first_block_end], MIB).is_err());
        Ok(())
    }

    #[test]
    fn trailing_garbage_is_rejected() -> TestResult {
        let payload = mixed(3000);
        for codec in [Compression::Gzip, Compression::Lz4, Compression::Zstd] {
            let mut compressed = compress(codec, &payload)?;
            compressed.extend_from_slice(b"garbage!");
            assert!(decompress(codec, &compressed, MIB).is_err(), "{codec}");
        }
        // For snappy, 1-3 stray bytes cannot be a chunk length.
        let mut compressed = compress(Compression::Snappy, &payload)?;
        compressed.extend_from_slice(&[0, 0]);
        assert!(decompress(Compression::Snappy, &compressed, MIB).is_err());
        Ok(())
    }

    #[test]
    fn snappy_truncated_inside_the_header_or_a_chunk_is_rejected() -> TestResult {
        let payload = mixed(100 * 1024);
        let compressed = compress(Compression::Snappy, &payload)?;
        // Chunk boundaries: where a chunk length starts, and the end of the input.
        let mut boundaries = vec![snappy::HEADER_LEN];
        let mut pos = snappy::HEADER_LEN;
        while pos < compressed.len() {
            let len = u32::from_be_bytes(compressed[pos..pos + 4].try_into()?);
            pos += 4 + usize::try_from(len)?;
            boundaries.push(pos);
        }
        // Every cut inside the header and the first chunk's length and start,
        // every cut within 8 bytes of a chunk boundary, and every 61st byte
        // (all cuts would make this test slow without adding coverage).
        let mut cuts: Vec<usize> = (1..=40).collect();
        for &b in &boundaries {
            cuts.extend(b.saturating_sub(8)..b + 8);
        }
        cuts.extend((1..compressed.len()).step_by(61));
        cuts.retain(|c| *c < compressed.len() && !boundaries.contains(c));
        cuts.sort_unstable();
        cuts.dedup();
        for cut in cuts {
            let result = decompress(Compression::Snappy, &compressed[..cut], MIB);
            assert!(
                result.is_err(),
                "cut at {cut}: decoded {:?} bytes",
                result.map(|b| b.len())
            );
        }
        Ok(())
    }

    #[test]
    fn snappy_truncated_at_a_chunk_boundary_yields_a_prefix() -> TestResult {
        // The xerial framing has no end marker or checksum: this documents the
        // limitation (the batch CRC-32C is what detects such damage).
        let payload = mixed(100 * 1024);
        let compressed = compress(Compression::Snappy, &payload)?;
        let first_len = u32::from_be_bytes(compressed[16..20].try_into()?);
        let cut = 20 + usize::try_from(first_len)?;
        let out = decompress(Compression::Snappy, &compressed[..cut], MIB)?;
        assert_eq!(out.as_ref(), &payload[..snappy::BLOCK_SIZE]);
        Ok(())
    }

    #[test]
    fn gzip_trailer_corruption_is_detected() -> TestResult {
        // The last 8 bytes are the CRC-32 and length of the data: any flip there must fail.
        let compressed = compress(Compression::Gzip, &mixed(4000))?;
        let n = compressed.len();
        for byte in n - 8..n {
            for bit in 0..8 {
                let mut bad = compressed.clone();
                bad[byte] ^= 1 << bit;
                let result = decompress(Compression::Gzip, &bad, MIB);
                assert!(
                    matches!(result, Err(DecompressError::Corrupt { .. })),
                    "byte {byte} bit {bit}"
                );
            }
        }
        Ok(())
    }

    #[test]
    fn single_bit_flips_never_panic_or_exceed_the_limit() -> TestResult {
        // gzip's CRC catches nearly all of these, but snappy, lz4 (as Kafka
        // writes it, without checksums) and zstd (likewise) have no checksum, so
        // a flip may decode to different bytes: the only promise is no panic and
        // no output beyond the limit.
        let payload = mixed(1500);
        let limit = 4096;
        for codec in COMPRESSED {
            let compressed = compress(codec, &payload)?;
            let mut rejected = 0usize;
            for byte in 0..compressed.len() {
                for bit in 0..8 {
                    let mut bad = compressed.clone();
                    bad[byte] ^= 1 << bit;
                    match decompress(codec, &bad, limit) {
                        Ok(out) => assert!(out.len() <= limit),
                        Err(DecompressError::Corrupt { codec: c, source }) => {
                            assert_eq!(c, codec);
                            assert!(!source.to_string().is_empty());
                            rejected += 1;
                        }
                        Err(DecompressError::TooLarge { limit_bytes }) => {
                            assert_eq!(limit_bytes, limit);
                            rejected += 1;
                        }
                        Err(other) => return Err(format!("{codec}: unexpected {other}").into()),
                    }
                }
            }
            assert!(rejected > 0, "{codec}: no flip was rejected");
        }
        Ok(())
    }

    #[test]
    fn corrupt_error_names_the_codec_and_exposes_the_cause() {
        let err = decompress(Compression::Zstd, b"definitely not zstd", MIB);
        let Err(err) = err else {
            panic!("garbage decoded as zstd");
        };
        assert!(err.to_string().contains("zstd"), "{err}");
        assert!(err.source().is_some());
    }
}
