"""The cost on the host of reading a container broker's JMX: JmxTool in its network namespace (nsenter --net), the
JVM's RSS, threads and CPU over a window at a 10 s poll and its start; or, with --exporter, kdiag's own CPU and RSS
polling the broker's jmx_exporter agent over HTTP instead. Needs `kdiag lab up --containers [--jmx-exporter]`."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import yaml

from kdiag.collectors.kafka.jmx import KafkaJmxCollector
from kdiag.kafka.jmx_exporter import ExporterReader
from kdiag.kafka.jmx_reader import split_netns

HZ = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def exporter(address: str, port: int, window: float) -> None:
    """kdiag's CPU and RSS growth polling one agent every 10 s (parse and mapping included)."""
    url = f"http://{address}:{port}/metrics"
    rss0, cpu0 = rss_mb(os.getpid()), time.process_time()
    collector = KafkaJmxCollector([url], timeout=30, poll_interval=10)
    try:
        t0 = time.monotonic()
        values = collector.fetch()["endpoints"][url].get("values", {})
        first = time.monotonic() - t0
        cpu1, t1 = time.process_time(), time.monotonic()
        time.sleep(window)  # the measured window itself
        collector.fetch()
        cpu2, t2 = time.process_time(), time.monotonic()
        reader = collector.readers[url]
        assert isinstance(reader, ExporterReader)
        size = len(reader._pool.request("GET", url).data)
    finally:
        collector.close()
    print(f"endpoint {url}: {len(values)} values from {size / 1e6:.1f} MB of exposition; first after {first:.2f} s, "
          f"{cpu1 - cpu0:.2f} CPU s")
    print(f"steady: {100 * (cpu2 - cpu1) / (t2 - t1):.2f}% of a core over {t2 - t1:.0f} s "
          f"({(cpu2 - cpu1) / max(1.0, (t2 - t1) / 10):.3f} CPU s a poll), kdiag's RSS +{rss_mb(os.getpid()) - rss0:.0f} MB, "
          "no process")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lab-dir", default=os.environ.get("KDIAG_LAB_DIR", "~/.cache/kdiag/lab-containers"))
    parser.add_argument("--window", type=float, default=120.0, help="seconds of steady polling measured")
    parser.add_argument("--exporter", action="store_true", help="read node 1's jmx_exporter agent instead")
    args = parser.parse_args()
    config = yaml.safe_load((Path(args.lab_dir).expanduser() / "kdiag.yaml").read_text())["kafka"]
    endpoint = config["jmx"][0]
    if args.exporter:
        exporter(config["bootstrap_servers"].split(",")[0].split(":")[0], int(endpoint.split(":")[-2].split("/")[0]) - 1,
                 args.window)
        return
    collector = KafkaJmxCollector([endpoint], timeout=60, poll_interval=10, classpath=config["jmx_classpath"])
    try:
        t0 = time.monotonic()
        values = collector.fetch()["endpoints"][endpoint].get("values", {})
        first_row = time.monotonic() - t0
        pid = collector.readers[endpoint].process.pid
        broker = split_netns(endpoint)[1]
        same = os.readlink(f"/proc/{pid}/ns/net") == os.readlink(f"/proc/{broker}/ns/net")
        start_cpu, t1 = cpu_seconds(pid), time.monotonic()
        time.sleep(args.window)  # the measured window itself
        collector.fetch()
        end_cpu, t2 = cpu_seconds(pid), time.monotonic()
        print(f"endpoint {endpoint}: process {Path(f'/proc/{pid}/comm').read_text().strip()}, in the broker's "
              f"network namespace: {same}, {len(values)} values")
        print(f"start: first row after {first_row:.1f} s, {start_cpu:.2f} CPU s")
        print(f"steady: {100 * (end_cpu - start_cpu) / (t2 - t1):.2f}% of a core over {t2 - t1:.0f} s, RSS "
              f"{rss_mb(pid):.0f} MB, {len(os.listdir(f'/proc/{pid}/task'))} threads")
    finally:
        collector.close()


if __name__ == "__main__":
    main()
