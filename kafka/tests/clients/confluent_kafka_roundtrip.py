"""confluent-kafka (librdkafka) against `seglog serve` (issue 44).

Creates a topic with 3 partitions through AdminClient, produces 20,000 keyed records with
acks=all and the given codec (every delivery report OK), then consumes the three partitions
from the beginning (assigned, not subscribed: groups are confluent_kafka_group.py's) and checks
that every record came back exactly once at the offset its delivery report gave.

Usage: confluent_kafka_roundtrip.py HOST:PORT TOPIC [CODEC]
CODEC is librdkafka's `compression.codec`: none (the default), gzip, snappy, lz4 or zstd.
Exit codes: 0 passed, 1 failed, 77 confluent-kafka is not installed (the caller reports a SKIP).
"""

import sys

RECORD_COUNT = 20000
PARTITION_COUNT = 3
# Guards against a hang, never a measure of speed.
ADMIN_TIMEOUT_S = 30
FLUSH_TIMEOUT_S = 60
EMPTY_POLLS_MAX = 120

try:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
except ImportError as error:
    print(f"confluent-kafka is not installed: {error}")
    sys.exit(77)


def create_topic(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITION_COUNT, replication_factor=1)]
    )
    futures[topic].result(timeout=ADMIN_TIMEOUT_S)


def produce(bootstrap, topic, codec):
    """Every record with acks=all; returns ({key: (partition, offset)}, failed reports)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "compression.codec": codec,
            "linger.ms": 5,
        }
    )
    acknowledged, failures = {}, []

    def report(error, message):
        if error is not None:
            failures.append(f"delivery of {message.key()!r} failed: {error}")
        else:
            acknowledged[message.key()] = (message.partition(), message.offset())

    for i in range(RECORD_COUNT):
        key, value = f"key-{i}".encode(), f"value-{i}".encode()
        producer.produce(topic, key=key, value=value, on_delivery=report)
        producer.poll(0)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if remaining:
        failures.append(f"{remaining} records still unacknowledged after flush")
    return acknowledged, failures


def consume(bootstrap, topic):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused-assign-only",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITION_COUNT)])
    records, empty_polls = [], 0
    while len(records) < RECORD_COUNT and empty_polls < EMPTY_POLLS_MAX:
        messages = [m for m in consumer.consume(num_messages=500, timeout=0.5) if not m.error()]
        empty_polls = 0 if messages else empty_polls + 1
        records.extend((m.partition(), m.offset(), m.key(), m.value()) for m in messages)
    consumer.close()
    return records


def check(acknowledged, records):
    failures = []
    if len(acknowledged) != RECORD_COUNT:
        failures.append(f"{len(acknowledged)} deliveries reported OK, not {RECORD_COUNT}")
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
        failures.append("consumed (partition, offset) differ from the delivery reports")
    return failures


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    codec = sys.argv[3] if len(sys.argv) > 3 else "none"
    create_topic(bootstrap, topic)
    acknowledged, failures = produce(bootstrap, topic, codec)
    failures += check(acknowledged, consume(bootstrap, topic))
    for failure in failures[:20]:
        print(f"FAIL: {failure}")
    if failures:
        sys.exit(1)
    print(f"OK: {RECORD_COUNT} records ({codec}) produced with acks=all and consumed back once")


if __name__ == "__main__":
    main()
