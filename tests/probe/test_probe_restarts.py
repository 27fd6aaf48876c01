"""Probe truth through broker restarts, on a 3-broker lab of its own (the kafka tier).

A rolling restart at acks=all loses nothing, nor does a leader killed outright (its messages are late, not lost);
an acks=1 leader killed while its followers were frozen (so it acked what nobody replicated) loses messages, and
the probe counts them.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from kdiag.tools.lab import lab
from kdiag.tools.drill.faults import Target, kill_acking_alone
from kdiag.probe.probe import ProbeService
from kdiag.config.probe import ProbeConfig
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka

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


def counts(svc: ProbeService) -> dict[str, dict[str, float]]:
    """counter -> broker_id -> value, for the message counters."""
    return {c: svc.per_broker(f"kdiag_probe_messages_{c}_total") for c in COUNTS}


def pending(svc: ProbeService) -> float:
    """Acked messages neither read nor known lost."""
    return next(s.value for s in svc.samples() if s.name == "kdiag_probe_pending_messages")


def probe(info: dict, topic: str, **config) -> ProbeService:
    """A started probe on its own topic (5 sends a second per partition), steady on every broker."""
    svc = ProbeService(info["bootstrap"], ProbeConfig(topic=topic, interval=0.2, sla=10.0, availability_window=10.0,
                                                      reconcile_interval=5.0, **config), topic)
    svc.start()
    wait_until(svc.steady, 180, f"{topic}: every partition in sync on its preferred leader")
    return svc


def test_rolling_restart_at_acks_all_loses_nothing(own_lab):
    svc = probe(own_lab, "probe-rolling", acks="all")
    try:
        for n in BROKERS:
            lab.stop_node(int(n), own_lab["dir"])
            wait_until(lambda n=n: svc.per_broker("kdiag_probe_availability_ratio").get(n, 1.0) < 0.5, 60,
                       f"availability of broker {n} below 0.5 while it is down")
            lab.start_node(int(n), own_lab["dir"])
            wait_until(svc.steady, 240,
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
    svc = probe(own_lab, "probe-killed", acks="all")
    try:
        os.kill(lab.read_lab(own_lab["dir"])["pids"]["2"], signal.SIGKILL)  # no controlled shutdown: ~9 s to fence
        wait_until(lambda: svc.per_broker("kdiag_probe_partitions").get("2") == 0, 60, "broker 2's partition moved")
        lab.start_node(2, own_lab["dir"])
        wait_until(svc.steady, 240, "broker 2 back in sync and fully available")
        wait_until(lambda: pending(svc) == 0, 60, "every acked message read")
        c = counts(svc)
        print(f"leader killed at acks=all: { {k: sum(v.values()) for k, v in c.items()} }")
        assert sum(c["lost"].values()) == 0
        assert sum(c["received"].values()) >= sum(c["acked"].values())
    finally:
        svc.stop()


def test_acks_1_leader_killed_with_unreplicated_data_counts_the_loss(own_lab):
    svc = probe(own_lab, "probe-acks1", acks="1")
    try:
        # The probe-loss drill's fault: broker 1 acks 10 sends alone, dies, and a follower takes over without them.
        kill_acking_alone(Target(own_lab["bootstrap"], 3, lab_dir=Path(own_lab["dir"])), svc, leader=1, alone=10)
        wait_until(lambda: counts(svc)["lost"].get("1", 0) > 0, 180, "the messages broker 1 acked alone counted lost")
        wait_until(lambda: pending(svc) == 0, 60, "every acked message read or found lost")
        c = counts(svc)
        print(f"acks=1 leader killed: lost {c['lost']}, { {k: sum(v.values()) for k, v in c.items()} }")
        assert c["lost"]["2"] == c["lost"]["3"] == 0, "only the killed leader lost what it acked"
        assert sum(c["received"].values()) + sum(c["lost"].values()) >= sum(c["acked"].values())
    finally:
        svc.stop()
        lab.start_node(1, own_lab["dir"])
