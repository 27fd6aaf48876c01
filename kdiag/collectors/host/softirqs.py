"""Softirqs run per CPU and type from /proc/softirqs."""

from __future__ import annotations

from kdiag.collectors import Collector
from kdiag.collectors.host._util import cpu_table
from kdiag.collectors.registry import registered
from kdiag.core.procfs import malformed
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.host import SOFTIRQS_TOTAL

SOURCE = "/proc/softirqs"


def parse_softirqs(text: str, source: str = SOURCE) -> dict[str, dict[str, int]]:
    """Softirq type (NET_RX, TIMER, ...) -> CPU number -> count."""
    cpus, rows = cpu_table(text, source)
    softirqs = {}
    for n, line, kind, counts, rest in rows:
        if len(counts) != len(cpus) or rest.strip():
            raise malformed(source, n, line, f"expected {len(cpus)} counts")
        softirqs[kind] = dict(zip(cpus, counts, strict=True))
    return softirqs



@registered()
class SoftirqsCollector(Collector):
    """Softirqs run per CPU and type."""

    name = "softirqs"
    families = (SOFTIRQS_TOTAL,)

    def collect(self, root: Root) -> list[Sample]:
        """One counter per CPU and softirq type."""
        return [
            SOFTIRQS_TOTAL.sample(count, cpu=cpu, type=kind)
            for kind, counts in parse_softirqs(root.read_proc("softirqs")).items()
            for cpu, count in counts.items()
        ]
