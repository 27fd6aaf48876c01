"""The load generator as the daemon sees it: the live stats files `kdiag bench produce` writes, and its CPU time.

`fetch_loadgen_state` reads the fresh stats files of a directory into a versioned dict that recordings keep
through `Root.kafka("loadgen", ...)`; `samples_from_loadgen_state` turns that dict into samples. The CPU
seconds come from /proc/<pid>/stat through the Root, so a replay reads what the live run read.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from kdiag.collectors import Collector
from kdiag.collectors.registry import Shared, registered
from kdiag.config.settings import Config
from kdiag.core.procfs import TICKS_PER_SECOND, parse_stat, read_source
from kdiag.core.root import Root
from kdiag.core.safeio import read_regular
from kdiag.core.sample import Sample
from kdiag.families.process import (
    LOADGEN_BATCH_RECORDS,
    LOADGEN_BATCH_SIZE_BYTES,
    LOADGEN_BATCH_SIZE_LIMIT_BYTES,
    LOADGEN_BROKER_INTERNAL_LATENCY_SECONDS,
    LOADGEN_BROKER_PRODUCE_REQUESTS_TOTAL,
    LOADGEN_BROKER_REQUEST_BYTES_TOTAL,
    LOADGEN_BROKER_REQUESTS_TOTAL,
    LOADGEN_BROKER_RTT_SECONDS,
    LOADGEN_BYTES_TOTAL,
    LOADGEN_CPU_SECONDS_TOTAL,
    LOADGEN_INFO,
    LOADGEN_LATENCY_SECONDS,
    LOADGEN_LINGER_SECONDS,
    LOADGEN_QUEUE_FILL_RATIO,
    LOADGEN_RECORD_SIZE_BYTES,
    LOADGEN_RECORDS_ACKED_TOTAL,
    LOADGEN_RECORDS_FAILED_TOTAL,
    LOADGEN_RECORDS_SENT_TOTAL,
    LOADGEN_THREADS,
)

VERSION = 1
SOURCE = "loadgen"
FRESH_SECONDS = 10.0
MAX_STATS_BYTES = 1 << 20  # a stats file is ~2 KB


def fetch_loadgen_state(directory: str | Path, now: float) -> dict[str, Any]:
    """The stats files of a directory written within the last 10 s; a missing directory means no bench runs."""
    processes = []
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(Path(directory).glob("*.json")):
            # A foreign or vanished file is not a load generator; the directory may be under /tmp, open to anyone.
            with contextlib.suppress(OSError, ValueError):
                state = json.loads(read_regular(path, MAX_STATS_BYTES))
                if isinstance(state, dict) and "pid" in state and now - float(state.get("time", 0)) < FRESH_SECONDS:
                    processes.append(state)
    return {"version": VERSION, "processes": processes}


def _known(value: Any) -> bool:
    return value is not None


def samples_from_loadgen_state(state: dict[str, Any]) -> list[Sample]:
    """Samples of every load generator process in a fetch_loadgen_state dict."""
    out = []
    for p in state.get("processes", []):
        pid = p["pid"]
        settings = p.get("settings", {})
        records = p.get("records", {})
        out.append(LOADGEN_INFO.sample(1, pid=pid, topic=p.get("topic", ""), acks=settings.get("acks", ""),
                                       compression=settings.get("compression.type", "")))
        for kind, family in (("sent", LOADGEN_RECORDS_SENT_TOTAL), ("acked", LOADGEN_RECORDS_ACKED_TOTAL),
                             ("failed", LOADGEN_RECORDS_FAILED_TOTAL)):
            out.append(family.sample(records.get(kind, 0), pid=pid))
        out.append(LOADGEN_BYTES_TOTAL.sample(p.get("bytes", 0), pid=pid))
        out.append(LOADGEN_THREADS.sample(p.get("processes", 1), pid=pid))
        for family, key in ((LOADGEN_LINGER_SECONDS, "linger.ms"), (LOADGEN_BATCH_SIZE_LIMIT_BYTES, "batch.size"),
                            (LOADGEN_RECORD_SIZE_BYTES, "record.size")):
            if _known(settings.get(key)):
                value = settings[key] / 1000 if key == "linger.ms" else settings[key]
                out.append(family.sample(value, pid=pid))
        for q, key in (("mean", "mean"), ("0.99", "p99"), ("max", "max")):
            if _known(p.get("latency_seconds", {}).get(key)):
                out.append(LOADGEN_LATENCY_SECONDS.sample(p["latency_seconds"][key], pid=pid, quantile=q))
        rd = p.get("librdkafka") or {}
        fills = [rd[c] / rd[m] for c, m in (("msg_cnt", "msg_max"), ("msg_size", "msg_size_max")) if rd.get(m)]
        if fills:
            out.append(LOADGEN_QUEUE_FILL_RATIO.sample(max(fills), pid=pid))
        for family, key in ((LOADGEN_BATCH_SIZE_BYTES, "batch_bytes_avg"), (LOADGEN_BATCH_RECORDS, "batch_records_avg")):
            if _known(rd.get(key)):
                out.append(family.sample(rd[key], pid=pid))
        for broker, b in (rd.get("brokers") or {}).items():
            for family, prefix in ((LOADGEN_BROKER_RTT_SECONDS, "rtt"),
                                   (LOADGEN_BROKER_INTERNAL_LATENCY_SECONDS, "int_latency")):
                for q, key in (("mean", "avg"), ("0.99", "p99")):
                    if _known(b.get(f"{prefix}_{key}_seconds")):
                        out.append(family.sample(b[f"{prefix}_{key}_seconds"], pid=pid, broker_id=broker, quantile=q))
            for family, key in ((LOADGEN_BROKER_REQUESTS_TOTAL, "requests"),
                                (LOADGEN_BROKER_PRODUCE_REQUESTS_TOTAL, "produce_requests"),
                                (LOADGEN_BROKER_REQUEST_BYTES_TOTAL, "request_bytes")):
                out.append(family.sample(b.get(key, 0), pid=pid, broker_id=broker))
    return out


@registered()
class LoadgenCollector(Collector):
    """Live stats of the `kdiag bench` processes on this host, and their CPU seconds."""

    name = "loadgen"
    families = (
        LOADGEN_INFO, LOADGEN_RECORDS_SENT_TOTAL, LOADGEN_RECORDS_ACKED_TOTAL, LOADGEN_RECORDS_FAILED_TOTAL,
        LOADGEN_BYTES_TOTAL, LOADGEN_CPU_SECONDS_TOTAL, LOADGEN_QUEUE_FILL_RATIO, LOADGEN_LATENCY_SECONDS,
        LOADGEN_BROKER_RTT_SECONDS, LOADGEN_BROKER_INTERNAL_LATENCY_SECONDS, LOADGEN_BROKER_REQUESTS_TOTAL,
        LOADGEN_BROKER_PRODUCE_REQUESTS_TOTAL, LOADGEN_BROKER_REQUEST_BYTES_TOTAL, LOADGEN_BATCH_SIZE_BYTES,
        LOADGEN_BATCH_RECORDS, LOADGEN_LINGER_SECONDS, LOADGEN_BATCH_SIZE_LIMIT_BYTES, LOADGEN_RECORD_SIZE_BYTES,
        LOADGEN_THREADS,
    )

    def __init__(self, stats_dir: str | Path):
        self.stats_dir = stats_dir

    @classmethod
    def from_config(cls, config: Config, shared: Shared) -> LoadgenCollector:
        """Reading loadgen.stats_dir."""
        return cls(config.loadgen.stats_dir)

    def collect(self, root: Root) -> list[Sample]:
        try:
            state = root.kafka(SOURCE, lambda: fetch_loadgen_state(self.stats_dir, root.now()))
        except KeyError:  # a snapshot recorded without this source: no load generator to show
            return []
        out = samples_from_loadgen_state(state)
        for p in state.get("processes", []):
            # The process may have ended since its last stats file: then it has no CPU time to show.
            with contextlib.suppress(OSError):
                stat = parse_stat(*read_source(root, "proc", f"{p['pid']}/stat"))
                out.append(LOADGEN_CPU_SECONDS_TOTAL.sample(stat.cpu_ticks / TICKS_PER_SECOND, pid=p["pid"]))
        return out
