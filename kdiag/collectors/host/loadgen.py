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

from kdiag.core.procfs import TICKS_PER_SECOND, parse_stat, read_source
from kdiag.core.root import Root
from kdiag.core.safeio import read_regular
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample
from kdiag.collectors import Collector
from kdiag.collectors.registry import Shared, registered
from kdiag.config.settings import Config

VERSION = 1
SOURCE = "loadgen"
FRESH_SECONDS = 10.0
MAX_STATS_BYTES = 1 << 20  # a stats file is ~2 KB

HELP = {
    "kdiag_loadgen_info": "A running `kdiag bench produce` process: its topic, acks and compression, value 1.",
    "kdiag_loadgen_records_sent_total": "Records the load generator handed to its producer.",
    "kdiag_loadgen_records_acked_total": "Records the brokers acknowledged.",
    "kdiag_loadgen_records_failed_total": "Records whose delivery failed.",
    "kdiag_loadgen_bytes_total": "Record bytes the brokers acknowledged.",
    "kdiag_loadgen_cpu_seconds_total": "User and system CPU seconds of the load generator process.",
    "kdiag_loadgen_queue_fill_ratio": "Fill of the producer's local queue: the larger of records/max and bytes/max (0-1).",
    "kdiag_loadgen_latency_seconds": "Send-to-acknowledgement latency over the last stats interval (mean, 0.99, max).",
    "kdiag_loadgen_broker_rtt_seconds": "Produce request round trip to the broker over the last stats interval (mean, 0.99).",
    "kdiag_loadgen_broker_internal_latency_seconds": "Time records waited in the producer before being sent (mean, 0.99).",
    "kdiag_loadgen_broker_requests_total": "Requests the producer sent to the broker.",
    "kdiag_loadgen_broker_produce_requests_total": "Produce requests the producer sent to the broker.",
    "kdiag_loadgen_broker_request_bytes_total": "Bytes of requests the producer sent to the broker.",
    "kdiag_loadgen_batch_size_bytes": "Average bytes per produced batch over the last stats interval.",
    "kdiag_loadgen_batch_records": "Average records per produced batch over the last stats interval.",
    "kdiag_loadgen_linger_seconds": "The producer's linger.ms, in seconds.",
    "kdiag_loadgen_batch_size_limit_bytes": "The producer's batch.size.",
    "kdiag_loadgen_record_size_bytes": "Size of the records produced (absent with a payload file).",
    "kdiag_loadgen_threads": "Producer processes of this bench run.",
}


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
        out.append(sample("kdiag_loadgen_info", 1, GAUGE, pid=pid, topic=p.get("topic", ""),
                          acks=settings.get("acks", ""), compression=settings.get("compression.type", "")))
        for kind in ("sent", "acked", "failed"):
            out.append(sample(f"kdiag_loadgen_records_{kind}_total", records.get(kind, 0), COUNTER, pid=pid))
        out.append(sample("kdiag_loadgen_bytes_total", p.get("bytes", 0), COUNTER, pid=pid))
        out.append(sample("kdiag_loadgen_threads", p.get("processes", 1), GAUGE, pid=pid))
        for name, key in (("linger_seconds", "linger.ms"), ("batch_size_limit_bytes", "batch.size"),
                          ("record_size_bytes", "record.size")):
            if _known(settings.get(key)):
                value = settings[key] / 1000 if key == "linger.ms" else settings[key]
                out.append(sample(f"kdiag_loadgen_{name}", value, GAUGE, pid=pid))
        for q, key in (("mean", "mean"), ("0.99", "p99"), ("max", "max")):
            if _known(p.get("latency_seconds", {}).get(key)):
                out.append(sample("kdiag_loadgen_latency_seconds", p["latency_seconds"][key], GAUGE, pid=pid, quantile=q))
        rd = p.get("librdkafka") or {}
        fills = [rd[c] / rd[m] for c, m in (("msg_cnt", "msg_max"), ("msg_size", "msg_size_max")) if rd.get(m)]
        if fills:
            out.append(sample("kdiag_loadgen_queue_fill_ratio", max(fills), GAUGE, pid=pid))
        for name, key in (("batch_size_bytes", "batch_bytes_avg"), ("batch_records", "batch_records_avg")):
            if _known(rd.get(key)):
                out.append(sample(f"kdiag_loadgen_{name}", rd[key], GAUGE, pid=pid))
        for broker, b in (rd.get("brokers") or {}).items():
            for name, prefix in (("broker_rtt_seconds", "rtt"), ("broker_internal_latency_seconds", "int_latency")):
                for q, key in (("mean", "avg"), ("0.99", "p99")):
                    if _known(b.get(f"{prefix}_{key}_seconds")):
                        out.append(sample(f"kdiag_loadgen_{name}", b[f"{prefix}_{key}_seconds"], GAUGE,
                                          pid=pid, broker_id=broker, quantile=q))
            for name, key in (("requests", "requests"), ("produce_requests", "produce_requests"),
                              ("request_bytes", "request_bytes")):
                out.append(sample(f"kdiag_loadgen_broker_{name}_total", b.get(key, 0), COUNTER, pid=pid, broker_id=broker))
    return out


@registered()
class LoadgenCollector(Collector):
    """Live stats of the `kdiag bench` processes on this host, and their CPU seconds."""

    name = "loadgen"
    help = HELP

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
                out.append(sample("kdiag_loadgen_cpu_seconds_total", stat.cpu_ticks / TICKS_PER_SECOND, COUNTER,
                                  pid=p["pid"]))
        return out
