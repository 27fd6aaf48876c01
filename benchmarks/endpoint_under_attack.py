"""Scrape kdiag while attackers hold or flood its endpoint: slowloris heads, idle connections, a low fd limit,
wrong-password floods over HTTP/1.1 and HTTP/2."""

from __future__ import annotations

import argparse
import base64
import collections
import http.client
import os
import resource
import secrets
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import bcrypt
import h2.config
import h2.connection
import yaml
from scrape_vs_node_exporter import cpu_seconds, free_port, percentile  # this script's directory is on sys.path

PASSWORD = b"right-password"
STREAMS_PER_H2_CONNECTION = 100


def start_kdiag(cmd: list[str], port: int, nofile: int | None, log: Path, web_config: Path | None) -> subprocess.Popen:
    """kdiag run on 127.0.0.1:port, under an fd limit if asked; waits for /healthz."""
    def limit() -> None:
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    web = ["--web-config", str(web_config)] if web_config else []
    proc = subprocess.Popen([*cmd, "run", "--no-discover", "--listen", f"127.0.0.1:{port}", *web], stdout=log.open("wb"),
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


def write_web_config(directory: Path, cost: int) -> Path:
    """Users prom (the scraper) and late (a first login during the attack), both with PASSWORD at this bcrypt cost."""
    users = {user: bcrypt.hashpw(PASSWORD, bcrypt.gensalt(cost)).decode() for user in ("prom", "late")}
    path = directory / "web.yml"
    path.write_text(yaml.safe_dump({"basic_auth_users": users}))
    return path


def basic(user: str, password: bytes) -> str:
    return "Basic " + base64.b64encode(user.encode() + b":" + password).decode()


def hold(port: int, slow: int, idle: int) -> list[socket.socket]:
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


class Flood:
    """Attacker threads, each from its loopback address, until stopped; `answers` counts what they got back."""

    def __init__(self, port: int, sources: list[str], http2: bool):
        self.port = port
        self.answers: collections.Counter = collections.Counter()
        self.stopping = threading.Event()
        attack = self._http2 if http2 else self._wrong_passwords
        self.threads = [threading.Thread(target=attack, args=(s,), daemon=True) for s in sources]
        for t in self.threads:
            t.start()

    def _wrong_passwords(self, source: str) -> None:
        """One keep-alive HTTP/1.1 connection after another, a new wrong password in each request."""
        while not self.stopping.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10, source_address=(source, 0))
            try:
                while not self.stopping.is_set():
                    conn.request("GET", "/metrics", headers={"Authorization": basic("prom", secrets.token_hex(8).encode())})
                    r = conn.getresponse()
                    r.read()
                    self.answers[r.status] += 1
            except (OSError, http.client.HTTPException):
                self.answers["connection lost"] += 1
                self.stopping.wait(0.1)
            finally:
                conn.close()

    def _http2(self, source: str) -> None:
        """HTTP/2 with prior knowledge: 100 streams with wrong passwords in one write, then the connection closed."""
        while not self.stopping.is_set():
            h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            h2c.initiate_connection()
            for i in range(STREAMS_PER_H2_CONNECTION):
                h2c.send_headers(1 + 2 * i, [(":method", "GET"), (":path", "/metrics"), (":scheme", "http"),
                                             (":authority", "x"), ("authorization", basic("prom", secrets.token_hex(8).encode()))],
                                 end_stream=True)
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=10, source_address=(source, 0)) as s:
                    s.sendall(h2c.data_to_send())
                    self.answers["HTTP/1.1" if s.recv(9).startswith(b"HTTP/1.1") else "HTTP/2"] += 1
            except OSError:
                self.answers["connection lost"] += 1
            self.stopping.wait(0.05)

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(15)


def closed(s: socket.socket) -> bool:
    """The server closed (or reset) this attacker socket."""
    try:
        return s.recv(4096) == b"" or closed(s)
    except BlockingIOError:
        return False
    except OSError:
        return True


