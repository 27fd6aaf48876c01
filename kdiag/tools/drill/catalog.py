"""The drills: each injects one fault the way the field met it, through plain clients, configs or processes."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kdiag.tools.drill import container_faults
from kdiag.tools.lab import lab
from kdiag.tools.drill.faults import (VICTIM_BROKER, Target, assignment, broker_pid, cluster_default, consumers,
                                cpu_controller, cpu_quota, duty_cycle_stall, keyed_load, kill_acking_alone,
                                preferred_leaders, record_by_record, scanner, topic, victim_back)
from kdiag.tools.drill.leadership import leaderships_away
from kdiag.analysis.engine import Diagnosis
from kdiag.runtime.pipeline import State
from kdiag.config.probe import ProbeConfig

RECORDINGS = Path(__file__).resolve().parents[3] / "tests" / "recordings"


@dataclass
class Drill:
    """One fault: what it changes, the rule ids that must name it, how to inject and revert it."""

    name: str
    summary: str
    expected: list[str]
    inject: Callable[[Target], AbstractContextManager[object]] | None = None
    brokers: int = 1
    needs_lab: bool = False
    replay: Path | None = None
    timeout: float = 240.0
    resolve_timeout: float = 120.0
    probe: ProbeConfig | None = None  # kdiag's synthetic probe on its own topic, from before the baseline to the end
    containers: bool = False  # needs a `kdiag lab up --containers` lab
    subject: str = ".*"  # what the subjects of the expected diagnoses must match in full (a regex)
    shares: bool = False  # touches only its own subjects: may run beside other sharing drills
    # What must hold in at least one monitor state between the injection and the revert, by what it says.
    checks: dict[str, Callable[[State], bool]] = field(default_factory=dict)
    # Causes the fault itself may make true besides the expected ones: rule id -> the subject regex it may fire on.
    side_effects: dict[str, str] = field(default_factory=dict)

    def owns(self, rule: str, subject: str) -> bool:
        """Whether a diagnosis of `rule` on `subject` is this drill's to expect."""
        return rule in self.expected and re.fullmatch(self.subject, subject) is not None

    def accounts_for(self, rule: str, subject: str) -> bool:
        """Whether a diagnosis of `rule` on `subject` is expected of this drill or a side effect of its fault."""
        effect = self.side_effects.get(rule)
        return self.owns(rule, subject) or (effect is not None and re.fullmatch(effect, subject) is not None)

    def refusal(self, target: Target) -> str:
        """Why this drill cannot run against target ('' when it can)."""
        if self.replay:
            return ""
        if self.brokers > target.brokers:
            return f"needs {self.brokers} brokers, the cluster has {target.brokers} (kdiag lab up --brokers 3)"
        if self.needs_lab and target.lab_dir is None:
            return "needs the kdiag lab: it stops broker processes or reads their log dirs"
        if self.containers and not target.containers:
            return "needs a container lab: kdiag lab up --containers --brokers 3"
        return ""


@contextmanager
def container_memory(target: Target) -> Iterator[None]:
    with topic(target, "drill-container-memory", [[VICTIM_BROKER]]) as name:
        container_faults.fill(target.bootstrap, name, 400 * container_faults.MiB)
        with container_faults.memory_limit(target, VICTIM_BROKER, 160 * container_faults.MiB), \
                container_faults.rereader(target.bootstrap, name):
            yield


@contextmanager
def forced_fsync(target: Target) -> Iterator[None]:
    with topic(target, "drill-forced-fsync", assignment(target, 3), **{"flush.messages": "1"}) as name, \
            keyed_load(target.bootstrap, [name]):
        yield


@contextmanager
def forced_fsync_broker(target: Target) -> Iterator[None]:
    # Issue 35's field fault: a flush every 500 messages under 8,000 msg/s on 6 partitions; on a loaded host fewer
    # arrive, and the flushes per message, not per second, still name it.
    with topic(target, "drill-fsync-inherited", assignment(target, 6)) as name, \
            cluster_default(target, "log.flush.interval.messages", "500"), \
            keyed_load(target.bootstrap, [name], rate=8000):
        yield


