"""Zero configuration on a broker host: the local broker process found and read, on fixture roots and the lab's brokers."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
import yaml

from kdiag.runtime.discovery import choose, discover, find_brokers, parse_properties
from kdiag.runtime.brokerconfig import Agent, jmx_exporter_agent
from kdiag.collectors.kafka.jmx import NO_JARS, KafkaJmxCollector
from kdiag.config.settings import ConfigError, load_config
from kdiag.core.root import Root, SnapshotRoot
from tests.waiting import wait_until

JAVA_OPTS = ["-Xmx6G", "-XX:+UseG1GC", "-Dcom.sun.management.jmxremote", "-Dcom.sun.management.jmxremote.port=9999",
             "-Dcom.sun.management.jmxremote.authenticate=false", "-Dcom.sun.management.jmxremote.ssl=false",
             "-Dkafka.logs.dir=/opt/kafka/bin/../logs"]
# As kafka-server-start.sh leaves it when started as `bin/kafka-server-start.sh config/server.properties` in /opt/kafka.
CLASSPATH = "bin/../libs/kafka-clients-4.1.0.jar:bin/../libs/kafka-tools-4.1.0.jar:bin/../libs/kafka_2.13-4.1.0.jar"
SERVER_PROPERTIES = """\
# KRaft combined node
process.roles=broker,controller
node.id=3
controller.quorum.voters=3@kafka-3.example:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
advertised.listeners=PLAINTEXT://kafka-3.example:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=/data/1/kafka-logs,\\
    /data/2/kafka-logs
"""


def host(tmp_path: Path, processes: dict[int, list[str]], files: dict[str, str] | None = None, cwd: str = "/opt/kafka",
         uid: int = 0, users: dict[str, str] | None = None) -> Root:
    """A one-snapshot recording holding these processes' cmdline, owner (uid) and cwd, and files as /proc/PID/root
    sees them; with users, the recorded host's names of uids."""
    snap = tmp_path / "0000"
    (snap / "proc").mkdir(parents=True)
    (snap / "meta.json").write_text(json.dumps({"time": 1764430000.0}))
    if users is not None:
        (snap / "kafka.json").write_text(json.dumps({"version": 2, "sources": {"users": users}}))
    for pid, argv in processes.items():
        d = snap / "proc" / str(pid)
        d.mkdir()
        (d / "cmdline").write_text("".join(a + "\0" for a in argv))
        (d / "status").write_text(f"Name:\tjava\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n")
        os.symlink(cwd, d / "cwd")
        for path, text in (files or {}).items():
            target = d / "root" / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    return SnapshotRoot(snap)


def broker_argv(*extra: str) -> list[str]:
    return ["/usr/lib/jvm/java-17/bin/java", *JAVA_OPTS, "-cp", CLASSPATH, "kafka.Kafka", "config/server.properties", *extra]


def test_java_properties_syntax():
    text = "# c\n! c\n a = 1\nb:2\nc 3\nd=x\\\n   y\ne=C:\\\\dir\nf=\\u00e9\\tz\ng\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "xy", "e": "C:\\dir", "f": "é\tz", "g": ""}


def test_a_broker_host_fills_every_unset_item_and_says_where_from(tmp_path, caplog):
    root = host(tmp_path, {1: ["/sbin/init"], 2000: broker_argv("--override", "node.id=7")},
                {"/opt/kafka/config/server.properties": SERVER_PROPERTIES})
    with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
        config = discover(load_config(), root)
    assert config.kafka.local_broker_id == 7  # --override beats the file, as in Kafka
    assert config.kafka.bootstrap_servers == "kafka-3.example:9092"  # advertised; the controller listener is no bootstrap
    assert config.kafka.jmx == ["127.0.0.1:9999"]
    assert config.kafka.jmx_classpath.split(":") == [
        "/opt/kafka/libs/kafka-clients-4.1.0.jar", "/opt/kafka/libs/kafka-tools-4.1.0.jar", "/opt/kafka/libs/kafka_2.13-4.1.0.jar"]
    assert config.processes.log_dirs == ["/data/1/kafka-logs", "/data/2/kafka-logs"]
    lines = [r.getMessage() for r in caplog.records]
    assert "broker discovery: kafka.local_broker_id = 7 (node.id in /opt/kafka/config/server.properties)" in lines
    assert "broker discovery: kafka.jmx = 127.0.0.1:9999 (-Dcom.sun.management.jmxremote.port of pid 2000)" in lines
    assert any(line.startswith("broker discovery: kafka.jmx_classpath = 3 entries in /opt/kafka/libs") for line in lines)


