"""Log end offsets through kafka-python's batched ListOffsets on the lab, equal to what librdkafka's consumer reads
(read_committed: a partition under an open transaction ends at its last stable offset, not its high watermark)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import wait_until

from kdiag.kafka.client import ClientSettings
from kdiag.kafka.group_offsets import BatchedReads

pytestmark = pytest.mark.kafka
PARTITIONS = 3


@pytest.fixture
def transaction_open(kafka_lab) -> Iterator[dict]:
    """A fresh topic: 5 committed transactional messages in partition 0, 3 in a transaction left open in partition 1,
    2 plain ones in partition 2."""
    bootstrap, suffix = kafka_lab["bootstrap"], uuid.uuid4().hex[:6]
    topic = f"endtest-{suffix}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    wait_until(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == PARTITIONS, 30, "the topic")
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"endtest-{suffix}"})
    transactional.init_transactions(60)
    transactional.begin_transaction()
    for _ in range(5):
        transactional.produce(topic, b"x", partition=0)
    transactional.commit_transaction(60)
    transactional.begin_transaction()
    for _ in range(3):
        transactional.produce(topic, b"x", partition=1)
    assert transactional.flush(60) == 0
    plain = Producer({"bootstrap.servers": bootstrap})
    for _ in range(2):
        plain.produce(topic, b"x", partition=2)
    assert plain.flush(60) == 0
    try:
        yield {"bootstrap": bootstrap, "topic": topic}
    finally:
        transactional.abort_transaction(60)
        admin.delete_topics([topic])[topic].exception(timeout=30)


def test_batched_end_offsets_equal_librdkafkas_read_committed_ones(transaction_open):
    bootstrap, topic = transaction_open["bootstrap"], transaction_open["topic"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    leaders = {p.id: p.leader for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()}
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for partition, leader in sorted(leaders.items()):
        by_leader.setdefault(leader, []).append((topic, partition))
    batch = BatchedReads(ClientSettings(), bootstrap, 10.0)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kdiag-offsets", "enable.auto.commit": False})
    try:
        ours = batch.end_offsets(by_leader, time.monotonic() + 30)
        theirs = consumer.offsets_for_times([TopicPartition(topic, p, OFFSET_END) for p in range(PARTITIONS)], 30)
        uncommitted = Consumer({"bootstrap.servers": bootstrap, "group.id": "kdiag-offsets",
                                "isolation.level": "read_uncommitted"})
        (high,) = uncommitted.offsets_for_times([TopicPartition(topic, 1, OFFSET_END)], 30)
        uncommitted.close()
    finally:
        batch.close()
        consumer.close()
    assert ours == {(tp.topic, tp.partition): tp.offset for tp in theirs}
    # Partition 0: 5 messages and the commit marker; partition 1: the open transaction's first offset (its high
    # watermark, what a read_uncommitted consumer reads, is 3).
    assert ours == {(topic, 0): 6, (topic, 1): 0, (topic, 2): 2} and high.offset == 3


def test_a_leader_the_client_cannot_reach_loses_only_its_own_partitions(transaction_open):
    bootstrap, topic = transaction_open["bootstrap"], transaction_open["topic"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    leaders = {p.id: p.leader for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()}
    by_leader: dict[int, list[tuple[str, int]]] = {99: [(topic, 7)]}  # a broker that left the cluster
    for partition, leader in sorted(leaders.items()):
        by_leader.setdefault(leader, []).append((topic, partition))
    batch = BatchedReads(ClientSettings(), bootstrap, 10.0)
    try:
        assert batch.end_offsets(by_leader, time.monotonic() + 30) == {(topic, 0): 6, (topic, 1): 0, (topic, 2): 2}
    finally:
        batch.close()
