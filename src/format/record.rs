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
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<RecordHeader>,
}

/// A record header: a UTF-8 key and a nullable value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    pub key: String,
    pub value: Option<Bytes>,
}

/// A record decoded in place: key, value and headers borrow the records section they were read
/// from, so decoding one allocates nothing (a consumer's scan; Kafka's streaming iterator). Every
/// field was checked when it was decoded, headers included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
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
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
}

impl Record {
    /// Decodes one record starting at `reader`'s position; `buffer` is the bytes the reader walks,
    /// so that key and value can be sliced from it without copying.
    pub(crate) fn decode(reader: &mut Reader<'_>, buffer: &Bytes) -> Result<Record, DecodeError> {
        RecordView::decode(reader).map(|view| view.to_record(buffer))
    }

    /// Reads one record's offset delta and moves `reader` past the record, decoding nothing
    /// else (its key, value and headers are skipped by its length prefix).
    pub(crate) fn skip(reader: &mut Reader<'_>) -> Result<i32, DecodeError> {
        let length = record_length(reader)?;
        let mut body = Reader::new(reader.take(length)?);
        body.i8()?;
        body.varlong()?;
        body.varint()
    }
}

impl<'a> RecordView<'a> {
    /// Decodes one record starting at `reader`'s position, checking that its fields fill exactly
    /// its length prefix.
    pub(crate) fn decode(reader: &mut Reader<'a>) -> Result<RecordView<'a>, DecodeError> {
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

    pub fn len(&self) -> usize {
        self.count
    }

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
