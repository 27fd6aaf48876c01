"""What a fleet of N daemons costs the cluster and each host, against one daemon and a host-only daemon in the same run.

The lab is grown to --partitions partitions and --groups groups (benchmarks/scale.py's topics and groups, 10% of the
groups committing every 10 s). For each N, N `kdiag run` daemons (daemon i on broker (i mod 3) + 1's host, in one
coordination group; the first three poll their broker's JMX, the others have none) and one host-only daemon (no Kafka)
run for --window seconds after every daemon has served an admin fetch and one reports. The brokers' request rate per
request type comes from Kafka's own kafka.network:type=RequestMetrics,name=RequestsPerSec MBeans (all brokers, all
versions summed), minus the rate measured in a window with no daemon (the lab's own replication, controller and the
committing groups). The probe is off: it sends each daemon's produce and fetch to its own broker by design.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import math
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml
from confluent_kafka.admin import AdminClient
from scale import Committer, children, cleanup, cpu_seconds, free_port, grow, progress, rss_mb, scrape

from kdiag.collectors.kafka.jmx import default_classpath
from kdiag.core.trust import trusted_program
from kdiag.kafka.jmx_reader import JmxReader
from kdiag.tools.lab.lab import lab_config

REQUESTS = "kafka.network:type=RequestMetrics,name=RequestsPerSec,*"
NOT_KDIAG = ("Fetch", "FetchFollower", "OffsetCommit", "BrokerHeartbeat", "Vote", "BeginQuorumEpoch", "EndQuorumEpoch")
REQUEST_TYPE = re.compile(r"request=([A-Za-z]+)")
REPORTING = re.compile(rb"^kdiag_cluster_reporting(\{[^}]*\})? 1", re.M)


class Daemon:
    """One `kdiag run` in its own directory, scraped over HTTP."""

    def __init__(self, workdir: Path, config: dict, name: str):
        self.name, self.port = name, free_port()
        self.dir = workdir / name
        self.dir.mkdir()
        path = self.dir / "kdiag.yaml"
        path.write_text(yaml.safe_dump({**config, "listen": f"127.0.0.1:{self.port}", "state_dir": ""}))
        self.log = open(self.dir / "kdiag.log", "w")  # noqa: SIM115 (closed in stop)
        # cwd: `-m` puts the working directory first on sys.path, and it must not shadow the installed kdiag.
        self.proc = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--config", str(path)], stdout=self.log,
                                     stderr=self.log, cwd=self.dir)
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        self.cpu0: dict[str, float] = {}

    def metrics(self) -> bytes:
        """The body of one scrape; empty while it does not answer."""
        try:
            return scrape(self.conn)[1]
        except OSError:
            self.conn.close()
            return b""

    def cpu(self) -> dict[str, float]:
        """CPU seconds of the daemon and of its children by part: AdminClient, coordination, JmxTool processes."""
        out = {"daemon": cpu_seconds(self.proc.pid)}
        for pid in children(self.proc.pid):
            part = part_of(pid)
            out[part] = out.get(part, 0.0) + cpu_seconds(pid)
        return out

    def rss(self) -> float:
        """RSS of the daemon and its children, MB."""
        return sum(map(rss_mb, [self.proc.pid, *children(self.proc.pid)]))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def part_of(pid: int) -> str:
    """Which of the daemon's children a pid is, by its command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    for module, part in ((b"kdiag.kafka.admin_worker", "admin"), (b"kdiag.kafka.coordination", "coordination")):
        if module in argv:
            return part
    # JmxTool gets its arguments from an argfile (@/dev/fd/N): its class name is not on the command line.
    return "jmx" if argv[0].endswith(b"java") else "other"


