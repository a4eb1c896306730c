//! Offset checkpoint files (Kafka's text and seglog's checksummed copies) and the topic registry,
//! parsed from arbitrary bytes.
//!
//! Input: byte 0 picks the parser; the rest is the file.
//! Invariants: no panic; whatever decodes re-encodes to a text that decodes to the same value,
//! and that text re-encodes to itself (encode is a fixed point); every decoded topic is a legal
//! topic name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seglog::format::{checkpoint, topics};
use seglog::types::TopicName;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, file)) = data.split_first() else {
        return;
    };
    match selector % 3 {
        0 => check_offsets(file),
        1 => check_registry(file),
        _ => check_copy(file),
    }
});

/// A copy that decodes re-encodes to the same bytes' meaning: same generation, same offsets.
fn check_copy(file: &[u8]) {
    let Ok((generation, offsets)) = checkpoint::decode_copy(file) else {
        return;
    };
    let copy = checkpoint::encode_copy(generation, &offsets);
    assert_eq!(
        checkpoint::decode_copy(copy.as_bytes()).ok(),
        Some((generation, offsets)),
        "checkpoint copy round trip differs"
    );
}

fn check_offsets(file: &[u8]) {
    let Ok(offsets) = checkpoint::decode_offsets(file) else {
        return;
    };
    for (topic_partition, offset) in &offsets {
        assert!(TopicName::parse(topic_partition.topic.as_str()).is_ok());
        assert!(offset.0 <= i64::MAX as u64);
    }
    let text = checkpoint::encode_offsets(&offsets);
    match checkpoint::decode_offsets(text.as_bytes()) {
        Ok(again) => assert_eq!(again, offsets, "checkpoint round trip differs"),
        Err(error) => panic!("encoded checkpoint does not decode: {error}\n{text:?}"),
    }
}

fn check_registry(file: &[u8]) {
    let Ok(registry) = topics::decode(file) else {
        return;
    };
    for topic in registry.keys() {
        assert!(TopicName::parse(topic.as_str()).is_ok());
    }
    let text = topics::encode(&registry);
    let again = match topics::decode(text.as_bytes()) {
        Ok(again) => again,
        Err(error) => panic!("encoded registry does not decode: {error}\n{text:?}"),
    };
    assert_eq!(again, registry, "registry round trip differs: {text:?}");
    assert_eq!(topics::encode(&again), text);
}
