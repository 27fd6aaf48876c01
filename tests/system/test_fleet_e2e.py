"""Three daemons, one per broker of the lab, behind a real Prometheus and Alertmanager: one alert per cluster fact.

Each daemon is a `kdiag run` process configured as one broker's host (kafka.local_broker_id 1, 2, 3). A topic
whose partitions are all led by broker 1 must raise exactly one partition_skew alert in Alertmanager, exported by
exactly one daemon; stopping that daemon hands the diagnosis to another within three of its cycles, and the
alert stays exactly one. Killing the next reporter with SIGKILL hands it to the last daemon with the same since, and
Alertmanager never sees it resolve (same startsAt). The handover times and the gap in the sum of
kdiag_diagnosis_active over the daemons are printed (run with -s to see them).
"""

from __future__ import annotations

import gc
import math
import re
import time
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families
from tests.promstack import ROOT, Stack, get_json, query, target_health
from tests.rules.test_kafka_rules_live import create_topic
from tests.waiting import wait_until

from kdiag.tools.drill.faults import keyed_load

pytestmark = pytest.mark.e2e
INTERVAL = 5.0  # the daemons' default cycle; the handover is judged in cycles
LAST_CYCLE = "kdiag_last_cycle_timestamp_seconds"


def daemon_config(path: Path, bootstrap: str, broker: int, tag: str) -> Path:
    """A daemon on broker `broker`'s host, in the test's own coordination group (other helpers share the lab)."""
    path.write_text(yaml.safe_dump({
        "interval": f"{INTERVAL:g}s", "state_dir": "", "probe": {"enabled": False},
        # The shared lab may hold hundreds of other tests' topics and a loaded CI machine answers slowly.
        "kafka": {"bootstrap_servers": bootstrap, "interval": f"{INTERVAL:g}s", "timeout": "30s", "local_broker_id": broker,
                  "coordination_topic": f"__kdiag_coordination_{tag}", "coordination_group": f"kdiag-{tag}"}}))
    return path


def scrape(address: str) -> dict:
    """{(name, frozenset(labels)): value} of one daemon's /metrics."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=60) as r:  # a loaded machine is slow
        text = r.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def skew_active(metrics: dict, topic: str) -> bool:
    """Whether one daemon's metrics export partition_skew for the topic as firing."""
    return any(name == "kdiag_diagnosis_active" and dict(labels)["rule"] == "partition_skew"
               and dict(labels)["subject"] == topic and value == 1.0 for (name, labels), value in metrics.items())


def exporting(addresses: list[str], topic: str) -> list[str]:
    """The daemons exporting partition_skew for the topic as firing."""
    return [a for a in addresses if skew_active(scrape(a), topic)]


def skew_alerts(alertmanager: str, topic: str) -> list[dict]:
    """Alertmanager's KdiagPartitionSkew alerts for the topic."""
    found = get_json(f"{alertmanager}/api/v2/alerts?filter=" + 'alertname="KdiagPartitionSkew"'.replace('"', "%22"),
                     timeout=60)
    return [a for a in found if a["labels"].get("subject") == topic]


def listed(address: str, topic: str) -> dict | None:
    """The daemon's /api/diagnoses entry of partition_skew for the topic."""
    data = get_json(f"http://{address}/api/diagnoses", timeout=60)
    return next((d for d in data["diagnoses"] if d["rule"] == "partition_skew" and d["subject"] == topic), None)


