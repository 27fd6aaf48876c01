"""Per-partition probe bookkeeping (pure): where each send was acked, what the consumer read there, and the verdicts."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Any

RECEIVED, DUPLICATE, OUT_OF_ORDER, REREAD = "received", "duplicate", "out_of_order", "reread"
MEMORY = 10000  # sequences remembered per partition, received and awaited each


@dataclass
class _Ack:
    offset: int  # negative when the broker named none (acks=0)
    tag: Any


class _Partition:
    """One partition's acks awaited, sequences received, and where the consumer read last."""

    def __init__(self, sla: float, memory: int):
        self.sla = sla
        self.memory = memory
        self.waiting: dict[int, _Ack] = {}  # acked, not read yet: seq -> ack
        self.by_offset: list[tuple[int, int]] = []  # heap of (offset, seq) of waiting acks
        self.deadlines: deque[tuple[float, int]] = deque()  # (deadline, seq) of offset-less acks
        self.received: dict[int, int] = {}  # seq -> offset it was read at, oldest first
        self.forgotten = -1  # highest received seq dropped from memory
        self.high = -1  # highest seq received
        self.last_read = -1  # offset of the last message the consumer read there, whoever wrote it

    def acked(self, seq: int, offset: int, now: float, tag: Any) -> list[Any]:
        """As SequenceTracker.acked, for this partition."""
        if seq in self.received:
            return []
        if 0 <= offset <= self.last_read:
            return [tag]
        self.waiting[seq] = _Ack(offset, tag)
        if offset >= 0:
            heapq.heappush(self.by_offset, (offset, seq))
        else:
            self.deadlines.append((now + self.sla, seq))
        if len(self.waiting) > self.memory:  # the consumer is stuck: forget the oldest, neither read nor lost
            del self.waiting[next(iter(self.waiting))]
        if len(self.by_offset) > 2 * self.memory:
            self.by_offset = [(a.offset, s) for s, a in self.waiting.items() if a.offset >= 0]
            heapq.heapify(self.by_offset)
        return []

    def failed(self, seq: int) -> None:
        """As SequenceTracker.failed, for this partition."""
        self.waiting.pop(seq, None)

    def consumed(self, offset: int, seq: int | None) -> tuple[str | None, list[Any]]:
        """As SequenceTracker.consumed, for this partition."""
        outcome = None if seq is None else self._classify(seq, offset)
        self.last_read = offset
        lost = []
        while self.by_offset and self.by_offset[0][0] <= offset:
            acked_at, s = heapq.heappop(self.by_offset)
            ack = self.waiting.get(s)
            if ack is not None and ack.offset == acked_at:
                del self.waiting[s]
                lost.append(ack.tag)
        return outcome, lost

    def _classify(self, seq: int, offset: int) -> str:
        if seq in self.received:
            return REREAD if self.received[seq] == offset else DUPLICATE
        if seq <= self.forgotten:
            return REREAD  # too old to tell: a re-read from the log start after an offset reset
        self.waiting.pop(seq, None)
        self.received[seq] = offset
        if len(self.received) > self.memory:
            oldest = next(iter(self.received))
            del self.received[oldest]
            self.forgotten = max(self.forgotten, oldest)
        outcome = OUT_OF_ORDER if seq < self.high else RECEIVED
        self.high = max(self.high, seq)
        return outcome

    def expire(self, now: float) -> list[Any]:
        """The tags of offset-less acks past their deadline."""
        lost = []
        while self.deadlines and self.deadlines[0][0] <= now:
            ack = self.waiting.pop(self.deadlines.popleft()[1], None)
            if ack is not None:
                lost.append(ack.tag)
        return lost


class SequenceTracker:
    """Acks, reads and their verdicts per partition; memory bounded by MEMORY sequences per partition."""

    def __init__(self, sla: float, memory: int = MEMORY):
        self.sla = sla
        self.memory = memory
        self.partitions: dict[int, _Partition] = {}

    def _part(self, partition: int) -> _Partition:
        if partition not in self.partitions:
            self.partitions[partition] = _Partition(self.sla, self.memory)
        return self.partitions[partition]

    def acked(self, partition: int, seq: int, offset: int, now: float, tag: Any = None) -> list[Any]:
        """The broker acknowledged seq at offset; returns [tag] when the consumer already read past it without it."""
        return self._part(partition).acked(seq, offset, now, tag)

    def failed(self, partition: int, seq: int) -> None:
        """The send of seq failed: it is not awaited (a copy the broker wrote anyway is still welcome)."""
        self._part(partition).failed(seq)

    def consumed(self, partition: int, offset: int, seq: int | None = None) -> tuple[str | None, list[Any]]:
        """The consumer read offset (seq None: another writer's message); returns its outcome and the lost tags."""
        return self._part(partition).consumed(offset, seq)

    def expire(self, now: float) -> list[Any]:
        """Offset-less acks past their deadline: now lost; returns the tag of each."""
        return [tag for p in self.partitions.values() for tag in p.expire(now)]

    def pending(self) -> int:
        """Acked sequences neither read nor known lost yet."""
        return sum(len(p.waiting) for p in self.partitions.values())
