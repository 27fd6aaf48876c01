"""CPU time, context switches and process counts from /proc/stat."""

from __future__ import annotations

import os
from typing import NamedTuple

from kdiag.collectors import Collector
from kdiag.collectors.host._util import ints
from kdiag.collectors.registry import registered
from kdiag.core.procfs import lines, malformed
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.host import CONTEXT_SWITCHES_TOTAL, CPU_SECONDS_TOTAL, FORKS_TOTAL, PROCS_BLOCKED, PROCS_RUNNING

SOURCE = "/proc/stat"
# Columns of a cpuN line in order; guest and guest_nice are already counted in user and nice.
MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# /proc/stat key -> family.
_COUNTS = {"ctxt": CONTEXT_SWITCHES_TOTAL, "processes": FORKS_TOTAL, "procs_running": PROCS_RUNNING,
           "procs_blocked": PROCS_BLOCKED}


class Stat(NamedTuple):
    """Parsed /proc/stat: seconds per CPU and mode, and the counts of _COUNTS by their /proc/stat key."""

    cpu_seconds: dict[str, dict[str, float]]
    counts: dict[str, int]


def parse_stat(text: str, ticks_per_second: float = 100, source: str = SOURCE) -> Stat:
    """Per-CPU mode seconds (the aggregate cpu line skipped) and the scalar counts of /proc/stat."""
    cpus: dict[str, dict[str, float]] = {}
    counts = {}
    for n, line in lines(text):
        key, *values = line.split()
        if key.startswith("cpu") and key[3:].isdigit():
            # Newer kernels may append columns: zip drops what MODES does not name.
            ticks = ints(values, source, n, line)
            cpus[key[3:]] = {mode: t / ticks_per_second for mode, t in zip(MODES, ticks, strict=False)}
        elif key in _COUNTS:
            if len(values) != 1:
                raise malformed(source, n, line, "expected one value")
            counts[key] = ints(values, source, n, line)[0]
    return Stat(cpus, counts)


@registered()
class StatCollector(Collector):
    """CPU seconds per mode, context switches, forks and runnable/blocked threads."""

    name = "stat"
    families = (CPU_SECONDS_TOTAL, *_COUNTS.values())

    def collect(self, root: Root) -> list[Sample]:
        """Samples of /proc/stat, ticks converted with the kernel's USER_HZ."""
        stat = parse_stat(root.read_proc("stat"), os.sysconf("SC_CLK_TCK"))
        samples = [
            CPU_SECONDS_TOTAL.sample(seconds, cpu=cpu, mode=mode)
            for cpu, modes in stat.cpu_seconds.items()
            for mode, seconds in modes.items()
        ]
        for key, value in stat.counts.items():
            samples.append(_COUNTS[key].sample(value))
        return samples