# A Kafka 2.0 ZooKeeper-mode broker as seed 001 ran it: no listeners (host.name and port, removed in 3.0), and no
# broker.id, so the id was generated at its first start and kept in the log dir's meta.properties.
ZOOKEEPER_SERVER_PROPERTIES = """\
zookeeper.connect=zk-1.example:2181,zk-2.example:2181/kafka
port=9093
host.name=0.0.0.0
advertised.host.name=kafka-1.example
log.dirs=/data/kafka
"""


def test_a_zookeeper_broker_host_of_the_2x_era(tmp_path, caplog):
    root = host(tmp_path, {2000: broker_argv()}, {"/opt/kafka/config/server.properties": ZOOKEEPER_SERVER_PROPERTIES,
                                                  "/data/kafka/meta.properties": "version=0\nbroker.id=1001\n"})
    with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
        config = discover(load_config(), root)
    assert config.kafka.local_broker_id == 1001
    assert config.kafka.bootstrap_servers == "kafka-1.example:9093"  # advertised.host.name with port
    assert config.processes.log_dirs == ["/data/kafka"]
    lines = [r.getMessage() for r in caplog.records]
    assert "broker discovery: kafka.local_broker_id = 1001 (broker.id in /data/kafka/meta.properties (generated))" in lines
    assert any("ZooKeeper mode (zookeeper.connect)" in line for line in lines)
    (broker,) = find_brokers(root)
    assert broker.zookeeper and broker.ports == {9093} and not broker.problems


def test_config_and_flags_win_over_each_discovered_item(tmp_path, caplog):
    root = host(tmp_path, {2000: broker_argv()}, {"/opt/kafka/config/server.properties": SERVER_PROPERTIES})
    given = load_config(overrides={"kafka.bootstrap_servers": "kafka-1.example:9092", "kafka.jmx": ["10.0.0.3:7071"],
                                   "kafka.jmx_classpath": "/srv/kafka/libs/*", "kafka.local_broker_id": 3,
                                   "processes.log_dirs": ["/kafka"]})
    with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
        config = discover(given, root)
    assert config == given
    assert sum("kept from the config" in r.getMessage() for r in caplog.records) == 5


def test_a_load_host_without_a_broker_changes_nothing(tmp_path, caplog):
    root = host(tmp_path, {1: ["/sbin/init"], 300: ["java", "-cp", "x.jar", "org.apache.kafka.tools.ProducerPerformance"]})
    with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
        config = discover(load_config(), root)
    assert config == load_config()
    assert not config.kafka.bootstrap_servers and config.kafka.local_broker_id is None
    assert "no Kafka broker process on this host" in caplog.text


def test_a_secured_listener_is_never_a_plaintext_bootstrap(tmp_path, caplog):
    secured = SERVER_PROPERTIES.replace(
        "listeners=PLAINTEXT://:9092,", "listeners=SSL://:9093,SASL_SSL://:9094,").replace(
        "advertised.listeners=PLAINTEXT://kafka-3.example:9092", "advertised.listeners=SSL://kafka-3.example:9093,"
        "SASL_SSL://kafka-3.example:9094").replace("PLAINTEXT:PLAINTEXT", "SSL:SSL,SASL_SSL:SASL_SSL").replace(
        "CONTROLLER://:9093", "CONTROLLER://:9095")
    # Only the port given: the JVM then wants a password and TLS on JMX.
    argv = [a for a in broker_argv() if "authenticate" not in a and "jmxremote.ssl" not in a]
    root = host(tmp_path, {2000: argv}, {"/opt/kafka/config/server.properties": secured})
    with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
        config = discover(load_config(), root)
    assert config.kafka.bootstrap_servers == "" and config.kafka.jmx == []
    assert config.kafka.local_broker_id == 3
    assert "no listener speaks PLAINTEXT, the protocol of kafka.client (listeners: SSL (SSL), SASL_SSL (SASL_SSL))" in caplog.text
    assert "JMX 127.0.0.1:9999 wants a password: not used" in caplog.text
    assert discover(load_config(overrides={"kafka.client": {"security.protocol": "ssl"}}), root).kafka.bootstrap_servers == \
        "kafka-3.example:9093"
    # Credentials go only to an address the config names: any local user can start a look-alike "broker".
    client = {"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p"}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
        assert discover(load_config(overrides={"kafka.client": client}), root).kafka.bootstrap_servers == ""
    assert "kafka.client holds credentials: set kafka.bootstrap_servers (the broker's: kafka-3.example:9094)" in caplog.text


