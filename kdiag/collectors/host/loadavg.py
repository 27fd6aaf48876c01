"""System load averages from /proc/loadavg."""

from __future__ import annotations

from kdiag.collectors import Collector
from kdiag.collectors.registry import registered
from kdiag.core.procfs import malformed, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.host import LOAD

SOURCE = "/proc/loadavg"


def parse_loadavg(text: str, source: str = SOURCE) -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages."""
    parts = text.split()
    try:
        return float(parts[0]), float(parts[1]), float(parts[2])
    except (IndexError, ValueError):
        raise malformed(source, 1, text) from None


@registered()
class LoadavgCollector(Collector):
    """1, 5 and 15 minute load averages."""

    name = "loadavg"
    families = tuple(LOAD.values())

    def collect(self, root: Root) -> list[Sample]:
        """kdiag_load1, kdiag_load5 and kdiag_load15."""
        loads = parse_loadavg(*read_source(root, "proc", "loadavg"))
        return [family.sample(load) for family, load in zip(LOAD.values(), loads, strict=True)]
