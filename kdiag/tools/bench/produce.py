"""`kdiag bench produce`: kafka-producer-perf-test on confluent-kafka, one or more worker processes."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdiag.tools.bench.client import bench_conf, error_log, make_client, warn
from kdiag.tools.bench.format import Delta, Stats, metrics_lines
from kdiag.tools.bench.stats import STATS_VERSION, StatsFile, default_stats_dir, librdkafka_summary, summary_metrics
from kdiag.kafka.client import is_secret

# ProducerPerformance keeps at most this many latency samples for its percentiles.
MAX_SAMPLES = 500_000
REPORT_SECONDS = 0.2
STATS_FILE_SECONDS = 1.0
FULL_CHUNK = 1000


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

    def write_stats(stats_file: StatsFile, now: float) -> None:
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
                    write_stats(stats_file, time.time())
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
        for reader in [r for r in readers if r in ready]:
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
    conf = bench_conf(args.producer_config, args.producer_props, args.config, args.bootstrap_server,
                      "give --bootstrap-server, bootstrap.servers in --producer-props/--producer.config, or --config")
    if conf is None:
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
