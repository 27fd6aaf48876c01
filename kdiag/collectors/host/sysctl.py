"""Kernel tunables that matter to Kafka, read from /proc/sys, and open file handle counts."""

from __future__ import annotations

from kdiag.core.procfs import malformed, read_source
from kdiag.collectors.host._util import ints
from kdiag.core.root import Root
from kdiag.core.sample import GAUGE, Sample
from kdiag.collectors import Collector
from kdiag.collectors.registry import registered

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


def _gauge(metric: str, value: float, **labels: str) -> Sample:
    # sample() takes the metric as `name`, which clashes with the sysctl's `name` label.
    return Sample(metric, tuple(sorted(labels.items())), float(value), GAUGE)


def sysctl_samples(path: str, text: str, source: str) -> list[Sample]:
    """Samples of one /proc/sys file's text, path relative to /proc/sys."""
    values = ints(text.split(), source, 1, text)
    if path == FILE_NR:
        if len(values) != 3:
            raise malformed(source, 1, text, "expected allocated, free and maximum")
        return [_gauge("kdiag_filefd_allocated", values[0]), _gauge("kdiag_filefd_maximum", values[2])]
    fields = SYSCTLS[path] or ("",)
    if len(values) != len(fields):
        raise malformed(source, 1, text, f"expected {len(fields)} values")
    name = path.replace("/", ".")
    return [
        _gauge("kdiag_sysctl", value, name=name, **({"field": field} if field else {}))
        for field, value in zip(fields, values, strict=False)
    ]


HELP = {
    "kdiag_sysctl": "Value of a sysctl; field names the value of multi-value ones.",
    "kdiag_filefd_allocated": "File descriptors allocated (fs.file-nr).",
    "kdiag_filefd_maximum": "Maximum file descriptors (fs.file-nr).",
}


@registered()
class SysctlCollector(Collector):
    """Selected sysctls; one the kernel lacks is left out, and only none at all is a failure."""

    name = "sysctl"
    help = HELP

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
