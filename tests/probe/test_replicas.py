"""The probe's replica pairs: their layout, and the service's pairs topic on the Kafka lab."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient
from tests.waiting import timed_wait

from kdiag.config.probe import ProbeConfig
from kdiag.families.probe import FAMILIES
from kdiag.probe.probe import ProbeService
from kdiag.probe.replicas import following, pair_assignment
from kdiag.probe.topic import Topology


def test_every_broker_leads_one_pair_and_follows_another():
    pairs = pair_assignment([3, 1, 2])
    assert pairs == [[2, 1], [3, 2], [1, 3]]
    assert sorted(p[0] for p in pairs) == sorted(p[1] for p in pairs) == [1, 2, 3]


def test_one_broker_has_no_pairs():
    assert pair_assignment([1]) == []


def test_following_reads_the_last_replica():
    topology = Topology({0: 2, 1: 3}, {0: [2, 1], 1: [3, 2]}, {0: [1, 2], 1: [2, 3]}, {1, 2, 3, 4})
    assert following(topology) == {1, 2}


@pytest.mark.kafka
def test_the_service_probes_every_broker_as_leader_and_as_follower(kafka_lab):
    if kafka_lab["brokers"] < 2:
        pytest.skip("replica pairs need 2 brokers or more")
    brokers = {str(n) for n in range(1, kafka_lab["brokers"] + 1)}
    config = ProbeConfig(topic="kdiag-probe-pairs-test", interval=0.5, reconcile_interval=5.0)
    svc = ProbeService(kafka_lab["bootstrap"], config, "pairs-test")
    svc.start()
    try:
        def counts() -> dict[tuple[str, str], float]:
            return {(dict(s.labels)["broker_id"], dict(s.labels)["leader_id"]): s.value for s in svc.samples()
                    if s.name == "kdiag_probe_replica_latency_seconds_count"}

        timed_wait(lambda: len(counts()) == len(brokers) and all(v >= 3 for v in counts().values()), 60,
                   "3 acked sends on every replica pair")
        pairs = counts()
        assert {f for f, _ in pairs} == {leader for _, leader in pairs} == brokers
        assert all(f != leader for f, leader in pairs)
        assert svc.health() == (True, "")
        assert not any(s.name == "kdiag_probe_replica_failed_total" for s in svc.samples())
        assert {"kdiag_probe_replica_latency_seconds", "kdiag_probe_replica_failed_total"} <= {f.name for f in FAMILIES}
    finally:
        svc.stop()
        admin = AdminClient({"bootstrap.servers": kafka_lab["bootstrap"]})
        admin.delete_topics([config.topic, svc.pairs.topic])[config.topic].exception(timeout=30)
