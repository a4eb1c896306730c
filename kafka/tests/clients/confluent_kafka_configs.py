"""confluent-kafka's AdminClient altering a topic's configs on `seglog serve`.

Creates a topic, then through `incremental_alter_configs` sets `retention.ms` and appends
`compact` to `cleanup.policy` (each read back by `describe_configs` as the topic's own,
DYNAMIC_TOPIC_CONFIG), checks that `validate_only` changes nothing, deletes `retention.ms`
(back to DEFAULT_CONFIG, Kafka's default) and that an unknown topic and an invalid value are
refused with Kafka's error codes.

Usage: confluent_kafka_configs.py HOST:PORT TOPIC
Exit codes: 0 passed, 1 failed, 77 confluent-kafka is not installed (the caller reports a SKIP).
"""

import sys

# Guards against a hang, never a measure of speed.
ADMIN_TIMEOUT_S = 30
KAFKA_DEFAULT_RETENTION_MS = "604800000"

try:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        NewTopic,
    )
except ImportError as error:
    print(f"confluent-kafka is not installed: {error}")
    sys.exit(77)


def alter(admin, topic, entries, validate_only=False):
    """Alters the topic with (name, value, operation) entries; the refusal's code, or None."""
    configs = [
        ConfigEntry(name, value, incremental_operation=operation)
        for name, value, operation in entries
    ]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=configs)
    futures = admin.incremental_alter_configs([resource], validate_only=validate_only)
    try:
        futures[resource].result(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as error:
        return error.args[0].code()
    return None


def described(admin, topic):
    """{name: (value, source)} of the topic's configs."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    return {name: (entry.value, entry.source) for name, entry in entries.items()}


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    created[topic].result(timeout=ADMIN_TIMEOUT_S)
    failures = []

    def expect(name, value, source, why):
        found = described(admin, topic).get(name)
        if found != (value, source.value):
            failures.append(f"{why}: {name} is {found}, not ({value!r}, {source})")

    refused = alter(
        admin,
        topic,
        [
            ("retention.ms", "3600000", AlterConfigOpType.SET),
            ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
        ],
    )
    if refused is not None:
        failures.append(f"SET and APPEND refused with {refused}")
    expect("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG, "SET")
    policy = described(admin, topic).get("cleanup.policy", ("", None))[0]
    if sorted(policy.split(",")) != ["compact", "delete"]:
        failures.append(f"APPEND compact to delete: cleanup.policy is {policy!r}")

    refused = alter(admin, topic, [("retention.ms", "1000", AlterConfigOpType.SET)], True)
    if refused is not None:
        failures.append(f"validate_only refused with {refused}")
    expect("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG, "validate_only")

    refused = alter(admin, topic, [("retention.ms", None, AlterConfigOpType.DELETE)])
    if refused is not None:
        failures.append(f"DELETE refused with {refused}")
    expect("retention.ms", KAFKA_DEFAULT_RETENTION_MS, ConfigSource.DEFAULT_CONFIG, "DELETE")

    for target, entry, code in [
        (
            f"{topic}-missing",
            ("retention.ms", "1000", AlterConfigOpType.SET),
            KafkaError.UNKNOWN_TOPIC_OR_PART,
        ),
        (topic, ("segment.bytes", "ten", AlterConfigOpType.SET), KafkaError.INVALID_CONFIG),
    ]:
        refused = alter(admin, target, [entry])
        if refused != code:
            failures.append(f"{target} {entry}: refused with {refused}, not {code}")

    for failure in failures:
        print(f"FAIL: {failure}")
    if failures:
        sys.exit(1)
    print("OK: incremental_alter_configs SET, APPEND, validate_only, DELETE and refusals")


if __name__ == "__main__":
    main()
