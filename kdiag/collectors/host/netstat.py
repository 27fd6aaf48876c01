"""Selected TCP and UDP protocol counters from /proc/net/snmp and /proc/net/netstat."""

from __future__ import annotations

from kdiag.core.procfs import lines, malformed
from kdiag.collectors.host._util import ints
from kdiag.core.root import Root
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample
from kdiag.collectors import Collector
from kdiag.collectors.registry import registered

SOURCES = ("net/snmp", "net/netstat")
# (protocol, field, kind, HELP); counters are exported with a _total suffix.
FIELDS = (
    ("Tcp", "InSegs", COUNTER, "TCP segments received."),
    ("Tcp", "OutSegs", COUNTER, "TCP segments sent, retransmissions excluded."),
    ("Tcp", "RetransSegs", COUNTER, "TCP segments retransmitted."),
    ("Tcp", "ActiveOpens", COUNTER, "TCP connections opened by connect()."),
    ("Tcp", "PassiveOpens", COUNTER, "TCP connections accepted."),
    ("Tcp", "InErrs", COUNTER, "TCP segments received in error."),
    ("Tcp", "CurrEstab", GAUGE, "TCP connections established or closing on the peer's side now."),
    ("TcpExt", "ListenOverflows", COUNTER, "Connections dropped because a listen queue was full."),
    ("TcpExt", "ListenDrops", COUNTER, "SYNs and connections dropped at listening sockets."),
    ("TcpExt", "TCPTimeouts", COUNTER, "TCP retransmission timeouts."),
    ("TcpExt", "TCPSynRetrans", COUNTER, "TCP SYN and SYN-ACK retransmissions."),
    ("TcpExt", "TCPLostRetransmit", COUNTER, "TCP retransmissions lost again."),
    ("Udp", "InDatagrams", COUNTER, "UDP datagrams delivered."),
    ("Udp", "OutDatagrams", COUNTER, "UDP datagrams sent."),
    ("Udp", "InErrors", COUNTER, "UDP datagrams received in error."),
    ("Udp", "RcvbufErrors", COUNTER, "UDP datagrams dropped for a full receive buffer."),
    ("Udp", "SndbufErrors", COUNTER, "UDP datagrams dropped for a full send buffer."),
)


def metric_name(proto: str, field: str, kind: str) -> str:
    """node_exporter's name of a netstat field, with _total for counters."""
    return f"kdiag_netstat_{proto}_{field}" + ("_total" if kind == COUNTER else "")


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


HELP = {metric_name(proto, field, kind): text for proto, field, kind, text in FIELDS}


@registered()
class NetstatCollector(Collector):
    """TCP segments, retransmissions, listen drops and UDP buffer errors; fields a kernel lacks are left out."""

    name = "netstat"
    help = HELP

    def collect(self, root: Root) -> list[Sample]:
        """The FIELDS found in /proc/net/snmp and /proc/net/netstat."""
        stats: dict[str, dict[str, int]] = {}
        for rel in SOURCES:
            stats.update(parse_netstat(root.read_proc(rel), f"/proc/{rel}"))
        return [
            sample(metric_name(proto, field, kind), stats[proto][field], kind)
            for proto, field, kind, _ in FIELDS
            if field in stats.get(proto, {})
        ]
