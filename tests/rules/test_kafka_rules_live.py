"""Kafka rules against a real 3-broker cluster where `kdiag drill` does not prove them: a recording diagnosed
offline and lints on topic layouts (the drills prove each fault is named, and that the batched keyed traffic
beside the unbatched-producers drill is not)."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import closing

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.waiting import wait_until

from kdiag.tools.drill.faults import keyed_load
from kdiag.config.settings import load_config
from kdiag.app.wiring import kafka_collectors, load_rules
from kdiag.runtime.pipeline import CollectorSet, Pipeline, State
from kdiag.core.root import Root

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
    assert d["evidence"]["flush_messages"] == 1.0 and d["evidence"]["cluster.log_flushes_per_1k_messages"] > 0.5


def test_a_single_replica_and_an_unsatisfiable_min_isr_are_named_and_a_sound_topic_is_not(cluster, admin):
    create_topic(admin, "live-rf1", [[1], [2], [3]])
    create_topic(admin, "live-minisr", [[1, 2], [2, 3], [3, 1]], **{"min.insync.replicas": "2"})
    create_topic(admin, "live-sound", [[1, 2, 3], [2, 3, 1], [3, 1, 2]], **{"min.insync.replicas": "2"})
    observer = Observer(cluster)
    with closing(observer.pipeline.collectors), \
            keyed_load(cluster["bootstrap"], ["live-rf1", "live-minisr", "live-sound"], rate=300.0):
        wait_until(lambda: observer.diagnosed("replication_factor_one", "live-rf1")
                   and observer.diagnosed("min_isr_unsatisfiable", "live-minisr"), 120,
                   "replication_factor_one on live-rf1 and min_isr_unsatisfiable on live-minisr")
        assert not observer.rules_for("live-sound") & {"replication_factor_one", "min_isr_unsatisfiable"}
        assert "min_isr_unsatisfiable" not in observer.rules_for("live-rf1")
    admin.delete_topics(["live-rf1", "live-minisr", "live-sound"])
