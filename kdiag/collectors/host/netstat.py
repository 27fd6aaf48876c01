"""Selected TCP and UDP protocol counters from /proc/net/snmp and /proc/net/netstat."""

from __future__ import annotations

from kdiag.collectors import Collector
from kdiag.collectors.host._util import ints
from kdiag.collectors.registry import registered
from kdiag.core.procfs import lines, malformed
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.network import NETSTAT

SOURCES = ("net/snmp", "net/netstat")
# (protocol, field) -> family.
FIELDS = {(f.name.split("_")[2], f.name.split("_")[3]): f for f in NETSTAT}


def parse_netstat(text: str, source: str = "/proc/net/netstat") -> dict[str, dict[str, int]]:
    """Protocol -> field -> value from `Proto: names` / `Proto: values` line pairs."""
    numbered = lines(text)
    if len(numbered) % 2:
        raise malformed(source, *numbered[-1], "header line without a value line")
    stats = {}
    for (_, header), (n, line) in zip(numbered[::2], numbered[1::2], strict=True):
        proto, _, names = header.partition(":")
        value_proto, _, values = line.partition(":")
        fields, numbers = names.split(), ints(values.split(), source, n, line)
        if value_proto != proto or len(numbers) != len(fields):
            raise malformed(source, n, line, f"{len(numbers)} values for {len(fields)} {proto} fields")
        stats[proto] = dict(zip(fields, numbers, strict=True))
    return stats


@registered()
class NetstatCollector(Collector):
    """TCP segments, retransmissions, listen drops and UDP buffer errors; fields a kernel lacks are left out."""

    name = "netstat"
    families = NETSTAT

    def collect(self, root: Root) -> list[Sample]:
        """The FIELDS found in /proc/net/snmp and /proc/net/netstat."""
        stats: dict[str, dict[str, int]] = {}
        for rel in SOURCES:
            stats.update(parse_netstat(root.read_proc(rel), f"/proc/{rel}"))
        return [
            family.sample(stats[proto][field])
            for (proto, field), family in FIELDS.items()
            if field in stats.get(proto, {})
        ]
