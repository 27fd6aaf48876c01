"""The synthetic probe's settings and the check that they can work."""

from __future__ import annotations

from dataclasses import dataclass, field

from kdiag.core.quote import quote

DEFAULT_LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]


PROBE_GROUP_PREFIX = "kdiag-probe-"  # a probe's group without probe.group_id: this and its daemon's host
REPLICAS_TOPIC_SUFFIX = "-replicas"  # the replica pairs topic: the probe's topic and this

@dataclass
class ProbeConfig:
    """The synthetic probe: its topic, rate, durability and the windows of its verdicts."""

    enabled: bool = True
    topic: str = "kdiag-probe"
    interval: float = 1.0
    acks: str = "all"
    replication_factor: int = 0
    partitions_per_broker: int = 1
    sla: float = 10.0
    availability_window: float = 60.0
    reconcile_interval: float = 60.0
    group_id: str = ""
    latency_buckets: list[float] = field(default_factory=lambda: list(DEFAULT_LATENCY_BUCKETS))
    slo_seconds: float = 0.5

    def validate(self) -> None:
        """Raise ValueError naming the first field that cannot work."""
        for name in ("interval", "sla", "availability_window", "reconcile_interval", "slo_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be positive")
        if self.acks not in ("all", "-1", "0", "1"):
            raise ValueError(f"acks: {quote(self.acks)} is not all, -1, 0 or 1")
        if self.replication_factor < 0 or self.partitions_per_broker < 1:
            raise ValueError("replication_factor must be 0 or more and partitions_per_broker 1 or more")
        if not self.topic:
            raise ValueError("topic: must not be empty")
        if not self.latency_buckets or len(set(self.latency_buckets)) != len(self.latency_buckets) \
                or min(self.latency_buckets) <= 0:
            raise ValueError("latency_buckets: must be distinct positive numbers")
