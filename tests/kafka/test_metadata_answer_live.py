"""Every topic's partitions from the Metadata answer kdiag decodes equal librdkafka's list_topics, on the lab."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import wait_until

from kdiag.kafka.admin import _topics
from kdiag.kafka.client import ClientSettings
from kdiag.kafka.group_offsets import BatchedReads

pytestmark = pytest.mark.kafka


def settled(admin: AdminClient, topic: str) -> bool:
    """Whether every partition of the topic has a leader and its whole replica set in sync."""
    partitions = _topics(admin, time.monotonic() + 10).get(topic, {"partitions": []})["partitions"]
    return bool(partitions) and all(p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) for p in partitions)


def test_decoded_topics_equal_librdkafkas(kafka_lab):
    admin = AdminClient({"bootstrap.servers": kafka_lab["bootstrap"]})
    topic = f"metadata-{uuid.uuid4().hex[:6]}"  # at least one topic, whatever ran before
    admin.create_topics([NewTopic(topic, 3, kafka_lab["brokers"])])[topic].result(timeout=30)
    wait_until(lambda: settled(admin, topic), 30, "the topic's leaders and whole ISRs")
    batch = BatchedReads(ClientSettings(), kafka_lab["bootstrap"], 10.0)
    try:
        ours = batch.topics(time.monotonic() + 30)
        theirs = _topics(admin, time.monotonic() + 30)
    finally:
        batch.close()
        admin.delete_topics([topic])[topic].exception(timeout=30)
    assert ours is not None and ours == theirs and len(theirs[topic]["partitions"]) == 3
