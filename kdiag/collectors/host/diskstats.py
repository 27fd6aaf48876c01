"""Block device I/O counters from /proc/diskstats, named as node_exporter names them."""

from __future__ import annotations

from kdiag.collectors import Collector
from kdiag.collectors.registry import registered
from kdiag.core.procfs import is_virtual_block, lines, malformed, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.storage import (
    DISK_FLUSH_REQUESTS_TIME_SECONDS_TOTAL,
    DISK_FLUSH_REQUESTS_TOTAL,
    DISK_IO_NOW,
    DISK_IO_TIME_SECONDS_TOTAL,
    DISK_IO_TIME_WEIGHTED_SECONDS_TOTAL,
    DISK_READ_BYTES_TOTAL,
    DISK_READ_TIME_SECONDS_TOTAL,
    DISK_READS_COMPLETED_TOTAL,
    DISK_WRITE_TIME_SECONDS_TOTAL,
    DISK_WRITES_COMPLETED_TOTAL,
    DISK_WRITTEN_BYTES_TOTAL,
)

SOURCE = "/proc/diskstats"
SECTOR_BYTES = 512


def _bytes(sectors: int) -> float:
    return sectors * SECTOR_BYTES


def _seconds(ms: int) -> float:
    return ms / 1000


# (index after major/minor/device, family, conversion).
_FIELDS = (
    (0, DISK_READS_COMPLETED_TOTAL, float),
    (2, DISK_READ_BYTES_TOTAL, _bytes),
    (3, DISK_READ_TIME_SECONDS_TOTAL, _seconds),
    (4, DISK_WRITES_COMPLETED_TOTAL, float),
    (6, DISK_WRITTEN_BYTES_TOTAL, _bytes),
    (7, DISK_WRITE_TIME_SECONDS_TOTAL, _seconds),
    (8, DISK_IO_NOW, float),
    (9, DISK_IO_TIME_SECONDS_TOTAL, _seconds),
    (10, DISK_IO_TIME_WEIGHTED_SECONDS_TOTAL, _seconds),
    (15, DISK_FLUSH_REQUESTS_TOTAL, float),
    (16, DISK_FLUSH_REQUESTS_TIME_SECONDS_TOTAL, _seconds),
)
# 14 fields before Linux 4.18, 18 with discard counters, 20 with flush counters since 5.5.
_FIELD_COUNTS = (14, 18, 20)


def parse_diskstats(text: str, source: str = SOURCE) -> dict[str, tuple[int, ...]]:
    """Device name -> its counters (the fields after major, minor and name)."""
    stats = {}
    for n, line in lines(text):
        parts = line.split()
        if len(parts) not in _FIELD_COUNTS:
            raise malformed(source, n, line, f"{len(parts)} fields, expected one of {_FIELD_COUNTS}")
        try:
            stats[parts[2]] = tuple(int(p) for p in parts[3:])
        except ValueError:
            raise malformed(source, n, line) from None
    return stats


def disk_samples(device: str, counters: tuple[int, ...]) -> list[Sample]:
    """Samples of one device's counters; flush metrics only when the kernel reports them."""
    return [
        family.sample(convert(counters[i]), device=device)
        for i, family, convert in _FIELDS
        if i < len(counters)
    ]


@registered()
class DiskstatsCollector(Collector):
    """Whole, real block devices' I/O counters."""

    name = "diskstats"
    families = tuple(family for _, family, _ in _FIELDS)

    def collect(self, root: Root) -> list[Sample]:
        """Samples for devices listed in /sys/block (partitions are not), without loop/ram/zram."""
        samples = []
        for device, counters in parse_diskstats(*read_source(root, "proc", "diskstats")).items():
            # sysfs spells the '/' of names like cciss/c0d0 as '!'.
            if not is_virtual_block(device) and root.exists("sys", f"block/{device.replace('/', '!')}"):
                samples += disk_samples(device, counters)
        return samples
