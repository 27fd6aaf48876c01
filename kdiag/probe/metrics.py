"""The probe's metrics: per-broker histograms, counters and availability outcomes."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, deque

from kdiag.core.sample import Sample
from kdiag.families.family import Family
from kdiag.families.probe import (MESSAGES, PROBE_AVAILABILITY_RATIO, PROBE_END_TO_END_LATENCY_SECONDS,
                                  PROBE_PRODUCE_LATENCY_SECONDS)


class Histogram:
    """Cumulative histogram with fixed upper bounds, rendered as Prometheus _bucket/_sum/_count samples."""

    def __init__(self, bounds: list[float]):
        self.bounds = sorted(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one observation."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def samples(self, family: Family, **labels: object) -> list[Sample]:
        """The _bucket series (le, cumulative, +Inf last), _sum and _count."""
        out, total = [], 0
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            total += count
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            out.append(family.series("_bucket", total, le=le, **labels))
        out.append(family.series("_sum", self.sum, **labels))
        out.append(family.series("_count", total, **labels))
        return out


class BrokerStats:
    """One broker's probe histograms, counters and recent send outcomes."""

    def __init__(self, buckets: list[float]):
        self.produce = Histogram(buckets)
        self.end_to_end = Histogram(buckets)
        self.counts: Counter[str] = Counter()
        self.outcomes: deque[tuple[float, bool]] = deque()  # (send time, acked) for availability

    def samples(self, broker: int) -> list[Sample]:
        """This broker's histograms, counters and availability ratio (when it had sends in the window)."""
        out = self.produce.samples(PROBE_PRODUCE_LATENCY_SECONDS, broker_id=broker)
        out += self.end_to_end.samples(PROBE_END_TO_END_LATENCY_SECONDS, broker_id=broker)
        for counter, family in MESSAGES.items():
            out.append(family.sample(self.counts[counter], broker_id=broker))
        if self.outcomes:
            ratio = sum(ok for _t, ok in self.outcomes) / len(self.outcomes)
            out.append(PROBE_AVAILABILITY_RATIO.sample(ratio, broker_id=broker))
        return out
