"""Mounted filesystems from /proc/mounts: which block device backs which path, and atime settings."""

from __future__ import annotations

import re
from typing import NamedTuple

from kdiag.collectors import Collector
from kdiag.collectors.registry import registered
from kdiag.core.procfs import lines, malformed, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.storage import FILESYSTEM_INFO, FILESYSTEM_NOATIME

SOURCE = "/proc/mounts"

_OCTAL = re.compile(r"\\([0-7]{3})")



class Mount(NamedTuple):
    """One /proc/mounts line."""

    device: str
    mountpoint: str
    fstype: str
    options: tuple[str, ...]


def unescape(field: str) -> str:
    """A /proc/mounts field with the kernel's octal escapes (\\040 for space) decoded."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str, source: str = SOURCE) -> list[Mount]:
    """Mounts in mount order."""
    mounts = []
    for n, line in lines(text):
        parts = line.split()
        if len(parts) != 6:
            raise malformed(source, n, line, f"{len(parts)} fields, expected 6")
        device, mountpoint, fstype, options = (unescape(p) for p in parts[:4])
        mounts.append(Mount(device, mountpoint, fstype, tuple(options.split(","))))
    return mounts


def device_for_path(mounts: list[Mount], path: str) -> tuple[str, str]:
    """(device, mountpoint) of the mount holding an absolute path; ("", "") when none does."""
    best = ("", "")
    for m in mounts:
        prefix = m.mountpoint.rstrip("/") + "/"
        # `>=` so that a later mount over the same mountpoint, which hides the earlier one, wins.
        if (path == m.mountpoint or path.startswith(prefix)) and len(m.mountpoint) >= len(best[1]):
            best = (m.device, m.mountpoint)
    return best


@registered()
class MountsCollector(Collector):
    """Block-device-backed filesystems; pseudo filesystems are left out to cap cardinality."""

    name = "mounts"
    families = (FILESYSTEM_INFO, FILESYSTEM_NOATIME)

    def collect(self, root: Root) -> list[Sample]:
        """Info and noatime samples per /dev/ mount; a repeated mount gives one series."""
        series = {}
        for m in parse_mounts(*read_source(root, "proc", "mounts")):
            if m.device.startswith("/dev/"):
                series[(m.device, m.mountpoint, m.fstype)] = "noatime" in m.options
        samples = []
        for (device, mountpoint, fstype), noatime in series.items():
            labels = {"device": device, "mountpoint": mountpoint, "fstype": fstype}
            samples += [
                FILESYSTEM_INFO.sample(1, **labels),
                FILESYSTEM_NOATIME.sample(int(noatime), **labels),
            ]
        return samples