@contextmanager
def leader_skew(target: Target) -> Iterator[None]:
    with topic(target, "drill-leader-skew", [[1, 2, 3], [1, 3, 2]] * 3) as name, \
            keyed_load(target.bootstrap, [name]):
        yield


@contextmanager
def hot_key(target: Target) -> Iterator[None]:
    with topic(target, "drill-hot-key", assignment(target, 3)) as name, keyed_load(target.bootstrap, [name], keys=1):
        yield


@contextmanager
def follower_stopped(target: Target) -> Iterator[None]:
    # min.insync.replicas=3: with a replica gone, acks=all writes would fail (seed 002 section 3.2); the load uses acks=1.
    with topic(target, "drill-follower", assignment(target, 3), **{"min.insync.replicas": "3"}) as name, \
            keyed_load(target.bootstrap, [name], rate=300):
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


@contextmanager
def log_dir_scanner(target: Target) -> Iterator[None]:
    """A separate process re-reading every file of the log dirs, as a backup or stats script does."""
    with topic(target, "drill-scanned", assignment(target, 3)) as name, \
            keyed_load(target.bootstrap, [name], rate=3000), scanner(target.log_dirs):
        yield


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


@contextmanager
def broker_stall(target: Target) -> Iterator[None]:
    with topic(target, "drill-stall-load", assignment(target, 3)) as name, keyed_load(target.bootstrap, [name], rate=STALL_LOAD):
        # broker_latency_outlier compares with the broker's own past windows: they must be healthy ones first (the
        # probe starts only a few seconds before the injection).
        time.sleep(STALL_WARMUP_SECONDS)
        with duty_cycle_stall(broker_pid(target, VICTIM_BROKER), STALL_SECONDS):
            yield


@contextmanager
def broker_throttled(target: Target) -> Iterator[None]:
    if cpu_controller() is None:
        raise RuntimeError("no cgroup cpu controller on this host to put the broker under a quota")
    with topic(target, "drill-throttled-load", assignment(target, 3)) as name, \
            keyed_load(target.bootstrap, [name], rate=STALL_LOAD), cpu_quota(broker_pid(target, VICTIM_BROKER), 0.1):
        yield


@contextmanager
def led_by_others(target: Target) -> Iterator[None]:
    """The victim leading nothing but the probe's own partitions (the probe keeps its layout: it measures each
    broker as leader and as follower)."""
    assert target.probe is not None, "the follower drills run with the probe"
    with leaderships_away(target, VICTIM_BROKER, {target.probe.config.topic, target.probe.pairs.topic}):
        yield


@contextmanager
def follower_load(target: Target, name: str) -> Iterator[None]:
    """Load on two 1-partition topics led by the other brokers, the victim following both (one partition per
    topic: a topic led by two brokers of three is otherwise a true partition_skew)."""
    others = [b for b in range(1, target.brokers + 1) if b != VICTIM_BROKER]
    with topic(target, f"{name}-a", [[*others, VICTIM_BROKER]]) as a, \
            topic(target, f"{name}-b", [[*others[::-1], VICTIM_BROKER]]) as b, \
            keyed_load(target.bootstrap, [a, b], rate=STALL_LOAD / 2):
        yield


@contextmanager
def follower_stall(target: Target) -> Iterator[None]:
    with follower_load(target, "drill-follower-stall-load"), led_by_others(target), \
            duty_cycle_stall(broker_pid(target, VICTIM_BROKER), FOLLOWER_STALL_SECONDS):
        yield


@contextmanager
def follower_throttled(target: Target) -> Iterator[None]:
    if cpu_controller() is None:
        raise RuntimeError("no cgroup cpu controller on this host to put the broker under a quota")
    with follower_load(target, "drill-follower-throttled-load"), led_by_others(target), \
            cpu_quota(broker_pid(target, VICTIM_BROKER), FOLLOWER_QUOTA_CORES):
        yield


@contextmanager
def leader_stall(target: Target) -> Iterator[None]:
    with topic(target, "drill-leader-stall-load", assignment(target, 3)) as name, \
            keyed_load(target.bootstrap, [name], rate=STALL_LOAD), \
            duty_cycle_stall(broker_pid(target, VICTIM_BROKER), FOLLOWER_STALL_SECONDS):
        yield


