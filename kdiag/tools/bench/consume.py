"""`kdiag bench consume`: kafka-consumer-perf-test on confluent-kafka."""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

from kdiag.tools.bench.client import bench_conf, error_log, make_client, warn
from kdiag.tools.bench.format import consumer_header, consumer_progress, consumer_summary, metrics_lines


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
    conf = bench_conf(args.consumer_config, args.consumer_props, args.config, args.bootstrap_server,
                      "give --bootstrap-server, or --config with kafka.bootstrap_servers")
    if conf is None:
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

    def now_ms() -> float:
        return time.time() * 1000

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
