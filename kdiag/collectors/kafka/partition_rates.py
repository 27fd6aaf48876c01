"""Per-topic traffic balance made from every partition's log end offset, so that the rules keep it while per-partition
series are off (kafka.partition_series, none by default): at 100,000 partitions those would be most of /metrics.

Between two admin fetches each partition's log end moved by some messages: summed per leading broker they are the
topic's messages per second through that broker, and the busiest partition's part of the total is the topic's top
partition share. A topic whose partition count changed, or that nobody wrote, gives no values for that fetch.
"""

from __future__ import annotations

from array import array

from kdiag.core.sample import Sample
from kdiag.families.kafka import KAFKA_TOPIC_BROKER_MESSAGES_PER_SECOND, KAFKA_TOPIC_PARTITION_TOP_SHARE
from kdiag.kafka.state import Topic

FAMILIES = (KAFKA_TOPIC_BROKER_MESSAGES_PER_SECOND, KAFKA_TOPIC_PARTITION_TOP_SHARE)


UNKNOWN = -1  # a partition's end not read (no leader)


class PartitionRates:
    """Each topic's partition log ends at the last fetch, and the per-topic values of the moves since."""

    def __init__(self) -> None:
        # In arrays, not lists of the state's ints: those would keep the memory of every fetch's state in use.
        self._last: dict[str, tuple[float, array[int]]] = {}

    def samples(self, now: float, topics: dict[str, Topic]) -> list[Sample]:
        """Messages per second per (topic, leading broker) and the top partition share of every topic written since
        the last call; remembers these ends for the next."""
        out = []
        last: dict[str, tuple[float, array[int]]] = {}
        for name, topic in topics.items():
            parts = topic["partitions"]
            ends = array("q", [UNKNOWN if (end := p["log_end_offset"]) is None else end for p in parts])
            last[name] = (now, ends)
            before = self._last.get(name)
            if before is None or len(before[1]) != len(ends) or now <= before[0]:
                continue
            per_broker: dict[int, int] = {}
            total = top = 0
            for p, end, was in zip(parts, ends, before[1], strict=True):
                if end == UNKNOWN or was == UNKNOWN or end <= was:  # unknown, idle, or the topic made again
                    continue
                moved = end - was
                total += moved
                top = max(top, moved)
                if p["leader"] >= 0:
                    per_broker[p["leader"]] = per_broker.get(p["leader"], 0) + moved
            if total:
                seconds = now - before[0]
                out += [KAFKA_TOPIC_BROKER_MESSAGES_PER_SECOND.sample(n / seconds, topic=name, broker_id=b)
                        for b, n in sorted(per_broker.items())]
                out.append(KAFKA_TOPIC_PARTITION_TOP_SHARE.sample(top / total, topic=name))
        self._last = last
        return out
