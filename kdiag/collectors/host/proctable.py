"""The process table read at the cost of the processes that move, not of every process on the host.

Each cycle lists /proc (one directory read) and reads stat and io of only: new pids (at once, cmdline too), the
brokers, and every process seen moving (CPU, I/O or reaped children's CPU) in the last `moving_seconds`. The whole
table is read every `full_scan_seconds`, and at once in any cycle whose host-wide CPU time (/proc/stat) or storage reads
(/proc/vmstat pgpgin) exceed what the processes read this cycle (and their reaped children) explain by
`trigger_cores` or `trigger_read_bytes_per_second`: a long-running process that wakes up and walks or reads the log
dirs is found in the cycle it starts. The CPU trigger sits below foreign_metadata_scanner's 0.1 core: a walk that
slow is no finding, and a lower one fires on every host's background of short commands. Without those two host
files (a fixture tree, an old recording) every cycle reads the whole table, as before.
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

from kdiag.collectors.host.stat import parse_stat as parse_host_stat
from kdiag.collectors.host.vmstat import parse_vmstat
from kdiag.collectors.registry import Shared
from kdiag.core.procfs import (
    BROKER_MAIN_CLASS,
    TICKS_PER_SECOND,
    Stat,
    parse_cmdline,
    parse_key_values,
    parse_stat,
    read_source,
)
from kdiag.core.brokertrust import BrokerTrust, Verdict
from kdiag.core.root import Root

log = logging.getLogger(__name__)

BUSY_MODES = ("user", "nice", "system")  # the modes a process's utime and stime are counted in


class IO(NamedTuple):
    """What kdiag needs from /proc/<pid>/io."""

    read_bytes: int
    rchar: int
    write_bytes: int


NO_IO = IO(0, 0, 0)


class Process(NamedTuple):
    """One process as its stat, cmdline and io tell; broker: it runs kafka.Kafka and the trust rule trusts it."""

    pid: int
    stat: Stat
    argv: list[str]
    io: IO
    broker: bool = False


class Known(NamedTuple):
    """A process as its last read left it: when that was, when it was first read, and when a read last saw its CPU
    or I/O grow."""

    process: Process
    read_at: float
    seen_at: float
    moved_at: float


class Reading(NamedTuple):
    """A process read this cycle, what the read before found (None: a new process) and the seconds between them."""

    process: Process
    before: Process | None
    seconds: float

    def growth(self) -> tuple[float, float, float]:
        """read_bytes, rchar and CPU ticks per second since the read before; a new process's since it started."""
        b = self.before
        base = (0, 0, 0) if b is None else (b.io.read_bytes, b.io.rchar, b.stat.cpu_ticks)
        p = self.process
        return ((p.io.read_bytes - base[0]) / self.seconds, (p.io.rchar - base[1]) / self.seconds,
                (p.stat.cpu_ticks - base[2]) / self.seconds)


class HostWork(NamedTuple):
    """Host-wide CPU seconds in the process modes and bytes read from storage, at one time."""

    at: float
    cpu_seconds: float
    read_bytes: int


def parse_io(text: str, source: str = "/proc/<pid>/io") -> IO:
    """Storage reads, read syscall bytes and storage writes of /proc/<pid>/io."""
    values = parse_key_values(text, source, sep=":")
    try:
        return IO(values["read_bytes"], values["rchar"], values["write_bytes"])
    except KeyError as e:
        raise ValueError(f"{source}: no {e.args[0]} line") from None


def host_work(root: Root) -> HostWork | None:
    """CPU seconds in user, nice and system over all CPUs, and pgpgin in bytes; None when either cannot be read."""
    try:
        text, source = read_source(root, "proc", "stat")
        cpus = parse_host_stat(text, TICKS_PER_SECOND, source).cpu_seconds
        pgpgin = parse_vmstat(*read_source(root, "proc", "vmstat"))["pgpgin"]
    except (OSError, ValueError, KeyError):
        return None
    return HostWork(root.now(), sum(m.get(mode, 0.0) for m in cpus.values() for mode in BUSY_MODES), pgpgin * 1024)


