"""Helpers shared by the CPU, interrupt and network collectors."""

from __future__ import annotations

import errno
import re
from collections import Counter

from kdiag.core.procfs import lines, malformed
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.own import COLLECTOR_SKIPPED_ENTRIES


def ints(tokens: list[str], source: str, lineno: int, line: str, base: int = 10) -> list[int]:
    """Integer values of tokens; a ValueError naming the file and line when one is not a number."""
    try:
        return [int(t, base) for t in tokens]
    except ValueError:
        raise malformed(source, lineno, line, "not a number") from None


def cpu_table(text: str, source: str) -> tuple[list[str], list[tuple[int, str, str, list[int], str]]]:
    """CPU numbers of a `CPU0 CPU1 ...` header, then (number, line, name, counts, rest) per `NAME:` row."""
    numbered = lines(text) or [(1, "")]
    names = numbered[0][1].split()
    if not names or not all(n.startswith("CPU") and n[3:].isdigit() for n in names):
        raise malformed(source, numbered[0][0], numbered[0][1], "expected a CPU header")
    # Up to one count per CPU: callers check rows that need them all.
    row = re.compile(rf"\s*([^\s:]+):((?:\s+\d+(?!\S)){{0,{len(names)}}})(.*)")
    rows = []
    width = len(names)
    for n, line in numbered[1:]:
        # The common row, a name and a count per CPU, by split: the regex costs 0.5 ms a row at 128 CPUs.
        name, colon, rest = line.partition(":")
        tokens = rest.split(None, width)
        label = name.split()
        if colon and len(label) == 1 and len(tokens) >= width and all(t.isascii() and t.isdigit() for t in tokens[:width]):
            rows.append((n, line, label[0], [int(t) for t in tokens[:width]], tokens[width] if len(tokens) > width else ""))
            continue
        m = row.fullmatch(line)
        if m is None:
            raise malformed(source, n, line)
        rows.append((n, line, m[1], [int(c) for c in m[2].split()], m[3]))
    return [n[3:] for n in names], rows


def interfaces(root: Root) -> list[str]:
    """Network interfaces of /sys/class/net but lo."""
    return [i for i in root.listdir("sys", "class/net") if i != "lo"]


def skipped_samples(collector: str, skipped: Counter[str]) -> list[Sample]:
    """kdiag_collector_skipped_entries per reason of the entries one run of a collector left out."""
    return [COLLECTOR_SKIPPED_ENTRIES.sample(n, collector=collector, reason=reason) for reason, n in sorted(skipped.items())]


def reason(error: OSError) -> str:
    """The errno name of an OSError (ENOENT, EACCES, ...), for kdiag_collector_skipped_entries."""
    return errno.errorcode.get(error.errno or 0, "OSError")