def request_counts(readers: list[JmxReader]) -> dict[str, float]:
    """Requests served so far per request type, summed over brokers and versions."""
    out: dict[str, float] = {}
    for reader in readers:
        row = reader.wait_row(time.monotonic() + 60, 30)
        if row is None:
            raise RuntimeError(f"no RequestsPerSec row from {reader.url}: {reader.error}")
        for key, value in row.items():
            if key.endswith("|Count") and (m := REQUEST_TYPE.search(key)):
                out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def rates(base: dict, window: float, poll: float) -> dict[str, float]:
    """Requests per second per type over `window` seconds. JmxTool matches its pattern once, at its start: fresh
    readers see the MBeans of the request versions the daemons just started to send."""
    classpath = base["kafka"].get("jmx_classpath") or default_classpath()
    readers = [JmxReader(url, classpath, poll, (REQUESTS,), ("Count",), java=trusted_program("java"))
               for url in base["kafka"]["jmx"]]
    try:
        before, t0 = request_counts(readers), time.monotonic()
        time.sleep(window)
        time.sleep(poll + 1)  # a row polled after the window
        after = request_counts(readers)
        took = time.monotonic() - t0
    finally:
        for reader in readers:
            reader.close()
    return {k: (after[k] - before.get(k, 0.0)) / took for k in after}


def fleet_config(base: dict, broker: int, jmx: bool, tag: str) -> dict:
    """A daemon on broker `broker`'s host in the benchmark's coordination group."""
    kafka = {**base["kafka"], "local_broker_id": broker, "coordination_topic": f"__kdiag_fleet_{tag}",
             "coordination_group": f"kdiag-fleet-{tag}", "jmx": base["kafka"]["jmx"][broker - 1:broker] if jmx else []}
    return {**base, "kafka": kafka, "probe": {"enabled": False}}


def measure(base: dict, n: int, window: float, warmup: float, poll: float) -> dict:
    """Start n daemons and a host-only one, wait for an admin fetch each and a reporter, measure the window."""
    tag = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory() as tmp:
        daemons = [Daemon(Path(tmp), fleet_config(base, i % 3 + 1, i < 3, tag), f"d{i}") for i in range(n)]
        host_only = Daemon(Path(tmp), {k: v for k, v in base.items() if k not in ("kafka", "probe")}
                           | {"probe": {"enabled": False}}, "host")
        try:
            deadline = time.monotonic() + 300
            while True:
                bodies = [d.metrics() for d in daemons]
                fetched = all(b'kdiag_collector_success{collector="kafka_admin"} 1.0' in b for b in bodies)
                reporters = [d for d, b in zip(daemons, bodies, strict=True) if REPORTING.search(b)]
                if fetched and len(reporters) == 1 and host_only.metrics():
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{n} daemons: no admin fetch or no single reporter within 300 s; see {tmp}")
                time.sleep(2)
            reporter = reporters[0]
            progress(f"  {n} daemon(s): reporter {reporter.name}; warm-up {warmup:g}s, window {window:g}s")
            time.sleep(warmup)
            everyone = [*daemons, host_only]
            for d in everyone:
                d.cpu0 = d.cpu()
            t0 = time.monotonic()
            requests = rates(base, window, poll)
            took = time.monotonic() - t0
            parts = {d.name: {k: (v - d.cpu0.get(k, 0.0)) / took for k, v in d.cpu().items()} for d in everyone}
            share = {name: sum(p.values()) for name, p in parts.items()}
            rss = {d.name: d.rss() for d in everyone}
            still = [d for d in daemons if REPORTING.search(d.metrics())]
        finally:
            for d in [*daemons, host_only]:
                d.stop()
        others = [d.name for d in daemons if d is not reporter]
        return {"requests": requests, "reporter": reporter.name, "share": share, "parts": parts, "rss": rss,
                "others": others,
                "stable": still == [reporter] or not still}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--daemons", default="1,3,10", help="fleet sizes, comma-separated (default 1,3,10)")
    p.add_argument("--partitions", type=int, default=10000)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--per-topic", type=int, default=100)
    p.add_argument("--window", type=float, default=90, help="seconds measured per fleet size (default 90)")
    p.add_argument("--warmup", type=float, default=30, help="seconds after a reporter is elected (default 30)")
    p.add_argument("--keep", action="store_true", help="leave the topics and groups on the cluster")
    args = p.parse_args(argv)
    base = yaml.safe_load(lab_config().read_text())
    bootstrap = base["kafka"]["bootstrap_servers"]
    if len(base["kafka"].get("jmx", [])) < 3:
        print("fleet.py needs a 3-broker lab with JMX: kdiag lab up --brokers 3", file=sys.stderr)
        return 2
    topics = math.ceil(args.partitions / args.per_topic)
    progress(f"growing to {topics} topics x {args.per_topic} partitions and {args.groups} groups")
    grow(AdminClient({"bootstrap.servers": bootstrap}), topics, args.groups, args.per_topic)
    poll = 5.0
    results = {}
    try:
        with Committer(bootstrap, round(args.groups * 0.1), topics, args.per_topic):
            progress(f"baseline: no daemon, {args.window:g}s")
            baseline = rates(base, args.window, poll)
            progress(f"  baseline: {baseline}")
            for n in sorted(int(x) for x in args.daemons.split(",")):
                results[n] = measure(base, n, args.window, args.warmup, poll)
                progress(f"  {n} daemon(s): {results[n]}")
    finally:
        if not args.keep:
            cleanup(bootstrap)
    report(results, baseline, args)
    return 0


