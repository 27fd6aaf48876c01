"""Memory usage from /proc/meminfo, one gauge per field as node_exporter exports it."""

from __future__ import annotations

import re

from kdiag.collectors import Collector
from kdiag.collectors.registry import registered
from kdiag.core.procfs import lines, malformed, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.family import Family
from kdiag.families.host import MEMINFO, MEMORY_BYTES, MEMORY_COUNT

SOURCE = "/proc/meminfo"

_LINE = re.compile(r"([A-Za-z0-9_]+)(?:\(([A-Za-z0-9_]+)\))?:\s+(\d+)(\s+kB)?")


def parse_meminfo(text: str, source: str = SOURCE) -> dict[str, int]:
    """Metric name -> value: kB fields as `kdiag_memory_<Field>_bytes`, unitless ones as `kdiag_memory_<Field>`."""
    values = {}
    for n, line in lines(text):
        match = _LINE.fullmatch(line.strip())
        if not match:
            raise malformed(source, n, line)
        field, qualifier, value, kb = match.groups()
        name = f"{field}_{qualifier}" if qualifier else field
        if kb:
            values[f"kdiag_memory_{name}_bytes"] = int(value) * 1024
        else:
            values[f"kdiag_memory_{name}"] = int(value)
    return values


@registered()
class MeminfoCollector(Collector):
    """Every /proc/meminfo field: kernels differ, so the fields beyond the declared ones are families of a pattern."""

    name = "meminfo"
    families = (*MEMINFO, MEMORY_BYTES, MEMORY_COUNT)

    def collect(self, root: Root) -> list[Sample]:
        """One gauge per /proc/meminfo line."""
        values = parse_meminfo(*read_source(root, "proc", "meminfo"))
        return [memory_family(metric).sample(value) for metric, value in values.items()]


def memory_family(metric: str) -> Family:
    """The family of a metric name parse_meminfo gave."""
    key = metric.removeprefix("kdiag_memory_")
    return MEMORY_BYTES.family(key.removesuffix("_bytes")) if key.endswith("_bytes") else MEMORY_COUNT.family(key)
