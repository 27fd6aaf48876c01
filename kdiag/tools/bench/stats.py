"""The live statistics file (DIR/<pid>.json) each producing bench process writes for the daemon's loadgen collector."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

STATS_VERSION = 1
SYSTEM_STATS_DIR = "/run/kdiag/loadgen"


def default_stats_dir() -> str:
    """/run/kdiag/loadgen when writable, else $XDG_RUNTIME_DIR/kdiag-loadgen, else /tmp/kdiag-loadgen."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    for candidate in (SYSTEM_STATS_DIR, os.path.join(xdg, "kdiag-loadgen") if xdg else None):
        if candidate:
            with contextlib.suppress(OSError):
                os.makedirs(candidate, exist_ok=True)
                if os.access(candidate, os.W_OK):
                    return candidate
    return os.path.join(tempfile.gettempdir(), "kdiag-loadgen")


def _window(stat: dict[str, Any] | None, name: str) -> float | None:
    """One field of a librdkafka window stat (microseconds) in seconds, None when the window is empty."""
    if not stat or not stat.get("cnt"):
        return None
    return float(stat.get(name, 0)) / 1e6


def librdkafka_summary(stats: dict[str, Any], topic: str) -> dict[str, Any]:
    """What the daemon needs from one librdkafka statistics JSON: queue fill, per-broker latency and requests, batches."""
    brokers = {}
    for b in stats.get("brokers", {}).values():
        if b.get("nodeid", -1) < 0:  # the bootstrap connection, not a broker
            continue
        brokers[str(b["nodeid"])] = {
            "rtt_avg_seconds": _window(b.get("rtt"), "avg"),
            "rtt_p99_seconds": _window(b.get("rtt"), "p99"),
            "int_latency_avg_seconds": _window(b.get("int_latency"), "avg"),
            "int_latency_p99_seconds": _window(b.get("int_latency"), "p99"),
            "outbuf_latency_avg_seconds": _window(b.get("outbuf_latency"), "avg"),
            "requests": b.get("tx", 0),
            "request_bytes": b.get("txbytes", 0),
            "produce_requests": b.get("req", {}).get("Produce", 0),
            "in_flight": b.get("waitresp_cnt", 0),
        }
    t = stats.get("topics", {}).get(topic, {})
    return {
        "msg_cnt": stats.get("msg_cnt", 0),
        "msg_max": stats.get("msg_max", 0),
        "msg_size": stats.get("msg_size", 0),
        "msg_size_max": stats.get("msg_size_max", 0),
        "brokers": brokers,
        "batch_bytes_avg": (t.get("batchsize") or {}).get("avg") if (t.get("batchsize") or {}).get("cnt") else None,
        "batch_records_avg": (t.get("batchcnt") or {}).get("avg") if (t.get("batchcnt") or {}).get("cnt") else None,
    }


def summary_metrics(summary: dict[str, Any], pid: int) -> dict[str, float]:
    """A librdkafka summary as `--print-metrics` name -> value pairs."""
    out = {f"librdkafka:{k.replace('_', '-')}:{{pid={pid}}}": float(v)
           for k, v in summary.items() if isinstance(v, int | float) and v is not None}
    for broker, values in summary.get("brokers", {}).items():
        for k, v in values.items():
            if v is not None:
                out[f"librdkafka-broker:{k.replace('_', '-')}:{{broker-id={broker},pid={pid}}}"] = float(v)
    return out


class StatsFile:
    """One bench process's live statistics file, replaced atomically so readers never see half of it."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / f"{os.getpid()}.json"

    def write(self, state: dict[str, Any]) -> None:
        """Replace the file with state."""
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self.path)

    def remove(self) -> None:
        """Delete the file (the run is over)."""
        with contextlib.suppress(OSError):
            self.path.unlink()
