"""OffsetsTable folding the records real brokers wrote into the offsets their OffsetFetch answered, and the reader on
the lab: the same lag as the OffsetFetch path for every group, with commit times, as commits and deletions come."""

from __future__ import annotations

import contextlib
import json
import marshal
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.paths import FIXTURES
from tests.waiting import wait_until

from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.kafka.state import AdminState
from kdiag.kafka.offsets_topic import OffsetsTable, OffsetsView

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


def travelled(table: OffsetsTable, full: bool) -> dict:
    """The reader's answer as the AdminClient process gets it: marshal from the reader's process, a JSON line on."""
    return json.loads(json.dumps(marshal.loads(marshal.dumps({"read": 1.0, "full": full, "groups": table.view(full)}))))


def folded(view: OffsetsView, group: str) -> dict[str, int]:
    return {f"{t}:{p}": o for t, parts in view.offsets(group)[0].items() for p, o in parts}


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
def test_the_copy_an_admin_fetch_reads_holds_the_latest_commit_of_every_group_and_no_deleted_one(path):
    capture = json.loads(path.read_text())
    records = [(bytes.fromhex(r["key"]), None if r["value"] is None else bytes.fromhex(r["value"]))
               for r in capture["records"]]
    gone = capture["groups"]["gone"]
    # Every group at first, then only what changed: the same copy wherever the records are split.
    for split in range(len(records) + 1):
        table, view = OffsetsTable(), OffsetsView()
        for key, value in records[:split]:
            table.apply(key, value)
        view.update(travelled(table, True))
        for key, value in records[split:]:
            table.apply(key, value)
        delta = travelled(table, False)
        assert len(delta["groups"]) <= len(capture["offset_fetch"]) + 1
        view.update(delta)
        assert view.caught_up
        for group, fetched in capture["offset_fetch"].items():
            assert folded(view, group) == fetched
            assert view.offsets(group)[1] == table.last_commit(group) is not None
        assert view.offsets(gone) == ({}, None)
    assert travelled(table, False)["groups"] == {}  # nothing changed since


def test_a_full_answer_replaces_the_copy_and_one_before_the_first_read_is_done_leaves_it():
    capture = json.loads(CAPTURES[0].read_text())
    view = OffsetsView()
    view.update(travelled(_table(capture), True))
    live = capture["groups"]["live"]
    assert folded(view, live) == capture["offset_fetch"][live]
    view.update({"read": 0.4})
    assert not view.caught_up and folded(view, live) == capture["offset_fetch"][live]
    view.update({"read": 1.0, "full": True, "groups": {}})  # a new reader's: the groups it has, and only those
    assert view.caught_up and view.offsets(live) == ({}, None)


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
def collectors(bootstrap: str) -> Iterator[tuple[KafkaAdminCollector, KafkaAdminCollector]]:
    """Today's OffsetFetch path and the __consumer_offsets reader, side by side."""
    by_fetch, by_topic = (KafkaAdminCollector(bootstrap, committed_offsets=c) for c in ("offset_fetch", "offsets_topic"))
    try:
        yield by_fetch, by_topic
    finally:
        by_fetch.close()
        by_topic.close()


def lags(collector: KafkaAdminCollector, groups: list[str]) -> dict[str, dict]:
    state = collector.fetch()
    return {g: state["consumer_groups"][g]["lag"] for g in groups if g in state["consumer_groups"]}


def read_through(collector: KafkaAdminCollector) -> AdminState:
    """A fetch whose committed offsets came from the reader, once it has read the topic up to where it was."""
    return wait_until(lambda: state if (state := collector.fetch()) and collector.offsets_read == 1.0 else None, 60,
                      "the reader caught up")


@pytest.mark.kafka
def test_the_reader_gives_the_lag_offset_fetch_gives_through_commits_and_deletions(lab_groups):
    admin, topic, groups = lab_groups["admin"], lab_groups["topic"], lab_groups["groups"]
    with collectors(lab_groups["bootstrap"]) as (by_fetch, by_topic):
        expected = wait_until(lambda: got if len(got := lags(by_fetch, groups)) == len(groups) else None, 30,
                              "every group listed with its lag")
        read_through(by_topic)
        assert lags(by_topic, groups) == expected
        before = time.time()
        commit(admin, groups[0], [TopicPartition(topic, p, 10) for p in range(4)])  # caught up
        admin.delete_consumer_groups([groups[1]])[groups[1]].result(timeout=60)
        expected = wait_until(lambda: got if groups[1] not in (got := lags(by_fetch, groups)) else None, 30,
                              "the deleted group gone")
        state = wait_until(lambda: got if (got := by_topic.fetch())["consumer_groups"][groups[0]].get(
            "last_commit", 0) >= before - 1 else None, 30, "the new commit read")
        assert {g: state["consumer_groups"][g]["lag"] for g in expected} == expected
        assert expected[groups[0]][topic] == {"sum": 0, "max": 0}
        assert state["consumer_groups"][groups[2]]["last_commit"] < before
        assert "last_commit" not in by_fetch.fetch()["consumer_groups"][groups[0]]


@pytest.mark.kafka
def test_a_standby_fetch_stops_the_reader_and_the_next_full_fetch_reads_the_topic_again(lab_groups):
    topic, group = lab_groups["topic"], lab_groups["groups"][3]
    with collectors(lab_groups["bootstrap"]) as (by_fetch, by_topic):
        assert read_through(by_topic)["consumer_groups"][group]["lag"] == by_fetch.fetch()["consumer_groups"][group][
            "lag"]
        assert by_topic.reader is not None and by_topic.reader.pid() is not None
        by_topic.set_full(False)
        assert by_topic.fetch()["consumer_groups"] == {}
        assert by_topic.reader.pid() is None and by_topic.offsets_read is None
        by_topic.set_full(True)
        assert read_through(by_topic)["consumer_groups"][group]["lag"][topic] == by_fetch.fetch()["consumer_groups"][
            group]["lag"][topic]
