"""`kdiag bench produce|consume`: the arguments of the kafka-producer-perf-test and kafka-consumer-perf-test work-alikes."""

from __future__ import annotations

import argparse

from kdiag.tools.bench.consume import cmd_consume
from kdiag.tools.bench.produce import cmd_produce
from kdiag.tools.bench.stats import SYSTEM_STATS_DIR

CONFIG_HELP = "kdiag's YAML config: its kafka.bootstrap_servers and kafka.client settings (Java props win)"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
