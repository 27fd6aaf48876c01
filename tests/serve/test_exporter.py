"""The exporter: metrics rendered once per cycle from a real pipeline, served over loopback without reading /proc."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import urllib.error
import urllib.request
from email.message import Message

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kdiag.config.settings import Config
from kdiag.app.wiring import host_collectors
from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.families.host import CPU_SECONDS_TOTAL
from kdiag.families.own import SCHEDULE_NOTE
from kdiag.serve.exporter import Published, render_metrics
from kdiag.runtime.pipeline import CollectorSet, Health, Pipeline, State
from kdiag.recording.recording import record
from kdiag.core.root import Root, SnapshotRoot
from kdiag.serve.webserver import Exporter
from tests.paths import FIXTURES

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def live_state() -> State:
    """The state of two real pipeline steps over this machine."""
    collectors = CollectorSet(host_collectors(Config()))
    pipeline = Pipeline(collectors, load_catalog([default_rules_dir()]), "testhost")
    pipeline.step(Root())
    return pipeline.step(Root())


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fams: dict, family: str, name: str | None = None) -> list:
    return [s for s in fams[family].samples if s.name == (name or family)]


def test_render_metrics_parses(live_state):
    state = live_state
    fams = families(render_metrics(state).decode())
    collectors = set(state.health)
    assert collectors >= {"stat", "meminfo", "netdev", "interrupts", "diskstats", "processes"}
    success = samples(fams, "kdiag_collector_success")
    assert {s.labels["collector"] for s in success} == collectors
    assert all(s.value in (0.0, 1.0) for s in success)
    assert {s.labels["collector"] for s in samples(fams, "kdiag_collector_duration_seconds")} == collectors
    last = samples(fams, "kdiag_collector_last_success_timestamp_seconds")
    succeeded = {n for n, h in state.health.items() if h.success}
    assert {s.labels["collector"] for s in last} == succeeded
    assert all(s.value == state.health[s.labels["collector"]].last_success for s in last)
    spent = {s.labels["collector"]: s.value for s in samples(fams, "kdiag_collector_cpu_seconds",
                                                             "kdiag_collector_cpu_seconds_total")}
    assert fams["kdiag_collector_cpu_seconds"].type == "counter"
    assert spent == {n: h.cpu_total for n, h in state.health.items() if h.cpu_total is not None}
    assert spent["processes"] > state.health["processes"].cpu > 0  # two runs: the total holds both
    # A service's health, which the daemon makes, counts no CPU: no series, not a 0 that would read as free.
    served = State(state.host, state.time, state.samples, {**state.health, "coordination": Health(True, 0.0, 1.0)},
                   state.signals, state.diagnoses)
    with_service = families(render_metrics(served).decode())
    assert {s.labels["collector"] for s in samples(with_service, "kdiag_collector_cpu_seconds",
                                                   "kdiag_collector_cpu_seconds_total")} == set(spent)
    assert "coordination" in {s.labels["collector"] for s in samples(with_service, "kdiag_collector_success")}
    assert fams["kdiag_cpu_seconds"].type == "counter"
    cpu = samples(fams, "kdiag_cpu_seconds", "kdiag_cpu_seconds_total")
    assert cpu and {"cpu", "mode"} <= set(cpu[0].labels)
    assert samples(fams, "kdiag_last_cycle_timestamp_seconds")[0].value == state.time
    # kdiag's own process metrics are there too.
    assert "process_cpu_seconds" in fams


def test_health_help_says_scrapes_never_read_proc(live_state):
    state = live_state
    fams = families(render_metrics(state).decode())
    for name in ("kdiag_collector_success", "kdiag_collector_duration_seconds",
                 "kdiag_collector_last_success_timestamp_seconds"):
        assert SCHEDULE_NOTE in fams[name].documentation
        assert "never reads /proc" in fams[name].documentation


def test_collector_help_text_is_used(live_state):
    state = live_state
    fams = families(render_metrics(state).decode())
    assert fams["kdiag_cpu_seconds"].documentation == CPU_SECONDS_TOTAL.help


def test_every_sample_of_the_state_is_exported(live_state):
    state = live_state
    fams = families(render_metrics(state).decode())
    exported = {(s.name, tuple(sorted(s.labels.items()))) for f in fams.values() for s in f.samples}
    missing = [s for s in state.samples if (s.name, s.labels) not in exported]
    assert not missing, missing[:5]


class Server:
    def __init__(self):
        self.published = Published()
        self.exporter = Exporter("127.0.0.1:0", self.published)
        self.exporter.start()

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Message, bytes]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.exporter.port}{path}", headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.exporter.stop()


def test_http_endpoints(server, live_state):
    state = live_state
    status, _, body = server.get("/healthz")
    assert (status, body) == (503, b"starting\n")
    status, _, body = server.get("/metrics")
    assert status == 200 and body.startswith(b"# kdiag: first collection still running")

    server.published.publish(state)
    status, _, body = server.get("/healthz")
    assert (status, body) == (200, b"ok\n")

    status, headers, body = server.get("/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "Content-Encoding" not in headers
    fams = families(body.decode())
    assert samples(fams, "kdiag_cpu_seconds", "kdiag_cpu_seconds_total")

    status, headers, zipped = server.get("/metrics", {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped) == body
    assert int(headers["Content-Length"]) == len(zipped)

    status, headers, body = server.get("/api/diagnoses")
    assert status == 200 and headers["Content-Type"] == "application/json"
    data = json.loads(body)
    assert set(data) == {"host", "time", "diagnoses"}
    assert data["host"] == "testhost" and data["time"] == state.time
    assert isinstance(data["diagnoses"], list)
    assert data == json.loads(json.dumps(state.to_json()))

    status, _, body = server.get("/metrics?name[]=x")  # query strings are ignored
    assert status == 200

    status, _, body = server.get("/nope")
    assert status == 404 and b"/metrics" in body
    status, _, body = server.get("/")
    assert status == 200 and b'href="/metrics"' in body


def test_scrape_never_reads_proc(tmp_path, server):
    """Publish a state built over a snapshot in tmp, delete the tree, and scrape: the same bytes are served."""
    clock = [1_700_000_000.0]
    fixture = FIXTURES / "host-vm2"
    rec = tmp_path / "rec"
    record(rec, 5.0, 5.0, CollectorSet(host_collectors(Config())),
           Root(fixture / "proc", fixture / "sys", lambda: clock[0]), progress=lambda m: None,
           sleep=lambda s: clock.__setitem__(0, clock[0] + 5.0))
    snapshot = tmp_path / "copy"
    shutil.copytree(rec / "0001", snapshot, symlinks=True)
    collectors = CollectorSet(host_collectors(Config()))
    pipeline = Pipeline(collectors, load_catalog([default_rules_dir()]), "snaphost")
    pipeline.step(SnapshotRoot(rec / "0000"))
    state = pipeline.step(SnapshotRoot(snapshot))
    assert state.health["stat"].success
    server.published.publish(state)
    _, _, before = server.get("/metrics")

    shutil.rmtree(tmp_path)
    assert not snapshot.exists()

    for headers in ({}, {"Accept-Encoding": "gzip"}):
        status, h, body = server.get("/metrics", headers)
        assert status == 200
        assert (gzip.decompress(body) if h.get("Content-Encoding") == "gzip" else body) == before
    fams = families(before.decode())
    cpu = samples(fams, "kdiag_cpu_seconds", "kdiag_cpu_seconds_total")
    assert cpu
    assert samples(fams, "kdiag_collector_success")
    status, _, body = server.get("/api/diagnoses")
    assert status == 200 and json.loads(body)["host"] == "snaphost"


def test_exporter_binds_loopback_port_zero():
    published = Published()
    exporter = Exporter("127.0.0.1:0", published)
    try:
        assert exporter.port > 0
        assert exporter.address[0] == "127.0.0.1"
    finally:
        exporter.stop()
    # The port is free again.
    with socket.socket() as s:
        s.bind(("127.0.0.1", exporter.port))


def test_diagnoses_exported(tmp_path):
    """A firing and a pending diagnosis become kdiag_diagnosis_active 1 and 0, with float evidence."""
    from kdiag.analysis.engine import Engine, EngineState

    rules = tmp_path / "r.yaml"
    rules.write_text("""\
