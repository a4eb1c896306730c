//! One record inside a RecordBatch v2 (FORMAT.md § Records; Kafka's `DefaultRecord`).
//!
//! Fields, in order: `length` varint (bytes after it), `attributes` int8, `timestampDelta` varlong,
//! `offsetDelta` varint, `keyLength` varint (-1 = null), key, `valueLength` varint (-1 = null),
//! value, `headersCount` varint, then per header `keyLength` varint, key (UTF-8, never null),
//! `valueLength` varint (-1 = null), value.

use bytes::Bytes;

use super::varint::{encode_varint, encode_varlong, varint_size, varlong_size};
use super::{DecodeError, Reader};

/// A decoded record. Key, value and header bytes share the batch's buffer: no copies.
/// `RecordView` is the same record borrowed in place, for readers that want no allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `attributes`: no bit is used yet; Kafka writes 0.
    pub attributes: i8,
    /// `timestampDelta`: the record's timestamp minus the batch's `baseTimestamp`, in ms.
    pub timestamp_delta: i64,
    /// `offsetDelta`: the record's offset minus the batch's `baseOffset`.
    pub offset_delta: i32,
    /// The key; `None` for a null key.
    pub key: Option<Bytes>,
    /// The value; `None` for a null value (a tombstone in a compacted topic).
    pub value: Option<Bytes>,
    /// The headers, in order.
    pub headers: Vec<RecordHeader>,
}

/// A record header: a UTF-8 key and a nullable value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    /// The header's key.
    pub key: String,
    /// The header's value; `None` for a null value.
    pub value: Option<Bytes>,
}

/// A record decoded in place: key, value and headers borrow the records section they were read
/// from, so decoding one allocates nothing (a consumer's scan; Kafka's streaming iterator). Every
/// field was checked when it was decoded, headers included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// `attributes`: no bit is used yet; Kafka writes 0.
    pub attributes: i8,
    /// `timestampDelta`: the record's timestamp minus the batch's `baseTimestamp`, in ms.
    pub timestamp_delta: i64,
    /// `offsetDelta`: the record's offset minus the batch's `baseOffset`.
    pub offset_delta: i32,
    /// The key; `None` for a null key.
    pub key: Option<&'a [u8]>,
    /// The value; `None` for a null value (a tombstone in a compacted topic).
    pub value: Option<&'a [u8]>,
    /// The headers, in place.
    pub headers: HeadersView<'a>,
}

/// A record's headers as they lie in the records section, checked when the record was decoded
/// (each key UTF-8, every length within the record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadersView<'a> {
    bytes: &'a [u8],
    count: usize,
}

/// A record to encode: what a producer supplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NewRecord<'a> {
    /// The record's timestamp (`CreateTime`), in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The key; `None` for a null key.
    pub key: Option<&'a [u8]>,
    /// The value; `None` for a null value (a tombstone in a compacted topic).
    pub value: Option<&'a [u8]>,
    /// The headers, in order: each a UTF-8 key and a nullable value.
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
}

impl Record {
    /// This record with its key, value and header values copied out of the buffer they share
    /// (the batch it was read from), so that holding it keeps only its own bytes alive.
    pub fn detached(self) -> Record {
        let copy = |part: Option<Bytes>| part.map(|part| Bytes::copy_from_slice(&part));
        Record {
            key: copy(self.key),
            value: copy(self.value),
            headers: self
                .headers
                .into_iter()
                .map(|header| RecordHeader {
                    key: header.key,
                    value: copy(header.value),
                })
                .collect(),
            ..self
        }
    }

    /// Decodes one record starting at `reader`'s position; `buffer` is the bytes the reader walks,
    /// so that key and value can be sliced from it without copying.
    pub(crate) fn decode(reader: &mut Reader<'_>, buffer: &Bytes) -> Result<Record, DecodeError> {
        RecordView::decode(reader).map(|view| view.to_record(buffer))
    }

    /// Reads one record's offset delta and moves `reader` past the record, decoding nothing
    /// else (its key, value and headers are skipped by its length prefix).
    pub(crate) fn skip(reader: &mut Reader<'_>) -> Result<i32, DecodeError> {
        match skip_short(reader) {
            Some(offset_delta) => Ok(offset_delta),
            None => skip_exact(reader),
        }
    }
}

