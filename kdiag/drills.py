"""The drills: each injects one fault the way the field met it, through plain clients, configs or processes."""

from __future__ import annotations

import os
import re
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

from kdiag import lab, lab_layout
from kdiag.engine import Diagnosis
from kdiag.pipeline import State
from kdiag.probe import ProbeService
from kdiag.probe_config import ProbeConfig

RECORDINGS = Path(__file__).resolve().parent.parent / "tests" / "recordings"
VICTIM_BROKER = 3


@dataclass
class Target:
    """The cluster the drills run against; lab_dir is None for a cluster kdiag does not own."""

    bootstrap: str
    brokers: int
    jmx: list[str] = field(default_factory=list)
    lab_dir: Path | None = None
    log_dirs: list[str] = field(default_factory=list)
    probe: ProbeService | None = None  # the synthetic probe of a drill that asks for one, while it runs

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})


@dataclass
class Drill:
    """One fault: what it changes, the rule ids that must name it, how to inject and revert it."""

    name: str
    summary: str
    expected: list[str]
    inject: Callable[[Target], AbstractContextManager] | None = None
    brokers: int = 1
    needs_lab: bool = False
    replay: Path | None = None
    timeout: float = 240.0
    resolve_timeout: float = 120.0
    probe: ProbeConfig | None = None  # kdiag's synthetic probe on its own topic, from before the baseline to the end
    subject: str = ".*"  # what the subjects of the expected diagnoses must match in full (a regex)
    shares: bool = False  # touches only its own subjects: may run beside other sharing drills
    # What must hold in at least one monitor state between the injection and the revert, by what it says.
    checks: dict[str, Callable[[State], bool]] = field(default_factory=dict)

    def owns(self, rule: str, subject: str) -> bool:
        """Whether a diagnosis of `rule` on `subject` is this drill's to expect."""
        return rule in self.expected and re.fullmatch(self.subject, subject) is not None

    def refusal(self, target: Target) -> str:
        """Why this drill cannot run against target ('' when it can)."""
        if self.replay:
            return ""
        if self.brokers > target.brokers:
            return f"needs {self.brokers} brokers, the cluster has {target.brokers} (kdiag lab up --brokers 3)"
        if self.needs_lab and target.lab_dir is None:
            return "needs the kdiag lab: it stops broker processes or reads their log dirs"
        return ""


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


def keyed_load(target: Target, name: str, rate: float = 1500.0, keys: int = 1000) -> AbstractContextManager:
    """Produce traffic at about `rate` messages/s over `keys` keys."""
    def run(stop: threading.Event) -> None:
        producer = Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 5, "acks": "1"})
        n = 0
        while not stop.is_set():
            for _ in range(int(rate / 20)):
                producer.produce(name, key=f"k{n % keys}".encode(), value=b"x" * 200)
                n += 1
            producer.poll(0)
            time.sleep(0.05)
        producer.flush(10)
    return in_background(run)


