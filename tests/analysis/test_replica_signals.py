"""Replica signals: the pairs' p90 per broker, the lowest of its pairs against the others', the waiting leaders."""

from __future__ import annotations

from kdiag.analysis.replica_signals import replica_fields
from kdiag.core.history import History
from kdiag.core.sample import GAUGE, Sample, sample
from kdiag.probe.metrics import Histogram
from kdiag.probe.replicas import PAIR_BUCKETS
from kdiag.families.probe import PROBE_REPLICA_LATENCY_SECONDS

SLOW = {(1, 3): 0.4, (3, 2): 0.4, (2, 1): 0.01}  # (leader, follower) -> every send's latency: broker 3 in both slow


def snapshot(t: int, pairs: dict[tuple[int, int], Histogram]) -> list[Sample]:
    out = [sample("kdiag_kafka_request_time_seconds", 0.3 + b / 100, GAUGE, broker_id=b, request="Produce",
                  phase="remote", quantile="0.99") for b in (1, 2)]
    out += [sample("kdiag_kafka_produce_purgatory_size", 4.0, GAUGE, broker_id=1),
            sample("kdiag_kafka_replica_fetch_max_lag", 7.0, GAUGE, broker_id=3)]
    for (leader, follower), h in pairs.items():
        for _ in range(5):
            h.observe(SLOW[(leader, follower)])
        out += h.samples(PROBE_REPLICA_LATENCY_SECONDS, broker_id=follower, leader_id=leader)
    return out


def fields() -> dict[str, dict[str, float | str | None]]:
    history, pairs = History(300.0), {pair: Histogram(PAIR_BUCKETS) for pair in SLOW}
    for t in range(0, 40, 5):
        history.add(1000.0 + t, snapshot(t, pairs))
    return replica_fields(history, 30.0)


def test_only_the_broker_in_every_slow_pair_is_slow():
    out = fields()
    assert float(out["3"]["replica_probe_p90_seconds"] or 0) > 0.3
    assert all(float(out[b]["replica_probe_p90_seconds"] or 1) < 0.02 for b in ("1", "2"))
    assert float(out["3"]["replica_probe_vs_peers"] or 0) > 20
    assert out["3"]["replica_probe_pairs"] == "2 following 3: 0.423 s; 3 following 1: 0.423 s"  # in the 0.38-0.43 s bucket


def test_roles_and_jmx_evidence():
    out = fields()
    assert float(out["3"]["replica_probe_follower_p90_seconds"] or 0) > 0.3
    assert float(out["1"]["replica_probe_leader_p90_seconds"] or 0) > 0.3  # 1 leads the pair 3 follows
    assert float(out["1"]["replica_probe_follower_p90_seconds"] or 1) < 0.02
    assert out["3"]["replica_fetch_max_lag"] == 7.0
    assert out["3"]["waiting_leaders"] == ("broker 1: produce remote time p99 0.310 s, 4 in purgatory; "
                                          "broker 2: produce remote time p99 0.320 s")


def test_no_pairs_no_probe_signals():
    history = History(300.0)
    history.add(1000.0, [sample("kdiag_kafka_replica_fetch_max_lag", 0.0, GAUGE, broker_id=1)])
    assert replica_fields(history, 30.0)["1"]["replica_probe_p90_seconds"] is None


def test_what_the_slow_broker_is_slow_at_and_whom_it_holds_back():
    out = fields()
    assert out["3"]["replica_slow_at"] == ("fetching as broker 1's follower (p90 0.423 s), appending and acking as "
                                          "broker 2's leader (p90 0.423 s)")
    assert out["3"]["reaches_brokers"] == "1,2"  # the leader of its pair, and both brokers answering produce requests
    assert out["1"]["reaches_brokers"] == "2"  # the leader of the pair it follows, which has produce remote time too