- id: swap_hog
  kind: cause
  severity: warning
  each: host
  when: host.swap_used_bytes > 100.0
  summary: "{host.swap_used_bytes:.0f} B"
  evidence: [host.swap_used_bytes, host.net_rx_top_cpu]
  remediation: none
  source: tests
- id: swap_slow
  kind: symptom
  severity: critical
  each: host
  when: host.swap_used_bytes > 100.0
  for: 1m
  summary: x
  remediation: none
  source: tests
""")
    engine = Engine(load_catalog([rules]))
    signals = {"host": {"host": {"name": "host", "swap_used_bytes": 1000.0, "net_rx_top_cpu": "3"}}}
    diagnoses = engine.evaluate(EngineState(), 0.0, signals).current()
    state = State("h", 0.0, [], {}, signals, diagnoses)
    fams = families(render_metrics(state).decode())
    active = {s.labels["rule"]: s for s in samples(fams, "kdiag_diagnosis_active")}
    assert active["swap_hog"].value == 1.0 and active["swap_slow"].value == 0.0
    assert active["swap_hog"].labels == {"rule": "swap_hog", "subject": "host", "kind": "cause", "severity": "warning",
                                         "scope": "host"}
    evidence = samples(fams, "kdiag_diagnosis_evidence")
    assert [(s.labels, s.value) for s in evidence] == [
        ({"rule": "swap_hog", "subject": "host", "signal": "host.swap_used_bytes"}, 1000.0)]


SKEW_RULE = """\
- id: skew
  kind: cause
  severity: warning
  each: topic
  when: it.leader_skew_ratio > 2.0
  summary: "{it.name} skewed"
  evidence: [it.leader_skew_ratio]
  explains: [slow]
  remediation: none
  source: tests
