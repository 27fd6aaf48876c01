"""Issue 21 item 6: a forced flush below the defaults is a lint while the flush rate is still low, the cause above it."""

from __future__ import annotations

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Engine, EngineState
from kdiag.analysis.subject_kinds import compute_signals
from kdiag.core.history import History
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample

NEVER = 9223372036854775807.0  # Long.MAX_VALUE: Kafka's default, no forced flush


def broker_config(**configs: float) -> list[Sample]:
    """Broker 1 listed, its flush settings, and where log.flush.interval.* are set."""
    names = {"log.flush.interval.messages": NEVER, "log.flush.scheduler.interval.ms": NEVER, **{
        k.replace("_", "."): v for k, v in configs.items()}}
    return [sample("kdiag_kafka_broker_info", 1, GAUGE, broker_id=1, host="127.0.0.1", port=9092, rack=""),
            sample("kdiag_kafka_controller_id", 1),
            *(sample("kdiag_kafka_broker_config", v, GAUGE, broker_id=1, name=k) for k, v in names.items()),
            sample("kdiag_kafka_broker_config_source_info", 1, GAUGE, broker_id=1, name="log.flush.interval.messages",
                   source="STATIC_BROKER_CONFIG")]


def topic_config(flush_messages: float) -> list[Sample]:
    """Topic t overriding flush.messages."""
    return [sample("kdiag_kafka_topic_partitions", 3, GAUGE, topic="t"),
            sample("kdiag_kafka_topic_config", flush_messages, GAUGE, topic="t", name="flush.messages"),
            sample("kdiag_kafka_topic_config_override", 1, GAUGE, topic="t", name="flush.messages"),
            sample("kdiag_kafka_topic_config", NEVER, GAUGE, topic="t", name="flush.ms"),
            sample("kdiag_kafka_topic_config_override", 0, GAUGE, topic="t", name="flush.ms")]


def fired(snapshot, flushes_per_second: float | None, seconds: float = 60.0,
          messages_per_second: float = 0.0) -> list[tuple[str, str]]:
    history, engine = History(900.0), Engine(load_catalog([default_rules_dir()]), 1)
    judged = EngineState()
    found = []
    for i in range(int(seconds / 5) + 1):
        t = 1764430000.0 + i * 5
        flushes = [] if flushes_per_second is None else [
            sample("kdiag_kafka_log_flushes_total", 100 + flushes_per_second * i * 5, COUNTER, broker_id=1)]
        messages = [sample("kdiag_kafka_messages_in_total", 1e6 + messages_per_second * i * 5, COUNTER, broker_id=1),
                    sample("kdiag_kafka_topic_log_end_offset_total", 1e6 + messages_per_second * i * 5, COUNTER,
                           topic="t")]
        history.add(t, snapshot + flushes + messages)
        judged = engine.evaluate(judged, t, compute_signals(history, 30.0))
        found = judged.current()
    return sorted((d.rule.id, d.subject) for d in found if d.state == "firing")


def test_a_forced_broker_flush_is_a_lint_while_flushes_are_few():
    config = broker_config(log_flush_interval_messages=10000)
    assert fired(config, 0.5) == [("forced_flush_configured", "broker 1")]
    # then it is the cause, not the lint: 20 flushes/s under 2,000 msg/s is 10 per 1,000 messages
    assert fired(config, 20.0, messages_per_second=2000.0) == [("forced_fsync_broker", "broker 1")]


def test_a_forced_broker_flush_is_named_on_a_loaded_host():
    # Issue 35 item 3: log.flush.interval.messages=500 with the producers slowed by a loaded host to 1,400 msg/s on
    # this broker: 2.8 forced flushes/s and the metadata log's 2, under the old 5/s threshold; 3.4 per 1,000 messages.
    config = broker_config(log_flush_interval_messages=500)
    assert fired(config, 4.8, messages_per_second=1400.0) == [("forced_fsync_broker", "broker 1")]


def test_a_busy_healthy_broker_flushing_its_metadata_log_is_quiet():
    # A KRaft broker's metadata log flushes about twice a second; 5,000 msg/s then is 0.44 per 1,000 messages.
    assert fired(broker_config(), 2.2, messages_per_second=5000.0) == []
    assert fired(broker_config(), 2.2, messages_per_second=20.0) == []  # 110 per 1,000, but no more than it


def test_a_forced_topic_flush_is_named_on_a_loaded_host():
    # flush.messages=500 on topic t beside a loaded host: the cluster's one broker flushes 4.8 times/s under 1,400 msg/s.
    assert fired(broker_config() + topic_config(500), 4.8, messages_per_second=1400.0) == [("forced_fsync", "t")]


def test_without_the_flush_rate_the_lint_does_not_claim_it_is_low():
    # Issue 35 item 4: JMX failing (no flush rate) once fired the lint's "more as traffic grows" under a live fault.
    assert fired(broker_config(log_flush_interval_messages=500), None) == []
    assert fired(broker_config() + topic_config(50000), None) == []


def test_the_flush_scheduler_alone_forces_flushes():
    assert fired(broker_config(log_flush_scheduler_interval_ms=1000), 0.2) == [("forced_flush_configured", "broker 1")]


def test_defaults_are_quiet():
    assert fired(broker_config(), 0.2) == []
    assert fired(broker_config() + topic_config(NEVER), 0.2) == []


def test_a_topic_override_is_a_lint_too():
    assert fired(broker_config() + topic_config(50000), 0.2) == [("forced_flush_configured_topic", "t")]
