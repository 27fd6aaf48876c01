"""What a JVM's command line tells: its heap ceiling, whether it generates Kafka load, which threads collect garbage."""

from __future__ import annotations

import re


_SIZE = re.compile(r"-Xmx(\d+)([kKmMgGtT]?)")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
# Kafka's own load tools (kafka-producer-perf-test.sh and friends run these classes), and the scripts' names.
LOAD_GENERATORS = ("ProducerPerformance", "ConsumerPerformance", "EndToEndLatency", "ShareConsumerPerformance",
                   "kafka-producer-perf-test", "kafka-consumer-perf-test")
# HotSpot names its collector threads so: "GC Thread#0", "G1 Conc#0", "G1 Refine#0", "G1 Service", "ParGC Thread".
GC_THREAD = re.compile(r"GC Thread|G1 |ParGC|Gang worker|ZWorker|Shenandoah")


def jvm_max_heap_bytes(argv: list[str]) -> float | None:
    """The -Xmx of a java command line in bytes (the last one wins, as in the JVM); None without one."""
    sizes = [m for a in argv if (m := _SIZE.fullmatch(a))]
    if not sizes or "java" not in argv[0].rsplit("/", 1)[-1]:
        return None
    number, unit = sizes[-1].groups()
    return float(int(number) * _UNITS[unit.lower()])


def is_load_generator(argv: list[str]) -> bool:
    """Whether a command line runs one of Kafka's perf-test tools."""
    return any(name in arg for arg in argv for name in LOAD_GENERATORS)