- id: slow
  kind: symptom
  severity: warning
  each: probe
  when: it.produce_p99_seconds > 1.0
  summary: x
  remediation: none
  source: tests
- id: swap
  kind: cause
  severity: warning
  each: host
  when: host.swap_used_bytes > 100.0
  explains: [slow]
  summary: x
  remediation: none
  source: tests
"""


def test_cluster_scope_diagnoses_are_exported_by_the_reporter_only_and_listed_by_all(tmp_path):
    """Kafka series get `cluster`; a topic diagnosis is exported only while reporting, yet always in the JSON."""
    from kdiag.analysis.engine import Engine, EngineState
    from kdiag.core.sample import sample
    from kdiag.kafka.coordination import Reporting
    from kdiag.kafka.coordination_records import Member

    (tmp_path / "r.yaml").write_text(SKEW_RULE)
    rules = load_catalog([tmp_path / "r.yaml"])
    assert {r.id: r.scope for r in rules} == {"skew": "cluster", "slow": "host", "swap": "host"}
    signals = {"host": {"host": {"name": "host", "swap_used_bytes": 1000.0}},
               "topic": {"t": {"name": "t", "leader_skew_ratio": 3.0, "on_brokers": "1,3"}},
               "probe": {"2": {"name": "broker 2", "produce_p99_seconds": 2.0, "on_brokers": "2"}}}
    diagnoses = Engine(rules, local_broker=2).evaluate(EngineState(), 0.0, signals).current()
    kafka = [sample("kdiag_kafka_brokers", 3), sample("kdiag_kafka_cluster_info", 1, cluster_id="abc")]
    other = Member("other-host", 1)
    for reporting, exported in ((Reporting(True, None), True), (Reporting(False, other), False)):
        state = State("h", 0.0, kafka, {}, signals, diagnoses, [], "abc", 2, reporting)
        fams = families(render_metrics(state).decode())
        active = {s.labels["rule"]: s.labels for s in samples(fams, "kdiag_diagnosis_active")}
        assert active["slow"] == {"rule": "slow", "subject": "broker 2", "kind": "symptom", "severity": "warning",
                                  "scope": "host", "cluster": "abc", "broker": "2"}
        # A host cause on broker 2's host concerns broker 2: it can mute broker 2's symptoms anywhere in the cluster.
        assert active["swap"]["broker"] == "2" and active["swap"]["cluster"] == "abc"
        assert ("skew" in active) is exported
        explains = sorted(tuple(sorted(s.labels.items())) for s in samples(fams, "kdiag_diagnosis_explains"))
        skew = [("cluster", "abc"), ("rule", "skew"), ("scope", "cluster"), ("subject", "t")]
        swap = [("cluster", "abc"), ("rule", "swap"), ("scope", "host"), ("subject", "host")]
        assert explains == sorted([tuple(sorted([*skew, ("broker", "1")])), tuple(sorted([*skew, ("broker", "3")])),
                                   tuple(sorted([*swap, ("broker", "2")]))][0 if exported else 2:])
        assert {s.labels.get("cluster") for s in samples(fams, "kdiag_kafka_brokers")} == {"abc"}
        listed = {d["rule"]: d for d in state.to_json()["diagnoses"]}
        assert listed["skew"]["scope"] == "cluster" and listed["skew"]["cluster"] == "abc"
        assert listed["skew"]["reported_by"] == ({"host": "h", "broker_id": 2} if exported
                                                 else {"host": "other-host", "broker_id": 1})
        assert "reported_by" not in listed["slow"] and "cluster" not in listed["swap"]


def test_a_failing_collector_says_why_in_a_metric_and_on_healthz(server, live_state):
    state = live_state
    reason = 'KafkaAdminError: Kafka at b:9093: SASL authentication failed for user "kdiag": check kafka.client.sasl.password_file'
    failing = State(state.host, state.time, state.samples,
                    {**state.health, "kafka_admin": Health(False, 1.0, None, reason)}, state.signals, state.diagnoses)
    server.published.publish(failing)
    fams = families(server.get("/metrics")[2].decode())
    (info,) = samples(fams, "kdiag_collector_last_error_info")
    assert info.labels == {"collector": "kafka_admin", "reason": reason} and info.value == 1.0
    assert server.get("/healthz")[::2] == (200, f"ok\nkafka_admin: {reason}\n".encode())
    server.published.publish(state)  # working again: no reason left
    assert "kdiag_collector_last_error_info{" not in server.get("/metrics")[2].decode()
    assert server.get("/healthz")[::2] == (200, b"ok\n")


def test_the_page_is_drawn_by_the_first_request_after_a_publish_and_only_then(server):
    drawings: list[int] = []

    def draw(n: int):
        def drawn() -> tuple[bytes, bytes] | None:
            drawings.append(n)
            return (f"<p>page {n}</p>".encode(), f'{{"n": {n}}}'.encode()) if n != 3 else None
        return drawn

    status, _, body = server.get("/")
    assert status == 200 and b"first collection still running" in body
    for n in (1, 2):
        server.published.publish_page(draw(n))
    assert drawings == []  # nobody asked: nothing drawn
    assert server.get("/")[2] == b"<p>page 2</p>" and server.get("/api/page")[2] == b'{"n": 2}'
    assert drawings == [2]  # the last published, once for both answers
    server.published.publish_page(draw(3))  # a drawing that fails: the last page drawn stays
    assert server.get("/api/page")[2] == b'{"n": 2}' and server.get("/")[2] == b"<p>page 2</p>"
    assert drawings == [2, 3]
