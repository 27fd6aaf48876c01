"""Kafka signals from hand-built JMX samples: flushes per 1,000 messages, per broker and cluster-wide (issue 35)."""

from __future__ import annotations

import pytest

from kdiag.analysis.broker_signals import broker_signals
from kdiag.analysis.kafka_signals import cluster_signals
from kdiag.analysis.signals import per_1k
from kdiag.core.history import History
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample

pytestmark = pytest.mark.unit


def broker(b: str, t: float, flushes_per_second: float, messages_per_second: float) -> list[Sample]:
    return [sample("kdiag_kafka_broker_info", 1, GAUGE, broker_id=b, host="127.0.0.1", port=9092, rack=""),
            sample("kdiag_kafka_log_flushes_total", 100 + flushes_per_second * t, COUNTER, broker_id=b),
            sample("kdiag_kafka_messages_in_total", 1000 + messages_per_second * t, COUNTER, broker_id=b)]


def test_per_1k_is_unknown_while_no_message_flows() -> None:
    assert per_1k(2.0, 4000.0) == pytest.approx(0.5)
    assert per_1k(2.0, 0.0) is None and per_1k(None, 10.0) is None


def test_flushes_per_1k_messages_hold_as_the_load_falls() -> None:
    # A flush every 500 messages on one replica: 2 per 1,000 messages whether 8,000 or 1,000 arrive per second.
    for rate in (8000.0, 1000.0):
        h = History()
        for t in (0.0, 5.0, 10.0):
            h.add(t, broker("1", t, rate / 500, rate) + broker("2", t, 2.0, 0.0))
        b = broker_signals(h, 30.0)
        assert b["1"]["log_flushes_per_1k_messages"] == pytest.approx(2.0)
        assert "log_flushes_per_1k_messages" not in b["2"]  # no message, no ratio
        c = cluster_signals(h, 30.0)["cluster"]
        assert c["log_flushes_per_1k_messages"] == pytest.approx(1000 * (rate / 500 + 2.0) / rate)