/// `Record::skip` for every record: reads and checks the length prefix, timestamp and offset
/// delta with their reasons for failing.
fn skip_exact(reader: &mut Reader<'_>) -> Result<i32, DecodeError> {
    let length = record_length(reader)?;
    let mut body = Reader::new(reader.take(length)?);
    body.i8()?;
    body.varlong()?;
    body.varint()
}

impl<'a> RecordView<'a> {
    /// Decodes one record starting at `reader`'s position, checking that its fields fill exactly
    /// its length prefix.
    #[inline]
    pub(crate) fn decode(reader: &mut Reader<'a>) -> Result<RecordView<'a>, DecodeError> {
        match RecordView::decode_short(reader) {
            Some(view) => Ok(view),
            None => RecordView::decode_exact(reader),
        }
    }

    /// The common record, read without building errors: no headers and every varint at most
    /// four bytes (lengths below 128 MiB), all within its length prefix. `None`, with `reader`
    /// unmoved, for anything else, which `decode_exact` reads or rejects with its reason. What
    /// this accepts, `decode_exact` accepts with the same fields and end.
    #[inline]
    fn decode_short(reader: &mut Reader<'a>) -> Option<RecordView<'a>> {
        let bytes = reader.rest();
        let mut body_start = 0;
        let length = usize::try_from(short_varint(bytes, &mut body_start)?).ok()?;
        let body = bytes.get(body_start..body_start.checked_add(length)?)?;
        let attributes = i8::from_be_bytes([*body.first()?]);
        let mut at = 1;
        let timestamp_delta = i64::from(short_varint(body, &mut at)?);
        let offset_delta = short_varint(body, &mut at)?;
        let key = short_nullable(body, &mut at)?;
        let value = short_nullable(body, &mut at)?;
        let headers_count = short_varint(body, &mut at)?;
        if headers_count != 0 || at != length {
            return None;
        }
        reader.position += body_start + length;
        Some(RecordView {
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers: HeadersView {
                bytes: &[],
                count: 0,
            },
        })
    }

    #[cold]
    #[inline(never)]
    fn decode_exact(reader: &mut Reader<'a>) -> Result<RecordView<'a>, DecodeError> {
        let at = reader.position();
        let length = record_length(reader)?;
        let body_start = reader.position();
        let record = RecordView::decode_body(reader)?;
        let consumed = reader.position() - body_start;
        if consumed != length {
            return Err(DecodeError::RecordSize {
                at,
                declared: length,
                consumed,
            });
        }
        Ok(record)
    }

    fn decode_body(reader: &mut Reader<'a>) -> Result<RecordView<'a>, DecodeError> {
        let attributes = reader.i8()?;
        let timestamp_delta = reader.varlong()?;
        let offset_delta = reader.varint()?;
        let key = nullable_bytes(reader, "key")?;
        let value = nullable_bytes(reader, "value")?;
        let headers = HeadersView::decode(reader)?;
        Ok(RecordView {
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers,
        })
    }

    /// The owned record with its key, value and header values copied: it keeps nothing of the
    /// buffer this view was decoded from alive ([`RecordView::to_record`] against no buffer,
    /// which every part lies outside of).
    pub fn to_detached_record(&self) -> Record {
        self.to_record(&Bytes::new())
    }

    /// The owned record; key, value and header values are slices of `buffer`, the bytes this
    /// view was decoded from (copied only if the view does not lie inside it).
    pub fn to_record(&self, buffer: &Bytes) -> Record {
        let share = |part: Option<&[u8]>| part.map(|part| slice_of(buffer, part));
        Record {
            attributes: self.attributes,
            timestamp_delta: self.timestamp_delta,
            offset_delta: self.offset_delta,
            key: share(self.key),
            value: share(self.value),
            headers: self
                .headers
                .iter()
                .map(|(key, value)| RecordHeader {
                    key: key.to_owned(),
                    value: share(value),
                })
                .collect(),
        }
    }
}

/// `part` as a slice of `buffer` sharing its memory when it lies inside it, else a copy.
fn slice_of(buffer: &Bytes, part: &[u8]) -> Bytes {
    let start = (part.as_ptr() as usize).wrapping_sub(buffer.as_ptr() as usize);
    match start.checked_add(part.len()) {
        Some(end) if end <= buffer.len() => buffer.slice(start..end),
        _ => Bytes::copy_from_slice(part),
    }
}

impl<'a> HeadersView<'a> {
    /// Reads the headers count and walks every header, checking it, without copying.
    fn decode(reader: &mut Reader<'a>) -> Result<HeadersView<'a>, DecodeError> {
        let at = reader.position();
        let count = reader.varint()?;
        // Each header takes at least two bytes.
        let count = usize::try_from(count)
            .ok()
            .filter(|count| *count <= reader.remaining() / 2)
            .ok_or(DecodeError::Length {
                field: "headers count",
                length: i64::from(count),
                at,
            })?;
        let start = reader.position();
        for _ in 0..count {
            decode_header(reader)?;
        }
        let bytes = reader.consumed_since(start);
        Ok(HeadersView { bytes, count })
    }

    /// How many headers the record has.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the record has no header.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Each header's key and nullable value, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> + use<'a> {
        let mut reader = Reader::new(self.bytes);
        // Checked at decode: a header that fails here cannot occur, and ends the iteration.
        (0..self.count).map_while(move |_| decode_header(&mut reader).ok())
    }
}

/// One header: a non-null UTF-8 key and a nullable value.
fn decode_header<'a>(reader: &mut Reader<'a>) -> Result<(&'a str, Option<&'a [u8]>), DecodeError> {
    let at = reader.position();
    let key = nullable_bytes(reader, "header key")?.ok_or(DecodeError::Length {
        field: "header key",
        length: -1,
        at,
    })?;
    let key = std::str::from_utf8(key).map_err(|_| DecodeError::HeaderKeyNotUtf8 { at })?;
    let value = nullable_bytes(reader, "header value")?;
    Ok((key, value))
}

/// `Record::skip` for a record whose length, timestamp delta and offset delta take at most four
/// bytes each and lie within its length prefix; `None`, with `reader` unmoved, otherwise.
fn skip_short(reader: &mut Reader<'_>) -> Option<i32> {
    let bytes = reader.rest();
    let mut body_start = 0;
    let length = usize::try_from(short_varint(bytes, &mut body_start)?).ok()?;
    let body = bytes.get(body_start..body_start.checked_add(length)?)?;
    // The attributes byte, then the timestamp delta: skipped, but they must be there.
    body.first()?;
    let mut at = 1;
    short_varint(body, &mut at)?;
    let offset_delta = short_varint(body, &mut at)?;
    reader.position += body_start + length;
    Some(offset_delta)
}

/// A zig-zag varint of at most four bytes at `bytes[*at]`, moving `at` past it; `None` if it is
/// longer or cut short (the exact decoders handle both: a five-byte varint is valid).
#[inline(always)]
fn short_varint(bytes: &[u8], at: &mut usize) -> Option<i32> {
    let mut raw: u32 = 0;
    for index in 0..4 {
        let byte = *bytes.get(*at + index)?;
        raw |= u32::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            *at += index + 1;
            return Some(((raw >> 1) as i32) ^ -((raw & 1) as i32));
        }
    }
    None
}

/// A nullable byte string (varint length, -1 = null) within `bytes`, moving `at` past it; `None`
/// if its length is not short, is negative other than -1, or runs past `bytes`.
#[inline(always)]
fn short_nullable<'a>(bytes: &'a [u8], at: &mut usize) -> Option<Option<&'a [u8]>> {
    let length = short_varint(bytes, at)?;
    if length == -1 {
        return Some(None);
    }
    let length = usize::try_from(length).ok()?;
    let taken = bytes.get(*at..at.checked_add(length)?)?;
    *at += length;
    Some(Some(taken))
}

