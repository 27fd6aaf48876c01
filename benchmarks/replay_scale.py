"""The Python side alone at sizes no lab on this machine holds: a simulated admin state (default 1,000,000 partitions
in topics of 100 over 3 brokers, 50,000 groups with offsets on one topic each) replayed through the daemon's
pipeline with the shipped catalog, stage by stage: the recorded state's check (read_admin_state, as a replay reads
it), the admin collector's samples and lag seconds, history, signals, rules, the series cap and the exposition.

The state is generated, not fetched (no cluster): each cycle the log ends advance and a tenth of the groups commit,
as between two fetches of a busy cluster.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import socket
import sys
import time

from kdiag.analysis.subject_cap import SubjectCap
from kdiag.app.wiring import load_rules
from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.config.settings import load_config
from kdiag.core.root import Root
from kdiag.kafka.partition_lag import TopPartitions
from kdiag.kafka.state import AdminState, read_admin_state
from kdiag.runtime.pipeline import CollectorSet, Pipeline
from rules_cycle import cycle  # this script's directory is on sys.path

STAGES = ("top partitions (AdminClient process)", "state check", "collect", "history", "signals", "rules", "cap", "render", "total")
PER_TOPIC = 100
BROKERS = 3


class SimulatedCluster:
    """An admin state of `partitions` partitions and `groups` groups that moves on at each fetch."""

    def __init__(self, partitions: int, groups: int, seed: int = 34):
        self.rng = random.Random(seed)
        self.topics = math.ceil(partitions / PER_TOPIC)
        self.ends = [[self.rng.randrange(10**6) for _ in range(PER_TOPIC)] for _ in range(self.topics)]
        self.committed = [[max(0, e - self.rng.randrange(1000)) for e in self.ends[g % self.topics]]
                          for g in range(groups)]

    def fetch(self, top_partitions: int = 0) -> tuple[AdminState, float]:
        """The next state (every log end written a little, a tenth of the groups committed closer to it) and the
        seconds the AdminClient process spends picking its top_partitions lagging most."""
        for ends in self.ends:
            for p in range(PER_TOPIC):
                ends[p] += self.rng.randrange(50)
        for g in self.rng.sample(range(len(self.committed)), len(self.committed) // 10):
            self.committed[g] = [max(c, e - self.rng.randrange(200)) for c, e in zip(self.committed[g],
                                                                                    self.ends[g % self.topics], strict=False)]
        topics = {}
        for t, ends in enumerate(self.ends):
            partitions = [{"partition": p, "leader": p % BROKERS, "replicas": [p % BROKERS], "isr": [p % BROKERS],
                           "log_end_offset": e} for p, e in enumerate(ends)]
            topics[f"sim-t{t:06d}"] = {"partitions": partitions, "configs": {"retention.ms": "604800000"}}
        # As the AdminClient process has them: every partition's end, each group's committed offsets per topic.
        ends = {f"sim-t{t:06d}": dict(enumerate(e)) for t, e in enumerate(self.ends)}
        offsets = [(f"sim-g{g:06d}", {f"sim-t{g % self.topics:06d}": list(enumerate(c))})
                   for g, c in enumerate(self.committed)]
        top = TopPartitions(top_partitions)
        start = time.perf_counter()
        for group, committed in offsets:
            top.add(group, committed, ends)
        picked = time.perf_counter() - start
        groups = {}
        for g, committed in enumerate(self.committed):
            lags = [e - c for c, e in zip(committed, self.ends[g % self.topics], strict=False)]
            groups[f"sim-g{g:06d}"] = {"state": "STABLE" if g % 3 else "EMPTY", "members": g % 3,
                                       "lag": {f"sim-t{g % self.topics:06d}": {"sum": sum(lags), "max": max(lags)}}}
        state = {"cluster_id": "simulated", "controller_id": 0,
                 "brokers": [{"id": b, "host": "127.0.0.1", "port": 9092 + b, "rack": None} for b in range(BROKERS)],
                 "broker_configs": {}, "topics": topics, "consumer_groups": groups, "top_partitions": top.result()}
        return state, picked  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    """Replay --cycles simulated fetches; print p50/max per stage, series and peak RSS."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, default=1_000_000)
    p.add_argument("--groups", type=int, default=50_000)
    p.add_argument("--cycles", type=int, default=4)
    p.add_argument("--max-subjects", type=int, help="diagnosis.max_subjects_per_rule (default: the config's; 0: off)")
    args = p.parse_args(argv)
    config = load_config()
    cluster = SimulatedCluster(args.partitions, args.groups)
    kafka = config.kafka
    collector = KafkaAdminCollector("", kafka.timeout, kafka.max_partition_series, partition_series=kafka.partition_series,
                                    group_series=kafka.group_series, top_partitions=kafka.top_partitions)
    checked: list[float] = []
    picked: list[float] = []
    fetched: list[float] = []

    def fetch() -> AdminState:
        # A replay reads the recorded JSON and checks it: the cost of both, as the daemon replaying pays it; making
        # the simulated state is no cost of kdiag's, and is left out.
        begin = time.perf_counter()
        state, took = cluster.fetch(kafka.top_partitions)
        picked.append(took)
        text = json.dumps(state)
        start = time.perf_counter()
        state = read_admin_state(json.loads(text), 2)
        checked.append(time.perf_counter() - start)
        fetched.append(time.perf_counter() - begin)
        return state

    collector.fetch = fetch  # type: ignore[method-assign]
    collectors = CollectorSet([collector])
    pipeline = Pipeline(collectors, load_rules(config), socket.gethostname(), config.history, config.signal_window)
    root = Root(config.procfs, config.sysfs)
    per_stage: dict[str, list[float]] = {s: [] for s in STAGES}
    series = diagnosis_series = 0
    subjects = SubjectCap(config.diagnosis.max_subjects_per_rule if args.max_subjects is None else args.max_subjects)
    for i in range(args.cycles):
        times, _, body = cycle(pipeline, root, kafka.max_series, kafka.top_groups, subjects)
        lines = [line for line in body.splitlines() if line and not line.startswith(b"#")]
        series = len(lines)
        diagnosis_series = sum(1 for line in lines if line.startswith(b"kdiag_diagnosis_"))
        # The fetch's JSON round trip is the simulation's; its check is a replay's cost, the pick of the partitions
        # lagging most the AdminClient process's.
        times |= {"top partitions (AdminClient process)": picked[-1], "state check": checked[-1],
                  "collect": times.pop("collection") - fetched[-1],
                  "total": times["total"] - fetched[-1] + checked[-1] + picked[-1]}
        for stage in STAGES:
            per_stage[stage].append(times[stage])
        print(f"cycle {i + 1}/{args.cycles}: {per_stage['total'][-1]:.2f}s", file=sys.stderr, flush=True)
    print(f"simulated {cluster.topics * PER_TOPIC} partitions, {args.groups} groups, {args.cycles} cycles; "
          f"{series} lines in /metrics, {diagnosis_series} of them kdiag_diagnosis_* (diagnosis.max_subjects_per_rule "
          f"{subjects.per_rule}); peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB\n")
    print("| stage | p50 | max |")
    print("| --- | ---: | ---: |")
    for stage in STAGES:
        print(f"| {stage} | {sorted(per_stage[stage])[len(per_stage[stage]) // 2]:.3f}s | {max(per_stage[stage]):.3f}s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
