"""Broker ids as the Kafka signals name them: node ids, the `on_brokers` lists, the live brokers, per-leader rates."""

from __future__ import annotations

from kdiag.core.history import History
from kdiag.analysis.signals import latest_by, rates_by
from kdiag.families.kafka import KAFKA_BROKER_INFO, KAFKA_PARTITION_LEADER, KAFKA_PARTITION_LOG_END_OFFSET_TOTAL


def node_id(broker: str) -> float | None:
    """A broker_id label as a number, None when it is not one."""
    return float(broker) if broker.lstrip("-").isdigit() else None


def on_brokers(ids: list[str] | set[str]) -> str | None:
    """The `on_brokers` signal: the broker ids a subject concerns, so causes explain symptoms on the same broker."""
    return ",".join(sorted(ids, key=lambda b: (len(b), b))) or None


def live_brokers(history: History) -> list[str]:
    """Broker ids the AdminClient currently lists."""
    return sorted(k[0] for k in latest_by(history, KAFKA_BROKER_INFO, "broker_id"))


ON_BROKERS = "broker ids this subject concerns, comma-separated"


def topic_rates_by_leader(history: History, window: float) -> dict[str, dict[str, float]]:
    """Messages per second of each topic's partitions, summed per leading broker: {broker: {topic: rate}}."""
    leader = latest_by(history, KAFKA_PARTITION_LEADER, "topic", "partition")
    out: dict[str, dict[str, float]] = {}
    for (topic, partition), r in rates_by(history, KAFKA_PARTITION_LOG_END_OFFSET_TOTAL, window,
                                          "topic", "partition").items():
        if (b := leader.get((topic, partition))) is not None:
            per = out.setdefault(str(int(b)), {})
            per[topic] = per.get(topic, 0.0) + r
    return out

