"""Block device I/O counters from /proc/diskstats, named as node_exporter names them."""

from __future__ import annotations

from kdiag.core.procfs import is_virtual_block, lines, malformed, read_source
from kdiag.core.root import Root
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample
from kdiag.collectors import Collector
from kdiag.collectors.registry import registered

SOURCE = "/proc/diskstats"
SECTOR_BYTES = 512


def _bytes(sectors: int) -> float:
    return sectors * SECTOR_BYTES


def _seconds(ms: int) -> float:
    return ms / 1000


# (index after major/minor/device, metric suffix, conversion, kind, HELP).
_FIELDS = (
    (0, "reads_completed_total", float, COUNTER, "Reads completed successfully."),
    (2, "read_bytes_total", _bytes, COUNTER, "Bytes read."),
    (3, "read_time_seconds_total", _seconds, COUNTER, "Seconds spent by all reads."),
    (4, "writes_completed_total", float, COUNTER, "Writes completed successfully."),
    (6, "written_bytes_total", _bytes, COUNTER, "Bytes written."),
    (7, "write_time_seconds_total", _seconds, COUNTER, "Seconds spent by all writes."),
    (8, "io_now", float, GAUGE, "I/Os currently in progress."),
    (9, "io_time_seconds_total", _seconds, COUNTER, "Seconds spent doing I/Os."),
    (10, "io_time_weighted_seconds_total", _seconds, COUNTER, "Weighted seconds spent doing I/Os."),
    (15, "flush_requests_total", float, COUNTER, "Flush requests completed successfully."),
    (16, "flush_requests_time_seconds_total", _seconds, COUNTER, "Seconds spent by all flush requests."),
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
        sample(f"kdiag_disk_{suffix}", convert(counters[i]), kind, device=device)
        for i, suffix, convert, kind, _ in _FIELDS
        if i < len(counters)
    ]


HELP = {f"kdiag_disk_{suffix}": text for _, suffix, _, _, text in _FIELDS}


@registered()
class DiskstatsCollector(Collector):
    """Whole, real block devices' I/O counters."""

    name = "diskstats"
    help = HELP

    def collect(self, root: Root) -> list[Sample]:
        """Samples for devices listed in /sys/block (partitions are not), without loop/ram/zram."""
        samples = []
        for device, counters in parse_diskstats(*read_source(root, "proc", "diskstats")).items():
            # sysfs spells the '/' of names like cciss/c0d0 as '!'.
            if not is_virtual_block(device) and root.exists("sys", f"block/{device.replace('/', '!')}"):
                samples += disk_samples(device, counters)
        return samples
