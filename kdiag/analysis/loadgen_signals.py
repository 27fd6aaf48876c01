"""Load generator signals: per `kdiag bench` process, its pace, CPU, queue, batching, requests and the brokers' idleness."""

from __future__ import annotations

from kdiag.core.history import History
from kdiag.analysis.signals import Signals, latest_by, latest_per, put, rates_per, ratio, subject
from kdiag.families.kafka import KAFKA_NETWORK_PROCESSOR_IDLE_RATIO, KAFKA_REQUEST_HANDLER_IDLE_RATIO
from kdiag.families.process import (
    LOADGEN_BATCH_RECORDS, LOADGEN_BATCH_SIZE_BYTES, LOADGEN_BATCH_SIZE_LIMIT_BYTES,
    LOADGEN_BROKER_PRODUCE_REQUESTS_TOTAL, LOADGEN_BROKER_REQUESTS_TOTAL, LOADGEN_BROKER_REQUEST_BYTES_TOTAL,
    LOADGEN_BROKER_RTT_SECONDS, LOADGEN_CPU_SECONDS_TOTAL, LOADGEN_INFO, LOADGEN_LATENCY_SECONDS,
    LOADGEN_LINGER_SECONDS, LOADGEN_QUEUE_FILL_RATIO, LOADGEN_RECORDS_ACKED_TOTAL, LOADGEN_RECORDS_FAILED_TOTAL,
    LOADGEN_RECORD_SIZE_BYTES, LOADGEN_THREADS,
)


def _max_per_pid(values: dict[tuple[str, ...], float]) -> dict[str, float]:
    """The largest value per pid of a (pid, ...) keyed breakdown."""
    out: dict[str, float] = {}
    for key, v in values.items():
        out[key[0]] = max(out.get(key[0], v), v)
    return out


@subject("loadgen", {
    "pid": "process id of the bench process",
    "topic": "the topic it produces to",
    "records_per_second": "records acknowledged per second",
    "failed_per_second": "records failing per second",
    "cpu_cores": "CPU seconds per second of the bench process (1.0 = one core)",
    "queue_fill_ratio": "fill of the producer's local queue (0-1); near 1 the producer cannot hand records over fast enough",
    "avg_batch_bytes": "average bytes per produced batch",
    "avg_batch_records": "average records per produced batch",
    "produce_requests_per_second": "produce requests per second to all brokers",
    "avg_request_bytes": "bytes per request sent to the brokers",
    "rtt_p99_seconds": "99th percentile request round trip, the slowest broker's",
    "latency_p99_seconds": "99th percentile send-to-acknowledgement latency",
    "linger_seconds": "the producer's linger.ms, in seconds",
    "batch_size_bytes": "the producer's batch.size",
    "record_size_bytes": "size of the records produced",
    "processes": "producer processes of this bench run",
    "brokers_min_request_handler_idle_ratio": "the least idle broker's request handler idle share (0-1), from JMX",
    "brokers_max_network_processor_busy_ratio": "the busiest broker's network thread busy share (0-1), from JMX",
})
def loadgen_signals(history: History, window: float) -> dict[str, Signals]:
    """Pace, CPU, queue fill and batching per load generator process, with the brokers' idleness beside them."""
    acked = rates_per(history, LOADGEN_RECORDS_ACKED_TOTAL, window, "pid")
    failed = rates_per(history, LOADGEN_RECORDS_FAILED_TOTAL, window, "pid")
    cpu = rates_per(history, LOADGEN_CPU_SECONDS_TOTAL, window, "pid")
    produce_requests = rates_per(history, LOADGEN_BROKER_PRODUCE_REQUESTS_TOTAL, window, "pid")
    requests = rates_per(history, LOADGEN_BROKER_REQUESTS_TOTAL, window, "pid")
    request_bytes = rates_per(history, LOADGEN_BROKER_REQUEST_BYTES_TOTAL, window, "pid")
    rtt = _max_per_pid({k: v for k, v in latest_by(history, LOADGEN_BROKER_RTT_SECONDS, "pid", "broker_id",
                                                   "quantile").items() if k[2] == "0.99"})
    latency = latest_by(history, LOADGEN_LATENCY_SECONDS, "pid", "quantile")
    gauges = {family.name.removeprefix("kdiag_loadgen_"): latest_per(history, family, "pid") for family in (
        LOADGEN_QUEUE_FILL_RATIO, LOADGEN_BATCH_SIZE_BYTES, LOADGEN_BATCH_RECORDS, LOADGEN_LINGER_SECONDS,
        LOADGEN_BATCH_SIZE_LIMIT_BYTES, LOADGEN_RECORD_SIZE_BYTES, LOADGEN_THREADS)}
    handler_idle = latest_per(history, KAFKA_REQUEST_HANDLER_IDLE_RATIO, "broker_id")
    network_idle = latest_per(history, KAFKA_NETWORK_PROCESSOR_IDLE_RATIO, "broker_id")
    out = {}
    for labels, _, _ in history.series(LOADGEN_INFO.name):
        pid = labels["pid"]
        out[pid] = put(
            {"name": f"pid {pid} kdiag bench", "topic": labels.get("topic", "")},
            pid=float(pid),
            records_per_second=acked.get(pid),
            failed_per_second=failed.get(pid),
            cpu_cores=cpu.get(pid),
            queue_fill_ratio=gauges["queue_fill_ratio"].get(pid),
            avg_batch_bytes=gauges["batch_size_bytes"].get(pid),
            avg_batch_records=gauges["batch_records"].get(pid),
            produce_requests_per_second=produce_requests.get(pid),
            avg_request_bytes=ratio(request_bytes.get(pid), requests.get(pid)),
            rtt_p99_seconds=rtt.get(pid),
            latency_p99_seconds=latency.get((pid, "0.99")),
            linger_seconds=gauges["linger_seconds"].get(pid),
            batch_size_bytes=gauges["batch_size_limit_bytes"].get(pid),
            record_size_bytes=gauges["record_size_bytes"].get(pid),
            processes=gauges["threads"].get(pid),
            brokers_min_request_handler_idle_ratio=min(handler_idle.values()) if handler_idle else None,
            brokers_max_network_processor_busy_ratio=1.0 - min(network_idle.values()) if network_idle else None,
        )
    return out