def scrape(port: int, timeout: float, user: str = "prom", source: str = "127.0.0.1") -> float | None:
    """Seconds one /metrics scrape took (as `user` with the right password), None when it failed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    t0 = time.monotonic()
    try:
        conn.request("GET", "/metrics", headers={"Authorization": basic(user, PASSWORD)})
        r = conn.getresponse()
        r.read()
        return time.monotonic() - t0 if r.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def threads(pid: int) -> int:
    """The process's thread count."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def ms(seconds: float | None) -> str:
    return "failed" if seconds is None else f"{seconds * 1000:.0f} ms"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--slow", type=int, default=0, help="half-sent request heads held open")
    p.add_argument("--idle", type=int, default=0, help="connections that send nothing")
    p.add_argument("--nofile", type=int, help="RLIMIT_NOFILE for kdiag (e.g. 64)")
    p.add_argument("--wrong-password", type=int, default=0, metavar="N",
                   help="N keep-alive connections sending a new wrong password in each request")
    p.add_argument("--http2", type=int, default=0, metavar="N",
                   help=f"N connections sending HTTP/2 with {STREAMS_PER_H2_CONNECTION} wrong-password streams, then closing")
    p.add_argument("--spread", action="store_true", help="each flooding connection from its own loopback address")
    p.add_argument("--cost", type=int, default=12, help="bcrypt cost of the users' hashes (with a flood)")
    p.add_argument("--window", type=float, default=45.0, help="seconds of scraping under attack")
    p.add_argument("--every", type=float, default=1.0, help="seconds between scrapes")
    p.add_argument("--scrape-timeout", type=float, default=10.0)
    p.add_argument("--kdiag-cmd", default=f"{sys.executable} -m kdiag", help="command that starts kdiag")
    args = p.parse_args()

    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="kdiag-attack-"))
    log = directory / "kdiag.log"
    flooding = args.wrong_password or args.http2
    web = write_web_config(directory, args.cost) if flooding else None
    proc = start_kdiag(shlex.split(args.kdiag_cmd), port, args.nofile, log, web)
    try:
        print(f"verified before the attack: {ms(scrape(port, args.scrape_timeout))} (pays bcrypt at cost {args.cost})"
              if flooding else "no web config")
        socks = hold(port, args.slow, args.idle)
        count = args.wrong_password or args.http2
        sources = [f"127.0.1.{i % 250 + 1}" for i in range(count)] if args.spread else ["127.0.0.1"] * count
        flood = Flood(port, sources, http2=bool(args.http2)) if flooding else None
        t0, cpu0 = time.monotonic(), cpu_seconds(proc.pid)
        latencies, failed, closed_at, peak_threads, first_login = [], 0, {}, 0, "not tried"
        while time.monotonic() - t0 < args.window:
            if flooding and first_login == "not tried" and time.monotonic() - t0 > args.window / 2:
                first_login = ms(scrape(port, args.scrape_timeout, user="late", source="127.0.0.2"))
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
        cores = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
        if flood:
            flood.stop()
        served = len(latencies)
        print(f"attack: {args.slow} slowloris + {args.idle} idle sockets, fd limit {args.nofile or 'unchanged'}"
              + (f", {count} {'HTTP/2' if args.http2 else 'wrong-password'} connections from "
                 f"{'as many addresses' if args.spread else 'one address'}" if flooding else "") + f", {args.window:g}s")
        print(f"scrapes: {served} of {served + failed} served", end="")
        if latencies:
            print(f", p50 {percentile(latencies, 50) * 1000:.1f} ms, p99 {percentile(latencies, 99) * 1000:.1f} ms, "
                  f"max {max(latencies) * 1000:.1f} ms", end="")
        print()
        if flood:
            print(f"first login from another address mid-attack: {first_login}")
            print(f"attackers got: {dict(flood.answers)}")
        print(f"kdiag CPU: {cores * 100:.0f}% of a core over the window")
        if socks:
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
