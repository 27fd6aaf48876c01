"""The drill runner: one kdiag pipeline watches the cluster while each drill injects a fault and reverts it."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import types
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import replace
from pathlib import Path

from kdiag.analysis.catalog import Rule
from kdiag.config.probe import ProbeConfig
from kdiag.config.settings import load_config
from kdiag.app.wiring import load_rules
from kdiag.tools.drill.results import (DrillResult, accounted, active_of, false_attributions, first_time, owned_rows, owner,
                                 rule_for, waves)
from kdiag.tools.drill.faults import Target, delete_leftover_topics, probe_running
from kdiag.tools.drill.catalog import Drill
from kdiag.tools.drill.monitor import ALERT_INSTANCE, CYCLE_SECONDS, JMX_POLL_SECONDS, SIGNAL_WINDOW_SECONDS, Monitor
from kdiag.runtime.pipeline import State
from kdiag.report.html import Timeline, frozen

log = logging.getLogger(__name__)

LEAD_SECONDS = 10.0  # the timeline starts this long before the injection
CHECKS_SECONDS = 60.0  # how long a fired fault stays in place for its evidence checks to hold
KAFKA_SUBJECTS = ("topic", "broker", "cluster", "group")


# How often the drills' kdiag looks (the AdminClient fetch runs every cycle), reported beside each rule's `for`.
LIVE_INTERVALS = {"cycle_seconds": CYCLE_SECONDS, "jmx_poll_seconds": JMX_POLL_SECONDS,
                  "signal_window_seconds": SIGNAL_WINDOW_SECONDS}


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived; the drill in progress has been reverted."""


def cluster_causes(rules: Iterable[Rule]) -> set[str]:
    """Causes a drill can be blamed for: the cluster's own, and processes in its log dirs, not this shared host's."""
    return {r.id for r in rules if r.kind == "cause" and (r.each in KAFKA_SUBJECTS or "touches_log_dir" in r.when)}


def alerted_rules(alertmanager: str) -> set[str]:
    """Rules of the drills' active alerts in Alertmanager that carry their summary annotation."""
    try:
        with urllib.request.urlopen(f"{alertmanager}/api/v2/alerts?active=true", timeout=5) as response:
            alerts = json.load(response)
    except (OSError, ValueError):
        return set()
    # A cluster-scope alert has no instance label: whichever daemon reports it, it is the same alert.
    return {a["labels"].get("rule") for a in alerts
            if a["labels"].get("instance", ALERT_INSTANCE) == ALERT_INSTANCE and a.get("annotations", {}).get("summary")}


