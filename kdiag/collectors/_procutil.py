"""Tiny parsing helpers shared by the procfs and sysfs collectors."""

from __future__ import annotations

import re

from kdiag.recording_archive import quote
from kdiag.root import Root

_VIRTUAL_BLOCK = re.compile(r"(loop|ram|zram)\d+")


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
