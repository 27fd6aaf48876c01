"""Per-CPU packet backlog counters from /proc/net/softnet_stat."""

from __future__ import annotations

from kdiag.collectors import Collector
from kdiag.collectors.host._util import ints
from kdiag.collectors.registry import registered
from kdiag.core.procfs import lines, malformed
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.host import SOFTNET

SOURCE = "/proc/net/softnet_stat"
COLUMNS = {0: "processed", 1: "dropped", 2: "times_squeezed"}
# Column 13 (index 12) is the CPU number since Linux 5.10; lines skip offline CPUs.
_CPU_COLUMN = 12


def parse_softnet(text: str, source: str = SOURCE) -> dict[str, dict[str, int]]:
    """CPU number -> processed, dropped and times_squeezed (32-bit counters that wrap)."""
    stats = {}
    for i, (n, line) in enumerate(lines(text)):
        columns = ints(line.split(), source, n, line, base=16)
        if len(columns) < len(COLUMNS):
            raise malformed(source, n, line, f"expected at least {len(COLUMNS)} columns")
        cpu = columns[_CPU_COLUMN] if len(columns) > _CPU_COLUMN else i
        stats[str(cpu)] = {name: columns[c] for c, name in COLUMNS.items()}
    return stats


@registered()
class SoftnetCollector(Collector):
    """Backlog packets processed, dropped and squeezed per CPU."""

    name = "softnet"
    families = tuple(SOFTNET.values())

    def collect(self, root: Root) -> list[Sample]:
        """Three 32-bit counters per CPU line."""
        return [
            SOFTNET[name].sample(value, cpu=cpu)
            for cpu, counters in parse_softnet(root.read_proc("net/softnet_stat")).items()
            for name, value in counters.items()
        ]
