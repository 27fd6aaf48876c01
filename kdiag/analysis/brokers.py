"""Broker ids as the Kafka signals name them: node ids, the `on_brokers` lists, the live brokers, per-leader rates."""

from __future__ import annotations

from kdiag.core.history import History
from kdiag.analysis.signals import latest_by
from kdiag.families.kafka import KAFKA_BROKER_INFO, KAFKA_TOPIC_BROKER_MESSAGES_PER_SECOND


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


def topic_rates_by_leader(history: History) -> dict[str, dict[str, float]]:
    """Messages per second of each topic's partitions, summed per leading broker at the last admin fetch:
    {broker: {topic: rate}}."""
    out: dict[str, dict[str, float]] = {}
    for (topic, broker), r in latest_by(history, KAFKA_TOPIC_BROKER_MESSAGES_PER_SECOND, "topic", "broker_id").items():
        out.setdefault(broker, {})[topic] = r
    return out

