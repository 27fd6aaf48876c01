"""Kafka's JmxTool before 3.5 (kafka.tools.JmxTool in core): which one a classpath has, and how to ask the old one.

The old tool (checked at the tags 2.0.1, 2.8.2 and 3.4.0) fails on object-name patterns (a NullPointerException:
it resolves names only when no query is a pattern) and before 2.3 prints no row when any queried MBean lacks one
of the --attributes. So it gets exact names only, no attribute list, and the tsv report format (one "key<TAB>value"
line per attribute, a "time" line first), whose lines survive values that hold commas (GC beans' LastGcInfo).
"""

from __future__ import annotations

import functools
import glob
import zipfile

from kdiag.kafka import jvm_gc

NEW_MAIN = "org.apache.kafka.tools.JmxTool"  # tools module, 3.5+ (KAFKA-14595)
OLD_MAIN = "kafka.tools.JmxTool"
# Request versions to ask for by name (RequestsPerSec has a version tag since 2.0, KIP-272); absent ones are skipped.
MAX_REQUEST_VERSION = 17
# Broker ids asked for by name in app-info: the usual hand-set ids and the first auto-generated ones
# (reserved.broker.max.id + 1 = 1001 on).
BROKER_IDS = (*range(0, 64), *range(1001, 1017))


@functools.lru_cache(maxsize=8)
def main_class(classpath: str) -> str:
    """The JmxTool main class the jars of a classpath hold (the new one when both, or none, are found)."""
    found_old = False
    for jar in glob.glob(classpath):
        if not jar.endswith(".jar") or "kafka" not in jar.rsplit("/", 1)[-1]:
            continue
        try:
            with zipfile.ZipFile(jar) as z:
                names = set(z.namelist())
        except (OSError, zipfile.BadZipFile):
            continue
        if "org/apache/kafka/tools/JmxTool.class" in names:
            return NEW_MAIN
        found_old = found_old or "kafka/tools/JmxTool.class" in names
    return OLD_MAIN if found_old else NEW_MAIN


def exact_queries(queries: tuple[str, ...]) -> tuple[str, ...]:
    """The queries with each pattern kdiag uses replaced by the exact names it can match."""
    out: list[str] = []
    for query in queries:
        if query == "java.lang:type=GarbageCollector,*":
            out += jvm_gc.mbeans()
        elif query == "kafka.server:type=app-info,id=*":
            out += [f"kafka.server:type=app-info,id={i}" for i in BROKER_IDS]
        elif query.endswith(",*") and ",name=RequestsPerSec," in query:
            # Before 2.0 RequestsPerSec had no version tag.
            out += [query[:-2], *(f"{query[:-2]},version={v}" for v in range(MAX_REQUEST_VERSION + 1))]
        elif "*" not in query:
            out.append(query)
    return tuple(out)


def args(url: str, interval_ms: int, queries: tuple[str, ...]) -> list[str]:
    """The old JmxTool's arguments: exact names, every attribute, tsv lines."""
    out = ["--jmx-url", url, "--reporting-interval", str(interval_ms), "--report-format", "tsv"]
    for query in exact_queries(queries):
        out += ["--object-name", query]
    return out
