"""The drills' building blocks: fresh topics, client loads, consumer groups, broker defaults and broker processes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, ElectionType, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kdiag.tools.lab import lab
from kdiag.kafka.jars import classpath
from kdiag.probe.probe import ProbeService
from kdiag.config.probe import ProbeConfig

VICTIM_BROKER = 3
TOPIC_PREFIX = "drill-"  # every topic a drill makes: a run deletes those an earlier, killed run left

SCANNER = """
import os, sys, threading, time

def orphaned():
    sys.stdin.buffer.read()  # EOF: the drill that started this process is gone, however it died
    os._exit(0)

threading.Thread(target=orphaned, daemon=True).start()
while True:
    for d in sys.argv[1:]:
        for root, _, files in os.walk(d):
            for f in files:
                try:
                    with open(os.path.join(root, f), 'rb') as fh:
                        while fh.read(1 << 20):
                            pass
                except OSError:
                    pass
    time.sleep(0.01)
"""


@dataclass
class Target:
    """The cluster the drills run against; lab_dir is None for a cluster kdiag does not own."""

    bootstrap: str
    brokers: int
    jmx: list[str] = field(default_factory=list)
    lab_dir: Path | None = None
    log_dirs: list[str] = field(default_factory=list)
    probe: ProbeService | None = None  # the synthetic probe of a drill that asks for one, while it runs
    broker_user: str = ""  # kafka.broker_user for the brokers' processes when neither root runs them nor started them
    containers: bool = False  # a `kdiag lab up --containers` lab
    discover_procfs: str = ""  # set: the drills' kdiag finds the brokers itself over this procfs (no config)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})


def assignment(target: Target, partitions: int) -> list[list[int]]:
    """Replicas spread over every broker (replication factor min(3, brokers)), first replica rotating."""
    n, rf = target.brokers, min(3, target.brokers)
    return [[(p + i) % n + 1 for i in range(rf)] for p in range(partitions)]


@contextmanager
def topic(target: Target, name: str, replicas: list[list[int]], **config: str) -> Iterator[str]:
    """A fresh topic for the drill, deleted at the end."""
    admin = target.admin()
    admin.delete_topics([name])[name].exception(timeout=30)
    deadline = time.monotonic() + 60
    while name in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.5)
    try:
        new = NewTopic(name, num_partitions=len(replicas), replica_assignment=replicas, config=config)
        while (error := admin.create_topics([new])[name].exception(timeout=30)) is not None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"cannot create topic {name}: {error}")
            time.sleep(1)
        yield name
    finally:
        admin.delete_topics([name])[name].exception(timeout=30)


def delete_leftover_topics(target: Target) -> list[str]:
    """Delete the drill topics on the cluster (a drill run killed before its revert leaves its own); their names."""
    admin = target.admin()
    names = sorted(t for t in admin.list_topics(timeout=10).topics if t.startswith(TOPIC_PREFIX))
    for future in (admin.delete_topics(names).values() if names else ()):
        future.exception(timeout=30)
    return names


@contextmanager
def scanner(log_dirs: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A separate process re-reading every file of log_dirs while the block runs, and never past this process."""
    # Its own session: a Ctrl-C on the drill (deferred until the revert) does not reach it. Its stdin is a pipe only
    # this process holds, so it reads EOF and exits when this process dies, SIGKILL included.
    process = subprocess.Popen([sys.executable, "-c", SCANNER, *log_dirs], cwd=log_dirs[0], stdin=subprocess.PIPE,
                               start_new_session=True)
    try:
        yield process
    finally:
        process.kill()
        process.wait(30)
        assert process.stdin is not None  # started with stdin=PIPE
        process.stdin.close()


