"""The Grafana dashboards: well formed, every query parses (promtool) and returns data from a real Prometheus scraping kdiag."""

from __future__ import annotations

import json
import math
import re
import subprocess
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.promstack import ROOT, Stack, binary, get_json, query
from tests.waiting import wait_until

DASHBOARDS = ROOT / "dashboards"
FILES = sorted(DASHBOARDS.glob("*.json"))
# Diagnoses and Host panels must return data from any kdiag (a replayed host recording); Kafka and probe
# series exist only with a cluster, so those panels are checked against a live kdiag on the Kafka lab.
STRICT = {"kdiag-diagnoses", "kdiag-host"}
GRAFANA_INTERVALS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
VARIABLE = re.compile(r"\$\{?(\w+)\}?")
METRIC = re.compile(r"\bkdiag_\w+")


def panels(board: dict) -> list[dict]:
    """Every panel, including those nested in collapsed rows."""
    out = []
    for p in board["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def targets() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title + refId, PromQL) of every query of every dashboard."""
    out = []
    for f in FILES:
        board = json.loads(f.read_text())
        for p in panels(board):
            out += [(board["uid"], f"{p['title']}/{t['refId']}", t["expr"]) for t in p.get("targets", [])]
    return out


def concrete(expr: str, instance: str = ".+") -> str:
    """A panel query with Grafana's intervals and the dashboard variables (`=~"$var"` matchers) filled in."""
    for name, value in GRAFANA_INTERVALS.items():
        expr = expr.replace(name, value)
    # An instance (host:port) is its own regex: its dots match themselves among loopback targets.
    return VARIABLE.sub(lambda m: instance if m.group(1) == "instance" else ".+", expr)


def exported(prometheus: str, instance: str) -> set[str]:
    """Metric names Prometheus holds for one instance."""
    match = urllib.parse.urlencode({"match[]": f'{{instance="{instance}"}}'})
    return set(get_json(f"{prometheus}/api/v1/label/__name__/values?{match}")["data"])


TARGETS = targets()


@pytest.mark.integration
def test_dashboards_are_well_formed() -> None:
    assert {f.stem for f in FILES} == {"kdiag-diagnoses", "kdiag-host", "kdiag-kafka", "kdiag-probe"}
    for f in FILES:
        board = json.loads(f.read_text())
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["DS_PROMETHEUS"]["type"] == "datasource"
        assert variables["instance"]["definition"] == "label_values(kdiag_build_info, instance)"
        if f.stem in ("kdiag-kafka", "kdiag-probe"):
            assert "broker_id" in variables
        ids = [p["id"] for p in panels(board)]
        assert len(ids) == len(set(ids)), f"{f.name}: duplicate panel ids"
        for p in panels(board):
            if p["type"] == "row":
                continue
            assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, f"{f.name}: {p['title']}"
            assert p["targets"], f"{f.name}: {p['title']} has no query"
            for t in p["targets"]:
                assert t["datasource"]["uid"] == "${DS_PROMETHEUS}"
                # A variable anywhere but in a regex matcher would not survive Grafana's multi-value formatting.
                for m in VARIABLE.finditer(t["expr"]):
                    assert m.group(0) in GRAFANA_INTERVALS or t["expr"][m.start() - 3:m.start()] == '=~"', t["expr"]


@pytest.mark.integration
def test_provisioning_points_at_the_dashboards() -> None:
    providers = yaml.safe_load((DASHBOARDS / "provisioning" / "dashboards.yml").read_text())["providers"]
    sources = yaml.safe_load((DASHBOARDS / "provisioning" / "datasources.yml").read_text())["datasources"]
    assert [p["options"]["path"] for p in providers] == ["/var/lib/grafana/dashboards/kdiag"]
    assert [(s["type"], s["isDefault"]) for s in sources] == [("prometheus", True)]


@pytest.mark.integration
def test_every_query_parses_with_promtool(tmp_path: Path) -> None:
    promtool = binary("promtool")
    exprs = [concrete(e) for _, _, e in TARGETS]
    for f in FILES:
        for v in json.loads(f.read_text())["templating"]["list"]:
            if v["type"] == "query":
                m = re.fullmatch(r"label_values\((.+), *(\w+)\)", v["definition"])
                assert m, v["definition"]
                exprs.append(concrete(m.group(1)))
    rules = {"groups": [{"name": "dashboards", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout


@pytest.fixture(scope="session")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A real Prometheus that has scraped a kdiag replaying a cause, the symptom it explains and a lint."""
    stack = Stack(tmp_path_factory.mktemp("dashboards-stack"))
    try:
        kdiag = stack.kdiag("small-packet-storm-retransmits")
        prometheus = stack.prometheus(kdiag)
        # Two kdiag snapshots (5 s apart) inside the rate windows, and a diagnosis of each kind with its evidence.
        on = f'{{instance="{kdiag}"}}'
        wait_until(lambda: query(prometheus, f"count_over_time(kdiag_build_info{on}[1m]) >= 8")
                   and len(query(prometheus, f"count by (kind) (kdiag_diagnosis_active{on})")) == 3
                   and query(prometheus, f"kdiag_diagnosis_evidence{on}"), 60, "8 scrapes and diagnoses of each kind",
                   stack.logs)
        yield {"prometheus": prometheus, "names": exported(prometheus, kdiag), "instance": kdiag}
    finally:
        stack.close()


@pytest.mark.integration
def test_instance_variable_finds_kdiag(scraped: dict) -> None:
    values = get_json(f"{scraped['prometheus']}/api/v1/label/instance/values?match[]=kdiag_build_info")["data"]
    assert scraped["instance"] in values


HOST_TARGETS = [t for t in TARGETS if t[0] in STRICT]
KAFKA_TARGETS = [t for t in TARGETS if t[0] not in STRICT]


@pytest.mark.integration
@pytest.mark.parametrize(("uid", "panel", "expr"), HOST_TARGETS, ids=[f"{u}:{p}" for u, p, _ in HOST_TARGETS])
def test_panel_query_returns_data(scraped: dict, uid: str, panel: str, expr: str) -> None:
    missing = sorted(set(METRIC.findall(expr)) - scraped["names"])
    assert not missing, f"{uid} / {panel}: the kdiag under test exports no {', '.join(missing)}"
    on_kdiag = concrete(expr, scraped["instance"])
    assert query(scraped["prometheus"], on_kdiag), f"{uid} / {panel}: no data for {on_kdiag}"


# What each Kafka/Probe panel query must return from a live kdiag on the healthy 3-broker lab with a little
# produce traffic: "brokers" = a finite value for every lab broker, "nonzero" = some series above 0,
# "data" = any series, "present" = only its metrics exported (the query may rightly be empty when healthy).
KAFKA_CHECKS = {
    # The dash-* traffic is keyed over 3 partitions, so some broker takes bytes in.
    ("kdiag-kafka", "Bytes in per broker/A"): "nonzero",
    # The admin collector reports leaders for every broker, 0 included.
    ("kdiag-kafka", "Partition leaders per broker/A"): "brokers",
    # The JMX LeaderCount gauge exists on every broker, 0 included.
    ("kdiag-kafka", "Partition leaders per broker/B"): "brokers",
    # KRaft flushes its metadata log and the traffic appends: some broker flushes within a minute.
    ("kdiag-kafka", "Log flushes/s/A"): "nonzero",
    # The flush histogram's mean and p99 are gauges every broker exports from its start.
    ("kdiag-kafka", "Log flush time/A"): "brokers",
    # Every broker leads a dash-* or probe partition, so every broker has Produce request times.
    ("kdiag-kafka", "Produce time split (p99)/A"): "brokers",
    # Idle ratios are gauges of every broker, whatever the load.
    ("kdiag-kafka", "Request handler idle/A"): "brokers",
    # Idle ratios are gauges of every broker, whatever the load.
    ("kdiag-kafka", "Network processor idle/A"): "brokers",
    # No > 0 filter: a healthy broker reports 0, still a series.
    ("kdiag-kafka", "Under-replicated partitions per broker/A"): "brokers",
    # No > 0 filter: every topic (dash-* and the probe's at least) reports 0.
    ("kdiag-kafka", "Under-replicated partitions per topic/A"): "data",
    # The probe writes to a partition led by each broker every 0.5 s.
    ("kdiag-probe", "Produce latency p99 / p50/A"): "brokers",
    # The probe writes to a partition led by each broker every 0.5 s.
    ("kdiag-probe", "Produce latency p99 / p50/B"): "brokers",
    # A single unlabelled config gauge.
    ("kdiag-probe", "Produce latency p99 / p50/C"): "data",
    # The probe reads back what it wrote, per broker.
    ("kdiag-probe", "End-to-end latency p99 / p50/A"): "brokers",
    # The probe reads back what it wrote, per broker.
    ("kdiag-probe", "End-to-end latency p99 / p50/B"): "brokers",
    # A single unlabelled config gauge.
    ("kdiag-probe", "End-to-end latency p99 / p50/C"): "data",
    # Availability is 1 on a healthy cluster, a series per broker.
    ("kdiag-probe", "Availability/A"): "brokers",
    # increase() without a > 0 filter: 0 per broker when nothing is lost.
    ("kdiag-probe", "Messages lost/A"): "brokers",
    # The probe sends every 0.5 s.
    ("kdiag-probe", "Sent, acked, failed per second/A"): "nonzero",
    # Its sends are acked on a healthy cluster.
    ("kdiag-probe", "Sent, acked, failed per second/B"): "nonzero",
    # rate() of a counter that stays 0: a 0 series per broker.
    ("kdiag-probe", "Sent, acked, failed per second/C"): "brokers",
    # The fixture's group committed offset 0 of the dash-* topic and never reads: its first record ages.
    ("kdiag-kafka", "Consumer lag (seconds)/A"): "nonzero",
    # The same group falls behind: +Inf (never) from the second fetch on.
    ("kdiag-kafka", "Time to catch up/A"): "data",
}
PROBE_TOPIC = "kdiag-probe-dash"


def unmet(prometheus: str, instance: str, names: set[str], brokers: set[str], check: str, expr: str) -> str:
    """Why a panel query does not meet its check yet ("" when it does)."""
    missing = sorted(set(METRIC.findall(expr)) - names)
    if missing:
        return f"kdiag exports no {', '.join(missing)}"
    if check == "present":
        return ""
    result = query(prometheus, concrete(expr, instance))
    values = {r["metric"].get("broker_id"): float(r["value"][1]) for r in result}
    if check == "data" and not result:
        return "no data"
    # Every series, not one per broker_id: a panel by group has no broker_id, and one group at 0 hid another above.
    if check == "nonzero" and not any(float(r["value"][1]) > 0 for r in result):
        return f"no series above 0: {[(r['metric'], r['value'][1]) for r in result][:10]}"
    if check == "brokers" and not {b for b, v in values.items() if math.isfinite(v)} >= brokers:
        return f"not a finite value for each of brokers {sorted(brokers)}: {values}"
    return ""


def keyed_traffic(bootstrap: str, topic: str, stop: threading.Event) -> None:
    """Keyed 200-byte messages to topic, about 200/s, until stop is set."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    n = 0
    while not stop.is_set():
        for _ in range(100):
            producer.produce(topic, key=str(n % 97).encode(), value=b"d" * 200)
            n += 1
        producer.poll(0)
        stop.wait(0.5)
    producer.flush(10)


@pytest.fixture(scope="session")
def kafka_scraped(kafka_lab: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A real Prometheus scraping, every second, a live kdiag with the Kafka collectors and the probe on the lab."""
    workdir = tmp_path_factory.mktemp("dashboards-kafka-stack")
    config = workdir / "kdiag.yml"
    config.write_text(yaml.safe_dump({"kafka": {"interval": "5s", "jmx_interval": "5s", "cluster_scope": "always"},
                                      "probe": {"interval": 0.5, "topic": PROBE_TOPIC}}))
    bootstrap = kafka_lab["bootstrap"]
    brokers = set(kafka_lab["jmx"])
    jmx = [arg for n in sorted(kafka_lab["jmx"], key=int) for arg in ("--jmx", kafka_lab["jmx"][n])]
    topic = f"dash-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=len(brokers), replication_factor=len(brokers))])[topic].result(30)
    lagging = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False})
    lagging.commit(offsets=[TopicPartition(topic, p, 0) for p in range(len(brokers))], asynchronous=False)
    lagging.close()
    stop = threading.Event()
    traffic = threading.Thread(target=keyed_traffic, args=(bootstrap, topic, stop), daemon=True)
    traffic.start()
    stack = Stack(workdir)
    try:
        kdiag = stack.kdiag_live("--interval", "2s", "--bootstrap-servers", bootstrap, *jmx, "--config", str(config))
        prometheus = stack.prometheus(kdiag)

        def ready() -> bool:
            names = exported(prometheus, kdiag)
            return all(not unmet(prometheus, kdiag, names, brokers, KAFKA_CHECKS[uid, panel], expr)
                       for uid, panel, expr in KAFKA_TARGETS)

        # Bounded, and not failing here: past the deadline each test below names its own panel.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not ready():
            time.sleep(1)
        yield {"prometheus": prometheus, "names": exported(prometheus, kdiag), "instance": kdiag, "brokers": brokers}
    finally:
        stop.set()
        traffic.join(15)
        stack.close()
        admin.delete_topics([topic])[topic].result(30)
        admin.delete_consumer_groups([topic])[topic].result(30)


@pytest.mark.integration
def test_kafka_checks_cover_every_kafka_panel() -> None:
    assert set(KAFKA_CHECKS) == {(uid, panel) for uid, panel, _ in KAFKA_TARGETS}
    assert set(KAFKA_CHECKS.values()) <= {"brokers", "nonzero", "data", "present"}


@pytest.mark.kafka
def test_variables_find_the_live_kdiag_and_brokers(kafka_scraped: dict) -> None:
    prometheus = kafka_scraped["prometheus"]
    for f in FILES:
        board = json.loads(f.read_text())
        if board["uid"] in STRICT:
            continue
        for v in board["templating"]["list"]:
            if v["type"] == "query":
                selector, label = re.fullmatch(r"label_values\((.+), *(\w+)\)", v["definition"]).groups()
                found = {r["metric"].get(label) for r in query(prometheus, concrete(selector))}
                want = {kafka_scraped["instance"]} if label == "instance" else kafka_scraped["brokers"]
                assert found >= want, f"{board['uid']} ${v['name']}: {found}"


@pytest.mark.kafka
@pytest.mark.parametrize(("uid", "panel", "expr"), KAFKA_TARGETS, ids=[f"{u}:{p}" for u, p, _ in KAFKA_TARGETS])
def test_kafka_panel_query_returns_data(kafka_scraped: dict, uid: str, panel: str, expr: str) -> None:
    check = KAFKA_CHECKS[uid, panel]
    instance = kafka_scraped["instance"]
    problem = unmet(kafka_scraped["prometheus"], instance, kafka_scraped["names"], kafka_scraped["brokers"], check, expr)
    assert not problem, f"{uid} / {panel} ({check}): {problem} for {concrete(expr, instance)}"
