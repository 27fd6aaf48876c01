"""kdiag and KMinion side by side on the same lab in one run: CPU, RSS, Kafka requests per second, and lag agreement.

The lab is grown as benchmarks/scale.py grows it (--partitions in topics of --per-topic, --groups groups committed
at 0 on one topic each; --moving of them committing new offsets every --commit-every seconds from outside the group),
and the first SAMPLED_TOPICS topics get --messages messages per partition, so that the idle groups on them lag.
Then, one after the other and each for --warmup + --window seconds: nothing (the baseline), kdiag with
kafka.committed_offsets offset_fetch, kdiag with offsets_topic, KMinion in its adminApi mode and in its offsetsTopic
mode (built by benchmarks/build_kminion.sh). Kafka requests per second: the brokers' RequestMetrics RequestsPerSec
counts (per type, JmxTool) over each window, less the requests brokers send each other and less the committer's own
(counted from its librdkafka statistics), both counts taken between two rounds of its commits; what the baseline
window leaves is subtracted too. CPU and RSS of kdiag include its children. The lag of SAMPLED_GROUPS idle groups is
compared between every tool and the lab's truth.
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
from confluent_kafka import Producer, TopicPartition

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


# RequestMetrics types that are not a client's: Fetch is FetchConsumer plus FetchFollower, the rest brokers and
# controllers send each other.
BETWEEN_BROKERS = frozenset({
    "Fetch", "FetchFollower", "LeaderAndIsr", "StopReplica", "UpdateMetadata", "ControlledShutdown", "AlterPartition",
    "BrokerRegistration", "BrokerHeartbeat", "UnregisterBroker", "ControllerRegistration", "AssignReplicasToDirs",
    "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "FetchSnapshot", "AddRaftVoter", "RemoveRaftVoter",
    "UpdateRaftVoter", "AllocateProducerIds", "Envelope", "WriteTxnMarkers",
})
# librdkafka's names for the request types where RequestMetrics names them otherwise.
LIBRDKAFKA_NAMES = {"FetchConsumer": "Fetch", "ApiVersions": "ApiVersion"}


def request_counts(jmx_urls: list[str], classpath_: str, after: float) -> dict[str, float]:
    """Per request type, the client requests every broker has answered so far, versions summed, from JMX rows
    received after `after` (monotonic). A JmxTool per count: it resolves its MBean pattern once, at start, and Kafka
    makes a request type's meter for each version at the first such request."""
    readers = [JmxReader(url, classpath_, 1.0, (REQUESTS,), ("Count",), "java") for url in jmx_urls]
    try:
        counts: dict[str, float] = {}
        deadline = time.monotonic() + 60
        for reader in readers:
            while (row := reader.wait_row(deadline, max_age=time.monotonic() - after)) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no JMX row from {reader.url}: {reader.error}")
                time.sleep(0.1)
            for key, value in row.items():
                if key.endswith("|Count") and (m := REQUEST_TYPE.search(key)) and m[1] not in BETWEEN_BROKERS:
                    counts[m[1]] = counts.get(m[1], 0.0) + value
        return counts
    finally:
        for reader in readers:
            reader.close()


def others_requests(jmx_urls: list[str], classpath_: str, committer: Committer) -> dict[str, float]:
    """Per request type, the client requests the brokers have answered so far less the committer's own, both read
    between two rounds of its commits (the brokers' a second after the last round was answered)."""
    with committer.between_rounds() as committer_sent:
        counts = request_counts(jmx_urls, classpath_, after=time.monotonic() + 1.0)
        sent = committer_sent()
    return {t: n - sent.get(LIBRDKAFKA_NAMES.get(t, t), 0.0) for t, n in counts.items()}


def rates(before: dict[str, float], after: dict[str, float], seconds: float,
          baseline: dict[str, float]) -> dict[str, float]:
    """Requests per second of each type between two counts, less the baseline's."""
    return {t: (after[t] - before.get(t, 0.0)) / seconds - baseline.get(t, 0.0) for t in after}


