"""Soak: kdiag run at a 1 s cycle under process and topic churn; its RSS, fds and threads each minute, and a verdict."""

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

from kdiag.tools.lab.lab import read_lab

CHURN_PREFIX = "soak-"


def proc_figures(pid: int) -> tuple[float, int, int]:
    """RSS in MB, open fds and threads of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_mb = int(fields["VmRSS"].split()[0]) / 1024
    return rss_mb, len(os.listdir(f"/proc/{pid}/fd")), int(fields["Threads"])


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points: steadier than the difference of two noisy ends."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def series_counts(port: int) -> tuple[int, int]:
    """Series on /metrics, all and kdiag_process_* (what the process churn adds and must take away again)."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    lines = [line for line in body.splitlines() if line and not line.startswith("#")]
    return len(lines), sum(line.startswith("kdiag_process_") for line in lines)


def load1() -> float:
    """The one-minute load average (the machine's business: other work slows cycles, it does not grow RSS)."""
    return float(Path("/proc/loadavg").read_text().split()[0])


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
    """Create a topic, write and read it in a fresh group, delete both; repeat. The topic count stays at one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while not stop.is_set():
        name = f"{CHURN_PREFIX}{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1)])[name].result(timeout=60)
        # A producer that outlived the topic would re-create it (auto.create.topics.enable) at its next metadata
        # refresh: the topics would pile up and the daemon's RSS would grow with them, not with a leak.
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "allow.auto.create.topics": False})
        for i in range(200):
            producer.produce(name, str(i).encode())
        producer.flush(30)
        del producer
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


# 180 s of history at 1 s cycles holds as many snapshots as the default 900 s at 5 s: full from minute 3 on.
HISTORY_FULL_MINUTE = 4
# 1 s cycles run 5x a 5 s daemon's: a minute of the soak is five of a default daemon, an hour is 12 minutes.
COMPRESSION = 5


def verdict(rows: list[tuple[int, float, int]], flat_mb: float) -> tuple[str, float, float]:
    """("flat" or "GROWING", RSS slope from the history full on, slope over the last half of that), per compressed
    hour; the last half is what a growth that levels off (history and churn caches saturating) settles to."""
    after = [(m, rss) for m, rss, _ in rows if m >= HISTORY_FULL_MINUTE]
    per_hour = 60 / COMPRESSION
    whole, levelled = slope(after) * per_hour, slope(after[len(after) // 2:]) * per_hour
    fds_grew = rows[-1][2] - next(f for m, _, f in rows if m >= HISTORY_FULL_MINUTE) > 2
    return ("GROWING" if abs(levelled) > flat_mb or fds_grew else "flat"), whole, levelled


def main(argv: list[str] | None = None) -> int:
    """Run the soak for --duration seconds and print one line a minute, then the figures and the verdict."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--duration", type=float, default=1500,
                   help="seconds to run (default 1500: 21 minutes after the history fills, 1.75 compressed hours)")
    p.add_argument("--port", type=int, default=19745)
    p.add_argument("--flat-mb", type=float, default=3.0,
                   help="largest RSS slope, MB per compressed hour over the last half, still called flat")
    args = p.parse_args(argv)
    lab = read_lab()
    if lab is None:
        print("no Kafka lab: start one with `kdiag lab up --brokers 1`", file=sys.stderr)
        return 2
    if args.duration < 60 * (HISTORY_FULL_MINUTE + 2):
        print(f"--duration: at least {60 * (HISTORY_FULL_MINUTE + 2)} s (the history fills in 3 minutes)", file=sys.stderr)
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
    admin = AdminClient({"bootstrap.servers": lab["bootstrap"]})
    rows: list[tuple[int, float, int]] = []
    loads: list[float] = []
    topic_counts: list[int] = []
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
        print("minute  rss_mb  fds  threads  jvm_rss_mb  series  process_series  readers  topics_churned  churned_now  load1",
              flush=True)
        for minute in range(1, int(args.duration // 60) + 1):
            stop.wait(max(0.0, start + minute * 60 - time.monotonic()))
            if daemon.poll() is not None:
                print(f"kdiag exited with {daemon.returncode}; see {work / 'kdiag.log'}", file=sys.stderr)
                return 1
            rss, fds, nthreads = proc_figures(daemon.pid)
            rows.append((minute, rss, fds))
            loads.append(load1())
            # The churn's topics in the cluster now: it keeps one at a time, so this must not climb.
            topics_now = sum(t.startswith(CHURN_PREFIX) for t in admin.list_topics(timeout=30).topics)
            topic_counts.append(topics_now)
            series, process_series = series_counts(args.port)
            print(f"{minute:>6}  {rss:6.1f}  {fds:3d}  {nthreads:7d}  {child_rss_mb(daemon.pid):10.1f}  {series:6d}  "
                  f"{process_series:14d}  "
                  f"{counts['readers']:7d}  {counts['topics']:14d}  {topics_now:11d}  {loads[-1]:5.1f}", flush=True)
    finally:
        stop.set()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        log.close()
    full = rows[HISTORY_FULL_MINUTE - 1]
    print(f"\n| point | minute | RSS MB | fds |\n|---|---|---|---|\n| start | {rows[0][0]} | {rows[0][1]:.1f} | {rows[0][2]} |\n"
          f"| history full | {full[0]} | {full[1]:.1f} | {full[2]} |\n| end | {rows[-1][0]} | {rows[-1][1]:.1f} | {rows[-1][2]} |")
    outcome, whole, levelled = verdict(rows, args.flat_mb)
    if max(topic_counts) > 2:
        print(f"up to {max(topic_counts)} churned topics at once: something re-creates deleted topics, so the RSS "
              "measures that pile-up, not kdiag", file=sys.stderr)
        outcome = "INVALID"
    print(f"RSS slope per compressed hour (a soak minute is {COMPRESSION} of a 5 s daemon): {whole:+.1f} MB from minute "
          f"{HISTORY_FULL_MINUTE}, {levelled:+.1f} MB over the last half; fds {full[2]} -> {rows[-1][2]}; "
          f"load average {min(loads):.1f}-{max(loads):.1f} (mean {sum(loads) / len(loads):.1f}); "
          f"{counts['readers']} readers, {counts['topics']} topics churned")
    print(f"verdict: {outcome} (flat: |slope over the last half| <= {args.flat_mb:g} MB per compressed hour and fds "
          f"within 2); log {work / 'kdiag.log'}")
    return 0 if outcome == "flat" else 1


if __name__ == "__main__":
    sys.exit(main())