def report(results: dict[int, dict], baseline: dict[str, float], args: argparse.Namespace) -> None:
    """The two tables: requests per type, and each daemon's CPU and RSS."""
    def added(r: dict, kind: str) -> float:
        return max(0.0, r["requests"].get(kind, 0.0) - baseline.get(kind, 0.0))

    # Only what clients like kdiag's send: Fetch counts FetchConsumer again, FetchFollower is replication between the
    # brokers, and OffsetCommit comes from the committing groups (kdiag never commits).
    kinds = sorted({k for r in results.values() for k in r["requests"] if k not in NOT_KDIAG
                    and max(added(r, k) for r in results.values()) >= 0.05})
    sizes = sorted(results)
    print(f"{args.partitions} partitions, {args.groups} groups; requests/s the daemons add (brokers' RequestsPerSec "
          f"minus a {args.window:g}s window without kdiag), window {args.window:g}s per fleet size\n")
    print("| request | " + " | ".join(f"{n} daemon{'s' * (n > 1)}" for n in sizes) + " |")
    print("| --- | " + " | ".join("---:" for _ in sizes) + " |")
    for kind in kinds:
        print(f"| {kind} | " + " | ".join(f"{added(results[n], kind):.2f}" for n in sizes) + " |")
    totals = {n: sum(added(results[n], k) for k in kinds) for n in sizes}
    print("| **total** | " + " | ".join(f"**{totals[n]:.2f}**" for n in sizes) + " |")
    one = totals[sizes[0]]
    print("| ratio to 1 daemon | " + " | ".join(f"{totals[n] / one:.2f}x" if one else "-" for n in sizes) + " |")
    # The alternative design, standbys reading cluster-wide state at a quarter of the reporter's rate, derived from
    # the single daemon's measured rate: each standby would add a quarter of it.
    print("| alternative: standbys at 1/4 rate (derived) | " + " | ".join(
        f"{one * (1 + (n - 1) / 4):.2f} ({1 + (n - 1) / 4:.2f}x)" for n in sizes) + " |\n")
    print("| daemons | reporter CPU | non-reporter CPU (median, max) | host-only CPU | reporter RSS | non-reporter RSS "
          "(median) | host-only RSS | reporter unchanged |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for n in sizes:
        r = results[n]
        cpu = sorted(r["share"][o] * 100 for o in r["others"])
        rss = sorted(r["rss"][o] for o in r["others"])
        median = f"{cpu[len(cpu) // 2]:.2f}%, {cpu[-1]:.2f}%" if cpu else "-"
        print(f"| {n} | {r['share'][r['reporter']] * 100:.2f}% | {median} | {r['share']['host'] * 100:.2f}% | "
              f"{r['rss'][r['reporter']]:.0f} MB | {f'{rss[len(rss) // 2]:.0f} MB' if rss else '-'} | "
              f"{r['rss']['host']:.0f} MB | {'yes' if r['stable'] else 'no'} |")

    print("\n| daemons | daemon | CPU | of it: kdiag process | AdminClient | coordination | JmxTool |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for n in sizes:
        r = results[n]
        others = sorted(r["others"], key=lambda o: r["share"][o])
        shown = [("reporter", r["reporter"]), *([("non-reporter (median)", others[len(others) // 2])] if others else []),
                 ("host-only", "host")]
        for role, name in shown:
            part = r["parts"][name]
            print(f"| {n} | {role} | {r['share'][name] * 100:.2f}% | " + " | ".join(
                f"{part.get(k, 0.0) * 100:.2f}%" for k in ("daemon", "admin", "coordination", "jmx")) + " |")


if __name__ == "__main__":
    sys.exit(main())
