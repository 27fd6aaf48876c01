"""The disks behind a filesystem's device: partitions, LVM (device mapper) and md RAID, as /sys/block shows them."""

from __future__ import annotations

import re

from kdiag.core.root import Root

_PARTITION_SUFFIX = re.compile(r"(.*\d)p\d+|(.*\D)\d+")
# Device-mapper and md devices stack on others: their own queue stats hide which disk is the slow one.
_STACKED = re.compile(r"dm-\d+|md\d+")
MAX_DEPTH = 8


def is_stacked(name: str) -> bool:
    """Whether a /sys/block device is a device-mapper (LVM, dm-crypt) or md RAID device."""
    return _STACKED.fullmatch(name) is not None


def whole_disk(root: Root, name: str) -> str:
    """The disk a partition (sdb1, nvme0n1p2) belongs to when /sys/block shows it, else name itself."""
    match = _PARTITION_SUFFIX.fullmatch(name)
    if root.exists("sys", f"block/{name}") or not match:
        return name
    disk = match.group(1) or match.group(2)
    return disk if root.exists("sys", f"block/{disk}") else name


def mapper_device(root: Root, mapper_name: str) -> str | None:
    """The dm-N whose dm/name is mapper_name (/dev/mapper/vg-lv), None when none is."""
    for name in root.listdir("sys", "block"):
        if name.startswith("dm-"):
            try:
                if root.read("sys", f"block/{name}/dm/name").strip() == mapper_name:
                    return name
            except OSError:
                continue
    return None


def disks_behind(root: Root, device: str) -> list[str]:
    """The /sys/block name of a /dev path, then every disk it stacks on (LVM and md slaves), without repeats."""
    name = device.removeprefix("/dev/")
    if name.startswith("mapper/"):
        name = mapper_device(root, name.removeprefix("mapper/")) or name
    found: list[str] = []

    def visit(name: str, depth: int) -> None:
        disk = whole_disk(root, name)
        if disk in found or depth > MAX_DEPTH:
            return
        found.append(disk)
        if not is_stacked(disk):
            return
        try:
            slaves = root.listdir("sys", f"block/{disk}/slaves")
        except OSError:
            return
        for slave in slaves:
            visit(slave, depth + 1)

    visit(name, 0)
    return found
