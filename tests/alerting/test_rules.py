"""Generated alert rules, Alertmanager config and docs/RULES.md: valid for the real tools, in sync with the catalog."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tests.promstack import ROOT, binary, free_port
from tests.waiting import wait_until

from kdiag.alerting import alertmanager as am
from kdiag.alerting import rules as alerts
from kdiag.kafka.coordination_process import FAMILIES as COORDINATION
from kdiag.alerting.alertmanager import AlertPusher
from kdiag.cli.main import main
from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Diagnosis
from kdiag.runtime.pipeline import State
from kdiag.serve.exporter import render_metrics

pytestmark = pytest.mark.integration

RULES = load_catalog([default_rules_dir()])
BY_ID = {r.id: r for r in RULES}
PROMETHEUS = ROOT / "deploy" / "prometheus" / "kdiag-alerts.yml"
PROMETHEUS_TESTS = ROOT / "deploy" / "prometheus" / "kdiag-alerts.test.yml"
ALERTMANAGER = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
DOCS = ROOT / "docs" / "RULES.md"
COMPOSE = ROOT / "deploy" / "compose"
REGENERATE = "the catalog changed: run `kdiag rules export` from the repository root and commit the result"


@pytest.mark.parametrize(("path", "render"), [
    (PROMETHEUS, lambda: alerts.render_prometheus(RULES)),
    (PROMETHEUS_TESTS, lambda: alerts.render_prometheus_tests(RULES)),
    (ALERTMANAGER, lambda: alerts.render_alertmanager(RULES)),
    (DOCS, lambda: alerts.render_docs(RULES)),
], ids=["prometheus", "prometheus-tests", "alertmanager", "docs"])
def test_committed_file_matches_the_catalog(path: Path, render) -> None:
    assert path.read_text(encoding="utf-8") == render(), f"{path.relative_to(ROOT)} drifted: {REGENERATE}"


def test_export_cli_writes_what_is_committed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "rules" / "alerts.yml"
    assert main(["rules", "export", "--prometheus", "-o", str(out)]) == 0
    assert out.read_text() == PROMETHEUS.read_text()
    tests = tmp_path / "rules" / "alerts.test.yml"
    assert tests.read_text() == alerts.render_prometheus_tests(RULES, rule_file="alerts.yml")
    for flag, committed in (("--alertmanager", ALERTMANAGER), ("--docs", DOCS)):
        out = tmp_path / flag.strip("-")
        assert main(["rules", "export", flag, "-o", str(out)]) == 0
        assert out.read_text() == committed.read_text()
    assert "wrote" in capsys.readouterr().out


def test_one_alert_per_rule_over_the_diagnosis_metric() -> None:
    rules = alerts.prometheus_rules(RULES)["groups"][0]["rules"]
    assert sorted(a["labels"]["rule"] for a in rules if a["alert"] != alerts.EXPLAINS_ALERT) == sorted(BY_ID)
    storm = next(a for a in rules if a["labels"]["rule"] == "small_packet_storm")
    assert storm["alert"] == "KdiagSmallPacketStorm" and alerts.alert_name("nic_irq_on_cpu0") == "KdiagNicIrqOnCpu0"
    assert storm["expr"] == 'kdiag_diagnosis_active{rule="small_packet_storm"} == 1'
    assert storm["for"] == "0s"
    assert storm["labels"] == {"severity": "warning", "kdiag_class": "cause", "rule": "small_packet_storm"}
    assert set(storm["annotations"]) == {"summary", "description", "remediation", "runbook_url"}
    assert storm["annotations"]["runbook_url"].endswith("/docs/RULES.md#small_packet_storm")
    # A cluster-scope alert is the same alert whichever daemon reports it (and while two do, during a handover).
    skew = next(a for a in rules if a["labels"]["rule"] == "partition_skew")
    assert skew["expr"] == 'max without (instance, job) (kdiag_diagnosis_active{rule="partition_skew"}) == 1'
    assert "in cluster {{ $labels.cluster }}" in skew["annotations"]["summary"]


def test_liveness_alerts_read_what_kdiag_exports() -> None:
    text = render_metrics(State("h", 1000.0, [], {}, {}, []), interval=5.0).decode()
    # The coordination process's own series (kdiag_coordination_*), which a daemon with Kafka exports every cycle.
    exported = {s.name for family in text_string_to_metric_families(text) for s in family.samples} | {f.name for f in COORDINATION}
    assert "kdiag_cycle_interval_seconds 5.0" in text
    group = alerts.prometheus_rules(RULES)["groups"][1]
    assert group["name"] == "kdiag-liveness" and [a["alert"] for a in group["rules"]] == [
        "KdiagDown", "KdiagStale", "KdiagNoReporter", "KdiagForeignCoordinationMember"]
    for alert in group["rules"]:
        assert set(re.findall(r"kdiag_\w+", alert["expr"])) <= exported, alert["expr"]
    # promtool runs the generated unit tests of both (test_promtool_unit_tests_pass): a dead and a frozen daemon page.
    tests = alerts.prometheus_tests(RULES)["tests"]
    paged = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c["exp_alerts"]}
    assert {"KdiagDown", "KdiagStale", "KdiagNoReporter", "KdiagForeignCoordinationMember"} <= paged


def test_runbook_anchors_exist_in_the_docs() -> None:
    docs = DOCS.read_text()
    for r in RULES:
        assert f'<a id="{r.id}"></a>\n\n## {r.id}\n' in docs


def test_inhibitions_follow_the_explains_lists() -> None:
    inhibit = yaml.safe_load(ALERTMANAGER.read_text())["inhibit_rules"]
    got = {(i["source_matchers"][1], i["source_matchers"][2]): (i["target_matchers"][0], i["equal"]) for i in inhibit}
    assert all(i["source_matchers"][0] == 'alertname="KdiagExplains"' for i in inhibit)
    explained = "probe_latency_high|softirq_core_saturated|softnet_backlog_drops|tcp_retransmits_high"
    # The same broker of the same cluster; tied to no broker: a host cause on its instance, a cluster cause cluster-wide.
    assert got[('rule="small_packet_storm"', 'broker=~".+"')] == (f'rule=~"{explained}"', ["cluster", "broker"])
    assert got[('rule="small_packet_storm"', 'broker=""')] == (f'rule=~"{explained}"', ["instance"])
    assert got[('rule="broker_down"', 'broker=""')][1] == ["cluster"]
    assert len(got) == 2 * sum(1 for r in RULES if r.kind == "cause" and r.explains)


def test_promtool_checks_the_rules() -> None:
    out = subprocess.run([binary("promtool"), "check", "rules", str(PROMETHEUS)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(RULES) + 1 + len(alerts.LIVENESS_ALERTS)} rules found" in out.stdout  # KdiagExplains, liveness


def test_promtool_unit_tests_pass() -> None:
    out = subprocess.run([binary("promtool"), "test", "rules", str(PROMETHEUS_TESTS)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_amtool_checks_the_alertmanager_config() -> None:
    out = subprocess.run([binary("amtool"), "check-config", str(ALERTMANAGER)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(yaml.safe_load(ALERTMANAGER.read_text())['inhibit_rules'])} inhibit rules" in out.stdout


def test_compose_mounts_the_tested_files() -> None:
    compose = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())["services"]
    mounts = {}
    for service in compose.values():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            mounts[target] = (COMPOSE / source).resolve()
    assert mounts["/etc/prometheus/kdiag-alerts.yml"] == PROMETHEUS
    assert mounts["/etc/alertmanager/alertmanager.yml"] == ALERTMANAGER
    assert mounts["/var/lib/grafana/dashboards/kdiag"] == ROOT / "dashboards"
    assert mounts["/etc/grafana/provisioning/dashboards/kdiag.yml"] == ROOT / "dashboards" / "provisioning" / "dashboards.yml"
    assert mounts["/etc/grafana/provisioning/datasources/kdiag.yml"] == ROOT / "dashboards" / "provisioning" / "datasources.yml"
    assert all(p.exists() for p in mounts.values())
    prometheus = yaml.safe_load((COMPOSE / "prometheus.yml").read_text())
    assert prometheus["rule_files"] == ["/etc/prometheus/kdiag-alerts.yml"]
    # Nothing tested elsewhere may be copied here unless it is identical to its source.
    tested = {p.name: p for p in [PROMETHEUS, PROMETHEUS_TESTS, ALERTMANAGER, *(ROOT / "dashboards").rglob("*.*")]}
    for f in COMPOSE.iterdir():
        if f.name in tested:
            assert f.read_bytes() == tested[f.name].read_bytes(), f"{f} differs from {tested[f.name]}"


class Receiver:
    """A fake Alertmanager API on loopback that records every posted alert list."""

    def __init__(self, port: int = 0):
        self.bodies: list[list[dict]] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                assert self.path == "/api/v2/alerts"
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def firing(rule: str = "small_packet_storm", subject: str = "eth0") -> Diagnosis:
    return Diagnosis(BY_ID[rule], subject, 1764430000.0, "firing", f"{subject} is dynamic 123", {"x": 1.5, "cmd": "tar"})


def test_pusher_posts_firing_diagnoses_then_resolves_them_once() -> None:
    receiver = Receiver()
    pusher = AlertPusher(receiver.url, "broker-1", resend_interval=60.0)
    pusher.start()
    try:
        d = firing()
        pending = Diagnosis(BY_ID["tcp_retransmits_high"], "host", 1764430010.0, "pending")
        pusher.offer(State("h", 1764430020.0, [], {}, {}, [d, pending]))
        wait_until(lambda: receiver.bodies, 10, "the first post")
        alert, source = receiver.bodies[0]
        # What Alertmanager accepted firing with its annotations: the cause, not its inhibition source.
        wait_until(lambda: pusher.accepted, 10, "the post counted as accepted")
        assert set(pusher.accepted) == {"small_packet_storm"}
        assert alert["labels"] == {"alertname": "KdiagSmallPacketStorm", "rule": "small_packet_storm", "subject": "eth0",
                                   "severity": "warning", "kdiag_class": "cause", "instance": "broker-1",
                                   "scope": "host"}
        # A cause that explains others comes with its inhibition source, as Prometheus would send it.
        assert source["labels"] == {"alertname": "KdiagExplains", "rule": "small_packet_storm", "subject": "eth0",
                                    "scope": "host", "kdiag_class": "inhibitor", "instance": "broker-1"}
        notes = alert["annotations"]
        assert notes["summary"] == "eth0 is dynamic 123" and json.loads(notes["evidence"]) == {"x": 1.5, "cmd": "tar"}
        assert notes["remediation"] == BY_ID["small_packet_storm"].remediation and "broker-1" in notes["description"]
        assert alert["startsAt"] == "2025-11-29T15:26:40.000Z"
        # The same firing set again is not news: nothing is posted before the resend interval.
        pusher.offer(State("h", 1764430025.0, [], {}, {}, [d]))
        pusher.offer(State("h", 1764430030.0, [], {}, {}, [], [replace(d, ended=1764430030.0)]))
        wait_until(lambda: len(receiver.bodies) == 2, 10, "the resolving post")
        resolved, resolved_source = receiver.bodies[1]
        assert resolved["labels"] == alert["labels"] and resolved["endsAt"] == "2025-11-29T15:27:10.000Z"
        assert resolved_source["labels"] == source["labels"] and resolved_source["endsAt"] == resolved["endsAt"]
        pusher.offer(State("h", 1764430035.0, [], {}, {}, []))
        time.sleep(0.3)
        assert len(receiver.bodies) == 2
    finally:
        pusher.stop()
        receiver.close()


def test_pusher_backs_off_logs_once_and_recovers(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(am, "BACKOFF_START", 0.05)
    port = free_port()
    pusher = AlertPusher(f"http://127.0.0.1:{port}", "broker-1", backoff_max=0.2, timeout=1.0)
    caplog.set_level(logging.INFO, logger="kdiag.alerting.alertmanager")
    pusher.start()
    receiver = None
    try:
        # offer() only swaps a slot: many offers during an outage return at once and keep the latest.
        done = threading.Event()
        threading.Thread(target=lambda: ([pusher.offer(State("h", float(i), [], {}, {}, [firing(subject=f"eth{i}")]))
                                          for i in range(200)], done.set()), daemon=True).start()
        assert done.wait(10)
        wait_until(lambda: pusher.failures >= 4, 10, "several failed attempts")
        assert pusher.accepted == {}
        warnings = [r for r in caplog.records if "unreachable" in r.getMessage()]
        assert len(warnings) == 1
        receiver = Receiver(port)
        wait_until(lambda: receiver.bodies, 10, "a post once Alertmanager is back")
        assert {a["labels"]["subject"] for a in receiver.bodies[0]} == {"eth199"}  # the cause and its inhibition source
        assert any("reachable again" in r.getMessage() for r in caplog.records)
    finally:
        pusher.stop()
        if receiver:
            receiver.close()
