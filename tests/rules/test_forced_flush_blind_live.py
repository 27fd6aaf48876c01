"""Issue 35 item 4 on a live cluster: with the JMX collector failing (its endpoints refuse), a forced flush set
on every broker is not called "configured but not yet hurting": the lint is silent and kdiag says JMX blinds it."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from tests.waiting import wait_until

from kdiag.app.wiring import kafka_collectors, load_rules
from kdiag.config.settings import load_config
from kdiag.core.root import Root
from kdiag.report.text import render_text
from kdiag.runtime.pipeline import CollectorSet, Pipeline, State

pytestmark = pytest.mark.kafka

FLUSH = "log.flush.interval.messages"


def refused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flush_config(admin: AdminClient, brokers: list[str], op: AlterConfigOpType, value: str = "") -> None:
    """Set or delete each broker's dynamic log.flush.interval.messages (the client takes no entity-default)."""
    for b in brokers:  # one broker resource per call
        resource = ConfigResource(ResourceType.BROKER, b, incremental_configs=[
            ConfigEntry(FLUSH, value, incremental_operation=op)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=60)


@pytest.fixture
def forced_flush(kafka_lab: dict) -> Iterator[dict]:
    """log.flush.interval.messages=500 on every broker, deleted at the end."""
    admin = AdminClient({"bootstrap.servers": kafka_lab["bootstrap"]})
    brokers = [str(b) for b in admin.list_topics(timeout=30).brokers]
    flush_config(admin, brokers, AlterConfigOpType.SET, "500")
    try:
        yield kafka_lab
    finally:
        flush_config(admin, brokers, AlterConfigOpType.DELETE)


def test_jmx_failing_leaves_the_flush_lint_silent_and_says_what_it_blinds(forced_flush: dict) -> None:
    config = load_config(None, {"kafka.bootstrap_servers": forced_flush["bootstrap"],
                                "kafka.jmx": [f"127.0.0.1:{refused_port()}"], "kafka.timeout": "8s",
                                "kafka.configs_interval": "0s"})
    collectors = CollectorSet(list(kafka_collectors(config).values()))
    pipeline = Pipeline(collectors, load_rules(config), "live", window=10.0)
    states: list[State] = []

    def seen() -> bool:
        states.append(pipeline.step(Root()))
        brokers = states[-1].signals.get("broker", {})
        return len(states) >= 3 and bool(brokers) and all(
            s.get("log_flush_interval_messages") == 500.0 for s in brokers.values())

    try:
        wait_until(seen, 180, "the brokers' forced flush seen through the AdminClient")
    finally:
        collectors.close()
    state = states[-1]
    assert not states[-1].health["kafka_jmx"].success
    assert not any(d.rule.id in ("forced_flush_configured", "forced_fsync_broker") for s in states for d in s.diagnoses)
    failing = {f["collector"]: f for f in state.to_json()["failing_sources"]}
    assert {"forced_flush_configured", "forced_fsync_broker"} <= set(failing["kafka_jmx"]["blinds"])
    assert "kafka_admin" not in failing
    report = render_text(state)
    assert "kafka_jmx (" in report and "forced_flush_configured" in report[report.index("kafka_jmx ("):]
