"""The diagnosis cycle on a 128-CPU host with 64 disks and 4 NICs of 32 queues: a recording generated now, replayed."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
from big_host import CPUS, DISKS, NICS, QUEUES, write_big_host
from rules_cycle import percentile

from kdiag.config.settings import load_config
from kdiag.app.wiring import load_rules, replay_collectors
from kdiag.serve.exporter import render_metrics
from kdiag.runtime.pipeline import CollectorSet, Pipeline, State
from kdiag.recording.recording import Recording
from kdiag.core.root import Root
from kdiag.analysis.subject_kinds import compute_signals

TARGET_MS = 100.0
STAGES = ("collection", "history", "signals", "rules", "signals+rules", "render", "total")


def stamp() -> tuple[float, float]:
    """(wall, this thread's CPU) seconds: on a shared machine wall time also counts the waits for a core."""
    return time.perf_counter(), time.thread_time()


def timed_cycle(pipeline: Pipeline, root: Root) -> dict[str, tuple[float, float]]:
    """One Pipeline.step plus the render, as (wall, CPU) seconds per stage (collection's CPU is its threads')."""
    t = root.now()
    marks = [stamp()]
    process_cpu = time.process_time()
    samples = pipeline.collectors.run(root)
    collection_cpu = time.process_time() - process_cpu
    marks.append(stamp())
    pipeline.history.add(t, samples)
    marks.append(stamp())
    signals = compute_signals(pipeline.history, pipeline.window)
    marks.append(stamp())
    judged = pipeline.engine.evaluate(pipeline.judged, t, signals)
    pipeline.adopt(judged)
    marks.append(stamp())
    render_metrics(State(pipeline.host, t, samples, dict(pipeline.collectors.health), signals, judged.current(),
                         list(judged.resolved)))
    marks.append(stamp())
    out = {stage: (b[0] - a[0], b[1] - a[1]) for stage, a, b in
           zip(("collection", "history", "signals", "rules", "render"), marks, marks[1:], strict=False)}
    out["collection"] = (out["collection"][0], collection_cpu)
    out["signals+rules"] = tuple(a + b for a, b in zip(out["signals"], out["rules"], strict=True))
    out["total"] = tuple(sum(v[i] for k, v in out.items() if k != "signals+rules") for i in (0, 1))
    return out


def main(argv: list[str] | None = None) -> int:
    """Generate the recording, replay it `--loops` times through one pipeline, print p50/p99 per stage."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--snapshots", type=int, default=36, help="snapshots to generate (default 36, 5 s apart)")
    p.add_argument("--loops", type=int, default=5,
                   help="replays, time running on, so the history fills its 15 minutes as a daemon's does (default 5)")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kdiag-host-scale-"))
    try:
        t0 = time.monotonic()
        recording = Recording(write_big_host(work, args.snapshots))
        print(f"{CPUS} CPUs, {DISKS} disks, {NICS} NICs x {QUEUES} queues: {args.snapshots} snapshots written in "
              f"{time.monotonic() - t0:.0f}s", flush=True)
        config = load_config()
        collectors = CollectorSet(replay_collectors(config, recording))
        pipeline = Pipeline(collectors, load_rules(config), recording.host, config.history, config.signal_window)
        span = args.snapshots * recording.interval
        per_stage: dict[str, list[tuple[float, float]]] = {s: [] for s in STAGES}
        for loop in range(args.loops):
            # Counters restart with each loop, read as resets: timings hold, the rates of that one cycle do not.
            for root in recording.roots(loop * span):
                for stage, pair in timed_cycle(pipeline, root).items():
                    per_stage[stage].append(pair)
        series = len(pipeline.collectors.run(root))
        subjects = {kind: len(s) for kind, s in compute_signals(pipeline.history, pipeline.window).items() if s}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(per_stage['total'])} cycles, {series} series, subjects {subjects}")
    print(f"{'stage':14} {'wall p50':>9} {'wall p99':>9} {'cpu p50':>9} {'cpu p99':>9}   (ms)")
    for stage, pairs in per_stage.items():
        wall, cpu = [w for w, _ in pairs], [c for _, c in pairs]
        print(f"{stage:14} {percentile(wall, 50) * 1e3:9.2f} {percentile(wall, 99) * 1e3:9.2f} "
              f"{percentile(cpu, 50) * 1e3:9.2f} {percentile(cpu, 99) * 1e3:9.2f}")
    # Judged on CPU time: signals and rules run on one thread, so on an idle machine wall time is the same.
    for stage in ("signals+rules", "total"):
        worst = percentile([c for _, c in per_stage[stage]], 99) * 1e3
        print(f"{'PASS' if worst < TARGET_MS else 'FAIL'}: {stage} CPU p99 {worst:.1f} ms (target < {TARGET_MS:g} ms; "
              f"wall p99 {percentile([w for w, _ in per_stage[stage]], 99) * 1e3:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
