"""Two signed daemons (`kdiag run`) started beside a group hijacker, behind a real Prometheus with kdiag's alert rules:
both report within two election intervals and KdiagForeignCoordinationMember fires; the hijacker gone, one reports."""

from __future__ import annotations

import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from tests.promstack import ROOT, Stack, get_json
from tests.kafka.test_coordination_hostile import HOSTILE_ID, holder_member_id
from tests.kafka.test_coordination_live import delete_topic
from tests.waiting import timed_wait, wait_until

from kdiag.kafka.coordination import ELECTION_INTERVAL
from kdiag.kafka.fleet_key import write_key

pytestmark = pytest.mark.e2e


def series(address: str, name: str) -> float | None:
    """The value of one unlabelled-by-us series of a daemon's /metrics (its first sample), None when absent."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=60) as r:
        text = r.read().decode()
    return next((s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name), None)


def firing(prometheus: str, alertname: str) -> list[dict]:
    alerts = get_json(f"{prometheus}/api/v1/alerts")["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == alertname and a["state"] == "firing"]


def test_a_hijacked_group_makes_every_daemon_report_and_the_foreign_member_alert_fire(kafka_lab: dict,
                                                                                    tmp_path: Path) -> None:
    bootstrap, tag = kafka_lab["bootstrap"], f"hijack{uuid.uuid4().hex[:8]}"
    topic, group = f"__kdiag_coordination_{tag}", f"kdiag-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)  # the hijacker is first
    key = tmp_path / "fleet.key"
    write_key(str(key))
    hijackers = [Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": HOSTILE_ID,
                           "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 6000})
                 for _ in range(3)]
    for h in hijackers:
        h.subscribe([topic])
    stack = Stack(tmp_path)
    addresses: list[str] = []
    try:
        wait_until(lambda: [h.poll(0.2) for h in hijackers] and holder_member_id(bootstrap, group), 60,
                   "a hijacker holding partition 0")
        t0 = time.monotonic()
        for broker in (1, 2):
            config = tmp_path / f"kdiag-{broker}.yaml"
            config.write_text(yaml.safe_dump({
                "interval": "2s", "state_dir": "", "probe": {"enabled": False},
                "kafka": {"bootstrap_servers": bootstrap, "interval": "5s", "timeout": "30s", "local_broker_id": broker,
                          "coordination_topic": topic, "coordination_group": group,
                          "coordination_key_file": str(key)}}))
            addresses.append(stack.kdiag_live("--config", str(config), "--no-discover"))
        started = time.monotonic() - t0
        prometheus = stack.prometheus(addresses, [ROOT / "deploy" / "prometheus" / "kdiag-alerts.yml"])

        def all_report() -> bool:
            [h.poll(0) for h in hijackers]
            return all(series(a, "kdiag_cluster_reporting") == 1.0 for a in addresses)

        took = timed_wait(all_report, 180, "every daemon reporting beside the hijacker")
        print(f"\nboth daemons report {took + started:.1f} s after the first started beside the hijacker "
              f"(start-up grace: two election intervals, {2 * ELECTION_INTERVAL:g} s)")
        assert all(series(a, "kdiag_coordination_foreign_members") == 3.0 for a in addresses)

        def alert() -> list[dict]:
            [h.poll(0) for h in hijackers]
            return firing(prometheus, "KdiagForeignCoordinationMember")

        (fired,) = wait_until(alert, 300, "KdiagForeignCoordinationMember firing in Prometheus", stack.logs)
        assert float(fired["value"]) == 3.0 and fired["labels"]["severity"] == "warning"
        assert not firing(prometheus, "KdiagNoReporter")
    finally:
        for h in hijackers:
            h.close()
    try:
        def one_reports() -> bool:
            return sum(series(a, "kdiag_cluster_reporting") or 0.0 for a in addresses) == 1.0 \
                and all(series(a, "kdiag_coordination_foreign_members") == 0.0 for a in addresses)

        wait_until(one_reports, 180, "one daemon reporting once the hijackers left", stack.logs)
    finally:
        stack.close()
        delete_topic(bootstrap, topic, group)
