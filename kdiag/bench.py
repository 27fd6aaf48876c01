"""`kdiag bench produce|consume`: kafka-producer-perf-test and kafka-consumer-perf-test work-alikes on confluent-kafka.

The output lines are those of Kafka's ProducerPerformance and ConsumerPerformance (format strings taken from
the kafka-tools 4.4 classes). While producing, every bench process writes its live statistics (counts,
latency, the librdkafka statistics and its settings) to DIR/<pid>.json, which the daemon's loadgen
collector reads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kdiag.config import ConfigError
from kdiag.java_security import translate
from kdiag.kafka_client import ClientSettings, ErrorLog, is_secret

CONFIG_HELP = "kdiag's YAML config: its kafka.bootstrap_servers and kafka.client settings (Java props win)"
STATS_VERSION = 1
SYSTEM_STATS_DIR = "/run/kdiag/loadgen"
QUANTILES = (0.5, 0.95, 0.99, 0.999)
# ProducerPerformance keeps at most this many latency samples for its percentiles.
MAX_SAMPLES = 500_000
REPORT_SECONDS = 0.2
STATS_FILE_SECONDS = 1.0
FULL_CHUNK = 1000
MB = 1024 * 1024

# Java producer/consumer properties whose librdkafka name differs; values in bytes become kilobytes where noted.
RENAMED = {
    "max.in.flight.requests.per.connection": "max.in.flight",
    "max.request.size": "message.max.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
}
KILOBYTES = {"buffer.memory": "queue.buffering.max.kbytes"}
# Java-client settings librdkafka has no counterpart for: warned about and dropped (security ones: java_security.py).
JAVA_ONLY = {
    "key.serializer", "value.serializer", "key.deserializer", "value.deserializer", "partitioner.class",
    "partitioner.ignore.keys", "interceptor.classes", "max.block.ms", "metric.reporters", "metrics.num.samples",
    "metrics.sample.window.ms", "metrics.recording.level", "max.poll.records", "ssl.protocol", "ssl.enabled.protocols",
    "max.poll.interval.ms", "exclude.internal.topics", "default.api.timeout.ms", "client.dns.lookup",
}


# ---- formatting (pure) ---------------------------------------------------------------------------------------------

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


# ---- client properties (pure) --------------------------------------------------------------------------------------

def parse_props(items: list[str]) -> dict[str, str]:
    """`k=v` arguments as a dict; ValueError names an item without '='."""
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"invalid property '{item}': expected PROP-NAME=PROP-VALUE")
        props[key.strip()] = value.strip()
    return props


def parse_properties_file(text: str) -> dict[str, str]:
    """A Java .properties file's `k=v` / `k: v` lines (comments and blank lines skipped)."""
    props = {}
    # A line ending in a backslash goes on (multi-line sasl.jaas.config values are written that way).
    for line in re.sub(r"\\\n[ \t]*", "", text).splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            props[line] = ""
        else:
            props[line[:sep].strip()] = line[sep + 1:].strip()
    return props


