"""Kafka rules against a real 3-broker cluster, with load and faults made by the test."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from waiting import wait_until

from kdiag import lab, lab_layout
from kdiag.drills import in_background
from kdiag.config import load_config
from kdiag.daemon import kafka_collectors, load_rules
from kdiag.pipeline import CollectorSet, Pipeline, State
from kdiag.root import Root

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def cluster(kafka_lab: dict) -> dict:
    """The lab, when it has the three brokers these tests need."""
    if kafka_lab["brokers"] < 3:
        pytest.skip("needs a 3-broker lab: kdiag lab up --brokers 3")
    return kafka_lab


@pytest.fixture(scope="module")
def admin(cluster: dict) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster["bootstrap"]})


def create_topic(admin: AdminClient, name: str, assignment: list[list[int]], **config: str) -> None:
    """A fresh topic with an explicit replica assignment (the first replica is the preferred leader)."""
    admin.delete_topics([name])[name].exception(timeout=30)
    wait_until(lambda: name not in admin.list_topics(timeout=10).topics, 30, f"topic {name} deleted")
    topic = NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment, config=config)
    wait_until(lambda: admin.create_topics([topic])[name].exception(timeout=30) is None, 30, f"topic {name} created")


def keyed_load(bootstrap: str, topics: list[str], rate: float = 1500.0):
    """Keyed produce traffic to each topic at about `rate` messages/s until the block ends."""
    def run(stop: threading.Event) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1"})
        n = 0
        while not stop.is_set():
            for topic in topics:
                for _ in range(int(rate / 20)):
                    producer.produce(topic, key=f"k{n % 1000}".encode(), value=b"x" * 200)
                    n += 1
            producer.poll(0)
            time.sleep(0.05)
        producer.flush(10)

    return in_background(run)


class Observer:
    """A kdiag pipeline over the real cluster (AdminClient and JMX), stepped by the test."""

    def __init__(self, cluster: dict):
        config = load_config(None, {"kafka.bootstrap_servers": cluster["bootstrap"],
                                    "kafka.jmx": list(cluster["jmx"].values()), "kafka.timeout": "8s",
                                    "kafka.configs_interval": "0s"})  # a config change is seen at the next step
        self.pipeline = Pipeline(CollectorSet(list(kafka_collectors(config).values())), load_rules(config),
                                 "live", window=10.0)
        self.root = Root()
        self.state: State | None = None

    def step(self) -> State:
        self.state = self.pipeline.step(self.root)
        return self.state

    def diagnosed(self, rule: str, subject: str, state: str | None = "firing") -> bool:
        """Step once; whether the rule holds for the subject (in the given state, or any with None)."""
        return any(d.rule.id == rule and d.subject == subject and state in (None, d.state)
                   for d in self.step().diagnoses)

    def rules_for(self, subject: str) -> set[str]:
        return {d.rule.id for d in self.state.diagnoses if d.subject == subject}


def test_forced_fsync_fires_on_the_topic_and_resolves_when_the_override_goes(cluster, admin):
    create_topic(admin, "live-fsync", [[1, 2, 3], [2, 3, 1], [3, 1, 2]], **{"flush.messages": "1"})
    observer = Observer(cluster)
    with keyed_load(cluster["bootstrap"], ["live-fsync"]):
        wait_until(lambda: observer.diagnosed("forced_fsync", "live-fsync"), 90,
                   "forced_fsync firing for topic live-fsync")
        d = next(d for d in observer.state.diagnoses if d.rule.id == "forced_fsync")
        assert d.evidence["flush_messages"] == 1.0 and d.evidence["cluster.log_flushes_per_second"] > 5.0
        resource = ConfigResource(ConfigResource.Type.TOPIC, "live-fsync", incremental_configs=[
            ConfigEntry("flush.messages", None, incremental_operation=AlterConfigOpType.DELETE)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
        wait_until(lambda: not observer.diagnosed("forced_fsync", "live-fsync", state=None), 60,
                   "forced_fsync resolved once flush.messages is removed")
        assert [d.subject for d in observer.state.resolved if d.rule.id == "forced_fsync"] == ["live-fsync"]
    admin.delete_topics(["live-fsync"])


def set_cluster_default(bootstrap: str, name: str, value: str | None) -> None:
    """Set (or with None delete) a cluster-wide dynamic broker default with kafka-configs, as the remediation says."""
    change = ["--add-config", f"{name}={value}"] if value is not None else ["--delete-config", name]
    # librdkafka's Python API refuses the default broker resource (an empty name): use Kafka's own tool.
    subprocess.run(["java", "-cp", lab_layout.classpath(), "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", bootstrap,
                    "--alter", "--entity-type", "brokers", "--entity-default", *change], check=True, capture_output=True, timeout=120)


def test_flush_forced_for_the_brokers_is_forced_fsync_broker_and_not_the_topics(cluster, admin):
    # Seed 000 section 6.2: a script set log.flush.interval.messages for the brokers; topics inherit it and have
    # no override to delete, so only the broker rule may fire, naming where the value is set.
    create_topic(admin, "live-fsync-inherited", [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    observer = Observer(cluster)
    try:
        set_cluster_default(cluster["bootstrap"], "log.flush.interval.messages", "1")
        with keyed_load(cluster["bootstrap"], ["live-fsync-inherited"]):
            wait_until(lambda: observer.diagnosed("forced_fsync_broker", "broker 1"), 120,
                       "forced_fsync_broker firing for broker 1")
            d = next(d for d in observer.state.diagnoses if d.rule.id == "forced_fsync_broker" and d.subject == "broker 1")
            assert "cluster-wide dynamic default" in d.summary and d.evidence["log_flush_interval_messages"] == 1.0
            topic = observer.state.signals["topic"]["live-fsync-inherited"]
            assert topic["flush_messages"] == 1.0 and topic["flush_messages_override"] == 0.0
            assert "forced_fsync" not in observer.rules_for("live-fsync-inherited")
        set_cluster_default(cluster["bootstrap"], "log.flush.interval.messages", None)
        wait_until(lambda: not observer.diagnosed("forced_fsync_broker", "broker 1", state=None), 90,
                   "forced_fsync_broker resolved once the cluster default is deleted")
    finally:
        set_cluster_default(cluster["bootstrap"], "log.flush.interval.messages", None)
        admin.delete_topics(["live-fsync-inherited"])


def test_a_recording_made_during_forced_fsync_names_it_offline(cluster, admin, tmp_path):
    create_topic(admin, "rec-fsync", [[1, 2, 3], [2, 3, 1], [3, 1, 2]], **{"flush.messages": "1"})
    jmx = [arg for url in cluster["jmx"].values() for arg in ("--jmx", url)]
    attempts = iter(range(1000))

    def recording_names_forced_fsync() -> dict | None:
        # The first snapshot gives no rates and the rule must then hold for 15 s; a loaded machine can delay the
        # first JMX rows, so record again (a new recording each time) until one ends with the cause firing.
        recording = tmp_path / f"fsync-{next(attempts)}.tar.gz"
        recorded = subprocess.run([sys.executable, "-m", "kdiag", "record", "-o", str(recording), "--duration", "40s",
                                   "--interval", "5s", "--bootstrap-servers", cluster["bootstrap"], *jmx],
                                  capture_output=True, text=True, timeout=900)  # a 40 s recording: a loaded host takes far longer
        assert recorded.returncode == 0, recorded.stderr
        diagnosed = subprocess.run([sys.executable, "-m", "kdiag", "diagnose", "--from", str(recording), "--format", "json"],
                                   capture_output=True, text=True, timeout=600)
        assert diagnosed.returncode == 0, diagnosed.stderr
        found = {(d["rule"], d["subject"]): d for d in json.loads(diagnosed.stdout)["diagnoses"]}
        d = found.get(("forced_fsync", "rec-fsync"))
        return d if d and d["state"] == "firing" else None

    with keyed_load(cluster["bootstrap"], ["rec-fsync"]):
        d = wait_until(recording_names_forced_fsync, 900, "a recording whose last snapshot has forced_fsync firing on rec-fsync")
    admin.delete_topics(["rec-fsync"])
    assert d["evidence"]["flush_messages"] == 1.0 and d["evidence"]["cluster.log_flushes_per_second"] > 5.0


def test_leaders_on_one_broker_is_partition_skew_and_a_balanced_topic_is_not(cluster, admin):
    create_topic(admin, "live-skew", [[1, 2, 3], [1, 3, 2]] * 3)
    create_topic(admin, "live-balanced", [[1, 2, 3], [2, 3, 1], [3, 1, 2]] * 2)
    observer = Observer(cluster)
    with keyed_load(cluster["bootstrap"], ["live-skew", "live-balanced"]):
        wait_until(lambda: observer.diagnosed("partition_skew", "live-skew"), 120,
                   "partition_skew firing for live-skew")
        for _ in range(3):
            observer.step()
            assert not observer.rules_for("live-balanced") & {"partition_skew", "forced_fsync"}
        d = next(d for d in observer.state.diagnoses if d.rule.id == "partition_skew")
        assert d.evidence["leader_top_broker_share"] == 1.0 and d.evidence["leader_skew_ratio"] == 3.0
    admin.delete_topics(["live-skew", "live-balanced"])


@contextmanager
def polling_consumers(bootstrap: str, group: str, topic: str, count: int) -> Iterator[None]:
    """`count` members of one group subscribed to topic, polled in a thread so they join and stay."""
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
                 for _ in range(count)]
    for c in consumers:
        c.subscribe([topic])

    def run(stop: threading.Event) -> None:
        while not stop.is_set():
            for c in consumers:
                c.poll(0.1)

    try:
        with in_background(run):
            yield
    finally:
        for c in consumers:
            c.close()


def test_consumers_beyond_the_partition_count_are_idle_members(cluster, admin):
    create_topic(admin, "live-idle", [[1, 2, 3]])
    group = "live-idle-group"
    observer = Observer(cluster)
    with polling_consumers(cluster["bootstrap"], group, "live-idle", 3):
        # Members join one by one: wait for all three in the stable group.
        wait_until(lambda: observer.diagnosed("consumer_members_idle", group)
                   and observer.state.signals["group"][group]["members"] == 3.0, 60,
                   "consumer_members_idle for 3 consumers of a one-partition topic")
    assert observer.state.signals["group"][group]["idle_members"] == 2.0
    admin.delete_topics(["live-idle"])
    admin.delete_consumer_groups([group])


def test_a_stopped_broker_degrades_only_its_sources_and_fires_under_replicated(cluster, admin):
    # min.insync.replicas=3: with one broker stopped, acks=all writes fail (seed 002 section 3.2).
    create_topic(admin, "live-replicated", [[1, 2, 3], [2, 3, 1], [3, 1, 2]], **{"min.insync.replicas": "3"})
    observer = Observer(cluster)
    observer.step()
    try:
        lab.stop_node(3, cluster["dir"])

        def jmx_up() -> list[float]:
            return sorted(s.value for s in observer.state.samples if s.name == "kdiag_kafka_jmx_up")

        # The JMX reader of a dead broker counts as down once its last row is older than its max age.
        wait_until(lambda: observer.diagnosed("under_replicated_partitions", "live-replicated")
                   and jmx_up() == [0.0, 1.0, 1.0], 120,
                   "under_replicated_partitions firing and broker 3's JMX endpoint down")
        wait_until(lambda: observer.diagnosed("broker_down", "cluster") and observer.diagnosed("under_min_isr", "live-replicated"),
                   120, "broker_down naming broker 3 and under_min_isr firing")
        down = next(d for d in observer.state.diagnoses if d.rule.id == "broker_down")
        assert down.evidence["missing_broker_ids"] == "3" and "broker 3 left the cluster" in down.summary
        health = observer.state.health
        # Two JMX endpoints and the AdminClient still answer: the collectors themselves stay up.
        assert health["kafka_admin"].success and health["kafka_jmx"].success
    finally:
        lab.start_node(3, cluster["dir"])
    wait_until(lambda: not observer.diagnosed("broker_down", "cluster", state=None), 120, "broker_down resolved")
    admin.delete_topics(["live-replicated"])


def test_a_single_replica_and_an_unsatisfiable_min_isr_are_named_and_a_sound_topic_is_not(cluster, admin):
    create_topic(admin, "live-rf1", [[1], [2], [3]])
    create_topic(admin, "live-minisr", [[1, 2], [2, 3], [3, 1]], **{"min.insync.replicas": "2"})
    create_topic(admin, "live-sound", [[1, 2, 3], [2, 3, 1], [3, 1, 2]], **{"min.insync.replicas": "2"})
    observer = Observer(cluster)
    with keyed_load(cluster["bootstrap"], ["live-rf1", "live-minisr", "live-sound"], rate=300.0):
        wait_until(lambda: observer.diagnosed("replication_factor_one", "live-rf1")
                   and observer.diagnosed("min_isr_unsatisfiable", "live-minisr"), 120,
                   "replication_factor_one on live-rf1 and min_isr_unsatisfiable on live-minisr")
        assert not observer.rules_for("live-sound") & {"replication_factor_one", "min_isr_unsatisfiable"}
        assert "min_isr_unsatisfiable" not in observer.rules_for("live-rf1")
    admin.delete_topics(["live-rf1", "live-minisr", "live-sound"])


def test_a_consumer_overrunning_max_poll_interval_makes_its_group_rebalance(cluster, admin):
    # Seed 002 section 4.2: a member slower than max.poll.interval.ms between polls is thrown out and rejoins.
    create_topic(admin, "live-rebalance", [[1, 2, 3], [2, 3, 1]])
    group = "live-rebalance-group"
    conf = {"bootstrap.servers": cluster["bootstrap"], "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 6000}
    steady, slow = Consumer(conf), Consumer(conf)
    for c in steady, slow:
        c.subscribe(["live-rebalance"])

    def run(stop: threading.Event) -> None:
        last_slow_poll = 0.0
        while not stop.is_set():
            steady.poll(0.2)
            if time.monotonic() - last_slow_poll > 9.0:  # past max.poll.interval.ms: out of the group, then back
                slow.poll(0.2)
                last_slow_poll = time.monotonic()

    observer = Observer(cluster)
    try:
        with in_background(run):
            wait_until(lambda: observer.diagnosed("consumer_rebalancing", group), 400,
                       "consumer_rebalancing firing for the group with a member overrunning max.poll.interval.ms")
            d = next(d for d in observer.state.diagnoses if d.rule.id == "consumer_rebalancing")
            assert d.evidence["membership_changes_per_minute"] > 2.0
    finally:
        for c in steady, slow:
            c.close()
    admin.delete_topics(["live-rebalance"])
    admin.delete_consumer_groups([group])


def record_by_record(bootstrap: str, topic: str, linger_ms: int) -> Callable[[threading.Event], None]:
    """A plain client (not kdiag bench) writing 20-byte records as fast as it can."""
    def run(stop: threading.Event) -> None:
        # batch.num.messages=1 with linger.ms=0: every record its own produce request, as a send().get() loop makes.
        batching = {"linger.ms": linger_ms} if linger_ms else {"linger.ms": 0, "batch.num.messages": 1}
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "client.id": "unbatched-app", **batching})
        while not stop.is_set():
            for _ in range(200):
                try:
                    producer.produce(topic, b"x" * 20)
                except BufferError:
                    break
            producer.poll(0.001)
        producer.flush(10)
    return run


def test_records_sent_one_by_one_by_a_plain_client_are_unbatched_producers(cluster, admin):
    create_topic(admin, "live-unbatched", [[1, 2, 3]])
    observer = Observer(cluster)
    with in_background(record_by_record(cluster["bootstrap"], "live-unbatched", linger_ms=0)):
        wait_until(lambda: observer.diagnosed("unbatched_producers", "broker 1"), 180,
                   "unbatched_producers firing on broker 1, the leader of live-unbatched")
        d = next(d for d in observer.state.diagnoses if d.rule.id == "unbatched_producers")
        assert d.evidence["messages_per_produce_request"] < 2.0 and "live-unbatched" in d.evidence["busiest_topics"]
    # The same client batching (linger.ms=20) is not named, whatever its rate.
    observer = Observer(cluster)
    with in_background(record_by_record(cluster["bootstrap"], "live-unbatched", linger_ms=20)):
        wait_until(lambda: (b := observer.step().signals["broker"].get("1", {})).get("messages_in_per_second", 0) > 1000
                   and b.get("messages_per_produce_request", 0) > 10, 180, "batched traffic on broker 1")
        for _ in range(5):
            observer.step()
            assert "unbatched_producers" not in {d.rule.id for d in observer.state.diagnoses}
    admin.delete_topics(["live-unbatched"])
