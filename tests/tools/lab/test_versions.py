"""Version facts of the lab and the JMX reader: modes, Scala builds, JmxTool's class and the old tool's exact names."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdiag.kafka import jvm_gc
from kdiag.tools.lab import nodes as lab_nodes
from kdiag.tools.lab import versions as lab_versions
from kdiag.kafka import jmx_legacy
from kdiag.collectors.kafka.jmx import QUERIES
from kdiag.tools.lab.jars import LabError
from kdiag.tools.lab.layout import server_properties


@pytest.mark.parametrize(("version", "mode"), [("2.8.2", "zookeeper"), ("3.2.3", "zookeeper"), ("3.3.2", "kraft"), ("4.4.0", "kraft")])
def test_default_mode(version, mode):
    assert lab_versions.default_mode(version) == mode


@pytest.mark.parametrize(("version", "mode", "why"), [
    ("4.0.0", "zookeeper", "no ZooKeeper mode"), ("2.7.2", "kraft", "no KRaft mode"), ("1.1.1", "zookeeper", "2.0 and later"),
    ("3.7", "kraft", "release number")])
def test_impossible_modes_say_why(version, mode, why):
    with pytest.raises(LabError, match=why):
        lab_versions.check_mode(version, mode)


def test_scala_build_follows_the_version():
    assert lab_versions.scala_artifact("2.3.1") == "kafka_2.12" and lab_versions.scala_artifact("2.4.0") == "kafka_2.13"


def test_old_jmxtool_gets_no_pattern():
    names = jmx_legacy.exact_queries(QUERIES)
    assert not [n for n in names if "*" in n]
    assert "java.lang:type=GarbageCollector,name=ZGC Major Pauses" in names
    assert "kafka.server:type=app-info,id=1001" in names
    assert "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,version=9" in names


def test_gc_pressure_counts_pauses_not_concurrent_cycles():
    assert jvm_gc.pauses("PS MarkSweep") and jvm_gc.pauses("ZGC Minor Pauses") and jvm_gc.pauses("ConcurrentMarkSweep")
    assert not jvm_gc.pauses("ZGC Cycles") and not jvm_gc.pauses("ZGC Major Cycles") and not jvm_gc.pauses("G1 Concurrent GC")


def test_zookeeper_server_properties(tmp_path: Path):
    text = server_properties(2, 3, 29092, tmp_path / "node-2", "none", "zookeeper")
    assert "broker.id=2\n" in text and "zookeeper.connect=127.0.0.1:29094\n" in text
    assert "node.id" not in text and "CONTROLLER" not in text and "process.roles" not in text


def test_jvm_opts_are_options(monkeypatch):
    monkeypatch.setenv("KDIAG_LAB_JVM_OPTS", "-XX:+UseZGC -XX:+ZGenerational")
    assert lab_nodes.jvm_opts(None) == ["-XX:+UseZGC", "-XX:+ZGenerational"]
    assert lab_nodes.jvm_opts("-XX:+UseParallelGC") == ["-XX:+UseParallelGC"]
    with pytest.raises(LabError, match="not a JVM option"):
        lab_nodes.jvm_opts("-Xmx1g; rm")


def test_a_zookeeper_client_that_cannot_connect_on_new_java_is_one_line(monkeypatch):
    """Kafka 2.0-2.5.0 on Java 14+: the cause is early in server.log, the error's tail shows only the shutdown."""
    monkeypatch.setattr(lab_versions, "java_major", lambda: 17)
    tail = LabError("node 1 exited during startup; last lines of node-1/server.log:\nERROR Exiting Kafka.")
    log = ("WARN Session 0x0 for server 127.0.0.1/<unresolved>:9602, unexpected error\n"
           "java.nio.channels.UnresolvedAddressException\n\tat java.base/sun.nio.ch.Net.checkAddress(Net.java:149)\n")
    error = lab_versions.explain_start_failure("2.0.1", tail, log)
    first, _, rest = str(error).partition("\n")
    assert first.startswith("Kafka 2.0.1 does not start on Java 17: its ZooKeeper client") and "ZOOKEEPER-3779" in first
    assert rest == str(tail) and error.exit_code == 2
    assert lab_versions.explain_start_failure("2.0.1", tail) is tail  # no signature anywhere: the error as it was
