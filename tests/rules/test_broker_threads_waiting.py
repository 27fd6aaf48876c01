"""Issue 35 item 3: broker_threads_waiting names a loaded host only once the broker's own produce latency moved."""

from __future__ import annotations

import pytest

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Engine, EngineState
from kdiag.analysis.subject_kinds import compute_signals
from kdiag.core.history import History
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample

pytestmark = pytest.mark.unit
PID = "2000"


def loaded_host(t: float, wait_per_second: float) -> list[Sample]:
    """The broker's threads waiting this long per second for a CPU while it runs 0.6 cores (two busy loops beside)."""
    labels = {"comm": "java", "pid": PID}
    return [sample("kdiag_process_info", 1, GAUGE, **labels, cmdline="java kafka.Kafka server.properties", cwd="/"),
            sample("kdiag_process_is_broker", 1, GAUGE, **labels),
            sample("kdiag_process_cpu_seconds_total", 100 + 0.6 * t, COUNTER, **labels),
            sample("kdiag_process_runqueue_wait_seconds_total", 50 + wait_per_second * t, COUNTER, **labels),
            sample("kdiag_process_threads", 80, GAUGE, **labels, state="S")]


def produce_p99(t: float, seconds: float) -> Sample:
    return sample("kdiag_kafka_request_time_seconds", seconds, GAUGE, broker_id="1", request="Produce",
                  phase="total", quantile="0.99")


def fired(p99_after: float | None, seconds: float = 150.0) -> list[tuple[str, str]]:
    """broker_threads_waiting's firings over a host whose broker waits 1.5 s/s for a CPU from t=60 s on, its produce
    p99 0.01 s before and p99_after then (None: no JMX)."""
    history, engine = History(900.0), Engine(load_catalog([default_rules_dir()]), 1)
    judged = EngineState()
    for i in range(int(seconds / 5) + 1):
        t = 1764430000.0 + i * 5
        loaded = i * 5 >= 60
        latency = [] if p99_after is None else [produce_p99(t, p99_after if loaded else 0.01)]
        history.add(t, loaded_host(i * 5, 1.5 if loaded else 0.1) + latency)
        judged = engine.evaluate(judged, t, compute_signals(history, 30.0))
    return sorted((d.rule.id, d.subject) for d in judged.current()
                  if d.state == "firing" and d.rule.id == "broker_threads_waiting")


def test_a_loaded_host_whose_broker_answers_as_before_is_not_a_broker_problem() -> None:
    assert fired(0.012) == []


def test_without_the_broker_latency_the_waits_name_nothing() -> None:
    assert fired(None) == []


def test_the_waits_are_the_cause_once_the_broker_latency_moved() -> None:
    assert fired(0.2) == [("broker_threads_waiting", f"pid {PID} java")]
