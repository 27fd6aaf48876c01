"""The slow replica under acks=all: per broker, the probe's replica pairs it is in, its replica fetcher lag, and the
leaders waiting on followers (produce remote time, produce purgatory)."""

from __future__ import annotations

import statistics

from kdiag.core.history import History
from kdiag.analysis.brokers import on_brokers
from kdiag.analysis.latency_outliers import histogram_quantile
from kdiag.analysis.signals import latest_by, latest_per, rates_by, ratio
from kdiag.families.kafka import KAFKA_PRODUCE_PURGATORY_SIZE, KAFKA_REPLICA_FETCH_MAX_LAG, KAFKA_REQUEST_TIME_SECONDS
from kdiag.families.probe import PROBE_REPLICA_LATENCY_SECONDS

# p90, not p99: a window holds a few dozen sends per pair, whose p99 is their maximum, one hiccup of a loaded host; a
# replica stalled a third of the time or more lifts the p90 as much.
PAIR_QUANTILE = 0.9
REPLICA_SCHEMA = {
    "replica_probe_p90_seconds": "the lowest acks=all probe p90 of the replica pairs this broker is in (the probe's "
                                 "pairs topic: 2 replicas each, every broker leading one and following one); high "
                                 "only when every pair with this broker is slow",
    "replica_probe_peers_p90_seconds": "the median of the other brokers' replica_probe_p90_seconds",
    "replica_probe_vs_peers": "replica_probe_p90_seconds over the other brokers' median",
    "replica_probe_follower_p90_seconds": "the probe p90 of the pairs this broker follows (the leader waits for it)",
    "replica_probe_leader_p90_seconds": "the probe p90 of the pairs this broker leads",
    "replica_probe_pairs": "each replica pair with this broker and its probe p90",
    "replica_slow_at": "what this broker's pairs wait for, slowest first: its fetches as a follower (the leader waits "
                       "for them) and its own appends and acks as a leader, with each pair's probe p90",
    "replica_fetch_max_lag": "messages the furthest-behind partition this broker follows lags its leader by (JMX "
                             "ReplicaFetcherManager MaxLag)",
    "produce_purgatory_size": "produce requests waiting here for followers (JMX DelayedOperationPurgatory Produce)",
    "waiting_leaders": "the other brokers as leaders waiting for followers: produce remote time p99 and produce "
                       "purgatory size",
    "reaches_brokers": "the other brokers a slow replica here holds back, comma-separated: the leaders of the pairs it "
                       "follows and the brokers with produce remote time (leaders that may wait for it); their ISR "
                       "churn nests under its replica_slow",
}


def pair_quantiles(history: History, window: float) -> dict[tuple[str, str], float]:
    """(follower, leader) -> the probe p90 of that replica pair over the window."""
    buckets: dict[tuple[str, str], dict[float, float]] = {}
    for (follower, leader, le), r in rates_by(history, PROBE_REPLICA_LATENCY_SECONDS, window,
                                               "broker_id", "leader_id", "le", suffix="_bucket").items():
        buckets.setdefault((follower, leader), {})[float(le)] = r
    return {pair: v for pair, b in buckets.items() if (v := histogram_quantile(PAIR_QUANTILE, b)) is not None}


def slow_at(broker: str, pairs: dict[tuple[str, str], float]) -> str | None:
    """The roles of this broker in its pairs, slowest first: "fetching as broker 1's follower (p90 0.221 s), ..."."""
    roles = [(v, f"fetching as broker {leader}'s follower") for (follower, leader), v in pairs.items()
             if follower == broker]
    roles += [(v, f"appending and acking as broker {follower}'s leader") for (follower, leader), v in pairs.items()
              if leader == broker]
    return ", ".join(f"{what} (p90 {v:.3f} s)" for v, what in sorted(roles, key=lambda r: -r[0])) or None


def replica_fields(history: History, window: float) -> dict[str, dict[str, float | str | None]]:
    """REPLICA_SCHEMA's signals per broker id."""
    pairs = pair_quantiles(history, window)
    lowest = {b: min(v for pair, v in pairs.items() if b in pair) for pair in pairs for b in pair}
    remote = latest_by(history, KAFKA_REQUEST_TIME_SECONDS, "broker_id", "request", "phase", "quantile")
    lag = latest_per(history, KAFKA_REPLICA_FETCH_MAX_LAG, "broker_id")
    purgatory = latest_per(history, KAFKA_PRODUCE_PURGATORY_SIZE, "broker_id")
    leaders = {b for (b, request, phase, q) in remote if (request, phase, q) == ("Produce", "remote", "0.99")}
    out: dict[str, dict[str, float | str | None]] = {}
    for b in sorted(set(lowest) | set(lag) | set(purgatory) | leaders):
        peers = [v for other, v in lowest.items() if other != b]
        median = statistics.median(peers) if peers else None
        waiting = [f"broker {other}: produce remote time p99 {remote[(other, 'Produce', 'remote', '0.99')]:.3f} s"
                   + (f", {purgatory[other]:.0f} in purgatory" if other in purgatory else "")
                   for other in sorted(leaders - {b}, key=lambda x: (len(x), x))]
        out[b] = {
            "replica_probe_p90_seconds": lowest.get(b),
            "replica_probe_peers_p90_seconds": median,
            "replica_probe_vs_peers": ratio(lowest.get(b), median),
            "replica_probe_follower_p90_seconds": max((v for (f, _), v in pairs.items() if f == b), default=None),
            "replica_probe_leader_p90_seconds": max((v for (_, ld), v in pairs.items() if ld == b), default=None),
            "replica_slow_at": slow_at(b, pairs),
            "replica_probe_pairs": "; ".join(f"{f} following {ld}: {v:.3f} s" for (f, ld), v in sorted(pairs.items())
                                             if b in (f, ld)) or None,
            "replica_fetch_max_lag": lag.get(b),
            "produce_purgatory_size": purgatory.get(b),
            "waiting_leaders": "; ".join(waiting) or None,
            "reaches_brokers": on_brokers((leaders | {ld for (f, ld) in pairs if f == b}) - {b}),
        }
    return out
