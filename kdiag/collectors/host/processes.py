"""The processes that matter to Kafka: its brokers, and whoever reads most from storage right now."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from typing import NamedTuple

from kdiag.collectors import Collector
from kdiag.collectors.host.mounts import device_for_path, parse_mounts
from kdiag.collectors.host.statvfs import samples_from_statvfs, statvfs_bytes
from kdiag.collectors.host.proctable import Process, ProcessTable, Reading, process_table
from kdiag.collectors.registry import Shared, registered
from kdiag.config.settings import Config
from kdiag.core.blockdev import disks_behind
from kdiag.core.procfs import TICKS_PER_SECOND, malformed, parse_stat, read_source
from kdiag.core.redact import MASKED, OFF, cmdline_label
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.core.brokertrust import BrokerTrust
from kdiag.core.mountinfo import Placed, block_device, place
from kdiag.families.process import (
    KAFKA_LOG_DIR_INFO,
    PROCESS_BROKER_REFUSED,
    PROCESS_BROKER_STARTED_BY,
    PROCESS_CPU_SECONDS_TOTAL,
    PROCESS_GC_CPU_SECONDS_TOTAL,
    PROCESS_INFO,
    PROCESS_IS_BROKER,
    PROCESS_IS_LOAD_GENERATOR,
    PROCESS_JVM_MAX_HEAP_BYTES,
    PROCESS_MAX_FDS,
    PROCESS_OPEN_FDS,
    PROCESS_RCHAR_BYTES_TOTAL,
    PROCESS_READ_BYTES_TOTAL,
    PROCESS_TOUCHES_LOG_DIR,
    PROCESS_WRITTEN_BYTES_TOTAL,
)
from kdiag.families.storage import FILESYSTEM_AVAIL_BYTES, FILESYSTEM_SIZE_BYTES
from kdiag.kafka.jvm import GC_THREAD, is_load_generator, jvm_max_heap_bytes

_SEGMENT_FILE = re.compile(r"\d+\.(log|index|timeindex)")
_PARTITION_DIR = re.compile(r".+-\d+")


class Details(NamedTuple):
    """What is read only for the chosen processes; fd_targets is empty when the links were not followed."""

    cwd: str
    open_fds: int
    fd_targets: list[str]
    max_fds: float


def parse_max_fds(text: str, source: str = "/proc/<pid>/limits") -> float:
    """Soft "Max open files" limit of /proc/<pid>/limits; inf when unlimited."""
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("Max open files"):
            soft = line.split()[3]
            try:
                return math.inf if soft == "unlimited" else float(soft)
            except ValueError:
                raise malformed(source, n, line) from None
    raise ValueError(f"{source}: no 'Max open files' line")


def log_dir_of(target: str) -> str | None:
    """The log dir holding a segment file path (<log dir>/<topic>-<partition>/<offset>.log), else None."""
    partition_dir, name = os.path.split(target)
    if _SEGMENT_FILE.fullmatch(name) and _PARTITION_DIR.fullmatch(os.path.basename(partition_dir)):
        return os.path.dirname(partition_dir)
    return None


def path_arguments(argv: list[str]) -> list[str]:
    """Absolute paths among command line arguments, including `--opt=/path` values."""
    values = (arg.split("=", 1)[-1] for arg in argv)
    return [os.path.normpath(v) for v in values if v.startswith("/")]


def touches(paths: Iterable[str], log_dirs: Iterable[str], ancestors: bool = True) -> bool:
    """Whether any path is a log dir, inside one, or (with ancestors) above one ("/" excepted: it holds all)."""
    dirs = [d.rstrip("/") for d in log_dirs]
    for path in paths:
        p = path.rstrip("/")
        if p and any(p == d or p.startswith(d + "/") or (ancestors and d.startswith(p + "/")) for d in dirs):
            return True
    return False


def top_readers(readings: list[Reading], top_n: int) -> list[Process]:
    """The top_n non-broker processes by read_bytes per second since their last read, then rchar; idle ones never."""
    ranked = []
    for r in readings:
        read_bytes, rchar, _ = r.growth()
        if not r.process.broker and (read_bytes > 0 or rchar > 0):
            ranked.append(((read_bytes, rchar), r.process))
    ranked.sort(key=lambda item: (-item[0][0], -item[0][1], item[1].pid))
    return [p for _, p in ranked[:top_n]]


def top_cpu(readings: list[Reading], top_n: int) -> list[Process]:
    """The top_n non-broker processes by CPU per second since their last read: metadata walkers and load generators
    read little."""
    ranked = []
    for r in readings:
        if r.before is not None and not r.process.broker and (cpu := r.growth()[2]) > 0:
            ranked.append((cpu, r.process))
    ranked.sort(key=lambda item: (-item[0], item[1].pid))
    return [p for _, p in ranked[:top_n]]


@registered()
class ProcessesCollector(Collector):
    """Brokers and the top_n storage readers: I/O, CPU, fds, and whether they touch a Kafka log dir.

    The kafka.Kafka processes kdiag.core.brokertrust trusts are brokers: a refused one is an ordinary process. The
    processes read each cycle are ProcessTable's (the moving ones, new pids, the whole table now and then);
    `table.brokers()` gives the brokers to other collectors at no cost.
    """

    name = "processes"
    families = (
        KAFKA_LOG_DIR_INFO, PROCESS_READ_BYTES_TOTAL, PROCESS_RCHAR_BYTES_TOTAL, PROCESS_WRITTEN_BYTES_TOTAL,
        PROCESS_CPU_SECONDS_TOTAL, PROCESS_OPEN_FDS, PROCESS_MAX_FDS, PROCESS_IS_BROKER, PROCESS_TOUCHES_LOG_DIR,
        PROCESS_JVM_MAX_HEAP_BYTES, PROCESS_IS_LOAD_GENERATOR, PROCESS_GC_CPU_SECONDS_TOTAL, PROCESS_INFO,
        PROCESS_BROKER_REFUSED, PROCESS_BROKER_STARTED_BY, FILESYSTEM_SIZE_BYTES, FILESYSTEM_AVAIL_BYTES,
    )

    def __init__(self, top_n: int = 5, log_dirs: Iterable[str] = (), rediscover_seconds: float = 300.0,
                 cmdline: str = MASKED, broker_user: str = "kafka", table: ProcessTable | None = None):
        self.top_n = top_n
        self.cmdline = cmdline  # processes.cmdline: masked | full | off
        self.log_dirs = [os.path.normpath(d) for d in log_dirs]
        self.rediscover_seconds = rediscover_seconds
        self.table = table or ProcessTable(trust=BrokerTrust(broker_user))
        self._discovered: list[Placed] = []
        self._discovered_at = -math.inf
        self._brokers: set[tuple[int, int]] = set()

    @classmethod
    def from_config(cls, config: Config, shared: Shared) -> ProcessesCollector:
        """With `processes:`, over the table the collectors reading the brokers' files share."""
        p = config.processes
        return cls(p.top_n, p.log_dirs, cmdline=p.cmdline, table=shared.get(process_table))

    def collect(self, root: Root) -> list[Sample]:
        """Samples for brokers and top readers, and kdiag_kafka_log_dir_info for each log dir."""
        readings = self.table.read(root)
        brokers = [r.process for r in readings if r.process.broker]
        readers = top_readers(readings, self.top_n)
        chosen = brokers + readers + [p for p in top_cpu(readings, self.top_n) if p not in readers]
        # A broker holds thousands of segment files: follow its fd links only to (re)discover the log dirs.
        broker_keys = {(p.pid, p.stat.start_ticks) for p in brokers}
        discover = not self.log_dirs and (
            broker_keys != self._brokers or root.now() - self._discovered_at >= self.rediscover_seconds)
        inspected = []
        for p in chosen:
            try:
                inspected.append((p, read_details(root, p.pid, follow_fds=discover or not p.broker)))
            except OSError:
                continue  # exited since the scan, or not ours to inspect
        if discover:
            # A broker in a container names its files as its mount namespace sees them: mapped to this host's.
            found = sorted({d for p, det in inspected if p.broker
                            for d in place(root, p.pid, discover_log_dirs([det.fd_targets]))})
            # Keep what was known when a rediscovery sees no segment file (a replay without the fd links).
            self._discovered = found or (self._discovered if broker_keys == self._brokers else [])
            self._discovered_at, self._brokers = root.now(), broker_keys
        placed = [Placed(d) for d in self.log_dirs] or self._discovered
        log_dirs = [d.path for d in placed]
        samples = log_dir_samples(root, placed) if placed else []
        for p, d in inspected:
            samples += process_samples(p, d, log_dirs, self.cmdline)
            if is_load_generator(p.argv) and (ticks := gc_thread_ticks(root, p.pid)) is not None:
                samples.append(PROCESS_GC_CPU_SECONDS_TOTAL.sample(ticks / TICKS_PER_SECOND, pid=p.pid, comm=p.stat.comm))
        known = self.table.known
        for pid, verdict in sorted(self.table.verdicts.items()):
            comm = known[pid].process.stat.comm if pid in known else ""
            if not verdict.trusted:
                samples.append(PROCESS_BROKER_REFUSED.sample(1, pid=pid, comm=comm, reason=verdict.why))
                continue
            w = verdict.workload
            samples.append(PROCESS_BROKER_STARTED_BY.sample(1, pid=pid, comm=comm, reason=verdict.why,
                                                           service=w.name if w.kind == "service" else "",
                                                           container=w.name if w.kind == "container" else "",
                                                           pod=w.pod))
        return samples


