"""Consumer lag in seconds without reading records: when was a topic's log end where the group's committed offset is now.

Each admin fetch adds, per topic, the sum of its partitions' log end offsets at that time; a group's committed total
on the topic is that sum minus its lag. Interpolating the sum's history gives the time the log end passed the
committed total: the lag in seconds is how long ago that was. Where the history begins after that point (kdiag just
started, or the group is further behind than the retention), the oldest record timestamp the AdminClient process read
at the group's committed offsets answers instead (`record_time` in the admin state) when it is plausible: a producer
sets CreateTime, and one that stamped 1 (1970) made 57 years of lag. A plausible record time is not in the future
and no older than the topic's retention and a segment (its records are gone by then), nor than Kafka itself; else
there is no value until the history reaches back to the group's offset.
The topic's total stands for each partition's end: exact while the group committed every partition and the partitions
are written evenly; a group that committed only some partitions reads as less far behind.

The time to catch up is the lag in messages over how fast it shrank in the last GROWTH_SECONDS, +Inf (never) while
it does not shrink.
"""

from __future__ import annotations

import itertools
import math
from kdiag.core.history import Points, drop_before
from collections.abc import Sequence

from kdiag.core.cardinality import SeriesFilter
from kdiag.core.sample import Canonical, Sample, same_labels
from kdiag.families.family import Family
from kdiag.families.kafka import CONSUMER_CATCH_UP_SECONDS, CONSUMER_LAG_SECONDS, CONSUMER_LAST_COMMIT_AGE_SECONDS
from kdiag.kafka.state import AdminState, ConfigValues, Topic

FAMILIES = (CONSUMER_LAG_SECONDS, CONSUMER_CATCH_UP_SECONDS, CONSUMER_LAST_COMMIT_AGE_SECONDS)

# The span over which the lag's change is measured, as the consumer_lag_growing rule's growth (kafka_signals.py).
GROWTH_SECONDS = 120.0
KAFKA_EPOCH = 1293840000.0  # 2011-01-01, before Kafka's first release: no record of a real cluster is older
CLOCK_SKEW_SECONDS = 60.0  # a producer's clock a little ahead of this host's
DEFAULT_SEGMENT_MS = 7 * 86400 * 1000.0  # segment.ms's default: a segment may outlive retention by this much


def time_at_offset(points: Sequence[tuple[float, float]], offset: float) -> float | None:
    """When the log end (points: (time, end) in time order) was last at `offset`, interpolated between points; the
    latest time when the end never passed it; None when the history starts past it or is empty.

    A drop of the end (the topic deleted and made again) starts the history over from that point."""
    if not points:
        return None
    later = points[-1]
    if offset >= later[1]:
        return later[0]
    for earlier in itertools.islice(reversed(points), 1, None):
        if earlier[1] > later[1]:  # a reset: nothing before it counts
            return None
        if earlier[1] <= offset:
            share = (offset - earlier[1]) / (later[1] - earlier[1])
            return earlier[0] + share * (later[0] - earlier[0])
        later = earlier
    return None