def map_java_props(props: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Java client properties as librdkafka properties, with a warning for each one dropped; JavaPropError if refused."""
    out, props = translate(props)
    warnings = []
    for key, value in props.items():
        if key in KILOBYTES:
            out[KILOBYTES[key]] = str(max(1, int(value) // 1024))
        elif key in JAVA_ONLY:
            warnings.append(f"ignoring Java-only property {key} (librdkafka has no equivalent)")
        else:
            out[RENAMED.get(key, key)] = value
    return out, warnings


def warn(message: str) -> None:
    """A kdiag bench warning on stderr."""
    print(f"kdiag bench: {message}", file=sys.stderr, flush=True)


def client_conf(config_file: str | None, props: list[str] | None, kdiag_config: str | None = None) -> dict[str, Any]:
    """librdkafka properties: kdiag's kafka.client and bootstrap servers (--config), then a Java --*.config file, then
    --*-props k=v pairs; dropped ones are warned about. ConfigError or ValueError on what cannot be used."""
    conf: dict[str, Any] = {}
    if kdiag_config:
        from kdiag.config import load_config

        kafka = load_config(kdiag_config).kafka
        conf = {**kafka.client_settings.props, "bootstrap.servers": kafka.bootstrap_servers}
    java = parse_properties_file(Path(config_file).read_text()) if config_file else {}
    java.update(parse_props(props or []))
    mapped, warnings = map_java_props(java)
    for w in warnings:
        warn(w)
    return {**conf, **mapped}


def error_log(conf: dict[str, Any]) -> ErrorLog:
    """An ErrorLog for a bench client: refusals name the librdkafka property to check."""
    props = {k: str(v) for k, v in conf.items() if isinstance(v, str | int | float)}
    return ErrorLog(ClientSettings(props, {k: k for k in props}, prefix=""), str(conf.get("bootstrap.servers", "")))


def make_client(cls: Callable[[dict], Any], conf: dict[str, Any], warn: Callable[[str], None]) -> Any:
    """A confluent-kafka client; properties librdkafka does not know are warned about and dropped."""
    from confluent_kafka import KafkaException

    conf = dict(conf)
    while True:
        try:
            return cls(conf)
        except KafkaException as e:
            message = str(e.args[0].str() if e.args and hasattr(e.args[0], "str") else e)
            unknown = next((k for k in conf if f'"{k}"' in message and "No such configuration property" in message), None)
            if unknown is None:
                raise
            # Never the value: a misspelt password property would print the password.
            conf.pop(unknown)
            warn(f"ignoring unknown property {unknown}")


# ---- live statistics --------------------------------------------------------------------------------------------

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
    return stat.get(name, 0) / 1e6


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


# ---- producer ------------------------------------------------------------------------------------------------------

class Delta(NamedTuple):
    """What one worker acknowledged since its last report."""

    count: int
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


@dataclass
class ProduceJob:
    """What one worker process produces."""

    topic: str
    records: int
    throughput: float
    conf: dict[str, Any]
    payload: bytes | None
    payloads: list[bytes]
    sampling: int
    processes: int
    stats_dir: str | None
    settings: dict[str, Any]


def produce(job: ProduceJob, report: Callable[[Delta], None]) -> dict[str, float]:
    """Produce job.records records, reporting deltas every 0.2 s; returns the last librdkafka metrics."""
    from confluent_kafka import Producer

    latencies: list[float] = []
    sizes: list[int] = []
    errors: list[Any] = []
    keep, keep_size, keep_error = latencies.append, sizes.append, errors.append
    last_stats: dict[str, Any] = {}

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            keep(msg.latency())
        else:
            keep_error(err)

    def delivered_sized(err: Any, msg: Any) -> None:
        if err is None:
            keep(msg.latency())
            keep_size(len(msg.value()))
        else:
            keep_error(err)

    def on_stats(text: str) -> None:
        last_stats.update(librdkafka_summary(json.loads(text), job.topic))

    callback = delivered_sized if job.payloads else delivered
    refusals = error_log(job.conf)
    producer = make_client(Producer, {**job.conf, "stats_cb": on_stats, "statistics.interval.ms": 1000,
                                      "error_cb": refusals.record, "logger": refusals}, warn)

    def refused() -> bool:
        """Whether the cluster refuses us (credentials, TLS): then say why once and drop what waits."""
        # Records would wait out message.timeout.ms (5 min) for a cluster that will never let us in.
        reason = refusals.refusal() if not totals["acked"] and not totals["refused"] else ""
        if reason:
            warn(reason)
            totals["refused"] = 1
            producer.purge()
        return bool(totals["refused"])
    stats_file = StatsFile(job.stats_dir) if job.stats_dir else None
    started = time.time()
    totals = {"sent": 0, "acked": 0, "failed": 0, "bytes": 0, "refused": 0}
    seen = 0
    recent: list[float] = []

    def flush_report() -> None:
        nonlocal seen
        got = latencies.copy()
        del latencies[:]
        nbytes = sum(sizes) if job.payloads else len(got) * len(job.payload or b"")
        del sizes[:]
        failed = len(errors)
        if errors and not totals["failed"] and not totals["refused"]:  # a refusal was said already
            warn(f"delivery failed: {errors[0]}")
        del errors[:]
        first = (-seen) % job.sampling
        seen += len(got)
        totals["acked"] += len(got)
        totals["failed"] += failed
        totals["bytes"] += nbytes
        if got:
            recent.extend(got[::max(1, len(got) // 2000)])
            report(Delta(len(got), nbytes, sum(got) * 1000, max(got) * 1000,
                         [int(x * 1000) for x in got[first::job.sampling]], failed))
        elif failed:
            report(Delta(0, 0, 0.0, 0.0, [], failed))

    def write_stats(now: float) -> None:
        ordered = sorted(recent)
        del recent[:]
        stats_file.write({
            "version": STATS_VERSION, "pid": os.getpid(), "parent": os.getppid(), "processes": job.processes,
            "started": started, "time": now, "topic": job.topic, "settings": job.settings,
            "records": {k: totals[k] for k in ("sent", "acked", "failed")}, "bytes": totals["bytes"],
            "latency_seconds": {"mean": sum(ordered) / len(ordered), "p99": ordered[int(0.99 * len(ordered))],
                                "max": ordered[-1]} if ordered else {},
            "librdkafka": last_stats or None,
        })

    rate = job.throughput
    # Throttled, hand over what 2 ms allow at a time, as ProducerPerformance's ThroughputThrottler sleeps >= 2 ms.
    chunk_len = FULL_CHUNK if rate <= 0 else max(1, min(FULL_CHUNK, int(rate / 500)))
    chunk = [{"value": job.payload} for _ in range(chunk_len)]
    produce_batch, poll = producer.produce_batch, producer.poll
    start = last_report = last_file = time.monotonic()
    sent = 0
    try:
        while sent < job.records:
            batch = chunk if job.records - sent >= chunk_len else chunk[:job.records - sent]
            size = len(batch)
            if job.payloads:
                for m in batch:
                    m["value"] = random.choice(job.payloads)
            queued = produce_batch(job.topic, batch, on_delivery=callback)
            while queued < len(batch):
                # A full local queue: keep the records that did not fit (marked _error) and wait for acks.
                batch = [m for m in batch if m.pop("_error", None) is not None]
                poll(0.01)
                if refused():
                    return summary_metrics(last_stats, os.getpid())
                queued = produce_batch(job.topic, batch, on_delivery=callback)
            sent += size
            totals["sent"] = sent
            poll(0)
            now = time.monotonic()
            if now - last_report >= REPORT_SECONDS:
                flush_report()
                if refused():
                    break
                last_report = now
                if stats_file and now - last_file >= STATS_FILE_SECONDS:
                    write_stats(time.time())
                    last_file = now
            if rate > 0:
                ahead = sent / rate - (now - start)
                if ahead > 0:
                    time.sleep(ahead)
    except KeyboardInterrupt:
        warn("interrupted: waiting for the records in flight")
    finally:
        while len(producer) and producer.flush(0.5):
            flush_report()
            refused()
        flush_report()
        if stats_file:
            stats_file.remove()
    return summary_metrics(last_stats, os.getpid())


def _worker(job: ProduceJob, conn: multiprocessing.connection.Connection) -> None:
    """A forked worker: produce, sending each delta and finally its metrics to the parent."""
    try:
        metrics = produce(job, conn.send)
        conn.send(("done", metrics))
    finally:
        conn.close()


def run_workers(jobs: list[ProduceJob], stats: Stats) -> dict[str, float]:
    """Fork one process per job and fold their deltas into stats; returns their metrics."""
    ctx = multiprocessing.get_context("fork")
    readers, procs = [], []
    for job in jobs:
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(job, writer), daemon=True)
        proc.start()
        writer.close()
        readers.append(reader)
        procs.append(proc)
    metrics: dict[str, float] = {}
    while readers:
        try:
            ready = multiprocessing.connection.wait(readers, timeout=1.0)
        except KeyboardInterrupt:
            # Stopped: the workers stop too, and still report what was acknowledged.
            for proc in procs:
                proc.terminate()
            continue
        for reader in ready:
            try:
                message = reader.recv()
            except EOFError:
                readers.remove(reader)
                continue
            if isinstance(message, Delta):
                stats.add(message)
            else:
                metrics.update(message[1])
    for proc in procs:
        proc.join()
    return metrics


def producer_settings(conf: dict[str, Any], record_size: int | None) -> dict[str, Any]:
    """The settings the daemon shows next to the load: linger, batch size, acks, compression and record size."""
    return {"linger.ms": float(conf.get("linger.ms", 5)), "batch.size": int(conf.get("batch.size", 1000000)),
            "acks": str(conf.get("acks", "all")), "compression.type": str(conf.get("compression.type", "none")),
            "record.size": record_size}


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def cmd_produce(args: argparse.Namespace) -> int:
    """kafka-producer-perf-test."""
    # SIGTERM ends a run like Ctrl-C: report what was acknowledged and remove the stats file.
    signal.signal(signal.SIGTERM, _interrupt)
    if (args.record_size is None) == (args.payload_file is None):
        warn("give exactly one of --record-size or --payload-file")
        return 2
    if args.transactional_id:
        warn("--transactional-id is not supported (transactions are not benchmarked)")
        return 2
    try:
        conf = client_conf(args.producer_config, args.producer_props, args.config)
    except (OSError, ValueError, ConfigError) as e:
        warn(str(e))
        return 2
    if args.bootstrap_server:
        conf["bootstrap.servers"] = args.bootstrap_server
    if not conf.get("bootstrap.servers"):
        warn("give --bootstrap-server, bootstrap.servers in --producer-props/--producer.config, or --config")
        return 2
    conf.setdefault("client.id", "perf-producer-client")
    payloads: list[bytes] = []
    payload = None
    if args.payload_file:
        text = Path(args.payload_file).read_text(encoding="utf-8")
        payloads = [p.encode() for p in text.split(args.payload_delimiter.encode().decode("unicode_escape")) if p]
        if not payloads:
            warn("File does not exist or empty file provided.")
            return 2
    else:
        payload = bytes(random.randrange(65, 91) for _ in range(args.record_size))
    n = max(1, args.processes)
    sampling = max(1, args.num_records // min(args.num_records, MAX_SAMPLES)) if args.num_records > 0 else 1
    stats_dir = None if args.no_stats else (args.stats_dir or default_stats_dir())
    settings = producer_settings(conf, args.record_size)
    jobs = [ProduceJob(args.topic, args.num_records // n + (1 if i < args.num_records % n else 0),
                       args.throughput / n if args.throughput > 0 else -1, conf, payload, payloads, sampling, n,
                       stats_dir, settings) for i in range(n)]
    out = sys.stderr if args.json else sys.stdout
    stats = Stats(args.reporting_interval / 1000, lambda line: print(line, file=out, flush=True))
    metrics = produce(jobs[0], stats.add) if n == 1 else run_workers(jobs, stats)
    summary = stats.summary()
    print(stats.final_line(summary), file=out, flush=True)
    if args.print_metrics:
        print("\n".join(metrics_lines(metrics)), file=out, flush=True)
    if args.json:
        print(json.dumps({**summary, "topic": args.topic, "processes": n, "record_size": args.record_size,
                          "config": {k: v for k, v in conf.items() if not is_secret(k)}}), flush=True)
    return 0 if stats.count else 1


# ---- consumer ------------------------------------------------------------------------------------------------------

def consumer_metrics(stats: dict[str, Any]) -> dict[str, float]:
    """The librdkafka consumer statistics worth printing with --print-metrics."""
    out = {f"librdkafka:{k}" : float(stats[k]) for k in ("rx", "rx_bytes", "rxmsgs", "rxmsg_bytes") if k in stats}
    for b in stats.get("brokers", {}).values():
        if b.get("nodeid", -1) >= 0:
            for name in ("rtt", "throttle"):
                for q in ("avg", "p99"):
                    if (b.get(name) or {}).get("cnt"):
                        out[f"librdkafka-broker:{name}-{q}-seconds:{{broker-id={b['nodeid']}}}"] = b[name][q] / 1e6
            out[f"librdkafka-broker:rxbytes:{{broker-id={b['nodeid']}}}"] = float(b.get("rxbytes", 0))
    return out


def cmd_consume(args: argparse.Namespace) -> int:
    """kafka-consumer-perf-test."""
    from confluent_kafka import Consumer

    if args.threads:
        warn("--threads is ignored (one consumer, as in Kafka's ConsumerPerformance)")
    try:
        conf = client_conf(args.consumer_config, args.consumer_props, args.config)
    except (OSError, ValueError, ConfigError) as e:
        warn(str(e))
        return 2
    if args.bootstrap_server:
        conf["bootstrap.servers"] = args.bootstrap_server
    if not conf.get("bootstrap.servers"):
        warn("give --bootstrap-server, or --config with kafka.bootstrap_servers")
        return 2
    last_stats: dict[str, Any] = {}
    conf.update({
        "group.id": args.group or conf.get("group.id") or f"perf-consumer-{random.randrange(100000)}",
        "auto.offset.reset": "latest" if args.from_latest else "earliest",
        "max.partition.fetch.bytes": args.fetch_size,
        "socket.receive.buffer.bytes": args.socket_buffer_size,
    })
    conf.setdefault("client.id", "perf-consumer-client")
    if args.print_metrics:
        conf.update({"statistics.interval.ms": 1000, "stats_cb": lambda text: last_stats.update(json.loads(text))})
    errors = error_log(conf)
    consumer = make_client(Consumer, {**conf, "error_cb": errors.record, "logger": errors}, warn)
    detailed = args.show_detailed_stats
    if not args.hide_header:
        print(consumer_header(detailed), flush=True)
    now_ms = lambda: time.time() * 1000  # noqa: E731
    rebalance = {"total": 0.0, "join_start": 0.0, "periodic": 0.0}

    def assigned(_consumer: Any, _partitions: Any) -> None:
        took = now_ms() - rebalance["join_start"]
        rebalance["total"] += took
        rebalance["periodic"] += took

    def revoked(_consumer: Any, _partitions: Any) -> None:
        rebalance["join_start"] = now_ms()

    start_ms = now_ms()
    rebalance["join_start"] = start_ms
    consumer.subscribe([args.topic], on_assign=assigned, on_revoke=revoked)
    count = nbytes = 0
    last_consumed = last_report = start_ms
    last_bytes = last_count = 0
    try:
        while count < args.messages and now_ms() - last_consumed <= args.timeout:
            messages = consumer.consume(num_messages=min(10000, args.messages - count), timeout=0.1)
            now = now_ms()
            if messages:
                last_consumed = now
            elif not count and errors.refusal():
                warn(errors.refusal())
                break
            for m in messages:
                if m.error() is None:
                    count += 1
                    nbytes += len(m.value() or b"") + len(m.key() or b"")
            if detailed and now - last_report >= args.reporting_interval:
                print(consumer_progress(now, last_report, nbytes, last_bytes, count, last_count,
                                        int(rebalance["periodic"])), flush=True)
                last_report, last_bytes, last_count, rebalance["periodic"] = now, nbytes, count, 0.0
    except KeyboardInterrupt:
        pass
    if count < args.messages:
        print(f"WARNING: Exiting before consuming the expected number of records: timeout ({args.timeout} ms) exceeded. "
              "You can use the --timeout option to increase the timeout.", flush=True)
    end_ms = now_ms()
    if not detailed:
        print(consumer_summary(start_ms, end_ms, nbytes, count, int(rebalance["total"])), flush=True)
    if args.print_metrics:
        consumer.poll(0)
        print("\n".join(metrics_lines(consumer_metrics(last_stats))), flush=True)
    consumer.close()
    return 0 if count else 1


# ---- argparse ------------------------------------------------------------------------------------------------------

def add_parser(subparsers: Any) -> None:
    """Register `bench produce` and `bench consume` on an argparse subparsers object."""
    bench = subparsers.add_parser("bench", help="load tool: kafka-producer-perf-test / kafka-consumer-perf-test work-alikes")
    sub = bench.add_subparsers(dest="bench_command", required=True)

    p = sub.add_parser("produce", help="kafka-producer-perf-test: produce records, print throughput and latency")
    p.add_argument("--topic", required=True, help="produce records to this topic")
    p.add_argument("--num-records", type=int, required=True, help="number of records to produce")
    p.add_argument("--record-size", type=int, help="record size in bytes (or give --payload-file)")
    p.add_argument("--payload-file", help="UTF-8 file of payloads, one picked at random per record")
    p.add_argument("--payload-delimiter", default="\\n", help="delimiter of the payload file (default \\n)")
    p.add_argument("--throughput", type=float, required=True,
                   help="throttle to about THROUGHPUT records/sec over all processes; -1: no limit")
    p.add_argument("--producer-props", "--command-property", nargs="+", metavar="PROP-NAME=PROP-VALUE",
                   help="producer properties (Java names; mapped to librdkafka); take precedence over the file")
    p.add_argument("--producer.config", "--command-config", dest="producer_config", metavar="CONFIG-FILE",
                   help="producer properties file")
    p.add_argument("--bootstrap-server", help="the server(s) to connect to; overrides bootstrap.servers")
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--print-metrics", action="store_true", help="print the librdkafka metrics at the end")
    p.add_argument("--transactional-id", help="not supported: transactions are not benchmarked")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="INTERVAL-MS",
                   help="interval in milliseconds between progress lines (default 5000)")
    p.add_argument("--processes", type=int, default=1, help="worker processes, to use more than one core (default 1)")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout; progress lines go to stderr")
    p.add_argument("--stats-dir", help=f"where live stats files go (default {SYSTEM_STATS_DIR} when writable, "
                                       "else $XDG_RUNTIME_DIR/kdiag-loadgen or /tmp/kdiag-loadgen)")
    p.add_argument("--no-stats", action="store_true", help="write no live stats file")
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("consume", help="kafka-consumer-perf-test: consume records, print throughput")
    p.add_argument("--bootstrap-server", "--broker-list", help="the server(s) to connect to (default: --config's)")
    p.add_argument("--topic", required=True, help="the topic to consume from")
    p.add_argument("--messages", "--num-records", type=int, required=True, help="number of records to consume")
    p.add_argument("--threads", type=int, help="ignored, as in Kafka's ConsumerPerformance")
    p.add_argument("--timeout", type=int, default=10000, help="maximum milliseconds between returned records (default 10000)")
    p.add_argument("--group", help="consumer group id (default perf-consumer-<random>)")
    p.add_argument("--fetch-size", type=int, default=1048576, help="maximum bytes fetched per partition per request")
    p.add_argument("--socket-buffer-size", type=int, default=2097152, help="TCP receive buffer size")
    p.add_argument("--from-latest", action="store_true", help="without a committed offset, start at the end of the log")
    p.add_argument("--consumer.config", "--command-config", dest="consumer_config", help="consumer properties file")
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--command-property", dest="consumer_props", nargs="+", metavar="PROP-NAME=PROP-VALUE",
                   help="consumer properties (Java names; mapped to librdkafka)")
    p.add_argument("--print-metrics", action="store_true", help="print the librdkafka metrics at the end")
    p.add_argument("--show-detailed-stats", action="store_true", help="print stats every reporting interval")
    p.add_argument("--reporting-interval", type=int, default=5000, help="milliseconds between detailed stats")
    p.add_argument("--hide-header", action="store_true", help="do not print the header line")
    p.set_defaults(func=cmd_consume)
