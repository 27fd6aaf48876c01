"""Time one live diagnosis cycle stage by stage: collection, history, signals, rules and render."""

from __future__ import annotations

import argparse
import math
import socket
import sys
import time

from kdiag.config.settings import load_config
from kdiag.app.wiring import host_collectors, load_rules
from kdiag.serve.exporter import render_metrics
from kdiag.runtime.pipeline import CollectorSet, Pipeline, State
from kdiag.core.cardinality import cap_kafka_series, top_groups
from kdiag.core.root import Root
from kdiag.analysis.subject_cap import SubjectCap
from kdiag.analysis.subject_kinds import compute_signals

STAGES = ("collection", "history", "signals", "rules", "render", "total")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), nearest-rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def cycle(pipeline: Pipeline, root: Root, max_series: int | None = None,
          top: int = 0, subjects: SubjectCap | None = None) -> tuple[dict[str, float], int, bytes]:
    """One Pipeline.step plus the exporter's render, stage by stage: (seconds per stage, rule evaluations, the
    exposition); with max_series, the Kafka series cap (after kafka.top_groups' cut, `top`) is its own stage before
    the render, which keeps the diagnoses `subjects` (diagnosis.max_subjects_per_rule) keeps."""
    clock = time.perf_counter
    t = root.now()
    start = clock()
    samples = pipeline.collectors.run(root)
    collected = clock()
    pipeline.history.add(t, samples)
    added = clock()
    signals = compute_signals(pipeline.history, pipeline.window)
    derived = clock()
    judged = pipeline.engine.evaluate(pipeline.judged, t, signals)
    pipeline.adopt(judged)
    evaluated = clock()
    exposed = samples if max_series is None else cap_kafka_series(top_groups(samples, top), max_series)[0]
    capped = clock()
    state = State(pipeline.host, t, exposed, dict(pipeline.collectors.health), signals, judged.current(),
                  list(judged.resolved))
    body = render_metrics(state, cap=subjects)
    rendered = clock()
    evaluations = sum(len(signals.get(rule.each, {})) for rule in pipeline.engine.rules)
    times = {"collection": collected - start, "history": added - collected, "signals": derived - added,
             "rules": evaluated - derived, **({} if max_series is None else {"cap": capped - evaluated}),
             "render": rendered - capped, "total": rendered - start}
    return times, evaluations, body


def main(argv: list[str] | None = None) -> int:
    """Run the shipped catalog over the live host for N cycles and print p50/p99 per stage."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cycles", type=int, default=50, help="cycles to time (default 50)")
    p.add_argument("--spacing", type=float, default=0.2, help="seconds between cycles (default 0.2)")
    args = p.parse_args(argv)

    config = load_config()
    rules = load_rules(config)
    collectors = CollectorSet(host_collectors(config))
    pipeline = Pipeline(collectors, rules, socket.gethostname(), config.history, config.signal_window)
    root = Root(config.procfs, config.sysfs)
    per_stage: dict[str, list[float]] = {s: [] for s in STAGES}
    evaluations: list[int] = []
    per_collector: dict[str, list[float]] = {c.name: [] for c in collectors.collectors}
    step = max(1, args.cycles // 5)
    for i in range(1, args.cycles + 1):
        times, n, _ = cycle(pipeline, root)
        for stage, seconds in times.items():
            per_stage[stage].append(seconds)
        evaluations.append(n)
        for name, health in collectors.health.items():
            per_collector[name].append(health.duration)
        if i % step == 0 or i == args.cycles:
            print(f"cycles {i}/{args.cycles}  total p50 {percentile(per_stage['total'], 50) * 1e3:.2f} ms", flush=True)
        time.sleep(args.spacing)

    print(f"\n{len(rules)} rules, {len(collectors.collectors)} collectors, {args.cycles} cycles {args.spacing:g}s apart")
    print(f"{'stage':12} {'p50 ms':>8} {'p99 ms':>8}")
    for stage in STAGES:
        print(f"{stage:12} {percentile(per_stage[stage], 50) * 1e3:8.2f} {percentile(per_stage[stage], 99) * 1e3:8.2f}")
    rules_p50 = percentile(per_stage["rules"], 50)
    evals = percentile(evaluations, 50)
    per_eval = f"{rules_p50 / evals * 1e6:.1f}" if evals else "n/a"
    print(f"rule evaluations per cycle: {evals} (min {min(evaluations)}, max {max(evaluations)}); "
          f"{per_eval} µs per evaluation (rules p50 / evaluations)")
    slowest = sorted(per_collector.items(), key=lambda kv: -percentile(kv[1], 50))[:5]
    print("slowest collectors (p50): " + ", ".join(f"{name} {percentile(d, 50) * 1e3:.2f} ms" for name, d in slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
