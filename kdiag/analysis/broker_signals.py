"""Kafka signals per broker (JMX and AdminClient): load, flushes, thread idleness, request times, leadership, GC, and
the slow-broker and slow-replica comparisons."""

from __future__ import annotations

import statistics

from kdiag.kafka import jvm_gc
from kdiag.core.history import History
from kdiag.analysis.brokers import ON_BROKERS, live_brokers, node_id, on_brokers, topic_rates_by_leader
from kdiag.analysis.latency_outliers import REQUEST_SIGNALS, longest_gc_pauses, probe_outliers, slowest_request_part
from kdiag.analysis.replica_signals import REPLICA_SCHEMA, replica_fields
from kdiag.analysis.signals import Signals, latest_by, latest_per, per_1k, put, rates_by, rates_per, ratio, subject
from kdiag.families.kafka import (
    JVM_GC_COLLECTION_SECONDS_TOTAL, KAFKA_BROKER_CONFIG, KAFKA_BROKER_CONFIG_SOURCE_INFO, KAFKA_BROKER_LEADERS,
    KAFKA_BROKER_REPLICAS, KAFKA_BYTES_IN_TOTAL, KAFKA_FETCH_REQUESTS_TOTAL, KAFKA_ISR_SHRINKS_TOTAL, KAFKA_LEADERS,
    KAFKA_LOG_FLUSHES_TOTAL, KAFKA_LOG_FLUSH_SECONDS, KAFKA_MESSAGES_IN_TOTAL, KAFKA_NETWORK_PROCESSOR_IDLE_RATIO,
    KAFKA_PARTITIONS, KAFKA_PRODUCE_REQUESTS_TOTAL, KAFKA_REQUEST_HANDLER_IDLE_RATIO, KAFKA_REQUEST_QUEUE_SIZE,
    KAFKA_REQUEST_TIME_SECONDS, KAFKA_UNDER_MIN_ISR_PARTITIONS, KAFKA_UNDER_REPLICATED_PARTITIONS,
)

PRODUCE_PHASES = ("total", "queue", "local", "remote", "response_queue", "response_send")
BROKER_CONFIGS = {
    "log.flush.interval.messages": "log_flush_interval_messages",
    "log.flush.interval.ms": "log_flush_interval_ms",
    "log.flush.scheduler.interval.ms": "log_flush_scheduler_interval_ms",
    "num.io.threads": "num_io_threads",
    "num.network.threads": "num_network_threads",
    "socket.send.buffer.bytes": "socket_send_buffer_bytes",
    "socket.receive.buffer.bytes": "socket_receive_buffer_bytes",
}
FLUSH_CONFIG_PLACES = {
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "the cluster-wide dynamic default (kafka-configs --entity-default)",
    "DYNAMIC_BROKER_CONFIG": "a dynamic config of broker {b} (kafka-configs --entity-name {b})",
    "STATIC_BROKER_CONFIG": "server.properties",
}


