"""The slow broker: each broker's probe p99 against its peers' and its own past, which part of a request (Kafka's
RequestMetrics split) is slow, and its longest GC pause."""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Iterable

from kdiag.kafka import jvm_gc
from kdiag.core.history import History, counter_increase
from kdiag.analysis.signals import rates_by, ratio
from kdiag.families.family import Family
from kdiag.families.kafka import JVM_GC_COLLECTIONS_TOTAL, JVM_GC_COLLECTION_SECONDS_TOTAL
from kdiag.families.probe import PROBE_END_TO_END_LATENCY_SECONDS, PROBE_PRODUCE_LATENCY_SECONDS

PROBE_LATENCIES = (PROBE_PRODUCE_LATENCY_SECONDS, PROBE_END_TO_END_LATENCY_SECONDS)
HISTORY_SLICES = 20  # past windows whose p99s make a broker's own baseline (10 minutes at the daemon's 30 s window)
MIN_HISTORY_SLICES = 4
GC_PAUSE_SECONDS = 300.0  # how far back the longest GC pause is looked for  # fewer past windows than this: no baseline yet
REQUEST_PARTS = {  # (request, phase) -> what a slow one means
    ("Produce", "queue"): "produce requests wait for a request handler thread",
    ("Produce", "local"): "slow log append (disk or page cache)",
    ("Produce", "remote"): "produce waits for followers (acks=all): slow follower fetch",
    ("Produce", "response_queue"): "produce responses wait for a network thread",
    ("Produce", "response_send"): "slow sending of produce responses (network)",
    ("FetchFollower", "queue"): "follower fetches wait for a request handler thread",
    ("FetchFollower", "local"): "slow follower fetch reads (disk)",
    ("FetchFollower", "response_queue"): "follower fetch responses wait for a network thread",
    ("FetchFollower", "response_send"): "slow sending to followers (network)",
    ("FetchConsumer", "queue"): "consumer fetches wait for a request handler thread",
    ("FetchConsumer", "local"): "slow consumer fetch reads (disk)",
    ("FetchConsumer", "response_queue"): "consumer fetch responses wait for a network thread",
    ("FetchConsumer", "response_send"): "slow sending to consumers (network)",
}
REQUEST_SIGNALS = {"Produce": "produce", "FetchFollower": "fetch_follower", "FetchConsumer": "fetch_consumer"}


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus-style quantile from cumulative bucket counts {upper bound: count}, None without data."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = bound, count
    return lower


def window_quantiles(history: History, family: Family, window: float, q: float) -> dict[str, float]:
    """Quantile per broker_id of the observations a histogram gained over the window."""
    increases: dict[str, dict[float, float]] = {}
    for (broker, le), r in rates_by(history, family, window, "broker_id", "le", suffix="_bucket").items():
        increases.setdefault(broker, {})[float(le)] = r
    return {b: v for b, buckets in increases.items() if (v := histogram_quantile(q, buckets)) is not None}