def test_a_fifo_named_as_server_properties_never_blocks(tmp_path, caplog):
    proc = tmp_path / "proc" / "2000"
    (proc / "root" / "opt" / "kafka" / "config").mkdir(parents=True)
    os.mkfifo(proc / "root" / "opt" / "kafka" / "config" / "server.properties")
    (proc / "cmdline").write_text("\0".join(broker_argv()) + "\0")
    os.symlink("/opt/kafka", proc / "cwd")
    done = []
    worker = threading.Thread(target=lambda: done.append(find_brokers(Root(tmp_path / "proc", tmp_path))), daemon=True)
    worker.start()
    worker.join(30)
    assert done, "reading a FIFO blocked"
    assert any("not a regular file" in p for p in done[0][0].problems)


@pytest.mark.parametrize(("argv", "files", "problem"), [
    (["java", "kafka.Kafka"], {}, "no server.properties argument after kafka.Kafka"),
    (broker_argv(), {}, "cannot read its server.properties"),
    (broker_argv(), {"/opt/kafka/config/server.properties": "node.id=abc\nlisteners=PLAINTEXT://[bad\n"},
     "node.id is not a node id"),
    (broker_argv(), {"/opt/kafka/config/server.properties": "node.id=1\nlisteners=PLAINTEXT://[bad\n"},
     "listeners: entry 1 is not NAME://host:port"),
    (broker_argv(), {"/opt/kafka/config/server.properties": "#" * (2 << 20)}, "larger than 1048576 bytes"),
])
def test_broken_broker_files_are_one_problem_each_never_a_crash(tmp_path, argv, files, problem):
    (broker,) = find_brokers(host(tmp_path, {2000: argv}, files))
    assert any(problem in p for p in broker.problems), broker.problems


def test_only_root_and_the_broker_users_processes_are_read(tmp_path, caplog):
    # The recorded host names uid 65534 `daemon` (not this host's `nobody`): its names decide, not this host's.
    root = host(tmp_path, {2000: broker_argv()}, {"/opt/kafka/config/server.properties": SERVER_PROPERTIES}, uid=65534,
                users={"65534": "daemon"})
    with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
        assert discover(load_config(overrides={"kafka.broker_user": "daemon"}), root).kafka.local_broker_id == 3
        caplog.clear()
        assert discover(load_config(overrides={"kafka.broker_user": "nobody"}), root) == load_config(
            overrides={"kafka.broker_user": "nobody"})
    assert caplog.messages[0] == ("broker discovery: pid 2000 looks like a Kafka broker but is not used: it runs as uid "
                                  "65534 (daemon), not as root (kafka.broker_user nobody: no such user on the host), "
                                  "and its cgroup cannot be read (No such file or directory)")


@pytest.mark.parametrize("user", ["", "ka fka", "-kafka", "../kafka", "k" * 33, "12345678901"])
def test_a_broker_user_that_is_no_user_name_is_refused_by_name(user):
    with pytest.raises(ConfigError, match=r"kafka\.broker_user: .* is not a user name or uid"):
        load_config(overrides={"kafka.broker_user": user})


def two_brokers(tmp_path: Path, clusters: tuple[str, str]) -> Root:
    """Two brokers on one host, each with its own log dir whose meta.properties names its cluster."""
    other = (SERVER_PROPERTIES.replace("node.id=3", "node.id=4").replace(":9092", ":9192").replace(":9093", ":9193")
             .replace("/data/1/kafka-logs", "/data/3/kafka-logs"))
    return host(tmp_path, {2000: broker_argv(), 2001: [*broker_argv()[:-1], "config/other.properties"]},
                {"/opt/kafka/config/server.properties": SERVER_PROPERTIES, "/opt/kafka/config/other.properties": other,
                 "/data/1/kafka-logs/meta.properties": f"cluster.id={clusters[0]}\nnode.id=3\n",
                 "/data/3/kafka-logs/meta.properties": f"cluster.id={clusters[1]}\nnode.id=4\n"})


