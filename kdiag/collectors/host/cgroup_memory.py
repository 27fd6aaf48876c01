"""Memory limit and use of the broker's cgroups: cgroup v2 memory.max, memory.current, memory.events and memory.stat,
v1 memory.limit_in_bytes, memory.usage_in_bytes, memory.failcnt, memory.oom_control and memory.stat.

As with a CPU quota (cgroup_cpu), a limit is enforced where it is set, on the broker's own cgroup or any above it (a
Kubernetes pod and its container, a systemd service with MemoryMax=, a Docker container): every cgroup from the
broker's up to the hierarchy's root that sets a memory limit gives its series.
"""

from __future__ import annotations

from typing import NamedTuple

from kdiag.collectors import Collector
from kdiag.collectors.host.brokerpids import BrokerPids, broker_pids
from kdiag.collectors.host.cgroup_cpu import limiting_cgroup_samples
from kdiag.collectors.registry import Shared, registered
from kdiag.config.settings import Config
from kdiag.core.procfs import malformed, parse_key_values, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.own import COLLECTOR_SKIPPED_ENTRIES
from kdiag.families.process import (
    PROCESS_CGROUP_MEMORY_BYTES,
    PROCESS_CGROUP_MEMORY_LIMIT_BYTES,
    PROCESS_CGROUP_MEMORY_LIMIT_HITS_TOTAL,
    PROCESS_CGROUP_MEMORY_OOM_KILLS_TOTAL,
    PROCESS_CGROUP_MEMORY_USAGE_BYTES,
)

# v1 says "no limit" with the largest page-aligned long, 2**63 less one page (4 KiB to 64 KiB).
V1_UNLIMITED = 2**63 - 2**16

class MemoryUse(NamedTuple):
    """A limiting cgroup's limit, use and counts, the same under v1 and v2; oom_kills None where v1 has none (< 4.13)."""

    limit_bytes: int
    usage_bytes: int
    limit_hits: int
    oom_kills: int | None
    anon_bytes: int
    file_bytes: int


def parse_bytes(text: str, source: str) -> int:
    """A file holding one byte count or counter (memory.current, memory.usage_in_bytes, memory.failcnt)."""
    value = text.strip()
    if not value.isdigit():
        raise malformed(source, 1, text, "expected a number")
    return int(value)


def parse_limit(text: str, source: str, version: str) -> int | None:
    """The limit in bytes of v2 memory.max or v1 memory.limit_in_bytes; None for no limit (`max`, v1's largest)."""
    if version == "v2" and text.strip() == "max":
        return None
    limit = parse_bytes(text, source)
    return None if version == "v1" and limit >= V1_UNLIMITED else limit


def field(values: dict[str, int], key: str, source: str) -> int:
    """values[key]; a ValueError naming the file without that line."""
    try:
        return values[key]
    except KeyError:
        raise ValueError(f"{source}: no {key} line") from None


def read_memory(root: Root, version: str, directory: str) -> MemoryUse | None:
    """One cgroup's limit and use; None when it sets no limit (or, the v2 root, has no memory.max)."""
    def read(name: str) -> tuple[str, str]:
        return read_source(root, "sys", f"{directory}/{name}")

    oom_kills: int | None
    if version == "v2":
        if not root.exists("sys", f"{directory}/memory.max"):
            return None
        limit = parse_limit(*read("memory.max"), "v2")
        if limit is None:
            return None
        text, source = read("memory.events")
        events = parse_key_values(text, source)
        hits, oom_kills = field(events, "max", source), field(events, "oom_kill", source)
        usage = parse_bytes(*read("memory.current"))
        anon, file = "anon", "file"
    else:
        limit = parse_limit(*read("memory.limit_in_bytes"), "v1")
        if limit is None:
            return None
        hits = parse_bytes(*read("memory.failcnt"))
        oom_kills = parse_key_values(*read("memory.oom_control")).get("oom_kill")
        usage = parse_bytes(*read("memory.usage_in_bytes"))
        anon, file = "total_rss", "total_cache"  # the hierarchical counts, as v2's are
    text, source = read("memory.stat")
    stat = parse_key_values(text, source)
    return MemoryUse(limit, usage, hits, oom_kills, field(stat, anon, source), field(stat, file, source))


@registered(after=("processes",))
class CgroupMemoryCollector(Collector):
    """Limit, use, limit hits and OOM kills of every cgroup with a memory limit that holds a broker process."""

    name = "cgroup_memory"
    families = (
        PROCESS_CGROUP_MEMORY_LIMIT_BYTES, PROCESS_CGROUP_MEMORY_USAGE_BYTES,
        PROCESS_CGROUP_MEMORY_LIMIT_HITS_TOTAL, PROCESS_CGROUP_MEMORY_OOM_KILLS_TOTAL, PROCESS_CGROUP_MEMORY_BYTES,
        COLLECTOR_SKIPPED_ENTRIES,
    )

    def __init__(self, brokers: BrokerPids | None = None):
        self.brokers = brokers or BrokerPids()

    @classmethod
    def from_config(cls, config: Config, shared: Shared) -> CgroupMemoryCollector:
        """Over the broker lookup the config's collectors share."""
        return cls(shared.get(broker_pids))

    def collect(self, root: Root) -> list[Sample]:
        """Series per broker pid and limiting cgroup; a broker whose cgroup cannot be read is left out and counted."""
        return limiting_cgroup_samples(self.name, root, self.brokers.brokers(root), "memory", read_memory, memory_samples)


def memory_samples(m: MemoryUse, **labels: object) -> list[Sample]:
    """The series of one limiting cgroup."""
    samples = [
        PROCESS_CGROUP_MEMORY_LIMIT_BYTES.sample(m.limit_bytes, **labels),
        PROCESS_CGROUP_MEMORY_USAGE_BYTES.sample(m.usage_bytes, **labels),
        PROCESS_CGROUP_MEMORY_LIMIT_HITS_TOTAL.sample(m.limit_hits, **labels),
        PROCESS_CGROUP_MEMORY_BYTES.sample(m.anon_bytes, **labels, type="anon"),
        PROCESS_CGROUP_MEMORY_BYTES.sample(m.file_bytes, **labels, type="file"),
    ]
    if m.oom_kills is not None:
        samples.append(PROCESS_CGROUP_MEMORY_OOM_KILLS_TOTAL.sample(m.oom_kills, **labels))
    return samples
