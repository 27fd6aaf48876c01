"""Cardinality controls: which topics and groups get fine-grained series, and the cap on Kafka series in /metrics."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from kdiag.core.quote import quote
from kdiag.core.sample import Sample

KAFKA_PREFIX = ("kdiag_kafka_", "kdiag_consumer_")
# Finest first out when the cap cuts: per-partition series, then per-topic lag of groups, then everything else.
DROP_RANK = {"kdiag_kafka_partition_": 2, "kdiag_kafka_consumergroup_lag": 1, "kdiag_consumer_lag_seconds": 1}


@dataclass
class SeriesFilter:
    """Names (topics or groups) that get fine-grained series: matching an `allow` regex and no `ignore` regex, in full."""

    allow: list[str] = field(default_factory=lambda: [".*"])
    ignore: list[str] = field(default_factory=list)

    def check(self, key: str) -> None:
        """ValueError naming key.allow[i] or key.ignore[i] for a regex that does not compile."""
        for kind in ("allow", "ignore"):
            for i, pattern in enumerate(getattr(self, kind)):
                try:
                    re.compile(pattern)
                except re.error as e:
                    raise ValueError(f"{key}.{kind}[{i}]: {quote(pattern)} is not a regular expression ({e})") from None

    @functools.cached_property
    def _compiled(self) -> tuple[list[re.Pattern[str]], list[re.Pattern[str]]]:
        return [re.compile(p) for p in self.allow], [re.compile(p) for p in self.ignore]

    def matches(self, name: str) -> bool:
        """Whether name gets fine-grained series."""
        allow, ignore = self._compiled
        return any(p.fullmatch(name) for p in allow) and not any(p.fullmatch(name) for p in ignore)


GROUP_PREFIX = ("kdiag_kafka_consumergroup_", "kdiag_consumer_")
# What ranks a group for kafka.top_groups: its lag in seconds, then in messages (the largest over its topics).
GROUP_RANK = ("kdiag_consumer_lag_seconds", "kdiag_kafka_consumergroup_lag_max")


def top_groups(samples: list[Sample], n: int) -> list[Sample]:
    """samples with consumer group series only for the n groups that lag most (seconds, then messages; ties by
    name); samples itself when n is 0 or no more groups have series."""
    if n <= 0:
        return samples
    lags: dict[str, list[float]] = {}
    for s in samples:
        if s.name.startswith(GROUP_PREFIX):
            group = next((v for k, v in s.labels if k == "group"), None)
            rank = lags.setdefault(group, [0.0, 0.0]) if group is not None else None
            if rank is not None and s.name in GROUP_RANK:
                i = GROUP_RANK.index(s.name)
                rank[i] = max(rank[i], s.value)
    if len(lags) <= n:
        return samples
    kept = set(sorted(lags, key=lambda g: (-lags[g][0], -lags[g][1], g))[:n])
    return [s for s in samples if not s.name.startswith(GROUP_PREFIX)
            or next((v for k, v in s.labels if k == "group"), None) in kept]


def _rank(s: Sample) -> int:
    for prefix, rank in DROP_RANK.items():
        if s.name.startswith(prefix) and (rank != 1 or any(k == "topic" for k, _ in s.labels)):
            return rank
    return 0


def cap_kafka_series(samples: list[Sample], max_series: int) -> tuple[list[Sample], int]:
    """samples with at most max_series Kafka series (the coarsest kept first), and how many were left out."""
    kafka = [s for s in samples if s.name.startswith(KAFKA_PREFIX)]
    if len(kafka) <= max_series:
        return samples, 0
    kept = set(sorted(kafka, key=_rank)[:max_series])  # stable: the collectors' order within a rank
    return [s for s in samples if not s.name.startswith(KAFKA_PREFIX) or s in kept], len(kafka) - len(kept)
