"""The lab's Kafka node processes: format their storage, start them, wait until every broker answers, stop them."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kdiag.tools.lab import security as lab_security
from kdiag.tools.lab import sizing as lab_sizing
from kdiag.core.procfs import parse_stat
from kdiag.tools.lab.info import LabInfo
from kdiag.tools.lab.jars import LABFILES, LabError
from kdiag.kafka.jars import classpath

HEAP = "-Xmx512m"  # KDIAG_LAB_HEAP (e.g. 1536m) for big labs: 50,000 partitions over 3 brokers need more


def heap() -> str:
    """The nodes' -Xmx: KDIAG_LAB_HEAP when set (digits and k, m or g), else HEAP."""
    size = os.environ.get("KDIAG_LAB_HEAP", "")
    if not size:
        return HEAP
    if not re.fullmatch(r"[1-9][0-9]*[kKmMgG]", size):
        raise LabError(f"KDIAG_LAB_HEAP={size[:40]!r}: expected a size like 1536m or 2g")
    return f"-Xmx{size}"


def jvm_opts(given: str | None) -> list[str]:
    """The brokers' extra JVM options: --jvm-opts, else $KDIAG_LAB_JVM_OPTS (e.g. "-XX:+UseZGC"), split as a shell would."""
    text = given if given is not None else os.environ.get("KDIAG_LAB_JVM_OPTS", "")
    try:
        opts = shlex.split(text)
    except ValueError as e:
        raise LabError(f"--jvm-opts {text[:80]!r}: {e}", 2) from None
    bad = [o for o in opts if not o.startswith("-")]
    if bad:
        raise LabError(f"--jvm-opts: {bad[0][:80]!r} is not a JVM option (options start with -)", 2)
    return opts


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


def pids(d: Path, info: LabInfo) -> dict[int, int | None]:
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


def port_free(port: int) -> bool:
    """Whether a port on 127.0.0.1 can be bound."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def format_storage(d: Path, nodes: list[int], cluster_id: str, security: str) -> None:
    """Format the storage of the given nodes in parallel (static voters: no --standalone needed)."""
    procs = {
        n: subprocess.Popen(
            lab_security.format_command(d, security, n, [
                "java", heap(), "-Dlog4j2.configurationFile=" + str(LABFILES / "log4j2.properties"),
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


def start(d: Path, n: int, jmx_port: int, security: str, extra_opts: Sequence[str] = (), xmx: str | None = None,
          nofile: int | None = None) -> int:
    """Start node n in a session of its own, JMX on loopback, with the heap and open files limit given (else HEAP or
    KDIAG_LAB_HEAP, and the inherited limit), and write its pid file; return the pid."""
    node_dir = d / f"node-{n}"
    cmd = [
        "java", xmx or heap(), *extra_opts, "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
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
    if nofile is not None:
        lab_sizing.apply(proc.pid, nofile)  # before the broker opens its logs, seconds into its start
    (node_dir / "pid").write_text(f"{proc.pid}\n")
    return proc.pid


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _describe_brokers(d: Path, info: LabInfo) -> list[int]:
    """Return the broker ids the cluster reports, or [] if it does not answer."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": info["bootstrap"], "log_level": 0, "socket.timeout.ms": 5000,
                         **lab_security.client_conf(d, lab_security.security_of(info))})
    try:
        return sorted(node.id for node in admin.describe_cluster(request_timeout=5).result(timeout=6).nodes)
    except (KafkaException, TimeoutError):
        return []


def wait_ready(d: Path, info: LabInfo, timeout: float) -> None:
    """Wait until every broker answers; LabError naming the node that died, or after timeout seconds."""
    t0 = time.monotonic()
    want = list(range(1, info["brokers"] + 1))
    last_print = 0.0
    seen: list[int] = []
    missing: set[int] = set()
    while True:
        elapsed = time.monotonic() - t0
        # Dead only when missing twice, a second apart: CI once saw a starting node read as gone at once.
        now_missing = {n for n, pid in pids(d, info).items() if not pid}
        dead = sorted(missing & now_missing)
        missing = now_missing
        if dead:
            n = dead[0]
            node_dir = d / f"node-{n}"
            raise LabError(f"node {n} exited during startup; last lines of {node_dir}/server.log:\n"
                           f"{_tail(node_dir / 'server.log')}\n{node_dir}/stdout.log:\n"
                           f"{_tail(node_dir / 'stdout.log')}")
        if all(_port_open(info["nodes"][str(n)]["client"], info.get("hosts", {}).get(str(n), "127.0.0.1"))
               for n in want):
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


def stop(d: Path, info: LabInfo, timeout: float = 30, nodes: list[int] | None = None) -> None:
    """SIGTERM every running node (or only those in nodes), wait up to timeout, then SIGKILL what is left."""
    running = {n: pid for n, pid in pids(d, info).items() if pid}
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
