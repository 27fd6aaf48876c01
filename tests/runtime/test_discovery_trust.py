"""A look-alike broker another user starts gets nothing run, learns no secret and forges no log line (issue 19).

The fake is real: a process of user nobody whose argv reads `java ... -cp DIR kafka.Kafka DIR/server.properties`, DIR
its own, holding an org.apache.kafka.tools.JmxTool that writes what it was given to a marker file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.waiting import wait_until

from kdiag.runtime.discovery import discover
from kdiag.collectors.kafka.jmx import KafkaJmxCollector
from kdiag.config.settings import load_config
from kdiag.app.wiring import kafka_collectors
from kdiag.core.root import Root, SnapshotRoot

NOBODY = 65534
SECRET = "jmx-s3cret"
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="starting another user's process needs root")]

FAKE_JMXTOOL = """\
package org.apache.kafka.tools;
public class JmxTool {
    public static void main(String[] args) throws Exception {
        java.nio.file.Files.writeString(java.nio.file.Path.of(MARKER), "user.name=" + System.getProperty("user.name")
            + " trustStorePassword=" + System.getProperty("javax.net.ssl.trustStorePassword") + " " + String.join(" ", args));
    }
}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def owned_by_nobody(path: Path) -> None:
    for p in (path, *path.rglob("*")):
        os.chown(p, NOBODY, NOBODY)


