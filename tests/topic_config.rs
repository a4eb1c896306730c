//! Changing a topic's configuration on a running engine (`Engine::alter_topic_config`, Kafka's
//! IncrementalAlterConfigs): a shorter `retention.ms` lets retention delete segments it kept
//! before, and a smaller `segment.bytes` rolls the active segment at the next append, without a
//! reopen; the change is durable across a reopen; an unknown topic, an internal topic and an
//! invalid value are refused with nothing changed; a compacted topic switched to `delete` keeps
//! serving the offsets compaction left gaps between, before and after a reopen; and the
//! incremental changes (`LogConfig::altered`) apply under the engine's lock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use seglog::config::{CleanupPolicy, ConfigChange, ConfigError, LogConfig};
use seglog::engine::{Durability, Engine, OFFSETS_TOPIC};
use seglog::error::{AppendError, TopicError};
use seglog::types::{Offset, TopicName};
use support::assert_matches;
use support::batches::{T0, keyed_batch, records_from};
use support::configs::{compacted, retention_config, small_segments, with_settings};
use support::engines::{append, engine_config, fetch_batches};

mod support;

/// One batch of one 200-byte record stamped `timestamp_ms`.
fn batch(timestamp_ms: i64) -> Bytes {
    keyed_batch(Some(b"k"), Some(&[9u8; 200]), timestamp_ms)
}

/// The topic `name` of `partitions` partitions with `config`, each partition holding `count`
/// batches stamped in 2023 (`T0 + n` ms).
fn filled_topic(
    engine: &Engine,
    name: &str,
    partitions: u32,
    config: LogConfig,
    count: i64,
) -> TopicName {
    let topic = engine.create_topic(name, partitions, config).unwrap();
    for partition in 0..partitions {
        for offset in 0..count {
            append(engine, &topic, partition, batch(T0 + offset));
        }
    }
    topic
}

fn open(dir: &std::path::Path) -> Engine {
    Engine::open(dir, engine_config(2)).unwrap()
}

fn config_of(engine: &Engine, topic: &str) -> LogConfig {
    engine.describe_topic(topic).unwrap().config
}

#[test]
fn a_shorter_retention_deletes_segments_the_old_one_kept() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let kept_forever = retention_config(&[("retention.ms", "-1")]);
    filled_topic(&engine, "aging", 3, kept_forever.clone(), 8);
    for report in engine.apply_retention(Some("aging")).unwrap() {
        let outcome = report.outcome.unwrap();
        assert_eq!(outcome.segments_deleted, 0, "retention.ms=-1 keeps all");
    }
    let a_minute = with_settings(kept_forever, &[("retention.ms", "60000")]);
    engine
        .alter_topic_config("aging", a_minute.clone())
        .unwrap();
    assert_eq!(config_of(&engine, "aging"), a_minute);
    let reports = engine.apply_retention(Some("aging")).unwrap();
    assert_eq!(reports.len(), 3);
    for report in reports {
        let outcome = report.outcome.unwrap();
        assert!(outcome.segments_deleted > 0, "{:?}", report.topic_partition);
        assert_eq!(
            outcome.log_start_offset,
            Offset(8),
            "records of 2023 expire"
        );
    }
    engine.close().unwrap();
}

#[test]
fn a_smaller_segment_bytes_rolls_the_active_segment_at_the_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let topic = filled_topic(&engine, "rolling", 1, LogConfig::default(), 4);
    assert_eq!(
        engine
            .describe_partition("rolling", 0)
            .unwrap()
            .segment_count,
        1
    );
    let small = small_segments(1100, 4096);
    engine.alter_topic_config("rolling", small).unwrap();
    for offset in 4..12 {
        append(&engine, &topic, 0, batch(T0 + offset));
    }
    let segments = engine
        .describe_partition("rolling", 0)
        .unwrap()
        .segment_count;
    assert!(segments >= 3, "rolled at the new size: {segments} segments");
    assert_eq!(fetch_batches(&engine, &topic, 0).len(), 12, "nothing lost");
    engine.close().unwrap();
}

#[test]
fn the_altered_config_survives_a_reopen_and_applies_to_logs_opened_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let kept_forever = retention_config(&[("retention.ms", "-1")]);
    filled_topic(&engine, "durable", 2, kept_forever.clone(), 8);
    let a_minute = with_settings(kept_forever, &[("retention.ms", "60000")]);
    engine
        .alter_topic_config("durable", a_minute.clone())
        .unwrap();
    engine.close().unwrap();

    let engine = open(dir.path());
    assert_eq!(config_of(&engine, "durable"), a_minute);
    for report in engine.apply_retention(Some("durable")).unwrap() {
        let outcome = report.outcome.unwrap();
        assert_eq!(
            outcome.log_start_offset,
            Offset(8),
            "the reopened logs use it"
        );
    }
    engine.close().unwrap();
}

