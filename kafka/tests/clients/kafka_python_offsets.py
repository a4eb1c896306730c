"""kafka-python's offset lookups against `seglog serve` (issue 44): ListOffsets by timestamp
(`offsets_for_times`), earliest and latest (`beginning_offsets`, `end_offsets`), and
DeleteRecords (`KafkaAdminClient.delete_records`) moving the earliest offset.

Produces 100 records with timestamps 1_000_000 + 10 * i to one partition, then checks each
lookup against what was produced.

Usage: kafka_python_offsets.py HOST:PORT TOPIC
Exit codes: 0 passed, 1 failed, 77 kafka-python is not installed (the caller reports a SKIP).
"""

import sys

RECORD_COUNT = 100
TIMESTAMP_BASE_MS = 1_000_000
TIMESTAMP_STEP_MS = 10
# Guards against a hang, never a measure of speed.
DELIVERY_TIMEOUT_S = 60

try:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
except ImportError as error:
    print(f"kafka-python is not installed: {error}")
    sys.exit(77)


def produce(bootstrap, topic):
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    futures = [
        producer.send(
            topic,
            partition=0,
            value=f"value-{i}".encode(),
            timestamp_ms=TIMESTAMP_BASE_MS + TIMESTAMP_STEP_MS * i,
        )
        for i in range(RECORD_COUNT)
    ]
    producer.flush()
    offsets = [future.get(timeout=DELIVERY_TIMEOUT_S).offset for future in futures]
    producer.close()
    return offsets


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    partition = TopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(name=topic, num_partitions=1, replication_factor=1)])
    failures = []
    offsets = produce(bootstrap, topic)
    if offsets != list(range(RECORD_COUNT)):
        failures.append(f"acknowledged offsets {offsets[:5]}... are not 0..{RECORD_COUNT}")

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    # Record 42's timestamp, one after record 41's, and one past the last.
    cases = [
        (TIMESTAMP_BASE_MS + TIMESTAMP_STEP_MS * 42, 42),
        (TIMESTAMP_BASE_MS + TIMESTAMP_STEP_MS * 41 + 1, 42),
        (TIMESTAMP_BASE_MS + TIMESTAMP_STEP_MS * RECORD_COUNT, None),
    ]
    for timestamp, expected in cases:
        found = consumer.offsets_for_times({partition: timestamp})[partition]
        offset = None if found is None else found.offset
        if offset != expected:
            failures.append(f"offsets_for_times({timestamp}) = {offset}, not {expected}")
    if consumer.end_offsets([partition])[partition] != RECORD_COUNT:
        failures.append("end_offsets is not the record count")

    admin.delete_records({partition: 30})
    earliest = consumer.beginning_offsets([partition])[partition]
    if earliest != 30:
        failures.append(f"after delete_records(30), beginning_offsets = {earliest}")
    consumer.close()
    admin.close()
    for failure in failures:
        print(f"FAIL: {failure}")
    if failures:
        sys.exit(1)
    print("OK: offsets_for_times, beginning_offsets, end_offsets and delete_records")


if __name__ == "__main__":
    main()
