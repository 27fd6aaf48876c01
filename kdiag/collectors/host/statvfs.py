"""Size and free space of the block-device filesystems in /proc/mounts, from statvfs(2)."""

from __future__ import annotations

import os
from typing import Any

from kdiag.collectors import Collector
from kdiag.collectors.host.mounts import parse_mounts
from kdiag.collectors.registry import registered
from kdiag.core.procfs import read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.storage import FILESYSTEM_AVAIL_BYTES, FILESYSTEM_SIZE_BYTES

SOURCE = "statvfs"  # not a file: recordings keep it with the other non-file states in kafka.json


def statvfs_bytes(mountpoints: list[str]) -> dict[str, list[int]]:
    """{mountpoint: [size, available]} for the mountpoints this host can stat; others are left out."""
    out = {}
    for m in mountpoints:
        try:
            st = os.statvfs(m)
        except OSError:
            continue  # unmounted meanwhile, or not visible from here (a container, a fixture tree)
        out[m] = [st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize]
    return out


def samples_from_statvfs(state: Any, mounts: dict[str, tuple[str, str]]) -> list[Sample]:
    """Size and available bytes per mountpoint that /proc/mounts lists, from a {mountpoint: [size, avail]} state."""
    out = []
    for mountpoint, values in (state.items() if isinstance(state, dict) else ()):
        if mountpoint not in mounts or not isinstance(values, list) or len(values) != 2:
            continue
        device, fstype = mounts[mountpoint]
        labels = {"device": device, "mountpoint": mountpoint, "fstype": fstype}
        out += [FILESYSTEM_SIZE_BYTES.sample(float(values[0]), **labels),
                FILESYSTEM_AVAIL_BYTES.sample(float(values[1]), **labels)]
    return out


@registered()
class StatvfsCollector(Collector):
    """Space of every /dev-backed filesystem; a recording without it gives none, never a failure."""

    name = "statvfs"
    families = (FILESYSTEM_SIZE_BYTES, FILESYSTEM_AVAIL_BYTES)

    def collect(self, root: Root) -> list[Sample]:
        """kdiag_filesystem_size_bytes and kdiag_filesystem_avail_bytes per mount."""
        mounts = {m.mountpoint: (m.device, m.fstype) for m in parse_mounts(*read_source(root, "proc", "mounts"))
                  if m.device.startswith("/dev/")}
        try:
            state = root.kafka(SOURCE, lambda: statvfs_bytes(sorted(mounts)))
        except KeyError:
            return []  # recorded before kdiag kept statvfs
        return samples_from_statvfs(state, mounts)
