"""One point of the Kafka version matrix (scripts/version-matrix): kdiag against a lab of another version or mode.

The `matrix` tier; runs only with KDIAG_MATRIX_LAB=DIR naming a running lab (`kdiag lab up --dir DIR`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from kdiag.core.root import Root
from kdiag.runtime.discovery import find_brokers
from tests.waiting import wait_until
from tests.paths import ROOT

pytestmark = [
    pytest.mark.matrix,
    pytest.mark.skipif(not os.environ.get("KDIAG_MATRIX_LAB"),
                       reason="a version-matrix point: set KDIAG_MATRIX_LAB (scripts/version-matrix)"),
]
LAB = Path(os.environ.get("KDIAG_MATRIX_LAB", "/nonexistent"))
# Seconds every collector must stay at success 1: two admin fetches at the 15 s default, six host cycles.
HOLD = float(os.environ.get("KDIAG_MATRIX_HOLD", "30"))
COLLECTORS = ("kafka_admin", "kafka_jmx", "probe")
# The JMX series the Kafka rules read (kdiag/analysis/kafka_signals.py), each needing a value at every version.
JMX_SERIES = (
    "kdiag_kafka_request_handler_idle_ratio",
    "kdiag_kafka_network_processor_idle_ratio",
    "kdiag_kafka_request_queue_size",
    "kdiag_kafka_under_replicated_partitions",
    "kdiag_kafka_under_min_isr_partitions",
    "kdiag_kafka_isr_shrinks_total",
    "kdiag_kafka_partitions",
    "kdiag_kafka_leaders",
    "kdiag_kafka_bytes_in_total",
    "kdiag_kafka_messages_in_total",
    "kdiag_kafka_request_time_seconds",
    "kdiag_kafka_requests_total",
    "kdiag_jvm_gc_collection_seconds_total",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metrics(port: int) -> dict[str, list[tuple[str, float]]]:
    """The exposition's samples by metric name: (label text, value)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            name, _, labels = head.partition("{")
            out.setdefault(name, []).append((labels, float(value)))
    return out


def _success(metrics: dict) -> dict[str, float]:
    return {labels.split('"')[1]: v for labels, v in metrics.get("kdiag_collector_success", [])}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """`kdiag run` on the matrix lab's kdiag.yaml, serving on a free loopback port."""
    port = _free_port()
    log = tmp_path_factory.mktemp("matrix") / "kdiag.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--config", str(LAB / "kdiag.yaml"),
                                 "--listen", f"127.0.0.1:{port}", "--no-discover"], stdout=out, stderr=subprocess.STDOUT)
    try:
        yield port, log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _firing_kafka_causes(port: int) -> list[tuple[str, str]]:
    """(rule, subject) of every Kafka cause the daemon has firing."""
    kafka_rules = {r["id"] for r in yaml.safe_load((ROOT / "rules" / "kafka.yaml").read_text())}
    diagnoses = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/diagnoses", timeout=5).read())
    items = diagnoses if isinstance(diagnoses, list) else diagnoses.get("diagnoses", [])
    return [(d.get("id") or d.get("rule"), d.get("subject")) for d in items
            if (d.get("id") or d.get("rule")) in kafka_rules and d.get("state", "firing") == "firing"]


def test_collectors_stay_up_and_no_cause_fires_on_the_idle_lab(daemon):
    """Every collector at success 1 for HOLD seconds, the JMX series with values, and no Kafka cause firing once the
    rules' `for:` (15 s at most) has passed: checked at every poll of the hold, not once after a sleep."""
    port, log = daemon
    wait_until(lambda: all(_success(_metrics(port)).get(c) == 1 for c in COLLECTORS), 180,
               f"{', '.join(COLLECTORS)} at kdiag_collector_success 1", [log])
    start = time.monotonic()
    while (held := time.monotonic() - start) < HOLD:
        success = _success(_metrics(port))
        assert all(success.get(c) == 1 for c in COLLECTORS), f"a collector failed after {held:.0f}s: {success}"
        if held > 20:
            firing = _firing_kafka_causes(port)
            assert not firing, f"Kafka causes firing on the idle {LAB} lab: {firing}"
        time.sleep(5)
    metrics = _metrics(port)
    missing = [name for name in JMX_SERIES if not metrics.get(name)]
    assert not missing, f"JMX series without a value: {missing}"
    text = log.read_text()
    assert "Traceback" not in text
    version = tuple(int(x) for x in _lab()["kafka_version"].split("."))
    # Before 2.6 ListGroups gives no group state (the lab has kdiag's coordination group): said once, not a silent gap.
    assert text.count("without their state") == (1 if version < (2, 6) else 0), text[-3000:]


def _lab() -> dict:
    return json.loads((LAB / "lab.json").read_text())


def test_discovery_reads_each_lab_broker_as_it_runs():
    """Zero configuration on the lab's broker hosts: broker.id (ZooKeeper) or node.id, listener, JMX, mode."""
    lab = _lab()
    found = {b.pid: b for b in find_brokers(Root())}
    for node, pid in lab["pids"].items():
        broker = found[int(pid)]
        assert broker.node_id == int(node) and not broker.problems, broker
        assert broker.zookeeper == (lab.get("mode") == "zookeeper")
        assert broker.node_id_source.startswith("broker.id in " if broker.zookeeper else "node.id in ")
        assert broker.listeners[0].address in lab["bootstrap"].split(",")
        assert f"service:jmx:rmi:///jndi/rmi://{broker.jmx}/jmxrmi" == lab["jmx"][node]
