"""AdminClient collector: pure samples on a state captured from the lab, and live runs against the lab.

Recapture the fixture with `python3 -m tests.collectors.kafka.test_admin` while `kdiag lab up --brokers 3` runs.
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.collectors.golden import FIXTURES, assert_golden
from tests.waiting import wait_until

from kdiag.collectors.kafka.admin import KafkaAdminCollector, own_groups, own_topics
from kdiag.config.settings import Config
from kdiag.kafka.admin import KafkaAdminError
from kdiag.collectors.kafka.admin_samples import config_number, samples_from_admin_state
from kdiag.core.archive import KAFKA_STATE_VERSION
from kdiag.core.root import Root, SnapshotRoot, TeeRoot
from kdiag.core.sample import COUNTER, Sample

STATE = FIXTURES / "kafka" / "admin-state.json"
PARTITIONS = 6
MESSAGES = 120
CONSUMED = 40


def load_state() -> dict:
    """The admin state captured from the 3-broker lab."""
    return json.loads(STATE.read_text())


def values(samples: list[Sample], name: str, /, **labels: object) -> dict[tuple[tuple[str, str], ...], float]:
    """Labels -> value of the samples named `name` whose labels include `labels`."""
    want = {(k, str(v)) for k, v in labels.items()}
    return {s.labels: s.value for s in samples if s.name == name and want <= set(s.labels)}


def value(samples: list[Sample], name: str, /, **labels: object) -> float:
    """The value of the one sample named `name` with exactly these labels."""
    key = tuple(sorted((k, str(v)) for k, v in labels.items()))
    found = [s.value for s in samples if s.name == name and s.labels == key]
    assert len(found) == 1, f"{name}{labels}: {found}"
    return found[0]


# --- pure tests on the captured state ---------------------------------------------------------------


def test_golden():
    assert_golden("kafka-admin-lab", samples_from_admin_state(load_state()))


def test_fixture_shows_the_skew_and_forced_flush():
    samples = samples_from_admin_state(load_state())
    assert value(samples, "kdiag_kafka_brokers") == 3
    assert value(samples, "kdiag_kafka_topic_broker_leaders", topic="admintest-skew", broker_id=1) == PARTITIONS
    assert value(samples, "kdiag_kafka_topic_broker_leaders", topic="admintest-skew", broker_id=2) == 0
    balanced = values(samples, "kdiag_kafka_topic_broker_leaders", topic="admintest-balanced")
    assert sorted(balanced.values()) == [2, 2, 2]
    assert value(samples, "kdiag_kafka_topic_config", topic="admintest-skew", name="flush.messages") == 1
    assert value(samples, "kdiag_kafka_topic_config", topic="admintest-balanced", name="flush.messages") == float(2**63 - 1)
    assert value(samples, "kdiag_kafka_topic_config", topic="admintest-skew", name="unclean.leader.election.enable") == 0
    assert value(samples, "kdiag_kafka_consumergroup_lag", group="admintest-lag", topic="admintest-balanced") == MESSAGES - CONSUMED
    assert value(samples, "kdiag_kafka_topic_log_end_offset_total", topic="admintest-balanced") == MESSAGES


def test_topic_overrides_and_where_broker_configs_are_set_are_kept():
    samples = samples_from_admin_state(load_state())
    assert value(samples, "kdiag_kafka_topic_config_override", topic="admintest-skew", name="flush.messages") == 1
    # Inherited values (here the controller's cluster-wide min.insync.replicas) are not the topic's own.
    assert not values(samples, "kdiag_kafka_topic_config_override", topic="admintest-balanced")
    assert value(samples, "kdiag_kafka_broker_config_source_info", broker_id=1, name="log.dirs", source="STATIC_BROKER_CONFIG") == 1


def test_a_state_recorded_before_config_sources_still_reads():
    state = load_state()
    del state["broker_config_sources"]
    for t in state["topics"].values():
        del t["config_sources"]
    samples = samples_from_admin_state(state)
    assert value(samples, "kdiag_kafka_topic_config", topic="admintest-skew", name="flush.messages") == 1
    assert not values(samples, "kdiag_kafka_topic_config_override")


def test_broker_configs_null_flush_ms_is_omitted_and_log_dirs_kept():
    state = load_state()
    assert state["broker_configs"]["1"]["log.flush.interval.ms"] is None
    samples = samples_from_admin_state(state)
    names = {dict(s.labels)["name"] for s in samples if s.name == "kdiag_kafka_broker_config"}
    assert "log.flush.interval.ms" not in names and "log.dirs" not in names
    assert "log.flush.interval.messages" in names and "auto.leader.rebalance.enable" in names
    assert len(values(samples, "kdiag_kafka_broker_log_dirs_info")) == 3


def test_partition_series_capped():
    state = load_state()
    total = sum(len(t["partitions"]) for t in state["topics"].values())
    assert values(samples_from_admin_state(state, max_partition_series=total), "kdiag_kafka_partition_leader")
    capped = samples_from_admin_state(state, max_partition_series=total - 1)
    assert not [s for s in capped if s.name.startswith("kdiag_kafka_partition_")]
    assert values(capped, "kdiag_kafka_topic_log_end_offset_total")


def test_offline_under_replicated_and_under_min_isr():
    state = copy.deepcopy(load_state())
    topic = state["topics"]["admintest-balanced"]
    topic["configs"]["min.insync.replicas"] = "2"
    topic["partitions"][0].update(leader=-1, isr=[])
    topic["partitions"][1]["isr"] = topic["partitions"][1]["isr"][:2]
    samples = samples_from_admin_state(state)
    labels = {"topic": "admintest-balanced"}
    assert value(samples, "kdiag_kafka_topic_offline_partitions", **labels) == 1
    assert value(samples, "kdiag_kafka_topic_under_replicated_partitions", **labels) == 2
    assert value(samples, "kdiag_kafka_topic_under_min_isr_partitions", **labels) == 1
    assert value(samples, "kdiag_kafka_partition_leader", partition=0, **labels) == -1


def test_kinds_and_families():
    samples = samples_from_admin_state(load_state())
    counters = {s.name for s in samples if s.kind == COUNTER}
    assert counters == {"kdiag_kafka_topic_log_end_offset_total", "kdiag_kafka_partition_log_end_offset_total"}
    assert {s.name for s in samples} <= {f.name for f in KafkaAdminCollector.families}
    # Samples built from labels made by hand are what the family's checked constructor makes of the same labels.
    families = {f.name: f for f in KafkaAdminCollector.families}
    assert [families[s.name].sample(s.value, **dict(s.labels)) for s in samples] == samples


def test_config_number():
    assert config_number("true") == 1 and config_number("false") == 0
    assert config_number("9223372036854775807") == float(2**63 - 1)
    assert config_number(None) is None and config_number("/data/kafka") is None


def test_snapshot_replay_never_connects(tmp_path):
    (tmp_path / "meta.json").write_text('{"time": 1764430000.0}')
    (tmp_path / "kafka.json").write_text(json.dumps({"version": KAFKA_STATE_VERSION, "sources": {"admin": load_state()}}))
    collector = KafkaAdminCollector("127.0.0.1:1")
    assert collector.collect(SnapshotRoot(tmp_path)) == samples_from_admin_state(load_state())
    assert collector.worker.pid() is None


def test_kdiags_own_groups_are_left_out_of_the_consumer_group_samples(tmp_path):
    state = load_state()
    user_group = next(iter(state["consumer_groups"]))
    for own in ("kdiag-coordination", "kdiag-probe-broker-1"):
        state["consumer_groups"][own] = copy.deepcopy(state["consumer_groups"][user_group])
    (tmp_path / "meta.json").write_text('{"time": 1764430000.0}')
    (tmp_path / "kafka.json").write_text(json.dumps({"version": KAFKA_STATE_VERSION, "sources": {"admin": state}}))
    own = KafkaAdminCollector("127.0.0.1:1", own_groups=("kdiag-coordination", "kdiag-probe-*"))
    groups = {dict(s.labels).get("group") for s in own.collect(SnapshotRoot(tmp_path))}
    assert user_group in groups and not groups & {"kdiag-coordination", "kdiag-probe-broker-1"}
    everyone = {dict(s.labels).get("group") for s in KafkaAdminCollector("127.0.0.1:1").collect(SnapshotRoot(tmp_path))}
    assert {"kdiag-coordination", "kdiag-probe-broker-1"} <= everyone  # without own_groups: as any other group
    assert own_groups(Config()) == ("kdiag-coordination", "kdiag-probe-*")  # what `kdiag run` hands the collector


def test_kdiags_own_topics_are_marked_as_its_own(tmp_path):
    state = load_state()
    user_topic = next(iter(state["topics"]))
    state["topics"]["kdiag-probe-replicas"] = copy.deepcopy(state["topics"][user_topic])
    (tmp_path / "meta.json").write_text('{"time": 1764430000.0}')
    (tmp_path / "kafka.json").write_text(json.dumps({"version": KAFKA_STATE_VERSION, "sources": {"admin": state}}))
    collector = KafkaAdminCollector("127.0.0.1:1", own_topics=own_topics(Config()))
    samples = collector.collect(SnapshotRoot(tmp_path))
    assert values(samples, "kdiag_kafka_topic_kdiag_own") == {(("topic", "kdiag-probe-replicas"),): 1.0}
    assert values(samples, "kdiag_kafka_topic_partitions", topic="kdiag-probe-replicas")  # still exported
    assert own_topics(Config()) == ("kdiag-probe", "kdiag-probe-replicas", "__kdiag_coordination",
                                    "__kdiag_coordination_state")


# --- live tests against `kdiag lab` -------------------------------------------------------------------


def _ready(admin, topic: str) -> bool:
    """Whether every partition of a new topic has a leader."""
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return len(parts) == PARTITIONS and all(p.leader >= 0 and not p.error for p in parts.values())


def create_topics(bootstrap: str, skew: str, balanced: str) -> None:
    """`skew`: every leader on broker 1, flush.messages=1; `balanced`: leaders spread by Kafka; both RF 3."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    skewed = [[1, 2, 3] if p % 2 else [1, 3, 2] for p in range(PARTITIONS)]
    new = [
        NewTopic(skew, num_partitions=PARTITIONS, replica_assignment=skewed, config={"flush.messages": "1"}),
        NewTopic(balanced, num_partitions=PARTITIONS, replication_factor=3),
    ]
    for future in admin.create_topics(new, request_timeout=30).values():
        future.result(timeout=30)
    wait_until(lambda: all(_ready(admin, t) for t in (skew, balanced)), 30, "topic leaders")


