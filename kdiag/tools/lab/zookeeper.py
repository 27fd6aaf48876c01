"""The one ZooKeeper node of a ZooKeeper-mode lab: its config, start, readiness and stop (jars from Kafka's own deps)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

from kdiag.core.procfs import parse_stat
from kdiag.tools.lab.jars import LABFILES, LabError
from kdiag.kafka.jars import classpath

MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def zk_dir(d: Path) -> Path:
    """Where the lab's ZooKeeper keeps its config, data, log and pid."""
    return d / "zookeeper"


def _pid(d: Path) -> int | None:
    """The live ZooKeeper's pid, None when it is not running (a recycled pid's command line does not match)."""
    z = zk_dir(d)
    try:
        pid = int((z / "pid").read_text().strip())
    except (OSError, ValueError):
        return None
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        stat = parse_stat(Path(f"/proc/{pid}/stat").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return None
    return pid if stat.state not in ("Z", "X") and MAIN in cmdline and str(z) in cmdline else None


def running(d: Path) -> int | None:
    """The pid of the lab's ZooKeeper, None when it is stopped."""
    return _pid(d)


def start(d: Path, port: int, timeout: float = 60) -> int:
    """Start ZooKeeper on 127.0.0.1:port unless it runs, wait until it answers; return its pid."""
    if pid := _pid(d):
        return pid
    z = zk_dir(d)
    (z / "data").mkdir(parents=True, exist_ok=True)
    (z / "zoo.cfg").write_text(
        f"dataDir={z / 'data'}\nclientPort={port}\nclientPortAddress=127.0.0.1\ntickTime=2000\n"
        "maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,dump\n"
    )
    cmd = ["java", "-Xmx128m", "-Dlog4j2.configurationFile=" + str(LABFILES / "log4j2.properties"),
           f"-Dkafka.logs.dir={z}", "-Dzookeeper.jmx.log4j.disable=true",
           "-cp", classpath(d), MAIN, str(z / "zoo.cfg")]
    with open(z / "stdout.log", "ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=z)
    (z / "pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + timeout
    missing = False
    while time.monotonic() < deadline:
        # Dead only when missing twice, half a second apart: a ZooKeeper just started once read as gone at once
        # (the Kafka nodes' wait_ready does the same).
        if _pid(d) is None:
            if missing:
                stop(d)
                raise LabError(f"ZooKeeper exited during startup: see {z}/server.log and {z}/stdout.log")
            missing = True
        else:
            missing = False
        if _answers(port):
            return proc.pid
        time.sleep(0.5)
    stop(d)
    raise LabError(f"ZooKeeper not answering on 127.0.0.1:{port} after {timeout:.0f}s: see {z}/server.log")


def _four_letters(port: int, word: bytes) -> str | None:
    """ZooKeeper's answer to a four-letter word, None when it does not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(word)
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode(errors="replace")


def registered(port: int) -> set[int] | None:
    """The broker ids ZooKeeper holds a registration for (ephemeral /brokers/ids/N), None when it does not answer."""
    dump = _four_letters(port, b"dump")
    if dump is None or "Sessions with Ephemerals" not in dump:  # not serving yet: its data is still loading
        return None
    return {int(m) for m in re.findall(r"^\s+/brokers/ids/(\d+)$", dump, re.MULTILINE)}


def wait_unregistered(port: int, broker: int, timeout: float = 60) -> None:
    """Wait until ZooKeeper drops a killed broker's registration: it lives until that broker's session expires
    (zookeeper.session.timeout.ms, 18 s), and over a restart, so the broker started again finds it and exits."""
    deadline = time.monotonic() + timeout
    while (held := registered(port)) is None or broker in held:
        if time.monotonic() > deadline:
            raise LabError(f"ZooKeeper on 127.0.0.1:{port} still holds broker {broker}'s registration after "
                           f"{timeout:.0f}s: is another broker {broker} connected to it?")
        time.sleep(0.5)


def _answers(port: int) -> bool:
    """Whether ZooKeeper serves requests (it answers ruok with imok while its data is still loading)."""
    return (_four_letters(port, b"srvr") or "").startswith("Zookeeper version")


def stop(d: Path, timeout: float = 15) -> None:
    """SIGTERM the lab's ZooKeeper, SIGKILL it after timeout seconds."""
    pid = _pid(d)
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _pid(d) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _pid(d):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while _pid(d):
                time.sleep(0.2)
    (zk_dir(d) / "pid").unlink(missing_ok=True)
