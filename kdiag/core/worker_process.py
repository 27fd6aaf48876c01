"""A Python child process answering requests (one JSON line each) with one marshal frame each: work whose library
can crash is done there. marshal writes a 10,000-partition admin state in 4 ms, json in 36 ms.

librdkafka 2.16's AdminClient dereferences a NULL consumer group (segfault in rd_kafka_cgrp_op) when an
OffsetFetch answer asks for a coordinator refresh, e.g. NOT_COORDINATOR while a broker restarts. In-process
that kills the whole daemon; in a `WorkerProcess` it costs that source's answers until a new child starts: the
first request after a backoff (1, 2, 4 ... 30 s while deaths follow each other) since the death.
The first line sent is the child's settings (secrets travel on the pipe, never on argv); the child exits
when its stdin closes, so it never outlives kdiag. A long-lived service (the probe, the election) runs its
clients on threads of its child and answers requests about its state.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import marshal
import math
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from kdiag.core import logsafe, malloc
from kdiag.core.errors import KdiagError

log = logging.getLogger(__name__)
# Before an answer's marshal bytes: their length, and the CPU seconds the request cost the child (all its threads).
FRAME_HEADER = struct.Struct("!Qd")
RESTART_BACKOFF = 1.0  # seconds from a death to the next start; doubles while deaths follow each other
MAX_BACKOFF = 30.0
COLLECT_AFTER_OBJECTS = 10000  # objects left since the last collection (gc generation 0) that make serve() collect


class WorkerError(KdiagError):
    """The child did not answer: it died, hung past the deadline or could not start."""

    exit_code = 1


def _death(returncode: int) -> str:
    """How a child ended, as words: 'died from SIGSEGV' or 'exited with status 1'."""
    if returncode < 0:
        try:
            return f"died from {signal.Signals(-returncode).name}"
        except ValueError:
            return f"died from signal {-returncode}"
    return f"exited with status {returncode}"


class WorkerProcess:
    """One long-lived child running `python -m module`; after it dies or hangs, restarted on the first request
    once its backoff has passed."""

    def __init__(self, module: str, settings: dict[str, Any], what: str):
        self.module = module
        self.settings = settings
        self.what = what  # names the child in errors: "the AdminClient process"
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._started = 0.0  # monotonic time the running child started
        self._deaths = 0  # deaths in a row: each doubles the wait before the next start
        self._death = ""  # how the last child ended, while its successor waits out the backoff
        self._restart_at = 0.0  # monotonic time the next child may start
        self.restarts = -1  # the first start is no restart
        self.last_cpu_seconds = 0.0  # what the child's last answer cost it (all its threads)

    def pid(self) -> int | None:
        """The running child's pid, if one runs."""
        return self._process.pid if self._process and self._process.poll() is None else None

    def _start(self) -> subprocess.Popen[bytes]:
        # Its own session: a terminal's Ctrl-C reaches kdiag, which then stops the child itself.
        process = subprocess.Popen([sys.executable, "-m", self.module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   start_new_session=True)
        assert process.stdin is not None
        process.stdin.write(_line(self.settings))
        process.stdin.flush()
        self._started = time.monotonic()
        self.restarts += 1
        return process

    def start(self) -> None:
        """Start the child now unless one runs: a service begins before the first question about it."""
        with self._lock:
            if self._process is None:
                self._process = self._start()

    def _ended(self, how: str) -> str:
        """Forget the child that ended `how`; the reason to give, naming when its successor starts."""
        self._process = None
        # A child that ran longer than the longest wait was not part of a crash loop: start over from the shortest.
        self._deaths = 1 if time.monotonic() - self._started > MAX_BACKOFF else self._deaths + 1
        delay = min(MAX_BACKOFF, RESTART_BACKOFF * 2 ** (self._deaths - 1))
        self._restart_at = time.monotonic() + delay
        self._death = f"{self.what} {how}"
        return f"{self._death}; restarting in {delay:g} s"

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The child's answer to message within timeout seconds; WorkerError when it dies, hangs or waits out its backoff."""
        with self._lock:
            if self._process is not None and (code := self._process.poll()) is not None:
                self._kill(self._process)  # closes its pipes
                reason = self._ended(f"{_death(code)} since its last answer")
                log.warning("%s", reason)
                raise WorkerError(reason)
            if self._process is None:
                left = self._restart_at - time.monotonic()
                if left > 0:
                    raise WorkerError(f"{self._death}; restarting in {math.ceil(left)} s")
                self._process = self._start()
            process = self._process
            assert process.stdin is not None and process.stdout is not None
            try:
                process.stdin.write(_line(message))
                process.stdin.flush()
            except OSError:
                pass  # it died: reading says how
            frame = _read_answer(process.stdout, time.monotonic() + timeout)
            if isinstance(frame, tuple):
                self.last_cpu_seconds, answer = frame
                return answer
            if frame is None:
                self._kill(process)
                raise WorkerError(self._ended(f"did not answer within {round(timeout, 1):g}s, stopped it"))
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)  # its stdout closed: it is exiting
            self._kill(process)
            raise WorkerError(self._ended(_death(process.returncode)))

    def _kill(self, process: subprocess.Popen[bytes]) -> None:
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream:
                stream.close()

    def close(self) -> None:
        """Stop the child: closing its stdin lets it finish, a kill follows if it does not within 5 s."""
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.stdin:
                process.stdin.close()
            process.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self._kill(process)


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"


