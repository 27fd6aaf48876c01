"""The synthetic probe: its histogram, topic reconcile, and the service against the Kafka lab."""

from __future__ import annotations

import time
from concurrent.futures import Future

import pytest

from kdiag.probe import topic as probe_topic
from kdiag.probe.probe import MAGIC, PAYLOAD, ProbeService
from kdiag.config.probe import ProbeConfig
from kdiag.families.family import Family
from kdiag.families.probe import FAMILIES
from kdiag.probe.metrics import Histogram
from kdiag.probe.topic import Topology
from kdiag.core.sample import COUNTER, GAUGE, HISTOGRAM
from tests.waiting import timed_wait

# -- Histogram -----------------------------------------------------------------------------------------


def test_histogram_is_cumulative_with_inf_bucket():
    h = Histogram([0.5, 0.01, 0.1])
    for v in (0.005, 0.01, 0.2, 3.0):
        h.observe(v)
    x = Family("kdiag_x_seconds", HISTOGRAM, "x", ("broker_id",), register=False)
    got = {(s.name, dict(s.labels).get("le")): s.value for s in h.samples(x, broker_id=1)}
    assert got == {
        ("kdiag_x_seconds_bucket", "0.01"): 2, ("kdiag_x_seconds_bucket", "0.1"): 2, ("kdiag_x_seconds_bucket", "0.5"): 3,
        ("kdiag_x_seconds_bucket", "+Inf"): 4, ("kdiag_x_seconds_sum", None): pytest.approx(3.215),
        ("kdiag_x_seconds_count", None): 4,
    }
    assert all(s.kind == HISTOGRAM and ("broker_id", "1") in s.labels for s in h.samples(x, broker_id=1))


# -- ProbeService --------------------------------------------------------------------------------------


def test_dead_cluster_does_not_raise_and_reports_down():
    svc = ProbeService("127.0.0.1:1", ProbeConfig(topic="kdiag-probe-none"), "dead")
    svc.start()
    try:
        deadline = time.monotonic() + 15
        while not svc.health()[1] and time.monotonic() < deadline:
            time.sleep(0.2)
        ok, error = svc.health()
        assert not ok and "manager" in error
        assert values(svc, "kdiag_probe_up") == {"": 0.0}
        assert values(svc, "kdiag_probe_slo_seconds") == {"": 0.5}
    finally:
        t0 = time.monotonic()
        svc.stop()
        assert time.monotonic() - t0 < 6


def test_bad_config_is_reported_not_raised():
    svc = ProbeService("127.0.0.1:1", ProbeConfig(interval=0), "bad")
    svc.start()
    assert svc.health() == (False, "manager: bad config: interval: must be positive")
    svc.stop()


def test_disabled_probe_starts_nothing():
    svc = ProbeService("127.0.0.1:1", ProbeConfig(enabled=False), "off")
    svc.start()
    assert svc.health() == (False, "probe disabled")
    svc.stop()


def test_service_counts_late_lost_and_reads_past_other_writers():
    svc = ProbeService("127.0.0.1:1", ProbeConfig(topic="t", sla=10), "unit")

    def ours(seq: int, sent: float) -> bytes:
        return PAYLOAD.pack(MAGIC, svc.run_id.bytes, 0, seq, sent, 1)

    for seq, offset in ((0, 5), (1, 6), (2, 8)):
        svc.ledger.settle(0, seq, 100.0, 1, 0.01, offset)  # broker 1 acked seq at offset
    svc._receive(0, 5, ours(0, 100.0), 100.5)
    svc._receive(0, 5, ours(0, 100.0), 100.6)  # read again after an offset reset: not a duplicate
    svc._receive(0, 6, b"another kdiag's message", 101.0)  # seq 1's offset holds something else: lost
    svc._receive(0, 8, ours(2, 100.0), 130.0)  # 30 s after it was sent: late, not lost
    got = {c: values(svc, f"kdiag_probe_messages_{c}_total")["1"] for c in ("received", "late", "lost", "duplicated")}
    assert got == {"received": 2, "late": 1, "lost": 1, "duplicated": 0}
    assert values(svc, "kdiag_probe_pending_messages") == {"": 0}