def cumulative(points: Iterable[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """(times, increase since the first point) of a counter series, resets counted as restarts from 0."""
    times, totals, total, previous = [], [], 0.0, None
    for t, v in points:
        if previous is not None:
            total += counter_increase(previous, v, "counter")
        times.append(t)
        totals.append(total)
        previous = v
    return times, totals


def slice_quantiles(history: History, family: Family, window: float, q: float, slices: int) -> dict[str, list[float | None]]:
    """Per broker_id, the quantile of each of the last `slices` windows of a histogram, newest first (None: no
    observation in that window)."""
    now = history.latest_time
    if now is None:
        return {}
    ends = [now - i * window for i in range(slices)]
    per: dict[str, list[dict[float, float]]] = {}
    for labels, points, _ in history.series(f"{family.name}_bucket"):
        times, totals = cumulative(points)
        le = float(labels.get("le", "nan"))
        buckets = per.setdefault(labels.get("broker_id", ""), [{} for _ in ends])
        for i, end in enumerate(ends):
            last = bisect.bisect_right(times, end) - 1
            first = bisect.bisect_left(times, end - window)
            if last > first:
                buckets[i][le] = buckets[i].get(le, 0.0) + totals[last] - totals[first]
    return {b: [histogram_quantile(q, window_buckets) for window_buckets in windows] for b, windows in per.items()}


def probe_outliers(history: History, window: float) -> dict[str, dict[str, float]]:
    """Per broker: its probe p99 now, its peers' median and its own past lower quartile, and its ratios to them; of
    produce and end to end, the one with the larger ratio to its peers."""
    out: dict[str, dict[str, float]] = {}
    for family in PROBE_LATENCIES:
        windows = slice_quantiles(history, family, window, 0.99, HISTORY_SLICES + 1)
        now = {b: w[0] for b, w in windows.items() if w[0] is not None}
        for b, p99 in now.items():
            peers = [v for other, v in now.items() if other != b]
            past = [v for v in windows[b][1:] if v is not None]
            peer_median = statistics.median(peers) if peers else None
            # The lower quartile of its past windows: a broker slow for minutes stays anomalous until it has been slow for
            # three quarters of its history, while one always slower than its peers never is.
            past_base = statistics.quantiles(past, n=4)[0] if len(past) >= MIN_HISTORY_SLICES else None
            row = {"p99": p99, "peers_p99": peer_median, "history_p99": past_base,
                   "vs_peers": ratio(p99, peer_median), "vs_history": ratio(p99, past_base)}
            # Of produce and end to end, the one further above its peers speaks for the broker, all its numbers together.
            if b not in out or (row["vs_peers"] or 0.0, p99) > (out[b].get("vs_peers") or 0.0, out[b]["p99"]):
                out[b] = {k: v for k, v in row.items() if v is not None}
    return out


def slowest_request_part(times: dict[tuple[str, ...], float], broker: str) -> str | None:
    """The request phase whose p99 is the highest on this broker, named with what it means and its ratio to the other
    brokers' median of the same phase."""
    best: tuple[float, str, str] | None = None
    for (request, phase), meaning in REQUEST_PARTS.items():
        value = times.get((broker, request, phase, "0.99"))
        if value is not None and value > 0 and (best is None or value > best[0]):
            best = (value, f"{request} {phase.replace('_', ' ')}", meaning)
    if best is None:
        return None
    value, part, meaning = best
    request, _, phase = part.partition(" ")
    peers = [v for (b, r, p, q), v in times.items()
             if b != broker and r == request and p.replace("_", " ") == phase and q == "0.99"]
    against = f", {value / statistics.median(peers):.1f}x the other brokers'" if peers and statistics.median(peers) > 0 else ""
    return f"{meaning} ({part} time p99 {value:.3f} s{against})"


def longest_gc_pauses(history: History, seconds: float = GC_PAUSE_SECONDS) -> dict[str, float]:
    """Per broker, the longest mean stop-the-world pause between two JMX reads in the last `seconds`: collection time
    gained over collections gained, exact when one collection fell between the reads, else a lower bound."""
    counts = {(labels.get("broker_id", ""), labels.get("gc", "")): dict(points)
              for labels, points, _ in history.series(JVM_GC_COLLECTIONS_TOTAL.name)}
    out: dict[str, float] = {}
    for labels, points, _ in history.series(JVM_GC_COLLECTION_SECONDS_TOTAL.name):
        key = (labels.get("broker_id", ""), labels.get("gc", ""))
        if not jvm_gc.pauses(key[1]) or key not in counts:
            continue
        recent = [(t, v, counts[key][t]) for t, v in points if t >= points[-1][0] - seconds and t in counts[key]]
        for (_, v0, c0), (_, v1, c1) in itertools.pairwise(recent):
            if (collections := counter_increase(c0, c1, "counter")) > 0:
                out[key[0]] = max(out.get(key[0], 0.0), counter_increase(v0, v1, "counter") / collections)
    return out

