"""The text report: causes nested under the symptoms they explain, matched per broker when both name brokers."""

from __future__ import annotations

from kdiag.config.settings import Config
from kdiag.app.wiring import load_rules
from kdiag.analysis.engine import Engine, EngineState
from kdiag.runtime.pipeline import State
from kdiag.report.text import render_text

FSYNC_TOPIC = {"name": "orders", "flush_messages": 1.0, "flush_messages_override": 1.0, "flush_ms": 1e18, "flush_ms_override": 0.0,
               "messages_per_second": 500.0, "on_brokers": "1"}
CLUSTER = {"name": "cluster", "brokers": 1.0, "log_flushes_per_second": 400.0, "log_flushes_per_1k_messages": 800.0}
SLOW = {"produce_p99_seconds": 2.0, "end_to_end_p99_seconds": 2.1, "slo_seconds": 0.5}


def report(signals: dict) -> str:
    engine = Engine(load_rules(Config()))
    judged = EngineState()
    longest = max(r.for_seconds for r in engine.rules)
    for t in (0.0, longest):  # every rule that holds is firing
        judged = engine.evaluate(judged, t, signals)
        diagnoses = judged.current()
    assert all(d.state == "firing" for d in diagnoses)
    return render_text(State("broker-1", longest, [], {}, signals, diagnoses))


def section(text: str, head: str) -> str:
    """The lines of one symptom's block, up to the next top-level block."""
    start = text.index(head)
    end = text.find("\n\n", start + 2)
    return text[start:end if end >= 0 else None]


def test_a_topic_cause_explains_the_symptom_only_on_the_brokers_leading_the_topic():
    text = report({"topic": {"orders": FSYNC_TOPIC}, "cluster": {"cluster": CLUSTER},
                   "probe": {b: {"name": f"broker {b}", "on_brokers": b, **SLOW} for b in ("1", "2")}})
    on_1 = section(text, "SYMPTOM probe_latency_high")
    assert on_1.splitlines()[0].endswith("] broker 1")
    assert "explained by:" in on_1 and "CAUSE forced_fsync" in on_1, text
    on_2 = section(text[text.index(on_1) + len(on_1):], "SYMPTOM probe_latency_high")
    assert on_2.splitlines()[0].endswith("] broker 2")
    assert "forced_fsync" not in on_2 and "no known cause holds" in on_2, text
    assert "\ncauses:" not in text  # the cause was placed under broker 1's symptom


def test_a_host_cause_explains_the_symptom_on_every_broker():
    swapping = {"name": "host", "swap_used_bytes": 2e9, "swap_in_pages_per_second": 500.0,
                "swap_out_pages_per_second": 500.0}
    text = report({"host": {"host": swapping},
                   "probe": {b: {"name": f"broker {b}", "on_brokers": b, **SLOW} for b in ("1", "2")}})
    assert text.count("SYMPTOM probe_latency_high") == 2
    assert text.count("CAUSE swap_in_use") == 2, text


def test_a_foreign_reader_of_the_log_dirs_explains_a_consumer_group_falling_behind():
    scanner = {"name": "pid 3100 python3", "is_broker": 0.0, "touches_log_dir": 1.0, "read_bytes_per_second": 9e7,
               "rchar_bytes_per_second": 1.4e8, "cmdline": "python3 /opt/ops/dir_stats.py"}
    lagging = {"name": "orders-app", "members": 2.0, "idle_members": 0.0, "lag_messages": 250000.0,
               "lag_growth_per_second": 800.0}
    text = report({"host": {"host": {"name": "host", "page_cache_change_bytes": -4e10}},
                   "proc": {"3100": scanner}, "group": {"orders-app": lagging}})
    block = section(text, "SYMPTOM consumer_lag_growing")
    assert "falls further behind by 800 messages/s" in block
    assert "CAUSE foreign_io_scanner" in block, text


SLOW_REPLICA = {"name": "broker 3", "on_brokers": "3", "reaches_brokers": "1", "replica_probe_vs_peers": 8.4,
                "replica_probe_p90_seconds": 0.22, "gc_pause_longest_seconds": 2.5}


def test_a_slow_replica_explains_the_isr_churn_of_the_leaders_it_holds_back_under_its_host_cause():
    churning = {b: {"name": f"broker {b}", "on_brokers": b, "isr_shrinks_per_second": 0.2} for b in ("1", "2")}
    text = report({"broker": {"3": SLOW_REPLICA, **churning}})
    on_1 = section(text, "SYMPTOM isr_shrinking [warning, firing since 1970-01-01 00:00:00] broker 1")
    assert "explained by:" in on_1 and "SYMPTOM replica_slow" in on_1, text
    on_2 = section(text, "SYMPTOM isr_shrinking [warning, firing since 1970-01-01 00:00:00] broker 2")
    assert "replica_slow" not in on_2 and "no known cause holds" in on_2, text  # broker 3 does not reach broker 2
    slow = section(text, "\n\nSYMPTOM replica_slow")
    assert "CAUSE broker_gc_pause_long" in slow, text  # the GC pauses on its own broker explain it
