"""The synthetic probe: the pure sequence tracker and histogram, and the service against the Kafka lab."""

from __future__ import annotations

import time
from concurrent.futures import Future

import pytest

from kdiag import lab
from kdiag.probe import (
    DUPLICATE,
    HELP,
    LATE,
    OUT_OF_ORDER,
    RECEIVED,
    Histogram,
    ProbeConfig,
    ProbeService,
    SequenceTracker,
    _Topology,
)
from kdiag.sample import COUNTER, GAUGE, HISTOGRAM
from waiting import timed_wait

# -- SequenceTracker ---------------------------------------------------------------------------------


def test_in_order_messages_are_received_and_settle():
    t = SequenceTracker(sla=10)
    for seq in range(5):
        t.acked(0, seq, now=seq)
        assert t.received(0, seq) == RECEIVED
    assert t.pending() == 0
    assert t.expire(now=100) == []
    assert t.partitions[0].floor == 5 and not t.partitions[0].received


def test_received_before_its_ack_is_not_expected_again():
    t = SequenceTracker(sla=10)
    assert t.received(0, 0) == RECEIVED
    t.acked(0, 0, now=0)
    assert t.pending() == 0
    assert t.expire(now=100) == []


def test_duplicates_above_and_below_the_floor():
    t = SequenceTracker(sla=10)
    t.acked(0, 0, now=0)
    t.acked(0, 1, now=0)
    assert t.received(0, 1) == RECEIVED
    assert t.received(0, 1) == DUPLICATE  # above the floor: 0 is still missing
    assert t.received(0, 0) == OUT_OF_ORDER
    assert t.partitions[0].floor == 2
    assert t.received(0, 0) == DUPLICATE  # below the floor
    assert t.expire(now=100) == []


def test_gap_filled_within_sla_is_late_not_lost():
    t = SequenceTracker(sla=10)
    for seq in range(3):
        t.acked(0, seq, now=0, tag="b1")
    assert t.received(0, 0) == RECEIVED
    assert t.received(0, 2) == RECEIVED
    assert t.expire(now=5) == []
    assert t.pending() == 1
    assert t.received(0, 1) == OUT_OF_ORDER
    assert t.expire(now=100) == []
    assert t.pending() == 0


def test_gap_unfilled_past_sla_is_lost_once_and_a_late_copy_is_late():
    t = SequenceTracker(sla=10)
    for seq in range(3):
        t.acked(0, seq, now=1, tag="b2")
    t.received(0, 0)
    t.received(0, 2)
    assert t.expire(now=10.9) == []
    assert t.expire(now=11) == [(0, 1, "b2")]
    assert t.expire(now=50) == []
    assert t.partitions[0].floor == 3
    assert t.received(0, 1) == LATE
    assert t.received(0, 1) == DUPLICATE


def test_tail_loss_needs_no_later_message():
    t = SequenceTracker(sla=10)
    t.acked(0, 0, now=0)
    t.received(0, 0)
    t.acked(0, 1, now=1, tag=3)
    assert t.expire(now=11) == [(0, 1, 3)]


def test_failed_send_is_never_lost_and_a_copy_written_anyway_is_not_a_duplicate():
    t = SequenceTracker(sla=10)
    t.acked(0, 0, now=0)
    t.failed(0, 1)
    t.acked(0, 2, now=0)
    t.received(0, 0)
    t.received(0, 2)
    assert t.expire(now=100) == []
    assert t.partitions[0].floor == 3
    assert t.received(0, 1) == OUT_OF_ORDER
    assert t.received(0, 1) == DUPLICATE


def test_partitions_are_independent():
    t = SequenceTracker(sla=10)
    t.acked(0, 0, now=0, tag=1)
    t.acked(1, 0, now=0, tag=2)
    assert t.received(1, 0) == RECEIVED
    assert t.expire(now=10) == [(0, 0, 1)]


def test_memory_stays_bounded():
    t = SequenceTracker(sla=10)
    for seq in range(50_000):
        t.acked(0, seq, now=seq)
        if seq % 1000 == 7:
            t.failed(0, seq)
        elif seq % 1000 == 8:
            pass  # lost
        else:
            t.received(0, seq)
        t.expire(now=seq)
    p = t.partitions[0]
    assert len(p.received) < 20 and len(p.waiting) < 20
    assert len(p.failed) <= 11 and len(p.lost) <= 11


# -- Histogram -----------------------------------------------------------------------------------------


