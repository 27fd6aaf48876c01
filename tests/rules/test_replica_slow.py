"""replica_slow through the shipped catalog on the probe's replica pair histograms: a broker whose every pair is slow
(a stalled follower and leader) is named, and no other; pairs slow together, or healthy ones, name nobody. The drills'
recordings (made on a 3-broker 2.8.2 ZooKeeper lab by `kdiag drill run NAME --record DIR`, trimmed by
tests/fixtures/trim_recording.py) replay to the same naming."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Diagnosis, Engine, EngineState
from kdiag.analysis.subject_kinds import compute_signals
from kdiag.core.history import History
from kdiag.core.sample import GAUGE, sample
from kdiag.probe.metrics import Histogram
from kdiag.probe.replicas import PAIR_BUCKETS, pair_assignment
from kdiag.families.probe import PROBE_REPLICA_LATENCY_SECONDS
from kdiag.cli.main import main
from tests.paths import RECORDINGS

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


# Each drill's recording: what broker 3 was slowest at (its pair as leader or as follower first).
DRILLS = {"follower-stall": "fetching as broker 1's follower", "follower-throttled": "appending and acking as broker 2's leader",
          "leader-stall": "appending and acking as broker 2's leader"}


@pytest.mark.parametrize("name", sorted(DRILLS))
def test_a_drill_recording_names_broker_3_alone_and_what_it_was_slow_at(name: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["diagnose", "--from", str(RECORDINGS / f"{name}.tar.gz"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["host"] == name
    assert [(d["subject"], d["state"]) for d in out["diagnoses"] if d["rule"] == "replica_slow"] == [("broker 3", "firing")]
    assert not [d for d in out["diagnoses"] if d["kind"] == "cause"]  # the recordings hold the cluster, not the host
    (d,) = [d for d in out["diagnoses"] if d["rule"] == "replica_slow"]
    assert d["summary"].startswith("broker 3 holds back acks=all writes")
    assert f"slow at {DRILLS[name]} (p90 " in d["summary"] and "fetching as broker 1's follower" in d["summary"]
    assert float(d["evidence"]["replica_probe_vs_peers"]) > 3.0
    # Under acks=all the leaders' probe latency rose with it: the text report puts replica_slow under each.
    assert main(["diagnose", "--from", str(RECORDINGS / f"{name}.tar.gz")]) == 0
    blocks = capsys.readouterr().out.split("\n\nSYMPTOM ")
    high = [b for b in blocks if b.startswith("probe_latency_high")]
    assert len(high) == sum(x["rule"] == "probe_latency_high" for x in out["diagnoses"])
    assert all("explained by:\n    SYMPTOM replica_slow" in b and "] broker 3\n" in b for b in high), high