CONTAINER_STATVFS = "container_statvfs"  # not a file: recordings keep it with the other non-file states


def read_details(root: Root, pid: int, follow_fds: bool = True) -> Details:
    """cwd, open file count (and targets when following them) and fd limit; fds closed meanwhile are skipped."""
    targets = []
    if follow_fds:
        fds = root.listdir("proc", f"{pid}/fd")
        count = len(fds)
        for fd in fds:
            try:
                targets.append(root.readlink("proc", f"{pid}/fd/{fd}"))
            except OSError:
                continue
    else:
        count = root.count_fds(pid)
    max_fds = parse_max_fds(*read_source(root, "proc", f"{pid}/limits"))
    return Details(root.readlink("proc", f"{pid}/cwd"), count, targets, max_fds)


def gc_thread_ticks(root: Root, pid: int, max_threads: int = 4096) -> int | None:
    """CPU ticks (utime+stime) the JVM's garbage collector threads have used; None when its threads cannot be listed."""
    try:
        tids = root.listdir("proc", f"{pid}/task")[:max_threads]
    except OSError:
        return None
    ticks = 0
    for tid in tids:
        try:
            stat = parse_stat(*read_source(root, "proc", f"{pid}/task/{tid}/stat"))
        except OSError:
            continue  # the thread ended meanwhile
        if GC_THREAD.match(stat.comm):
            ticks += stat.cpu_ticks
    return ticks


