"""`kdiag lab`: a local Apache Kafka 4.x KRaft cluster run from Maven Central jars (CLI: lab_cli.py).

Layout of DIR (default $KDIAG_LAB_DIR or ~/.cache/kdiag/lab): libs/ (jars, lab_jars.py), pom.xml, lab.json,
kdiag.yaml (a kdiag config for the lab), secrets/ (secured modes, lab_security.py) and node-N/
(server.properties, pid, server.log, stdout.log, data/).

Ports: node N (1-based) owns the block B = base + 10*(N-1), base defaulting to 9092:
client B, controller B+1, JMX B+907, all on 127.0.0.1 only. So one broker is
9092 / 9093 / JMX 9999 and three brokers are 9092,9102,9112 / 9093,9103,9113 / JMX 9999,10009,10019.
Every node is process.roles=broker,controller with a static controller.quorum.voters.

DIR/lab.json: {"brokers", "bootstrap", "jmx": {"N": url}, "pids": {"N": pid}, "kafka_version", "base_port",
"cluster_id", "dir", "nodes": {"N": {"client", "controller", "jmx_port"}}, "security"}.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kdiag import lab_security
from kdiag.lab_jars import LABFILES, LabError, check_java, fetch_jars
from kdiag.collectors.processes import parse_stat

KAFKA_VERSION = "4.4.0"
DEFAULT_BASE_PORT = 9092
HEAP = "-Xmx512m"
def lab_dir(dir: str | os.PathLike | None = None) -> Path:
    """Return the lab directory: the argument, $KDIAG_LAB_DIR or ~/.cache/kdiag/lab."""
    if dir:
        return Path(dir).expanduser().resolve()
    env = os.environ.get("KDIAG_LAB_DIR")
    return Path(env).expanduser().resolve() if env else Path.home() / ".cache" / "kdiag" / "lab"


def classpath(dir: str | os.PathLike | None = None) -> str:
    """Return the Java classpath (DIR/libs/*) for running Kafka classes."""
    return str(lab_dir(dir) / "libs" / "*")


def ports(node: int, base: int = DEFAULT_BASE_PORT) -> dict:
    """Return the client, controller and JMX ports of a node."""
    block = base + 10 * (node - 1)
    return {"client": block, "controller": block + 1, "jmx_port": block + 907}


def jmx_url(port: int) -> str:
    """Return the JMX service URL for a loopback port."""
    return f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"


def _load(d: Path) -> dict | None:
    try:
        return json.loads((d / "lab.json").read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int | None, node_dir: Path) -> bool:
    """Whether pid is a live (non-zombie) Kafka process started for node_dir."""
    if not pid:
        return False
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own exited child
    try:
        stat = parse_stat(Path(f"/proc/{pid}/stat").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    # Checking the command line guards against a recycled pid.
    return stat.state not in ("Z", "X") and "kafka.Kafka" in cmdline and str(node_dir) in cmdline


def _pids(d: Path, info: dict) -> dict[int, int | None]:
    """Return node id -> live pid (None if stopped) for the nodes in info."""
    result = {}
    for n in range(1, info["brokers"] + 1):
        node_dir = d / f"node-{n}"
        try:
            pid = int((node_dir / "pid").read_text().strip())
        except (OSError, ValueError):
            pid = None
        result[n] = pid if _alive(pid, node_dir) else None
    return result


def read_lab(dir: str | os.PathLike | None = None) -> dict | None:
    """Return lab.json of the lab in DIR if at least one of its nodes is running, else None."""
    d = lab_dir(dir)
    info = _load(d)
    if not info:
        return None
    live = _pids(d, info)
    if not any(live.values()):
        return None
    info["pids"] = {str(n): pid for n, pid in live.items() if pid}
    return info


def lab_config(dir: str | os.PathLike | None = None) -> Path:
    """Return DIR/kdiag.yaml, writing it first for a lab started before `lab up` wrote one."""
    d = lab_dir(dir)
    info = _load(d)
    if info is None:
        raise LabError(f"no lab in {d}: run `kdiag lab up`")
    if not (d / "kdiag.yaml").exists():
        lab_security.write_kdiag_yaml(d, info)
    return d / "kdiag.yaml"


def _cluster_id() -> str:
    """Return a random Kafka cluster id (base64url of 16 bytes, as StorageTool random-uuid does)."""
    while True:
        cid = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not cid.startswith("-"):  # Kafka refuses ids that look like options
            return cid


def _server_properties(n: int, brokers: int, base: int, node_dir: Path, security: str) -> str:
    p = ports(n, base)
    voters = ",".join(f"{i}@127.0.0.1:{ports(i, base)['controller']}" for i in range(1, brokers + 1))
    lines = [
        "process.roles=broker,controller",
        f"node.id={n}",
        f"controller.quorum.voters={voters}",
        *lab_security.listener_lines(node_dir.parent, security, p["client"], p["controller"]),
        f"log.dirs={node_dir / 'data'}",
        "group.initial.rebalance.delay.ms=0",
    ]
    rf, isr = (1, 1) if brokers == 1 else (3, 2)
    lines += [
        f"offsets.topic.replication.factor={rf}",
        f"transaction.state.log.replication.factor={rf}",
        f"transaction.state.log.min.isr={isr}",
        f"share.coordinator.state.topic.replication.factor={rf}",
        f"share.coordinator.state.topic.min.isr={isr}",
    ]
    return "\n".join(lines) + "\n"


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _format(d: Path, nodes: list[int], cluster_id: str, security: str) -> None:
    """Format the storage of the given nodes in parallel (static voters: no --standalone needed)."""
    procs = {
        n: subprocess.Popen(
            lab_security.format_command(d, security, n, [
                "java", HEAP, "-Dlog4j2.configurationFile=" + str(LABFILES / "log4j2.properties"),
                f"-Dkafka.logs.dir={d / f'node-{n}'}", "-cp", classpath(d), "kafka.tools.StorageTool",
                "format", "-t", cluster_id, "-c", str(d / f"node-{n}" / "server.properties")]),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for n in nodes
    }
    for n, proc in procs.items():
        out = proc.communicate()[0]
        if proc.returncode != 0:
            raise LabError(f"formatting node {n} failed:\n{lab_security.redact(d, out)}")


def _start(d: Path, n: int, jmx_port: int, security: str) -> int:
    node_dir = d / f"node-{n}"
    cmd = [
        "java", HEAP, "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
        "-Dlog4j2.configurationFile=" + str(LABFILES / "log4j2.properties"),
        f"-Dkafka.logs.dir={node_dir}",
        "-Dcom.sun.management.jmxremote=true",
        f"-Dcom.sun.management.jmxremote.port={jmx_port}",
        f"-Dcom.sun.management.jmxremote.rmi.port={jmx_port}",
        # Binds the JMX port to loopback; the JDK's local attach connector still listens on a random
        # port on all interfaces but refuses non-local clients.
        "-Dcom.sun.management.jmxremote.host=127.0.0.1",
        "-Djava.rmi.server.hostname=127.0.0.1",
        *lab_security.jmx_flags(d, security),
        "-cp", classpath(d), "kafka.Kafka", str(node_dir / "server.properties"),
    ]
    with open(node_dir / "stdout.log", "ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=node_dir)
    (node_dir / "pid").write_text(f"{proc.pid}\n")
    return proc.pid


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _describe_brokers(d: Path, info: dict) -> list[int]:
    """Return the broker ids the cluster reports, or [] if it does not answer."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": info["bootstrap"], "log_level": 0, "socket.timeout.ms": 5000,
                         **lab_security.client_conf(d, lab_security.security_of(info))})
    try:
        return sorted(node.id for node in admin.describe_cluster(request_timeout=5).result(timeout=6).nodes)
    except (KafkaException, TimeoutError):
        return []


def _wait_ready(d: Path, info: dict, timeout: float) -> None:
    t0 = time.monotonic()
    want = list(range(1, info["brokers"] + 1))
    last_print = 0.0
    seen: list[int] = []
    missing: set[int] = set()
    while True:
        elapsed = time.monotonic() - t0
        # Dead only when missing twice, a second apart: CI once saw a starting node read as gone at once.
        now_missing = {n for n, pid in _pids(d, info).items() if not pid}
        dead = sorted(missing & now_missing)
        missing = now_missing
        if dead:
            n = dead[0]
            node_dir = d / f"node-{n}"
            raise LabError(f"node {n} exited during startup; last lines of {node_dir}/server.log:\n"
                           f"{_tail(node_dir / 'server.log')}\n{node_dir}/stdout.log:\n"
                           f"{_tail(node_dir / 'stdout.log')}")
        if all(_port_open(info["nodes"][str(n)]["client"]) for n in want):
            seen = _describe_brokers(d, info)
            if seen == want:
                print(f"all {len(want)} broker(s) up after {elapsed:.0f}s", file=sys.stderr)
                return
        if elapsed > timeout:
            raise LabError(f"brokers not ready after {timeout:.0f}s (seen {seen}); stopped them; "
                           f"logs in {d}/node-*/server.log")
        if elapsed - last_print >= 5:
            print(f"waiting for brokers: {len(seen)}/{len(want)} up ({elapsed:.0f}s)", file=sys.stderr,
                  flush=True)
            last_print = elapsed
        time.sleep(1)


def _stop(d: Path, info: dict, timeout: float = 30, nodes: list[int] | None = None) -> None:
    """SIGTERM every running node (or only those in nodes), wait up to timeout, then SIGKILL what is left."""
    running = {n: pid for n, pid in _pids(d, info).items() if pid}
    live = {n: pid for n, pid in running.items() if nodes is None or n in nodes}
    others = len(running) - len(live)
    for pid in live.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    majority = info["brokers"] // 2 + 1
    quorum_lost_at = None
    while live and time.monotonic() < deadline:
        time.sleep(0.5)
        live = {n: pid for n, pid in live.items() if _alive(pid, d / f"node-{n}")}
        # A broker's controlled shutdown needs a controller quorum and otherwise waits up to 5 minutes,
        # so once most nodes are gone the stragglers get a short grace only.
        if len(live) + others < majority:
            quorum_lost_at = quorum_lost_at or time.monotonic()
            if time.monotonic() - quorum_lost_at > 5:
                break
    for n, pid in live.items():
        print(f"node {n} (pid {pid}) did not stop: killing it", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while any(_alive(pid, d / f"node-{n}") for n, pid in live.items()):
        time.sleep(0.2)
    for n in nodes or range(1, info["brokers"] + 1):
        (d / f"node-{n}" / "pid").unlink(missing_ok=True)


def _remove_data(d: Path) -> None:
    """Delete the nodes' storage and the secrets formatted into it."""
    for node_dir in d.glob("node-*"):
        shutil.rmtree(node_dir)
    shutil.rmtree(lab_security.secrets_dir(d), ignore_errors=True)


def up(dir=None, brokers: int = 1, base_port: int | None = None, kafka_version: str | None = None,
       timeout: float = 180, security: str = "none") -> dict:
    """Start (or reuse) the lab in DIR, write DIR/kdiag.yaml and return its lab.json contents."""
    d = lab_dir(dir)
    old = _load(d)
    live = _pids(d, old) if old else {}
    base = base_port or (old or {}).get("base_port") or DEFAULT_BASE_PORT
    version = kafka_version or (old or {}).get("kafka_version") or KAFKA_VERSION
    wanted = (brokers, base, version, security)
    same = (bool(old) and (old["brokers"], old["base_port"], old["kafka_version"], lab_security.security_of(old)) == wanted
            and (security == "none" or lab_security.secrets_dir(d).is_dir()))  # lost secrets: rebuild
    if same and all(live.values()):
        lab_security.write_kdiag_yaml(d, old)
        return old
    check_java()
    if not same:
        if any(live.values()):
            print("lab config changed: stopping the running lab", file=sys.stderr)
            _stop(d, old)
        # Storage formatted for another quorum, version, security mode or secrets cannot be reused.
        _remove_data(d)
    d.mkdir(parents=True, exist_ok=True)
    fetch_jars(d, version)
    lab_security.prepare(d, security)

    nodes = {str(n): ports(n, base) for n in range(1, brokers + 1)}
    to_start = [n for n in range(1, brokers + 1) if not (same and live.get(n))]
    busy = [p for n in to_start for p in nodes[str(n)].values() if not _port_free(p)]
    if busy:
        raise LabError(f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 already in use; "
                       "choose another --base-port or stop what uses them")
    cluster_id = old["cluster_id"] if same else _cluster_id()
    for n in range(1, brokers + 1):
        node_dir = d / f"node-{n}"
        node_dir.mkdir(exist_ok=True)
        lab_security.write_private(node_dir / "server.properties",
                                   _server_properties(n, brokers, base, node_dir, security))
    unformatted = [n for n in to_start if not (d / f"node-{n}" / "data" / "meta.properties").exists()]
    if unformatted:
        _format(d, unformatted, cluster_id, security)

    info = {
        "brokers": brokers,
        "bootstrap": ",".join(f"127.0.0.1:{nodes[str(n)]['client']}" for n in range(1, brokers + 1)),
        "jmx": {k: jmx_url(v["jmx_port"]) for k, v in nodes.items()},
        "pids": {},
        "kafka_version": version,
        "base_port": base,
        "cluster_id": cluster_id,
        "dir": str(d),
        "nodes": nodes,
        "security": security,
    }
    for n in range(1, brokers + 1):
        pid = live.get(n) if same else None
        info["pids"][str(n)] = pid or _start(d, n, nodes[str(n)]["jmx_port"], security)
    (d / "lab.json").write_text(json.dumps(info, indent=2) + "\n")
    lab_security.write_kdiag_yaml(d, info)
    print(f"started {len(to_start)} node(s), waiting for the brokers ...", file=sys.stderr, flush=True)
    try:
        _wait_ready(d, info, timeout)
    except LabError:
        _stop(d, info)
        raise
    return info


@contextlib.contextmanager
def locked(d: Path):
    """Hold an exclusive lock on DIR so concurrent `up`/`down` calls run one after another."""
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _lab_with_node(d: Path, n: int) -> dict:
    """lab.json of the lab in d; LabError when it has no node n."""
    info = _load(d)
    if not info or not 1 <= n <= info["brokers"]:
        raise LabError(f"no node {n} in the lab at {d}")
    return info


def stop_node(n: int, dir=None, timeout: float = 30) -> None:
    """Stop node n of the lab in DIR (a controlled shutdown when the others keep the quorum)."""
    d = lab_dir(dir)
    with locked(d):
        _stop(d, _lab_with_node(d, n), timeout, nodes=[n])


def start_node(n: int, dir=None, timeout: float = 180) -> dict:
    """Start node n of the lab in DIR unless it runs, wait until every broker answers; return lab.json."""
    d = lab_dir(dir)
    with locked(d):
        info = _lab_with_node(d, n)
        if not _pids(d, info)[n]:
            security = lab_security.security_of(info)
            info["pids"][str(n)] = _start(d, n, info["nodes"][str(n)]["jmx_port"], security)
            (d / "lab.json").write_text(json.dumps(info, indent=2) + "\n")
        _wait_ready(d, info, timeout)
    return info


def status(dir=None) -> tuple[dict | None, dict[int, int | None]]:
    """Return lab.json of the lab in DIR (None if absent) and node id -> live pid (None if stopped)."""
    d = lab_dir(dir)
    info = _load(d)
    return info, _pids(d, info) if info else {}


def down(dir=None, purge: bool = False) -> bool:
    """Stop the lab in DIR, with purge also delete its data, secrets and kdiag.yaml; False if there is none."""
    d = lab_dir(dir)
    if not (d / "lab.json").exists():
        return False
    with locked(d):
        _stop(d, _load(d) or {"brokers": 0})
        if purge:
            _remove_data(d)
            (d / "lab.json").unlink(missing_ok=True)
            (d / "kdiag.yaml").unlink(missing_ok=True)
    return True