def test_several_brokers_of_one_cluster_are_all_read_and_none_is_the_local_one(tmp_path, caplog):
    root = two_brokers(tmp_path, ("lab-AAAAAAAAAAAAAAAAAAAA", "lab-AAAAAAAAAAAAAAAAAAAA"))
    assert [b.pid for b in choose(find_brokers(root), "", None)[0]] == [2000, 2001]
    with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
        config = discover(load_config(), root)
    assert config.kafka.bootstrap_servers == "kafka-3.example:9092,kafka-3.example:9192"
    assert config.kafka.local_broker_id is None
    assert config.processes.log_dirs == ["/data/1/kafka-logs", "/data/2/kafka-logs", "/data/3/kafka-logs"]
    assert "broker discovery: a local broker is pid 2001 (/opt/kafka/config/other.properties)" in caplog.messages


def test_brokers_of_different_clusters_need_the_config_to_say_which_are_this_hosts(tmp_path):
    brokers = find_brokers(two_brokers(tmp_path, ("lab-AAAAAAAAAAAAAAAAAAAA", "other-BBBBBBBBBBBBBBBBBBBB")))
    assert choose(brokers, "", None)[0] == []
    assert "2 broker processes of different clusters on this host" in choose(brokers, "", None)[1]
    assert "cluster other-BBBBBBBBBBBBBBBBBBBB" in choose(brokers, "", None)[1]
    assert [b.pid for b in choose(brokers, "", 4)[0]] == [2001]
    assert [b.pid for b in choose(brokers, "kafka-1.example:9192,kafka-2.example:9192", None)[0]] == [2001]
    assert choose(brokers, "kafka-1.example:7777", None)[0] == []


def test_no_jars_anywhere_is_one_clear_reason(monkeypatch):
    monkeypatch.setattr("kdiag.collectors.kafka.jmx.default_classpath", lambda: "")
    with pytest.raises(RuntimeError) as raised:
        KafkaJmxCollector(["127.0.0.1:1"]).fetch()
    assert str(raised.value) == NO_JARS and "set kafka.jmx_classpath" in NO_JARS


# --- the lab's brokers: real processes ------------------------------------------------------------------------------


@pytest.mark.kafka
def test_the_lab_brokers_are_found_as_they_run(kafka_lab):
    found = {b.pid: b for b in find_brokers(Root())}
    for node, pid in kafka_lab["pids"].items():
        broker = found[int(pid)]
        assert broker.node_id == int(node)
        assert broker.listeners[0].address in kafka_lab["bootstrap"].split(",")
        assert f"service:jmx:rmi:///jndi/rmi://{broker.jmx}/jmxrmi" == kafka_lab["jmx"][node]
        assert broker.classpath.endswith("/libs/*") and not broker.problems


@pytest.mark.kafka
def test_the_secured_lab_broker_is_read_as_secured(secure_lab):
    (broker,) = [b for b in find_brokers(Root()) if b.pid == int(next(iter(secure_lab["pids"].values())))]
    assert [li.protocol for li in broker.listeners] == ["SASL_SSL"]
    assert broker.jmx_auth  # from its -Dcom.sun.management.config.file
    config = discover(load_config(overrides={"kafka.local_broker_id": 1, "kafka.bootstrap_servers": secure_lab["bootstrap"]}),
                      Root())
    assert config.kafka.jmx == []  # it wants a password kdiag was not given


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.kafka
def test_kdiag_run_reads_jmx_from_the_broker_it_found(kafka_lab, tmp_path):
    node = sorted(kafka_lab["jmx"], key=int)[1]
    address = kafka_lab["bootstrap"].split(",")[int(node) - 1]
    config = tmp_path / "kdiag.yaml"
    config.write_text(yaml.safe_dump({"kafka": {"bootstrap_servers": address, "jmx_interval": "2s"},
                                      "probe": {"enabled": False}, "state_dir": ""}))
    port, log = free_port(), tmp_path / "kdiag.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        endpoint = kafka_lab["jmx"][node]

        def jmx_up() -> bool:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            return any(line.startswith("kdiag_kafka_jmx_up{") and f'endpoint="{endpoint}"' in line and line.endswith(" 1.0")
                       for line in body.splitlines())

        wait_until(jmx_up, 120, f"kdiag_kafka_jmx_up 1 for the discovered {endpoint}", [log])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    assert f"broker discovery: kafka.local_broker_id = {node}" in text
    assert f"broker discovery: kafka.jmx = {endpoint.split('//')[-1].removesuffix('/jmxrmi')}" in text


