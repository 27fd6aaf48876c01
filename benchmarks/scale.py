"""kdiag's cost against the number of partitions and consumer groups: one table row per size.

For each size (ascending), the script tops the lab up to that many partitions (topics of --per-topic partitions,
`scale-t0000`...) and consumer groups (`scale-g0000`..., each with committed offsets on every partition of one
topic; --moving-groups of them get new offsets every few seconds, the others stay idle), runs `kdiag run` with
the lab's config and the default intervals for --window seconds while scraping it like Prometheus, stops it,
then times the AdminClient fetch in this process. Topics and groups are deleted at the end unless --keep (kdiag
is stopped first: librdkafka #5093 crashes clients that live through a deletion).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import itertools
import json
import math
import os
import resource
import signal
import socket
import subprocess
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.config.settings import KafkaConfig
from kdiag.tools.lab.lab import lab_config, read_lab

TOPIC, GROUP = "scale-t{:04d}", "scale-g{:04d}"
TICKS = os.sysconf("SC_CLK_TCK")
ADMIN_SUCCESS = 'kdiag_collector_last_success_timestamp_seconds{collector="kafka_admin"}'
CYCLE = 5.0  # kdiag's default interval
GROUP_BATCH = 100  # groups committed at once while growing (10,000 groups: 2 minutes on a settled 6-broker lab)
COMMIT_EVERY = 10.0  # seconds between the moving groups' commits


def progress(message: str) -> None:
    """One progress line on stderr, so the table on stdout stays clean."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), nearest-rank; NaN for no values."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] if ordered else math.nan


def existing(admin: AdminClient, prefix: str) -> tuple[set[str], set[str]]:
    """The benchmark's topics and groups already on the cluster."""
    topics = {t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix + "t")}
    groups = {g.group_id for g in admin.list_consumer_groups().result(timeout=60).valid if g.group_id.startswith(prefix + "g")}
    return topics, groups


