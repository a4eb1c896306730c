"""A kafka-python consumer group against `seglog serve` (issue 44), as
confluent_kafka_group.py does it with librdkafka.

Phase `first`: creates a topic of 3 partitions and produces RECORD_COUNT keyed records
(acks=all). Member A of group GROUP consumes alone, then member B joins: the group rebalances
(eager: A gives up its partitions, committing what it consumed) and both consume until about half
the records are read. Every batch is committed synchronously before the next poll, so at any
rebalance everything consumed is committed. Both members then close (leaving the group), and
the keys consumed are written to STATE.

Phase `second`, against a restarted server: two new members of the same group resume from the
committed offsets and consume the rest. Every key must have been consumed exactly once across
both phases: nothing lost, nothing re-read.

Usage: kafka_python_group.py HOST:PORT TOPIC first|second STATE
Exit codes: 0 passed, 1 failed, 77 kafka-python is not installed (the caller reports a SKIP).
"""

import sys

RECORD_COUNT = 3000
PARTITION_COUNT = 3
GROUP = "seglog-kafka-python-group-test"
BATCH_MAX = 20
# Guards against a hang, never a measure of speed.
ADMIN_TIMEOUT_S = 30
FLUSH_TIMEOUT_S = 60
PHASE_TIMEOUT_S = 90
# Kafka's minimum session timeout; heartbeats often, so a rebalance is seen at once.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 100

try:
    from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError
except ImportError as error:
    print(f"kafka-python is not installed: {error}")
    sys.exit(77)


def create_and_produce(bootstrap, topic):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            [NewTopic(name=topic, num_partitions=PARTITION_COUNT, replication_factor=1)]
        )
    finally:
        admin.close()
    # Idempotence needs InitProducerId, which this broker does not answer yet.
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, enable_idempotence=False
    )
    futures = [
        producer.send(topic, key=f"key-{i}".encode(), value=b"v") for i in range(RECORD_COUNT)
    ]
    producer.flush()
    failures = []
    for future in futures:
        try:
            future.get(timeout=FLUSH_TIMEOUT_S)
        except KafkaError as error:
            failures.append(f"a delivery failed: {error}")
    producer.close()
    return failures


class Member(ConsumerRebalanceListener):
    """One consumer of the group, and what it consumed and committed."""

    def __init__(self, bootstrap, topic, name, failures):
        self.name, self.failures, self.keys = name, failures, []
        self.revocations = 0
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=GROUP,
            client_id=name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        self.consumer.subscribe([topic], listener=self)

    def on_partitions_revoked(self, revoked):
        self.revocations += 1

    def on_partitions_assigned(self, assigned):
        pass

    def poll(self):
        """One batch, its positions committed synchronously before the next poll."""
        batches = self.consumer.poll(timeout_ms=100, max_records=BATCH_MAX)
        for messages in batches.values():
            self.keys.extend(message.key.decode() for message in messages)
        if batches:
            try:
                self.consumer.commit()
            except KafkaError as error:
                self.failures.append(f"{self.name}: commit failed: {error}")
        return len(batches)

    def close(self):
        self.consumer.close()


if __name__ == "__main__":
    import group_phases

    group_phases.main(sys.modules[__name__])
