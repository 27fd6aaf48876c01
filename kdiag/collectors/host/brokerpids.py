"""The local broker processes' pids, for collectors that read per-broker files (cgroup, threads).

A full scan reads every /proc/PID/cmdline (5,000 reads on a busy host), so it runs only at the first call, when a known
broker has gone (a restart: its successor is found at once), every `idle_rescan_seconds` while no broker is known (one
starting), and every `rescan_seconds` otherwise (a broker started beside it). In between, one /proc/PID/stat read per
known broker checks that the pid still runs the same process.
"""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

from kdiag.core.procfs import BROKER_MAIN_CLASS, parse_cmdline, parse_stat, read_source
from kdiag.collectors.host.proctable import ProcessTable, process_table
from kdiag.collectors.registry import Shared
from kdiag.core.brokertrust import BrokerTrust
from kdiag.core.root import Root


class BrokerPid(NamedTuple):
    """One broker process: its pid, name and start time (which tells a reused pid)."""

    pid: int
    comm: str
    start_ticks: int


class BrokerPids:
    """A cached lookup of the broker processes, shared by the collectors that need them."""

    def __init__(self, rescan_seconds: float = 300.0, idle_rescan_seconds: float = 60.0,
                 trust: BrokerTrust | None = None, table: ProcessTable | None = None):
        self.trust = trust  # the kafka.Kafka processes it trusts are brokers (None: every one)
        self.table = table  # the processes collector's table: its brokers are read every cycle, no scan needed
        self.rescan_seconds = rescan_seconds
        self.idle_rescan_seconds = idle_rescan_seconds
        self._known: list[BrokerPid] = []
        self._scanned_at = -math.inf
        self._lock = threading.Lock()  # the collectors sharing it may run at the same time

    def brokers(self, root: Root) -> list[BrokerPid]:
        """The broker processes now: the cached ones still running, or a fresh scan when one went or it is time."""
        with self._lock:
            return self._brokers(root)

    def _brokers(self, root: Root) -> list[BrokerPid]:
        if self.table is not None:
            return [BrokerPid(p.pid, p.stat.comm, p.stat.start_ticks) for p in self.table.brokers()]
        alive = [b for b in self._known if _same_process(root, b)]
        every = self.rescan_seconds if alive else self.idle_rescan_seconds
        if len(alive) < len(self._known) or root.now() - self._scanned_at >= every:
            alive = scan(root, self.trust)
            self._scanned_at = root.now()
        self._known = alive
        return alive


def _same_process(root: Root, broker: BrokerPid) -> bool:
    try:
        return parse_stat(*read_source(root, "proc", f"{broker.pid}/stat")).start_ticks == broker.start_ticks
    except (OSError, ValueError):
        return False


def scan(root: Root, trust: BrokerTrust | None = None) -> list[BrokerPid]:
    """Every process whose command line runs kafka.Kafka and that the trust rule trusts (a look-alike is no broker)."""
    found = []
    for entry in root.listdir("proc", ""):
        if not entry.isdigit():
            continue
        try:
            if BROKER_MAIN_CLASS in parse_cmdline(root.read_proc(f"{entry}/cmdline")):
                stat = parse_stat(*read_source(root, "proc", f"{entry}/stat"))
                found.append(BrokerPid(int(entry), stat.comm, stat.start_ticks))
        except (OSError, ValueError):
            continue  # exited meanwhile, or not readable
    if trust is None:
        return found
    verdicts = trust.judge_all(root, [b.pid for b in found])
    return [b for b in found if verdicts[b.pid].trusted]


def broker_pids(shared: Shared) -> BrokerPids:
    """The broker lookup of a config's collectors: the processes collector's table while it runs (it reads the
    brokers every cycle), else a scan of their own."""
    table = shared.get(process_table) if "processes" in shared.enabled else None
    return BrokerPids(trust=BrokerTrust(shared.config.kafka.broker_user), table=table)