/// A record's length prefix, checked against the bytes left.
fn record_length(reader: &mut Reader<'_>) -> Result<usize, DecodeError> {
    let at = reader.position();
    let length = reader.varint()?;
    usize::try_from(length)
        .ok()
        .filter(|length| *length <= reader.remaining())
        .ok_or(DecodeError::Length {
            field: "record",
            length: i64::from(length),
            at,
        })
}

fn nullable_bytes<'a>(
    reader: &mut Reader<'a>,
    field: &'static str,
) -> Result<Option<&'a [u8]>, DecodeError> {
    let at = reader.position();
    let length = reader.varint()?;
    if length == -1 {
        return Ok(None);
    }
    let length = usize::try_from(length)
        .ok()
        .filter(|length| *length <= reader.remaining())
        .ok_or(DecodeError::Length {
            field,
            length: i64::from(length),
            at,
        })?;
    reader.take(length).map(Some)
}

impl NewRecord<'_> {
    /// Appends this record's bytes (length prefix included) to `out`.
    pub fn encode(&self, offset_delta: i32, timestamp_delta: i64, out: &mut Vec<u8>) {
        let body_size = self.body_size(offset_delta, timestamp_delta);
        encode_varint(body_size as i32, out);
        out.push(0); // attributes: unused
        encode_varlong(timestamp_delta, out);
        encode_varint(offset_delta, out);
        encode_nullable(self.key, out);
        encode_nullable(self.value, out);
        encode_varint(self.headers.len() as i32, out);
        for (key, value) in self.headers {
            encode_nullable(Some(key.as_bytes()), out);
            encode_nullable(*value, out);
        }
    }

    /// Bytes the record takes in a batch, length prefix included (`DefaultRecord.sizeInBytes`).
    pub fn size_bytes(&self, offset_delta: i32, timestamp_delta: i64) -> usize {
        let body_size = self.body_size(offset_delta, timestamp_delta);
        varint_size(body_size as i32) + body_size
    }

    fn body_size(&self, offset_delta: i32, timestamp_delta: i64) -> usize {
        let headers_size: usize = self
            .headers
            .iter()
            .map(|(key, value)| nullable_size(Some(key.as_bytes())) + nullable_size(*value))
            .sum();
        1 + varlong_size(timestamp_delta)
            + varint_size(offset_delta)
            + nullable_size(self.key)
            + nullable_size(self.value)
            + varint_size(self.headers.len() as i32)
            + headers_size
    }
}