def read_process(root: Root, pid: int, known: Process | None) -> Process:
    """stat and io of a pid; cmdline only when it is new, its pid reused or its comm changed (an exec). broker is
    whether it runs kafka.Kafka: the table's trust rule judges those.

    io is read even when the CPU ticks stand still: ticks are sampled, and a reader that wakes for a millisecond
    between them moves hundreds of MB/s through the page cache without one."""
    stat = parse_stat(*read_source(root, "proc", f"{pid}/stat"))
    if stat.kernel_thread:  # no command line, and none of its I/O is a process scanning the log dirs
        return Process(pid, stat, [], NO_IO)
    same = known is not None and (known.stat.start_ticks, known.stat.comm) == (stat.start_ticks, stat.comm)
    io = parse_io(*read_source(root, "proc", f"{pid}/io"))
    if same and known is not None:
        return Process(pid, stat, known.argv, io, known.broker)
    argv = parse_cmdline(root.read_proc(f"{pid}/cmdline"))
    return Process(pid, stat, argv, io, BROKER_MAIN_CLASS in argv)


def moved(p: Process, before: Process) -> bool:
    """Whether the process, or children it reaped, used CPU or did I/O between two reads."""
    return (p.stat.cpu_ticks, p.stat.children_ticks, p.io) != (before.stat.cpu_ticks, before.stat.children_ticks,
                                                                before.io)


