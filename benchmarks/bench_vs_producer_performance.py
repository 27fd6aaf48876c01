"""`kdiag bench produce` against Kafka's ProducerPerformance on the lab broker: records/s and p99, and the probe's broker cost.

Each run gets a fresh bench-* topic with the same settings (deleted afterwards), the two tools alternate
which goes first, and every run is bounded by --num-records. Runs the seed's tuned producer settings and
each client's defaults, then kdiag with --processes 2. Finally measures the broker's CPU seconds over
--probe-seconds without and with the synthetic probe (kdiag/probe/probe.py) at its default rate.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from kdiag.core.procfs import TICKS_PER_SECOND, parse_stat
from kdiag.tools.lab.lab import read_lab
from kdiag.kafka.jars import classpath
from kdiag.probe.probe import ProbeService
from kdiag.config.probe import ProbeConfig

TUNED = ["acks=1", "batch.size=1048576", "linger.ms=20", "compression.type=lz4"]
TOTAL = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                   r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.$", re.M)


def fresh_topic(admin: AdminClient, partitions: int) -> str:
    """A new bench-* topic."""
    name = f"bench-cmp-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    time.sleep(1.0)  # let the leader settle so neither tool pays for the first metadata refresh
    return name


def command(tool: str, topic: str, args: argparse.Namespace, props: list[str], bootstrap: str, processes: int) -> list[str]:
    """The command line of one run."""
    common = ["--topic", topic, "--num-records", str(args.num_records), "--record-size", str(args.record_size),
              "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", *props]
    if tool == "java":
        return ["java", "-cp", classpath(), "org.apache.kafka.tools.ProducerPerformance", *common]
    return [sys.executable, "-m", "kdiag", "bench", "produce", *common, "--processes", str(processes), "--no-stats"]


def run(tool: str, label: str, args: argparse.Namespace, props: list[str], admin: AdminClient, bootstrap: str,
        processes: int = 1) -> tuple[float, int]:
    """One bounded run on a fresh topic: (records/s, p99 ms) from the tool's own final line."""
    topic = fresh_topic(admin, args.partitions)
    try:
        cmd = command(tool, topic, args, props, bootstrap, processes)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)
    m = TOTAL.search(done.stdout)
    if not m:
        sys.exit(f"{tool} {label}: no final line\n{' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    name = f"kdiag --processes {processes}" if tool == "kdiag" else "ProducerPerformance"
    print(f"  [{label:8}] {name:21} {m.group(0)}", flush=True)
    return float(m.group(2)), int(m.group(8))


def compare(label: str, props: list[str], args: argparse.Namespace, admin: AdminClient, bootstrap: str) -> list[tuple]:
    """Alternating rounds of both tools with the same props, then kdiag with 2 processes: table rows."""
    results: dict[str, list[tuple[float, int]]] = {"kdiag": [], "java": []}
    for i in range(args.rounds):
        for tool in (("kdiag", "java") if i % 2 == 0 else ("java", "kdiag")):
            results[tool].append(run(tool, label, args, props, admin, bootstrap))
    two = [run("kdiag", label, args, props, admin, bootstrap, processes=2) for _ in range(args.rounds)]
    java_rate = statistics.median(r for r, _ in results["java"])
    rows = []
    for name, got in (("ProducerPerformance", results["java"]), ("kdiag bench", results["kdiag"]),
                      ("kdiag bench --processes 2", two)):
        rate = statistics.median(r for r, _ in got)
        rows.append((label, name, rate, statistics.median(p for _, p in got), rate / java_rate))
    return rows


def broker_cpu(pid: int) -> float:
    """utime+stime of the broker process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        return parse_stat(f.read()).cpu_ticks / TICKS_PER_SECOND


def probe_cost(seconds: float, bootstrap: str, pid: int, admin: AdminClient) -> tuple[float, float, float]:
    """Broker CPU seconds over `seconds` without, then with, the probe at its default rate; and the probe's own."""
    before = broker_cpu(pid)
    time.sleep(seconds)
    idle = broker_cpu(pid) - before
    topic = f"bench-probe-{uuid.uuid4().hex[:8]}"
    probe = ProbeService(bootstrap, ProbeConfig(topic=topic), "bench")
    probe.start()
    try:
        time.sleep(10)  # topic creation and the consumer's group join are one-off costs, not the probe's rate
        before, own_before = broker_cpu(pid), time.process_time()
        time.sleep(seconds)
        probed, own = broker_cpu(pid) - before, time.process_time() - own_before
    finally:
        probe.stop()
        admin.delete_topics([topic])[topic].result(timeout=30)
    return idle, probed, own


def main() -> int:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-records", type=int, default=300000)
    parser.add_argument("--record-size", type=int, default=400)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="runs per tool and setting (median reported)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds one run may take")
    parser.add_argument("--probe-seconds", type=float, default=60.0, help="0 skips the probe cost")
    args = parser.parse_args()
    lab = read_lab()
    if lab is None:
        sys.exit("no lab: run `kdiag lab up --brokers 1`")
    bootstrap = lab["bootstrap"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    print(f"{args.num_records} records of {args.record_size} B, {args.partitions} partitions, {args.rounds} rounds, "
          f"broker {bootstrap}", flush=True)
    rows = compare("tuned", TUNED, args, admin, bootstrap) + compare("defaults", [], args, admin, bootstrap)
    print("\n| settings | tool | records/s | p99 ms | vs ProducerPerformance |\n|---|---|---:|---:|---:|")
    for label, name, rate, p99, ratio in rows:
        print(f"| {label} | {name} | {rate:,.0f} | {p99} | {ratio:.2f}x |")
    print(f"\ntuned = {' '.join(TUNED)}; defaults = each client's own (librdkafka: linger.ms=5, batch.size=1000000, "
          "acks=all; Java 4.x: linger.ms=5, batch.size=16384, acks=all, idempotence on)")
    if args.probe_seconds > 0:
        pid = next(iter(lab["pids"].values()))
        idle, probed, own = probe_cost(args.probe_seconds, bootstrap, pid, admin)
        per_minute = 60 / args.probe_seconds
        print(f"\nbroker pid {pid} CPU over {args.probe_seconds:.0f} s: without probe {idle:.2f} s, with probe "
              f"{probed:.2f} s -> the probe costs {(probed - idle) * per_minute:.2f} CPU s/min "
              f"({(probed - idle) / args.probe_seconds:.1%} of one core); other lab users add noise")
        print(f"the probe's own process: {own * per_minute:.2f} CPU s/min ({own / args.probe_seconds:.1%} of one core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
