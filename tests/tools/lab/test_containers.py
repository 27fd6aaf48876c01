"""Tests of `kdiag lab up --containers`: the container's properties, and a real one-broker container lab (kafka tier)."""

import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.promstack import free_port
from tests.waiting import wait_until

from kdiag.collectors.kafka.jmx import KafkaJmxCollector, samples_from_jmx_state
from kdiag.tools.lab import containers, lab
from kdiag.tools.lab.info import LabInfo
from kdiag.tools.lab.layout import ports

BASE = 33192  # ports and a subnet of its own, apart from every other lab of the test run


@pytest.mark.unit
def test_server_properties_put_every_listener_and_voter_on_the_nodes_own_addresses() -> None:
    props = containers.server_properties(2, 3, 31092, ports(2, 31092))
    assert "listeners=PLAINTEXT://10.77.109.3:31102,CONTROLLER://10.77.109.3:31103" in props
    assert ("controller.quorum.voters=1@10.77.109.2:31093,2@10.77.109.3:31103,3@10.77.109.4:31113"
            in props)
    assert f"log.dirs={containers.DATA}\n" in props


@pytest.mark.unit
def test_host_properties_point_storage_tool_at_the_host_dir(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "server.properties").write_text(containers.server_properties(1, 1, BASE, ports(1, BASE)))
    assert f"log.dirs={tmp_path / 'data'}\n" in containers.host_properties(tmp_path)


@pytest.mark.unit
def test_the_broker_command_names_container_paths_and_the_host_dir_the_lab_checks(tmp_path: Path) -> None:
    cmd = containers.java_command(tmp_path / "node-1", 31999, "-Xmx512m", ["-XX:+UseZGC"])
    assert cmd[-2:] == ["kafka.Kafka", "/etc/kafka/server.properties"]
    assert cmd[cmd.index("-cp") + 1] == "/opt/kafka/libs/*"
    assert f"-Dkdiag.lab.node={tmp_path / 'node-1'}" in cmd
    assert "-Dcom.sun.management.jmxremote.host=127.0.0.1" in cmd and "-XX:+UseZGC" in cmd


def _refusal() -> str:
    if os.geteuid() != 0:
        return "--containers needs root"
    missing = [t for t in (*containers.TOOLS, "nsenter", "java", "mvn") if not shutil.which(t)]
    return f"not installed: {', '.join(missing)}" if missing else ""


@pytest.fixture(scope="module")
def container_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabInfo]:
    if _refusal():
        pytest.skip(_refusal())
    d = tmp_path_factory.mktemp("lab-containers")
    info = lab.up(d, brokers=1, base_port=BASE, containers={"memory": 1024 * 2**20, "cpus": 0.5, "jmx_exporter": 1.0})
    try:
        yield info
    finally:
        lab.down(d, purge=True)