#[test]
fn an_unknown_or_internal_topic_or_an_invalid_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let unknown = engine.alter_topic_config("nowhere", LogConfig::default());
    assert_matches!(unknown, Err(TopicError::UnknownTopic { topic }) if topic == "nowhere");
    let internal = engine.alter_topic_config(OFFSETS_TOPIC, LogConfig::default());
    assert_matches!(internal, Err(TopicError::InternalTopic { .. }));
    let invalid = engine.alter_topic_config("no/slash", LogConfig::default());
    assert_matches!(invalid, Err(TopicError::TopicName(_)));
    assert!(engine.list_topics().is_empty());
    engine.close().unwrap();
}

#[test]
fn an_invalid_value_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let config = retention_config(&[("retention.ms", "-1")]);
    let topic = filled_topic(&engine, "steady", 1, config.clone(), 4);
    let too_small = config.clone().with_segment_bytes(12);
    let refused = engine.alter_topic_config("steady", too_small);
    assert_matches!(
        refused,
        Err(TopicError::Config(ConfigError::InvalidValue { key, .. })) if key == "segment.bytes"
    );
    let unparsable = engine.update_topic_config("steady", |current| {
        let changes = [
            ConfigChange::Set {
                key: "retention.ms",
                value: "1000",
            },
            ConfigChange::Set {
                key: "segment.bytes",
                value: "ten",
            },
        ];
        current.altered(&changes, &LogConfig::default())
    });
    assert_matches!(unparsable, Err(TopicError::Config(_)));
    assert_eq!(
        config_of(&engine, "steady"),
        config,
        "not even the valid part"
    );
    append(&engine, &topic, 0, batch(T0 + 4));
    assert_eq!(
        engine
            .describe_partition("steady", 0)
            .unwrap()
            .segment_count,
        2,
        "the live log rolls at the old size (four 275-byte batches per segment)"
    );
    engine.close().unwrap();
    let engine = open(dir.path());
    assert_eq!(config_of(&engine, "steady"), config, "nor on disk");
    engine.close().unwrap();
}

#[test]
fn incremental_changes_append_to_and_subtract_from_the_cleanup_policy() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let topic = engine
        .create_topic("policies", 1, LogConfig::default())
        .unwrap();
    let change = |changes: &[ConfigChange<'_>]| {
        engine
            .update_topic_config("policies", |current| {
                current.altered(changes, &LogConfig::default())
            })
            .unwrap()
    };
    let appended = change(&[ConfigChange::Append {
        key: "cleanup.policy",
        value: "compact",
    }]);
    assert_eq!(appended.cleanup_policy, CleanupPolicy::CompactAndDelete);
    let unkeyed = keyed_batch(None, Some(b"v"), T0);
    let refused = engine
        .append(&topic, 0, unkeyed.clone(), Durability::Written)
        .wait();
    // A compacted topic's appends need keys from now on.
    assert_matches!(refused, Err(AppendError::NullKeyInCompactedTopic { .. }));
    let subtracted = change(&[ConfigChange::Subtract {
        key: "cleanup.policy",
        value: "compact",
    }]);
    assert_eq!(subtracted.cleanup_policy, CleanupPolicy::Delete);
    append(&engine, &topic, 0, unkeyed);
    let reset = change(&[
        ConfigChange::Set {
            key: "retention.ms",
            value: "5000",
        },
        ConfigChange::Reset {
            key: "retention.ms",
        },
    ]);
    assert_eq!(reset, LogConfig::default());
    engine.close().unwrap();
}

/// Compaction leaves gaps between the offsets it kept, below the log's cleaned end. A topic
/// switched from `compact` to `delete` keeps them: its reads, reopen and scrub must not take
/// them for damage (a log never compacted is held to dense offsets).
#[test]
fn a_compacted_topic_switched_to_delete_serves_its_gapped_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let config = compacted(small_segments(600, 64));
    let topic = engine.create_topic("switched", 1, config.clone()).unwrap();
    // Every other record has a key of its own, kept; the others share one, superseded: the
    // kept offsets have gaps within the cleaned segments.
    for sequence in 0..60u32 {
        let key = match sequence % 2 {
            0 => format!("own-{sequence}"),
            _ => "shared".to_owned(),
        };
        let value = format!("value-{sequence:08}-{}", "x".repeat(40));
        let batch = keyed_batch(Some(key.as_bytes()), Some(value.as_bytes()), T0);
        append(&engine, &topic, 0, batch);
    }
    let reports = engine.compact(Some("switched")).unwrap();
    assert!(reports[0].outcome.as_ref().unwrap().segments_cleaned > 0);
    let offsets = |engine: &Engine| -> Vec<u64> {
        records_from(&fetch_batches(engine, &topic, 0), 0)
            .into_iter()
            .map(|(offset, _)| offset)
            .collect()
    };
    let kept = offsets(&engine);
    assert!(kept.len() < 60, "compaction removed records");
    let deleting = with_settings(config, &[("cleanup.policy", "delete")]);
    engine.alter_topic_config("switched", deleting).unwrap();
    assert_eq!(offsets(&engine), kept, "read live");
    engine.close().unwrap();

    let engine = open(dir.path());
    assert_eq!(offsets(&engine), kept, "read after a reopen");
    let scrubbed = engine.scrub(Some("switched")).unwrap();
    for (tp, outcome) in scrubbed {
        assert!(outcome.corrupt.is_empty(), "{tp}: {outcome:?}");
    }
    engine.close().unwrap();
}
