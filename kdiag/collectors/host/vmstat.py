"""Paging, swapping, reclaim and OOM counters from /proc/vmstat."""

from __future__ import annotations

from kdiag.collectors import Collector
from kdiag.collectors.registry import registered
from kdiag.core.procfs import parse_key_values, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.host import VMSTAT

SOURCE = "/proc/vmstat"



def parse_vmstat(text: str, source: str = SOURCE) -> dict[str, int]:
    """Every `name value` line of /proc/vmstat."""
    return parse_key_values(text, source)


@registered()
class VmstatCollector(Collector):
    """Selected /proc/vmstat counters; ones this kernel lacks are left out."""

    name = "vmstat"
    families = tuple(VMSTAT.values())

    def collect(self, root: Root) -> list[Sample]:
        """One counter per selected field present in /proc/vmstat."""
        values = parse_vmstat(*read_source(root, "proc", "vmstat"))
        return [family.sample(values[f]) for f, family in VMSTAT.items() if f in values]
