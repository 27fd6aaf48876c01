"""CPU quota and throttling of the broker's cgroups: cgroup v2 cpu.max and cpu.stat, v1 cpu.cfs_* and cpu.stat.

A quota is enforced where it is set, on the broker's own cgroup or on any above it (a Kubernetes pod and its
container, a systemd slice and its service with CPUQuota=, a Docker container), and the throttling is counted there:
every cgroup from the broker's up to the hierarchy's root that has a quota gives its series.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from kdiag.collectors import Collector
from kdiag.collectors.host._util import reason, skipped_samples
from kdiag.collectors.host.brokerpids import BrokerPid, BrokerPids, broker_pids
from kdiag.collectors.host.mounts import Mount, parse_mounts
from kdiag.collectors.registry import Shared, registered
from kdiag.config.settings import Config
from kdiag.core.procfs import lines, malformed, parse_key_values, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.own import COLLECTOR_SKIPPED_ENTRIES
from kdiag.families.process import (
    PROCESS_CGROUP_CPU_PERIODS_TOTAL,
    PROCESS_CGROUP_CPU_QUOTA_CORES,
    PROCESS_CGROUP_CPU_THROTTLED_PERIODS_TOTAL,
    PROCESS_CGROUP_CPU_THROTTLED_SECONDS_TOTAL,
)

MAX_DEPTH = 16
T = TypeVar("T")

class CgroupEntry(NamedTuple):
    """One line of /proc/PID/cgroup: hierarchy id, its controllers (empty for v2) and the cgroup's path."""

    hierarchy: int
    controllers: tuple[str, ...]
    path: str


class Throttling(NamedTuple):
    """A cgroup's quota in cores and its cpu.stat counts, in the same units under v1 and v2."""

    quota_cores: float
    periods: int
    throttled_periods: int
    throttled_seconds: float


def parse_proc_cgroup(text: str, source: str = "/proc/<pid>/cgroup") -> list[CgroupEntry]:
    """`ID:CONTROLLERS:PATH` lines; v2's is `0::PATH`, and a v1 named hierarchy lists `name=X`."""
    entries = []
    for n, line in lines(text):
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            raise malformed(source, n, line, "expected ID:CONTROLLERS:/PATH")
        entries.append(CgroupEntry(int(parts[0]), tuple(c for c in parts[1].split(",") if c), parts[2]))
    return entries


def parse_cpu_max(text: str, source: str = "cpu.max") -> float | None:
    """Cores of a v2 cpu.max (`QUOTA PERIOD` in microseconds); None for `max PERIOD`, no quota."""
    fields = text.split()
    if len(fields) != 2 or not fields[1].isdigit() or not (fields[0] == "max" or fields[0].isdigit()):
        raise malformed(source, 1, text, "expected QUOTA|max PERIOD")
    return None if fields[0] == "max" or int(fields[1]) == 0 else int(fields[0]) / int(fields[1])


def parse_cfs_quota(quota: str, period: str, source: str = "cpu.cfs_quota_us") -> float | None:
    """Cores of v1 cpu.cfs_quota_us over cpu.cfs_period_us; None for -1, no quota."""
    try:
        q, p = int(quota), int(period)
    except ValueError:
        raise malformed(source, 1, f"{quota.strip()} / {period.strip()}", "expected integers") from None
    return None if q < 0 or p <= 0 else q / p


def throttling(cpu_stat: dict[str, int], quota_cores: float, source: str = "cpu.stat") -> Throttling:
    """A cpu.stat of either version: v2 counts throttled_usec, v1 throttled_time in nanoseconds."""
    if "throttled_usec" in cpu_stat:
        seconds = cpu_stat["throttled_usec"] / 1e6
    elif "throttled_time" in cpu_stat:
        seconds = cpu_stat["throttled_time"] / 1e9
    else:
        raise ValueError(f"{source}: neither throttled_usec nor throttled_time")
    try:
        return Throttling(quota_cores, cpu_stat["nr_periods"], cpu_stat["nr_throttled"], seconds)
    except KeyError as e:
        raise ValueError(f"{source}: no {e.args[0]} line") from None


def hierarchies(mounts: list[Mount], controller: str) -> dict[str, str]:
    """{"v1" or "v2": directory under /sys} of the cgroup hierarchies that can hold the controller's limits."""
    found = {}
    for m in mounts:
        if not m.mountpoint.startswith("/sys/"):
            continue
        if m.fstype == "cgroup2":
            found["v2"] = m.mountpoint.removeprefix("/sys/")
        elif m.fstype == "cgroup" and controller in m.options:
            found["v1"] = m.mountpoint.removeprefix("/sys/")
    return found


