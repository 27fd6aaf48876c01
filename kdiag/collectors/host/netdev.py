"""Per-interface traffic counters from /proc/net/dev, named as node_exporter names them."""

from __future__ import annotations

from kdiag.collectors import Collector
from kdiag.collectors.host._util import ints
from kdiag.collectors.registry import registered
from kdiag.core.procfs import lines, malformed
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.network import NETWORK

SOURCE = "/proc/net/dev"


def parse_netdev(text: str, source: str = SOURCE) -> dict[str, dict[str, int]]:
    """Interface -> `receive_bytes`, ..., `transmit_compressed` as named by the second header line."""
    numbered = lines(text)
    header_n, header = numbered[1] if len(numbered) > 1 else (len(numbered) + 1, "")
    groups = header.split("|")
    if len(groups) != 3:
        raise malformed(source, header_n, header, "expected a `face |receive |transmit` header")
    fields = [f"receive_{f}" for f in groups[1].split()] + [f"transmit_{f}" for f in groups[2].split()]
    stats = {}
    for n, line in numbered[2:]:
        # Long interface names leave no space after the colon; names cannot contain one.
        name, colon, rest = line.partition(":")
        values = ints(rest.split(), source, n, line)
        if not colon or len(values) != len(fields):
            raise malformed(source, n, line, f"expected `name: {len(fields)} counters`")
        stats[name.strip()] = dict(zip(fields, values, strict=True))
    return stats


@registered()
class NetdevCollector(Collector):
    """Bytes, packets, errors and drops per interface and direction, lo included."""

    name = "netdev"
    families = tuple(NETWORK.values())

    def collect(self, root: Root) -> list[Sample]:
        """The NETWORK counters of every interface in /proc/net/dev."""
        return [
            family.sample(counters[field], device=device)
            for device, counters in parse_netdev(root.read_proc("net/dev")).items()
            for field, family in NETWORK.items()
            if field in counters
        ]
