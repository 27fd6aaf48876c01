"""Bounded reads of regular files: a path another user can write may name a FIFO, a device, a link or a huge file."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
         stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symlink"}


def _check(path: str | Path, st: os.stat_result, sole_link: bool) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, f"{KINDS.get(stat.S_IFMT(st.st_mode), 'a special file')}, not a regular file", str(path))
    if sole_link and st.st_nlink > 1:
        raise OSError(errno.EINVAL, "a file with other hard links, not one of its own", str(path))


def read_regular(path: str | Path, limit: int, follow_links: bool = True, sole_link: bool = False) -> bytes:
    """The bytes of a regular file of at most limit bytes; OSError for anything else, EFBIG when it is larger.

    Checked before open() (opening a device can have effects; O_NONBLOCK keeps a FIFO from blocking it) and again on
    the open file, which may not be the one checked. follow_links=False refuses a symlink as the last component;
    sole_link refuses a file with other hard links (a link to a file of someone else's).
    """
    _check(path, os.stat(path) if follow_links else os.lstat(path), sole_link)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    with os.fdopen(os.open(path, flags), "rb") as f:
        _check(path, os.fstat(f.fileno()), sole_link)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data
