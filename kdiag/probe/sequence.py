"""Per-partition probe bookkeeping (pure): where each send was acked, what the consumer read there, and the verdicts."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any

RECEIVED, DUPLICATE, OUT_OF_ORDER, REREAD = "received", "duplicate", "out_of_order", "reread"
MEMORY = 10000  # sequences remembered per partition, received and awaited each


@dataclass
class _Ack:
    offset: int  # negative when the broker named none (acks=0)
    tag: Any


@dataclass
class _Partition:
    waiting: dict[int, _Ack] = field(default_factory=dict)  # acked, not read yet: seq -> ack
    by_offset: list[tuple[int, int]] = field(default_factory=list)  # heap of (offset, seq) of waiting acks
    deadlines: deque[tuple[float, int]] = field(default_factory=deque)  # (deadline, seq) of offset-less acks
    received: dict[int, int] = field(default_factory=dict)  # seq -> offset it was read at, oldest first
    forgotten: int = -1  # highest received seq dropped from memory
    high: int = -1  # highest seq received
    last_read: int = -1  # offset of the last message the consumer read there, whoever wrote it


class SequenceTracker:
    """Acks, reads and their verdicts per partition; memory bounded by MEMORY sequences per partition."""

    def __init__(self, sla: float, memory: int = MEMORY):
        self.sla = sla
        self.memory = memory
        self.partitions: dict[int, _Partition] = {}

    def _part(self, partition: int) -> _Partition:
        return self.partitions.setdefault(partition, _Partition())

    def acked(self, partition: int, seq: int, offset: int, now: float, tag: Any = None) -> list[Any]:
        """The broker acknowledged seq at offset; returns [tag] when the consumer already read past it without it."""
        p = self._part(partition)
        if seq in p.received:
            return []
        if 0 <= offset <= p.last_read:
            return [tag]
        p.waiting[seq] = _Ack(offset, tag)
        if offset >= 0:
            heapq.heappush(p.by_offset, (offset, seq))
        else:
            p.deadlines.append((now + self.sla, seq))
        if len(p.waiting) > self.memory:  # the consumer is stuck: forget the oldest, neither read nor lost
            del p.waiting[next(iter(p.waiting))]
        if len(p.by_offset) > 2 * self.memory:
            p.by_offset = [(a.offset, s) for s, a in p.waiting.items() if a.offset >= 0]
            heapq.heapify(p.by_offset)
        return []

    def failed(self, partition: int, seq: int) -> None:
        """The send of seq failed: it is not awaited (a copy the broker wrote anyway is still welcome)."""
        self._part(partition).waiting.pop(seq, None)

    def consumed(self, partition: int, offset: int, seq: int | None = None) -> tuple[str | None, list[Any]]:
        """The consumer read offset (seq None: another writer's message); returns its outcome and the lost tags."""
        p = self._part(partition)
        outcome = None if seq is None else self._classify(p, seq, offset)
        p.last_read = offset
        lost = []
        while p.by_offset and p.by_offset[0][0] <= offset:
            acked_at, s = heapq.heappop(p.by_offset)
            ack = p.waiting.get(s)
            if ack is not None and ack.offset == acked_at:
                del p.waiting[s]
                lost.append(ack.tag)
        return outcome, lost

    def _classify(self, p: _Partition, seq: int, offset: int) -> str:
        if seq in p.received:
            return REREAD if p.received[seq] == offset else DUPLICATE
        if seq <= p.forgotten:
            return REREAD  # too old to tell: a re-read from the log start after an offset reset
        p.waiting.pop(seq, None)
        p.received[seq] = offset
        if len(p.received) > self.memory:
            oldest = next(iter(p.received))
            del p.received[oldest]
            p.forgotten = max(p.forgotten, oldest)
        outcome = OUT_OF_ORDER if seq < p.high else RECEIVED
        p.high = max(p.high, seq)
        return outcome

    def expire(self, now: float) -> list[Any]:
        """Offset-less acks past their deadline: now lost; returns the tag of each."""
        lost = []
        for p in self.partitions.values():
            while p.deadlines and p.deadlines[0][0] <= now:
                ack = p.waiting.pop(p.deadlines.popleft()[1], None)
                if ack is not None:
                    lost.append(ack.tag)
        return lost

    def pending(self) -> int:
        """Acked sequences neither read nor known lost yet."""
        return sum(len(p.waiting) for p in self.partitions.values())
