"""Parsing of /proc and /sys files shared by the collectors, broker discovery and the lab."""

from __future__ import annotations

import errno
import os
import re
from typing import NamedTuple

from kdiag.core.quote import quote
from kdiag.core.root import Root

_VIRTUAL_BLOCK = re.compile(r"(loop|ram|zram)\d+")
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
PF_KTHREAD = 0x00200000  # a kernel thread, in the flags of /proc/<pid>/stat (include/linux/sched.h)
BROKER_MAIN_CLASS = "kafka.Kafka"


def malformed(source: str, lineno: int, line: str, why: str = "unexpected line") -> ValueError:
    """A ValueError naming the file, the 1-based line number and the offending text."""
    return ValueError(f"{source} line {lineno}: {why}: {quote(line.strip(), 120)}")


def lines(text: str) -> list[tuple[int, str]]:
    """Non-blank lines of text with their 1-based line numbers."""
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def parse_key_values(text: str, source: str, sep: str = " ") -> dict[str, int]:
    """`key value` (or `key<sep> value`) integer lines, as in /proc/vmstat and /proc/<pid>/io."""
    values = {}
    for n, line in lines(text):
        key, _, value = line.partition(sep)
        try:
            values[key.strip()] = int(value)
        except ValueError:
            raise malformed(source, n, line) from None
    return values


def is_virtual_block(device: str) -> bool:
    """Whether a block device is a loop, ram or zram device, which tell nothing about storage."""
    return _VIRTUAL_BLOCK.fullmatch(device) is not None


def read_source(root: Root, tree: str, rel: str) -> tuple[str, str]:
    """A file's text and full path (for error messages): `parse_x(*read_source(root, "proc", "x"))`."""
    return root.read(tree, rel), f"{root.proc if tree == 'proc' else root.sys}/{rel}"


class Stat(NamedTuple):
    """What kdiag needs from /proc/<pid>/stat."""

    comm: str
    cpu_ticks: int
    start_ticks: int
    state: str = ""
    kernel_thread: bool = False
    children_ticks: int = 0  # cutime+cstime: the CPU of its children that exited and were reaped


def parse_stat(text: str, source: str = "/proc/<pid>/stat") -> Stat:
    """comm, utime+stime, start time and state; comm may hold spaces and ')', so fields follow the last ')'."""
    head, _, tail = text.rpartition(")")
    _, _, comm = head.partition("(")
    fields = tail.split()
    try:
        # tail starts at field 3 (state): flags, utime, stime, cutime, cstime, starttime are fields 9, 14-17 and 22.
        return Stat(comm, int(fields[11]) + int(fields[12]), int(fields[19]), fields[0],
                    bool(int(fields[6]) & PF_KTHREAD), int(fields[13]) + int(fields[14]))
    except (IndexError, ValueError):
        raise malformed(source, 1, text) from None


def parse_cmdline(text: str) -> list[str]:
    """Arguments of a NUL-separated /proc/<pid>/cmdline (empty for kernel threads)."""
    args = text.split("\0")
    return args[:-1] if args[-1] == "" else args


def process_uids(root: Root, pid: int) -> tuple[int, ...]:
    """The real, effective, saved and filesystem uid of a process (its /proc/PID/status Uid line)."""
    for line in root.read_proc(f"{pid}/status").splitlines():
        if line.startswith("Uid:"):
            return tuple(int(u) for u in line.split()[1:])
    raise OSError(errno.EINVAL, "no Uid line", f"{pid}/status")
