"""The brokers' heap and open files limit for the partitions and consumer groups a lab is asked to hold.

A 1-broker lab given 20,000 partitions died of "Too many open files" at this machine's limit of 20,000, and at a
512 MB heap of OutOfMemoryError while 5,000 groups committed: `kdiag lab up --partitions N --groups G` sizes both.
Partitions are counted as the benchmarks make them: replication factor 1, spread evenly over the brokers.
"""

from __future__ import annotations

import math
import resource
from dataclasses import dataclass
from pathlib import Path

HEAP_MB = 512  # the lab's heap up to a few thousand partitions
# Measured on the lab (benchmarks/scale.py): a partition's log, indexes and replica state, and a group's metadata
# and committed offsets, on the broker's heap (3 brokers of 16,700 partitions each held at 1.5 GB, issue 9).
HEAP_KB_PER_PARTITION = 64
HEAP_KB_PER_GROUP = 20
# A partition's open segment file (its indexes are memory maps, their files closed): 3 brokers of 16,700 partitions
# each had 16,871 files open (issue 9); the JVM, its jars and the sockets take the base.
FILES_PER_PARTITION = 1
FILES_BASE = 2048
NR_OPEN = Path("/proc/sys/fs/nr_open")  # the ceiling of any process's open files limit
CAP_SYS_RESOURCE = 24


@dataclass(frozen=True)
class Sizing:
    """What each broker of a lab gets: its -Xmx in MB, its open files limit (at least the hard limit it would inherit),
    and why it got less than it wants when it did."""

    heap_mb: int
    nofile: int
    wanted_nofile: int
    note: str = ""


def per_broker(partitions: int, brokers: int) -> int:
    """The partitions one broker holds."""
    return math.ceil(partitions / brokers)


def size(partitions: int, groups: int, brokers: int) -> Sizing:
    """The heap and open files each broker needs for `partitions` and `groups`, and the files limit it can get."""
    held = per_broker(partitions, brokers) + 50  # and its share of __consumer_offsets, at most all of it
    # Half the default heap is the broker's own; the default covers up to about 6,000 partitions.
    heap = HEAP_MB // 2 + (held * HEAP_KB_PER_PARTITION + math.ceil(groups / brokers) * HEAP_KB_PER_GROUP) // 1024
    heap = max(HEAP_MB, math.ceil(heap / 256) * 256)
    wanted = FILES_BASE + FILES_PER_PARTITION * held
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if wanted <= hard:
        return Sizing(heap, hard, wanted)
    if can_raise():
        ceiling = int(NR_OPEN.read_text())
        if wanted <= ceiling:
            return Sizing(heap, wanted, wanted)
        return Sizing(heap, ceiling, wanted, f"fs.nr_open is {ceiling}: raise it (`sysctl -w fs.nr_open={wanted}`)")
    return Sizing(heap, hard, wanted, f"the hard limit is {hard} and raising it takes CAP_SYS_RESOURCE, which this "
                                      f"process lacks (not root, or a container without it): start the lab from a "
                                      f"shell with `ulimit -Hn {wanted}` (a container: --ulimit nofile={wanted}), or "
                                      f"with {brokers_for(partitions, hard)} brokers (`--brokers`)")


def brokers_for(partitions: int, nofile: int) -> int:
    """The fewest brokers whose share of `partitions` fits `nofile` open files each."""
    return math.ceil(partitions / max(nofile - FILES_BASE - 50, 1))


def can_raise() -> bool:
    """Whether this process may raise a hard limit: CAP_SYS_RESOURCE in its effective capabilities (root's, unless a
    container dropped it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    return False


def apply(pid: int, nofile: int) -> None:
    """Give the started broker its open files limit, soft and hard (raising the hard one needs root)."""
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (nofile, nofile))
