"""An idempotent producer across a server crash and restart (issue 44).

Produces 100,000 keyed records (`key-i` / `value-i`, i counting up) to a topic of 3 partitions
with `enable.idempotence` and acks=all, as fast as the client takes them, so that requests are
in flight when the caller kills the server. It prints `half acknowledged` once half the records
were acknowledged; the caller then kills the server (SIGKILL) and starts it again on the same
address, while the producer keeps sending and retrying. When every record is acknowledged, it
reads the partitions back and checks that each record is stored exactly once, each partition in
the order produced. With idempotence off, the same run stores retried batches twice.

Usage: idempotent_produce.py CLIENT HOST:PORT TOPIC
CLIENT is `confluent-kafka` (librdkafka) or `kafka-python`.
Exit codes: 0 passed, 1 failed, 77 the client is not installed (the caller reports a SKIP).
"""

import sys
import time

RECORD_COUNT = 100000
PARTITION_COUNT = 3
CHUNK_RECORDS = 1000
CHUNK_PAUSE_S = 0.001
# Guards against a hang, never a measure of speed.
ADMIN_TIMEOUT_S = 30
FLUSH_TIMEOUT_S = 120
EMPTY_POLLS_MAX = 120


def record(i):
    return f"key-{i}".encode(), f"value-{i}".encode()


def paced_send(send, poll, acknowledged):
    """Sends every record in chunks, polling between them; prints the half line once, when it holds."""
    announced = False
    for start in range(0, RECORD_COUNT, CHUNK_RECORDS):
        for i in range(start, start + CHUNK_RECORDS):
            send(i)
        poll()
        if not announced and len(acknowledged) >= RECORD_COUNT // 2:
            print("half acknowledged", flush=True)
            announced = True
        time.sleep(CHUNK_PAUSE_S)
    return announced


class Confluent:
    def __init__(self, bootstrap):
        try:
            import confluent_kafka
            from confluent_kafka import admin
        except ImportError as error:
            print(f"confluent-kafka is not installed: {error}")
            sys.exit(77)
        self.kafka, self.admin, self.bootstrap = confluent_kafka, admin, bootstrap

    def create_topic(self, topic):
        client = self.admin.AdminClient({"bootstrap.servers": self.bootstrap})
        new = self.admin.NewTopic(topic, num_partitions=PARTITION_COUNT, replication_factor=1)
        client.create_topics([new])[topic].result(timeout=ADMIN_TIMEOUT_S)

    def produce(self, topic):
        """Returns ({key: partition}, failures)."""
        acknowledged, failures = {}, []

        def on_error(error):
            if error.fatal():
                failures.append(f"fatal producer error: {error}")

        producer = self.kafka.Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "error_cb": on_error,
            }
        )

        def report(error, message):
            if error is not None:
                failures.append(f"delivery of {message.key()!r} failed: {error}")
            else:
                acknowledged[message.key()] = message.partition()

        def send(i):
            key, value = record(i)
            producer.produce(topic, key=key, value=value, on_delivery=report)

        announced = paced_send(send, lambda: producer.poll(0), acknowledged)
        remaining = producer.flush(FLUSH_TIMEOUT_S)
        if remaining:
            failures.append(f"{remaining} records unacknowledged after flush")
        if not announced:
            print("half acknowledged", flush=True)
        return acknowledged, failures

    def consume(self, topic):
        """[(partition, key, value)] of every record, each partition in offset order."""
        consumer = self.kafka.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "unused-assign-only",
                "enable.auto.commit": False,
            }
        )
        partitions = [self.kafka.TopicPartition(topic, p, 0) for p in range(PARTITION_COUNT)]
        consumer.assign(partitions)
        records, empty_polls = [], 0
        while len(records) < RECORD_COUNT and empty_polls < EMPTY_POLLS_MAX:
            messages = [m for m in consumer.consume(num_messages=500, timeout=0.5) if not m.error()]
            empty_polls = 0 if messages else empty_polls + 1
            records.extend((m.partition(), m.key(), m.value()) for m in messages)
        # Anything past the expected count is a duplicate: read it too.
        records.extend(
            (m.partition(), m.key(), m.value())
            for m in consumer.consume(num_messages=500, timeout=1.0)
            if not m.error()
        )
        consumer.close()
        return records


class KafkaPython:
    def __init__(self, bootstrap):
        try:
            import kafka
            import kafka.admin
        except ImportError as error:
            print(f"kafka-python is not installed: {error}")
            sys.exit(77)
        self.kafka, self.bootstrap = kafka, bootstrap

    def create_topic(self, topic):
        admin = self.kafka.admin.KafkaAdminClient(bootstrap_servers=self.bootstrap)
        new = self.kafka.admin.NewTopic(topic, num_partitions=PARTITION_COUNT, replication_factor=1)
        admin.create_topics([new], timeout_ms=ADMIN_TIMEOUT_S * 1000)
        admin.close()

    def produce(self, topic):
        producer = self.kafka.KafkaProducer(
            bootstrap_servers=self.bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
        )
        acknowledged, failures = {}, []

        def send(i):
            key, value = record(i)
            future = producer.send(topic, key=key, value=value)
            future.add_callback(lambda metadata: acknowledged.__setitem__(key, metadata.partition))
            future.add_errback(lambda error: failures.append(f"delivery of {key!r} failed: {error}"))

        announced = paced_send(send, lambda: None, acknowledged)
        producer.flush(timeout=FLUSH_TIMEOUT_S)
        if not announced:
            print("half acknowledged", flush=True)
        producer.close()
        return acknowledged, failures

    def consume(self, topic):
        consumer = self.kafka.KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False
        )
        partitions = [self.kafka.TopicPartition(topic, p) for p in range(PARTITION_COUNT)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        records, empty_polls = [], 0
        while empty_polls < (EMPTY_POLLS_MAX if len(records) < RECORD_COUNT else 2):
            batches = consumer.poll(timeout_ms=500)
            messages = [m for batch in batches.values() for m in batch]
            empty_polls = 0 if messages else empty_polls + 1
            records.extend((m.partition, m.key, m.value) for m in messages)
        consumer.close()
        return records


def check(acknowledged, records):
    failures = []
    if len(acknowledged) != RECORD_COUNT:
        failures.append(f"{len(acknowledged)} records acknowledged, not {RECORD_COUNT}")
    if len(records) != RECORD_COUNT:
        failures.append(f"{len(records)} records stored, not {RECORD_COUNT}")
    seen, last_in_partition = set(), {}
    for partition, key, value in records:
        if key in seen:
            failures.append(f"{key!r} is stored twice")
        seen.add(key)
        if value != key.replace(b"key-", b"value-"):
            failures.append(f"{key!r} has value {value!r}")
        if acknowledged.get(key, partition) != partition:
            failures.append(f"{key!r} was acknowledged in another partition")
        i = int(key[len(b"key-"):])
        if i <= last_in_partition.get(partition, -1):
            failures.append(f"{key!r} is stored after key-{last_in_partition[partition]}")
        last_in_partition[partition] = i
    return failures


def main():
    client, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    clients = {"confluent-kafka": Confluent, "kafka-python": KafkaPython}
    chosen = clients[client](bootstrap)
    chosen.create_topic(topic)
    acknowledged, failures = chosen.produce(topic)
    failures += check(acknowledged, chosen.consume(topic))
    for failure in failures[:20]:
        print(f"FAIL: {failure}")
    if failures:
        sys.exit(1)
    print(f"OK: {RECORD_COUNT} records ({client}, idempotent) stored once each, in order")


if __name__ == "__main__":
    main()
