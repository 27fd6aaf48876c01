"""CPU and wall time per JMX cycle against the lab: resident JmxTool readers vs one JMXQuery.jar JVM per endpoint."""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

import jmxquery

from kdiag.collectors.kafka.jmx import QUERIES, KafkaJmxCollector, samples_from_jmx_state
from kdiag.tools.lab.lab import read_lab

TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """utime + stime of a live process in seconds (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def own_cpu() -> float:
    """CPU seconds of this process plus its reaped children."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def readers_cpu(collector: KafkaJmxCollector) -> float:
    """CPU seconds of the live JmxTool JVMs so far."""
    return sum(proc_cpu(r.process.pid) for r in collector.readers.values())


def resident(endpoints: list[str], cycles: int, interval: float) -> list[tuple[float, float]]:
    """(wall, cpu) per cycle of KafkaJmxCollector with readers polling once per interval; cycle 0 includes JVM starts."""
    collector = KafkaJmxCollector(endpoints, poll_interval=interval)
    out = []
    try:
        for _ in range(cycles):
            cpu0, jvm0, t0 = own_cpu(), readers_cpu(collector), time.perf_counter()
            samples_from_jmx_state(collector.fetch())
            wall = time.perf_counter() - t0
            # The readers keep polling between cycles: charge the whole interval to the cycle.
            time.sleep(max(0.0, interval - wall))
            out.append((wall, own_cpu() - cpu0 + readers_cpu(collector) - jvm0))
    finally:
        collector.close()
    return out


def oneshot(endpoints: list[str], cycles: int) -> list[tuple[float, float]]:
    """(wall, cpu) per cycle of one `java -jar JMXQuery.jar` call per endpoint (all MBeans batched)."""
    queries = [jmxquery.JMXQuery(q) for q in QUERIES]
    out = []
    for _ in range(cycles):
        cpu0, t0 = own_cpu(), time.perf_counter()
        for url in endpoints:
            if not jmxquery.JMXConnection(url).query(queries, timeout=10):
                raise RuntimeError(f"{url}: empty JMXQuery result")
        out.append((time.perf_counter() - t0, own_cpu() - cpu0))
    return out


def report(name: str, rows: list[tuple[float, float]], interval: float, skip_first: bool) -> None:
    """Print per-cycle rows and the steady-state CPU share of one core at the interval."""
    print(f"{name}: cycle wall_s cpu_s")
    for i, (wall, cpu) in enumerate(rows):
        print(f"  {i:2d} {wall:7.3f} {cpu:7.3f}")
    steady = rows[1:] if skip_first and len(rows) > 1 else rows
    cpu = sum(c for _, c in steady) / len(steady)
    print(f"  mean cpu/cycle {cpu:.3f} s -> {100 * cpu / interval:.2f}% of one core at a {interval:g} s interval")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--interval", type=float, default=30.0, help="JMX cycle interval (s)")
    parser.add_argument("--mode", choices=("resident", "oneshot", "both"), default="both")
    args = parser.parse_args()
    lab = read_lab()
    if not lab:
        raise SystemExit("lab not running: kdiag lab up --brokers 3")
    endpoints = [lab["jmx"][n] for n in sorted(lab["jmx"], key=int)]
    print(f"endpoints: {len(endpoints)}  cycles: {args.cycles}  interval: {args.interval:g} s  cpus: {os.cpu_count()}")
    if args.mode in ("oneshot", "both"):
        report("oneshot JMXQuery.jar per endpoint", oneshot(endpoints, args.cycles), args.interval, skip_first=False)
    if args.mode in ("resident", "both"):
        report(
            "resident JmxTool per endpoint (cycle 0 = JVM start)",
            resident(endpoints, args.cycles, args.interval),
            args.interval,
            skip_first=True,
        )


if __name__ == "__main__":
    main()
