"""Paths as another mount namespace sees them (a container's broker), mapped to this host's mounts through
/proc/PID/mountinfo: the filesystem (major:minor) and the directory in it a path is on are the same from both sides.

A Docker broker run with `-v /data/kafka:/var/lib/kafka/data` has its log dir at /var/lib/kafka/data: its mountinfo
says that is directory /kafka of 8:16, which this host mounts at /data, so the host path is /data/kafka, on sdb.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from kdiag.core.procfs import malformed
from kdiag.core.root import Root

_ESCAPE = re.compile(r"\\([0-7]{3})")


class Mount(NamedTuple):
    """One line of /proc/PID/mountinfo: what it needs to map paths."""

    mount_id: int
    device: str  # major:minor of the filesystem
    root: str  # the directory of the filesystem mounted here
    mountpoint: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m[1], 8)), field)


def parse_mountinfo(text: str, source: str = "/proc/<pid>/mountinfo") -> list[Mount]:
    """The mounts of a mountinfo text, in its order (a later mount over the same mountpoint hides an earlier one)."""
    mounts = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            sep = fields.index("-", 6)
            mounts.append(Mount(int(fields[0]), fields[2], _unescape(fields[3]), _unescape(fields[4]),
                                fields[sep + 1], _unescape(fields[sep + 2])))
        except (ValueError, IndexError):
            raise malformed(source, n, line) from None
    return mounts


def mount_of(mounts: list[Mount], path: str) -> Mount | None:
    """The mount an absolute path is on (the longest mountpoint holding it; the later of two on one mountpoint)."""
    best = None
    for m in mounts:
        prefix = m.mountpoint.rstrip("/") + "/"
        if (path == m.mountpoint or path.startswith(prefix)) and (best is None or
                                                                   len(m.mountpoint) >= len(best.mountpoint)):
            best = m
    return best


def _within(base: str, path: str) -> str | None:
    """path below base as a relative path ("" for base itself), None when it is not below it."""
    if path == base or base == "/":
        return path.removeprefix(base).lstrip("/") if path != base else ""
    return path[len(base):].lstrip("/") if path.startswith(base.rstrip("/") + "/") else None


def host_path(theirs: list[Mount], ours: list[Mount], path: str) -> str | None:
    """The path on our mounts of a path on theirs: the same directory of the same filesystem; None when we do not
    mount that directory (a volume only the container mounts)."""
    mount = mount_of(theirs, os.path.normpath(path))
    if mount is None:
        return None
    rel = _within(mount.mountpoint, os.path.normpath(path))
    if rel is None:
        return None
    in_fs = os.path.normpath(os.path.join(mount.root, rel))
    if (same := mount_of(ours, os.path.normpath(path))) is not None and same.mount_id == mount.mount_id:
        return os.path.normpath(path)  # one mount namespace: the path is ours too
    found = []
    for m in ours:
        if m.device == mount.device and (below := _within(m.root, in_fs)) is not None:
            found.append((len(m.mountpoint), os.path.normpath(os.path.join(m.mountpoint, below))))
    # The shortest of our mountpoints: the filesystem's own mount rather than a bind of it deeper down.
    return min(found)[1] if found else None


class Placed(NamedTuple):
    """A log dir as found: its path on this host's mounts (as the process sees it when this host does not mount it),
    and then the filesystem's major:minor, mount source, type and mountpoint in the process's namespace, which still
    name its disk, and the process's root (/proc/PID/root) through which this host reaches it."""

    path: str
    device: str = ""
    source: str = ""
    fstype: str = ""
    mountpoint: str = ""
    rootfs: str = ""


def place(root: Root, pid: int, paths: list[str]) -> list[Placed]:
    """paths as process pid sees them, placed on this host's mounts (unchanged where either mountinfo cannot be read,
    as in a recording made before kdiag kept them)."""
    try:
        theirs = parse_mountinfo(root.read_proc(f"{pid}/mountinfo"), f"{pid}/mountinfo")
        ours = parse_mountinfo(root.read_proc("self/mountinfo"), "self/mountinfo")
    except (OSError, ValueError):
        return [Placed(p) for p in paths]
    out = []
    for path in paths:
        if (mapped := host_path(theirs, ours, path)) is not None:
            out.append(Placed(mapped))
        elif (m := mount_of(theirs, os.path.normpath(path))) is not None:
            out.append(Placed(os.path.normpath(path), m.device, m.source, m.fstype, m.mountpoint,
                              f"{root.proc}/{pid}/root"))
    return out


def host_paths(root: Root, pid: int, paths: list[str]) -> list[str]:
    """The paths of place() that this host mounts."""
    return [p.path for p in place(root, pid, paths) if not p.device]


def block_device(root: Root, device: str) -> str | None:
    """The /sys/block name of a major:minor (sdb1, dm-0), None when it is no block device (tmpfs, overlay)."""
    try:
        return os.path.basename(root.readlink("sys", f"dev/block/{device}"))
    except OSError:
        return None