def discover_log_dirs(fd_target_lists: Iterable[list[str]]) -> list[str]:
    """Log dirs of the segment files brokers hold open."""
    return sorted({d for targets in fd_target_lists for t in targets if (d := log_dir_of(t))})


def log_dir_samples(root: Root, log_dirs: list[Placed]) -> list[Sample]:
    """kdiag_kafka_log_dir_info per log dir and device holding it: its /sys/block name and the disks below (LVM, md);
    one this host does not mount (a container's volume) by its filesystem's major:minor, its mountpoint the one in
    the container's root as this host reaches it (/proc/PID/root/...), whose size and free space statvfs gives."""
    mounts = parse_mounts(*read_source(root, "proc", "mounts"))
    unmounted = [p for p in log_dirs if p.device and p.rootfs]
    samples = container_space(root, unmounted) if unmounted else []
    for path, majmin, source, _, inside, rootfs in log_dirs:
        if majmin:
            name = block_device(root, majmin)
            device, mountpoint = (f"/dev/{name}" if name else source), (rootfs + inside if rootfs else "")
        else:
            device, mountpoint = device_for_path(mounts, path)
        for disk in disks_behind(root, device) if device.startswith("/dev/") else [device]:
            samples.append(KAFKA_LOG_DIR_INFO.sample(1, path=path, device=disk, mountpoint=mountpoint))
    return samples


def container_space(root: Root, log_dirs: list[Placed]) -> list[Sample]:
    """kdiag_filesystem_size_bytes and _avail_bytes of the filesystems holding log dirs this host does not mount,
    statvfs(2) of each through /proc/PID/root (recorded as the statvfs collector's state is)."""
    by_mount = {p.rootfs + p.mountpoint: p for p in log_dirs}
    try:
        state = root.kafka(CONTAINER_STATVFS, lambda: statvfs_bytes(sorted(by_mount)))
    except KeyError:
        return []  # recorded before kdiag kept it
    mounts = {m: (f"/dev/{name}" if (name := block_device(root, p.device)) else p.source, p.fstype)
              for m, p in by_mount.items()}
    return samples_from_statvfs(state, mounts)


def process_samples(p: Process, d: Details, log_dirs: list[str], cmdline: str = MASKED) -> list[Sample]:
    """The per-process series of one chosen process; the cmdline label is masked, full, or left out (off)."""
    labels = {"pid": p.pid, "comm": p.stat.comm}
    # A broker's log dirs are its own, whether or not its links were followed this time.
    # `du -sh /data` walks the log dirs below its argument; a process merely working in /data or $HOME does not.
    touched = (p.broker and bool(log_dirs)) or touches(path_arguments(p.argv), log_dirs) or touches(
        [d.cwd, *d.fd_targets], log_dirs, ancestors=False)
    info = {} if cmdline == OFF else {"cmdline": cmdline_label(p.argv, cmdline)}
    return [
        PROCESS_READ_BYTES_TOTAL.sample(p.io.read_bytes, **labels),
        PROCESS_RCHAR_BYTES_TOTAL.sample(p.io.rchar, **labels),
        PROCESS_WRITTEN_BYTES_TOTAL.sample(p.io.write_bytes, **labels),
        PROCESS_CPU_SECONDS_TOTAL.sample(p.stat.cpu_ticks / TICKS_PER_SECOND, **labels),
        PROCESS_OPEN_FDS.sample(d.open_fds, **labels),
        PROCESS_MAX_FDS.sample(d.max_fds, **labels),
        PROCESS_IS_BROKER.sample(int(p.broker), **labels),
        PROCESS_TOUCHES_LOG_DIR.sample(int(touched), **labels),
        PROCESS_IS_LOAD_GENERATOR.sample(int(is_load_generator(p.argv)), **labels),
        PROCESS_INFO.sample(1, **labels, **info, cwd=d.cwd),
        *([PROCESS_JVM_MAX_HEAP_BYTES.sample(heap, **labels)] if (heap := jvm_max_heap_bytes(p.argv)) else []),
    ]
