"""The partitions lagging most, in the AdminClient's process: kafka.top_partitions (group, topic, partition) by lag
in messages over every group's committed offsets, each with the time its record at the committed offset was written
when that is known (record_time.py, read once per offset)."""

from __future__ import annotations

import heapq

from kdiag.kafka.committed import Committed
from kdiag.kafka.state import PartitionLag



class TopPartitions:
    """The n (group, topic, partition) furthest behind their log end, kept in a heap of n as groups are added."""

    def __init__(self, n: int):
        self.n = n
        self._heap: list[tuple[int, str, str, int, int]] = []  # (lag, group, topic, partition, committed offset)

    def add(self, group: str, committed: Committed, ends: dict[str, dict[int, int | None]]) -> None:
        """Consider every committed partition of one group."""
        if self.n <= 0:
            return
        heap, n = self._heap, self.n
        # Below the smallest kept lag nothing gets in: at 5,000,000 committed partitions most are only compared.
        floor = heap[0][0] if len(heap) >= n else 0
        for topic, offsets in committed.items():
            topic_ends = ends.get(topic, {})
            for partition, offset in offsets:
                if (end := topic_ends.get(partition)) is None or end - offset < floor or end <= offset:
                    continue
                item = (end - offset, group, topic, partition, offset)
                if len(heap) < n:
                    heapq.heappush(heap, item)
                elif item > heap[0]:
                    heapq.heapreplace(heap, item)
                else:
                    continue
                if len(heap) >= n:
                    floor = heap[0][0]

    def result(self) -> list[PartitionLag]:
        """The partitions kept, furthest behind first."""
        return [{"group": g, "topic": t, "partition": p, "committed": o, "lag": lag}
                for lag, g, t, p, o in sorted(self._heap, reverse=True)]
