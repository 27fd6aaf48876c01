"""The partitions lagging most, in the AdminClient's process: kafka.top_partitions (group, topic, partition) by lag
in messages over every group's committed offsets, each with the time its record at the committed offset was written
when that is known (record_time.py, read once per offset)."""

from __future__ import annotations

import heapq

from kdiag.kafka.committed import Committed
from kdiag.kafka.state import PartitionLag, TopicLag


class TopPartitions:
    """The n (group, topic, partition) furthest behind their log end, kept in a heap of n as groups are added, and each
    group's lag per topic from the same pass."""

    def __init__(self, n: int):
        self.n = n
        self._heap: list[tuple[int, str, str, int, int]] = []  # (lag, group, topic, partition, committed offset)

    def add(self, group: str, committed: Committed, ends: dict[str, dict[int, int | None]]) -> dict[str, TopicLag]:
        """Per topic, the group's lag summed over its committed partitions of a known end and the largest partition
        lag; each lagging partition is considered for the n kept (one pass over the group's committed offsets)."""
        heap, n = self._heap, self.n
        # Below the smallest kept lag nothing gets in: at 5,000,000 committed partitions most are only compared.
        floor = heap[0][0] if n > 0 and len(heap) >= n else 0
        lag: dict[str, TopicLag] = {}
        for topic, offsets in sorted(committed.items()):
            topic_ends = ends.get(topic, {})
            total = largest = 0
            known = False
            for partition, offset in offsets:
                if (end := topic_ends.get(partition)) is None:
                    continue
                known = True
                if (behind := end - offset) <= 0:
                    continue
                total += behind
                largest = max(largest, behind)
                if n <= 0 or behind < floor:
                    continue
                item = (behind, group, topic, partition, offset)
                if len(heap) < n:
                    heapq.heappush(heap, item)
                elif item > heap[0]:
                    heapq.heapreplace(heap, item)
                else:
                    continue
                if len(heap) >= n:
                    floor = heap[0][0]
            if known:
                lag[topic] = {"sum": total, "max": largest}
        return lag

    def result(self) -> list[PartitionLag]:
        """The partitions kept, furthest behind first."""
        return [{"group": g, "topic": t, "partition": p, "committed": o, "lag": lag}
                for lag, g, t, p, o in sorted(self._heap, reverse=True)]
