"""Where collectors read from and what time it is: the live host, or one snapshot of a recording."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar, cast

from kdiag.core.archive import (KAFKA_STATE_VERSION, MAX_EPOCH, MAX_JSON_BYTES, StateError, is_number, read_recorded,
                                resolve_inside)
from kdiag.core.kmsg import KernelLog
from kdiag.core.quote import quote
from kdiag.core.redact import redact_cmdline_file

READ_CHUNK = 65536
KMSG_FILE = "kmsg"  # a snapshot's kernel log records: those read while it was taken, one a line
State = TypeVar("State")
# How a recorded state reads back as its type: (the JSON value, kafka.json's version) -> the state; StateError when the
# value is not of the type.
StateReader = Callable[[object, int], State]


class Root:
    """The live host: files under procfs and sysfs roots, the wall clock, Kafka fetched on demand."""

    def __init__(self, proc: str | Path = "/proc", sys: str | Path = "/sys", clock: Callable[[], float] = time.time,
                 kmsg: str = "/dev/kmsg"):
        self.proc = Path(proc)
        self.sys = Path(sys)
        self._clock = clock
        self._kmsg_path = kmsg
        self._kmsg: KernelLog | None = None

    def now(self) -> float:
        """Seconds since the epoch at which this root's facts hold."""
        return self._clock()

    def _path(self, tree: str, rel: str) -> str:
        # Plain strings, not Path objects: a full process scan builds 10,000 of these.
        return f"{self.proc if tree == 'proc' else self.sys}/{rel}"

    def read(self, tree: str, rel: str) -> str:
        """Text of a file under the proc or sys tree; raises OSError when it is missing."""
        # os.read, not open(): a text-mode file object costs more than the kernel's read of a /proc file.
        fd = os.open(self._path(tree, rel), os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunks = []
            while chunk := os.read(fd, READ_CHUNK):
                chunks.append(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def kernel_log(self) -> list[str]:
        """Kernel log records (/dev/kmsg) since the last call on this root; raises OSError when unreadable."""
        if self._kmsg is None:
            self._kmsg = KernelLog(self._kmsg_path)
        return self._kmsg.new_lines()

    def read_proc(self, rel: str) -> str:
        """Text of a file under the procfs root."""
        return self.read("proc", rel)

    def read_sys(self, rel: str) -> str:
        """Text of a file under the sysfs root."""
        return self.read("sys", rel)

    def listdir(self, tree: str, rel: str) -> list[str]:
        """Sorted entry names of a directory under the proc or sys tree."""
        return sorted(os.listdir(self._path(tree, rel)))

    def count_fds(self, pid: int) -> int:
        """Open file descriptors of a process: Linux 6.2+ gives the count as /proc/PID/fd's size, no 10,000-link listing."""
        size = os.stat(self._path("proc", f"{pid}/fd")).st_size if self._procfs else 0
        return size if size > 0 else len(self.listdir("proc", f"{pid}/fd"))

    @cached_property
    def _procfs(self) -> bool:
        # procfs's root is inode 1; elsewhere (a fixture tree) a directory's size is its blocks, not its entries.
        try:
            return os.stat(self.proc).st_ino == 1
        except OSError:
            return False

    def readlink(self, tree: str, rel: str) -> str:
        """Target of a symlink under the proc or sys tree (cwd, fd/N, device links)."""
        return os.readlink(self._path(tree, rel))

    def exists(self, tree: str, rel: str) -> bool:
        """Whether a path exists under the proc or sys tree (symlinks count even when dangling)."""
        return os.path.lexists(self._path(tree, rel))

    def kafka(self, source: str, fetch: Callable[[], State], parse: StateReader[State] | None = None) -> State:
        """State of one Kafka source: fetched live here, read from kafka.json in a snapshot (through `parse`)."""
        return fetch()


def recorded_time(meta_file: Path) -> float:
    """The epoch seconds a snapshot's meta.json records; ValueError naming the file when it holds none."""
    try:
        taken = json.loads(read_recorded(str(meta_file), MAX_JSON_BYTES))["time"]
        if not is_number(taken) or not 0 <= taken <= MAX_EPOCH:
            raise ValueError(f"time {quote(taken)} is not epoch seconds from 0 to {MAX_EPOCH:.0f}")
        return float(taken)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        why = f"{type(e).__name__}: {str(e)[:200]}"
        raise ValueError(f'{meta_file}: expected {{"time": <epoch seconds>}} ({why})') from None


class SnapshotRoot(Root):
    """One snapshot of a recording: its proc/ and sys/ trees, its recorded time (shifted) and kafka.json."""

    def __init__(self, directory: str | Path, time_offset: float = 0.0):
        directory = Path(directory)
        taken = recorded_time(directory / "meta.json") + time_offset
        super().__init__(directory / "proc", directory / "sys", clock=lambda: taken)
        self.directory = directory

    def _inside(self, tree: str, rel: str, follow_last: bool = True) -> str:
        # Links are followed only while they stay in this snapshot; anything else reads as missing.
        return resolve_inside(str(self.directory), [tree, *rel.split("/")], follow_last)

    def read(self, tree: str, rel: str) -> str:
        return read_recorded(self._inside(tree, rel)).decode("utf-8", errors="replace")

    def listdir(self, tree: str, rel: str) -> list[str]:
        return sorted(os.listdir(self._inside(tree, rel)))

    def count_fds(self, pid: int) -> int:
        return len(self.listdir("proc", f"{pid}/fd"))

    def kernel_log(self) -> list[str]:
        try:
            return read_recorded(str(self.directory / KMSG_FILE)).decode("utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return []  # recorded before kdiag read the kernel log, or nothing read it

    def readlink(self, tree: str, rel: str) -> str:
        return os.readlink(self._inside(tree, rel, follow_last=False))

    def exists(self, tree: str, rel: str) -> bool:
        try:
            self._inside(tree, rel, follow_last=False)
        except OSError:
            return False
        return True

    @cached_property
    def _kafka_json(self) -> tuple[int, dict[str, Any]]:
        """kafka.json's version and its sources' states ((KAFKA_STATE_VERSION, {}) without one); ValueError naming the
        file when it is unreadable or of a version this kdiag does not read."""
        path = self.directory / "kafka.json"
        if not path.exists():
            return KAFKA_STATE_VERSION, {}
        try:
            recorded = json.loads(read_recorded(str(path)))
            version, sources = recorded.get("version"), recorded.get("sources", {})
        except (OSError, ValueError, AttributeError, RecursionError) as e:
            raise ValueError(f"{path}: not a kdiag Kafka state ({type(e).__name__}: {str(e)[:200]})") from None
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= KAFKA_STATE_VERSION:
            raise ValueError(f"{path}: version {quote(version)} is not a kafka.json version this kdiag reads "
                             f"(1 to {KAFKA_STATE_VERSION})")
        if not isinstance(sources, dict):
            raise ValueError(f'{path}: "sources" is not an object')
        return version, sources

    @property
    def kafka_sources(self) -> dict[str, Any]:
        """The Kafka sources' states in this snapshot's kafka.json as recorded ({} without one)."""
        return self._kafka_json[1]

    def kafka(self, source: str, fetch: Callable[[], State], parse: StateReader[State] | None = None) -> State:
        """Recorded state of one Kafka source, read by `parse`; KeyError when this snapshot has none, ValueError naming
        the file and key when it is not of its type."""
        path = self.directory / "kafka.json"
        version, sources = self._kafka_json
        if source not in sources:
            raise KeyError(f"{path} has no '{source}' state")
        if parse is None:
            return cast(State, sources[source])  # a state without a reader is checked by its collector
        try:
            return parse(sources[source], version)
        except StateError as e:
            where = ".".join(["sources", source, *([e.key] if e.key else [])])
            raise ValueError(f"{path}: {where}: {e.problem}") from None


# Target of an fd link whose name was listed but whose target was not read while recording.
UNRECORDED_LINK = "(not recorded)"
_CMDLINE = re.compile(r"(\d+|self)/cmdline")


def _link_inside(base: str, rel: str) -> str | None:
    """The text of the link at base/rel (its parents real directories) when it is relative and stays under base, else None."""
    text = os.readlink(os.path.join(base, rel))
    lexical = os.path.normpath(os.path.join(os.path.dirname(rel), text))
    real = os.path.relpath(os.path.realpath(os.path.join(base, rel)), base)
    if text.startswith("/") or lexical == ".." or lexical.startswith("../") or real == ".." or real.startswith("../"):
        return None
    return text


class KafkaTee(Root):
    """The live host, keeping the Kafka states it reads (a recording of the cluster and the probe, not of this host)."""

    def __init__(self, live: Root):
        super().__init__(live.proc, live.sys, clock=live.now)
        self.live = live
        self.kafka_state: dict[str, Any] = {}

    def kernel_log(self) -> list[str]:
        return self.live.kernel_log()  # the live root's reader: its place in the log outlives this snapshot

    def kafka(self, source: str, fetch: Callable[[], State], parse: StateReader[State] | None = None) -> State:
        state = fetch()
        self.kafka_state[source] = state
        return state


class TeeRoot(KafkaTee):
    """The live host, copying every file, symlink and Kafka state it reads into a snapshot directory."""

    def __init__(self, live: Root, directory: str | Path):
        super().__init__(live)
        self.directory = Path(directory)

    def _copy_target(self, tree: str, rel: str) -> Path:
        """Where the copy of tree/rel goes, recreating the symlinks sysfs paths pass through."""
        out = self.directory / tree
        if tree == "proc":
            # procfs links (self, cwd, fd/N) point outside the tree: copy at the literal path.
            target = out / rel
        else:
            base = os.path.realpath(self._path(tree, ""))
            current = ""
            for part in Path(rel).parts:
                current = os.path.normpath(os.path.join(current, part))
                live = os.path.join(base, current)
                if os.path.islink(live) and (text := _link_inside(base, current)) is not None:
                    link = out / current
                    link.parent.mkdir(parents=True, exist_ok=True)
                    if not os.path.lexists(link):
                        os.symlink(text, link)
                    current = os.path.relpath(os.path.realpath(live), base)
            target = out / current
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def read(self, tree: str, rel: str) -> str:
        text = super().read(tree, rel)
        # Recordings get shared: other processes' secrets stay out of them, whatever processes.cmdline says.
        copy = redact_cmdline_file(text) if tree == "proc" and _CMDLINE.fullmatch(rel) else text
        self._copy_target(tree, rel).write_text(copy, encoding="utf-8")
        return text

    def listdir(self, tree: str, rel: str) -> list[str]:
        names = super().listdir(tree, rel)
        copy = self._copy_target(tree, rel)
        copy.mkdir(parents=True, exist_ok=True)
        if tree == "sys":
            # sysfs listings are facts themselves (msi_irqs/N, queues/rx-N, slaves/sda1): keep their names, and links
            # as links (a replay follows slaves/ and class/net/ as live does; dangling until something reads through).
            base = os.path.realpath(self._path(tree, ""))
            where = os.path.relpath(copy, self.directory / tree)
            for name in names:
                live = os.path.join(self._path(tree, rel), name)
                if os.path.lexists(copy / name):
                    continue
                if os.path.islink(live):
                    if (text := _link_inside(base, os.path.join(where, name))) is not None:
                        os.symlink(text, copy / name)
                elif os.path.isdir(live):
                    (copy / name).mkdir()
                else:
                    (copy / name).touch()
        elif rel.endswith("/fd"):
            # A broker's fd links are followed only now and then; its open-file count is the listing itself.
            for name in names:
                if not os.path.lexists(copy / name):
                    os.symlink(UNRECORDED_LINK, copy / name)
        return names

    def kernel_log(self) -> list[str]:
        lines = super().kernel_log()
        (self.directory / KMSG_FILE).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        return lines

    def count_fds(self, pid: int) -> int:
        return len(self.listdir("proc", f"{pid}/fd"))  # the recording keeps the listing: a replay counts it

    def readlink(self, tree: str, rel: str) -> str:
        link = super().readlink(tree, rel)
        target = self._copy_target(tree, rel)
        if os.path.lexists(target) and os.readlink(target) == UNRECORDED_LINK:
            os.remove(target)
        if not os.path.lexists(target):
            os.symlink(link, target)
        return link
