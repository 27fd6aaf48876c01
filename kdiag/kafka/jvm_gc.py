"""The JVM's garbage collector MBeans (java.lang:type=GarbageCollector,name=N) by collector, from the JDK's sources.

Each name is (collector, whether its CollectionTime is stop-the-world pause time). The concurrent beans of ZGC,
Shenandoah and G1 (JDK 20+) count the wall time of cycles that run beside the application: summing them with the
pauses would read a healthy ZGC broker as spending most of its time in GC.
"""

from __future__ import annotations

COLLECTORS: dict[str, tuple[str, bool]] = {
    "Copy": ("Serial", True),
    "MarkSweepCompact": ("Serial", True),
    "PS Scavenge": ("Parallel", True),
    "PS MarkSweep": ("Parallel", True),
    "ParNew": ("CMS", True),  # Java 8-13; CMS was removed in 14
    "ConcurrentMarkSweep": ("CMS", True),  # its time is the collector's stop-the-world phases
    "G1 Young Generation": ("G1", True),
    "G1 Old Generation": ("G1", True),
    "G1 Concurrent GC": ("G1", False),  # JDK 20+
    "ZGC": ("ZGC", False),  # JDK 11-16: one bean timing whole cycles
    "ZGC Cycles": ("ZGC", False),  # JDK 17+, non-generational
    "ZGC Pauses": ("ZGC", True),
    "ZGC Minor Cycles": ("ZGC generational", False),  # JDK 21+
    "ZGC Minor Pauses": ("ZGC generational", True),
    "ZGC Major Cycles": ("ZGC generational", False),
    "ZGC Major Pauses": ("ZGC generational", True),
    "Shenandoah Cycles": ("Shenandoah", False),
    "Shenandoah Pauses": ("Shenandoah", True),
}


def pauses(name: str) -> bool:
    """Whether a collector bean's CollectionTime is pause time (unknown names count, as before they were known)."""
    return COLLECTORS.get(name, ("", True))[1]


def mbeans() -> tuple[str, ...]:
    """Every collector bean by exact name, for JMX readers that take no patterns."""
    return tuple(f"java.lang:type=GarbageCollector,name={name}" for name in COLLECTORS)
