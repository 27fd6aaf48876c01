"""End to end: kdiag -> Prometheus -> generated alert rules -> Alertmanager, and kdiag's direct push, on real binaries."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from tests.promstack import ROOT, Stack, free_port, get_json
from tests.waiting import wait_until

from kdiag.alerting.alertmanager import AlertPusher
from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Diagnosis
from kdiag.runtime.pipeline import State

pytestmark = pytest.mark.e2e
RULES = {r.id: r for r in load_catalog([default_rules_dir()])}


class Webhook:
    """A loopback webhook receiver standing in for the example config's placeholder."""

    def __init__(self):
        self.posts: list[dict] = []
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/kdiag"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory):
    """One Stack for this module's processes, stopped at the end of the session."""
    s = Stack(tmp_path_factory.mktemp("alerting-stack"))
    yield s
    s.close()


@pytest.fixture(scope="session")
def alertmanager(stack: Stack) -> str:
    """A real Alertmanager running deploy/alertmanager/alertmanager.yml, its receiver pointed at a local webhook."""
    webhook = Webhook()
    config = yaml.safe_load((ROOT / "deploy" / "alertmanager" / "alertmanager.yml").read_text())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = webhook.url
    try:
        yield stack.alertmanager(config)
    finally:
        webhook.close()


@pytest.fixture(scope="session")
def alerting(stack: Stack, alertmanager: str) -> dict:
    """kdiag replaying a small-packet storm with retransmits; Prometheus evaluating the generated alerts every second."""
    kdiag = stack.kdiag("small-packet-storm-retransmits")
    prometheus = stack.prometheus(kdiag, [ROOT / "deploy" / "prometheus" / "kdiag-alerts.yml"], alertmanager)
    return {"kdiag": kdiag, "prometheus": prometheus, "alertmanager": alertmanager, "logs": stack.logs}


def alerts(alertmanager: str, instance: str) -> dict[str, dict]:
    """Alertmanager's current alerts for one instance (active, inhibited or silenced), by alert name; an inhibition
    source (KdiagExplains) by alert name and rule."""
    found = get_json(f"{alertmanager}/api/v2/alerts?filter=" + f'instance="{instance}"'.replace('"', "%22"))
    return {a["labels"]["alertname"] + ("/" + a["labels"]["rule"] if a["labels"]["alertname"] == "KdiagExplains" else ""): a
            for a in found}


def test_cause_alert_carries_the_diagnosis_and_mutes_the_symptom_it_explains(alerting: dict) -> None:
    instance = alerting["kdiag"]

    def both() -> dict | None:
        got = alerts(alerting["alertmanager"], instance)
        symptom = got.get("KdiagTcpRetransmitsHigh")
        return got if "KdiagSmallPacketStorm" in got and symptom and symptom["status"]["inhibitedBy"] else None

    got = wait_until(both, 90, "the cause alert and its inhibited symptom in Alertmanager", alerting["logs"])
    cause, symptom = got["KdiagSmallPacketStorm"], got["KdiagTcpRetransmitsHigh"]
    assert cause["status"]["state"] == "active" and not cause["status"]["inhibitedBy"]
    assert cause["labels"] | {"subject": "eth0", "rule": "small_packet_storm", "kdiag_class": "cause",
                              "severity": "warning", "instance": instance} == cause["labels"]
    notes = cause["annotations"]
    assert re.fullmatch(rf"eth0 on {re.escape(instance)}: eth0 moves \d+ rx / \d+ tx packets/s of only 130 / 90 B on "
                        r"average: tiny produce requests, not data, fill the NIC", notes["summary"]), notes["summary"]
    assert notes["remediation"] == RULES["small_packet_storm"].remediation
    assert notes["runbook_url"].endswith("/docs/RULES.md#small_packet_storm")
    assert " rx_avg_packet_bytes=130 " in notes["description"]
    assert symptom["status"]["state"] == "suppressed"
    # The cause's inhibition source: it concerns no broker (a replay without kafka.local_broker_id), so its instance.
    assert symptom["status"]["inhibitedBy"] == [got["KdiagExplains/small_packet_storm"]["fingerprint"]]
    assert symptom["annotations"]["summary"] == f"host on {instance}: 5.0% of 30000 TCP segments/s are retransmitted"
    # A lint explains nothing and is explained by nothing: it stays active.
    assert got["KdiagSwappinessHigh"]["status"]["inhibitedBy"] == []


def diagnosis(rule: str, subject: str, since: float, summary: str, evidence: dict) -> Diagnosis:
    """A firing diagnosis of a catalog rule, as the engine would hold it."""
    return Diagnosis(RULES[rule], subject, since, "firing", summary, evidence)


