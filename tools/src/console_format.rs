//! How `consume` prints a record: `--format text` (every field, `name=value`), `--format json`,
//! or by default as `kafka-console-consumer` does: the value alone, and before it what
//! `--property print.timestamp|print.partition|print.offset|print.headers|print.key=true` asks
//! for, in Kafka's order, each followed by `key.separator` (a tab by default); `print.value=false`
//! leaves the value out. A null key or value prints `null`; headers print as `k:v,k2:v2`, or
//! `NO_HEADERS`.

use std::borrow::Cow;

use anyhow::{Context, bail};
use bytes::Bytes;
use seglog::format::RecordHeader;

use crate::args::{ConsumeArgs, Encoding, OutputFormat};
use crate::record_view::printable;

/// What the console format prints, as `kafka-console-consumer`'s `--property` settings say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleFormat {
    print_timestamp: bool,
    print_partition: bool,
    print_offset: bool,
    print_headers: bool,
    print_key: bool,
    print_value: bool,
    key_separator: String,
}

impl Default for ConsoleFormat {
    fn default() -> ConsoleFormat {
        ConsoleFormat {
            print_timestamp: false,
            print_partition: false,
            print_offset: false,
            print_headers: false,
            print_key: false,
            print_value: true,
            key_separator: "\t".to_owned(),
        }
    }
}

impl ConsoleFormat {
    /// The format `KEY=VALUE` properties ask for; an unknown key or a value that is not
    /// `true`/`false` is refused.
    pub fn parse(properties: &[String]) -> anyhow::Result<ConsoleFormat> {
        let mut format = ConsoleFormat::default();
        for property in properties {
            let (key, value) = property
                .split_once('=')
                .with_context(|| format!("--property {property:?} is not KEY=VALUE"))?;
            if key == "key.separator" {
                format.key_separator = value.to_owned();
                continue;
            }
            let flag = match key {
                "print.timestamp" => &mut format.print_timestamp,
                "print.partition" => &mut format.print_partition,
                "print.offset" => &mut format.print_offset,
                "print.headers" => &mut format.print_headers,
                "print.key" => &mut format.print_key,
                "print.value" => &mut format.print_value,
                _ => bail!(
                    "unknown --property {key:?}: print.timestamp, print.partition, print.offset, \
                     print.headers, print.key, print.value or key.separator"
                ),
            };
            *flag = value
                .parse()
                .ok()
                .with_context(|| format!("--property {key} takes true or false, not {value:?}"))?;
        }
        Ok(format)
    }

    /// The line of `record`, without its line end: its columns joined by `key.separator`.
    pub fn line(&self, record: &ConsoleRecord<'_>) -> String {
        let kind = match record.log_append_time {
            true => "LogAppendTime",
            false => "CreateTime",
        };
        let mut columns = Vec::new();
        if self.print_timestamp {
            columns.push(format!("{kind}:{}", record.timestamp));
        }
        if self.print_partition {
            columns.push(format!("Partition:{}", record.partition));
        }
        if self.print_offset {
            columns.push(format!("Offset:{}", record.offset));
        }
        if self.print_headers {
            columns.push(headers_text(record.headers));
        }
        if self.print_key {
            columns.push(nullable(record.key).into_owned());
        }
        if self.print_value {
            columns.push(nullable(record.value).into_owned());
        }
        columns.join(&self.key_separator)
    }
}

/// The fields of a record the console format can print.
#[derive(Debug)]
pub struct ConsoleRecord<'a> {
    pub partition: u32,
    pub offset: i64,
    pub timestamp: i64,
    pub log_append_time: bool,
    pub key: Option<&'a Bytes>,
    pub value: Option<&'a Bytes>,
    pub headers: &'a [RecordHeader],
}

fn nullable(bytes: Option<&Bytes>) -> Cow<'_, str> {
    bytes.map_or(Cow::Borrowed("null"), printable)
}

fn headers_text(headers: &[RecordHeader]) -> String {
    if headers.is_empty() {
        return "NO_HEADERS".to_owned();
    }
    let pairs: Vec<String> = headers
        .iter()
        .map(|header| format!("{}:{}", header.key, nullable(header.value.as_ref())))
        .collect();
    pairs.join(",")
}

/// How `consume` prints its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordPrinter {
    /// `--format text`.
    Text,
    /// `--format json`, bytes as `--encoding` says.
    Json(Encoding),
    /// No `--format`: Kafka's console consumer's lines.
    Console(ConsoleFormat),
}

impl RecordPrinter {
    pub fn of(args: &ConsumeArgs) -> anyhow::Result<RecordPrinter> {
        if args.encoding != Encoding::Utf8 && args.format != Some(OutputFormat::Json) {
            bail!("--encoding applies to --format json");
        }
        match args.format {
            Some(OutputFormat::Text) => Ok(RecordPrinter::Text),
            Some(OutputFormat::Json) => Ok(RecordPrinter::Json(args.encoding)),
            None => ConsoleFormat::parse(&args.properties).map(RecordPrinter::Console),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(key: Option<&'a Bytes>, headers: &'a [RecordHeader]) -> ConsoleRecord<'a> {
        ConsoleRecord {
            partition: 2,
            offset: 41,
            timestamp: 1_000,
            log_append_time: false,
            key,
            value: None,
            headers,
        }
    }

    fn properties(words: &str) -> Vec<String> {
        words.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_default_prints_the_value_alone_and_properties_add_kafkas_columns() {
        let key = Bytes::from_static(b"k");
        let headers = [RecordHeader {
            key: "h".to_owned(),
            value: Some(Bytes::from_static(b"x")),
        }];
        let plain = ConsoleFormat::parse(&[]).unwrap();
        assert_eq!(plain.line(&record(Some(&key), &headers)), "null");
        let all = ConsoleFormat::parse(&properties(
            "print.timestamp=true print.partition=true print.offset=true print.headers=true \
             print.key=true key.separator=|",
        ))
        .unwrap();
        assert_eq!(
            all.line(&record(Some(&key), &headers)),
            "CreateTime:1000|Partition:2|Offset:41|h:x|k|null"
        );
        let keys_only =
            ConsoleFormat::parse(&properties("print.key=true print.value=false")).unwrap();
        assert_eq!(keys_only.line(&record(None, &[])), "null");
        let no_headers = ConsoleFormat::parse(&properties("print.headers=true")).unwrap();
        assert_eq!(no_headers.line(&record(None, &[])), "NO_HEADERS\tnull");
    }

    #[test]
    fn unknown_properties_and_non_boolean_values_are_refused() {
        assert!(ConsoleFormat::parse(&properties("print.nothing=true")).is_err());
        assert!(ConsoleFormat::parse(&properties("print.key=yes")).is_err());
        assert!(ConsoleFormat::parse(&properties("print.key")).is_err());
    }
}