def grow(admin: AdminClient, topics: int, groups: int, per_topic: int) -> None:
    """Create the missing topics (in batches of 50) and groups (each committed at offset 0 on one topic)."""
    have_topics, have_groups = existing(admin, "scale-")
    wanted = [TOPIC.format(i) for i in range(topics) if TOPIC.format(i) not in have_topics]
    for start in range(0, len(wanted), 50):
        batch = wanted[start:start + 50]
        futures = admin.create_topics([NewTopic(t, num_partitions=per_topic, replication_factor=1) for t in batch],
                                      request_timeout=120)
        for f in futures.values():
            f.result(timeout=180)
        progress(f"  topics: {len(have_topics) + start + len(batch)}/{topics}")
    deadline = time.monotonic() + 300
    while sum(1 for t in admin.list_topics(timeout=30).topics.values()
              if t.topic.startswith("scale-t") and len(t.partitions) == per_topic) < topics:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster did not show {topics} topics of {per_topic} partitions")
        time.sleep(1)
    missing = [i for i in range(groups) if GROUP.format(i) not in have_groups]
    for start in range(0, len(missing), GROUP_BATCH):
        for attempt in range(3):
            futures = []
            for i in missing[start:start + GROUP_BATCH]:
                tps = [TopicPartition(TOPIC.format(i % topics), p, 0) for p in range(per_topic)]
                # The API takes one group per call: issue a batch, then wait for them.
                futures += admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP.format(i), tps)],
                                                              request_timeout=120).values()
            try:
                for f in futures:
                    f.result(timeout=180)
                break
            except KafkaException as e:  # a fresh cluster's group coordinators may still be loading
                if attempt == 2:
                    raise
                progress(f"  groups: retrying a batch ({e})")
        if (start // GROUP_BATCH) % 10 == 9 or start + GROUP_BATCH >= len(missing):
            progress(f"  groups: {len(have_groups) + start + len(missing[start:start + GROUP_BATCH])}/{groups}")


def cleanup(bootstrap: str) -> None:
    """Delete the benchmark's groups and topics with a fresh client (kdiag is stopped by now)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics, groups = existing(admin, "scale-")
    for f in admin.delete_consumer_groups(sorted(groups), request_timeout=60).values() if groups else ():
        f.result(timeout=120)
    for f in admin.delete_topics(sorted(topics), operation_timeout=120).values() if topics else ():
        f.result(timeout=180)
    progress(f"deleted {len(topics)} topics and {len(groups)} groups")


def open_files_limit(pid: int) -> int | None:
    """A process's soft limit on open files (/proc/PID/limits), None when unknown or unlimited."""
    try:
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                soft = line.split()[3]
                return int(soft) if soft.isdigit() else None
    except OSError:
        pass
    return None


def capacity_problems(partitions: int, lab: dict) -> list[str]:
    """What this host and the lab's brokers lack for `partitions` (replication factor 1, spread over the brokers):
    each partition costs its broker two memory maps (offset and time index) and an open segment file."""
    per_broker = math.ceil(partitions / lab["brokers"])
    problems = []
    # The JVM maps a few thousand areas of its own.
    maps = 2 * per_broker + 10_000
    have = int(Path("/proc/sys/vm/max_map_count").read_text())
    if have < maps:
        problems.append(f"vm.max_map_count is {have}, a broker with {per_broker} partitions needs about {maps}: "
                        f"run `sysctl -w vm.max_map_count={max(262144, maps)}` (as root), or start the lab with more "
                        f"brokers (`kdiag lab up --brokers 3`)")
    for node, pid in sorted(lab.get("pids", {}).items()):
        files = per_broker + 2_000  # sockets, jars and the JVM's own
        if (limit := open_files_limit(pid)) is not None and limit < files:
            problems.append(f"broker {node} may open {limit} files, {per_broker} partitions need about {files}: "
                            f"start the lab from a shell with a higher `ulimit -n` (this shell's hard limit is "
                            f"{resource.getrlimit(resource.RLIMIT_NOFILE)[1]}; root may raise it), or with more "
                            f"brokers (`kdiag lab up --brokers 3`)")
    return problems


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(pid: int) -> str:
    """What a process runs, shortly: the module of `python -m MODULE`, else its executable's name."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return str(pid)
    if "-m" in args[:-1]:
        return " ".join(args[args.index("-m") + 1:args.index("-m") + 3])
    return Path(args[0]).name


def children(pid: int) -> list[int]:
    """Direct children of pid (kdiag's JmxTool JVMs and AdminClient process)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()  # a process name need not be UTF-8
            except OSError:
                continue
            if int(stat.rpartition(b")")[2].split()[1]) == pid:
                out.append(int(entry))
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mb(pid: int) -> float:
    """Resident set size in MB, 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def scrape(conn: http.client.HTTPConnection) -> tuple[float, bytes]:
    """Seconds for one /metrics scrape with Prometheus's headers, and the decoded body."""
    try:
        start = time.perf_counter()
        conn.request("GET", "/metrics", headers={"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "gzip"})
        response = conn.getresponse()
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        conn.close()  # kdiag closes keep-alive connections idle for 20 s: connect again, as Prometheus does
        start = time.perf_counter()
        conn.request("GET", "/metrics", headers={"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "gzip"})
        response = conn.getresponse()
    body = response.read()
    took = time.perf_counter() - start
    return took, gzip.decompress(body) if response.getheader("Content-Encoding") == "gzip" else body


def collector_cpu(body: bytes) -> dict[str, float]:
    """Each collector's kdiag_collector_cpu_seconds_total in a /metrics body."""
    prefix = 'kdiag_collector_cpu_seconds_total{collector="'
    return {line[len(prefix):].partition('"')[0]: float(line.rpartition(" ")[2])
            for line in body.decode().splitlines() if line.startswith(prefix)}


def metric(body: bytes, series: str) -> float:
    """The value of one series (name and labels as exposed) in a scrape, 0 when absent."""
    for line in body.decode().splitlines():
        if line.startswith(series + " "):
            return float(line.rpartition(" ")[2])
    return 0.0


class Committer:
    """Commits new offsets for `groups` of the benchmark's groups every COMMIT_EVERY seconds from outside the group,
    as assign-mode clients (Flink, Spark) do: they stay Empty, and their offsets move. Counts its own requests from
    its librdkafka statistics, so that a benchmark can tell them from the tool's it measures."""

    def __init__(self, bootstrap: str, groups: int, topics: int, per_topic: int, every: float = COMMIT_EVERY):
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "statistics.interval.ms": 500,
                                  "stats_cb": self._statistics})
        self.every = every
        self.groups, self.topics, self.per_topic = groups, topics, per_topic
        self.stopping = threading.Event()
        self.burst = threading.Lock()  # held while a round of commits is in flight
        self.sent: tuple[float, dict[str, float]] = (0.0, {})  # when statistics came (monotonic), requests by type
        self.statistics_came = threading.Condition()
        self.threads = [threading.Thread(target=self._run, daemon=True),
                        threading.Thread(target=self._poll, daemon=True)]

    def __enter__(self) -> Committer:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join()

    def _statistics(self, text: str) -> None:
        sent: dict[str, float] = {"OffsetCommit": 0.0}
        for broker in json.loads(text)["brokers"].values():
            # An AdminClient is a producer-type handle, whose `req` hides the consumer group types: what it sent
            # beyond the types listed is OffsetCommit, the only other request the committer sends.
            sent["OffsetCommit"] += broker["tx"] - sum(broker["req"].values())
            for kind, n in broker["req"].items():
                sent[kind] = sent.get(kind, 0.0) + n
        with self.statistics_came:
            self.sent = (time.monotonic(), sent)
            self.statistics_came.notify_all()

    def _poll(self) -> None:
        while not self.stopping.is_set():
            self.admin.poll(0.1)  # serves stats_cb

    @contextlib.contextmanager
    def between_rounds(self) -> Iterator[Callable[[], dict[str, float]]]:
        """Holds the next round of commits back until the block ends, once the round in flight has been answered;
        yields a function that gives the requests sent so far by type (statistics taken after the round ended)."""
        with self.burst:
            quiet = time.monotonic()

            def sent() -> dict[str, float]:
                with self.statistics_came:
                    if not self.statistics_came.wait_for(lambda: self.sent[0] > quiet, timeout=30):
                        raise RuntimeError("the committer's librdkafka statistics stopped coming")
                    return self.sent[1]

            yield sent

    def _run(self) -> None:
        for offset in itertools.count(1):
            with self.burst:
                futures = []
                for i in range(self.groups):
                    # Offsets past the log end are accepted (the topics are empty): the lag stays 0, the offsets move.
                    tps = [TopicPartition(TOPIC.format(i % self.topics), p, offset) for p in range(self.per_topic)]
                    futures += self.admin.alter_consumer_group_offsets(
                        [ConsumerGroupTopicPartitions(GROUP.format(i), tps)], request_timeout=60).values()
                for f in futures:
                    with contextlib.suppress(KafkaException):
                        f.result(timeout=60)
            if self.stopping.wait(self.every):
                return


def run_window(config: dict, window: float, warmup: float, interval: float,
               counts: Callable[[], Any] | None = None) -> dict:
    """Run kdiag for warmup + window seconds; its CPU share, RSS, scrape p99, series and last scrape at the end, and
    `counts()` taken as the window begins and ends (under "counts", with the window's seconds)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "kdiag.yaml")
        path.write_text(yaml.safe_dump({**config, "listen": f"127.0.0.1:{port}", "state_dir": ""}))
        log = open(Path(tmp, "kdiag.log"), "w")  # noqa: SIM115 (closed below)
        # cwd: `-m` puts the working directory first on sys.path, and it must not shadow PYTHONPATH's kdiag; a
        # relative PYTHONPATH (`..`) is made absolute, or it would name nothing from there.
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in paths if p)}
        proc = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--config", str(path)], stdout=log, stderr=log,
                                cwd=tmp, env=env)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            deadline = time.monotonic() + 120
            while True:  # until the first admin fetch is in /metrics
                try:
                    if b'kdiag_collector_success{collector="kafka_admin"} 1.0' in scrape(conn)[1]:
                        break
                except OSError:
                    conn.close()
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"kdiag did not serve an admin fetch: {Path(tmp, 'kdiag.log').read_text()[-2000:]}")
                time.sleep(1)
            time.sleep(warmup)
            # The window runs from one admin fetch's end to another's: at 100,000 partitions a fetch costs seconds of
            # CPU every 90 s, so a window of fixed length held two fetches or three by chance (a third more or less).
            fetched = next_fetch(conn, -1.0)
            pids = [proc.pid, *children(proc.pid)]
            counted = counts() if counts else None
            cpu0 = {p: cpu_seconds(p) for p in pids}
            spent0 = collector_cpu(scrape(conn)[1])
            t0 = time.monotonic()
            peaks = dict.fromkeys(pids, 0.0)
            scrapes, rss, body, cycles, admin, durations = [], [], b"", set(), set(), {}
            failed = 0  # scrapes whose admin fetch had failed
            while time.monotonic() - t0 < window:
                took, body = scrape(conn)
                scrapes.append(took)
                rss.append(rss_mb(proc.pid))
                peaks.update({p: max(peaks[p], rss_mb(p)) for p in pids})
                cycles.add(metric(body, "kdiag_last_cycle_timestamp_seconds"))
                at = metric(body, ADMIN_SUCCESS)
                admin.add(at)
                durations[at] = metric(body, 'kdiag_collector_duration_seconds{collector="kafka_admin"}')
                failed += metric(body, 'kdiag_collector_success{collector="kafka_admin"}') == 0
                time.sleep(max(0.0, interval - took))
            admin.add(next_fetch(conn, -1.0))
            elapsed = time.monotonic() - t0
            # Per process: its command (kdiag, the AdminClient process, JmxTool ...), CPU share and largest RSS.
            processes = [(command(p), (cpu_seconds(p) - cpu0[p]) / elapsed, peaks[p]) for p in pids]
            # Per collector: its thread's CPU and its child process's, from kdiag's own counter.
            collectors = {name: (total - spent0.get(name, 0.0)) / elapsed for name, total in collector_cpu(body).items()}
            cpu = sum(cpu_seconds(p) - cpu0[p] for p in pids)
            counted = (counted, counts(), elapsed) if counts else None
            children_rss = sum(rss_mb(p) for p in pids[1:])
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            log.close()
    lines = [ln for ln in body.decode().splitlines() if ln and not ln.startswith("#")]
    # The host cycle starts every `interval` (kdiag's default, 5 s): how late a cycle started says whether a Kafka
    # fetch delayed it. Scrapes miss cycles, so lateness is taken modulo the interval, from the first one seen.
    first = min(cycles)
    late = [(t - first + CYCLE / 2) % CYCLE - CYCLE / 2 for t in cycles]
    admin_times = sorted(t for t in admin if t > 0)
    return {"cpu_share": cpu / elapsed, "rss": max(rss), "children_rss": children_rss, "children": len(pids) - 1,
            "processes": processes, "collectors": collectors, "admin_fetches": sum(1 for t in admin if t > fetched),
            "cycle_late": max(late), "admin_every": statistics.median(b - a for a, b in itertools.pairwise(admin_times))
            if len(admin_times) > 1 else math.nan,
            "scrape_p99": percentile(scrapes, 99), "series": len(lines), "failed_scrapes": failed,
            "admin_p50": percentile(list(durations.values()), 50), "admin_max": max(durations.values(), default=math.nan),
            "kafka_series": sum(1 for ln in lines if ln.startswith("kdiag_kafka_")), "body": body, "counts": counted}


def next_fetch(conn: http.client.HTTPConnection, after: float, within: float = 600.0) -> float:
    """Wait until kdiag's admin fetch that succeeded last is newer than `after` (-1: the next one from now); its time."""
    if after < 0:
        after = metric(scrape(conn)[1], ADMIN_SUCCESS)
    deadline = time.monotonic() + within
    while (at := metric(scrape(conn)[1], ADMIN_SUCCESS)) <= after:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no admin fetch succeeded within {within:g}s")
        time.sleep(0.5)
    return at


def report_processes(r: dict) -> None:
    """Progress lines: each of kdiag's processes' CPU share and peak RSS, and the collectors costing most."""
    for name, share, peak in r["processes"]:
        progress(f"  {name}: {share * 100:.2f}% of a core, at most {peak:.0f} MB")
    costly = sorted(r["collectors"].items(), key=lambda kv: -kv[1])[:6]
    progress(f"  {r['admin_fetches']} admin fetches in the window")
    progress("  collectors (thread and child): " + ", ".join(f"{name} {share * 100:.2f}%" for name, share in costly))


def time_fetches(bootstrap: str, cycles: int) -> tuple[list[float], int]:
    """Seconds per KafkaAdminCollector.fetch() over `cycles` fetches on one reused collector, and how many failed."""
    from kdiag.kafka.admin import KafkaAdminError

    defaults = KafkaConfig()  # the config caches as the daemon has them
    collector = KafkaAdminCollector(bootstrap, timeout=60.0, configs_interval=defaults.configs_interval,
                                    quiet_groups_interval=defaults.quiet_groups_interval)
    out, failed = [], 0
    try:
        with contextlib.suppress(KafkaAdminError):
            collector.fetch()  # connect and warm the metadata cache outside the timing
        for _ in range(cycles):
            start = time.perf_counter()
            try:
                collector.fetch()
            except KafkaAdminError as e:
                failed += 1
                progress(f"  fetch failed: {e}")
            out.append(time.perf_counter() - start)
    finally:
        if hasattr(collector, "close"):
            collector.close()
    return out, failed


def main(argv: list[str] | None = None) -> int:
    """Grow the lab size by size, measure kdiag at each, print the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1000,10000", help="partition counts, comma-separated (default 1000,10000)")
    p.add_argument("--groups-per-partition", type=float, default=0.1, help="groups per partition (default 0.1)")
    p.add_argument("--moving-groups", type=float, default=0.1,
                   help=f"share of the groups whose offsets move, committed every {COMMIT_EVERY:g}s (default 0.1)")
    p.add_argument("--per-topic", type=int, default=100, help="partitions per topic (default 100)")
    p.add_argument("--window", type=float, default=120, help="seconds kdiag is measured at each size (default 120)")
    p.add_argument("--warmup", type=float, default=20, help="seconds after its first admin fetch (default 20)")
    p.add_argument("--scrape-interval", type=float, default=5, help="seconds between scrapes (default 5)")
    p.add_argument("--fetches", type=int, default=10, help="AdminClient fetches timed per size (default 10)")
    p.add_argument("--keep", action="store_true", help="leave the topics and groups on the cluster")
    p.add_argument("--first-jmx-only", action="store_true",
                   help="poll the first broker's JMX only, as the daemon on one broker's host does (a multi-broker lab)")
    args = p.parse_args(argv)
    lab = read_lab()
    if not lab:
        print("no lab: start one with `KDIAG_LAB_DIR=... kdiag lab up --brokers 1`", file=sys.stderr)
        return 2
    config = yaml.safe_load(lab_config().read_text())
    if args.first_jmx_only:
        config["kafka"]["jmx"] = config["kafka"].get("jmx", [])[:1]
    bootstrap = config["kafka"]["bootstrap_servers"]
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if problems := capacity_problems(sizes[-1], lab):
        for problem in problems:
            print(f"scale.py: {sizes[-1]} partitions: {problem}", file=sys.stderr)
        return 2
    print(f"kdiag at default intervals, {args.window:g}s window, scraped every {args.scrape_interval:g}s, "
          f"{args.moving_groups:.0%} of the groups committing every {COMMIT_EVERY:g}s (the others idle); "
          f"CPU share of one core and RSS children include the JmxTool and AdminClient processes\n")
    print("| partitions | groups | series (kafka) | fetch p50 | fetch p99 | admin every | CPU (1 core) | RSS daemon "
          "| RSS children | scrape p99 | cycle late max |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)
    try:
        for size in sizes:
            topics, groups = math.ceil(size / args.per_topic), round(size * args.groups_per_partition)
            progress(f"size {size}: growing to {topics} topics x {args.per_topic} partitions and {groups} groups")
            admin = AdminClient({"bootstrap.servers": bootstrap})
            grow(admin, topics, groups, args.per_topic)
            del admin
            progress(f"size {size}: kdiag run for {args.warmup:g}s warm-up + {args.window:g}s")
            with Committer(bootstrap, round(groups * args.moving_groups), topics, args.per_topic):
                r = run_window(config, args.window, args.warmup, args.scrape_interval)
                report_processes(r)
                progress(f"size {size}: timing {args.fetches} AdminClient fetches")
                fetches, failed = time_fetches(bootstrap, args.fetches)
            note = f" ({failed} failed)" if failed else ""
            print(f"| {topics * args.per_topic} | {groups} | {r['series']} ({r['kafka_series']}) | "
                  f"{percentile(fetches, 50):.2f}s | {percentile(fetches, 99):.2f}s{note} | {r['admin_every']:.0f}s | "
                  f"{r['cpu_share'] * 100:.2f}% | {r['rss']:.0f} MB | {r['children_rss']:.0f} MB ({r['children']}) | "
                  f"{r['scrape_p99'] * 1e3:.1f}ms | {r['cycle_late'] * 1e3:.0f}ms |", flush=True)
    finally:
        if not args.keep:
            cleanup(bootstrap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