def test_pusher_alerts_carry_the_dynamic_summary_and_resolve(alertmanager: str) -> None:
    instance = f"pusher-{free_port()}"
    now = time.time()
    cause = diagnosis("small_packet_storm", "eth0", now - 40, "eth0 moves 431234 rx / 2 tx packets/s of only 131 / 90 B",
                      {"rx_packets_per_second": 431234.0, "rx_avg_packet_bytes": 131.0})
    symptom = diagnosis("tcp_retransmits_high", "host", now - 30, "4.2% of 30000 TCP segments/s are retransmitted",
                        {"host.tcp_retransmit_ratio": 0.042})
    pusher = AlertPusher(alertmanager, instance, resend_interval=60.0, timeout=5.0)
    pusher.start()
    try:
        pusher.offer(State(instance, now, [], {}, {}, [cause, symptom]))
        # Alertmanager marks inhibitions asynchronously: an alert may be listed before its inhibitedBy is set.
        got = wait_until(lambda: (a := alerts(alertmanager, instance)) and len(a) == 3
                         and a["KdiagTcpRetransmitsHigh"]["status"]["inhibitedBy"] and a, 30,
                         "the pushed alerts, the symptom marked inhibited")
        pushed = got["KdiagSmallPacketStorm"]
        assert pushed["labels"] == {"alertname": "KdiagSmallPacketStorm", "rule": "small_packet_storm", "subject": "eth0",
                                    "severity": "warning", "kdiag_class": "cause", "instance": instance,
                                    "scope": "host"}
        assert pushed["annotations"]["summary"] == cause.summary
        assert json.loads(pushed["annotations"]["evidence"]) == cause.evidence
        assert pushed["annotations"]["remediation"] == RULES["small_packet_storm"].remediation
        assert got["KdiagTcpRetransmitsHigh"]["status"]["inhibitedBy"] == [got["KdiagExplains/small_packet_storm"]["fingerprint"]]

        ended = time.time()
        pusher.offer(State(instance, ended, [], {}, {}, [], [replace(cause, ended=ended), replace(symptom, ended=ended)]))
        wait_until(lambda: alerts(alertmanager, instance) == {}, 30, "the resolved alerts to leave Alertmanager")
    finally:
        pusher.stop()


def test_a_cause_mutes_symptoms_of_its_brokers_from_any_daemon_and_no_others(alertmanager: str) -> None:
    """Two daemons push: a host cause on broker 2's host and a topic cause on broker 1 mute another daemon's probe
    symptoms for brokers 2 and 1, and leave broker 3's alone."""
    from kdiag.kafka.coordination import Reporting

    cluster, now = f"fleet-{free_port()}", time.time()
    # The scanner is host scope on broker 2's host (kafka.local_broker_id: 2).
    scanner = replace(diagnosis("foreign_io_scanner", "pid 4711 tar", now - 60, "tar reads the log dir", {}),
                      brokers=frozenset({"2"}))
    skew = replace(diagnosis("partition_skew", f"{cluster}-topic", now - 60, "skewed", {}), brokers=frozenset({"1"}))
    symptoms = [replace(diagnosis("probe_latency_high", f"broker {b}", now - 50, "slow", {}), brokers=frozenset({str(b)}))
                for b in (1, 2, 3)]
    pushers = {name: AlertPusher(alertmanager, f"{cluster}-{name}", resend_interval=60.0, timeout=5.0) for name in "ab"}
    for p in pushers.values():
        p.start()
    try:
        pushers["a"].offer(State(f"{cluster}-a", now, [], {}, {}, [scanner, skew], [], cluster, 2, Reporting(True, None)))
        pushers["b"].offer(State(f"{cluster}-b", now, [], {}, {}, symptoms, [], cluster, 3, Reporting(False, None)))

        def muted() -> dict | None:
            got = {a["labels"]["subject"]: a for a in get_json(f"{alertmanager}/api/v2/alerts?filter="
                                                              + f'instance="{cluster}-b"'.replace('"', "%22"))}
            return got if len(got) == 3 and got["broker 1"]["status"]["inhibitedBy"] \
                and got["broker 2"]["status"]["inhibitedBy"] else None

        got = wait_until(muted, 30, "broker 1's and broker 2's symptoms inhibited")
        assert got["broker 3"]["status"]["state"] == "active" and got["broker 3"]["status"]["inhibitedBy"] == []
        sources = {a["fingerprint"]: a["labels"] for a in get_json(
            f"{alertmanager}/api/v2/alerts?filter=" + 'alertname="KdiagExplains"'.replace('"', "%22"))}
        assert sources[got["broker 1"]["status"]["inhibitedBy"][0]]["rule"] == "partition_skew"
        assert sources[got["broker 2"]["status"]["inhibitedBy"][0]]["rule"] == "foreign_io_scanner"
    finally:
        for p in pushers.values():
            p.stop()
