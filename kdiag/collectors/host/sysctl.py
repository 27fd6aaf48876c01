"""Kernel tunables that matter to Kafka, read from /proc/sys, and open file handle counts."""

from __future__ import annotations

from kdiag.collectors import Collector
from kdiag.collectors.host._util import ints
from kdiag.collectors.registry import registered
from kdiag.core.procfs import malformed, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.host import FILEFD_ALLOCATED, FILEFD_MAXIMUM, SYSCTL

# Path under /proc/sys -> label names of its values (None: a single value).
SYSCTLS: dict[str, tuple[str, ...] | None] = {
    "vm/swappiness": None,
    "vm/dirty_ratio": None,
    "vm/dirty_background_ratio": None,
    "net/core/rmem_max": None,
    "net/core/wmem_max": None,
    "net/core/netdev_max_backlog": None,
    "net/ipv4/tcp_rmem": ("min", "default", "max"),
    "net/ipv4/tcp_wmem": ("min", "default", "max"),
}
FILE_NR = "fs/file-nr"


def sysctl_samples(path: str, text: str, source: str) -> list[Sample]:
    """Samples of one /proc/sys file's text, path relative to /proc/sys."""
    values = ints(text.split(), source, 1, text)
    if path == FILE_NR:
        if len(values) != 3:
            raise malformed(source, 1, text, "expected allocated, free and maximum")
        return [FILEFD_ALLOCATED.sample(values[0]), FILEFD_MAXIMUM.sample(values[2])]
    fields = SYSCTLS[path] or ("",)
    if len(values) != len(fields):
        raise malformed(source, 1, text, f"expected {len(fields)} values")
    name = path.replace("/", ".")
    return [
        SYSCTL.sample(value, name=name, **({"field": field} if field else {}))
        for field, value in zip(fields, values, strict=False)
    ]


@registered()
class SysctlCollector(Collector):
    """Selected sysctls; one the kernel lacks is left out, and only none at all is a failure."""

    name = "sysctl"
    families = (SYSCTL, FILEFD_ALLOCATED, FILEFD_MAXIMUM)

    def collect(self, root: Root) -> list[Sample]:
        """Samples of every readable sysctl in SYSCTLS and fs/file-nr."""
        samples: list[Sample] = []
        error: OSError | None = None
        for path in [*SYSCTLS, FILE_NR]:
            try:
                text, source = read_source(root, "proc", f"sys/{path}")
            except OSError as e:
                error = e
                continue
            samples += sysctl_samples(path, text, source)
        if not samples:
            raise OSError(f"no sysctl readable under {root.proc}/sys") from error
        return samples