class Runner:
    """Runs drills one after another over one Monitor; faults are reverted whatever happens."""

    def __init__(self, target: Target | None, timeout: float = 300.0, progress: Callable[[str], None] = print,
                 alertmanager: str = "", serial: bool = False, record: Path | None = None):
        self.target = target
        self.serial = serial
        self.record = record
        self.alertmanager = alertmanager.rstrip("/")
        self.timeout = timeout
        self.progress = progress
        self.interrupted = 0
        self.monitor: Monitor | None = None

    def _live_target(self) -> Target:
        """The cluster of the live drills (there is none when every drill is a replay)."""
        assert self.target is not None, "a live drill needs a target"
        return self.target

    def _started(self) -> Monitor:
        """The monitor, which run() starts before the first live wave."""
        assert self.monitor is not None, "run() starts the monitor before a live wave"
        return self.monitor

    @contextmanager
    def signals_deferred(self) -> Iterator[None]:
        """SIGINT/SIGTERM only note the request; waits act on it, never an injection or a revert half done."""
        def note(signum: int, _frame: types.FrameType | None) -> None:
            self.interrupted = signum
            self.progress(f"signal {signum}: reverting the drill in progress, then stopping")

        old = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)

    def _wait(self, check: Callable[[], bool], timeout: float) -> bool:
        """Poll check each cycle until true (True) or timeout (False); Interrupted once a signal came."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.interrupted:
                raise Interrupted
            if check():
                return True
            time.sleep(CYCLE_SECONDS / 2)
        return False

    def _active_now(self, t: float) -> set[tuple[str, str, str]]:
        """Active diagnoses of the first state at or after t (waits for one)."""
        self._wait(lambda: bool(self._started().since(t)), 120)
        return active_of(self._started().since(t)[0])

    def run(self, drills: list[Drill]) -> list[DrillResult]:
        """Every wave of drills in turn; stops after an interrupted one (its results are the last)."""
        results: list[DrillResult] = []
        with self.signals_deferred():
            try:
                for wave in waves(drills, self.serial):
                    if replay := wave[0].replay:
                        results.append(run_replay(wave[0], replay))
                        continue
                    if self.monitor is None:
                        if leftover := delete_leftover_topics(self._live_target()):
                            self.progress(f"deleted {len(leftover)} drill topic(s) an earlier run left: {', '.join(leftover)}")
                        self.monitor = Monitor(self._live_target(), self.alertmanager, self.record)
                        self.monitor.start()
                    wave_results = [DrillResult(d.name, list(d.expected), rule_for_seconds=rule_for(self.monitor.rules, d),
                                                intervals=dict(LIVE_INTERVALS)) for d in wave]
                    results += wave_results
                    for d in wave:
                        self.progress(f"drill {d.name}: {d.summary}")
                    self._run_wave(wave, wave_results)
                    for r in wave_results:
                        self.progress(f"drill {r.name}: passed" if r.passed else
                                      f"drill {r.name}: FAILED ({'; '.join(r.notes())})")
                    if self.interrupted:
                        raise Interrupted
            except Interrupted:
                pass
            finally:
                if self.monitor:
                    self.monitor.stop()
        return results

    def _run_wave(self, wave: list[Drill], results: list[DrillResult]) -> None:
        """The wave's drills from one baseline, each injected, judged and reverted in its own thread.

        Each drill names the subjects its expected rules fire on: a cause on a (rule, subject) no drill of the wave
        expects is a false attribution of every drill whose fault window it falls in."""
        with ExitStack() as setup:
            ready = []
            for drill, result in zip(wave, results, strict=True):
                target = self._probed(drill, drill.probe, result, setup) if drill.probe else self.target
                if target:
                    ready.append((drill, result, target))
            try:
                baseline = self._baseline(ready)
            except Interrupted:
                for _, result, _ in ready:
                    result.not_injected()
                raise
            go = [(d, r, t) for d, r, t in ready if not r.error]
            owned = accounted([d for d, _, _ in go])
            if len(go) == 1:
                self._inject_and_revert(*go[0], baseline, owned)
                return
            threads = [threading.Thread(target=self._inject_in_thread, args=(*one, baseline, owned),
                                        name=f"drill-{one[0].name}") for one in go]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

    def _inject_in_thread(self, drill: Drill, result: DrillResult, target: Target, baseline: set[tuple[str, str]],
                          owned: Callable[[str, str], bool]) -> None:
        with suppress(Interrupted):  # the run loop sees self.interrupted once the wave is back
            self._inject_and_revert(drill, result, target, baseline, owned)

    def _baseline(self, ready: list[tuple[Drill, DrillResult, Target]]) -> set[tuple[str, str]]:
        """Warm up, wait until no drill's expected rule is active on its subjects; what is active then."""
        m = self._started()
        # Rates need two snapshots and the baseline needs a judged one.
        started = time.time()
        self._wait(lambda: len(m.since(started)) >= 3, 120)
        drills = [d for d, _, _ in ready]

        def clash() -> set[tuple[str, str]]:
            return {(r, s) for r, s, _ in self._active_now(time.time()) if owner(drills)(r, s)}

        if not self._wait(lambda: not clash(), 90):
            active = clash()
            for drill, result, _ in ready:
                if mine := sorted(f"{r} ({s})" for r, s in active if drill.owns(r, s)):
                    result.not_injected(f"baseline: {', '.join(mine)} already active")
        return {(r, s) for r, s, _ in self._active_now(time.time())}

    def _probed(self, drill: Drill, config: ProbeConfig, result: DrillResult, setup: ExitStack) -> Target | None:
        """The target with the drill's probe steady and fed to the monitor until setup closes; None if it is not."""
        try:
            probe = setup.enter_context(probe_running(self._live_target(), config))
        except Exception as e:  # its topic could not be made: nothing to revert
            result.not_injected(f"probe topic {config.topic}: {type(e).__name__}: {e}")
            return None
        self._started().use_probe(probe)
        setup.callback(self._started().use_probe, None)
        self.progress(f"drill {drill.name}: waiting for the probe on {config.topic} to be steady")
        if not self._wait(probe.steady, 180):
            why = probe.health()[1]
            result.not_injected(f"probe on {config.topic} not steady within 180 s" + (f": {why}" if why else ""))
            return None
        return replace(self._live_target(), probe=probe)

    def _inject_and_revert(self, drill: Drill, result: DrillResult, target: Target, baseline: set[tuple[str, str]],
                           owned: Callable[[str, str], bool]) -> None:
        m = self._started()
        causes = cluster_causes(m.rules)
        window_start = time.time()
        stack = ExitStack()
        try:
            assert drill.inject is not None  # a live drill, not a replay
            stack.enter_context(drill.inject(target))
            injected = time.time()
            self.progress(f"drill {drill.name}: injected, waiting for {', '.join(drill.expected)} to fire")

            def rows() -> list[tuple[float, set[tuple[str, str, str]]]]:
                return owned_rows([(s.time, active_of(s)) for s in m.since(injected)], drill)

            # Alerts are watched from the injection on (a loss alert may end before its cause's begins), and the
            # drill is alerted once each expected rule has been seen in Alertmanager and the diagnosis fired.
            # An alert that lives only for the signal window (a loss) can end between two looks at Alertmanager's
            # API: Alertmanager accepting it firing, with its annotations, counts as seen too.
            seen: set[str] = set()

            def look() -> None:
                seen.update(alerted_rules(self.alertmanager))
                if m.pusher:
                    seen.update(r for r, t in m.pusher.accepted.items() if t >= injected)

            def fired() -> bool:
                if self.alertmanager:
                    look()
                return first_time(rows(), drill.expected, ("firing",), injected) is not None

            def all_alerted() -> bool:
                look()
                return set(drill.expected) <= seen

            if self._wait(fired, min(drill.timeout, self.timeout)):
                if self.alertmanager:
                    alerted = self._wait(all_alerted, 120)
                    result.alerted_after(round(time.time() - injected, 1) if alerted else None)
                    if not alerted:
                        result.failed(f"no active alert with a summary in {self.alertmanager} within 120 s")
                # Evidence can trail the firing on a loaded host (a topic's rate needs two admin fetches, and the
                # admin period stretches with its cost): the fault stays in place until the checks hold, or 60 s.
                self._wait(lambda: not failed_checks(drill, m.since(injected)), CHECKS_SECONDS)
        except Interrupted:
            raise
        except Exception as e:  # a failed injection still reverts and reports
            result.failed(f"{type(e).__name__}: {e}")
            injected = time.time()
        finally:
            try:
                stack.close()
                result.revert_done()
            except Exception as e:
                result.failed(f"revert failed: {type(e).__name__}: {e}")
            reverted_at = time.time()
            self.progress(f"drill {drill.name}: reverted, waiting for it to resolve")
            self._finish(drill, result, injected, reverted_at, baseline, causes, window_start, owned)

    def _finish(self, drill: Drill, result: DrillResult, injected: float, reverted_at: float,
                baseline: set[tuple[str, str]], causes: set[str], window_start: float,
                owned: Callable[[str, str], bool]) -> None:
        """Wait for the expected rules to clear (unless interrupted), then fill in the result."""
        m = self._started()

        def cleared() -> bool:
            after = m.since(reverted_at + 0.01)
            return bool(after) and not any(drill.owns(r, s) for r, s, _ in active_of(after[-1]))

        if not self.interrupted:
            with suppress(Interrupted):
                self._wait(cleared, drill.resolve_timeout)
        states = m.since(min(window_start, injected - LEAD_SECONDS))
        rows = [(s.time, active_of(s)) for s in states]
        mine = owned_rows(rows, drill)
        ends = [t for t, active in rows if t > reverted_at and not any(drill.owns(r, s) for r, s, _ in active)]
        fault = [s for s in states if injected <= s.time <= reverted_at]
        result.measured(first_time(mine, drill.expected, ("pending", "firing"), injected),
                        first_time(mine, drill.expected, ("firing",), injected),
                        round(ends[0] - reverted_at, 1) if ends else None,
                        false_attributions(rows, owned, causes, baseline, injected), failed_checks(drill, fault),
                        Timeline.from_states(f"{drill.name}: {drill.summary}", states, drill.expected,
                                             (injected, reverted_at)))


