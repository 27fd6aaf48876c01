"""Issue 32's acceptance: `kdiag run` on the host with no config at all, on a 3-broker `--containers` lab whose node 1
runs the jmx_exporter agent and nodes 2 and 3 do not, finds every broker, trusts each (a container's), maps each log
dir to its host disk, reads JMX both ways (the agent over HTTP and JmxTool, each in the broker's network namespace)
with every Kafka collector at 1, and still refuses a look-alike a local user started in namespaces of its own; and
the drills' kdiag, given no config either (`kdiag drill run --discover`), names forced-fsync, broker-throttled and the
container-memory fault.

This machine runs other Kafka labs (other clusters): with no config kdiag rightly reads none of several clusters'
brokers, so when there are any the test's kdiag gets a /proc without them (`--procfs`: every entry of /proc linked but
those brokers'), as the DaemonSet's kdiag gets the host's /proc at /host/proc."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.promstack import free_port
from tests.waiting import wait_until

from kdiag.tools.lab import containers, lab
from kdiag.tools.lab.info import LabInfo

BASE = 15092  # ports and a subnet apart from every other lab of the run
USER_UID = 1000  # an ordinary local user
LOOK_ALIKE_CONFIG = f"/etc/kafka/look-alike-{secrets.token_hex(4)}.properties"


@pytest.fixture(scope="module")
def container_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabInfo]:
    if os.geteuid() != 0:
        pytest.skip("--containers needs root")
    missing = [t for t in (*containers.TOOLS, "nsenter", "java", "mvn") if not shutil.which(t)]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    d = tmp_path_factory.mktemp("lab-containers-zero-config")
    with lab.locked(d):
        info = lab.up(d, brokers=3, base_port=BASE, containers={"memory": containers.MEMORY, "cpus": containers.CPUS,
                                                                 "jmx_exporter": 1.0, "jmx_exporter_nodes": 1})
    try:
        yield info
    finally:
        lab.down(d, purge=True)


@pytest.fixture
def look_alike() -> Iterator[int]:
    """A kafka.Kafka look-alike uid 1000 started in user, PID and mount namespaces of its own making."""
    script = f"exec -a java /bin/sh -c 'sleep 600; :' kafka.Kafka {LOOK_ALIKE_CONFIG}"
    starter = subprocess.Popen(["setpriv", f"--reuid={USER_UID}", f"--regid={USER_UID}", "--clear-groups", "--",
                                "unshare", "--user", "--map-root-user", "--pid", "--mount", "--fork", "--",
                                "/bin/bash", "-c", script], start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        yield int(wait_until(lambda: next(iter(pids_of(LOOK_ALIKE_CONFIG)), None), 30, "the look-alike"))
    finally:
        os.killpg(starter.pid, 9)
        starter.wait()


def pids_of(marker: str) -> list[int]:
    """The pids whose command line holds marker."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0"):
                found.append(int(entry))
        except OSError:
            continue
    return found


def procfs_without(tmp_path: Path, hidden: set[int]) -> list[str]:
    """`--procfs VIEW` for a /proc without the hidden pids (every other entry a link into /proc), or [] for none."""
    if not hidden:
        return []
    view = tmp_path / "proc"
    view.mkdir()
    for entry in os.listdir("/proc"):
        if not (entry.isdigit() and int(entry) in hidden):
            (view / entry).symlink_to(f"/proc/{entry}")
    return ["--procfs", str(view)]


