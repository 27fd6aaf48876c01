"""Issue 35 item 3: unbatched_producers on what a request carries, which a loaded host does not change."""

from __future__ import annotations

import pytest

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Engine, EngineState
from kdiag.analysis.subject_kinds import compute_signals
from kdiag.core.history import History
from kdiag.core.sample import COUNTER, GAUGE, sample

pytestmark = pytest.mark.unit


def fired(requests_per_second: float, messages_per_request: float, bytes_per_request: float,
          seconds: float = 60.0) -> list[tuple[str, str]]:
    history, engine = History(900.0), Engine(load_catalog([default_rules_dir()]), 1)
    judged = EngineState()
    for i in range(int(seconds / 5) + 1):
        t, n = 1764430000.0 + i * 5, requests_per_second * i * 5
        history.add(t, [sample("kdiag_kafka_broker_info", 1, GAUGE, broker_id=1, host="127.0.0.1", port=9092, rack=""),
                        sample("kdiag_kafka_produce_requests_total", n, COUNTER, broker_id=1),
                        sample("kdiag_kafka_messages_in_total", n * messages_per_request, COUNTER, broker_id=1),
                        sample("kdiag_kafka_bytes_in_total", n * bytes_per_request, COUNTER, broker_id=1)])
        judged = engine.evaluate(judged, t, compute_signals(history, 30.0))
    return sorted((d.rule.id, d.subject) for d in judged.current() if d.state == "firing")


def test_an_unbatched_java_producer_on_a_loaded_host_is_named():
    # linger.ms=0, batch.size=64, 16-byte records, one request in flight over 6 partitions: slowed by the host to
    # 120 requests/s, each with a single-record batch for 3-4 of its partitions (85 B each).
    assert fired(120.0, 3.5, 300.0) == [("unbatched_producers", "broker 1")]


def test_a_record_per_request_is_named_at_any_rate_above_a_trickle():
    assert fired(2500.0, 1.0, 88.0) == [("unbatched_producers", "broker 1")]
    assert fired(10.0, 1.0, 200.0) == []  # the probe, or any trickle


def test_batching_producers_are_quiet_at_any_rate():
    assert fired(30.0, 65.0, 14000.0) == []  # the healthy lab load
    assert fired(400.0, 12.0, 2600.0) == []