class ProcessTable:
    """Which pids to read each cycle, and what the last read of each left (`known`, by pid)."""

    def __init__(self, full_scan_seconds: float = 120.0, moving_seconds: float = 60.0, trigger_cores: float = 0.08,
                 trigger_read_bytes_per_second: float = 2 * 2**20, trust: BrokerTrust | None = None):
        self.full_scan_seconds = full_scan_seconds
        self.moving_seconds = moving_seconds
        self.trigger_cores = trigger_cores
        self.trigger_read_bytes_per_second = trigger_read_bytes_per_second
        self.trust = trust  # None: every kafka.Kafka process is a broker (fixtures, tests)
        self.verdicts: dict[int, Verdict] = {}  # the trust rule's word on each kafka.Kafka process, by pid
        self.known: dict[int, Known] = {}
        self.full_scans = 0  # how many cycles read the whole table: the benchmark reports it
        self._full_at = -math.inf
        self._host: HostWork | None = None
        self._cycle_at = -math.inf
        self._brokers: list[Process] = []

    def read(self, root: Root) -> list[Reading]:
        """The processes read this cycle, each with its read before."""
        now, host = root.now(), host_work(root)
        listed = [int(e) for e in root.listdir("proc", "") if e.isdigit()]
        before = {pid: self.known[pid] for pid in listed if pid in self.known}
        full = host is None or self._host is None or now - self._full_at >= self.full_scan_seconds
        watched = listed if full else [pid for pid in listed if pid not in before or self._watched(before[pid], now)]
        procs = self._read(root, watched, before)
        if not full and host is not None and self._host is not None and self._unexplained(host, procs, before):
            rest = set(listed) - set(watched)
            procs += self._read(root, [pid for pid in listed if pid in rest], before)
            full = True
        if full:
            self._full_at = now
            self.full_scans += 1
        self.known = dict(before)  # the pids gone from /proc are forgotten
        alive = set(listed)
        self.verdicts = {pid: v for pid, v in self.verdicts.items() if pid in alive}
        for p in procs:
            old = before.get(p.pid)
            if old is None or old.process.stat.start_ticks != p.stat.start_ticks:
                self.known[p.pid] = Known(p, now, now, -math.inf)  # new, or its pid reused
            else:
                self.known[p.pid] = Known(p, now, old.seen_at, now if moved(p, old.process) else old.moved_at)
        # A new process did all its work since the last cycle (the first cycle has none: growth is what it did).
        since_cycle = now - self._cycle_at if math.isfinite(self._cycle_at) else 1.0
        self._host, self._cycle_at = host, now
        self._brokers = [p for p in procs if p.broker]  # one list swapped: other collectors' threads read it
        readings = []
        for p in procs:
            old = before.get(p.pid)
            if old is None or old.process.stat.start_ticks != p.stat.start_ticks:
                readings.append(Reading(p, None, max(since_cycle, 1e-3)))
            else:
                readings.append(Reading(p, old.process, max(now - old.read_at, 1e-3)))
        return readings

    def brokers(self) -> list[Process]:
        """The trusted broker processes the last cycle read (every cycle reads them): for collectors that need their
        pids, at no cost of their own."""
        return self._brokers

    def _watched(self, known: Known, now: float) -> bool:
        # A pid first read last cycle is read once more, for its growth over a whole cycle.
        return known.process.broker or known.seen_at == self._cycle_at or now - known.moved_at <= self.moving_seconds

    def _read(self, root: Root, pids: list[int], before: dict[int, Known]) -> list[Process]:
        procs = []
        for pid in pids:
            try:
                procs.append(read_process(root, pid, k.process if (k := before.get(pid)) else None))
            except OSError:
                continue  # exited since the listing, or not ours to read
        # The candidates read anew (a known process keeps its verdict) are judged together: one read of their names.
        fresh = [p.pid for p in procs if p.broker and (p.pid not in before or before[p.pid].process.argv is not p.argv)]
        if self.trust is None or not fresh:
            return procs
        verdicts = self.trust.judge_all(root, fresh)
        for pid, verdict in verdicts.items():
            if not verdict.trusted and self.verdicts.get(pid) != verdict:
                log.warning("pid %d runs kafka.Kafka but is not taken for a broker: %s", pid, verdict.why)
        self.verdicts = {**self.verdicts, **verdicts}  # swapped whole: other collectors' threads read it
        return [p._replace(broker=False) if p.pid in verdicts and not verdicts[p.pid].trusted else p for p in procs]

    def _unexplained(self, host: HostWork, procs: list[Process], before: dict[int, Known]) -> bool:
        """Whether the host did more work since the last cycle than the processes read in both cycles account for."""
        assert self._host is not None
        seconds = host.at - self._host.at
        if seconds <= 0:
            return False
        cpu_ticks = read_bytes = 0
        for p in procs:
            old = before.get(p.pid)
            # A process's children that exited and were reaped since count as its own: a shell loop's short commands.
            if old is None:  # started since the last listing: all its work was done since
                cpu_ticks += p.stat.cpu_ticks + p.stat.children_ticks
                read_bytes += p.io.read_bytes
            elif old.read_at == self._cycle_at and old.process.stat.start_ticks == p.stat.start_ticks:
                cpu_ticks += p.stat.cpu_ticks + p.stat.children_ticks - old.process.stat.cpu_ticks - \
                    old.process.stat.children_ticks
                read_bytes += p.io.read_bytes - old.process.io.read_bytes
        cores = (host.cpu_seconds - self._host.cpu_seconds - cpu_ticks / TICKS_PER_SECOND) / seconds
        reads = (host.read_bytes - self._host.read_bytes - read_bytes) / seconds
        if cores > self.trigger_cores or reads > self.trigger_read_bytes_per_second:
            log.debug("reading the whole process table: the host did %.3f cores and read %.0f B/s beyond the %d "
                      "processes read", cores, reads, len(procs))
            return True
        return False


def process_table(shared: Shared) -> ProcessTable:
    """The one table of a config's collectors: its brokers are the kafka.Kafka processes the trust rule trusts."""
    return ProcessTable(trust=BrokerTrust(shared.config.kafka.broker_user))
