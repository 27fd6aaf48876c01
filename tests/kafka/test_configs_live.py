"""The configs asked by name through kafka-python's batched client equal librdkafka's describe_configs picked."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import wait_until

from kdiag.kafka.admin import _configs
from kdiag.kafka.client import ClientSettings
from kdiag.kafka.group_offsets import BatchedReads

pytestmark = pytest.mark.kafka


def test_named_configs_equal_librdkafkas_and_a_deleted_topic_is_left_out(kafka_lab):
    bootstrap = kafka_lab["bootstrap"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"configs-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 1, config={"flush.messages": "1", "retention.ms": "3600000"})])[
        topic].result(timeout=30)
    wait_until(lambda: topic in admin.list_topics(timeout=10).topics, 30, "the topic")
    brokers = sorted(b.id for b in admin.list_topics(timeout=10).brokers.values())
    batch = BatchedReads(ClientSettings(), bootstrap, 10.0)
    try:
        asked = [topic, "__consumer_offsets", f"never-created-{uuid.uuid4().hex[:6]}"]
        ours = batch.configs(asked, brokers, time.monotonic() + 30)
        theirs = _configs(admin, time.monotonic() + 30, None)(asked, brokers)
    finally:
        batch.close()
        admin.delete_topics([topic])[topic].exception(timeout=30)
    assert ours is not None
    assert (ours[0], dict(sorted(ours[1].items(), key=lambda kv: int(kv[0])))) == theirs
    assert set(theirs[0]) == {topic, "__consumer_offsets"} and list(theirs[1]) == [str(b) for b in brokers]
    assert theirs[0][topic]["values"]["flush.messages"] == "1"
    assert {k: theirs[0][topic]["sources"].get(k) for k in ("flush.messages", "retention.ms")} == {
        "flush.messages": "DYNAMIC_TOPIC_CONFIG", "retention.ms": "DYNAMIC_TOPIC_CONFIG"}