def _read_exactly(fd: int, size: int, deadline: float) -> bytes | bytearray | None:
    """size bytes from fd before deadline (monotonic), fewer at EOF; None when time runs out."""
    # Read into one buffer: a pipe hands over 64 KB a read, and a bytes object per read of a 20 MB answer, joined
    # after, is three copies of it and hundreds of allocations.
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        n = os.readv(fd, [view[got:]])
        if not n:
            break
        got += n
    return buffer if got == size else bytes(buffer[:got])


def _read_answer(stream: IO[bytes], deadline: float) -> tuple[float, dict[str, Any]] | str | None:
    """(CPU seconds, answer) of one frame from a child's stdout before deadline; '' at EOF, None when time runs out."""
    fd = stream.fileno()
    header = _read_exactly(fd, FRAME_HEADER.size, deadline)
    if header is None:
        return None
    if len(header) < FRAME_HEADER.size:
        return ""  # it exited
    size, cpu = FRAME_HEADER.unpack(header)
    body = _read_exactly(fd, size, deadline)
    if body is None:
        return None
    return (cpu, marshal.loads(body)) if len(body) == size else ""


def serve(start: Callable[[dict[str, Any]], Callable[[dict[str, Any]], dict[str, Any]]]) -> None:
    """The child's loop: read the settings line, handle = start(settings), then answer each request line with handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # kdiag decides when the child stops
    malloc.limit_arenas()  # before librdkafka's threads start
    logsafe.configure(logging.INFO)
    # Answers go to a private copy of stdout; anything a library prints lands on stderr, never in an answer.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    handle = start(json.loads(sys.stdin.readline() or "{}"))
    # A request allocates ~10^5 objects (a 10,000-partition state): collections during it cost 40% of its CPU. One
    # collection after a request that left many objects frees what it left in cycles (failed futures' tracebacks); a
    # small answer (the election's, each cycle) leaves none, and a full collection of a librdkafka process costs
    # more than its whole request.
    gc.disable()
    for line in sys.stdin:
        began = time.process_time()
        body = marshal.dumps(handle(json.loads(line)))
        if gc.get_count()[0] >= COLLECT_AFTER_OBJECTS:
            gc.collect()
        # Every thread of this process counts (librdkafka's too): what the request cost the host.
        out.write(FRAME_HEADER.pack(len(body), time.process_time() - began))
        out.write(body)  # not header + body: a copy of a 20 MB answer
        out.flush()
        if len(body) >= malloc.TRIM_AFTER_BYTES:
            del body
            malloc.trim()
