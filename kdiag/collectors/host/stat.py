"""CPU time, context switches and process counts from /proc/stat."""

from __future__ import annotations

import os
from typing import NamedTuple

from kdiag.core.procfs import lines, malformed
from kdiag.collectors.host._util import ints
from kdiag.core.root import Root
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample
from kdiag.collectors import Collector
from kdiag.collectors.registry import registered

SOURCE = "/proc/stat"
# Columns of a cpuN line in order; guest and guest_nice are already counted in user and nice.
MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# /proc/stat key -> (metric, kind, HELP).
_COUNTS = {
    "ctxt": ("kdiag_context_switches_total", COUNTER, "Context switches since boot."),
    "processes": ("kdiag_forks_total", COUNTER, "Processes and threads created since boot."),
    "procs_running": ("kdiag_procs_running", GAUGE, "Threads runnable or running now."),
    "procs_blocked": ("kdiag_procs_blocked", GAUGE, "Threads blocked waiting for I/O now."),
}


HELP = {
    "kdiag_cpu_seconds_total": "Seconds each CPU spent in each mode.",
    **{metric: text for metric, _, text in _COUNTS.values()},
}


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
    help = HELP

    def collect(self, root: Root) -> list[Sample]:
        """Samples of /proc/stat, ticks converted with the kernel's USER_HZ."""
        stat = parse_stat(root.read_proc("stat"), os.sysconf("SC_CLK_TCK"))
        samples = [
            sample("kdiag_cpu_seconds_total", seconds, COUNTER, cpu=cpu, mode=mode)
            for cpu, modes in stat.cpu_seconds.items()
            for mode, seconds in modes.items()
        ]
        for key, value in stat.counts.items():
            metric, kind, _ = _COUNTS[key]
            samples.append(sample(metric, value, kind))
        return samples
