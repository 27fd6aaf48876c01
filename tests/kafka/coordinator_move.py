"""Moving a group's coordinator to another broker of the lab for real: its `__consumer_offsets` partition's replicas
reordered (no data moves) and the preferred leader elected, then put back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KafkaPythonPartition
from kafka.admin import KafkaAdminClient
from tests.waiting import wait_until

OFFSETS_TOPIC = "__consumer_offsets"


def java_hash(text: str) -> int:
    """String.hashCode of an ASCII string, as a signed 32-bit int."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, partitions: int) -> int:
    """The `__consumer_offsets` partition (so the coordinator) of a group: Utils.abs(hashCode) % partitions."""
    h = java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def described_group(bootstrap: str, group: str) -> Any:
    """The group as its coordinator describes it, through a new client (librdkafka's keeps a coordinator that moved)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)


def coordinator_of(bootstrap: str, group: str) -> int:
    """The broker id the cluster names as the group's coordinator."""
    return described_group(bootstrap, group).coordinator.id


def _lead(bootstrap: str, partition: int, replicas: list[int]) -> None:
    """Give the partition this replica order and elect its first replica leader; wait until it leads."""
    old = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answer = old.alter_partition_reassignments({KafkaPythonPartition(OFFSETS_TOPIC, partition): replicas})
        assert all(error is None for error in answer.values()), answer
    finally:
        old.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def leads() -> bool:
        meta = admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC].partitions[partition]
        if meta.replicas == replicas and meta.leader != replicas[0]:
            # confluent-kafka 2.16's elect_leaders raises SystemError on any keyword argument
            admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(OFFSETS_TOPIC, partition)]).exception(timeout=15)
        return meta.leader == replicas[0]

    wait_until(leads, 60, f"broker {replicas[0]} leading {OFFSETS_TOPIC}-{partition}")


@contextmanager
def coordinator_moved(bootstrap: str, group: str) -> Iterator[int]:
    """Move the group's coordinator to another broker (yielding its id); put it back at the end."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC]
    partition = offsets_partition(group, len(topic.partitions))
    before = list(topic.partitions[partition].replicas)
    assert len(before) > 1, f"{OFFSETS_TOPIC}-{partition} has one replica: its coordinator cannot move"
    leader = topic.partitions[partition].leader
    assert coordinator_of(bootstrap, group) == leader
    target = next(b for b in before if b != leader)
    _lead(bootstrap, partition, [target] + [b for b in before if b != target])
    try:
        wait_until(lambda: coordinator_of(bootstrap, group) == target, 60, f"broker {target} coordinating {group}")
        yield target
    finally:
        _lead(bootstrap, partition, before)
