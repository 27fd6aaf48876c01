"""The fallback of lag in seconds (kdiag/kafka/record_time.py) on the lab: the record at each committed offset is read
once, at most MAX_READS per fetch, the oldest answering per group and topic."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kdiag.kafka import record_time
from kdiag.kafka.record_time import MAX_READS, RecordTimes

pytestmark = pytest.mark.kafka
PARTITIONS = MAX_READS + 4
RECORDS = 5  # per partition; record i of partition p stamped 1e9 + 100 * p + i seconds


@pytest.fixture
def topic(kafka_lab: dict):
    name = f"recordtime-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_lab["bootstrap"]})
    # Kept forever: records stamped 2001 would go at the next retention check (every 5 minutes), mid-test.
    admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1,
                                  config={"retention.ms": "-1"})])[name].result(30)
    producer = Producer({"bootstrap.servers": kafka_lab["bootstrap"]})
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            producer.produce(name, b"x", partition=p, timestamp=int((1e9 + 100 * p + i) * 1000))
    assert producer.flush(30) == 0
    yield name
    admin.delete_topics([name])[name].result(30)


def admin_state(topic: str, lags: dict[str, int]) -> dict:
    """An admin state: every partition's end at RECORDS, the groups' lag on the topic."""
    return {"topics": {topic: {"partitions": [{"partition": p, "log_end_offset": RECORDS} for p in range(PARTITIONS)]}},
            "consumer_groups": {g: {"lag": {topic: {"sum": n, "max": n}}} for g, n in lags.items()}}


def test_reads_each_committed_offset_once_and_at_most_max_reads_per_fetch(kafka_lab, topic, monkeypatch):
    reads: list[int] = []
    reader = RecordTimes(lambda **extra: {"bootstrap.servers": kafka_lab["bootstrap"], **extra})
    original = reader._read
    monkeypatch.setattr(reader, "_read", lambda offsets: (reads.append(len(offsets)), original(offsets)))
    # "behind" committed offset 2 on every partition (3 behind each), "current" is at the end everywhere.
    committed = {"behind": {topic: [(p, 2) for p in range(PARTITIONS)]},
                 "current": {topic: [(p, RECORDS) for p in range(PARTITIONS)]}}
    try:
        state = admin_state(topic, {"behind": 3 * PARTITIONS, "current": 0})
        reader.add_to(state, [["behind", topic], ["current", topic]], committed.__getitem__)
        assert reads == [MAX_READS]
        first = state["consumer_groups"]["behind"]["lag"][topic]["record_time"]
        assert "record_time" not in state["consumer_groups"]["current"]["lag"][topic]  # nothing behind to read
        state = admin_state(topic, {"behind": 3 * PARTITIONS, "current": 0})
        reader.add_to(state, [["behind", topic]], committed.__getitem__)
        assert reads == [MAX_READS, PARTITIONS - MAX_READS]  # only the offsets not read before
        # Every partition read now: the oldest record at a committed offset is partition 0's third.
        assert state["consumer_groups"]["behind"]["lag"][topic]["record_time"] == 1e9 + 2 <= first
        state = admin_state(topic, {"behind": 3 * PARTITIONS})
        reader.add_to(state, [["behind", topic]], committed.__getitem__)
        assert reads == [MAX_READS, PARTITIONS - MAX_READS, 0]  # all known: nothing read
        assert state["consumer_groups"]["behind"]["lag"][topic]["record_time"] == 1e9 + 2
    finally:
        reader.close()


def test_an_offset_past_the_log_is_given_up_at_its_end_well_within_the_time_budget(kafka_lab, topic, monkeypatch):
    monkeypatch.setattr(record_time, "READ_SECONDS", 30.0)
    reader = RecordTimes(lambda **extra: {"bootstrap.servers": kafka_lab["bootstrap"], **extra})
    try:
        state = admin_state(topic, {"g": 1})
        state["topics"][topic]["partitions"][0]["log_end_offset"] = RECORDS + 10  # an end the log does not have yet
        start = time.monotonic()
        reader.add_to(state, [["g", topic]], lambda _group: {topic: [(0, RECORDS)]})
        assert "record_time" not in state["consumer_groups"]["g"]["lag"][topic]
        assert time.monotonic() - start < 15.0  # the partition's end answered, not the 30 s budget
    finally:
        reader.close()
