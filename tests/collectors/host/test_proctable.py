"""The process table is read at the cost of the processes that move: idle ones only by the full scan, while new pids,
brokers and a long-running process that starts working are read in the cycle they show up."""

from __future__ import annotations

import sys

import pytest

from tests.paths import FIXTURES

sys.path.insert(0, str(FIXTURES))
from proc_tree import Proc, ProcTree

from kdiag.collectors.host.processes import ProcessesCollector

BROKER = 2000
AGENT = 3000  # a long-running monitoring agent, idle until it walks the log dirs
IDLE = range(10000, 10040)
SEGMENT = "/data/kafka-logs/orders-0/00000000000000000000.log"
INTERVAL = 5.0
MB = 1 << 20


@pytest.fixture
def tree(tmp_path):
    t = ProcTree(tmp_path)
    broker_argv = ["java", "-Xmx1G", "-cp", "/opt/kafka/libs/*", "kafka.Kafka", "/opt/kafka/config/server.properties"]
    t.procs[BROKER] = Proc("java", broker_argv, cpu_ticks=50000, read_bytes=20 * MB, rchar=400 * MB, fds=[SEGMENT])
    t.procs[AGENT] = Proc("agent", ["/usr/bin/agent", "--config=/etc/agent.yaml"], cpu_ticks=300)
    for pid in IDLE:
        t.procs[pid] = Proc("sleep", ["sleep", "infinity"], cpu_ticks=1, rchar=2000)
    return t


def cycle(tree: ProcTree, collector: ProcessesCollector, broker_ticks: int = 100):
    """Move the clock one interval, the broker by broker_ticks (and the host's CPU with it); collect."""
    tree.now += INTERVAL
    tree.procs[BROKER].cpu_ticks += broker_ticks
    tree.host_cpu_ticks += broker_ticks
    root = tree.write()
    samples = collector.collect(root)
    return root.pids_read, {int(dict(s.labels)["pid"]) for s in samples if s.name == "kdiag_process_info"}


def steady(tree: ProcTree) -> ProcessesCollector:
    """A collector past its first full scan and the second read of every pid it found there."""
    collector = ProcessesCollector(log_dirs=["/data/kafka-logs"])
    cycle(tree, collector)
    cycle(tree, collector)
    return collector


def test_idle_processes_are_read_only_by_the_full_scan(tree):
    collector = steady(tree)
    collector.table.full_scan_seconds = 30.0  # 6 cycles to the next full scan, not 24: the same logic, a quarter the time
    read, chosen = cycle(tree, collector)
    assert read == {BROKER} and chosen == {BROKER}
    while tree.now + INTERVAL < collector.table._full_at + collector.table.full_scan_seconds:
        assert cycle(tree, collector)[0] == {BROKER}
    assert cycle(tree, collector)[0] == {BROKER, AGENT, *IDLE}


def test_a_new_pid_is_read_and_chosen_in_the_cycle_it_appears(tree):
    collector = steady(tree)
    tree.procs[4000] = Proc("tar", ["tar", "czf", "/backup/x.tgz", "/data/kafka-logs"], cpu_ticks=20,
                            read_bytes=200 * MB, rchar=200 * MB)
    tree.pgpgin_kb += 200 * 1024
    read, chosen = cycle(tree, collector)
    assert read == {BROKER, 4000}
    assert chosen == {BROKER, 4000}


def test_a_long_running_process_that_starts_walking_is_found_in_that_cycle(tree):
    collector = steady(tree)
    assert cycle(tree, collector, broker_ticks=400)[0] == {BROKER}  # the host's CPU is all the broker's
    tree.procs[AGENT].cpu_ticks += 400  # 0.8 cores over the interval: stat calls, little data
    tree.host_cpu_ticks += 400
    read, chosen = cycle(tree, collector)
    assert read == {BROKER, AGENT, *IDLE}  # the full scan, in this very cycle
    assert AGENT in chosen
    tree.procs[AGENT].cpu_ticks += 400  # still walking
    tree.host_cpu_ticks += 400
    read, chosen = cycle(tree, collector)
    assert read == {BROKER, AGENT} and AGENT in chosen  # moving: read every cycle, the idle ones not


def test_a_long_running_process_that_starts_reading_from_disk_is_found_in_that_cycle(tree):
    collector = steady(tree)
    tree.procs[AGENT].read_bytes += 100 * MB  # 20 MB/s from the disk, almost no CPU
    tree.procs[AGENT].rchar += 100 * MB
    tree.procs[AGENT].cpu_ticks += 5
    tree.host_cpu_ticks += 5
    tree.pgpgin_kb += 100 * 1024
    read, chosen = cycle(tree, collector)
    assert AGENT in read and AGENT in chosen
    assert cycle(tree, collector)[0] == {BROKER, AGENT}


def test_a_page_cache_reader_without_a_cpu_tick_stays_read_and_chosen(tree):
    collector = steady(tree)
    # Ticks are sampled: a reader that wakes for a millisecond between them copies GB from the page cache unseen.
    tree.procs[4000] = Proc("python3", ["python3", "scan.py", "/data/kafka-logs"], cpu_ticks=3, rchar=800 * MB)
    for _ in range(4):
        read, chosen = cycle(tree, collector)
        assert 4000 in read and 4000 in chosen
        tree.procs[4000].rchar += 800 * MB


def test_a_shell_loops_short_commands_are_explained_by_the_shell(tree):
    collector = steady(tree)
    collector.table.moving_seconds = 2 * INTERVAL  # a shell that did not move for two cycles would be read no more
    for n in range(5):  # each cycle the agent's shell runs commands that exit before the next listing
        tree.procs[AGENT].children_ticks += 200  # 0.4 cores, reaped into the shell's cutime; the shell itself idles
        tree.host_cpu_ticks += 200
        read = cycle(tree, collector)[0]
        # Its first wake-up is work nobody explained (a full scan); then it is read each cycle and explains it.
        assert read == ({BROKER, AGENT, *IDLE} if n == 0 else {BROKER, AGENT})


def test_another_users_kafka_process_is_no_broker(tree):
    stranger_argv = ["java", "-cp", "/home/mallory/*", "kafka.Kafka", "/home/mallory/server.properties"]
    tree.procs[4100] = Proc("java", stranger_argv, uid=1234, cpu_ticks=10, read_bytes=90 * MB, rchar=90 * MB,
                            fds=["/home/mallory/bait-0/00000000000000000000.log"])
    collector = ProcessesCollector()
    tree.now += INTERVAL
    samples = collector.collect(tree.write())
    is_broker = {dict(s.labels)["pid"]: s.value for s in samples if s.name == "kdiag_process_is_broker"}
    assert is_broker["2000"] == 1 and is_broker["4100"] == 0  # listed as the top reader it is, not as a broker
    log_dirs = {dict(s.labels)["path"] for s in samples if s.name == "kdiag_kafka_log_dir_info"}
    assert log_dirs == {"/data/kafka-logs"}  # its bait files name no log dir
    assert [p.pid for p in collector.table.brokers()] == [BROKER]


def test_without_the_host_counters_every_cycle_reads_the_whole_table(tree):
    tree.host_counters = False
    collector = ProcessesCollector()
    for _ in range(4):
        assert cycle(tree, collector)[0] == {BROKER, AGENT, *IDLE}
