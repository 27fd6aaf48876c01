"""Scrape kdiag while attacker sockets hold its endpoint: slowloris heads, idle connections, a low fd limit."""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from scrape_vs_node_exporter import free_port, percentile  # this script's directory is on sys.path


def start_kdiag(cmd: list[str], port: int, nofile: int | None, log: Path) -> subprocess.Popen:
    """kdiag run on 127.0.0.1:port, under an fd limit if asked; waits for /healthz."""
    def limit() -> None:
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    proc = subprocess.Popen([*cmd, "run", "--no-discover", "--listen", f"127.0.0.1:{port}"], stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, preexec_fn=limit)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    sys.exit(f"kdiag did not answer /healthz in 30 s; log: {log}")


def attack(port: int, slow: int, idle: int) -> list[socket.socket]:
    """slow sockets that sent half a request head, idle ones that sent nothing (those that connected in 5 s)."""
    socks = []
    for i in range(slow + idle):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i < slow:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-a: ")
        except OSError:
            continue
        s.setblocking(False)
        socks.append(s)
    return socks


def closed(s: socket.socket) -> bool:
    """The server closed (or reset) this attacker socket."""
    try:
        return s.recv(4096) == b"" or closed(s)
    except BlockingIOError:
        return False
    except OSError:
        return True


def scrape(port: int, timeout: float) -> float | None:
    """Seconds one /metrics scrape took, None when it failed."""
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
            r.read()
            return time.monotonic() - t0 if r.status == 200 else None
    except OSError:
        return None


def threads(pid: int) -> int:
    """The process's thread count."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--slow", type=int, default=300, help="half-sent request heads held open")
    p.add_argument("--idle", type=int, default=200, help="connections that send nothing")
    p.add_argument("--nofile", type=int, help="RLIMIT_NOFILE for kdiag (e.g. 64)")
    p.add_argument("--window", type=float, default=45.0, help="seconds of scraping under attack")
    p.add_argument("--every", type=float, default=1.0, help="seconds between scrapes")
    p.add_argument("--scrape-timeout", type=float, default=5.0)
    p.add_argument("--kdiag-cmd", default=f"{sys.executable} -m kdiag", help="command that starts kdiag")
    args = p.parse_args()

    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="kdiag-attack-")) / "kdiag.log"
    proc = start_kdiag(shlex.split(args.kdiag_cmd), port, args.nofile, log)
    try:
        socks = attack(port, args.slow, args.idle)
        t0 = time.monotonic()
        latencies, failed, closed_at, peak_threads = [], 0, {}, 0
        while time.monotonic() - t0 < args.window:
            took = scrape(port, args.scrape_timeout)
            if took is None:
                failed += 1
            else:
                latencies.append(took)
            for i, s in enumerate(socks):
                if i not in closed_at and closed(s):
                    closed_at[i] = time.monotonic() - t0
            peak_threads = max(peak_threads, threads(proc.pid))
            time.sleep(max(0.0, args.every - (took or 0)))
        served = len(latencies)
        print(f"attack: {args.slow} slowloris + {args.idle} idle sockets, fd limit {args.nofile or 'unchanged'}, "
              f"{args.window:g}s")
        print(f"scrapes: {served} of {served + failed} served", end="")
        if latencies:
            print(f", p50 {percentile(latencies, 50) * 1000:.1f} ms, p99 {percentile(latencies, 99) * 1000:.1f} ms, "
                  f"max {max(latencies) * 1000:.1f} ms", end="")
        print()
        times = sorted(closed_at.values())
        print(f"attacker sockets connected: {len(socks)} of {args.slow + args.idle}; closed by kdiag: {len(times)}"
              + (f", first after {times[0]:.1f}s, last after {times[-1]:.1f}s" if times else ""))
        print(f"kdiag threads (peak): {peak_threads}; fds now: {len(os.listdir(f'/proc/{proc.pid}/fd'))}")
        text = log.read_text(errors="replace")
        print(f"log: {text.count('Traceback')} tracebacks, {len(text.splitlines())} lines ({log})")
        for s in socks:
            s.close()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            print("kdiag did not exit within 15 s of SIGTERM: killed")
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
