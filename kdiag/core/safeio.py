"""Bounded reads of regular files: a path another user can write may name a FIFO, a device, a link or a huge file;
read_in_root reads one inside another process's root without leaving it."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_LINKS = 40  # as the kernel's path walk
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


def read_in_root(base: str, path: str, limit: int) -> bytes:
    """A regular file at path as a process whose root is base sees it (/proc/PID/root): every link resolved inside
    base (an absolute one from base, `..` stopping at it), never out to this host's files; as read_regular otherwise.

    Walked a directory fd at a time with O_NOFOLLOW, so a link swapped in after a check is refused, not followed."""
    stack = [os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]
    todo = [n for n in reversed(path.split("/")) if n not in ("", ".")]
    links = 0
    try:
        while todo:
            name = todo.pop()
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, f"more than {MAX_LINKS} symbolic links", path)
                target = os.readlink(name, dir_fd=stack[-1])
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                todo += [n for n in reversed(target.split("/")) if n not in ("", ".")]
                continue
            if todo:
                stack.append(os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=stack[-1]))
                continue
            _check(path, st, False)
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | os.O_NOFOLLOW
            with os.fdopen(os.open(name, flags, dir_fd=stack[-1]), "rb") as f:
                _check(path, os.fstat(f.fileno()), False)
                data = f.read(limit + 1)
            if len(data) > limit:
                raise OSError(errno.EFBIG, f"larger than {limit} bytes", path)
            return data
        raise OSError(errno.EISDIR, "a directory, not a regular file", path)
    finally:
        for fd in stack:
            os.close(fd)