def test_histogram_is_cumulative_with_inf_bucket():
    h = Histogram([0.5, 0.01, 0.1])
    for v in (0.005, 0.01, 0.2, 3.0):
        h.observe(v)
    got = {(s.name, dict(s.labels).get("le")): s.value for s in h.samples("x_seconds", broker_id=1)}
    assert got == {
        ("x_seconds_bucket", "0.01"): 2, ("x_seconds_bucket", "0.1"): 2, ("x_seconds_bucket", "0.5"): 3,
        ("x_seconds_bucket", "+Inf"): 4, ("x_seconds_sum", None): pytest.approx(3.215), ("x_seconds_count", None): 4,
    }
    assert all(s.kind == HISTOGRAM and ("broker_id", "1") in s.labels for s in h.samples("x_seconds", broker_id=1))


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

    svc = ProbeService("127.0.0.1:1", ProbeConfig(topic="t"), "unit")
    replicas = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    isrs = {p: sorted(r) for p, r in replicas.items()}
    # Broker 4 is new; partition 1 is led by 3 while its preferred replica 2 is back in sync.
    topology = _Topology({0: 1, 1: 3, 2: 3}, replicas, isrs, {1, 2, 3, 4})
    assert svc._needs_reconcile(topology)
    admin = FakeAdmin()
    svc._reconcile(admin, topology)
    assert admin.calls == [("create_partitions", "t", 4, [[4, 1, 2]]), ("elect_leaders", ElectionType.PREFERRED, [1])]


def test_no_reconcile_while_the_preferred_replica_is_down_or_out_of_sync():
    svc = ProbeService("127.0.0.1:1", ProbeConfig(topic="t"), "unit")
    replicas = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    down = _Topology({0: 1, 1: 2, 2: 1}, replicas, {0: [1, 2], 1: [1, 2], 2: [1, 2]}, {1, 2})
    assert not svc._needs_reconcile(down)
    catching_up = _Topology({0: 1, 1: 2, 2: 1}, replicas, {0: [1, 2], 1: [1, 2], 2: [1, 2]}, {1, 2, 3})
    assert not svc._needs_reconcile(catching_up)


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
        names = {s.name for s in samples}
        for counter in ("sent", "acked", "failed", "received", "lost", "duplicated", "out_of_order"):
            name = f"kdiag_probe_messages_{counter}_total"
            assert set(values(svc, name)) == brokers and name in HELP
        for hist in ("kdiag_probe_produce_latency_seconds", "kdiag_probe_end_to_end_latency_seconds"):
            assert {f"{hist}_bucket", f"{hist}_sum", f"{hist}_count"} <= names and hist in HELP
            assert all(v > 0 for v in values(svc, f"{hist}_count").values())
        assert set(values(svc, "kdiag_probe_availability_ratio")) == brokers
        assert all(v >= 1 for v in values(svc, "kdiag_probe_partitions").values())
        assert values(svc, "kdiag_probe_up") == {"": 1.0}
        assert sum(values(svc, "kdiag_probe_messages_lost_total").values()) == 0
        kinds = {s.name: s.kind for s in samples}
        assert kinds["kdiag_probe_messages_sent_total"] == COUNTER
        assert kinds["kdiag_probe_availability_ratio"] == GAUGE
        assert {name for name in names if not name.endswith(("_bucket", "_sum", "_count"))} <= set(HELP)
    finally:
        svc.stop()


@pytest.mark.kafka
def test_broker_restart_drops_its_availability_and_loses_nothing(kafka_lab):
    if kafka_lab["brokers"] < 3:
        pytest.skip("needs a 3-broker lab (kdiag lab up --brokers 3)")
    victim = "3"
    svc = ProbeService(kafka_lab["bootstrap"], ProbeConfig(**TEST_CONFIG), "restart")
    svc.start()
    timings = {}
    try:
        availability = lambda: values(svc, "kdiag_probe_availability_ratio")  # noqa: E731
        timings["healthy"] = timed_wait(lambda: len(availability()) == 3 and all(v == 1.0 for v in availability().values())
                                      and values(svc, "kdiag_probe_partitions").get(victim, 0) >= 1, 60,
                                      "every broker fully available and leading a probe partition")
        sent_before = values(svc, "kdiag_probe_messages_acked_total")
        try:
            t0 = time.monotonic()
            lab.stop_node(int(victim), kafka_lab["dir"])
            timings["stop"] = time.monotonic() - t0
            timings["drop"] = timed_wait(lambda: availability().get(victim, 1.0) < 0.5, 30,
                                       f"availability of broker {victim} below 0.5 while it is down")
            assert values(svc, "kdiag_probe_partitions")[victim] == 0
        finally:
            t0 = time.monotonic()
            lab.start_node(int(victim), kafka_lab["dir"])
            timings["start"] = time.monotonic() - t0
        timings["recover"] = timed_wait(lambda: availability().get(victim) == 1.0, 90,
                                      f"availability of broker {victim} back to 1 after its restart")
        acked = values(svc, "kdiag_probe_messages_acked_total")
        assert all(acked[b] > sent_before[b] for b in ("1", "2")), "the others kept acking"
        assert sum(values(svc, "kdiag_probe_messages_lost_total").values()) == 0
        assert svc.health() == (True, "")
    finally:
        svc.stop()
        counts = {c: sum(values(svc, f"kdiag_probe_messages_{c}_total").values())
                  for c in ("sent", "failed", "duplicated", "out_of_order")}
        print(f"restart test timings: {({k: round(v, 1) for k, v in timings.items()})}, counts: {counts}")
