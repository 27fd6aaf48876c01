"""The kernel log as a reader of its own: /dev/kmsg opened once, from its end, read without blocking."""

from __future__ import annotations

import errno
import os

READ_CHUNK = 8192  # a /dev/kmsg read returns one record (at most 8 KiB); a regular file returns chunks


class KernelLog:
    """Records the kernel logged since the last call; each open of /dev/kmsg is an independent reader."""

    def __init__(self, path: str = "/dev/kmsg"):
        self.path = path
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            # From the end: what was logged before kdiag started is not this run's evidence.
            os.lseek(fd, 0, os.SEEK_END)
            self._fd = fd
        return self._fd

    def new_lines(self) -> list[str]:
        """Message text of each record logged since the last call (continuation lines left out)."""
        fd = self._open()
        chunks: list[bytes] = []
        while True:
            try:
                chunk = os.read(fd, READ_CHUNK)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # records overwritten before we read them: go on from the oldest kept
                    continue
                raise
            if not chunk:
                break
            chunks.append(chunk)
        text = b"".join(chunks).decode("utf-8", errors="replace")
        return [line for line in text.split("\n") if line and not line.startswith(" ")]

    def close(self) -> None:
        """Stop reading."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
