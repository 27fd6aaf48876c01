"""Joining another process's network namespace for the calling thread only (setns(2) needs CAP_SYS_ADMIN): the
sockets it makes from then on are made there, and nothing is executed."""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def enter_net(pid: int, proc: str = "/proc") -> None:
    """Move the calling thread into process pid's network namespace; OSError (EPERM without CAP_SYS_ADMIN) if not."""
    path = f"{proc}/{pid}/ns/net"
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
    finally:
        os.close(fd)
