"""The AdminClient's flat-cost paths on the real lab: log end offsets in batches, the config cache, Empty groups
left undescribed (an AdminSession in this process, as the admin worker runs it), and the partition/group series
filters over real topics and groups (the collector, through its worker)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   OffsetSpec)

from tests.waiting import wait_until

from kdiag.core.cardinality import SeriesFilter
from kdiag.kafka import admin as kafka_admin
from kdiag.kafka import end_offsets
from kdiag.kafka.admin_worker import AdminSession
from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.kafka.client import ClientSettings
from kdiag.core.root import Root

PARTITIONS = 5


@contextlib.contextmanager
def session(bootstrap: str, configs_interval: float = 0.0, quiet_groups_interval: float = 0.0) -> Iterator[AdminSession]:
    """An AdminSession closed before the test deletes its topics (librdkafka #5093: no live clients through a
    deletion)."""
    s = AdminSession(bootstrap, 10.0, ClientSettings(), configs_interval, quiet_groups_interval)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def topics(kafka_lab) -> Iterator[dict]:
    """Two fresh topics, `keep` and `drop`, with i + 1 messages in partition i, and an Empty group committed on both."""
    bootstrap, suffix = kafka_lab["bootstrap"], uuid.uuid4().hex[:6]
    names = {"bootstrap": bootstrap, "keep": f"scaletest-keep-{suffix}", "drop": f"scaletest-drop-{suffix}",
             "group": f"scaletest-group-{suffix}"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        new = [NewTopic(names[t], num_partitions=PARTITIONS, replication_factor=1) for t in ("keep", "drop")]
        for future in admin.create_topics(new, request_timeout=30).values():
            future.result(timeout=60)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for t in ("keep", "drop"):
            for p in range(PARTITIONS):
                for _ in range(p + 1):
                    producer.produce(names[t], value=b"x", partition=p)
        assert producer.flush(60) == 0
        del producer
        committed = [TopicPartition(names[t], p, 0) for t in ("keep", "drop") for p in range(PARTITIONS)]
        group = ConsumerGroupTopicPartitions(names["group"], committed)
        admin.alter_consumer_group_offsets([group], request_timeout=30)[names["group"]].result(timeout=60)
        yield names
    finally:
        futures = list(admin.delete_consumer_groups([names["group"]], request_timeout=30).values())
        futures += admin.delete_topics([names["keep"], names["drop"]], request_timeout=30).values()
        for future in futures:
            with contextlib.suppress(Exception):
                future.result(timeout=60)


def ends(state: dict, topic: str) -> list[int | None]:
    return [p["log_end_offset"] for p in state["topics"][topic]["partitions"]]


@pytest.mark.kafka
@pytest.mark.parametrize("path", ["kafka-python", "librdkafka"])
def test_log_end_offsets_in_batches_match_list_offsets(topics, monkeypatch, path):
    # Batches of 3 over 10 partitions: batch edges fall inside the topics, and the last batch is short.
    monkeypatch.setattr(kafka_admin, "OFFSETS_BATCH", 3)
    monkeypatch.setattr(end_offsets, "PARTITIONS_PER_REQUEST", 3)
    with session(topics["bootstrap"]) as c:
        if path == "librdkafka":
            monkeypatch.setattr(c.batch, "end_offsets", lambda by_leader, deadline: None)
        def complete() -> dict | None:
            state = c.fetch()
            return state if ends(state, topics["keep"]) == [1, 2, 3, 4, 5] else None

        state = wait_until(complete, 30, "every partition's log end offset")
        assert ends(state, topics["drop"]) == [1, 2, 3, 4, 5]
        # The AdminClient's own ListOffsets says the same, for every partition of the cluster.
        wanted = {TopicPartition(t, p["partition"]): OffsetSpec.latest()
                  for t, d in state["topics"].items() for p in d["partitions"] if p["leader"] >= 0}
        futures = c.admin().list_offsets(wanted, request_timeout=30)
        # Other lab users' topics come and go meanwhile: compare only the ones made here.
        for tp, future in futures.items():
            if tp.topic in (topics["keep"], topics["drop"]):
                assert future.result(timeout=30).offset == ends(state, tp.topic)[tp.partition]


@pytest.mark.kafka
def test_a_daemon_that_does_not_report_reads_no_cluster_wide_state(topics):
    """Not full (not the reporter): metadata, and configs of the local broker and its topics; no groups, no offsets."""
    with session(topics["bootstrap"]) as c:
        state = c.fetch(full=False, local_broker=1)
        full = c.fetch()
    assert state["scope"] == "local" and state["consumer_groups"] == {} and "scope" not in full
    assert set(ends(state, topics["keep"])) == {None} and ends(full, topics["keep"]) == [1, 2, 3, 4, 5]
    assert list(state["broker_configs"]) == ["1"] and len(full["broker_configs"]) == len(full["brokers"])
    on_1 = {t for t, d in state["topics"].items() if any(1 in p["replicas"] for p in d["partitions"])}
    assert {t for t, d in state["topics"].items() if d["configs"]} <= on_1
    assert topics["group"] in full["consumer_groups"]


@pytest.mark.kafka
def test_empty_group_lag_without_describing_it(topics):
    with session(topics["bootstrap"]) as c:
        state = c.fetch()
    group = state["consumer_groups"][topics["group"]]
    assert group["state"] == "EMPTY" and group["members"] == 0 and "idle_members" not in group
    assert group["lag"][topics["keep"]] == {"sum": 15, "max": 5}  # partition p has p + 1 messages, all unread


@pytest.mark.kafka
def test_quiet_group_is_read_again_only_after_quiet_groups_interval(topics):
    keep, group, bootstrap = topics["keep"], topics["group"], topics["bootstrap"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with session(bootstrap, quiet_groups_interval=3600) as c:
        wait_until(lambda: ends(c.fetch(), keep) == [1, 2, 3, 4, 5], 30, "every partition's log end offset")
        c.fetch()  # the Empty group's offsets, read twice the same: it is quiet from now on
        moved = ConsumerGroupTopicPartitions(group, [TopicPartition(keep, p, 1) for p in range(PARTITIONS)])
        admin.alter_consumer_group_offsets([moved], request_timeout=30)[group].result(timeout=60)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.produce(keep, value=b"x", partition=0)
        assert producer.flush(60) == 0
        # Its lag still follows the log end offsets, from the offsets read before the commit.
        state = wait_until(lambda: state if ends(state := c.fetch(), keep)[0] == 2 else None, 30, "the new message")
        assert state["consumer_groups"][group]["lag"][keep] == {"sum": 16, "max": 5}
        c.committed.quiet_interval = 0  # the interval is over: the commit shows at the next fetch
        assert c.fetch()["consumer_groups"][group]["lag"][keep] == {"sum": 11, "max": 4}


@pytest.mark.kafka
def test_series_filters_over_real_topics_and_groups(topics):
    keep, drop, group = topics["keep"], topics["drop"], topics["group"]
    c = KafkaAdminCollector(topics["bootstrap"], partition_series=SeriesFilter(allow=["scaletest-keep-.*"]),
                            group_series=SeriesFilter(ignore=[group]))
    try:
        samples = c.collect(Root())
    finally:
        c.close()
    assert c.child_cpu_seconds > 0  # the AdminClient process says what the fetch cost it
    partition_topics = {dict(s.labels)["topic"] for s in samples if s.name == "kdiag_kafka_partition_leader"}
    assert keep in partition_topics and drop not in partition_topics
    offsets = {dict(s.labels)["topic"]: s.value for s in samples if s.name == "kdiag_kafka_topic_log_end_offset_total"}
    assert offsets[keep] == offsets[drop] == 15  # both topics keep their topic series
    lag = [s for s in samples if s.name == "kdiag_kafka_consumergroup_lag" and dict(s.labels)["group"] == group]
    assert [(s.labels, s.value) for s in lag] == [((("group", group),), 30.0)]  # both topics' lag, no topic label


def set_flush_messages(bootstrap: str, topic: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("flush.messages", value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


@pytest.mark.kafka
def test_configs_are_cached_for_configs_interval_but_new_topics_read_at_once(topics):
    keep, late = topics["keep"], f"{topics['keep']}-late"
    admin = AdminClient({"bootstrap.servers": topics["bootstrap"]})
    try:
        with session(topics["bootstrap"], 3600) as cached, session(topics["bootstrap"]) as fresh:
            before = cached.fetch()["topics"][keep]["configs"]["flush.messages"]
            set_flush_messages(topics["bootstrap"], keep, "7")
            wait_until(lambda: fresh.fetch()["topics"][keep]["configs"]["flush.messages"] == "7", 30,
                       "flush.messages=7 seen by a collector without a cache")
            assert cached.fetch()["topics"][keep]["configs"]["flush.messages"] == before
            cached.configs.interval = 0
            assert cached.fetch()["topics"][keep]["configs"]["flush.messages"] == "7"
            cached.configs.interval = 3600
            admin.create_topics([NewTopic(late, 1, 1, config={"flush.messages": "3"})])[late].result(timeout=60)
            wait_until(lambda: cached.fetch()["topics"].get(late, {}).get("configs", {}).get("flush.messages") == "3",
                       30, "the new topic's configs read at once despite the cache")
    finally:
        with contextlib.suppress(Exception):
            admin.delete_topics([late])[late].result(timeout=60)


@pytest.mark.kafka
def test_the_partitions_lagging_most_come_with_the_time_of_their_record_at_the_committed_offset(topics):
    # Room for every lagging partition of a shared lab: the group's own are all among them.
    s = AdminSession(topics["bootstrap"], 10.0, ClientSettings(), top_partitions=100_000)
    try:
        def picked() -> list | None:
            top = [e for e in s.fetch().get("top_partitions", []) if e["group"] == topics["group"]]
            return top if len(top) == 2 * PARTITIONS else None

        top = wait_until(picked, 60, "the group's lagging partitions")

        def read() -> bool:
            # The group's own only: a shared lab's other lagging partitions would be read first in a fetch.
            s.record_times.add_to_partitions(top)
            return all("record_time" in e for e in top)

        wait_until(read, 60, "the records at the group's committed offsets")
    finally:
        s.close()
    # Partition i holds i + 1 messages and the group committed 0 on both topics.
    assert sorted(e["lag"] for e in top) == sorted(2 * [p + 1 for p in range(PARTITIONS)])
    assert {e["committed"] for e in top} == {0} and [e["lag"] for e in top] == sorted((e["lag"] for e in top), reverse=True)
    assert all(abs(e["record_time"] - time.time()) < 600 for e in top)
