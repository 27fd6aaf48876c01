"""Paging, swapping, reclaim and OOM counters from /proc/vmstat."""

from __future__ import annotations

from kdiag.core.procfs import parse_key_values, read_source
from kdiag.core.root import Root
from kdiag.core.sample import COUNTER, Sample, sample
from kdiag.collectors import Collector
from kdiag.collectors.registry import registered

SOURCE = "/proc/vmstat"

FIELDS = {
    "pswpin": "Pages swapped in.",
    "pswpout": "Pages swapped out.",
    "pgpgin": "Kilobytes paged in from storage.",
    "pgpgout": "Kilobytes paged out to storage.",
    "pgmajfault": "Major page faults (needing a read from storage).",
    "pgfault": "Page faults.",
    "pgsteal_kswapd": "Pages reclaimed by kswapd.",
    "pgsteal_direct": "Pages reclaimed directly by allocating processes.",
    "pgscan_kswapd": "Pages scanned by kswapd.",
    "pgscan_direct": "Pages scanned directly by allocating processes.",
    "oom_kill": "Processes killed by the OOM killer.",
}


def parse_vmstat(text: str, source: str = SOURCE) -> dict[str, int]:
    """Every `name value` line of /proc/vmstat."""
    return parse_key_values(text, source)


HELP = {f"kdiag_vmstat_{field}_total": text for field, text in FIELDS.items()}


@registered()
class VmstatCollector(Collector):
    """Selected /proc/vmstat counters; ones this kernel lacks are left out."""

    name = "vmstat"
    help = HELP

    def collect(self, root: Root) -> list[Sample]:
        """One counter per selected field present in /proc/vmstat."""
        values = parse_vmstat(*read_source(root, "proc", "vmstat"))
        return [sample(f"kdiag_vmstat_{f}_total", values[f], COUNTER) for f in FIELDS if f in values]
