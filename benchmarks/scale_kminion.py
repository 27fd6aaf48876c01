"""kdiag and KMinion side by side on the same lab in one run: CPU, RSS, Kafka requests per second, and lag agreement.

The lab is grown as benchmarks/scale.py grows it (--partitions in topics of --per-topic, --groups groups committed
at 0 on one topic each; --moving of them committing new offsets every --commit-every seconds from outside the group),
and the first SAMPLED_TOPICS topics get --messages messages per partition, so that the idle groups on them lag.
Then, one after the other and each for --warmup + --window seconds: nothing (the baseline: the committer's own
requests), kdiag with kafka.committed_offsets offset_fetch, kdiag with offsets_topic, KMinion in its adminApi mode
and in its offsetsTopic mode (built by benchmarks/build_kminion.sh). Kafka requests per second come from the
brokers' RequestMetrics RequestsPerSec counts over each tool's measured window (per type, JmxTool), less the
baseline's; CPU and RSS of
kdiag include its children. The lag of SAMPLED_GROUPS idle groups is compared between every tool and the lab's truth.
"""

from __future__ import annotations

import argparse
import http.client
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from confluent_kafka import Producer

from scale import (GROUP, TOPIC, Committer, cleanup, cpu_seconds, free_port, grow, progress, report_processes, rss_mb,
                   run_window)
from kdiag.kafka.jars import classpath
from kdiag.kafka.jmx_reader import JmxReader
from kdiag.tools.lab.lab import lab_config, read_lab

KMINION = Path(__file__).parent / ".kminion" / "kminion"
SAMPLED_TOPICS = 20
SAMPLED_GROUPS = 20
REQUESTS = "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,version=*"
SERIES = re.compile(r'^(\w+)\{([^}]*)\} (\S+)$')
REQUEST_TYPE = re.compile(r",request=(\w+),")


def request_counts(readers: list[JmxReader]) -> dict[str, float]:
    """Per request type, the requests every broker has answered so far, versions summed."""
    counts: dict[str, float] = {}
    for reader in readers:
        row = reader.wait_row(time.monotonic() + 30, max_age=3)
        if row is None:
            raise RuntimeError(f"no JMX row from {reader.url}: {reader.error}")
        for key, value in row.items():
            if key.endswith("|Count") and (m := REQUEST_TYPE.search(key)):
                counts[m[1]] = counts.get(m[1], 0.0) + value
    return counts


def rates(before: dict[str, float], after: dict[str, float], seconds: float,
          baseline: dict[str, float]) -> dict[str, float]:
    """Requests per second of each type between two counts, less the baseline's."""
    return {t: (after[t] - before.get(t, 0.0)) / seconds - baseline.get(t, 0.0) for t in after}


def group_lags(body: bytes, name: str, group_label: str) -> dict[str, float]:
    """Per group, the lag series `name` summed over its topics (both tools label it differently)."""
    out: dict[str, float] = {}
    for line in body.decode().splitlines():
        if (m := SERIES.match(line)) and m[1] == name:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m[2]))
            if group := labels.get(group_label):
                out[group] = out.get(group, 0.0) + float(m[3])
    return out


def scrape(port: int) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read()
    finally:
        conn.close()