@subject("broker", {
    "broker_id": "the broker's node id",
    "on_brokers": ON_BROKERS,
    "leaders": "partitions this broker leads",
    "leader_share": "this broker's share of all partition leaders (0-1)",
    "partitions": "partition replicas on this broker",
    "bytes_in_per_second": "bytes produced to this broker per second",
    "bytes_in_share": "this broker's share of the cluster's bytes in (0-1)",
    "messages_in_per_second": "messages produced to this broker per second",
    "produce_requests_per_second": "produce requests per second",
    "fetch_requests_per_second": "fetch requests per second (consumers and followers)",
    "avg_produce_request_bytes": "bytes per produce request (small means unbatched producers)",
    "log_flushes_per_second": "log flushes (fsync) per second",
    "log_flushes_per_1k_messages": "log flushes per 1,000 messages produced to this broker: a forced flush every N "
                                   "messages gives 1000/N per replica, at any load",
    "log_flush_seconds_mean": "mean time of one log flush",
    "log_flush_seconds_p99": "99th percentile time of one log flush",
    "request_handler_idle_ratio": "request handler threads' idle share (0-1)",
    "network_processor_idle_ratio": "network threads' idle share (0-1)",
    "request_queue_size": "requests waiting for a handler thread",
    **{f"{kind}_{p}_time_p99_seconds": f"99th percentile of {request} request {p.replace('_', ' ')} time"
       for request, kind in REQUEST_SIGNALS.items() for p in PRODUCE_PHASES},
    "slow_request_part": "the request phase with the highest p99 here (Kafka's RequestMetrics split per request type), "
                         "what it means and its ratio to the other brokers' same phase",
    "probe_p99_seconds": "the probe's p99 through partitions this broker leads over the signal window (the larger of "
                         "produce and end to end)",
    "probe_peers_p99_seconds": "the median of the other brokers' probe p99",
    "probe_history_p99_seconds": "the lower quartile of this broker's probe p99 over the past 20 signal windows",
    "probe_latency_vs_peers": "this broker's probe p99 over the median of the other brokers' (the larger of the produce "
                              "and end-to-end ratios)",
    "probe_latency_vs_history": "this broker's probe p99 over its own lower quartile of the past 20 signal windows (the larger "
                                "of the produce and end-to-end ratios; absent before 4 windows of history)",
    "under_replicated_partitions": "partitions led here with fewer in-sync replicas than replicas",
    "under_min_isr_partitions": "partitions led here below min.insync.replicas",
    **REPLICA_SCHEMA,
    "isr_shrinks_per_second": "ISR shrinks per second",
    "gc_seconds_per_second": "JVM garbage collection seconds per second",
    "gc_pause_longest_seconds": "the longest stop-the-world GC pause in the last 5 minutes, as the mean pause between two "
                                "JMX reads (exact when one collection fell between them, else a lower bound)",
    **{name: f"broker config {key}" for key, name in BROKER_CONFIGS.items()},
    "messages_per_produce_request": "messages produced per produce request (1 means no batching at all)",
    "slowness_vs_peers": "this broker's produce local time and log flush time p99 over the median of the other brokers' "
                         "(the larger of the two ratios)",
    "slowness_vs_history": "the same two p99s over their own median in the history (the larger ratio)",
    "busiest_topics": "the topics led here taking the most messages, with their messages/s",
    "log_flush_set_in": "where log.flush.interval.messages/ms are set: cluster-wide dynamic default, broker dynamic config "
                        "or server.properties",
})
def broker_signals(history: History, window: float) -> dict[str, Signals]:
    """Load, flushes, thread idleness, produce time split and leadership per broker."""
    leaders = latest_per(history, KAFKA_BROKER_LEADERS, "broker_id") or latest_per(
        history, KAFKA_LEADERS, "broker_id")
    replicas = latest_per(history, KAFKA_BROKER_REPLICAS, "broker_id") or latest_per(
        history, KAFKA_PARTITIONS, "broker_id")
    bytes_in = rates_per(history, KAFKA_BYTES_IN_TOTAL, window, "broker_id")
    messages_in = rates_per(history, KAFKA_MESSAGES_IN_TOTAL, window, "broker_id")
    produce_requests = rates_per(history, KAFKA_PRODUCE_REQUESTS_TOTAL, window, "broker_id")
    fetch_requests = rates_per(history, KAFKA_FETCH_REQUESTS_TOTAL, window, "broker_id")
    flushes = rates_per(history, KAFKA_LOG_FLUSHES_TOTAL, window, "broker_id")
    flush_time = latest_by(history, KAFKA_LOG_FLUSH_SECONDS, "broker_id", "quantile")
    handler_idle = latest_per(history, KAFKA_REQUEST_HANDLER_IDLE_RATIO, "broker_id")
    network_idle = latest_per(history, KAFKA_NETWORK_PROCESSOR_IDLE_RATIO, "broker_id")
    queue = latest_per(history, KAFKA_REQUEST_QUEUE_SIZE, "broker_id")
    times = latest_by(history, KAFKA_REQUEST_TIME_SECONDS, "broker_id", "request", "phase", "quantile")
    urp = latest_per(history, KAFKA_UNDER_REPLICATED_PARTITIONS, "broker_id")
    under_min = latest_per(history, KAFKA_UNDER_MIN_ISR_PARTITIONS, "broker_id")
    shrinks = rates_per(history, KAFKA_ISR_SHRINKS_TOTAL, window, "broker_id")
    gc: dict[str, float] = {}
    for (b, collector), rate in rates_by(history, JVM_GC_COLLECTION_SECONDS_TOTAL, window, "broker_id", "gc").items():
        if jvm_gc.pauses(collector):
            gc[b] = gc.get(b, 0.0) + rate
    configs = latest_by(history, KAFKA_BROKER_CONFIG, "broker_id", "name")
    flush_places: dict[str, list[str]] = {}
    for (b, name, source) in latest_by(history, KAFKA_BROKER_CONFIG_SOURCE_INFO, "broker_id", "name", "source"):
        place = FLUSH_CONFIG_PLACES.get(source, source).format(b=b)
        if name.startswith("log.flush.interval.") and place not in flush_places.setdefault(b, []):
            flush_places[b].append(place)
    topics_led = topic_rates_by_leader(history)
    slowness = slowness_ratios(history)
    outliers = probe_outliers(history, window)
    gc_pauses = longest_gc_pauses(history)
    replica = replica_fields(history, window)
    total_leaders = sum(leaders.values())
    total_bytes_in = sum(bytes_in.values())
    ids = set(live_brokers(history)) | set(leaders) | set(bytes_in) | set(handler_idle) | set(outliers) | set(replica)
    out = {}
    for b in sorted(ids):
        out[b] = put(
            {"name": f"broker {b}"},
            broker_id=node_id(b),
            on_brokers=on_brokers([b]),
            leaders=leaders.get(b),
            leader_share=ratio(leaders.get(b), total_leaders),
            partitions=replicas.get(b),
            bytes_in_per_second=bytes_in.get(b),
            bytes_in_share=ratio(bytes_in.get(b), total_bytes_in),
            messages_in_per_second=messages_in.get(b),
            produce_requests_per_second=produce_requests.get(b),
            fetch_requests_per_second=fetch_requests.get(b),
            avg_produce_request_bytes=ratio(bytes_in.get(b), produce_requests.get(b)),
            messages_per_produce_request=ratio(messages_in.get(b), produce_requests.get(b)),
            slowness_vs_peers=slowness.get(b, (None, None))[0],
            slowness_vs_history=slowness.get(b, (None, None))[1],
            busiest_topics=", ".join(f"{t} ({r:.0f} msg/s)" for t, r in sorted(
                topics_led.get(b, {}).items(), key=lambda kv: -kv[1])[:3] if r > 0) or None,
            log_flushes_per_second=flushes.get(b),
            log_flushes_per_1k_messages=per_1k(flushes.get(b), messages_in.get(b)),
            log_flush_seconds_mean=flush_time.get((b, "mean")),
            log_flush_seconds_p99=flush_time.get((b, "0.99")),
            request_handler_idle_ratio=handler_idle.get(b),
            network_processor_idle_ratio=network_idle.get(b),
            request_queue_size=queue.get(b),
            under_replicated_partitions=urp.get(b),
            under_min_isr_partitions=under_min.get(b),
            isr_shrinks_per_second=shrinks.get(b),
            gc_seconds_per_second=gc.get(b),
            gc_pause_longest_seconds=gc_pauses.get(b),
            **{f"{kind}_{p}_time_p99_seconds": times.get((b, request, p, "0.99"))
               for request, kind in REQUEST_SIGNALS.items() for p in PRODUCE_PHASES},
            slow_request_part=slowest_request_part(times, b),
            probe_p99_seconds=outliers.get(b, {}).get("p99"),
            probe_peers_p99_seconds=outliers.get(b, {}).get("peers_p99"),
            probe_history_p99_seconds=outliers.get(b, {}).get("history_p99"),
            probe_latency_vs_peers=outliers.get(b, {}).get("vs_peers"),
            probe_latency_vs_history=outliers.get(b, {}).get("vs_history"),
            **replica.get(b, {}),
            **{name: configs.get((b, key)) for key, name in BROKER_CONFIGS.items()},
            log_flush_set_in=" and ".join(sorted(flush_places.get(b, []))) or None,
        )
    return out


SLOWNESS_METRICS = ((KAFKA_REQUEST_TIME_SECONDS, {"request": "Produce", "phase": "local", "quantile": "0.99"}),
                    (KAFKA_LOG_FLUSH_SECONDS, {"quantile": "0.99"}))


def slowness_ratios(history: History) -> dict[str, tuple[float | None, float | None]]:
    """Per broker, (worst p99 over the other brokers' median, worst p99 over its own median in the history)."""
    worst: dict[str, list[float | None]] = {}
    for family, want in SLOWNESS_METRICS:
        now: dict[str, float] = {}
        past: dict[str, float] = {}
        for labels, points, _ in history.series(family.name):
            if all(labels.get(k) == v for k, v in want.items()):
                b = labels["broker_id"]
                now[b], past[b] = points[-1][1], statistics.median(v for _, v in points)
        for b, value in now.items():
            peers = [v for other, v in now.items() if other != b]
            ratios = worst.setdefault(b, [None, None])
            for i, base in enumerate((statistics.median(peers) if peers else None, past[b])):
                r = ratio(value, base)
                if r is not None and ((best := ratios[i]) is None or r > best):
                    ratios[i] = r
    return {b: (r[0], r[1]) for b, r in worst.items()}