def host_disk(path: Path) -> str:
    """The /sys/block disk holding path (a partition's disk)."""
    st = path.stat()
    dev = Path(os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"))
    return dev.parent.name if (dev / "partition").exists() else dev.name


@pytest.mark.kafka
def test_kdiag_run_with_no_config_finds_trusts_maps_and_reads_every_container_broker(
        container_lab: LabInfo, look_alike: int, tmp_path: Path) -> None:
    pids = {n: container_lab["pids"][str(n)] for n in (1, 2, 3)}
    foreign = set(pids_of("kafka.Kafka")) - set(pids.values()) - {look_alike}
    port, log = free_port(), tmp_path / "kdiag.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--listen", f"127.0.0.1:{port}",
                                 *procfs_without(tmp_path, foreign)], stdout=out, stderr=subprocess.STDOUT,
                                cwd=tmp_path, env={k: v for k, v in os.environ.items() if not k.startswith("KDIAG_")})

    def lines(prefix: str) -> list[str]:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        return [line for line in body.splitlines() if line.startswith(prefix)]

    def kafka_collectors_all_up() -> list[str]:
        kafka = [s for s in lines("kdiag_collector_success{") if 'collector="kafka' in s]
        jmx_up = [s for s in lines("kdiag_kafka_jmx_up{") if s.endswith(" 1.0")]
        return kafka if len(jmx_up) == 3 and kafka and all(s.endswith(" 1.0") for s in kafka) else []

    try:
        collectors = wait_until(kafka_collectors_all_up, 200, "every Kafka collector at 1 and JMX up on 3 brokers",
                                [log])
        started = lines("kdiag_process_broker_started_by{")
        refused = lines("kdiag_process_broker_refused{")
        log_dirs = lines("kdiag_kafka_log_dir_info{")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print("\n".join(collectors))  # which Kafka collectors ran, for the log
    text = log.read_text()
    assert {'collector="kafka_admin"', 'collector="kafka_jmx"'} <= {re.search(r'collector="[^"]+"', s)[0]
                                                                    for s in collectors}
    for n, pid in pids.items():
        mine = [s for s in started if f'pid="{pid}"' in s]
        assert len(mine) == 1 and f'container="{containers.container_id(BASE, n)}"' in mine[0], started
        data = Path(container_lab["dir"]) / f"node-{n}" / "data"
        placed = [s for s in log_dirs if f'path="{data}"' in s]
        assert len(placed) == 1 and f'device="{host_disk(data)}"' in placed[0], log_dirs
        assert f"broker discovery: a local broker is pid {pid} (/etc/kafka/server.properties)" in text
    agent = f"http://127.0.0.1:{containers.exporter_port(container_lab['nodes']['1']['jmx_port'])}/metrics@netns:{pids[1]}"
    jmxtool = [f"127.0.0.1:{container_lab['nodes'][str(n)]['jmx_port']}@netns:{pids[n]}" for n in (2, 3)]
    assert f"broker discovery: kafka.jmx = {','.join([agent, *jmxtool])} (" in text
    assert f"broker discovery: kafka.bootstrap_servers = {container_lab['bootstrap']} (" in text
    assert any(f'pid="{look_alike}"' in s and f"it runs as uid {USER_UID}" in s for s in refused), refused
    assert f"broker discovery: pid {look_alike} looks like a Kafka broker but is not used" in text


@pytest.mark.drills
def test_the_container_drills_are_named_by_a_kdiag_with_no_config(container_lab: LabInfo, tmp_path: Path) -> None:
    foreign = set(pids_of("kafka.Kafka")) - {int(p) for p in container_lab["pids"].values()}
    drills = ["forced-fsync", "broker-throttled", "container-memory"]
    run = subprocess.run([sys.executable, "-m", "kdiag", "drill", "run", *drills, "--serial", "--json", "--discover",
                          *procfs_without(tmp_path, foreign)], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "KDIAG_LAB_DIR": container_lab["dir"]})
    results = json.loads(run.stdout or "[]")
    print(json.dumps(results, indent=1))  # the timings, for the log
    assert [r["name"] for r in results] == drills, run.stderr[-3000:]
    for r in results:
        assert r["passed"] and r["detected"] and r["reverted"] and r["false_attributions"] == [], r
    assert run.returncode == 0, run.stderr[-3000:]
    for n in range(1, 4):
        assert containers.memory_limit(BASE, n) == containers.MEMORY  # container-memory put the limit back
