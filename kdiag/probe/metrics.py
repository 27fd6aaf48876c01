"""The probe's metrics: per-broker histograms, counters and availability outcomes, and their help texts."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, deque

from kdiag.core.sample import COUNTER, GAUGE, HISTOGRAM, Sample, sample

COUNTERS = ("sent", "acked", "failed", "received", "late", "lost", "duplicated", "out_of_order")

HELP = {
    "kdiag_probe_produce_latency_seconds": "Probe produce-to-ack latency, by leader at send time.",
    "kdiag_probe_end_to_end_latency_seconds": "Probe produce-to-consume latency, by leader at send time.",
    "kdiag_probe_messages_sent_total": "Probe messages sent, by leader at send time.",
    "kdiag_probe_messages_acked_total": "Probe messages acknowledged by the broker.",
    "kdiag_probe_messages_failed_total": "Probe messages whose delivery failed or timed out (never acked, so not lost).",
    "kdiag_probe_messages_received_total": "Probe messages consumed for the first time.",
    "kdiag_probe_messages_late_total": "Probe messages consumed more than the SLA after they were sent (late, "
                                       "not lost).",
    "kdiag_probe_messages_lost_total": "Probe messages acked at an offset the consumer then read without them there "
                                       "(the log lost them; acks=0: not consumed within the SLA).",
    "kdiag_probe_messages_duplicated_total": "Probe messages consumed again at another offset.",
    "kdiag_probe_messages_out_of_order_total": "Probe messages consumed after a later sequence of the same partition.",
    "kdiag_probe_availability_ratio": "Acked / sent probe messages over the availability window; a replica broker "
                                      "that leads no probe partition counts as unavailable.",
    "kdiag_probe_partitions": "Probe topic partitions the broker leads.",
    "kdiag_probe_pending_messages": "Acked probe messages not consumed yet and not known lost (a partition the "
                                    "consumer cannot read keeps them here, not in lost).",
    "kdiag_probe_up": "1 when the probe's producer and consumer run and its topic exists.",
    "kdiag_probe_slo_seconds": "Configured probe latency objective: p99 above it is high.",
    "kdiag_probe_replica_latency_seconds": "Probe produce-to-ack latency on the replica pairs topic (2 replicas: "
                                           "broker_id follows, leader_id leads), at the probe's acks; a failed send "
                                           "counts the time it took.",
    "kdiag_probe_replica_failed_total": "Probe sends to the replica pairs topic whose delivery failed or timed out.",
}


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

    def samples(self, name: str, **labels: object) -> list[Sample]:
        """The _bucket series (le, cumulative, +Inf last), _sum and _count."""
        out, total = [], 0
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            total += count
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            out.append(sample(f"{name}_bucket", total, HISTOGRAM, le=le, **labels))
        out.append(sample(f"{name}_sum", self.sum, HISTOGRAM, **labels))
        out.append(sample(f"{name}_count", total, HISTOGRAM, **labels))
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
        out = self.produce.samples("kdiag_probe_produce_latency_seconds", broker_id=broker)
        out += self.end_to_end.samples("kdiag_probe_end_to_end_latency_seconds", broker_id=broker)
        for counter in COUNTERS:
            out.append(sample(f"kdiag_probe_messages_{counter}_total", self.counts[counter], COUNTER, broker_id=broker))
        if self.outcomes:
            ratio = sum(ok for _t, ok in self.outcomes) / len(self.outcomes)
            out.append(sample("kdiag_probe_availability_ratio", ratio, GAUGE, broker_id=broker))
        return out