@contextmanager
def leader_killed_alone(target: Target) -> Iterator[None]:
    assert target.probe is not None, "leader-killed-alone runs with the probe"
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


# Stopped this long of every second: at 0.3 s the lab's loaded peers' p99 (0.1-0.2 s on 2 shared cores) left the
# stalled broker at 2.5-5x them, flapping around the rule's 3x; 0.5 s is what a 50% CPU quota or heavy steal does.
STALL_SECONDS = 0.5
STALL_WARMUP_SECONDS = 60.0
STALL_LOAD = 1000.0  # messages/s of acks=1 load beside the probe in the stall drills (and their healthy measurement)


def stall_probe(name: str) -> ProbeConfig:
    """The stall drills' probe on its own topic and group: acks=1, two sends a second per broker."""
    # acks=1: a produce waits for its leader only. With acks=all a stalled follower delays every partition it
    # replicates, and all brokers' probe latency rose alike (measured on the lab: 0.43-0.48 s each).
    return ProbeConfig(topic=name, group_id=name, acks="1", interval=0.5)


FOLLOWER_STALL_SECONDS = 0.4  # the 300-500 ms of every second
# A follower needs less CPU than the leaders of its partitions: at 0.1 cores it was throttled in 8% of periods and at
# 0.05 in 27% (stopped 0.24 s/s), its pairs' p90 over 0.1 s only in bursts of 10-20 s.
FOLLOWER_QUOTA_CORES = 0.03


def acks_all_probe(name: str) -> ProbeConfig:
    """The replica drills' probe: the default acks=all, two sends a second per partition."""
    return ProbeConfig(topic=name, group_id=name, interval=0.5)


VICTIM_REPLICA_SLOW = {f"replica_slow names broker {VICTIM_BROKER}, over 3x its peers": firing(
    "replica_slow", lambda d: d.subject == f"broker {VICTIM_BROKER}"
    and float(d.evidence["replica_probe_vs_peers"]) > 3.0)}

VICTIM_OUTLIER = {f"broker_latency_outlier names broker {VICTIM_BROKER}, over 3x its peers": firing(
    "broker_latency_outlier", lambda d: d.subject == f"broker {VICTIM_BROKER}"
    and float(d.evidence["probe_latency_vs_peers"]) > 3.0)}

BROKER_3_DOWN = {"broker_down names broker 3": firing(
    "broker_down", lambda d: d.evidence["missing_broker_ids"] == "3" and "broker 3 left the cluster" in d.summary)}

