"""The __consumer_offsets reader on the lab at 2,000 groups: lag equal to the truth, a view that outlives the
AdminClient process, a fetch that never fails or waits for the reader, OffsetFetch bounded while it catches up."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import wait_until

from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.kafka.admin import FALLBACK_GROUPS, KafkaAdminError
from kdiag.kafka.admin_worker import AdminSession
from kdiag.kafka.client import ClientSettings
from kdiag.kafka.offsets_topic import OffsetsView
from kdiag.kafka.state import AdminState

GROUPS, PARTITIONS, MESSAGES = 2000, 4, 25  # messages per partition


def commit_all(admin: AdminClient, topic: str, offsets: dict[str, int]) -> None:
    """Every group commits its offset on every partition, 200 requests in flight at a time."""
    items = list(offsets.items())
    for start in range(0, len(items), 200):
        futures = [admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            g, [TopicPartition(topic, p, o) for p in range(PARTITIONS)])])[g] for g, o in items[start:start + 200]]
        for future in futures:
            future.result(timeout=60)


@pytest.fixture(scope="module")
def many_groups(kafka_lab) -> Iterator[dict]:
    """A topic of 4 partitions with 25 messages each and 2,000 Empty groups committed at different offsets."""
    bootstrap, suffix = kafka_lab["bootstrap"], uuid.uuid4().hex[:6]
    topic, groups = f"offsetslive-{suffix}", [f"offsetslive-{suffix}-{i:04d}" for i in range(GROUPS)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(timeout=60)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(PARTITIONS * MESSAGES):
            producer.produce(topic, value=b"x", partition=i % PARTITIONS)
        assert producer.flush(60) == 0
        committed = {g: i % (MESSAGES + 1) for i, g in enumerate(groups)}
        commit_all(admin, topic, committed)
        yield {"admin": admin, "bootstrap": bootstrap, "topic": topic, "committed": committed}
    finally:
        for future in [*admin.delete_consumer_groups(groups, request_timeout=60).values(),
                       *admin.delete_topics([topic], request_timeout=30).values()]:
            with contextlib.suppress(Exception):
                future.result(timeout=120)


def truth(topic: str, committed: dict[str, int]) -> dict[str, dict]:
    return {g: {topic: {"sum": PARTITIONS * (MESSAGES - o), "max": MESSAGES - o}} for g, o in committed.items()}


def lags(state: AdminState, groups: dict[str, int]) -> dict[str, dict]:
    return {g: v["lag"] for g, v in state["consumer_groups"].items() if g in groups}


def fetched(collector: KafkaAdminCollector) -> AdminState | None:
    """A fetch's state; None when it failed (the AdminClient process just died)."""
    with contextlib.suppress(KafkaAdminError):
        return collector.fetch()
    return None


@pytest.mark.kafka
def test_the_view_outlives_the_admin_process_and_a_dead_reader_costs_no_fetch(many_groups):
    admin, topic, committed = many_groups["admin"], many_groups["topic"], many_groups["committed"]
    collector = KafkaAdminCollector(many_groups["bootstrap"], committed_offsets="offsets_topic")
    try:
        state = wait_until(lambda: got if (got := collector.fetch()) and collector.offsets_read == 1.0 and
                           lags(got, committed) == truth(topic, committed) else None, 120, "every lag from the reader")
        assert all("last_commit" in state["consumer_groups"][g] for g in committed)
        assert collector.reader is not None
        reader_pid, admin_pid = collector.reader.pid(), collector.worker.pid()
        assert reader_pid is not None and admin_pid is not None
        os.kill(admin_pid, signal.SIGKILL)
        moved = {g: MESSAGES for g in list(committed)[:100]}  # caught up while the AdminClient process is gone
        commit_all(admin, topic, moved)
        committed.update(moved)  # the truth the next test reads too
        state = wait_until(lambda: fetched(collector), 30, "a fetch from a new AdminClient process")
        # Its very first fetch has every group from the reader, which went on reading meanwhile.
        assert collector.offsets_read == 1.0 and collector.reader.pid() == reader_pid
        assert collector.worker.restarts == 1
        wait_until(lambda: lags(collector.fetch(), committed) == truth(topic, committed), 30, "the new commits read")

        os.kill(reader_pid, signal.SIGKILL)
        began = time.monotonic()
        state = collector.fetch()  # no failure: OffsetFetch for a few groups while there is no reader
        assert time.monotonic() - began < collector.timeout and collector.offsets_read == 0.0
        assert 0 < len([g for g, lag in lags(state, committed).items() if lag]) <= FALLBACK_GROUPS
        wait_until(lambda: (got := fetched(collector)) and collector.offsets_read == 1.0 and
                   lags(got, committed) == truth(topic, committed), 120, "a new reader caught up")
        assert collector.reader.pid() != reader_pid
    finally:
        collector.close()


@pytest.mark.kafka
def test_while_the_reader_catches_up_offset_fetch_reads_a_bounded_number_of_groups(many_groups):
    topic, committed = many_groups["topic"], many_groups["committed"]
    session = AdminSession(many_groups["bootstrap"], 10.0, ClientSettings())
    try:
        view = OffsetsView()
        view.update({"read": 0.5})
        state = session.fetch(view=view)
        read = {g: lag for g, lag in lags(state, committed).items() if lag}
        assert len(lags(state, committed)) == GROUPS  # every group listed, with its state
        assert 0 < len(read) <= FALLBACK_GROUPS
        assert read == {g: truth(topic, committed)[g] for g in read}
        assert all("last_commit" not in state["consumer_groups"][g] for g in read)
    finally:
        session.close()