def record_by_record(target: Target, name: str) -> AbstractContextManager:
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
def consumers(target: Target, group: str, name: str, count: int, slow_every: float = 0.0, **conf) -> Iterator[None]:
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
    subprocess.run(["java", "-cp", lab_layout.classpath(target.lab_dir), tool, "--bootstrap-server", target.bootstrap, *args],
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


@contextmanager
def forced_fsync(target: Target) -> Iterator[None]:
    with topic(target, "drill-forced-fsync", assignment(target, 3), **{"flush.messages": "1"}) as name, keyed_load(target, name):
        yield


@contextmanager
def forced_fsync_broker(target: Target) -> Iterator[None]:
    with topic(target, "drill-fsync-inherited", assignment(target, 3)) as name, \
            cluster_default(target, "log.flush.interval.messages", "1"), keyed_load(target, name):
        yield


@contextmanager
def leader_skew(target: Target) -> Iterator[None]:
    with topic(target, "drill-leader-skew", [[1, 2, 3], [1, 3, 2]] * 3) as name, keyed_load(target, name):
        yield


@contextmanager
def hot_key(target: Target) -> Iterator[None]:
    with topic(target, "drill-hot-key", assignment(target, 3)) as name, keyed_load(target, name, keys=1):
        yield


@contextmanager
def follower_stopped(target: Target) -> Iterator[None]:
    # min.insync.replicas=3: with a replica gone, acks=all writes would fail (seed 002 section 3.2); the load uses acks=1.
    with topic(target, "drill-follower", assignment(target, 3), **{"min.insync.replicas": "3"}) as name, \
            keyed_load(target, name, rate=300):
        try:
            lab.stop_node(VICTIM_BROKER, target.lab_dir)
            yield
        finally:
            lab.start_node(VICTIM_BROKER, target.lab_dir)
            preferred_leaders(target)


@contextmanager
def unbatched(target: Target) -> Iterator[None]:
    # Led by broker 2: the wave's batched producers (leader-skew, hot-key's one key) write to broker 1, whose
    # messages per request they would lift; and unbatched_producers named on broker 1 is then a false attribution.
    with topic(target, "drill-unbatched", [assignment(target, 2)[-1]]) as name, record_by_record(target, name):
        yield


SCANNER = """
import os, sys, time
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


@contextmanager
def log_dir_scanner(target: Target) -> Iterator[None]:
    """A separate process re-reading every file of the log dirs, as a backup or stats script does."""
    with topic(target, "drill-scanned", assignment(target, 3)) as name, keyed_load(target, name, rate=3000):
        scanner = subprocess.Popen([sys.executable, "-c", SCANNER, *target.log_dirs], cwd=target.log_dirs[0],
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            yield
        finally:
            scanner.kill()
            scanner.wait(30)


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


@contextmanager
def broker_kill(target: Target) -> Iterator[None]:
    with victim_back(target):
        os.kill(broker_pid(target, VICTIM_BROKER), signal.SIGKILL)
        yield


@contextmanager
def broker_freeze(target: Target) -> Iterator[None]:
    pid = broker_pid(target, VICTIM_BROKER)
    with victim_back(target):
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)


def kill_acking_alone(target: Target, probe: ProbeService, leader: int, alone: int = 5) -> None:
    """Freeze the other brokers until `leader` acked `alone` acks=1 probe sends nobody replicated, kill -9 it, thaw."""
    # Frozen followers fetch nothing and, as the controller majority, cannot shrink the ISR: the high watermark
    # stays put while the leader acks alone, and a follower then takes over without that data.
    others = [broker_pid(target, n) for n in range(1, target.brokers + 1) if n != leader]
    acked = lambda: probe.per_broker("kdiag_probe_messages_acked_total").get(str(leader), 0.0)  # noqa: E731
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
def leader_killed_alone(target: Target) -> Iterator[None]:
    with victim_back(target):
        kill_acking_alone(target, target.probe, VICTIM_BROKER)
        yield


@contextmanager
def idle_consumers(target: Target) -> Iterator[None]:
    with topic(target, "drill-idle", assignment(target, 1)) as name, consumers(target, "drill-idle-group", name, 3):
        yield


@contextmanager
def consumer_rebalance(target: Target) -> Iterator[None]:
    conf = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 6000}
    with topic(target, "drill-rebalance", assignment(target, 2)) as name, \
            consumers(target, "drill-rebalance-group", name, 2, slow_every=9.0, **conf):
        yield


def firing(rule: str, holds: Callable[[Diagnosis], bool] = lambda d: True) -> Callable[[State], bool]:
    """A drill check: a firing diagnosis of rule for which holds(diagnosis) is true."""
    return lambda state: any(d.rule.id == rule and d.state == "firing" and holds(d) for d in state.diagnoses)


def jmx_of_one_broker_down(state: State) -> bool:
    """One broker's JMX endpoint read as down, the two others up, and both Kafka collectors still succeeding."""
    up = sorted(s.value for s in state.samples if s.name == "kdiag_kafka_jmx_up")
    return up == [0.0, 1.0, 1.0] and all(state.health[c].success for c in ("kafka_admin", "kafka_jmx"))


BROKER_3_DOWN = {"broker_down names broker 3": firing(
    "broker_down", lambda d: d.evidence["missing_broker_ids"] == "3" and "broker 3 left the cluster" in d.summary)}

# Drills that share run at once as one wave (each on its own topic or group); the others one at a time. Alone:
# faults that load the shared log disk (an fsync per message, a scanner): beside the wave, the fsync topic's log end
# offsets went unread for minutes (its messages/s stayed unknown) and hot-key's skew was never seen.
DRILLS = [
    Drill("forced-fsync", "topic drill-forced-fsync with flush.messages=1 under keyed load", ["forced_fsync"],
          forced_fsync, subject="drill-forced-fsync",
          checks={"forced_fsync evidence: flush.messages 1, over 5 flushes/s": firing(
              "forced_fsync", lambda d: d.evidence["flush_messages"] == 1.0
              and d.evidence["cluster.log_flushes_per_second"] > 5.0)}),
    Drill("log-dir-scanner", "a separate process re-reading the brokers' log dirs", ["foreign_io_scanner"],
          log_dir_scanner, needs_lab=True, subject=r"pid \d+ python.*"),
    Drill("leader-skew", "topic drill-leader-skew with every leader on broker 1, under load", ["partition_skew"],
          leader_skew, brokers=3, subject="drill-leader-skew", shares=True,
          checks={"partition_skew evidence: broker 1 leads all, 3x its share": firing(
              "partition_skew", lambda d: d.evidence["leader_top_broker_share"] == 1.0
              and d.evidence["leader_skew_ratio"] == 3.0)}),
    Drill("hot-key", "topic drill-hot-key with balanced leaders and every record under one key", ["partition_skew"],
          hot_key, brokers=3, subject="drill-hot-key", shares=True),
    Drill("idle-consumers", "3 consumers in one group on a 1-partition topic", ["consumer_members_idle"],
          idle_consumers, subject="drill-idle-group", shares=True,
          checks={"2 of 3 members idle": lambda state: any(
              d.rule.id == "consumer_members_idle" and d.evidence["idle_members"] == 2.0 and d.evidence["members"] == 3.0
              for d in state.diagnoses)}),
    Drill("consumer-rebalance", "a consumer polling every 9 s with max.poll.interval.ms=6000",
          ["consumer_rebalancing"], consumer_rebalance, timeout=400, subject="drill-rebalance-group", shares=True),
    Drill("unbatched-producers", "a plain client sending records one by one (linger.ms=0, batch.num.messages=1)",
          ["unbatched_producers"], unbatched, brokers=2, subject="broker 2", shares=True,
          checks={"unbatched_producers names drill-unbatched, under 2 messages a request": firing(
              "unbatched_producers", lambda d: d.evidence["messages_per_produce_request"] < 2.0
              and "drill-unbatched" in d.evidence["busiest_topics"])}),
    Drill("forced-fsync-broker", "cluster-wide log.flush.interval.messages=1 (kafka-configs --entity-default)",
          ["forced_fsync_broker"], forced_fsync_broker, subject=r"broker \d+",
          checks={"forced_fsync_broker names the cluster-wide default, 1 message": firing(
              "forced_fsync_broker", lambda d: "cluster-wide dynamic default" in d.summary
              and d.evidence["log_flush_interval_messages"] == 1.0)}),
    Drill("broker-kill", f"kill -9 broker {VICTIM_BROKER}, then start it", ["broker_down"], broker_kill,
          brokers=3, needs_lab=True, resolve_timeout=240, checks=BROKER_3_DOWN),
    Drill("broker-freeze", f"SIGSTOP broker {VICTIM_BROKER}, then SIGCONT", ["broker_down"], broker_freeze,
          brokers=3, needs_lab=True, resolve_timeout=240, checks=BROKER_3_DOWN),
    Drill("follower-stopped", f"stop broker {VICTIM_BROKER} (controlled shutdown) under load, then start it",
          ["under_replicated_partitions", "broker_down"], follower_stopped, brokers=3, needs_lab=True,
          resolve_timeout=240, checks={**BROKER_3_DOWN, "broker 3's JMX endpoint down, the collectors up":
                                       jmx_of_one_broker_down, "under_min_isr on drill-follower": firing(
                                           "under_min_isr", lambda d: d.subject == "drill-follower")}),
    Drill("probe-loss",
          f"probe at acks=1: the others frozen while broker {VICTIM_BROKER} acks alone, kill -9 it, then start it",
          ["probe_messages_lost", "broker_down"], leader_killed_alone, brokers=3, needs_lab=True, resolve_timeout=240,
          # 2 sends/s per partition: 6/s stays under partition_skew's 10 messages/s while the leaders sit on 2 brokers.
          probe=ProbeConfig(topic="drill-probe-loss", acks="1", interval=0.5, sla=10.0, availability_window=10.0,
                            reconcile_interval=5.0, group_id="drill-probe-loss")),
    Drill("nic-irq-on-cpu0", "replayed: the sandbox cannot move NIC IRQs", ["nic_irq_on_cpu0"],
          replay=RECORDINGS / "nic-irq-on-cpu0"),
    Drill("swap-in-use", "replayed: this machine has no swap to fill", ["swap_in_use"],
          replay=RECORDINGS / "swap-in-use"),
]
BY_NAME = {d.name: d for d in DRILLS}
