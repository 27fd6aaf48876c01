"""Kafka's ProducerPerformance and ConsumerPerformance output (format strings of the kafka-tools 4.4 classes)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

QUANTILES = (0.5, 0.95, 0.99, 0.999)
MB = 1024 * 1024


def window_line(count: int, seconds: float, nbytes: int, latency_sum_ms: float, latency_max_ms: float) -> str:
    """ProducerPerformance's periodic line for one reporting window."""
    return (f"{count} records sent, {count / seconds:.1f} records/sec ({nbytes / seconds / MB:.2f} MB/sec), "
            f"{_mean(latency_sum_ms, count):.1f} ms avg latency, {latency_max_ms:.1f} ms max latency.")


def total_line(count: int, seconds: float, nbytes: int, latency_sum_ms: float, latency_max_ms: float,
               percentiles: list[int]) -> str:
    """ProducerPerformance's final line: totals, then the 50th, 95th, 99th and 99.9th percentile in whole ms."""
    p50, p95, p99, p999 = percentiles
    return (f"{count} records sent, {count / seconds:f} records/sec ({nbytes / seconds / MB:.2f} MB/sec), "
            f"{_mean(latency_sum_ms, count):.2f} ms avg latency, {latency_max_ms:.2f} ms max latency, "
            f"{p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th.")


def _mean(total: float, count: int) -> float:
    return total / count if count else float("nan")


def percentiles(samples: list[int], quantiles: tuple[float, ...] = QUANTILES) -> list[int]:
    """ProducerPerformance's percentiles: the sorted sample at index int(q * n), 0 without samples."""
    ordered = sorted(samples)
    return [ordered[int(q * len(ordered))] if ordered else 0 for q in quantiles]


def consumer_header(detailed: bool) -> str:
    """ConsumerPerformance's header line."""
    first = "time, threadId" if detailed else "start.time, end.time"
    return (f"{first}, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
            "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


def java_time(ms: float) -> str:
    """A time in ConsumerPerformance's default date format, yyyy-MM-dd HH:mm:ss:SSS."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f":{int(ms % 1000):03d}"


def consumer_summary(start_ms: float, end_ms: float, nbytes: int, count: int, rebalance_ms: int) -> str:
    """ConsumerPerformance's summary line."""
    seconds = (end_ms - start_ms) / 1000
    fetch_ms = int(end_ms - start_ms) - rebalance_ms
    mb = nbytes / MB
    return (f"{java_time(start_ms)}, {java_time(end_ms)}, {mb:.4f}, {_div(mb, seconds):.4f}, {count}, "
            f"{_div(count, seconds):.4f}, {rebalance_ms}, {fetch_ms}, {_div(mb, fetch_ms / 1000):.4f}, "
            f"{_div(count, fetch_ms / 1000):.4f}")


def consumer_progress(now_ms: float, last_ms: float, nbytes: int, last_bytes: int, count: int, last_count: int,
                      rebalance_ms: int) -> str:
    """ConsumerPerformance's --show-detailed-stats line for one interval (thread id 0)."""
    elapsed = now_ms - last_ms
    interval_mb = (nbytes - last_bytes) / MB
    fetch_ms = elapsed - rebalance_ms
    return (f"{java_time(now_ms)}, 0, {nbytes / MB:.4f}, {_div(interval_mb * 1000, elapsed):.4f}, {count}, "
            f"{_div((count - last_count) * 1000, elapsed):.4f}, {rebalance_ms}, {int(fetch_ms)}, "
            f"{_div(interval_mb * 1000, fetch_ms) if fetch_ms > 0 else 0.0:.4f}, "
            f"{_div((count - last_count) * 1000, fetch_ms) if fetch_ms > 0 else 0.0:.4f}")


def _div(a: float, b: float) -> float:
    # Java's double division: x/0 is Infinity or NaN rather than an error.
    if b:
        return a / b
    return float("nan") if not a else float("inf")


def metrics_lines(metrics: dict[str, float]) -> list[str]:
    """`--print-metrics` output in the layout of Kafka's ToolsUtils.printMetrics."""
    if not metrics:
        return []
    width = max(len(k) for k in metrics)
    return ["", f"{'Metric Name':<{width}}   Value"] + [f"{k:<{width}} : {v:.3f}" for k, v in sorted(metrics.items())]


class Delta(NamedTuple):
    """What one worker acknowledged since its last report."""

    count: int  # type: ignore[assignment]  # shadows tuple.count, which nothing here calls
    nbytes: int
    latency_sum_ms: float
    latency_max_ms: float
    samples: list[int]
    failed: int = 0


@dataclass
class Stats:
    """ProducerPerformance's Stats: totals and the current window over all workers, printing each window when due."""

    interval: float
    out: Callable[[str], None]
    start: float = field(default_factory=time.monotonic)
    count: int = 0
    nbytes: int = 0
    latency_sum_ms: float = 0.0
    latency_max_ms: float = 0.0
    failed: int = 0
    samples: list[int] = field(default_factory=list)
    window: list[float] = field(default_factory=lambda: [0, 0, 0.0, 0.0])

    def __post_init__(self) -> None:
        self.window_start = self.start

    def add(self, d: Delta) -> None:
        """Count one worker report; print the window line once the reporting interval has passed."""
        self.count += d.count
        self.nbytes += d.nbytes
        self.latency_sum_ms += d.latency_sum_ms
        self.latency_max_ms = max(self.latency_max_ms, d.latency_max_ms)
        self.failed += d.failed
        self.samples += d.samples
        w = self.window
        w[0] += d.count
        w[1] += d.nbytes
        w[2] += d.latency_sum_ms
        w[3] = max(w[3], d.latency_max_ms)
        now = time.monotonic()
        if now - self.window_start >= self.interval:
            self.out(window_line(int(w[0]), now - self.window_start, int(w[1]), w[2], w[3]))
            self.window, self.window_start = [0, 0, 0.0, 0.0], now

    def summary(self) -> dict[str, Any]:
        """The final numbers, as --json prints them."""
        seconds = time.monotonic() - self.start
        p50, p95, p99, p999 = percentiles(self.samples)
        return {"records": self.count, "failed": self.failed, "bytes": self.nbytes, "elapsed_seconds": seconds,
                "records_per_second": self.count / seconds, "mb_per_second": self.nbytes / seconds / MB,
                "avg_latency_ms": _mean(self.latency_sum_ms, self.count), "max_latency_ms": self.latency_max_ms,
                "p50_ms": p50, "p95_ms": p95, "p99_ms": p99, "p999_ms": p999}

    def final_line(self, summary: dict[str, Any]) -> str:
        """The total line for a summary()."""
        return total_line(self.count, summary["elapsed_seconds"], self.nbytes, self.latency_sum_ms,
                          self.latency_max_ms, [summary[k] for k in ("p50_ms", "p95_ms", "p99_ms", "p999_ms")])