class FakeAdmin:
    """Records the admin calls of a reconcile; every call succeeds."""

    def __init__(self):
        self.calls = []

    def _done(self, value):
        future = Future()
        future.set_result(value)
        return future

    def create_partitions(self, new, **_kw):
        self.calls += [("create_partitions", p.topic, p.new_total_count, p.replica_assignment) for p in new]
        return {p.topic: self._done(None) for p in new}

    def elect_leaders(self, election_type, partitions):
        self.calls.append(("elect_leaders", election_type, sorted(tp.partition for tp in partitions)))
        return self._done({tp: None for tp in partitions})


def test_reconcile_adds_partitions_for_a_new_broker_and_elects_preferred_leaders():
    from confluent_kafka import ElectionType

    replicas = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    isrs = {p: sorted(r) for p, r in replicas.items()}
    # Broker 4 is new; partition 1 is led by 3 while its preferred replica 2 is back in sync.
    topology = Topology({0: 1, 1: 3, 2: 3}, replicas, isrs, {1, 2, 3, 4})
    assert probe_topic.needs_reconcile(topology)
    admin = FakeAdmin()
    probe_topic.reconcile(admin, "t", topology, 1)
    assert admin.calls == [("create_partitions", "t", 4, [[4, 1, 2]]), ("elect_leaders", ElectionType.PREFERRED, [1])]


def test_no_reconcile_while_the_preferred_replica_is_down_or_out_of_sync():
    replicas = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    down = Topology({0: 1, 1: 2, 2: 1}, replicas, {0: [1, 2], 1: [1, 2], 2: [1, 2]}, {1, 2})
    assert not probe_topic.needs_reconcile(down)
    catching_up = Topology({0: 1, 1: 2, 2: 1}, replicas, {0: [1, 2], 1: [1, 2], 2: [1, 2]}, {1, 2, 3})
    assert not probe_topic.needs_reconcile(catching_up)


def values(svc: ProbeService, name: str) -> dict[str, float]:
    """broker_id (or "" when unlabelled) -> value of one probe series."""
    return {dict(s.labels).get("broker_id", ""): s.value for s in svc.samples() if s.name == name}


TEST_CONFIG = dict(topic="kdiag-probe-test", interval=0.5, availability_window=10.0, reconcile_interval=5.0, sla=10.0)


@pytest.mark.kafka
def test_probe_metrics_per_broker(kafka_lab):
    brokers = {str(n) for n in range(1, kafka_lab["brokers"] + 1)}
    svc = ProbeService(kafka_lab["bootstrap"], ProbeConfig(**TEST_CONFIG), "test")
    svc.start()
    try:
        timed_wait(lambda: set(values(svc, "kdiag_probe_messages_received_total")) == brokers
                 and all(v >= 3 for v in values(svc, "kdiag_probe_messages_received_total").values()), 30,
                 "probe messages received through every broker")
        assert svc.health() == (True, "")
        samples = svc.samples()
        declared = {f.name for f in FAMILIES}
        names = {s.name for s in samples}
        for counter in ("sent", "acked", "failed", "received", "late", "lost", "duplicated", "out_of_order"):
            name = f"kdiag_probe_messages_{counter}_total"
            assert set(values(svc, name)) == brokers and name in declared
        for hist in ("kdiag_probe_produce_latency_seconds", "kdiag_probe_end_to_end_latency_seconds"):
            assert {f"{hist}_bucket", f"{hist}_sum", f"{hist}_count"} <= names and hist in declared
            assert all(v > 0 for v in values(svc, f"{hist}_count").values())
        assert set(values(svc, "kdiag_probe_availability_ratio")) == brokers
        assert all(v >= 1 for v in values(svc, "kdiag_probe_partitions").values())
        assert values(svc, "kdiag_probe_up") == {"": 1.0}
        assert sum(values(svc, "kdiag_probe_messages_lost_total").values()) == 0
        kinds = {s.name: s.kind for s in samples}
        assert kinds["kdiag_probe_messages_sent_total"] == COUNTER
        assert kinds["kdiag_probe_availability_ratio"] == GAUGE
        assert {name for name in names if not name.endswith(("_bucket", "_sum", "_count"))} <= declared
    finally:
        svc.stop()
