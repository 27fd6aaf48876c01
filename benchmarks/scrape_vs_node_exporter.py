"""Run kdiag and prometheus-node-exporter side by side and compare scrape latency, series and CPU."""

from __future__ import annotations

import argparse
import gzip
import http.client
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# What Prometheus sends when the classic text format is its scrape protocol, so both answer in the same format.
SCRAPE_HEADERS = {
    "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "User-Agent": "Prometheus/2.53.0",
    "X-Prometheus-Scrape-Timeout-Seconds": "5",
}
CPU_TARGET_PER_MIN = 1.2  # 2% of one core
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        # comm may contain spaces: fields after the closing paren start at field 3 (state).
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), nearest-rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class Target:
    """One exporter process and the keep-alive connection that scrapes it."""

    name: str
    port: int
    argv: list[str]
    log: Path
    ready_path: str = "/metrics"
    proc: subprocess.Popen | None = None
    conn: http.client.HTTPConnection | None = None
    latencies: list[float] = field(default_factory=list)
    series: int = 0
    body_bytes: int = 0
    wire_bytes: int = 0
    cpu_per_min: float = 0.0
    cpu_per_scrape: float = 0.0

    def start(self) -> None:
        """Start the exporter, its output going to its log file."""
        with open(self.log, "wb") as out:
            # Own session: a Ctrl-C in the terminal reaches only this script, whose cleanup stops the exporters.
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until ready_path answers 200; RuntimeError with the log tail when it does not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", self.ready_path)
                if conn.getresponse().status == 200:
                    conn.close()
                    return
                conn.close()
            except OSError:
                pass
            time.sleep(0.2)
        tail = self.log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{self.name} did not become ready on 127.0.0.1:{self.port}:\n{tail}")

    def scrape(self) -> tuple[float, bytes]:
        """GET /metrics over the keep-alive connection: (seconds until the whole body arrived, decoded body)."""
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            try:
                start = time.perf_counter()
                self.conn.request("GET", "/metrics", headers=SCRAPE_HEADERS)
                resp = self.conn.getresponse()
                raw = resp.read()
                elapsed = time.perf_counter() - start
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
                continue
            if resp.status != 200:
                raise RuntimeError(f"{self.name} /metrics answered {resp.status}")
            self.wire_bytes = len(raw)
            body = gzip.decompress(raw) if resp.getheader("Content-Encoding") == "gzip" else raw
            return elapsed, body
        raise AssertionError("unreachable")

    def cpu(self) -> float:
        """CPU seconds the exporter process has used so far."""
        return cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        """Close the connection and end the process: SIGTERM, then SIGKILL after 5 s."""
        if self.conn is not None:
            self.conn.close()
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def count_series(body: bytes) -> int:
    """Non-comment, non-empty lines of a text exposition."""
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def measure_cpu(targets: list[Target], window: float, interval: float) -> None:
    """Scrape every target once per interval for `window` seconds and set each one's CPU seconds per minute."""
    before = {t.name: t.cpu() for t in targets}
    start = time.monotonic()
    ticks = max(1, round(window / interval))
    for i in range(ticks):
        for t in targets:
            t.scrape()
        print(f"cpu window {i + 1}/{ticks} scrapes, {time.monotonic() - start:5.1f}s/{window:g}s", flush=True)
        time.sleep(max(0.0, start + (i + 1) * interval - time.monotonic()))
    elapsed = time.monotonic() - start
    for t in targets:
        t.cpu_per_min = (t.cpu() - before[t.name]) / elapsed * 60


def measure_latency(targets: list[Target], scrapes: int) -> None:
    """Scrape the targets alternately `scrapes` times each, recording latency, series and CPU per scrape."""
    before = {t.name: t.cpu() for t in targets}
    step = max(1, scrapes // 6)
    for i in range(1, scrapes + 1):
        for t in targets:
            elapsed, body = t.scrape()
            t.latencies.append(elapsed)
            t.series, t.body_bytes = count_series(body), len(body)
        if i % step == 0 or i == scrapes:
            status = "  ".join(f"{t.name} p50 {percentile(t.latencies, 50) * 1e3:6.2f} ms "
                               f"p99 {percentile(t.latencies, 99) * 1e3:6.2f} ms" for t in targets)
            print(f"scrapes {i}/{scrapes}  {status}", flush=True)
    for t in targets:
        t.cpu_per_scrape = (t.cpu() - before[t.name]) / scrapes


def rows(kd: Target, ne: Target) -> list[tuple[str, str, str, str]]:
    """(metric, kdiag, node_exporter, ratio) rows of the result table."""
    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b else "n/a"

    out = []
    for label, q in (("scrape p50 (ms)", 50), ("scrape p99 (ms)", 99)):
        a, b = percentile(kd.latencies, q) * 1e3, percentile(ne.latencies, q) * 1e3
        out.append((label, f"{a:.2f}", f"{b:.2f}", ratio(a, b)))
    out.append(("series", str(kd.series), str(ne.series), ratio(kd.series, ne.series)))
    out.append(("body bytes (gzip on wire)", f"{kd.body_bytes} ({kd.wire_bytes})", f"{ne.body_bytes} ({ne.wire_bytes})",
                ratio(kd.body_bytes, ne.body_bytes)))
    out.append(("CPU s/min (5 s scrapes)", f"{kd.cpu_per_min:.3f}", f"{ne.cpu_per_min:.3f}",
                ratio(kd.cpu_per_min, ne.cpu_per_min)))
    out.append(("CPU ms per scrape (burst)", f"{kd.cpu_per_scrape * 1e3:.2f}", f"{ne.cpu_per_scrape * 1e3:.2f}",
                ratio(kd.cpu_per_scrape, ne.cpu_per_scrape)))
    return out


def print_table(table: list[tuple[str, ...]], markdown: bool) -> None:
    """The result table as aligned text, or as a markdown table."""
    header = ("metric", "kdiag", "node_exporter", "kdiag/node_exporter")
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join(["---"] + ["---:"] * 3) + "|")
        for row in table:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(4)]
    for row in [header, *table]:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))))


