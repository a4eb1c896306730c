"""The two phases of the consumer-group client tests (confluent_kafka_group.py and
kafka_python_group.py), whatever the client: each script passes itself as `client`, with its
`Member` (poll, keys, revocations, close, and optionally diagnose), `create_and_produce`,
RECORD_COUNT and PHASE_TIMEOUT_S.
"""

import json
import sys
import time


def run_until(members, done, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        for member in members:
            member.poll()
        time.sleep(0.01)
    return done()


def diagnosis(*members):
    """What the members know (their `diagnose()`, where the client has one), so that a failure
    explains itself."""
    found = [member.diagnose() for member in members if hasattr(member, "diagnose")]
    return "".join(f"\n{text}" for text in found)


def first(client, bootstrap, topic, failures):
    failures += client.create_and_produce(bootstrap, topic)
    a = client.Member(bootstrap, topic, "member-a", failures)
    timeout_s = client.PHASE_TIMEOUT_S
    if not run_until([a], lambda: len(a.keys) >= client.RECORD_COUNT // 4, timeout_s):
        failures.append(f"member A alone consumed only {len(a.keys)} records{diagnosis(a)}")
    b = client.Member(bootstrap, topic, "member-b", failures)
    total = lambda: len(a.keys) + len(b.keys)
    half = lambda: len(b.keys) > 0 and total() >= client.RECORD_COUNT // 2
    if not run_until([a, b], half, timeout_s):
        consumed = f"A {len(a.keys)}, B {len(b.keys)} records"
        failures.append(f"after B joined: {consumed}{diagnosis(a, b)}")
    if a.revocations == 0:
        failures.append("member A saw no rebalance when B joined")
    a.close()
    b.close()
    return a.keys + b.keys


def second(client, bootstrap, topic, failures, earlier):
    a = client.Member(bootstrap, topic, "member-c", failures)
    b = client.Member(bootstrap, topic, "member-d", failures)
    total = lambda: len(earlier) + len(a.keys) + len(b.keys)
    everything = lambda: total() >= client.RECORD_COUNT
    if not run_until([a, b], everything, client.PHASE_TIMEOUT_S):
        count = client.RECORD_COUNT
        consumed = f"only {total()} of {count} records consumed"
        failures.append(f"after the restart {consumed}{diagnosis(a, b)}")
    # A little longer: anything re-read would arrive now.
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        a.poll()
        b.poll()
    a.close()
    b.close()
    if not a.keys and not b.keys:
        failures.append("the resumed group consumed nothing")
    return a.keys + b.keys


def main(client):
    """Runs the phase named on the command line with `client`'s Member, create_and_produce,
    RECORD_COUNT and PHASE_TIMEOUT_S."""
    bootstrap, topic, phase, state = sys.argv[1:5]
    failures = []
    if phase == "first":
        keys = first(client, bootstrap, topic, failures)
        with open(state, "w") as file:
            json.dump(keys, file)
        expected = None
    else:
        with open(state) as file:
            earlier = json.load(file)
        keys = earlier + second(client, bootstrap, topic, failures, earlier)
        expected = {f"key-{i}" for i in range(client.RECORD_COUNT)}
    seen = set()
    for key in keys:
        if key in seen:
            failures.append(f"{key} consumed twice")
        seen.add(key)
    if expected is not None and seen != expected:
        failures.append(f"{len(expected - seen)} records never consumed")
    for failure in failures[:20]:
        print(f"FAIL: {failure}")
    if failures:
        sys.exit(1)
    print(f"OK: phase {phase}, {len(keys)} records consumed once")
