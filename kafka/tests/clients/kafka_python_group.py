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
# Bounds each broker call of a failure's diagnosis.
DIAGNOSE_TIMEOUT_MS = 5000

try:
    from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka import TopicPartition
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
    # Not idempotent: this test is about the group, and idempotent_produce.py covers
    # InitProducerId and sequences.
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
        self.topic, self.revocations, self.assignments = topic, 0, []
        self.polls, self.empty_polls = 0, 0
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
        # A leader whose first assignment predates its metadata of the topic assigns nothing,
        # then rejoins when the metadata arrives. If that JoinGroup and SyncGroup outlast the
        # poll that sent them, kafka-python (3.0.12) never takes up their answer: the member
        # stays `<rebalancing>` for good, sending nothing. Learning the partitions (and so
        # kafka-python's metadata snapshot) before the first join avoids that rejoin.
        self.consumer.topics()

    def on_partitions_revoked(self, revoked):
        self.revocations += 1

    def on_partitions_assigned(self, assigned):
        self.assignments.append(partition_names(assigned))

    def poll(self):
        """One batch, its positions committed synchronously before the next poll."""
        batches = self.consumer.poll(timeout_ms=100, max_records=BATCH_MAX)
        self.polls += 1
        self.empty_polls += not batches
        for messages in batches.values():
            self.keys.extend(message.key.decode() for message in messages)
        if batches:
            try:
                self.consumer.commit()
            except KafkaError as error:
                self.failures.append(f"{self.name}: commit failed: {error}")
        return len(batches)

    def diagnose(self):
        """What this member knows, for a failure message: its subscription, the assignments it
        was given, and per partition of the topic its committed offset, position and end offset.
        Each broker call is bounded by DIAGNOSE_TIMEOUT_MS; a failed call shows its error."""
        consumer, timeout_ms = self.consumer, DIAGNOSE_TIMEOUT_MS
        assigned = consumer.assignment()
        partitions = [TopicPartition(self.topic, p) for p in range(PARTITION_COUNT)]
        ends = attempt(lambda: consumer.end_offsets(partitions, timeout_ms=timeout_ms))
        coordinator = getattr(consumer, "_coordinator", None)
        lines = [
            f"{self.name}: subscription {attempt(consumer.subscription)}, "
            f"assignment {partition_names(assigned)}, assignments given {self.assignments}, "
            f"revocations {self.revocations}, polls {self.polls} ({self.empty_polls} empty), "
            f"coordinator {getattr(coordinator, 'coordinator_id', '?')} "
            f"state {getattr(coordinator, 'state', '?')}"
        ]
        for partition in partitions:
            committed = attempt(lambda: consumer.committed(partition, timeout_ms=timeout_ms))
            position = "(not assigned)"
            if partition in assigned:
                position = attempt(lambda: consumer.position(partition, timeout_ms=timeout_ms))
            end = ends.get(partition) if isinstance(ends, dict) else ends
            lines.append(
                f"  {partition.topic}-{partition.partition}: committed {committed}, "
                f"position {position}, end offset {end}"
            )
        return "\n".join(lines)

    def close(self):
        self.consumer.close()


def partition_names(partitions):
    return sorted(f"{p.topic}-{p.partition}" for p in partitions)


def attempt(call):
    """`call()`, or its error as text: a diagnosis reports what it can."""
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - any failure is part of the diagnosis
        return f"<{type(error).__name__}: {error}>"


if __name__ == "__main__":
    import group_phases

    group_phases.main(sys.modules[__name__])
