"""The daemon's CPU as the host's process count grows (idle `sleep`s added), against node_exporter in the same run.

For each count: enough `sleep` processes to bring the host's process table to it (all killed after), then
`kdiag run --no-discover` (no Kafka), optionally a second kdiag from another source tree (--before-tree: the code
before a change, side by side), and prometheus-node-exporter; each scraped every interval, their CPU measured over
the same window after a warmup.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scrape_vs_node_exporter import Target, free_port, interrupt, measure_cpu

MAX_PROCESSES = 6000  # a bound on what this benchmark adds to a shared machine
GOAL_PERCENT = 1.0


def process_count() -> int:
    """Processes on the host now (the pids /proc lists)."""
    return sum(1 for e in os.listdir("/proc") if e.isdigit())


def add_sleepers(sleepers: list[subprocess.Popen], count: int) -> None:
    """Idle `sleep` processes into sleepers until the host has `count` processes (none when it has as many)."""
    for _ in range(max(0, count - process_count())):
        sleepers.append(subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL))


def stop_all(processes: list[subprocess.Popen]) -> None:
    """SIGKILL and reap each one."""
    for p in processes:
        p.kill()
    for p in processes:
        p.wait()


def targets(args: argparse.Namespace, logs: Path, count: int) -> list[Target]:
    """kdiag (and the --before-tree kdiag) and node_exporter, each on a port of its own."""
    def kdiag(name: str, pythonpath: str | None) -> Target:
        port = free_port()
        env = f"env PYTHONPATH={shlex.quote(pythonpath)} " if pythonpath else ""
        argv = shlex.split(f"{env}{shlex.quote(sys.executable)} -m kdiag run --no-discover "
                           f"--listen 127.0.0.1:{port} --interval {args.interval:g}s")
        return Target(name, port, argv, logs / f"{name}-{count}.log", ready_path="/healthz")

    found = [kdiag("kdiag", None)]
    if args.before_tree:
        found.append(kdiag("kdiag-before", str(Path(args.before_tree).resolve())))
    ne_port = free_port()
    found.append(Target("node_exporter", ne_port, [args.node_exporter, f"--web.listen-address=127.0.0.1:{ne_port}"],
                        logs / f"node_exporter-{count}.log"))
    return found


def measure(args: argparse.Namespace, logs: Path, count: int) -> tuple[int, dict[str, float]]:
    """(processes on the host, % of a core per target) at one process count."""
    sleepers: list[subprocess.Popen] = []
    running = targets(args, logs, count)
    try:
        add_sleepers(sleepers, count)
        if args.churn:  # a host's monitoring agent: a shell running a short command every second
            sleepers.append(subprocess.Popen(["sh", "-c", f"while :; do {args.churn} >/dev/null 2>&1; sleep 1; done"],
                                             stdin=subprocess.DEVNULL))
        for t in running:
            t.start()
        for t in running:
            t.wait_ready(60)
        time.sleep(args.warmup)  # past the first full scan and the second read of every pid it found
        seen = process_count()
        measure_cpu(running, args.window, args.interval)
        return seen, {t.name: t.cpu_per_min / 60 * 100 for t in running}
    finally:
        for t in running:
            t.stop()
        stop_all(sleepers)


def main(argv: list[str] | None = None) -> int:
    """Measure each count, print the table (text and markdown) and whether kdiag stays under the goal."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--counts", default="100,2000,5000", help="process counts to measure (default 100,2000,5000)")
    p.add_argument("--window", type=float, default=60.0, help="seconds of CPU measure per count (default 60)")
    p.add_argument("--warmup", type=float, default=20.0, help="seconds after start before measuring (default 20)")
    p.add_argument("--interval", type=float, default=5.0, help="collection and scrape interval (default 5)")
    p.add_argument("--churn", metavar="COMMAND",
                   help="a command a shell runs every second while measuring (e.g. 'ps -e': short-lived processes)")
    p.add_argument("--before-tree", help="a kdiag source tree (git archive of a commit) to run beside this one")
    args = p.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    if max(counts) > MAX_PROCESSES:
        p.error(f"--counts: at most {MAX_PROCESSES} processes")
    args.node_exporter = shutil.which("prometheus-node-exporter")
    if args.node_exporter is None:
        print("prometheus-node-exporter is not installed", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, interrupt)
    logs = Path(tempfile.mkdtemp(prefix="kdiag-process-scale-"))
    results = [measure(args, logs, count) for count in counts]
    names = list(results[0][1])
    header = ["processes", *(f"{n} % core" for n in names), *(f"{n}/node_exporter" for n in names[:-1])]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---:"] * len(header)) + "|")
    for seen, cpu in results:
        ne = cpu["node_exporter"]
        ratios = [f"{cpu[n] / ne:.2f}" if ne else "n/a" for n in names[:-1]]
        print("| " + " | ".join([str(seen), *(f"{cpu[n]:.2f}" for n in names), *ratios]) + " |")
    worst = max(cpu["kdiag"] for _, cpu in results)
    print(f"{'PASS' if worst < GOAL_PERCENT else 'FAIL'}: kdiag at most {worst:.2f}% of a core "
          f"(goal < {GOAL_PERCENT:g}%; logs in {logs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