def controller_cgroup(entries: list[CgroupEntry], hierarchies: dict[str, str],
                      controller: str) -> tuple[str, str, str] | None:
    """(version, hierarchy directory, cgroup path) where the controller holds the process; v1 first (hybrid hosts
    bind cpu and memory to v1, leaving the v2 tree without them)."""
    for e in entries:
        if controller in e.controllers and "v1" in hierarchies:
            return "v1", hierarchies["v1"], e.path
    for e in entries:
        if e.hierarchy == 0 and not e.controllers and "v2" in hierarchies:
            return "v2", hierarchies["v2"], e.path
    return None


def ancestors(path: str) -> list[str]:
    """A cgroup path and every cgroup above it up to the root ("/"), the path's own first; ".." is refused."""
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ValueError(f"cgroup path {path!r} is not a plain path")
    return ["/" + "/".join(parts[:n]) for n in range(len(parts), -1, -1)][:MAX_DEPTH]


def read_throttling(root: Root, version: str, directory: str) -> Throttling | None:
    """One cgroup's quota and throttling; None when it sets no quota (or, the v2 root, has no cpu.max)."""
    if version == "v2":
        if not root.exists("sys", f"{directory}/cpu.max"):
            return None
        quota = parse_cpu_max(*read_source(root, "sys", f"{directory}/cpu.max"))
    else:
        quota = parse_cfs_quota(root.read("sys", f"{directory}/cpu.cfs_quota_us"),
                                root.read("sys", f"{directory}/cpu.cfs_period_us"), f"{root.sys}/{directory}")
    if quota is None:
        return None
    text, source = read_source(root, "sys", f"{directory}/cpu.stat")
    return throttling(parse_key_values(text, source), quota, source)


@registered(after=("processes",))
class CgroupCpuCollector(Collector):
    """Quota and throttling of every cgroup with a CPU quota that holds a broker process."""

    name = "cgroup_cpu"
    families = (
        PROCESS_CGROUP_CPU_QUOTA_CORES, PROCESS_CGROUP_CPU_PERIODS_TOTAL,
        PROCESS_CGROUP_CPU_THROTTLED_PERIODS_TOTAL, PROCESS_CGROUP_CPU_THROTTLED_SECONDS_TOTAL,
        COLLECTOR_SKIPPED_ENTRIES,
    )

    def __init__(self, brokers: BrokerPids | None = None):
        self.brokers = brokers or BrokerPids()

    @classmethod
    def from_config(cls, config: Config, shared: Shared) -> CgroupCpuCollector:
        """Over the broker lookup the config's collectors share."""
        return cls(shared.get(broker_pids))

    def collect(self, root: Root) -> list[Sample]:
        """Series per broker pid and limiting cgroup; a broker whose cgroup cannot be read is left out and counted."""
        return limiting_cgroup_samples(self.name, root, self.brokers.brokers(root), "cpu", read_throttling,
                                       throttling_samples)


def limiting_cgroup_samples(collector: str, root: Root, brokers: list[BrokerPid], controller: str,
                            read: Callable[[Root, str, str], T | None],
                            samples_of: Callable[..., list[Sample]]) -> list[Sample]:
    """samples_of(what read(root, version, directory) found, pid=, comm=, cgroup=) for each cgroup from each broker's
    own up to the root where the controller sets a limit (read gives None where it sets none); a broker whose cgroups
    cannot be read is left out and counted by reason in the collector's skipped series."""
    controller_hierarchies = hierarchies(parse_mounts(*read_source(root, "proc", "mounts")), controller)
    samples: list[Sample] = []
    skipped: Counter[str] = Counter()
    for broker in brokers:
        try:
            entries = parse_proc_cgroup(*read_source(root, "proc", f"{broker.pid}/cgroup"))
            where = controller_cgroup(entries, controller_hierarchies, controller)
            if where is None:
                continue
            version, base, path = where
            for cgroup in ancestors(path):
                limit = read(root, version, f"{base}{cgroup}".rstrip("/"))
                if limit is not None:
                    samples += samples_of(limit, pid=broker.pid, comm=broker.comm, cgroup=cgroup)
        except OSError as e:
            skipped[reason(e)] += 1
        except ValueError:
            skipped["malformed"] += 1
    return samples + skipped_samples(collector, skipped)


def throttling_samples(t: Throttling, **labels: object) -> list[Sample]:
    """The four series of one limiting cgroup."""
    return [
        PROCESS_CGROUP_CPU_QUOTA_CORES.sample(t.quota_cores, **labels),
        PROCESS_CGROUP_CPU_PERIODS_TOTAL.sample(t.periods, **labels),
        PROCESS_CGROUP_CPU_THROTTLED_PERIODS_TOTAL.sample(t.throttled_periods, **labels),
        PROCESS_CGROUP_CPU_THROTTLED_SECONDS_TOTAL.sample(t.throttled_seconds, **labels),
    ]
