"""Healthy load on a loaded host (issue 35 item 3): a batched keyed load on a 3-broker lab beside busy loops, watched by
the drills' monitor; how close the ratio rules' signals came to their thresholds and how often each rule fired."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass

from kdiag.analysis.signals import Signals
from kdiag.runtime.pipeline import State
from kdiag.tools.drill.cli import lab_target
from kdiag.tools.drill.monitor import Monitor
from kdiag.tools.drill.faults import assignment, keyed_load, topic

RULES = ("forced_fsync", "forced_fsync_broker", "forced_flush_configured", "forced_flush_configured_topic",
         "unbatched_producers", "broker_threads_waiting")


@dataclass(frozen=True)
class Margin:
    """One threshold of a rule: the signal it reads per subject kind, and which side of it fires."""

    rule: str
    kind: str
    signal: str
    threshold: float
    fires_above: bool = True


MARGINS = (
    Margin("forced_fsync_broker", "broker", "log_flushes_per_1k_messages", 0.5),
    Margin("forced_fsync_broker", "broker", "log_flushes_per_second", 4.0),
    Margin("forced_fsync", "cluster", "log_flushes_per_1k_messages", 0.5),
    Margin("unbatched_producers", "broker", "avg_produce_request_bytes", 1024.0, fires_above=False),
    Margin("unbatched_producers", "broker", "messages_per_produce_request", 8.0, fires_above=False),
    Margin("broker_threads_waiting", "proc", "broker_produce_p99_vs_baseline", 2.0),
    Margin("broker_threads_waiting", "proc", "broker_produce_p99_seconds", 0.05),
    Margin("broker_threads_waiting", "proc", "runqueue_wait_per_second", 0.5),
)


def threads_waited(s: Signals) -> bool:
    """broker_threads_waiting's condition before issue 35: the waits alone, whatever the broker's latency did."""
    def num(name: str) -> float:
        v = s.get(name, 0.0)
        return float(v) if isinstance(v, (int, float)) else 0.0
    return s.get("is_broker") == 1.0 and (num("blocked_threads") >= 1.0 or (
        num("runqueue_wait_per_second") > 0.5 and num("runqueue_wait_per_second") > num("cpu_cores")
        and num("cpu_throttled_share") <= 0.05))


def values(states: list[State], margin: Margin) -> list[float]:
    """Every value of a margin's signal over the states' subjects (the brokers' processes only for proc)."""
    def wanted(s: Signals) -> bool:
        return margin.kind != "proc" or s.get("is_broker") == 1.0
    return [float(v) for state in states for s in state.signals.get(margin.kind, {}).values()
            if wanted(s) and isinstance(v := s.get(margin.signal), (int, float))]


def report(states: list[State], seconds: float, busy_loops: int, rate: float) -> dict[str, object]:
    """Per margin the worst value seen, its ratio to the threshold, and the share of evaluations past it; per rule the
    cycles it fired in."""
    margins = []
    for m in MARGINS:
        seen = values(states, m)
        worst = (max(seen) if m.fires_above else min(seen)) if seen else None
        past = sum(1 for v in seen if (v > m.threshold if m.fires_above else v < m.threshold))
        margins.append({"rule": m.rule, "signal": f"{m.kind}.{m.signal}", "threshold": m.threshold,
                        "fires": "above" if m.fires_above else "below", "worst": worst, "evaluations": len(seen),
                        "past_threshold": past,
                        "worst_over_threshold": None if worst is None else worst / m.threshold})
    firing = {rule: sum(1 for s in states if any(d.rule.id == rule and d.state == "firing" for d in s.diagnoses))
              for rule in RULES}
    waited = sum(1 for state in states if any(threads_waited(s) for s in state.signals.get("proc", {}).values()))
    return {"seconds": seconds, "busy_loops": busy_loops, "load_rate": rate, "cycles": len(states),
            "cycles_firing": firing, "cycles_threads_waited_as_before": waited, "margins": margins}


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def busy(n: int) -> list[subprocess.Popen[bytes]]:
    """n `yes >/dev/null` loops."""
    return [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=600.0, help="how long the healthy load runs (default 600)")
    p.add_argument("--busy-loops", type=int, default=2, help="`yes >/dev/null` loops beside it (default 2)")
    p.add_argument("--rate", type=float, default=8000.0, help="keyed load, messages/s (default 8000: issue 35's)")
    p.add_argument("--settle", type=float, default=60.0, help="seconds of load before the watch counts (default 60)")
    args = p.parse_args(argv)
    if not os.environ.get("KDIAG_LAB_DIR"):
        print("set KDIAG_LAB_DIR to a 3-broker `kdiag lab up` directory", file=sys.stderr)
        return 2
    target = lab_target()
    with ExitStack() as stack:
        loops = busy(args.busy_loops)
        stack.callback(lambda: [(loop.kill(), loop.wait()) for loop in loops])
        monitor = Monitor(target, thread_waits=True)
        monitor.start()
        stack.callback(monitor.stop)
        name = stack.enter_context(topic(target, "bench-healthy-ratios", assignment(target, 6)))
        stack.enter_context(keyed_load(target.bootstrap, [name], rate=args.rate))
        time.sleep(args.settle)
        start = time.time()
        say(f"watching {args.seconds:.0f} s of healthy load beside {args.busy_loops} busy loops")
        while time.time() - start < args.seconds:
            time.sleep(min(60.0, args.seconds - (time.time() - start)) or 0.1)
            say(f"{time.time() - start:.0f} s, load average {os.getloadavg()[0]:.1f}")
        states = monitor.since(start)
    print(json.dumps(report(states, args.seconds, args.busy_loops, args.rate), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