def top_up(bootstrap: str, topics: list[str], partitions: int, messages: int) -> None:
    """Write to each partition of `topics` until it holds `messages` (a kept lab's second run writes none)."""
    from confluent_kafka.admin import AdminClient, OffsetSpec
    wanted = [TopicPartition(t, p) for t in topics for p in range(partitions)]
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until every answer came: its futures die with it
    ends = admin.list_offsets({tp: OffsetSpec.latest() for tp in wanted})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for tp, end in ends.items():
        for _ in range(messages - end.result(60).offset):
            producer.produce(tp.topic, value=b"x", partition=tp.partition)
    if producer.flush(120):
        raise RuntimeError("the sampled topics' messages were not all written in 120 s")


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
                counts: Callable[[], dict[str, float]], ready_within: float) -> dict:
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
            deadline = time.monotonic() + ready_within
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
    p.add_argument("--kminion-ready-within", type=float, default=900,
                   help="seconds KMinion gets to export every sampled group (offsetsTopic reads __consumer_offsets "
                        "whole first: a lab kept through earlier runs holds tens of millions of commits)")
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
    top_up(bootstrap, [TOPIC.format(t) for t in range(min(SAMPLED_TOPICS, topics))], args.per_topic, args.messages)
    # Idle groups on the written topics: their lag is messages x partitions, and stays so.
    sampled = [GROUP.format(i) for i in range(args.moving, args.groups) if i % topics < SAMPLED_TOPICS][:SAMPLED_GROUPS]
    truth = {g: float(args.messages * args.per_topic) for g in sampled}
    jmx_urls, jars = list(lab["jmx"].values()), classpath(lab["dir"])
    rows, lags, fetches = [], {}, {}
    try:
        with Committer(bootstrap, args.moving, topics, args.per_topic, every=args.commit_every) as committer:
            def counts() -> dict[str, float]:
                return others_requests(jmx_urls, jars, committer)

            r0, t0 = counts(), time.monotonic()
            time.sleep(args.window)
            baseline = rates(r0, counts(), time.monotonic() - t0, {})
            for source in args.committed_offsets:
                progress(f"kdiag, committed_offsets {source}")
                kdiag_config = {**config, "kafka": {**config["kafka"], "committed_offsets": source}}
                r = run_window(kdiag_config, args.window, args.warmup, 5.0, counts)
                rate = rates(*r["counts"], baseline)
                rows.append((f"kdiag ({source})", r["cpu_share"], r["rss"] + r["children_rss"], rate))
                report_processes(r)
                lags[rows[-1][0]] = group_lags(r["body"], "kdiag_kafka_consumergroup_lag", "group")
                fetches[rows[-1][0]] = f"{r['admin_p50']:.2f} s / {r['admin_max']:.2f} s, {r['failed_scrapes']} failed"
            for mode in args.kminion_modes if not args.kdiag_only else ():
                progress(f"KMinion, {mode}")
                try:
                    r = run_kminion(bootstrap, mode, args.warmup, args.window, sampled, counts, args.kminion_ready_within)
                except RuntimeError as e:  # the table of the tools measured is still printed
                    progress(f"KMinion, {mode}: {str(e)[:300]}")
                    continue
                rate = rates(*r["counts"], baseline)
                rows.append((f"KMinion ({mode})", r["cpu_share"], r["rss"], rate))
                progress(f"  kminion: {r['cpu_share'] * 100:.2f}% of a core, at most {r['rss']:.0f} MB")
                fetches[rows[-1][0]] = f"{r['failed_scrapes']} failed"
                lags[rows[-1][0]] = group_lags(r["body"], "kminion_kafka_consumer_group_topic_lag", "group_id")
    finally:
        if not args.keep:
            cleanup(bootstrap)
    print(f"{topics * args.per_topic} partitions, {args.groups} groups ({args.moving} committing every "
          f"{args.commit_every:g}s), {args.window:g}s windows after {args.warmup:g}s warm-up, one tool at a time; "
          f"baseline {sum(baseline.values()):.1f} requests/s from neither the committer nor a broker\n")
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
