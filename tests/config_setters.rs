//! The configurations as another crate sees them: `#[non_exhaustive]`, so built with the `with_*`
//! setters (or from a default and field assignment), never with a struct literal.

use seglog::config::{CleanupPolicy, ConfigError, FlushPolicy, LogConfig};
use seglog::engine::{Durability, EngineConfig};
use seglog::format::Compression;
use seglog::group::{AutoOffsetReset, ConsumerConfig};
use seglog::producer::ProducerConfig;

#[test]
fn setters_build_what_field_assignment_builds() {
    let topic = LogConfig::default()
        .with_segment_bytes(16 * 1024)
        .with_cleanup_policy(CleanupPolicy::Compact);
    let mut assigned = LogConfig::default();
    assigned.segment_bytes = 16 * 1024;
    assigned.cleanup_policy = CleanupPolicy::Compact;
    assert_eq!(topic, assigned);

    let engine = EngineConfig::default()
        .with_shard_count(2)
        .with_pin_shards(false)
        .with_cleaner_core(None)
        .with_default_topic_config(topic.clone());
    let mut assigned = EngineConfig::default();
    assigned.shard_count = 2;
    assigned.pin_shards = false;
    assigned.cleaner_core = None;
    assigned.default_topic_config = topic;
    assert_eq!(engine, assigned);

    let producer = ProducerConfig::default()
        .with_linger_ms(0)
        .with_acks(Durability::Written)
        .with_compression(Compression::Zstd);
    let mut assigned = ProducerConfig::default();
    assigned.linger_ms = 0;
    assigned.acks = Durability::Written;
    assigned.compression = Compression::Zstd;
    // No `PartialEq` (the partitioner is a trait object): every other field is in `Debug`.
    assert_eq!(format!("{producer:?}"), format!("{assigned:?}"));
    assert!(producer.validate().is_ok());

    let consumer = ConsumerConfig::new("g")
        .with_client_id("c".to_owned())
        .with_auto_offset_reset(AutoOffsetReset::Earliest)
        .with_max_poll_records(7);
    let mut assigned = ConsumerConfig::new("g");
    assigned.client_id = "c".to_owned();
    assigned.auto_offset_reset = AutoOffsetReset::Earliest;
    assigned.max_poll_records = 7;
    assert_eq!(consumer, assigned);
}

#[test]
fn log_config_setters_are_checked_by_validate_as_set_checks_names() {
    let config = LogConfig::default()
        .with_segment_bytes(16_384)
        .with_flush_policy(FlushPolicy::EveryAppend);
    assert!(config.validate().is_ok());
    let mut by_name = LogConfig::default();
    by_name.set("segment.bytes", "16384").unwrap();
    by_name.set("flush.messages", "1").unwrap();
    assert_eq!(config, by_name);

    // A setter takes any value; `validate` (as `set` and topic creation) refuses a bad one.
    let too_small = LogConfig::default().with_segment_bytes(10);
    assert!(matches!(
        too_small.validate(),
        Err(ConfigError::InvalidValue { key, .. }) if key == "segment.bytes"
    ));
    assert!(by_name.set("segment.bytes", "10").is_err());
    assert_eq!(
        by_name.segment_bytes, 16_384,
        "a refused `set` changes nothing"
    );
}
