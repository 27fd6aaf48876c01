"""OffsetsTable folding the records real brokers wrote into the offsets their OffsetFetch answered, and the reader on
the lab: the same lag as the OffsetFetch path for every group, with commit times, as commits and deletions come."""

from __future__ import annotations

import contextlib
import json
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.paths import FIXTURES
from tests.waiting import wait_until

from kdiag.kafka.admin_worker import AdminSession
from kdiag.kafka.client import ClientSettings
from kdiag.kafka.offsets_topic import OffsetsTable

CAPTURES = sorted((FIXTURES / "kafka" / "consumer-offsets").glob("kafka-*.json"))


def _table(capture: dict) -> OffsetsTable:
    table = OffsetsTable()
    for record in capture["records"]:
        table.apply(bytes.fromhex(record["key"]), None if record["value"] is None else bytes.fromhex(record["value"]))
    return table


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
def test_the_records_fold_into_what_offset_fetch_answered(path):
    capture = json.loads(path.read_text())
    table = _table(capture)
    for group, fetched in capture["offset_fetch"].items():
        folded = {f"{t}:{p}": o for t, parts in table.get(group).items() for p, o in parts}
        assert folded == fetched
        assert table.last_commit(group) is not None
    gone = capture["groups"]["gone"]
    assert table.get(gone) == {} and table.last_commit(gone) is None and gone not in table.groups
    assert table.groups[capture["groups"]["live"]].protocol_type == "consumer" and table.malformed == 0


def test_a_malformed_record_is_counted_and_the_others_still_fold():
    capture = json.loads(CAPTURES[0].read_text())
    table = OffsetsTable()
    table.apply(struct.pack(">h", 1) + b"\x7f\xff", b"")
    table.apply(None, b"x")
    for record in capture["records"]:
        table.apply(bytes.fromhex(record["key"]), None if record["value"] is None else bytes.fromhex(record["value"]))
    assert table.malformed == 2
    live = capture["groups"]["live"]
    assert {f"{t}:{p}": o for t, parts in table.get(live).items() for p, o in parts} == capture["offset_fetch"][live]


@pytest.fixture
def lab_groups(kafka_lab) -> Iterator[dict]:
    """A topic of 4 partitions with 10 messages each, and 6 Empty groups committed at different offsets."""
    bootstrap, suffix = kafka_lab["bootstrap"], uuid.uuid4().hex[:6]
    topic, groups = f"offsetstopic-{suffix}", [f"offsetstopic-{suffix}-{i}" for i in range(6)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])[topic].result(timeout=60)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(40):
            producer.produce(topic, value=b"x", partition=i % 4)
        assert producer.flush(60) == 0
        for i, group in enumerate(groups):
            commit(admin, group, [TopicPartition(topic, p, (i + p) % 11) for p in range(4)])
        yield {"admin": admin, "bootstrap": bootstrap, "topic": topic, "groups": groups}
    finally:
        for future in [*admin.delete_consumer_groups(groups, request_timeout=30).values(),
                       *admin.delete_topics([topic], request_timeout=30).values()]:
            with contextlib.suppress(Exception):
                future.result(timeout=60)


def commit(admin: AdminClient, group: str, offsets: list[TopicPartition]) -> None:
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])[group].result(timeout=60)


@contextlib.contextmanager
def sessions(bootstrap: str) -> Iterator[tuple[AdminSession, AdminSession]]:
    """Today's OffsetFetch path and the __consumer_offsets reader, side by side."""
    fetch, topic = (AdminSession(bootstrap, 10.0, ClientSettings(), committed_offsets=c)
                    for c in ("offset_fetch", "offsets_topic"))
    try:
        yield fetch, topic
    finally:
        fetch.close()
        topic.close()


def lags(session: AdminSession, groups: list[str]) -> dict[str, dict]:
    state = session.fetch()
    return {g: state["consumer_groups"][g]["lag"] for g in groups if g in state["consumer_groups"]}


@pytest.mark.kafka
def test_the_reader_gives_the_lag_offset_fetch_gives_through_commits_and_deletions(lab_groups):
    admin, topic, groups = lab_groups["admin"], lab_groups["topic"], lab_groups["groups"]
    with sessions(lab_groups["bootstrap"]) as (by_fetch, by_topic):
        expected = wait_until(lambda: got if len(got := lags(by_fetch, groups)) == len(groups) else None, 30,
                              "every group listed with its lag")
        assert lags(by_topic, groups) == expected
        before = time.time()
        commit(admin, groups[0], [TopicPartition(topic, p, 10) for p in range(4)])  # caught up
        admin.delete_consumer_groups([groups[1]])[groups[1]].result(timeout=60)
        expected = wait_until(lambda: got if groups[1] not in (got := lags(by_fetch, groups)) else None, 30,
                              "the deleted group gone")
        state = by_topic.fetch()
        assert {g: state["consumer_groups"][g]["lag"] for g in expected} == expected
        assert expected[groups[0]][topic] == {"sum": 0, "max": 0}
        assert state["consumer_groups"][groups[0]]["last_commit"] >= before - 1
        assert state["consumer_groups"][groups[2]]["last_commit"] < before
        assert "last_commit" not in by_fetch.fetch()["consumer_groups"][groups[0]]
        assert by_topic.reader is not None and by_topic.reader.table.malformed == 0


@pytest.mark.kafka
def test_a_standby_fetch_stops_reading_the_topic_and_the_next_full_fetch_reads_it_again(lab_groups):
    topic, group = lab_groups["topic"], lab_groups["groups"][3]
    with sessions(lab_groups["bootstrap"]) as (by_fetch, by_topic):
        assert by_topic.fetch()["consumer_groups"][group]["lag"] == by_fetch.fetch()["consumer_groups"][group]["lag"]
        assert by_topic.reader is not None and by_topic.reader.offsets([group])[group][0]
        by_topic.fetch(full=False)
        assert by_topic.reader.offsets([group])[group][0] == {}
        assert by_topic.fetch()["consumer_groups"][group]["lag"][topic] == by_fetch.fetch()["consumer_groups"][group][
            "lag"][topic]
