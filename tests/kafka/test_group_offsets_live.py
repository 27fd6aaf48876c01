"""Batched OffsetFetch on the lab: 600 groups of 500 committed partitions (answers over kafka-python's default 1 MB
frame) read in one request per coordinator and 200 groups, equal to librdkafka's per-group answers, and a group whose
coordinator moved read again."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import wait_until

from kdiag.kafka.admin import FALLBACK_GROUPS
from kdiag.kafka.admin_worker import AdminSession
from kdiag.kafka.client import ClientSettings
from kdiag.kafka.group_offsets import BATCH_GROUPS, BatchedReads, GroupOffsetsClient, batch_settings
from kdiag.kafka.jars import classpath
from kdiag.kafka.jmx_reader import JmxReader

pytestmark = pytest.mark.kafka
GROUPS = 600
PARTITIONS = 500  # a coordinator's answer for its ~200 groups: about 2 MB
MESSAGES = 10
# An MBean per request type and version, made at its first request: all are read, OffsetFetch's summed.
REQUESTS = "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,version=*"


@pytest.fixture
def committed(kafka_lab) -> Iterator[dict]:
    """GROUPS groups on a fresh topic of MESSAGES messages per partition, group i committed at i % 7 everywhere."""
    if kafka_lab["brokers"] < 3:
        pytest.skip("needs `kdiag lab up --brokers 3`")
    bootstrap, suffix = kafka_lab["bootstrap"], uuid.uuid4().hex[:6]
    topic, groups = f"batchtest-{suffix}", [f"batchtest-{suffix}-{i}" for i in range(GROUPS)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    wait_until(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == PARTITIONS, 30, "the topic")
    for p in range(PARTITIONS):
        for _ in range(MESSAGES):
            producer.produce(topic, b"x", partition=p)
    assert producer.flush(30) == 0
    futures = [admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(g, [TopicPartition(topic, p, i % 7) for p in range(PARTITIONS)])],
        request_timeout=30)[g] for i, g in enumerate(groups)]
    for future in futures:
        assert not any(tp.error for tp in future.result(timeout=60).topic_partitions)
    truth = {g: sorted((topic, p, i % 7) for p in range(PARTITIONS)) for i, g in enumerate(groups)}
    try:
        yield {"bootstrap": bootstrap, "topic": topic, "groups": groups, "truth": truth}
    finally:
        for future in admin.delete_consumer_groups(groups, request_timeout=60).values():
            future.exception(timeout=60)
        admin.delete_topics([topic])[topic].exception(timeout=30)


def committed_at(admin: AdminClient, group: str, topic: str, offset: int) -> list[tuple[str, int, int]]:
    """Commit `offset` on partition 0 of topic for the group (an error while the new topic spreads: none), then
    what the group has."""
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, offset)])],
                                       request_timeout=30)[group].result(timeout=30)
    answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    return [(tp.topic, tp.partition, tp.offset) for tp in answer.topic_partitions if not tp.error]


def batched_read(batched: BatchedReads, groups: list[str], deadline: float) -> dict[str, list[tuple[str, int, int]]]:
    """What a batched read hands on, per group: (topic, partition, offset) sorted."""
    got: dict[str, list[tuple[str, int, int]]] = {}
    answered = batched.read(groups, deadline, lambda g, read: got.__setitem__(g, sorted(read)))
    assert answered == set(got)
    return got


def client_fetch(client: GroupOffsetsClient, groups: list[str], deadline: float) -> dict[str, list[tuple[str, int, int]]]:
    """What one fetch of the client hands on, per group."""
    got: dict[str, list[tuple[str, int, int]]] = {}
    answered: set[str] = set()
    client.fetch(groups, deadline, lambda g, read: got.__setitem__(g, sorted(read)), answered)
    assert answered == set(got)
    return got


def offset_fetches(readers: list[JmxReader]) -> float:
    """OffsetFetch requests the brokers answered so far, from a row read after this call began."""
    asked = time.monotonic()
    wait_until(lambda: all(r.latest is not None and r.latest[0] > asked for r in readers), 60, "fresh JMX rows")
    # Version 8 only: the batched requests (librdkafka's consumers and admin calls ask v9 of these brokers).
    return sum(v for r in readers for k, v in (r.latest or (0, {}))[1].items()
               if ",request=OffsetFetch,version=8|" in k and k.endswith("|Count"))


def test_600_groups_take_one_offset_fetch_per_coordinator_and_agree_with_librdkafka(committed, kafka_lab):
    batched = BatchedReads(ClientSettings(), committed["bootstrap"], 10.0)
    # A broker makes its OffsetFetch v8 MBean at the first such request, and JmxTool matches its pattern when it
    # starts: on a fresh lab the counted read must not be the first.
    batched_read(batched, committed["groups"], time.monotonic() + 60)
    readers = [JmxReader(url, classpath(kafka_lab["dir"]), 0.5, (REQUESTS,), ("Count",), "java")
               for url in kafka_lab["jmx"].values()]
    try:
        before = offset_fetches(readers)
        got = batched_read(batched, committed["groups"], time.monotonic() + 60)
        # A broker counts a request once its answer is written: wait for the count to move and then hold still.
        counts = [before]
        wait_until(lambda: counts.append(offset_fetches(readers)) or counts[-1] == counts[-2] > before, 120,
                   "the brokers' OffsetFetch count to settle")
        sent = counts[-1] - before
    finally:
        batched.close()
        for reader in readers:
            reader.close()
    assert got == committed["truth"]
    # A request per coordinator and BATCH_GROUPS groups; per group: 600.
    assert 1 <= sent <= GROUPS // BATCH_GROUPS + len(kafka_lab["jmx"])
    admin = AdminClient({"bootstrap.servers": committed["bootstrap"]})
    for g in committed["groups"][:20]:
        answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)])[g].result(timeout=30)
        assert sorted((tp.topic, tp.partition, tp.offset) for tp in answer.topic_partitions) == committed["truth"][g]


def test_a_group_whose_coordinator_moved_is_left_out_then_found_again(committed, kafka_lab):
    client = GroupOffsetsClient(batch_settings(ClientSettings(), committed["bootstrap"], 10.0))  # type: ignore[arg-type]
    groups = committed["groups"]
    try:
        assert len(client_fetch(client, groups, time.monotonic() + 60)) == GROUPS
        brokers = sorted(int(b) for b in kafka_lab["pids"])  # the groups' coordinators may all be one broker
        moved = groups[:10]
        for g in moved:  # what a client believes after the group's coordinator moved to another broker
            client._coordinators[g] = next(b for b in brokers if b != client._coordinators[g])
        got = client_fetch(client, groups, time.monotonic() + 60)
        assert set(got) == set(groups) - set(moved) and not set(moved) & set(client._coordinators)
        assert client_fetch(client, groups, time.monotonic() + 60) == committed["truth"]
    finally:
        client.close()


def test_the_admin_state_reads_the_groups_the_batch_left_out_a_group_a_request(committed, kafka_lab):
    session = AdminSession(committed["bootstrap"], 20.0, ClientSettings())
    try:
        session.fetch()
        assert session.batch.client is not None
        known = session.batch.client._coordinators
        moved = committed["groups"][:10]
        for g in moved:
            known[g] = next(int(b) for b in kafka_lab["pids"] if int(b) != known[g])
        groups = session.fetch()["consumer_groups"]
    finally:
        session.close()
    lag = MESSAGES * PARTITIONS
    for i, g in enumerate(committed["groups"]):
        assert groups[g]["lag"] == {committed["topic"]: {"sum": lag - PARTITIONS * (i % 7), "max": MESSAGES - i % 7}}


def test_a_batch_cut_short_leaves_most_groups_to_the_next_fetch_and_reads_a_few_a_group_a_request(committed, kafka_lab):
    # Every group of the test told the wrong coordinator before the first fetch: the batch answers none of them.
    finder = GroupOffsetsClient(batch_settings(ClientSettings(), committed["bootstrap"], 10.0))  # type: ignore[arg-type]
    try:
        client_fetch(finder, committed["groups"], time.monotonic() + 60)
        real = dict(finder._coordinators)
    finally:
        finder.close()
    brokers = sorted(int(b) for b in kafka_lab["pids"])
    session = AdminSession(committed["bootstrap"], 30.0, ClientSettings())
    try:
        assert session.batch.client is not None
        session.batch.client._coordinators.update(
            {g: next(b for b in brokers if b != real[g]) for g in committed["groups"]})
        first = session.fetch()["consumer_groups"]
        second = session.fetch()["consumer_groups"]
    finally:
        session.close()
    read_first = [g for g in sorted(committed["groups"]) if first[g]["lag"]]
    # Those with members first, then by id: the test's groups are all Empty.
    assert 0 < len(read_first) <= FALLBACK_GROUPS and read_first == sorted(committed["groups"])[:len(read_first)]
    lag = MESSAGES * PARTITIONS
    for i, g in enumerate(committed["groups"]):
        assert second[g]["lag"] == {committed["topic"]: {"sum": lag - PARTITIONS * (i % 7), "max": MESSAGES - i % 7}}


def test_scram_over_tls_reads_through_the_translated_settings(secure_lab):
    kafka = yaml.safe_load(Path(secure_lab["config"]).read_text())["kafka"]
    settings = ClientSettings.resolve(kafka["client"])
    group = f"kdiag-batchtest-{uuid.uuid4().hex[:6]}"  # the ACLs the lab grants kdiag cover kdiag-*
    admin = AdminClient(secure_lab["client"])
    topic = f"{group}-topic"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    try:
        wait_until(lambda: committed_at(admin, group, topic, 5) == [(topic, 0, 5)], 60, "the group's commit")
        batched = BatchedReads(settings, kafka["bootstrap_servers"], 10.0)
        try:
            assert batched_read(batched, [group], time.monotonic() + 30) == {group: [(topic, 0, 5)]}
        finally:
            batched.close()
    finally:
        admin.delete_consumer_groups([group])[group].exception(timeout=30)
        admin.delete_topics([topic])[topic].exception(timeout=30)