@pytest.mark.kafka
def test_zero_config_on_a_host_whose_only_broker_is_a_lab_node(kafka_lab, tmp_path):
    # This machine runs several labs' brokers; a copy of one real broker's /proc entry is a host with just that one.
    pid = int(kafka_lab["pids"]["3"])
    argv = Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:-1]
    properties = argv[-1]
    root = host(tmp_path, {pid: argv}, {properties: Path(properties).read_text()}, cwd=os.readlink(f"/proc/{pid}/cwd"))
    config = discover(load_config(), root)
    assert config.kafka.local_broker_id == 3
    assert config.kafka.bootstrap_servers == kafka_lab["bootstrap"].split(",")[2]
    assert [f"service:jmx:rmi:///jndi/rmi://{e}/jmxrmi" for e in config.kafka.jmx] == [kafka_lab["jmx"]["3"]]
    assert config.kafka.jmx_classpath == f"{kafka_lab['dir']}/libs/*"
    assert config.processes.log_dirs == [f"{kafka_lab['dir']}/node-3/data"]


def test_secrets_of_the_broker_never_reach_the_log(tmp_path, caplog):
    secret = "hunter2-s3cret"
    properties = (SERVER_PROPERTIES + "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common."
                  f'security.scram.ScramLoginModule required username="broker" password="{secret}";\n'
                  f"ssl.keystore.password={secret}\nlisteners=SASL_SSL://:9094,BROKEN{secret}\nnode.id={secret}\n")
    argv = [*broker_argv()[:1], f"-Djavax.net.ssl.keyStorePassword={secret}", *broker_argv()[1:]]
    root = host(tmp_path, {2000: argv}, {"/opt/kafka/config/server.properties": properties})
    with caplog.at_level(logging.DEBUG, logger="kdiag.runtime.discovery"):
        discover(load_config(), root)
    assert caplog.records and secret not in caplog.text


def test_a_procfs_that_cannot_be_listed_leaves_the_config_alone(tmp_path, caplog):
    config = load_config()
    assert discover(config, Root(tmp_path / "nonexistent", tmp_path)) is config
    assert "broker discovery: cannot list the processes (No such file or directory)" in caplog.text


AGENT = "-javaagent:/opt/jmx/jmx_prometheus_javaagent-1.0.1.jar=9404:/opt/jmx/config.yaml"


@pytest.mark.parametrize(("config", "url"), [
    ("rules:\n  - pattern: \".*\"\n", "http://127.0.0.1:9404/metrics"),
    ("", "http://127.0.0.1:9404/metrics"),
    ("lowercaseOutputName: true\n", ""),
    ("rules:\n  - pattern: 'kafka.server<type=(.+)><>Value'\n    name: kafka_server_$1\n", ""),
    ("httpServer:\n  authentication:\n    basic:\n      username: u\n", ""),
    ("password: s3cret\nrules: [\n", ""),
])
def test_a_jmx_exporter_agent_is_the_jmx_endpoint_when_it_serves_the_default_names(tmp_path, caplog, config, url):
    argv = [*broker_argv()[:1], AGENT, *broker_argv()[1:]]
    root = host(tmp_path, {2000: argv}, {"/opt/kafka/config/server.properties": SERVER_PROPERTIES,
                                         "/opt/jmx/config.yaml": config})
    with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
        found = discover(load_config(), root)
    assert found.kafka.jmx == ([url] if url else ["127.0.0.1:9999"])
    if url:
        assert f"broker discovery: kafka.jmx = {url} (-javaagent of pid 2000)" in caplog.messages
    else:
        assert any("its jmx_exporter agent (port 9404) is not read" in m for m in caplog.messages)
        assert not any("s3cret" in m for m in caplog.messages)


@pytest.mark.parametrize(("arg", "agent"), [
    ("-javaagent:/a/jmx_prometheus_javaagent.jar=7071:c.yaml", Agent("127.0.0.1", 7071, "c.yaml")),
    ("-javaagent:/a/jmx_prometheus_javaagent-0.20.0.jar=0.0.0.0:7071:/etc/c.yaml", Agent("127.0.0.1", 7071, "/etc/c.yaml")),
    ("-javaagent:/a/jmx_prometheus_javaagent.jar=10.0.0.5:7071:c.yaml", Agent("10.0.0.5", 7071, "c.yaml")),
    ("-javaagent:/a/jmx_prometheus_javaagent.jar=[::1]:7071:c.yaml", Agent("[::1]", 7071, "c.yaml")),
    ("-javaagent:/a/other-agent.jar=7071:c.yaml", None),
    ("-javaagent:/a/jmx_prometheus_javaagent.jar=99999:c.yaml", None),
])
def test_the_agents_argument_gives_where_it_serves(arg, agent):
    assert jmx_exporter_agent(["java", arg, "kafka.Kafka", "s.properties"]) == agent