def election(logs: list[Path]) -> str:
    """Seconds from the first `leaving coordination group` line to the `now reporting` line after it."""
    stamp = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO kdiag.kafka.coordination: (leaving|now reporting)")
    events = sorted(m.groups() for p in logs if p.exists() for line in p.read_text(errors="replace").splitlines()
                    if (m := stamp.match(line)))
    left = next((t for t, what in events if what == "leaving"), None)
    taken = next((t for t, what in events if what == "now reporting" and left and t > left), None)
    if not (left and taken):
        return "not in the logs"
    seconds = (datetime.strptime(taken, "%Y-%m-%d %H:%M:%S,%f") - datetime.strptime(left, "%Y-%m-%d %H:%M:%S,%f"))
    return f"{seconds.total_seconds():.1f} s"


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
            first = wait_until(lambda: (e := exporting(addresses, topic)) and e, 600,
                               "partition_skew exported by a daemon", stack.logs)
            assert len(first) == 1, first
            reporter = first[0]
            broker_of = {a: b for a, b in zip(addresses, (1, 2, 3), strict=True)}
            for a in addresses:  # every daemon lists it, naming the one that reports
                entry = wait_until(lambda a=a: (d := listed(a, topic)) and d.get("reported_by") and d, 300,
                                   f"partition_skew listed by {a}", stack.logs)
                assert entry["scope"] == "cluster" and entry["reported_by"]["broker_id"] == broker_of[reporter]
            since = listed(reporter, topic)["since"]
            total = f'sum(kdiag_diagnosis_active{{rule="partition_skew",subject="{topic}"}})'

            def one_in_prometheus() -> bool:
                if (r := query(prometheus, total)) and float(r[0]["value"][1]) == 1.0:
                    return True
                raise ValueError(f"sum {r[0]['value'][1] if r else 'absent'}; {target_health(prometheus, addresses)}")

            # Generous: Prometheus scrapes every second with a 1 s timeout, and a loaded machine misses many of them.
            wait_until(one_in_prometheus, 300, "the sum over the daemons in Prometheus to be 1", stack.logs)
            (alert,) = wait_until(lambda: skew_alerts(alertmanager, topic), 300, "the alert in Alertmanager", stack.logs)
            assert "instance" not in alert["labels"] and alert["labels"]["broker"] == "1"

            rest = [a for a in addresses if a != reporter]
            cycles: dict[str, set[float]] = {a: {scrape(a)[LAST_CYCLE, frozenset()]} for a in rest}
            t0 = time.monotonic()
            procs[addresses.index(reporter)].terminate()
            overlaps = 0
            while True:
                metrics = {a: scrape(a) for a in rest}
                for a, m in metrics.items():
                    cycles[a].add(m[LAST_CYCLE, frozenset()])
                if now := [a for a in rest if skew_active(metrics[a], topic)]:
                    break
                assert time.monotonic() - t0 < 300, "no daemon took partition_skew over within 300 s"
                time.sleep(0.2)
            handover, taken = time.monotonic() - t0, len(cycles[now[0]]) - 1
            print(f"\nhandover after stopping the reporter: {handover:.1f} s, {taken} cycle(s) of the new reporter "
                  f"(interval {INTERVAL:g} s)")
            print(f"election (the old reporter leaving -> the new one reporting, from their logs): {election(stack.logs)}")
            # Judged in the new reporter's own cycles, which a loaded machine stretches well past the interval.
            assert taken <= 3, (handover, taken)
            # For a while after: exactly one exporter, and Alertmanager keeps exactly one alert.
            deadline = time.monotonic() + 10 * INTERVAL
            while time.monotonic() < deadline:
                now = exporting(rest, topic)
                overlaps += len(now) > 1
                assert len(skew_alerts(alertmanager, topic)) == 1
                time.sleep(0.5)
            assert overlaps == 0 and len(now) == 1
            assert listed(now[0], topic)["reported_by"]["broker_id"] == broker_of[now[0]]
            assert listed(now[0], topic)["since"] == since  # the successor started from the published diagnosis

            # SIGKILL the new reporter while partition_skew fires: the last daemon takes it over from the published
            # state, and Alertmanager keeps the one alert with its startsAt (no resolve, no re-fire).
            (alert,) = skew_alerts(alertmanager, topic)
            killed, last = now[0], [a for a in rest if a != now[0]]
            t0, taken_over = time.monotonic(), None
            procs[addresses.index(killed)].kill()
            while taken_over is None or time.monotonic() - t0 < taken_over + 6 * INTERVAL:
                alerts = skew_alerts(alertmanager, topic)
                assert [a["startsAt"] for a in alerts] == [alert["startsAt"]], (alert, alerts)
                if taken_over is None and exporting(last, topic):
                    taken_over = time.monotonic() - t0
                assert time.monotonic() - t0 < 300, "no daemon took partition_skew over within 300 s of the SIGKILL"
                time.sleep(0.5)
            assert listed(last[0], topic)["since"] == since
            span = math.ceil(time.monotonic() - t0) + 5
            gap = query(prometheus, f"sum_over_time((({total} or vector(0)) == bool 0)[{span}s:1s])")
            print(f"handover after SIGKILL of the reporter: {taken_over:.1f} s; the sum over the daemons was 0 for "
                  f"{gap[0]['value'][1] if gap else '?'} of the last {span} s; Alertmanager kept {alert['startsAt']}")
    finally:
        stack.close()
        # Only now that every client that saw them is closed (librdkafka #5093): drop the test's topics and group.
        gc.collect()
        coordination = f"__kdiag_coordination_{tag}"
        for future in admin.delete_topics([topic, coordination], operation_timeout=30).values():
            future.exception(timeout=60)
        # The coordinator takes the daemons' LeaveGroups (or their session timeouts) asynchronously.
        group = f"kdiag-{tag}"
        wait_until(lambda: admin.delete_consumer_groups([group], request_timeout=30)[group].exception(timeout=60) is None,
                   60, f"group {group} deleted")