@pytest.fixture
def fake_broker(tmp_path: Path):
    """(its pid, its DIR, the marker its JmxTool writes, the port its server.properties claims)."""
    if shutil.which("javac") is None:
        pytest.skip("javac is needed to build the fake JmxTool")
    evil, marker, port = tmp_path / "evil", tmp_path / "marker", free_port()
    source = tmp_path / "src" / "JmxTool.java"
    source.parent.mkdir()
    source.write_text(FAKE_JMXTOOL.replace("MARKER", f'"{marker}"'))
    subprocess.run(["javac", "-d", str(evil), str(source)], check=True, timeout=120)
    (evil / "server.properties").write_text(f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\n")
    owned_by_nobody(evil)
    # `exec -a java`: a shell of nobody's whose argv is a broker's ("sleep; :" keeps the shell from exec'ing sleep).
    argv = ["java", "-c", "sleep 600; :", "-Dcom.sun.management.jmxremote.port=1",
            "-Dcom.sun.management.jmxremote.authenticate=false", "-Dcom.sun.management.jmxremote.ssl=false",
            "-cp", str(evil), "kafka.Kafka", f"{evil}/server.properties"]
    proc = subprocess.Popen(argv, executable="/bin/sh", user=NOBODY, group=NOBODY, extra_groups=[], cwd="/")
    try:
        wait_until(lambda: "kafka.Kafka" in Path(f"/proc/{proc.pid}/cmdline").read_text(), 30, "the fake broker's argv")
        yield proc.pid, evil, marker, port
    finally:
        proc.kill()
        proc.wait()


def test_another_users_look_alike_broker_gets_nothing_run_and_no_secret(fake_broker, tmp_path, caplog):
    pid, evil, marker, port = fake_broker
    password, truststore = tmp_path / "jmx.password", tmp_path / "truststore.p12"
    password.write_text(SECRET)
    truststore.write_text("not read: JmxTool never connects")
    # What operators write once JMX wants a password: the JMX address and credentials, the jars left to discovery.
    config = load_config(overrides={"kafka.bootstrap_servers": f"127.0.0.1:{port}", "kafka.jmx": ["127.0.0.1:1"],
                                    "kafka.timeout": "5s", "kafka.jmx_username": "monitor",
                                    "kafka.jmx_password_file": str(password), "kafka.jmx_ssl": True,
                                    "kafka.jmx_truststore": str(truststore),
                                    "kafka.jmx_truststore_password_file": str(password)})
    with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
        config = discover(config, Root())
    assert str(evil) not in config.kafka.jmx_classpath
    collector = kafka_collectors(config, {"jmx"})["jmx"]
    try:
        with contextlib.suppress(RuntimeError):  # no jars at all (no lab on this host) is a refusal too
            collector.fetch()
    finally:
        collector.close()
    assert not marker.exists(), f"kdiag ran the fake broker's JmxTool: {marker.read_text()}"
    refusals = [r.getMessage() for r in caplog.records if f"pid {pid} " in r.getMessage()]
    # Root started it, but no service manager nor container runtime: this test's cgroup is no service's either.
    assert refusals == [f"broker discovery: pid {pid} looks like a Kafka broker but is not used: it runs as uid {NOBODY} "
                        "(nobody), not as root" + refusals[0].partition("not as root")[2]]
    assert refusals[0].endswith(("is neither a system service's nor a container's (a process a local user started)",
                                 "is neither PID 1 nor a root-owned containerd-shim, conmon or runc"))
    assert str(evil) not in caplog.text  # nothing of it was read


def test_a_java_on_path_that_others_control_is_never_run(tmp_path, monkeypatch):
    evil, marker = tmp_path / "bin", tmp_path / "marker"
    evil.mkdir()
    (evil / "java").write_text(f"#!/bin/sh\nid > {marker}\n")
    (evil / "java").chmod(0o755)
    owned_by_nobody(evil)
    monkeypatch.setenv("PATH", f"{evil}:{os.environ['PATH']}")
    collector = KafkaJmxCollector(["127.0.0.1:1"], timeout=5.0, classpath="/usr/share/java/*")
    try:
        with pytest.raises(RuntimeError, match=f"{evil}/java is not run: {evil} belongs to uid {NOBODY} "):
            collector.fetch()
    finally:
        collector.close()
    assert not marker.exists(), f"kdiag ran {evil}/java: {marker.read_text()}"


def snapshot(tmp_path: Path, pid: int, argv: list[str], files: dict[str, str]) -> Root:
    """A one-snapshot recording holding one root-owned process (cmdline, status, cwd /) and its files."""
    d = tmp_path / "rec" / "0000" / "proc" / str(pid)
    d.mkdir(parents=True)
    (tmp_path / "rec" / "0000" / "meta.json").write_text('{"time": 1764430000.0}')
    (d / "cmdline").write_text("".join(a + "\0" for a in argv))
    (d / "status").write_text("Name:\tjava\nUid:\t0\t0\t0\t0\n")
    os.symlink("/", d / "cwd")
    for path, text in files.items():
        (d / "root" / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (d / "root" / path.lstrip("/")).write_text(text)
    return SnapshotRoot(tmp_path / "rec" / "0000")


def test_a_trusted_brokers_classpath_others_can_write_is_not_used(tmp_path, caplog):
    libs = tmp_path / "kafka" / "libs"
    libs.mkdir(parents=True)
    libs.chmod(0o777)
    root = snapshot(tmp_path, 2000, ["java", "-cp", f"{libs}/*", "kafka.Kafka", "/etc/kafka/server.properties"],
                    {"/etc/kafka/server.properties": "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:9092\n"})
    with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
        config = discover(load_config(), root)
    assert config.kafka.local_broker_id == 1 and config.kafka.jmx_classpath == ""
    assert (f"broker discovery: the -cp of pid 2000 is not used to run JmxTool: {libs} can be written by others "
            "(mode drwxrwxrwx); set kafka.jmx_classpath to Kafka's libs/*") in caplog.text


def test_a_newline_in_a_brokers_path_forges_no_log_line(tmp_path):
    properties = "/srv/x\nERROR kdiag.app.daemon: FORGED LOG LINE\n/server.properties"
    root = snapshot(tmp_path, 2000, ["java", "kafka.Kafka", properties], {properties: "node.id=1\n"})
    procfs = tmp_path / "rec" / "0000" / "proc"
    config, log, port = tmp_path / "kdiag.yaml", tmp_path / "kdiag.log", free_port()
    config.write_text(yaml.safe_dump({"probe": {"enabled": False}, "state_dir": ""}))
    assert root.listdir("proc", "") == ["2000"]
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--config", str(config), "--procfs", str(procfs),
                                 "--listen", f"127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "local broker is pid 2000" in log.read_text(), 60, "the discovery log line", [log])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    forged = [line for line in log.read_text().splitlines() if "FORGED" in line]
    assert forged and all(r"/srv/x\x0aERROR kdiag.app.daemon: FORGED LOG LINE\x0a/server.properties" in line
                          for line in forged), forged