# Drills that share run at once as one wave (each on its own topic or group); the others one at a time. Alone:
# faults that load the shared log disk (an fsync per message, a scanner): beside the wave, the fsync topic's log end
# offsets went unread for minutes (its messages/s stayed unknown) and hot-key's skew was never seen.
DRILLS = [
    Drill("forced-fsync", "topic drill-forced-fsync with flush.messages=1 under keyed load", ["forced_fsync"],
          forced_fsync, subject="drill-forced-fsync",
          checks={"forced_fsync evidence: flush.messages 1, over 0.5 flushes per 1,000 messages": firing(
              "forced_fsync", lambda d: d.evidence["flush_messages"] == 1.0
              and float(d.evidence["cluster.log_flushes_per_1k_messages"]) > 0.5)}),
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
          checks={"unbatched_producers names drill-unbatched, under 2 messages and 1 KB a request": firing(
              "unbatched_producers", lambda d: float(d.evidence["messages_per_produce_request"]) < 2.0
              and float(d.evidence["avg_produce_request_bytes"]) < 1024.0
              and "drill-unbatched" in str(d.evidence["busiest_topics"]))}),
    Drill("forced-fsync-broker", "cluster-wide log.flush.interval.messages=500 (kafka-configs --entity-default) under "
          "8,000 msg/s on 6 partitions",
          ["forced_fsync_broker"], forced_fsync_broker, subject=r"broker \d+",
          checks={"forced_fsync_broker names the cluster-wide default, 500 messages, over 0.5 flushes per 1,000": firing(
              "forced_fsync_broker", lambda d: "cluster-wide dynamic default" in d.summary
              and d.evidence["log_flush_interval_messages"] == 500.0
              and float(d.evidence["log_flushes_per_1k_messages"]) > 0.5)}),
    Drill("broker-kill", f"kill -9 broker {VICTIM_BROKER}, then start it", ["broker_down"], broker_kill,
          brokers=3, needs_lab=True, resolve_timeout=240, checks=BROKER_3_DOWN),
    Drill("broker-freeze", f"SIGSTOP broker {VICTIM_BROKER}, then SIGCONT", ["broker_down"], broker_freeze,
          brokers=3, needs_lab=True, resolve_timeout=240, checks=BROKER_3_DOWN,
          # The JVM times a collection by the clock: a SIGSTOP that lands in one (more likely on a loaded host, where
          # collections run longer) counts as a pause of the whole stop, as a real stall of the process would.
          side_effects={"broker_gc_pause_long": f"broker {VICTIM_BROKER}"}),
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
    Drill("broker-stall", f"broker {VICTIM_BROKER} stopped 500 ms of every second (SIGSTOP/SIGCONT) under load and "
          "the probe", ["broker_latency_outlier"], broker_stall, brokers=3, needs_lab=True, timeout=120,
          subject=f"broker {VICTIM_BROKER}", checks=VICTIM_OUTLIER,
          probe=stall_probe("drill-broker-stall")),
    # broker_cpu_throttled is a host cause rule read from the broker's cgroup (kdiag on the broker's host).
    Drill("broker-throttled", f"broker {VICTIM_BROKER} in a cgroup capped at 0.1 CPU (cpu.max, or cpu.cfs_quota_us "
          "under v1) under load and the probe", ["broker_cpu_throttled"], broker_throttled, brokers=3, needs_lab=True,
          timeout=150, probe=stall_probe("drill-broker-throttled")),
    # broker_page_cache_starved: a cause read from the broker container's cgroup (kdiag on the broker's host).
    Drill("container-memory", f"broker {VICTIM_BROKER}'s container memory limit lowered to its heap plus 160 MiB while "
          "a consumer re-reads 400 MB of one partition it leads", ["broker_page_cache_starved"], container_memory,
          brokers=3, needs_lab=True, containers=True, timeout=240, subject=r"pid \d+ java"),
    Drill("follower-stall", f"broker {VICTIM_BROKER}, leading nothing but the probe's own partitions, stopped "
          f"{FOLLOWER_STALL_SECONDS * 1000:.0f} ms of every second under load and the acks=all probe", ["replica_slow"],
          follower_stall, brokers=3, needs_lab=True, timeout=120, subject=f"broker {VICTIM_BROKER}",
          checks=VICTIM_REPLICA_SLOW, probe=acks_all_probe("drill-follower-stall")),
    Drill("follower-throttled", f"broker {VICTIM_BROKER}, leading nothing but the probe's own partitions, in a cgroup "
          f"capped at {FOLLOWER_QUOTA_CORES} CPU under load and the acks=all probe", ["replica_slow", "broker_cpu_throttled"],
          follower_throttled, brokers=3, needs_lab=True, timeout=120, checks=VICTIM_REPLICA_SLOW,
          probe=acks_all_probe("drill-follower-throttled")),
    Drill("leader-stall", f"broker {VICTIM_BROKER}, leading its share, stopped {FOLLOWER_STALL_SECONDS * 1000:.0f} ms "
          "of every second under load and the acks=all probe", ["replica_slow"], leader_stall, brokers=3,
          needs_lab=True, timeout=120, subject=f"broker {VICTIM_BROKER}", checks=VICTIM_REPLICA_SLOW,
          probe=acks_all_probe("drill-leader-stall")),
    Drill("nic-irq-on-cpu0", "replayed: the sandbox cannot move NIC IRQs", ["nic_irq_on_cpu0"],
          replay=RECORDINGS / "nic-irq-on-cpu0"),
    Drill("swap-in-use", "replayed: this machine has no swap to fill", ["swap_in_use"],
          replay=RECORDINGS / "swap-in-use"),
]
BY_NAME = {d.name: d for d in DRILLS}
