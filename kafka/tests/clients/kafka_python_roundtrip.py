"""kafka-python against `seglog serve` (issue 44): a client that others wrote, end to end.

Creates a topic with 3 partitions through KafkaAdminClient, produces 20,000 keyed records with
acks='all' (every delivery acknowledged, each key in the partition Kafka's partitioner picks),
then consumes the three partitions from the beginning and checks that every record came back
exactly once, in order per partition, with its key and value.

Usage: kafka_python_roundtrip.py HOST:PORT TOPIC [COMPRESSION]
COMPRESSION is kafka-python's `compression_type`: none (the default), gzip, snappy, lz4 or zstd;
the last three need their Python packages (python-snappy, lz4, zstandard).
Exit codes: 0 passed, 1 failed, 77 kafka-python or the codec's package is not installed (the
caller reports a SKIP).
"""

import sys

RECORD_COUNT = 20000
PARTITION_COUNT = 3
# Guards against a hang, never a measure of speed.
DELIVERY_TIMEOUT_S = 60
CONSUME_POLLS_MAX = 120

try:
    import kafka.codec
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
except ImportError as error:
    print(f"kafka-python is not installed: {error}")
    sys.exit(77)

CODEC_AVAILABLE = {
    "none": lambda: True,
    "gzip": kafka.codec.has_gzip,
    "snappy": kafka.codec.has_snappy,
    "lz4": kafka.codec.has_lz4,
    "zstd": kafka.codec.has_zstd,
}


def create_topic(bootstrap, topic):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="seglog-test-admin")
    try:
        admin.create_topics(
            [NewTopic(name=topic, num_partitions=PARTITION_COUNT, replication_factor=1)]
        )
    finally:
        admin.close()


def produce(bootstrap, topic, compression):
    """Sends every record with acks='all'; returns {key: (partition, offset)} as acknowledged."""
    # Idempotence (on by default in kafka-python 3) needs InitProducerId, which this broker does
    # not answer yet (ApiVersions says so); the producer would refuse to start.
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        enable_idempotence=False,
        compression_type=compression,
    )
    futures = []
    for i in range(RECORD_COUNT):
        key = f"key-{i}".encode()
        value = f"value-{i}".encode()
        futures.append((key, producer.send(topic, key=key, value=value)))
    producer.flush()
    acknowledged = {}
    for key, future in futures:
        metadata = future.get(timeout=DELIVERY_TIMEOUT_S)
        acknowledged[key] = (metadata.partition, metadata.offset)
    producer.close()
    return acknowledged


def consume(bootstrap, topic):
    """Every record of the partitions from the beginning: (partition, offset, key, value)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        group_id=None,
    )
    partitions = [TopicPartition(topic, p) for p in range(PARTITION_COUNT)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    records = []
    for _ in range(CONSUME_POLLS_MAX):
        for batch in consumer.poll(timeout_ms=500).values():
            records.extend((r.partition, r.offset, r.key, r.value) for r in batch)
        if len(records) >= RECORD_COUNT:
            break
    consumer.close()
    return records


def check(acknowledged, records):
    failures = []
    if len(acknowledged) != RECORD_COUNT:
        failures.append(f"{len(acknowledged)} deliveries acknowledged, not {RECORD_COUNT}")
    if len(records) != RECORD_COUNT:
        failures.append(f"{len(records)} records consumed, not {RECORD_COUNT}")
    seen = {}
    for partition, offset, key, value in records:
        if key in seen:
            failures.append(f"{key!r} consumed twice")
        seen[key] = (partition, offset)
        if value != key.replace(b"key-", b"value-"):
            failures.append(f"{key!r} has value {value!r}")
    if seen != acknowledged:
        failures.append("consumed (partition, offset) differ from the acknowledged ones")
    used = {partition for partition, _ in acknowledged.values()}
    if used != set(range(PARTITION_COUNT)):
        failures.append(f"keys went to partitions {sorted(used)}, not all {PARTITION_COUNT}")
    return failures


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    codec = sys.argv[3] if len(sys.argv) > 3 else "none"
    if not CODEC_AVAILABLE[codec]():
        print(f"kafka-python has no {codec} codec (its Python package is not installed)")
        sys.exit(77)
    compression = None if codec == "none" else codec
    create_topic(bootstrap, topic)
    acknowledged = produce(bootstrap, topic, compression)
    records = consume(bootstrap, topic)
    failures = check(acknowledged, records)
    for failure in failures[:20]:
        print(f"FAIL: {failure}")
    if failures:
        sys.exit(1)
    print(f"OK: {RECORD_COUNT} records ({codec}) produced with acks=all and consumed back once")


if __name__ == "__main__":
    main()
