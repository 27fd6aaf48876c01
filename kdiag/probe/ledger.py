"""The probe's ledger: per broker what was sent, acked, failed, received, late and lost, and the samples of it."""

from __future__ import annotations

import threading
import time
from collections import Counter

from kdiag.config.probe import ProbeConfig
from kdiag.core.sample import Sample
from kdiag.families.probe import PROBE_PARTITIONS, PROBE_PENDING_MESSAGES
from kdiag.probe.metrics import BrokerStats
from kdiag.probe.sequence import DUPLICATE, OUT_OF_ORDER, REREAD, SequenceTracker
from kdiag.probe.topic import Topology


class Ledger:
    """Thread-safe bookkeeping of the probe's sends and reads, attributed to the leader at send time."""

    def __init__(self, config: ProbeConfig):
        self.config = config
        self._lock = threading.Lock()
        self._tracker = SequenceTracker(config.sla)
        self._brokers: dict[int, BrokerStats] = {}

    def _broker(self, broker: int) -> BrokerStats:
        stats = self._brokers.get(broker)
        if stats is None:
            stats = self._brokers[broker] = BrokerStats(self.config.latency_buckets)
        return stats

    def sent(self, leader: int) -> None:
        """One message sent to a partition `leader` leads."""
        with self._lock:
            self._broker(leader).counts["sent"] += 1

    def idle(self, brokers: set[int], now: float) -> None:
        """One unavailable mark for each replica broker leading no probe partition."""
        with self._lock:
            for b in brokers:
                self._broker(b).outcomes.append((now, False))
            self._prune(now)

    def settle(self, p: int, seq: int, sent: float, leader: int, latency: float | None, offset: int) -> None:
        """Count one delivery report: failed when latency is None, else acked at offset (negative: none named)."""
        with self._lock:
            stats = self._broker(leader)
            stats.outcomes.append((sent, latency is not None))
            if latency is None:
                stats.counts["failed"] += 1
                self._tracker.failed(p, seq)
            else:
                stats.counts["acked"] += 1
                stats.produce.observe(latency)
                self._count_lost(self._tracker.acked(p, seq, offset, time.monotonic(), leader))

    def expire(self) -> None:
        """Count as lost what the consumer did not read within the SLA (acks=0)."""
        with self._lock:
            self._count_lost(self._tracker.expire(time.monotonic()))

    def receive(self, partition: int, offset: int, mine: tuple[int, float, int] | None, now: float) -> None:
        """Settle one consumed message: this run's (sequence, send time, leader), or another writer's (None), which
        still tells the tracker how far the consumer read."""
        with self._lock:
            outcome, lost = self._tracker.consumed(partition, offset, mine[0] if mine else None)
            self._count_lost(lost)
            if mine is None or outcome == REREAD:
                return
            _seq, sent, leader = mine
            stats = self._broker(leader)
            if outcome == DUPLICATE:
                stats.counts["duplicated"] += 1
                return
            stats.counts["received"] += 1
            stats.end_to_end.observe(max(0.0, now - sent))
            if now - sent > self.config.sla:
                stats.counts["late"] += 1
            if outcome == OUT_OF_ORDER:
                stats.counts["out_of_order"] += 1

    def _count_lost(self, leaders: list[int]) -> None:
        for leader in leaders:
            self._broker(leader).counts["lost"] += 1

    def _prune(self, now: float) -> None:
        cutoff = now - self.config.availability_window
        for stats in self._brokers.values():
            while stats.outcomes and stats.outcomes[0][0] < cutoff:
                stats.outcomes.popleft()

    def samples(self, topology: Topology | None) -> list[Sample]:
        """Pending messages, and per broker (those the topology names too) its series and probe partitions led."""
        with self._lock:
            out = [PROBE_PENDING_MESSAGES.sample(self._tracker.pending())]
            led = Counter(topology.leaders.values()) if topology else Counter()
            brokers = set(self._brokers)
            if topology:
                brokers |= topology.live | {b for replicas in topology.replicas.values() for b in replicas}
            self._prune(time.time())
            for b in sorted(brokers):
                out += self._broker(b).samples(b)
                if topology:
                    out.append(PROBE_PARTITIONS.sample(led[b], broker_id=b))
        return out
