"""The cost on the host of reading a container broker's JMX, each way kdiag does it with no config: JmxTool run in the
broker's network namespace (nsenter --net) or the broker's jmx_exporter agent polled over HTTP by a thread that
joined that namespace. CPU seconds (kdiag's own process and, for JmxTool, its JVM) and RSS over a window at kdiag's
10 s poll, and the start. Needs `kdiag lab up --containers --jmx-exporter` (any node with the agent for `agent`).

    python benchmarks/jmx_netns.py --way jmxtool --node 2 --window 300
    python benchmarks/jmx_netns.py --way agent --node 1 --window 300
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

from kdiag.collectors.kafka.jmx import KafkaJmxCollector
from kdiag.kafka.jmx_reader import JmxReader
from kdiag.tools.lab.containers import exporter_port

HZ = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def own_cpu() -> float:
    """This process's CPU seconds, every thread (the readers' threads included)."""
    return cpu_seconds(os.getpid())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lab-dir", default=os.environ.get("KDIAG_LAB_DIR", "~/.cache/kdiag/lab-containers"))
    parser.add_argument("--way", choices=("jmxtool", "agent"), required=True)
    parser.add_argument("--node", type=int, default=1)
    parser.add_argument("--window", type=float, default=300.0, help="seconds of steady polling measured")
    args = parser.parse_args()
    d = Path(args.lab_dir).expanduser()
    info = json.loads((d / "lab.json").read_text())
    pid, jmx_port = info["pids"][str(args.node)], info["nodes"][str(args.node)]["jmx_port"]
    if args.way == "agent":
        endpoint = f"http://127.0.0.1:{exporter_port(jmx_port)}/metrics@netns:{pid}"
        collector = KafkaJmxCollector([endpoint], timeout=30, poll_interval=10)
    else:
        endpoint = f"127.0.0.1:{jmx_port}@netns:{pid}"
        collector = KafkaJmxCollector([endpoint], timeout=60, poll_interval=10, classpath=f"{d}/libs/*")
    url = collector.urls[0]
    rss0, cpu0, t0 = rss_mb(os.getpid()), own_cpu(), time.monotonic()
    try:
        values = collector.fetch()["endpoints"][url].get("values", {})
        first, start_cpu = time.monotonic() - t0, own_cpu() - cpu0
        reader = collector.readers[url]
        jvm = reader.process.pid if isinstance(reader, JmxReader) else None
        jvm0 = cpu_seconds(jvm) if jvm else 0.0
        cpu1, t1 = own_cpu(), time.monotonic()
        polls = 0
        while time.monotonic() - t1 < args.window:  # the measured window itself, fetched as kdiag's cycle does
            time.sleep(10)
            polls += bool(collector.fetch()["endpoints"][url].get("values"))
        cpu2, t2 = own_cpu(), time.monotonic()
        jvm_cpu, jvm_rss = (cpu_seconds(jvm) - jvm0, rss_mb(jvm)) if jvm else (0.0, 0.0)
    finally:
        collector.close()
    own = cpu2 - cpu1
    total = own + jvm_cpu
    print(f"{args.way} {endpoint}: {len(values)} values, first after {first:.2f} s ({start_cpu:.2f} CPU s in kdiag)")
    print(f"window {t2 - t1:.0f} s, {polls} fetches with values: CPU {total:.2f} s ({100 * total / (t2 - t1):.2f}% of a "
          f"core; kdiag {own:.2f} s, JVM {jvm_cpu:.2f} s); RSS: JVM {jvm_rss:.0f} MB, kdiag +"
          f"{rss_mb(os.getpid()) - rss0:.0f} MB (peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")


if __name__ == "__main__":
    main()
