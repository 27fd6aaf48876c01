"""The cost on the host of reading a container broker's JMX with JmxTool in its network namespace (nsenter --net):
the JVM's RSS, threads and CPU over a window at a 10 s poll, and its start. Needs a `kdiag lab up --containers` lab."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import yaml

from kdiag.collectors.kafka.jmx import KafkaJmxCollector
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lab-dir", default=os.environ.get("KDIAG_LAB_DIR", "~/.cache/kdiag/lab-containers"))
    parser.add_argument("--window", type=float, default=120.0, help="seconds of steady polling measured")
    args = parser.parse_args()
    config = yaml.safe_load((Path(args.lab_dir).expanduser() / "kdiag.yaml").read_text())["kafka"]
    endpoint = config["jmx"][0]
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
