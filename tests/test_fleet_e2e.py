"""Three daemons, one per broker of the lab, behind a real Prometheus and Alertmanager: one alert per cluster fact.

Each daemon is a `kdiag run` process configured as one broker's host (kafka.local_broker_id 1, 2, 3). A topic
whose partitions are all led by broker 1 must raise exactly one partition_skew alert in Alertmanager, exported by
exactly one daemon; stopping that daemon hands the diagnosis to another within three of its cycles, and the
alert stays exactly one. The handover time is printed (run with -s to see it).
"""

from __future__ import annotations

import gc
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families
from promstack import ROOT, Stack, get_json, query
from test_kafka_rules_live import create_topic, keyed_load
from waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]
INTERVAL = 5.0  # the daemons' default cycle; the handover is judged in cycles


def daemon_config(path: Path, bootstrap: str, broker: int, tag: str) -> Path:
    """A daemon on broker `broker`'s host, in the test's own coordination group (other helpers share the lab)."""
    path.write_text(yaml.safe_dump({
        "interval": f"{INTERVAL:g}s", "state_dir": "", "probe": {"enabled": False},
        "kafka": {"bootstrap_servers": bootstrap, "interval": f"{INTERVAL:g}s", "local_broker_id": broker,
                  "coordination_topic": f"__kdiag_coordination_{tag}", "coordination_group": f"kdiag-{tag}"}}))
    return path


def scrape(address: str) -> dict:
    """{(name, frozenset(labels)): value} of one daemon's /metrics."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def exporting(addresses: list[str], topic: str) -> list[str]:
    """The daemons exporting partition_skew for the topic as firing."""
    out = []
    for a in addresses:
        for (name, labels), value in scrape(a).items():
            got = dict(labels)
            if name == "kdiag_diagnosis_active" and got["rule"] == "partition_skew" and got["subject"] == topic \
                    and value == 1.0:
                out.append(a)
    return out


def skew_alerts(alertmanager: str, topic: str) -> list[dict]:
    """Alertmanager's KdiagPartitionSkew alerts for the topic."""
    found = get_json(f"{alertmanager}/api/v2/alerts?filter=" + 'alertname="KdiagPartitionSkew"'.replace('"', "%22"))
    return [a for a in found if a["labels"].get("subject") == topic]


def listed(address: str, topic: str) -> dict | None:
    """The daemon's /api/diagnoses entry of partition_skew for the topic."""
    data = get_json(f"http://{address}/api/diagnoses")
    return next((d for d in data["diagnoses"] if d["rule"] == "partition_skew" and d["subject"] == topic), None)


def test_three_daemons_raise_one_skew_alert_and_hand_it_over(kafka_lab: dict, tmp_path: Path) -> None:
    if kafka_lab["brokers"] < 3:
        pytest.skip("needs a 3-broker lab: kdiag lab up --brokers 3")
    bootstrap, tag = kafka_lab["bootstrap"], f"scope{uuid.uuid4().hex[:8]}"
    topic = f"{tag}-skew"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(admin, topic, [[1, 2, 3], [1, 3, 2]] * 3)  # every partition led by broker 1
    stack = Stack(tmp_path)
    try:
        config = yaml.safe_load((ROOT / "deploy" / "alertmanager" / "alertmanager.yml").read_text())
        alertmanager = stack.alertmanager(config)
        addresses, procs = [], []
        for broker in (1, 2, 3):
            addresses.append(stack.kdiag_live("--config", str(daemon_config(tmp_path / f"kdiag-{broker}.yaml",
                                                                            bootstrap, broker, tag))))
            procs.append(stack.procs[-1])
        prometheus = stack.prometheus(addresses, [ROOT / "deploy" / "prometheus" / "kdiag-alerts.yml"], alertmanager)
        with keyed_load(bootstrap, [topic], rate=200.0):
            first = wait_until(lambda: (e := exporting(addresses, topic)) and e, 240,
                               "partition_skew exported by a daemon", stack.logs)
            assert len(first) == 1, first
            reporter = first[0]
            broker_of = {a: b for a, b in zip(addresses, (1, 2, 3), strict=True)}
            for a in addresses:  # every daemon lists it, naming the one that reports
                entry = wait_until(lambda a=a: (d := listed(a, topic)) and d.get("reported_by") and d, 60,
                                   f"partition_skew listed by {a}", stack.logs)
                assert entry["scope"] == "cluster" and entry["reported_by"]["broker_id"] == broker_of[reporter]
            total = f'sum(kdiag_diagnosis_active{{rule="partition_skew",subject="{topic}"}})'
            wait_until(lambda: (r := query(prometheus, total)) and float(r[0]["value"][1]) == 1.0, 60,
                       "the sum over the daemons in Prometheus to be 1", stack.logs)
            (alert,) = wait_until(lambda: skew_alerts(alertmanager, topic), 90, "the alert in Alertmanager", stack.logs)
            assert "instance" not in alert["labels"] and alert["labels"]["broker"] == "1"

            t0 = time.monotonic()
            procs[addresses.index(reporter)].terminate()
            rest = [a for a in addresses if a != reporter]
            overlaps = 0
            while not (now := exporting(rest, topic)):
                assert time.monotonic() - t0 < 120, "no daemon took partition_skew over within 120 s"
                time.sleep(0.2)
            handover = time.monotonic() - t0
            print(f"\nhandover after stopping the reporter: {handover:.1f} s = {handover / INTERVAL:.1f} cycles of "
                  f"{INTERVAL:g} s")
            assert handover < 3 * INTERVAL + 5.0, handover  # three cycles, plus the stopped process's own exit
            # For a while after: exactly one exporter, and Alertmanager keeps exactly one alert.
            deadline = time.monotonic() + 10 * INTERVAL
            while time.monotonic() < deadline:
                now = exporting(rest, topic)
                overlaps += len(now) > 1
                assert len(skew_alerts(alertmanager, topic)) == 1
                time.sleep(0.5)
            assert overlaps == 0 and len(now) == 1
            assert listed(now[0], topic)["reported_by"]["broker_id"] == broker_of[now[0]]
    finally:
        stack.close()
        # Only now that every client that saw them is closed (librdkafka #5093): drop the test's topics and group.
        gc.collect()
        coordination = f"__kdiag_coordination_{tag}"
        for future in admin.delete_topics([topic, coordination], operation_timeout=30).values():
            future.exception(timeout=60)
        admin.delete_consumer_groups([f"kdiag-{tag}"], request_timeout=30)[f"kdiag-{tag}"].exception(timeout=60)