def run_kminion(bootstrap: str, mode: str, warmup: float, window: float, sampled: list[str],
                counts: Callable[[], dict[str, float]]) -> dict:
    """KMinion in `mode` for warmup + window seconds (after it exports every sampled group), scraped every 5 s: CPU,
    RSS, last scrape that answered, the scrapes that did not answer in 30 s, and `counts()` as the window begins and
    ends."""
    port = free_port()
    config = {"kafka": {"brokers": bootstrap.split(",")},
              "minion": {"consumerGroups": {"enabled": True, "scrapeMode": mode, "granularity": "topic"},
                         "topics": {"granularity": "topic"}, "logDirs": {"enabled": False}},
              "exporter": {"host": "127.0.0.1", "port": port}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "kminion.yaml")
        path.write_text(yaml.safe_dump(config))
        log = open(Path(tmp, "kminion.log"), "w")  # noqa: SIM115 (closed below)
        proc = subprocess.Popen([str(KMINION)], env={**os.environ, "CONFIG_FILEPATH": str(path)}, stdout=log,
                                stderr=log)
        try:
            deadline = time.monotonic() + 300
            while True:  # until it exports every sampled group's lag
                try:
                    got = group_lags(scrape(port), "kminion_kafka_consumer_group_topic_lag", "group_id")
                    if all(g in got for g in sampled):
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"KMinion exported no lag: {Path(tmp, 'kminion.log').read_text()[-2000:]}")
                time.sleep(1)
            warm = time.monotonic() + warmup
            while time.monotonic() < warm:
                scrape(port)
                time.sleep(5)
            counted = counts()
            cpu0, t0, rss, failed, body = cpu_seconds(proc.pid), time.monotonic(), [], 0, b""
            # KMinion reads the cluster when scraped: every 5 s, as kdiag is scraped.
            while time.monotonic() - t0 < window:
                try:
                    body = scrape(port)
                except OSError:  # a scrape past 30 s: counted, the window goes on
                    failed += 1
                rss.append(rss_mb(proc.pid))
                time.sleep(5)
            cpu, elapsed = cpu_seconds(proc.pid) - cpu0, time.monotonic() - t0
            return {"cpu_share": cpu / elapsed, "rss": max(rss), "body": body, "counts": (counted, counts(), elapsed),
                    "failed_scrapes": failed}
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()