def _ns(pid: int | str, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


@pytest.mark.kafka
def test_the_broker_runs_as_uid_1001_in_namespaces_of_its_own(container_lab: LabInfo) -> None:
    pid = container_lab["pids"]["1"]
    assert pid
    status = Path(f"/proc/{pid}/status").read_text()
    assert "\nUid:\t1001\t1001\t1001\t1001\n" in status
    assert "\nCapEff:\t0000000000000000\n" in status
    for kind in ("user", "pid", "mnt", "uts", "net"):
        assert _ns(pid, kind) != _ns("self", kind), kind
    assert subprocess.run(["nsenter", "-t", str(pid), "-u", "hostname"], capture_output=True, text=True,
                          check=True).stdout.strip() == "kafka-1"


@pytest.mark.kafka
def test_its_log_dir_is_a_host_dir_bind_mounted_at_var_lib_kafka_data(container_lab: LabInfo) -> None:
    pid = container_lab["pids"]["1"]
    mounts = [line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]
    data = [m for m in mounts if m[4] == containers.DATA]
    assert data and data[0][3] == str(Path(container_lab["dir"]) / "node-1" / "data")
    assert (Path(container_lab["dir"]) / "node-1" / "data" / "meta.properties").stat().st_uid == containers.UID


@pytest.mark.kafka
def test_its_cgroup_has_the_limits_asked_for(container_lab: LabInfo) -> None:
    pid = container_lab["pids"]["1"]
    assert containers.memory_limit(BASE, 1) == 1024 * 2**20
    dirs = containers.cgroup_dirs(BASE, 1)
    for d in dirs.values():
        assert str(pid) in (d / "cgroup.procs").read_text().split()
    if "v2" in dirs:
        assert (dirs["v2"] / "cpu.max").read_text().split() == ["50000", "100000"]
    else:
        assert (dirs["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"


@pytest.mark.kafka
def test_jmx_answers_inside_its_network_namespace_only(container_lab: LabInfo) -> None:
    pid = container_lab["pids"]["1"]
    port = container_lab["nodes"]["1"]["jmx_port"]
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    inside = subprocess.run(["nsenter", "-t", str(pid), "-n", "python3", "-c",
                             f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"],
                            capture_output=True, text=True)
    assert inside.returncode == 0, inside.stderr


@pytest.mark.kafka
def test_down_removes_the_cgroups_and_the_bridge(tmp_path: Path) -> None:
    if _refusal():
        pytest.skip(_refusal())
    base = BASE + 100
    lab.up(tmp_path, brokers=1, base_port=base, containers={"memory": 1024 * 2**20, "cpus": 1.0})
    assert subprocess.run(["ip", "link", "show", containers.bridge(base)], capture_output=True).returncode == 0
    lab.down(tmp_path, purge=True)
    assert not any(d.exists() for d in containers.cgroup_dirs(base, 1).values())
    assert subprocess.run(["ip", "link", "show", containers.bridge(base)], capture_output=True).returncode != 0


@pytest.mark.kafka
def test_kdiag_reads_its_jmx_with_jmxtool_in_its_network_namespace(container_lab: LabInfo) -> None:
    endpoint = container_lab["jmx"]["1"]
    assert endpoint.endswith(f"@netns:{container_lab['pids']['1']}")
    collector = KafkaJmxCollector([endpoint], timeout=60, poll_interval=2,
                                  classpath=str(Path(container_lab["dir"]) / "libs" / "*"))
    try:
        state = collector.fetch()["endpoints"][endpoint]
    finally:
        collector.close()
    assert state.get("broker_id") == "1", state


@pytest.mark.kafka
def test_its_jmx_exporter_agent_gives_kdiag_the_mbeans_jmxtool_does(container_lab: LabInfo) -> None:
    endpoint, url = container_lab["jmx"]["1"], containers.exporter_url(container_lab, 1)
    collector = KafkaJmxCollector([endpoint, url], timeout=60, poll_interval=2,
                                  classpath=str(Path(container_lab["dir"]) / "libs" / "*"))
    try:
        state = collector.fetch()["endpoints"]
    finally:
        collector.close()
    assert state[url].get("broker_id") == state[endpoint].get("broker_id") == "1", state[url].get("error")
    by_jmxtool = {(s.name, s.labels) for s in samples_from_jmx_state({"endpoints": {"e": state[endpoint]}})}
    by_agent = {(s.name, s.labels) for s in samples_from_jmx_state({"endpoints": {"e": state[url]}})}
    assert by_agent == by_jmxtool and len(by_agent) > 50


@pytest.mark.kafka
def test_only_the_broker_carries_its_command_line_not_roots_unshare(container_lab: LabInfo) -> None:
    pid = container_lab["pids"]["1"]
    parent = re.search(r"\nPPid:\t(\d+)\n", Path(f"/proc/{pid}/status").read_text())
    assert parent and Path(f"/proc/{parent[1]}/comm").read_text().strip() == "unshare"
    assert b"kafka.Kafka" not in Path(f"/proc/{parent[1]}/cmdline").read_bytes()
    assert b"kafka.Kafka" in Path(f"/proc/{pid}/cmdline").read_bytes()
    command = Path(container_lab["dir"]) / "node-1" / "command"
    assert command.stat().st_uid == 0 and command.stat().st_mode & 0o077 == 0


@pytest.mark.kafka
def test_its_parent_is_pid_1_and_its_cgroup_a_containers_in_every_hierarchy(container_lab: LabInfo) -> None:
    pid = container_lab["pids"]["1"]
    unshare = re.search(r"\nPPid:\t(\d+)\n", Path(f"/proc/{pid}/status").read_text())
    assert unshare and re.search(r"\nPPid:\t1\n", Path(f"/proc/{unshare[1]}/status").read_text())
    wanted = f"/docker/{containers.container_id(BASE, 1)}"
    lines = [line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    named = {names: path for _, names, path in lines if path.endswith(wanted)}
    assert {"cpu", "memory"} <= {c for names in named for c in names.split(",")}, lines
    assert all(path.endswith(wanted) or path == "/" for _, names, path in lines if names in ("", "name=systemd"))


def _host_disk(path: Path) -> str:
    """The /sys/block disk holding path (a partition's disk)."""
    st = path.stat()
    dev = Path(os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"))
    return dev.parent.name if (dev / "partition").exists() else dev.name


@pytest.mark.kafka
def test_kdiag_run_given_only_the_bootstrap_finds_trusts_maps_and_reads_the_broker(container_lab: LabInfo,
                                                                                    tmp_path: Path) -> None:
    pid, data = container_lab["pids"]["1"], Path(container_lab["dir"]) / "node-1" / "data"
    config = tmp_path / "kdiag.yaml"  # other labs run on this machine: the bootstrap says which broker is ours
    config.write_text(yaml.safe_dump({"kafka": {"bootstrap_servers": container_lab["bootstrap"], "jmx_interval": "2s"},
                                      "probe": {"enabled": False}, "state_dir": ""}))
    port, log = free_port(), tmp_path / "kdiag.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--config", str(config), "--listen",
                                 f"127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT)

    def lines(prefix: str) -> list[str]:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        return [line for line in body.splitlines() if line.startswith(prefix)]

    try:
        wait_until(lambda: 'kdiag_collector_success{collector="kafka_jmx"} 1.0' in lines("kdiag_collector_success{"),
                   180, "kafka_jmx read from the discovered container broker", [log])
        started = [s for s in lines("kdiag_process_broker_started_by{") if f'pid="{pid}"' in s]
        refused = [s for s in lines("kdiag_process_broker_refused{") if f'pid="{pid}"' in s]
        log_dirs = [s for s in lines("kdiag_kafka_log_dir_info{") if f'path="{data}"' in s]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert len(started) == 1 and f'container="{containers.container_id(BASE, 1)}"' in started[0], started
    assert "PID 1 started it, in container" in started[0] and refused == []
    assert len(log_dirs) == 1 and f'device="{_host_disk(data)}"' in log_dirs[0], log_dirs
    text = log.read_text()
    agent = containers.exporter_port(container_lab["nodes"]["1"]["jmx_port"])  # its agent, before its JMX port
    assert f"broker discovery: kafka.jmx = http://127.0.0.1:{agent}/metrics@netns:{pid} (-javaagent of pid {pid})" in text
    assert f"broker discovery: processes.log_dirs = {data} (log.dirs in " in text
