"""replica_slow through the shipped catalog on the probe's replica pair histograms: a broker whose every pair is slow
(a stalled follower and leader) is named, and no other; pairs slow together, or healthy ones, name nobody."""

from __future__ import annotations

import random
from collections.abc import Callable

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Diagnosis, Engine, EngineState
from kdiag.analysis.subject_kinds import compute_signals
from kdiag.core.history import History
from kdiag.core.sample import GAUGE, sample
from kdiag.probe.metrics import Histogram
from kdiag.probe.replicas import PAIR_BUCKETS, pair_assignment
from kdiag.families.probe import PROBE_REPLICA_LATENCY_SECONDS

STEP = 5.0
WINDOW = 30.0
START = 1764430000.0
Latency = Callable[[float, tuple[int, int], random.Random], float]  # (seconds, (leader, follower), rng) -> latency


def healthy(_t: float, _pair: tuple[int, int], rng: random.Random) -> float:
    """An acks=all pair on the lab: 5-60 ms."""
    return rng.uniform(0.005, 0.06)


def stalls(broker: int, after: float, share: float = 0.4) -> Latency:
    """`broker` stopped 400 ms of every second from `after` on: the sends of every pair it is in wait it out."""
    def latency(t: float, pair: tuple[int, int], rng: random.Random) -> float:
        if broker in pair and t >= after and rng.random() < share:
            return rng.uniform(0.0, 0.4) + healthy(t, pair, rng)
        return healthy(t, pair, rng)
    return latency


def all_slow(t: float, pair: tuple[int, int], rng: random.Random) -> float:
    """Every pair slow alike (a loaded network or cluster): nobody to single out."""
    return rng.uniform(0.2, 0.6)


def run(latency: Latency, seconds: float) -> tuple[list[Diagnosis], dict[str, dict[str, float | str]]]:
    """The pairs topic of 3 brokers probed twice a second, fed every STEP seconds; the diagnoses and broker signals
    at the end."""
    rng = random.Random(33)
    pairs = {(leader, follower): Histogram(PAIR_BUCKETS) for leader, follower in pair_assignment([1, 2, 3])}
    history, engine = History(900.0), Engine(load_catalog([default_rules_dir()]), None)
    judged = EngineState()
    for i in range(int(seconds / STEP) + 1):
        t = i * STEP
        snapshot = [sample("kdiag_probe_slo_seconds", 10.0, GAUGE)]
        for (leader, follower), h in pairs.items():
            for _ in range(int(2 * STEP)):
                h.observe(latency(t, (leader, follower), rng))
            snapshot += h.samples(PROBE_REPLICA_LATENCY_SECONDS, broker_id=follower, leader_id=leader)
        history.add(START + t, snapshot)
        signals = compute_signals(history, WINDOW)
        judged = engine.evaluate(judged, START + t, signals)
    return judged.current(), signals["broker"]


def named(diagnoses: list[Diagnosis]) -> list[tuple[str, str]]:
    return sorted((d.subject, d.state) for d in diagnoses if d.rule.id == "replica_slow")


def test_a_broker_stalling_400_ms_of_every_second_is_named_alone_within_two_minutes():
    diagnoses, brokers = run(stalls(3, after=300.0), 300.0 + 120.0)
    assert named(diagnoses) == [("broker 3", "firing")]
    d = next(d for d in diagnoses if d.rule.id == "replica_slow")
    assert float(d.evidence["replica_probe_follower_p90_seconds"]) > 0.2
    assert "3 following 1" in str(d.evidence["replica_probe_pairs"])
    # The others' lowest pair is the one without broker 3.
    assert all(float(brokers[b]["replica_probe_p90_seconds"]) <= 0.1 for b in ("1", "2"))


def test_ten_healthy_minutes_are_quiet():
    diagnoses, brokers = run(healthy, 600.0)
    assert named(diagnoses) == []
    assert {"replica_probe_vs_peers", "replica_probe_p90_seconds"} <= set(brokers["3"])


def test_every_pair_slow_alike_names_nobody():
    diagnoses, brokers = run(all_slow, 300.0)
    assert named(diagnoses) == []
    assert float(brokers["1"]["replica_probe_p90_seconds"]) > 0.2