@contextmanager
def in_background(loop: Callable[[threading.Event], None]) -> Iterator[None]:
    """loop(stop) in a thread while the block runs."""
    stop = threading.Event()
    thread = threading.Thread(target=loop, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


@contextmanager
def probe_running(target: Target, config: ProbeConfig) -> Iterator[ProbeService]:
    """The synthetic probe on a fresh topic preferring each broker once; stopped before the topic is deleted."""
    with topic(target, config.topic, assignment(target, target.brokers)):
        probe = ProbeService(target.bootstrap, config, "drill")
        probe.start()
        try:
            yield probe
        finally:
            probe.stop(30)  # a manager thread outliving the topic would create it again
            admin = target.admin()  # held: a client dropped mid-request never completes its futures
            admin.delete_topics([probe.pairs.topic])[probe.pairs.topic].exception(timeout=30)


def keyed_load(bootstrap: str, topics: list[str], rate: float = 1500.0, keys: int = 1000) -> AbstractContextManager[None]:
    """Produce traffic to each topic at about `rate` messages/s over `keys` keys while the block runs."""
    def run(stop: threading.Event) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1"})
        n = 0
        while not stop.is_set():
            for name in topics:
                for _ in range(int(rate / 20)):
                    producer.produce(name, key=f"k{n % keys}".encode(), value=b"x" * 200)
                    n += 1
            producer.poll(0)
            time.sleep(0.05)
        producer.flush(10)
    return in_background(run)


def record_by_record(target: Target, name: str) -> AbstractContextManager[None]:
    """A plain client sending 20-byte records one request each (linger.ms=0, batch.num.messages=1)."""
    def run(stop: threading.Event) -> None:
        producer = Producer({"bootstrap.servers": target.bootstrap, "acks": "1", "client.id": "unbatched-app",
                             "linger.ms": 0, "batch.num.messages": 1})
        while not stop.is_set():
            for _ in range(200):
                try:
                    producer.produce(name, b"x" * 20)
                except BufferError:
                    break
            producer.poll(0.001)
        producer.flush(10)
    return in_background(run)


@contextmanager
def consumers(target: Target, group: str, name: str, count: int, slow_every: float = 0.0,
              **conf: str | int) -> Iterator[None]:
    """`count` members of one group; with slow_every, the last one polls only that often (past max.poll)."""
    # log_level 3: the slow member's "maximum poll interval exceeded" warning is the drill, not news.
    members = [Consumer({"bootstrap.servers": target.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "log_level": 3, **conf}) for _ in range(count)]
    for c in members:
        c.subscribe([name])

    def run(stop: threading.Event) -> None:
        last_slow = 0.0
        while not stop.is_set():
            for c in members[:-1] if slow_every else members:
                c.poll(0.1)
            if slow_every and time.monotonic() - last_slow > slow_every:
                members[-1].poll(0.2)
                last_slow = time.monotonic()

    try:
        with in_background(run):
            yield
    finally:
        for c in members:
            c.close()
        admin = target.admin()  # held: a client dropped mid-request never completes its futures
        admin.delete_consumer_groups([group])[group].exception(timeout=60)


def kafka_tool(target: Target, tool: str, *args: str) -> None:
    """Run one of Kafka's own command-line tools (the lab's jars) in its own session, so Ctrl-C spares it."""
    subprocess.run(["java", "-cp", classpath(target.lab_dir), tool, "--bootstrap-server", target.bootstrap, *args],
                   check=True, capture_output=True, timeout=120, start_new_session=True)


@contextmanager
def cluster_default(target: Target, name: str, value: str) -> Iterator[None]:
    """A cluster-wide dynamic broker default set with kafka-configs, deleted at the end."""
    alter = ("org.apache.kafka.tools.ConfigCommand", "--alter", "--entity-type", "brokers", "--entity-default")
    try:
        kafka_tool(target, *alter, "--add-config", f"{name}={value}")
        yield
    finally:
        kafka_tool(target, *alter, "--delete-config", name)


def preferred_leaders(target: Target, timeout: float = 120.0) -> None:
    """Move leadership back to the preferred replicas (after a broker came back), retried until every partition is."""
    admin = target.admin()
    deadline = time.monotonic() + timeout
    while True:
        # No kwargs: confluent-kafka 2.16 raises SystemError on any elect_leaders kwarg.
        result = admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=60)
        # A follower back from a restart may not be in sync yet: its partitions refuse until it is.
        refused = {f"{tp.topic}/{tp.partition}": str(e) for tp, e in result.items()
                   if e is not None and e.code() != KafkaError.ELECTION_NOT_NEEDED}
        if not refused:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"preferred leader election refused for {len(refused)} partitions: "
                               f"{next(iter(refused.items()))}")
        time.sleep(1)


def broker_pid(target: Target, node: int) -> int:
    pid = lab.status(target.lab_dir)[1].get(node)
    if not pid:
        raise RuntimeError(f"broker {node} of the lab is not running")
    return pid


