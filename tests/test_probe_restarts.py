"""Probe truth through broker restarts, on a 3-broker lab of its own (run with KDIAG_LAB=1).

A rolling restart at acks=all loses nothing, nor does a leader killed outright (its messages are late, not lost);
an acks=1 leader killed while its followers were frozen (so it acked what nobody replicated) loses messages, and
the probe counts them.
"""

from __future__ import annotations

import contextlib
import os
import signal

import pytest
from confluent_kafka.admin import AdminClient

from kdiag import lab
from kdiag.probe import ProbeService
from kdiag.probe_config import ProbeConfig
from waiting import wait_until

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(os.environ.get("KDIAG_LAB") != "1", reason="set KDIAG_LAB=1 to start Kafka JVMs"),
]

BASE_PORT = 19092
BROKERS = ("1", "2", "3")
COUNTS = ("sent", "acked", "failed", "received", "late", "lost", "duplicated", "out_of_order")


@pytest.fixture(scope="module")
def own_lab(tmp_path_factory):
    """A 3-broker lab in a temp dir, always stopped (and thawed first) at the end."""
    d = str(tmp_path_factory.mktemp("probe-lab"))
    try:
        yield lab.up(d, brokers=3, base_port=BASE_PORT, timeout=300)
    finally:
        for pid in (lab.read_lab(d) or {}).get("pids", {}).values():
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(pid, signal.SIGCONT)
        lab.down(d, purge=True)


def series(svc: ProbeService, name: str) -> dict[str, float]:
    """broker_id -> value of one per-broker probe series."""
    return {dict(s.labels)["broker_id"]: s.value for s in svc.samples() if s.name == name}


def counts(svc: ProbeService) -> dict[str, dict[str, float]]:
    """counter -> broker_id -> value, for the message counters."""
    return {c: series(svc, f"kdiag_probe_messages_{c}_total") for c in COUNTS}


def pending(svc: ProbeService) -> float:
    """Acked messages neither read nor known lost."""
    return next(s.value for s in svc.samples() if s.name == "kdiag_probe_pending_messages")


def steady(svc: ProbeService, admin: AdminClient, topic: str) -> bool:
    """Every probe partition fully in sync on its preferred leader, and every broker fully available."""
    # All topics, not list_topics(topic=...): a metadata request naming a missing topic auto-creates it.
    described = admin.list_topics(timeout=5).topics.get(topic)
    partitions = described.partitions.values() if described else []
    in_sync = all(m.leader == m.replicas[0] and sorted(m.isrs) == sorted(m.replicas) == [1, 2, 3] for m in partitions)
    available = series(svc, "kdiag_probe_availability_ratio")
    return in_sync and len(partitions) == 3 and all(available.get(b) == 1.0 for b in BROKERS)


def probe(info: dict, topic: str, **config) -> tuple[ProbeService, AdminClient]:
    """A started probe on its own topic (5 sends a second per partition) and an admin client to watch it."""
    svc = ProbeService(info["bootstrap"], ProbeConfig(topic=topic, interval=0.2, sla=10.0, availability_window=10.0,
                                                      reconcile_interval=5.0, **config), topic)
    svc.start()
    admin = AdminClient({"bootstrap.servers": info["bootstrap"]})
    wait_until(lambda: steady(svc, admin, topic), 180, f"{topic}: every partition in sync on its preferred leader")
    return svc, admin


def test_rolling_restart_at_acks_all_loses_nothing(own_lab):
    svc, admin = probe(own_lab, "probe-rolling", acks="all")
    try:
        for n in BROKERS:
            lab.stop_node(int(n), own_lab["dir"])
            wait_until(lambda n=n: series(svc, "kdiag_probe_availability_ratio").get(n, 1.0) < 0.5, 60,
                       f"availability of broker {n} below 0.5 while it is down")
            lab.start_node(int(n), own_lab["dir"])
            wait_until(lambda: steady(svc, admin, "probe-rolling"), 240,
                       f"broker {n} back in sync, leading its probe partition, fully available")
        wait_until(lambda: pending(svc) == 0, 60, "every acked message read")
        c = counts(svc)
        print(f"rolling restart at acks=all: { {k: sum(v.values()) for k, v in c.items()} }")
        assert sum(c["lost"].values()) == 0
        assert all(c["acked"][b] > 0 for b in BROKERS)
        assert sum(c["received"].values()) >= sum(c["acked"].values())
    finally:
        svc.stop()


def test_leader_killed_at_acks_all_is_late_not_lost(own_lab):
    svc, admin = probe(own_lab, "probe-killed", acks="all")
    try:
        os.kill(lab.read_lab(own_lab["dir"])["pids"]["2"], signal.SIGKILL)  # no controlled shutdown: ~9 s to fence
        wait_until(lambda: series(svc, "kdiag_probe_partitions").get("2") == 0, 60, "broker 2's partition moved")
        lab.start_node(2, own_lab["dir"])
        wait_until(lambda: steady(svc, admin, "probe-killed"), 240, "broker 2 back in sync and fully available")
        wait_until(lambda: pending(svc) == 0, 60, "every acked message read")
        c = counts(svc)
        print(f"leader killed at acks=all: { {k: sum(v.values()) for k, v in c.items()} }")
        assert sum(c["lost"].values()) == 0
        assert sum(c["received"].values()) >= sum(c["acked"].values())
    finally:
        svc.stop()


def test_acks_1_leader_killed_with_unreplicated_data_counts_the_loss(own_lab):
    svc, _admin = probe(own_lab, "probe-acks1", acks="1")
    pids = lab.read_lab(own_lab["dir"])["pids"]
    try:
        acked = counts(svc)["acked"]["1"]
        # Frozen followers fetch nothing and (as 2 of 3 controllers) cannot shrink the ISR: the high watermark
        # stays put while broker 1 acks alone; then the leader dies and a follower takes over without that data.
        try:
            for n in ("2", "3"):
                os.kill(pids[n], signal.SIGSTOP)
            wait_until(lambda: counts(svc)["acked"]["1"] >= acked + 10, 60,
                       "broker 1 acking alone while its followers are frozen")
            os.kill(pids["1"], signal.SIGKILL)
        finally:
            for n in ("2", "3"):
                os.kill(pids[n], signal.SIGCONT)
        wait_until(lambda: counts(svc)["lost"].get("1", 0) > 0, 180, "the messages broker 1 acked alone counted lost")
        wait_until(lambda: pending(svc) == 0, 60, "every acked message read or found lost")
        c = counts(svc)
        print(f"acks=1 leader killed: lost {c['lost']}, { {k: sum(v.values()) for k, v in c.items()} }")
        assert c["lost"]["2"] == c["lost"]["3"] == 0, "only the killed leader lost what it acked"
        assert sum(c["received"].values()) + sum(c["lost"].values()) >= sum(c["acked"].values())
    finally:
        svc.stop()
        lab.start_node(1, own_lab["dir"])