def _ms(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def plausible_record_time(t: float, now: float, configs: ConfigValues) -> bool:
    """Whether a record's timestamp can be when it was written: not ahead of now (beyond a little clock skew), not
    older than the topic's retention.ms and one segment.ms (its segment would be deleted), nor than Kafka."""
    retention = _ms(configs.get("retention.ms"))
    oldest = KAFKA_EPOCH
    if retention is not None and retention >= 0:
        oldest = max(oldest, now - (retention + (_ms(configs.get("segment.ms")) or DEFAULT_SEGMENT_MS)) / 1000)
    return oldest <= t <= now + CLOCK_SKEW_SECONDS


class LagClock:
    """Per topic, its log end offset total at each admin fetch over the last `retention` seconds, and the lag in
    seconds of each group from it."""

    def __init__(self, retention: float = 900.0):
        self.retention = retention
        self._ends: dict[str, Points] = {}
        self._lags: dict[tuple[str, str], Points] = {}  # (group, topic) -> (time, lag in messages)
        # (group, topic) pairs the history could not answer at the last fetch: the next asks for their record times.
        self.unanswered: list[list[str]] = []

    def observe(self, t: float, topics: dict[str, Topic]) -> dict[str, float]:
        """Add each topic's end total at time t (only a topic whose every partition's end is known) and forget
        topics gone and points older than the retention; returns the totals added."""
        totals = {}
        for name, topic in topics.items():
            ends = [end for p in topic["partitions"] if (end := p["log_end_offset"]) is not None]
            if ends and len(ends) == len(topic["partitions"]):
                totals[name] = float(sum(ends))
                self._ends.setdefault(name, []).append((t, totals[name]))
        for name in [n for n in self._ends if n not in topics]:
            del self._ends[name]
        horizon = t - self.retention
        for points in self._ends.values():
            drop_before(points, horizon)
        return totals

    def seconds(self, now: float, topic: str, committed: float) -> float | None:
        """How long before `now` the topic's log end was at `committed`; None when its history does not reach back."""
        at = time_at_offset(self._ends.get(topic, ()), committed)
        return None if at is None else max(now - at, 0.0)

    def catch_up(self, now: float, group: str, topic: str, lag: float) -> float | None:
        """Seconds until the group's lag on the topic is gone at its consume and write rates of the last
        GROWTH_SECONDS (lag / how fast it shrinks); +Inf (never) while it does not shrink, None before two fetches."""
        points = self._lags.setdefault((group, topic), [])
        points.append((now, lag))
        drop_before(points, now - GROWTH_SECONDS)
        if lag <= 0:
            return 0.0
        if now <= points[0][0]:
            return None
        shrink = (points[0][1] - lag) / (now - points[0][0])
        return lag / shrink if shrink > 0 else math.inf

    def samples(self, now: float, state: AdminState, group_series: SeriesFilter,
                canonical: Canonical = same_labels) -> list[Sample]:
        """Lag seconds and time to catch up of every group on each topic it committed (the largest over its topics for
        groups outside group_series), from the admin state just fetched at `now`; labels through `canonical`."""
        totals = self.observe(now, state["topics"])
        out = []
        self.unanswered = []
        seen = set()
        for group, g in state["consumer_groups"].items():
            values: dict[Family, dict[str, float]] = {CONSUMER_LAG_SECONDS: {}, CONSUMER_CATCH_UP_SECONDS: {}}
            for topic, lag in g["lag"].items():
                seen.add((group, topic))
                if (catch_up := self.catch_up(now, group, topic, lag["sum"])) is not None:
                    values[CONSUMER_CATCH_UP_SECONDS][topic] = catch_up
                if topic not in totals:
                    continue
                seconds = self.seconds(now, topic, totals[topic] - lag["sum"])
                if seconds is None:
                    self.unanswered.append([group, topic])
                    configs = state["topics"][topic]["configs"] if topic in state["topics"] else {}
                    if "record_time" in lag and plausible_record_time(lag["record_time"], now, configs):
                        seconds = max(now - lag["record_time"], 0.0)
                if seconds is not None:
                    values[CONSUMER_LAG_SECONDS][topic] = seconds
            labels = canonical((("group", group),))
            if "last_commit" in g:
                out.append(CONSUMER_LAST_COMMIT_AGE_SECONDS.labelled(max(now - g["last_commit"], 0.0), labels))
            for family, per_topic in values.items():
                if group_series.matches(group):
                    out += [family.labelled(v, canonical((("group", group), ("topic", t)))) for t, v in per_topic.items()]
                elif per_topic:
                    out.append(family.labelled(max(per_topic.values()), labels))
        for gone in self._lags.keys() - seen:
            del self._lags[gone]
        return out