@contextmanager
def victim_back(target: Target) -> Iterator[None]:
    """At the end, the victim broker started (if it is not running) and leadership back on the preferred replicas."""
    try:
        yield
    finally:
        lab.start_node(VICTIM_BROKER, target.lab_dir)  # waits until every broker answers
        preferred_leaders(target)


def kill_acking_alone(target: Target, probe: ProbeService, leader: int, alone: int = 5) -> None:
    """Freeze the other brokers until `leader` acked `alone` acks=1 probe sends nobody replicated, kill -9 it, thaw."""
    # Frozen followers fetch nothing and, as the controller majority, cannot shrink the ISR: the high watermark
    # stays put while the leader acks alone, and a follower then takes over without that data.
    others = [broker_pid(target, n) for n in range(1, target.brokers + 1) if n != leader]

    def acked() -> float:
        return probe.per_broker("kdiag_probe_messages_acked_total").get(str(leader), 0.0)

    before = acked()
    try:
        for pid in others:
            os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while acked() < before + alone:
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {leader} did not ack {alone} probe messages alone within 30 s")
            time.sleep(0.1)
        os.kill(broker_pid(target, leader), signal.SIGKILL)
    finally:
        for pid in others:
            os.kill(pid, signal.SIGCONT)


@contextmanager
def duty_cycle_stall(pid: int, stopped: float, period: float = 1.0) -> Iterator[None]:
    """The process stopped for `stopped` seconds of every `period` (SIGSTOP/SIGCONT) while the block runs, as VM steal,
    a CPU quota or long safepoints look from outside; running again at the end, however the block ends."""
    def run(stop: threading.Event) -> None:
        while not stop.is_set():
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(stopped)
            finally:
                os.kill(pid, signal.SIGCONT)
            # Jittered: a once-a-second sender (the probe) must not lock onto the stall's phase.
            stop.wait(random.uniform(0.5, 1.5) * (period - stopped))

    try:
        with in_background(run):
            yield
    finally:
        os.kill(pid, signal.SIGCONT)


CGROUP_ROOT = Path("/sys/fs/cgroup")
DRILL_CGROUP = "kdiag-drill-quota"


def cpu_controller() -> tuple[str, Path] | None:
    """("v2", the unified root) when cgroup v2 has the cpu controller, ("v1", the cpu hierarchy) under v1, else None."""
    for base in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        controllers = base / "cgroup.controllers"
        if controllers.exists() and "cpu" in controllers.read_text().split():
            return "v2", base
    if (CGROUP_ROOT / "cpu" / "cpu.cfs_quota_us").exists():
        return "v1", CGROUP_ROOT / "cpu"
    return None


def cgroup_of(pid: int, version: str) -> str:
    """The process's cgroup path in the hierarchy holding the cpu controller."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (version == "v2" and controllers == "") or (version == "v1" and "cpu" in controllers.split(",")):
            return path
    raise RuntimeError(f"pid {pid} is in no {version} cpu cgroup")


@contextmanager
def cpu_quota(pid: int, cores: float, period_us: int = 100000) -> Iterator[Path]:
    """The process moved into a child cgroup capped at `cores` CPUs (v2 cpu.max, v1 cpu.cfs_quota_us), as a container
    limit or systemd CPUQuota does; moved back and the cgroup removed at the end."""
    found = cpu_controller()
    if found is None:
        raise RuntimeError(f"no cgroup cpu controller under {CGROUP_ROOT} to set a quota with")
    version, base = found
    home = base / cgroup_of(pid, version).lstrip("/")
    group = base / DRILL_CGROUP
    group.mkdir(exist_ok=True)
    try:
        if version == "v2":
            if "cpu" not in (base / "cgroup.subtree_control").read_text().split():
                (base / "cgroup.subtree_control").write_text("+cpu")
            (group / "cpu.max").write_text(f"{int(cores * period_us)} {period_us}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(period_us))
            (group / "cpu.cfs_quota_us").write_text(str(int(cores * period_us)))
        (group / "cgroup.procs").write_text(str(pid))
        try:
            yield group
        finally:
            (home / "cgroup.procs").write_text(str(pid))
    finally:
        deadline = time.monotonic() + 10
        while True:  # the cgroup empties once the kernel has moved every thread
            try:
                group.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