def main(argv: list[str] | None = None) -> int:
    """Grow the lab, measure each tool in turn, print the table and the lag comparison."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, default=10_000)
    p.add_argument("--groups", type=int, default=2_000)
    p.add_argument("--moving", type=int, default=200, help="groups committing every --commit-every seconds")
    p.add_argument("--commit-every", type=float, default=5.0)
    p.add_argument("--per-topic", type=int, default=100)
    p.add_argument("--messages", type=int, default=3, help="messages per partition of the sampled topics")
    p.add_argument("--window", type=float, default=60)
    p.add_argument("--warmup", type=float, default=20)
    p.add_argument("--keep", action="store_true", help="leave the topics and groups on the cluster")
    p.add_argument("--kdiag-only", action="store_true", help="kdiag's two committed-offsets modes, no KMinion")
    p.add_argument("--committed-offsets", nargs="+", default=["offset_fetch", "offsets_topic"],
                   choices=["offset_fetch", "offsets_topic"], help="kdiag's modes to run (default: both)")
    p.add_argument("--kminion-modes", nargs="+", default=["adminApi", "offsetsTopic"],
                   choices=["adminApi", "offsetsTopic"], help="KMinion's consumer-group modes to run (default: both)")
    p.add_argument("--probe", action="store_true",
                   help="keep kdiag's synthetic probe on (off by default: KMinion's end-to-end probe is off too, and "
                        "each adds its own produce and fetch traffic)")
    p.add_argument("--first-jmx-only", action="store_true",
                   help="kdiag polls the first broker's JMX only, as the daemon on one broker's host does")
    args = p.parse_args(argv)
    lab = read_lab()
    if not lab or not (args.kdiag_only or KMINION.exists()):
        print("needs a lab (KDIAG_LAB_DIR=... kdiag lab up) and benchmarks/build_kminion.sh run", file=sys.stderr)
        return 2
    config = yaml.safe_load(lab_config().read_text())
    if args.first_jmx_only:
        config["kafka"]["jmx"] = config["kafka"].get("jmx", [])[:1]
    if not args.probe:
        config["probe"] = {**config.get("probe", {}), "enabled": False}
    bootstrap = config["kafka"]["bootstrap_servers"]
    topics = math.ceil(args.partitions / args.per_topic)
    from confluent_kafka.admin import AdminClient

    progress(f"growing to {topics} topics x {args.per_topic} partitions and {args.groups} groups")
    grow(AdminClient({"bootstrap.servers": bootstrap}), topics, args.groups, args.per_topic)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for t in range(min(SAMPLED_TOPICS, topics)):
        for partition in range(args.per_topic):
            for _ in range(args.messages):
                producer.produce(TOPIC.format(t), value=b"x", partition=partition)
    assert producer.flush(120) == 0
    # Idle groups on the written topics: their lag is messages x partitions, and stays so.
    sampled = [GROUP.format(i) for i in range(args.moving, args.groups) if i % topics < SAMPLED_TOPICS][:SAMPLED_GROUPS]
    truth = {g: float(args.messages * args.per_topic) for g in sampled}
    readers = [JmxReader(url, classpath(lab["dir"]), 1.0, (REQUESTS,), ("Count",), "java") for url in lab["jmx"].values()]
    rows, lags, fetches = [], {}, {}
    try:
        with Committer(bootstrap, args.moving, topics, args.per_topic, every=args.commit_every):
            r0, t0 = request_counts(readers), time.monotonic()
            time.sleep(args.window)
            baseline = rates(r0, request_counts(readers), time.monotonic() - t0, {})
            for source in args.committed_offsets:
                progress(f"kdiag, committed_offsets {source}")
                kdiag_config = {**config, "kafka": {**config["kafka"], "committed_offsets": source}}
                r = run_window(kdiag_config, args.window, args.warmup, 5.0, lambda: request_counts(readers))
                rate = rates(*r["counts"], baseline)
                rows.append((f"kdiag ({source})", r["cpu_share"], r["rss"] + r["children_rss"], rate))
                report_processes(r)
                lags[rows[-1][0]] = group_lags(r["body"], "kdiag_kafka_consumergroup_lag", "group")
                fetches[rows[-1][0]] = f"{r['admin_p50']:.2f} s / {r['admin_max']:.2f} s, {r['failed_scrapes']} failed"
            for mode in args.kminion_modes if not args.kdiag_only else ():
                progress(f"KMinion, {mode}")
                try:
                    r = run_kminion(bootstrap, mode, args.warmup, args.window, sampled, lambda: request_counts(readers))
                except RuntimeError as e:  # the table of the tools measured is still printed
                    progress(f"KMinion, {mode}: {str(e)[:300]}")
                    continue
                rate = rates(*r["counts"], baseline)
                rows.append((f"KMinion ({mode})", r["cpu_share"], r["rss"], rate))
                progress(f"  kminion: {r['cpu_share'] * 100:.2f}% of a core, at most {r['rss']:.0f} MB")
                fetches[rows[-1][0]] = f"{r['failed_scrapes']} failed"
                lags[rows[-1][0]] = group_lags(r["body"], "kminion_kafka_consumer_group_topic_lag", "group_id")
    finally:
        for reader in readers:
            reader.close()
        if not args.keep:
            cleanup(bootstrap)
    print(f"{topics * args.per_topic} partitions, {args.groups} groups ({args.moving} committing every "
          f"{args.commit_every:g}s), {args.window:g}s windows after {args.warmup:g}s warm-up, one tool at a time; "
          f"baseline {sum(baseline.values()):.1f} requests/s (the committer)\n")
    print("| tool | CPU (1 core) | RSS | Kafka requests/s | admin fetch p50 / max, failed scrapes "
          "| sampled lags equal to the truth |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, cpu, rss, rate in rows:
        agree = sum(lags[name].get(g) == v for g, v in truth.items())
        print(f"| {name} | {cpu * 100:.2f}% | {rss:.0f} MB | {sum(rate.values()):.1f} | {fetches.get(name, '')} "
              f"| {agree}/{len(truth)} |")
    kinds = sorted({t for *_, rate in rows for t, v in rate.items() if v >= 0.5})
    print("\n| requests/s by type | " + " | ".join(name for name, *_ in rows) + " |")
    print("| --- |" + " ---: |" * len(rows))
    for kind in kinds:
        print(f"| {kind} | " + " | ".join(f"{rate.get(kind, 0.0):.1f}" for *_, rate in rows) + " |")
    print("\n| group | truth | " + " | ".join(name for name, *_ in rows) + " |")
    print("| --- | ---: |" + " ---: |" * len(rows))
    for g, v in truth.items():
        print(f"| {g} | {v:.0f} | " + " | ".join(f"{lags[name].get(g, math.nan):.0f}" for name, *_ in rows) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