fn encode_nullable(bytes: Option<&[u8]>, out: &mut Vec<u8>) {
    match bytes {
        None => encode_varint(-1, out),
        Some(bytes) => {
            encode_varint(bytes.len() as i32, out);
            out.extend_from_slice(bytes);
        }
    }
}

fn nullable_size(bytes: Option<&[u8]>) -> usize {
    match bytes {
        None => 1,
        Some(bytes) => varint_size(bytes.len() as i32) + bytes.len(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::indexing_slicing,
        reason = "test code: an index out of range fails the test"
    )]

    use super::*;

    #[test]
    fn record_round_trips_with_null_key_and_headers() {
        let headers = [("trace", Some(&b"abc"[..])), ("empty", None)];
        let record = NewRecord {
            timestamp_ms: 0,
            key: None,
            value: Some(b"hello"),
            headers: &headers,
        };
        let mut out = Vec::new();
        record.encode(3, -5, &mut out);
        assert_eq!(out.len(), record.size_bytes(3, -5));
        let buffer = Bytes::from(out);
        let mut reader = Reader::new(&buffer);
        let decoded = Record::decode(&mut reader, &buffer).unwrap();
        assert_eq!(reader.remaining(), 0);
        assert_eq!(decoded.offset_delta, 3);
        assert_eq!(decoded.timestamp_delta, -5);
        assert_eq!(decoded.key, None);
        assert_eq!(decoded.value.as_deref(), Some(&b"hello"[..]));
        assert_eq!(decoded.headers.len(), 2);
        assert_eq!(decoded.headers[0].key, "trace");
        assert_eq!(decoded.headers[1].value, None);
    }

    fn encoded(record: &NewRecord<'_>, offset_delta: i32, timestamp_delta: i64) -> Vec<u8> {
        let mut out = Vec::new();
        record.encode(offset_delta, timestamp_delta, &mut out);
        out
    }

    #[test]
    fn a_record_without_headers_is_read_the_short_way_and_one_with_headers_the_exact_way() {
        let plain = encoded(
            &NewRecord {
                value: Some(&[7; 300]),
                ..NewRecord::default()
            },
            99,
            12,
        );
        let mut reader = Reader::new(&plain);
        let view = RecordView::decode_short(&mut reader).unwrap();
        assert_eq!((view.offset_delta, view.timestamp_delta), (99, 12));
        assert_eq!(view.value, Some(&[7; 300][..]));
        assert_eq!(reader.remaining(), 0);

        let headers = [("h", None)];
        let with_headers = encoded(
            &NewRecord {
                headers: &headers,
                ..NewRecord::default()
            },
            0,
            0,
        );
        let mut reader = Reader::new(&with_headers);
        assert!(RecordView::decode_short(&mut reader).is_none());
        assert_eq!(reader.position(), 0);
        assert_eq!(RecordView::decode(&mut reader).unwrap().headers.len(), 1);
    }

    mod short_path {
        use proptest::prelude::*;

        use super::*;
        use crate::format::varint::decode_varint;

        /// A record's bytes, valid or damaged (its length prefix off by a little, one byte
        /// overwritten, the end cut), then a few bytes after it (the next record's). Deltas are
        /// mostly small, as in real batches.
        fn record_bytes() -> impl Strategy<Value = Vec<u8>> {
            let bytes = || proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300));
            let delta = || prop_oneof![-300_i64..300, any::<i32>().prop_map(i64::from)];
            let damage = (-2..4_i32, any::<usize>(), any::<u8>(), 0..3_usize);
            (
                (bytes(), bytes(), any::<bool>()),
                (delta(), prop_oneof![delta(), any::<i64>()]),
                proptest::option::of(damage),
                proptest::collection::vec(any::<u8>(), 0..4),
            )
                .prop_map(|((key, value, headers), deltas, damage, after)| {
                    let header = [("k", Some(&b"v"[..]))];
                    let record = NewRecord {
                        timestamp_ms: 0,
                        key: key.as_deref(),
                        value: value.as_deref(),
                        headers: if headers { &header } else { &[] },
                    };
                    let mut out = encoded(&record, deltas.0 as i32, deltas.1);
                    if let Some((length_off_by, at, byte, cut)) = damage {
                        let (length, length_bytes) = decode_varint(&out).unwrap();
                        let mut damaged = Vec::new();
                        encode_varint(length + length_off_by, &mut damaged);
                        damaged.extend_from_slice(&out[length_bytes..]);
                        out = damaged;
                        if byte % 2 == 0 {
                            let at = at % out.len();
                            out[at] = byte;
                        }
                        out.truncate(out.len() - cut);
                    }
                    out.extend(after);
                    out
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2_000))]

            /// The short path accepts only what the exact decoder accepts, with the same record
            /// and the same end; it leaves the reader where it was when it declines.
            #[test]
            fn agrees_with_the_exact_decoder(bytes in prop_oneof![
                record_bytes(),
                proptest::collection::vec(any::<u8>(), 0..40),
            ]) {
                let mut short_reader = Reader::new(&bytes);
                let mut exact_reader = Reader::new(&bytes);
                let exact = RecordView::decode_exact(&mut exact_reader);
                match RecordView::decode_short(&mut short_reader) {
                    Some(view) => {
                        prop_assert_eq!(exact.ok(), Some(view));
                        prop_assert_eq!(short_reader.position(), exact_reader.position());
                    }
                    None => prop_assert_eq!(short_reader.position(), 0),
                }

                let mut short_reader = Reader::new(&bytes);
                let mut exact_reader = Reader::new(&bytes);
                let exact = skip_exact(&mut exact_reader);
                match skip_short(&mut short_reader) {
                    Some(offset_delta) => {
                        prop_assert_eq!(exact.ok(), Some(offset_delta));
                        prop_assert_eq!(short_reader.position(), exact_reader.position());
                    }
                    None => prop_assert_eq!(short_reader.position(), 0),
                }
            }
        }
    }

    #[test]
    fn a_length_past_the_buffer_is_an_error() {
        let buffer = Bytes::from_static(&[0x7e, 0x00]);
        let mut reader = Reader::new(&buffer);
        assert!(matches!(
            Record::decode(&mut reader, &buffer),
            Err(DecodeError::Length {
                field: "record",
                ..
            })
        ));
    }
}
