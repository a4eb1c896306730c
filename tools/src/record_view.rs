//! A decoded record as a consumer sees it: absolute offset, effective timestamp, and key, value
//! and headers as (lossy) UTF-8 text; printed as a text line or a JSON object.

use std::borrow::Cow;
use std::fmt::Write as _;

use base64::Engine as _;
use bytes::Bytes;
use seglog::format::{BatchHeader, Record};
use serde::Serialize;

use crate::args::Encoding;

/// The record's absolute offset: the batch's base offset plus the record's offset delta.
pub fn record_offset(header: &BatchHeader, record: &Record) -> i64 {
    header
        .base_offset
        .saturating_add(i64::from(record.offset_delta))
}

/// The record's timestamp: the batch's max timestamp for `LogAppendTime` batches, else the batch's
/// base timestamp plus the record's delta (Kafka's `DefaultRecordBatch` rule).
pub fn record_timestamp(header: &BatchHeader, record: &Record) -> i64 {
    if header.attributes.is_log_append_time() {
        header.max_timestamp
    } else {
        header.base_timestamp.wrapping_add(record.timestamp_delta)
    }
}

/// Bytes as text, invalid UTF-8 replaced (what Kafka's `StringDecoder` prints).
pub fn lossy(bytes: &Bytes) -> Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

/// [`lossy`] for a terminal: control characters (escape sequences, carriage returns, ...)
/// written as `\xNN` or `\u{NNNN}`, and a backslash as `\\`, so no record can drive the
/// terminal and every printed byte is told apart.
pub fn printable(bytes: &Bytes) -> Cow<'_, str> {
    let text = lossy(bytes);
    if !text.chars().any(|c| c.is_control() || c == '\\') {
        return text;
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            c if c.is_control() && (c as u32) < 0x80 => {
                // Writing to a String cannot fail.
                let _ = write!(escaped, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(escaped, "\\u{{{:04x}}}", c as u32);
            }
            c => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

/// Bytes as `--encoding` asks for them in a JSON line.
pub fn encoded(bytes: &Bytes, encoding: Encoding) -> Cow<'_, str> {
    match encoding {
        Encoding::Utf8 => lossy(bytes),
        Encoding::Base64 => Cow::Owned(base64::engine::general_purpose::STANDARD.encode(bytes)),
        Encoding::Hex => {
            let mut hex = String::with_capacity(bytes.len() * 2);
            for byte in bytes.iter() {
                let _ = write!(hex, "{byte:02x}");
            }
            Cow::Owned(hex)
        }
    }
}

/// One header of a JSON record line.
#[derive(Debug, Serialize)]
struct JsonHeader<'a> {
    key: &'a str,
    value: Option<Cow<'a, str>>,
}

/// One JSON record line; field order is the documented output order.
#[derive(Debug, Serialize)]
struct JsonRecord<'a> {
    offset: i64,
    timestamp: i64,
    key: Option<Cow<'a, str>>,
    value: Option<Cow<'a, str>>,
    headers: Vec<JsonHeader<'a>>,
}

/// `{"offset":..,"timestamp":..,"key":..,"value":..,"headers":[{"key":..,"value":..}]}`.
pub fn json_line(
    header: &BatchHeader,
    record: &Record,
    encoding: Encoding,
) -> serde_json::Result<String> {
    let encode = |bytes| encoded(bytes, encoding);
    let headers = record
        .headers
        .iter()
        .map(|record_header| JsonHeader {
            key: &record_header.key,
            value: record_header.value.as_ref().map(encode),
        })
        .collect();
    serde_json::to_string(&JsonRecord {
        offset: record_offset(header, record),
        timestamp: record_timestamp(header, record),
        key: record.key.as_ref().map(encode),
        value: record.value.as_ref().map(encode),
        headers,
    })
}

/// `offset=5 timestamp=1700000000000 key=k value=v headers=[h1=x,h2=null]`; null prints as `null`.
pub fn text_line(header: &BatchHeader, record: &Record) -> String {
    let mut line = format!(
        "offset={} timestamp={} key={} value={} headers=[",
        record_offset(header, record),
        record_timestamp(header, record),
        nullable_text(record.key.as_ref()),
        nullable_text(record.value.as_ref()),
    );
    for (index, record_header) in record.headers.iter().enumerate() {
        let separator = if index == 0 { "" } else { "," };
        let value = nullable_text(record_header.value.as_ref());
        // Writing to a String cannot fail.
        let _ = write!(line, "{separator}{}={value}", record_header.key);
    }
    line.push(']');
    line
}

fn nullable_text(bytes: Option<&Bytes>) -> Cow<'_, str> {
    bytes.map_or(Cow::Borrowed("null"), printable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_control_characters_and_backslashes_only() {
        let plain = Bytes::from_static("plain é".as_bytes());
        assert!(matches!(printable(&plain), Cow::Borrowed("plain é")));
        let hostile = Bytes::from_static(b"a\x1b[2Jb\r\\c\x00\xc2\x85");
        assert_eq!(printable(&hostile), "a\\x1b[2Jb\\x0d\\\\c\\x00\\u{0085}");
    }

    #[test]
    fn encodings_write_every_byte() {
        let bytes = Bytes::from_static(b"\x00\xffA");
        assert_eq!(encoded(&bytes, Encoding::Hex), "00ff41");
        assert_eq!(encoded(&bytes, Encoding::Base64), "AP9B");
        assert_eq!(encoded(&bytes, Encoding::Utf8), "\u{0}\u{fffd}A");
    }
}