def failed_checks(drill: Drill, fault: list[State]) -> list[str]:
    """The drill's checks that hold in none of the states of its fault."""
    return [what for what, holds in drill.checks.items() if not any(holds(s) for s in fault)]


def run_replay(drill: Drill, recording_dir: Path) -> DrillResult:
    """A host fault the sandbox cannot make: its recording replayed through the same pipeline and report."""
    from kdiag.app.wiring import replay
    from kdiag.recording.recording import Recording

    config = load_config(None)
    if not recording_dir.is_dir():
        return DrillResult(drill.name, list(drill.expected), reverted=True, replayed=str(recording_dir),
                           rule_for_seconds=rule_for(load_rules(config), drill),
                           error=f"recording {recording_dir} not found (it ships with the source tree)")
    states: list[State] = []
    recording = Recording(recording_dir)
    try:
        intervals = {"recording_interval_seconds": recording.interval, "signal_window_seconds": config.signal_window}
        replay(recording, config, on_step=lambda s: states.append(frozen(s)))
    finally:
        recording.close()
    result = DrillResult(drill.name, list(drill.expected), reverted=True, replayed=str(recording_dir),
                         rule_for_seconds=rule_for(load_rules(config), drill), intervals=intervals)
    rows = [(s.time, active_of(s)) for s in states]
    start = states[0].time
    causes = {d.rule.id for s in states for d in s.diagnoses if d.rule.kind == "cause"}
    result.measured(first_time(rows, drill.expected, ("pending", "firing"), start),
                    first_time(rows, drill.expected, ("firing",), start), None,
                    false_attributions(rows, drill.accounts_for, causes, set(), start), [],
                    Timeline.from_states(f"{drill.name}: {drill.summary}", states, drill.expected, None))
    return result
