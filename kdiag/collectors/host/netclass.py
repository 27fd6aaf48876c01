"""Link speed, state, MTU and queue counts of network interfaces from /sys/class/net.

A bond's speed is the one its driver reports: the sum of its slaves that can transmit (the active one in
active-backup mode), as the kernel's bonding driver computes it. A team device reports none (nics.<name>.speed_mbps).
"""

from __future__ import annotations

import errno
from collections import Counter

from kdiag.collectors import Collector
from kdiag.collectors.host._util import interfaces, ints, reason, skipped_samples
from kdiag.collectors.registry import Shared, registered
from kdiag.config.settings import Config
from kdiag.core.procfs import malformed
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.network import NETWORK_MTU_BYTES, NETWORK_QUEUES, NETWORK_SPEED_BYTES, NETWORK_UP
from kdiag.families.own import COLLECTOR_SKIPPED_ENTRIES

# ethtool's SPEED_UNKNOWN, printed as -1 or, by older kernels, as the unsigned 4294967295.
_UNKNOWN_SPEEDS = (-1, 0xFFFFFFFF)
# Reading speed fails with these when a driver cannot tell (down, virtual, no ethtool support);
# ENOENT means a recording could not copy it for the same reason.
_NO_SPEED = (errno.EINVAL, errno.EOPNOTSUPP, errno.ENODEV, errno.ENOENT)


def parse_value(text: str, source: str) -> int:
    """The integer of a one-value sysfs file."""
    values = ints(text.split(), source, 1, text)
    if len(values) != 1:
        raise malformed(source, 1, text, "expected one number")
    return values[0]


def speed_bytes(text: str, source: str) -> int | None:
    """Bytes per second from a `speed` file in Mbit/s; None when the speed is unknown."""
    mbits = parse_value(text, source)
    return None if mbits in _UNKNOWN_SPEEDS else mbits * 125_000



@registered()
class NetclassCollector(Collector):
    """Link speed, up state, MTU and rx/tx queue counts per interface but lo."""

    name = "netclass"
    families = (NETWORK_SPEED_BYTES, NETWORK_UP, NETWORK_MTU_BYTES, NETWORK_QUEUES, COLLECTOR_SKIPPED_ENTRIES)

    def __init__(self, speeds_mbps: dict[str, int] | None = None):
        # nics.<name>.speed_mbps: what a NIC that reports no speed (virtio says -1) runs at.
        self.speeds_mbps = speeds_mbps or {}

    @classmethod
    def from_config(cls, config: Config, shared: Shared) -> NetclassCollector:
        """With the speeds `nics:` gives."""
        return cls({n: c.speed_mbps for n, c in config.nics.items() if c.speed_mbps})

    def collect(self, root: Root) -> list[Sample]:
        """Samples per interface; one whose files cannot be read (gone meanwhile, refused) is left out and counted."""
        samples = []
        skipped: Counter[str] = Counter()
        for device in interfaces(root):
            try:
                samples += self._interface(root, device)
            except OSError as e:
                skipped[reason(e)] += 1
        return samples + skipped_samples(self.name, skipped)

    def _interface(self, root: Root, device: str) -> list[Sample]:
        """One interface's samples; speed from the config, else as the driver reports it (left out when it reports none)."""
        base = f"class/net/{device}"
        samples = []
        try:
            speed = speed_bytes(root.read_sys(f"{base}/speed"), f"/sys/{base}/speed")
        except NotADirectoryError:
            return []  # a file, not an interface: bonding_masters, on every host with the bonding module loaded
        except OSError as e:
            if e.errno not in _NO_SPEED:
                raise
            speed = None
        if device in self.speeds_mbps:
            speed = self.speeds_mbps[device] * 125_000
        if speed is not None:
            samples.append(NETWORK_SPEED_BYTES.sample(speed, device=device))
        up = root.read_sys(f"{base}/operstate").strip() == "up"
        samples.append(NETWORK_UP.sample(up, device=device))
        mtu = parse_value(root.read_sys(f"{base}/mtu"), f"/sys/{base}/mtu")
        samples.append(NETWORK_MTU_BYTES.sample(mtu, device=device))
        queues = root.listdir("sys", f"{base}/queues")
        for direction in ("rx", "tx"):
            count = sum(q.startswith(f"{direction}-") for q in queues)
            samples.append(NETWORK_QUEUES.sample(count, device=device, direction=direction))
        return samples
