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
        let at = reader.position();
        let length = Record::length(reader)?;
        let body_start = reader.position();
        let record = Record::decode_body(reader, buffer)?;
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

    /// Reads one record's offset delta and moves `reader` past the record, decoding nothing
    /// else (its key, value and headers are skipped by its length prefix).
    pub(crate) fn skip(reader: &mut Reader<'_>) -> Result<i32, DecodeError> {
        let length = Record::length(reader)?;
        let mut body = Reader::new(reader.take(length)?);
        body.i8()?;
        body.varlong()?;
        body.varint()
    }

    /// The record's length prefix, checked against the bytes left.
    fn length(reader: &mut Reader<'_>) -> Result<usize, DecodeError> {
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

    fn decode_body(reader: &mut Reader<'_>, buffer: &Bytes) -> Result<Record, DecodeError> {
        let attributes = reader.i8()?;
        let timestamp_delta = reader.varlong()?;
        let offset_delta = reader.varint()?;
        let key = nullable_bytes(reader, buffer, "key")?;
        let value = nullable_bytes(reader, buffer, "value")?;
        let headers = decode_headers(reader, buffer)?;
        Ok(Record {
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers,
        })
    }
}

fn nullable_bytes(
    reader: &mut Reader<'_>,
    buffer: &Bytes,
    field: &'static str,
) -> Result<Option<Bytes>, DecodeError> {
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
    let start = reader.position();
    reader.take(length)?;
    Ok(Some(buffer.slice(start..start + length)))
}

fn decode_headers(
    reader: &mut Reader<'_>,
    buffer: &Bytes,
) -> Result<Vec<RecordHeader>, DecodeError> {
    let at = reader.position();
    let count = reader.varint()?;
    // Each header takes at least two bytes, which bounds the allocation by the input's size.
    let count = usize::try_from(count)
        .ok()
        .filter(|count| *count <= reader.remaining() / 2)
        .ok_or(DecodeError::Length {
            field: "headers count",
            length: i64::from(count),
            at,
        })?;
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let key_at = reader.position();
        let key = nullable_bytes(reader, buffer, "header key")?.ok_or(DecodeError::Length {
            field: "header key",
            length: -1,
            at: key_at,
        })?;
        let key = String::from_utf8(key.to_vec())
            .map_err(|_| DecodeError::HeaderKeyNotUtf8 { at: key_at })?;
        let value = nullable_bytes(reader, buffer, "header value")?;
        headers.push(RecordHeader { key, value });
    }
    Ok(headers)
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