def cleanup(bootstrap: str, topics: tuple[str, ...], groups: tuple[str, ...] = ()) -> None:
    """Delete the test topics and groups, ignoring ones already gone."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = list(admin.delete_topics(list(topics), request_timeout=30).values())
    if groups:
        futures += admin.delete_consumer_groups(list(groups), request_timeout=30).values()
    for future in futures:
        with contextlib.suppress(Exception):
            future.result(timeout=30)


def produce(bootstrap: str, topics: tuple[str, ...]) -> None:
    """MESSAGES keyed messages to each topic, all acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for topic in topics:
        for i in range(MESSAGES):
            producer.produce(topic, key=f"key-{i}", value=f"value-{i}")
    assert producer.flush(30) == 0


@contextlib.contextmanager
def lagging_group(bootstrap: str, group: str, topic: str) -> Iterator[None]:
    """A live group member that consumed CONSUMED messages of `topic` and committed every partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "max.poll.interval.ms": 300000,
        }
    )
    consumer.subscribe([topic])
    try:
        positions = {p: 0 for p in range(PARTITIONS)}
        consumed, end = 0, time.monotonic() + 60
        while consumed < CONSUMED:
            assert time.monotonic() < end, "consumer got too few messages"
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            positions[msg.partition()] = msg.offset() + 1
            consumed += 1
        # Commit every partition, read or not, so the group's lag is exactly MESSAGES - CONSUMED.
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False)
        yield
    finally:
        consumer.close()


@pytest.fixture
def lab_topics(kafka_lab) -> Iterator[dict]:
    """Fresh skewed and balanced topics with messages and a lagging group in the lab."""
    if kafka_lab["brokers"] < 3:
        pytest.skip("needs `kdiag lab up --brokers 3`")
    suffix = uuid.uuid4().hex[:6]
    names = {
        "bootstrap": kafka_lab["bootstrap"],
        "skew": f"admintest-skew-{suffix}",
        "balanced": f"admintest-balanced-{suffix}",
        "group": f"admintest-lag-{suffix}",
    }
    try:
        create_topics(names["bootstrap"], names["skew"], names["balanced"])
        produce(names["bootstrap"], (names["skew"], names["balanced"]))
        with lagging_group(names["bootstrap"], names["group"], names["balanced"]):
            yield names
    finally:
        cleanup(names["bootstrap"], (names["skew"], names["balanced"]), (names["group"],))


@pytest.mark.kafka
def test_live_leaders_configs_and_lag(lab_topics):
    with contextlib.closing(KafkaAdminCollector(lab_topics["bootstrap"])) as collector:
        samples = collector.collect(Root())
    skew, balanced, group = lab_topics["skew"], lab_topics["balanced"], lab_topics["group"]
    assert value(samples, "kdiag_kafka_brokers") == 3
    assert {dict(k)["broker_id"]: v for k, v in values(samples, "kdiag_kafka_topic_broker_leaders", topic=skew).items()} == {
        "1": PARTITIONS,
        "2": 0,
        "3": 0,
    }
    assert sorted(values(samples, "kdiag_kafka_topic_broker_leaders", topic=balanced).values()) == [2, 2, 2]
    assert value(samples, "kdiag_kafka_topic_config", topic=skew, name="flush.messages") == 1
    assert value(samples, "kdiag_kafka_topic_replication_factor", topic=skew) == 3
    assert value(samples, "kdiag_kafka_topic_under_replicated_partitions", topic=skew) == 0
    assert value(samples, "kdiag_kafka_topic_log_end_offset_total", topic=skew) == MESSAGES
    assert value(samples, "kdiag_kafka_consumergroup_members", group=group) == 1
    assert value(samples, "kdiag_kafka_consumergroup_lag", group=group, topic=balanced) == MESSAGES - CONSUMED
    assert 0 < value(samples, "kdiag_kafka_consumergroup_lag_max", group=group, topic=balanced) <= MESSAGES - CONSUMED
    assert value(samples, "kdiag_kafka_broker_config", broker_id=1, name="num.io.threads") > 0


@pytest.mark.kafka
def test_live_recording_replays_the_same_samples(lab_topics, tmp_path):
    tee = TeeRoot(Root(), tmp_path)
    with contextlib.closing(KafkaAdminCollector(lab_topics["bootstrap"])) as collector:
        live = collector.collect(tee)
    (tmp_path / "meta.json").write_text(json.dumps({"time": tee.now()}))
    (tmp_path / "kafka.json").write_text(json.dumps({"version": KAFKA_STATE_VERSION, "sources": tee.kafka_state}))
    assert KafkaAdminCollector("127.0.0.1:1").collect(SnapshotRoot(tmp_path)) == live


@pytest.mark.kafka
def test_dead_bootstrap_raises_within_timeout():
    start = time.monotonic()
    with contextlib.closing(KafkaAdminCollector("127.0.0.1:1", timeout=2.0)) as collector, \
            pytest.raises(KafkaAdminError, match=r"127\.0\.0\.1:1"):
        collector.collect(Root())
    assert time.monotonic() - start < 2.0 + 5


def capture(path: Path = STATE) -> None:
    """Write the fixture: the lab's admin state, restricted to the admintest-* topics and group made here."""
    from kdiag.tools.lab.lab import read_lab

    lab = read_lab()
    assert lab and lab["brokers"] == 3, "run `kdiag lab up --brokers 3` first"
    bootstrap, skew, balanced, group = lab["bootstrap"], "admintest-skew", "admintest-balanced", "admintest-lag"
    cleanup(bootstrap, (skew, balanced), (group,))
    try:
        create_topics(bootstrap, skew, balanced)
        produce(bootstrap, (skew, balanced))
        with lagging_group(bootstrap, group, balanced), contextlib.closing(KafkaAdminCollector(bootstrap)) as collector:
            state = collector.fetch()
    finally:
        cleanup(bootstrap, (skew, balanced), (group,))
    # Other lab users' topics and groups come and go: keep only the ones made here.
    state["topics"] = {t: v for t, v in state["topics"].items() if t in (skew, balanced)}
    state["consumer_groups"] = {g: v for g, v in state["consumer_groups"].items() if g == group}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    capture()
