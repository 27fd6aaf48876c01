"""Soak: kdiag run at a 1 s cycle under process and topic churn; print its RSS, fds and threads each minute."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kdiag.lab import read_lab


def proc_figures(pid: int) -> tuple[float, int, int]:
    """RSS in MB, open fds and threads of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_mb = int(fields["VmRSS"].split()[0]) / 1024
    return rss_mb, len(os.listdir(f"/proc/{pid}/fd")), int(fields["Threads"])


def child_rss_mb(pid: int) -> float:
    """Summed RSS in MB of the direct children (the JmxTool JVMs)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                total += proc_figures(int(entry.name))[0]
        except (OSError, ValueError, IndexError, KeyError):
            continue  # exited meanwhile
    return total


def process_churn(log_dir: Path, stop: threading.Event, counts: dict) -> None:
    """Short-lived readers of the log dir, one every 0.3 s, so the per-process series come and go."""
    reader = "import sys, pathlib\nfor _ in range(200):\n  [p.read_bytes() for p in pathlib.Path(sys.argv[1]).iterdir()]"
    while not stop.is_set():
        subprocess.run([sys.executable, "-c", reader, str(log_dir), f"--soak-password=s{counts['readers']}"], check=False)
        counts["readers"] += 1
        stop.wait(0.3)


def topic_churn(bootstrap: str, stop: threading.Event, counts: dict) -> None:
    """Create a topic, write and read it in a fresh group, delete both; repeat."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    while not stop.is_set():
        name = f"soak-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1)])[name].result(timeout=60)
        for i in range(200):
            producer.produce(name, str(i).encode())
        producer.flush(30)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": name, "auto.offset.reset": "earliest"})
        consumer.subscribe([name])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not consumer.poll(0.5):
            pass
        consumer.commit(asynchronous=False)
        consumer.close()
        stop.wait(3)
        admin.delete_topics([name])[name].result(timeout=60)
        admin.delete_consumer_groups([name])[name].result(timeout=60)
        counts["topics"] += 1


def main(argv: list[str] | None = None) -> int:
    """Run the soak for --duration seconds and print one line a minute, then the growth per compressed hour."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--duration", type=float, default=900,
                   help="seconds to run (default 900: the 12 minutes after the history fills are an hour of 5 s cycles)")
    p.add_argument("--port", type=int, default=19745)
    args = p.parse_args(argv)
    lab = read_lab()
    if lab is None:
        print("no Kafka lab: start one with `kdiag lab up --brokers 3`", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="kdiag-soak-"))
    log_dir = work / "logs"
    log_dir.mkdir()
    for i in range(20):
        (log_dir / f"seg-{i}.log").write_bytes(os.urandom(64 * 1024))
    jmx = "".join(f"\n    - {url}" for url in lab["jmx"].values())
    (work / "kdiag.yaml").write_text(
        f"listen: 127.0.0.1:{args.port}\ninterval: 1s\nhistory: 180s\nprocesses:\n  log_dirs: [{log_dir}]\n"
        f"kafka:\n  bootstrap_servers: {lab['bootstrap']}\n  interval: 2s\n  jmx_interval: 2s\n  jmx:{jmx}\n")
    log = open(work / "kdiag.log", "w")  # noqa: SIM115 - closed after the daemon exits
    daemon = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--config", str(work / "kdiag.yaml")],
                              stdout=log, stderr=subprocess.STDOUT)
    stop = threading.Event()
    counts = {"readers": 0, "topics": 0}
    threads = [threading.Thread(target=process_churn, args=(log_dir, stop, counts), daemon=True),
               threading.Thread(target=topic_churn, args=(lab["bootstrap"], stop, counts), daemon=True)]
    rows = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{args.port}/healthz", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        for t in threads:
            t.start()
        start = time.monotonic()
        print("minute  rss_mb  fds  threads  jvm_rss_mb  readers  topics")
        for minute in range(1, int(args.duration // 60) + 1):
            stop.wait(max(0.0, start + minute * 60 - time.monotonic()))
            if daemon.poll() is not None:
                print(f"kdiag exited with {daemon.returncode}; see {work / 'kdiag.log'}", file=sys.stderr)
                return 1
            rss, fds, nthreads = proc_figures(daemon.pid)
            rows.append((rss, fds))
            print(f"{minute:>6}  {rss:6.1f}  {fds:3d}  {nthreads:7d}  {child_rss_mb(daemon.pid):10.1f}  "
                  f"{counts['readers']:7d}  {counts['topics']:6d}", flush=True)
    finally:
        stop.set()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        log.close()
    if len(rows) >= 5:
        # 180 s of history at 1 s cycles holds as many snapshots as the default 900 s at 5 s: it is full from
        # minute 3 on, so growth counts from minute 4. 1 s cycles run 5x a 5 s daemon's, so a minute is 5.
        hours = (len(rows) - 4) * 60 * 5 / 3600
        growth = (rows[-1][0] - rows[3][0]) / hours
        print(f"RSS {rows[3][0]:.1f} -> {rows[-1][0]:.1f} MB: {growth:+.1f} MB per compressed hour; "
              f"fds {rows[3][1]} -> {rows[-1][1]}; log {work / 'kdiag.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
