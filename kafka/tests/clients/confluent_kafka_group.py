"""A confluent-kafka (librdkafka) consumer group against `seglog serve` (issue 44).

Phase `first`: creates a topic of 3 partitions and produces RECORD_COUNT keyed records
(acks=all). Member A of group GROUP consumes alone, then member B joins: the group rebalances
(eager: A gives up its partitions, committing what it consumed) and both consume until about half
the records are read. Every batch is committed synchronously before the next poll, so at any
rebalance everything consumed is committed. Both members then close (leaving the group), and
the keys consumed are written to STATE.

Phase `second`, against a restarted server: two new members of the same group resume from the
committed offsets and consume the rest. Every key must have been consumed exactly once across
both phases: nothing lost, nothing re-read.

Usage: confluent_kafka_group.py HOST:PORT TOPIC first|second STATE
Exit codes: 0 passed, 1 failed, 77 confluent-kafka is not installed (the caller reports a SKIP).
"""

import sys

RECORD_COUNT = 3000
PARTITION_COUNT = 3
GROUP = "seglog-group-test"
BATCH_MAX = 20
# Guards against a hang, never a measure of speed.
ADMIN_TIMEOUT_S = 30
FLUSH_TIMEOUT_S = 60
PHASE_TIMEOUT_S = 90
# Kafka's minimum session timeout; heartbeats often, so a rebalance is seen at once.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 100

try:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
except ImportError as error:
    print(f"confluent-kafka is not installed: {error}")
    sys.exit(77)


def create_and_produce(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITION_COUNT, replication_factor=1)]
    )
    futures[topic].result(timeout=ADMIN_TIMEOUT_S)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures = []

    def report(error, message):
        if error is not None:
            failures.append(f"delivery of {message.key()!r} failed: {error}")

    for i in range(RECORD_COUNT):
        producer.produce(topic, key=f"key-{i}".encode(), value=b"v", on_delivery=report)
        producer.poll(0)
    if producer.flush(FLUSH_TIMEOUT_S):
        failures.append("records still unacknowledged after flush")
    return failures


class Member:
    """One consumer of the group, and what it consumed and committed."""

    def __init__(self, bootstrap, topic, name, failures):
        self.name, self.failures, self.keys = name, failures, []
        self.revocations = 0
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "client.id": name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            }
        )
        self.consumer.subscribe([topic], on_revoke=self.revoked)

    def revoked(self, consumer, partitions):
        self.revocations += 1

    def poll(self):
        """One batch, committed synchronously before the next poll."""
        messages = self.consumer.consume(num_messages=BATCH_MAX, timeout=0.1)
        positions = {}
        for message in messages:
            if message.error():
                if message.error().code() != KafkaError._PARTITION_EOF:
                    self.failures.append(f"{self.name}: {message.error()}")
                continue
            self.keys.append(message.key().decode())
            positions[(message.topic(), message.partition())] = message.offset() + 1
        if positions:
            offsets = [TopicPartition(t, p, offset) for (t, p), offset in positions.items()]
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as error:
                self.failures.append(f"{self.name}: commit failed: {error}")
        return len(positions)

    def close(self):
        self.consumer.close()


if __name__ == "__main__":
    import group_phases

    group_phases.main(sys.modules[__name__])