def checks(kd: Target, ne: Target) -> list[tuple[bool, str]]:
    """(passed, line) for each target kdiag must meet."""
    kd_p99, ne_p99 = percentile(kd.latencies, 99) * 1e3, percentile(ne.latencies, 99) * 1e3
    return [
        (kd_p99 <= ne_p99, f"kdiag scrape p99 {kd_p99:.2f} ms <= node_exporter p99 {ne_p99:.2f} ms"),
        (kd.cpu_per_min < CPU_TARGET_PER_MIN,
         f"kdiag CPU {kd.cpu_per_min:.3f} s/min < {CPU_TARGET_PER_MIN} s/min (2% of one core)"),
    ]


def interrupt(signum, frame) -> None:
    """SIGTERM ends the run like Ctrl-C, through the same cleanup."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Start both exporters, measure, print the table and the checks; stop both on any exit."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--scrapes", type=int, default=300, help="scrapes of each target for latency (default 300)")
    p.add_argument("--window", type=float, default=60.0, help="seconds of 5 s scrapes for the CPU measure (default 60)")
    p.add_argument("--interval", type=float, default=5.0, help="kdiag collection and scrape interval in seconds (default 5)")
    p.add_argument("--warmup", type=float, default=6.0, help="seconds to let kdiag settle before measuring (default 6)")
    p.add_argument("--kdiag-cmd", default=f"{shlex.quote(sys.executable)} -m kdiag",
                   help="command that starts kdiag, before 'run --listen ...' (default: this Python's -m kdiag)")
    p.add_argument("--markdown", action="store_true", help="also print the result as a markdown table")
    p.add_argument("--strict", action="store_true", help="exit 1 when a check fails")
    args = p.parse_args(argv)
    if args.scrapes < 200:
        p.error("--scrapes: at least 200 for a meaningful p99")

    node_exporter = shutil.which("prometheus-node-exporter")
    if node_exporter is None:
        print("prometheus-node-exporter is not installed: apt-get update && apt-get install -y prometheus-node-exporter",
              file=sys.stderr)
        return 2

    signal.signal(signal.SIGTERM, interrupt)
    logs = Path(tempfile.mkdtemp(prefix="kdiag-bench-"))
    kd_port, ne_port = free_port(), free_port()
    kd = Target("kdiag", kd_port,
                [*shlex.split(args.kdiag_cmd), "run", "--no-discover", "--listen", f"127.0.0.1:{kd_port}",
                 "--interval", f"{args.interval:g}s"],
                logs / "kdiag.log", ready_path="/healthz")
    ne = Target("node_exporter", ne_port, [node_exporter, f"--web.listen-address=127.0.0.1:{ne_port}"],
                logs / "node_exporter.log")
    targets = [kd, ne]
    try:
        for t in targets:
            t.start()
        for t in targets:
            t.wait_ready()
        print(f"kdiag on 127.0.0.1:{kd_port}, node_exporter on 127.0.0.1:{ne_port} (logs in {logs}); "
              f"warming up {args.warmup:g}s", flush=True)
        time.sleep(args.warmup)
        measure_cpu(targets, args.window, args.interval)
        measure_latency(targets, args.scrapes)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (RuntimeError, OSError, http.client.HTTPException) as e:
        print(f"benchmark failed: {e}", file=sys.stderr)
        return 1
    finally:
        for t in targets:
            t.stop()

    table = rows(kd, ne)
    print()
    print_table(table, markdown=False)
    if args.markdown:
        print()
        print_table(table, markdown=True)
    print()
    results = checks(kd, ne)
    for passed, line in results:
        print(f"{'PASS' if passed else 'FAIL'} {line}")
    return 1 if args.strict and not all(passed for passed, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
