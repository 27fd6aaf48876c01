"""One diagnosis cycle: run collectors over a Root, add to the history, derive signals, evaluate rules."""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from kdiag.collectors import Collector
from kdiag.collectors.registry import REGISTERED
from kdiag.analysis.catalog import Rule
from kdiag.analysis.engine import Diagnosis, Engine, EngineState
from kdiag.core.history import History
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.analysis.scope import cluster_of, diagnosis_json
from kdiag.kafka.coordination import Reporting
from kdiag.kafka.coordination_records import Member
from kdiag.analysis.signals import Signals
from kdiag.analysis.subject_kinds import SignalCache
from kdiag.families.process import PROCESS_BROKER_REFUSED
from kdiag.runtime.blindness import blinded

log = logging.getLogger(__name__)

# A collector run's outcome: ("samples", its samples) or ("error", the exception), and its thread's CPU seconds.
Answer = tuple[str, Any, float]


@dataclass(frozen=True)
class Health:
    """How one collector did on its last run."""

    success: bool = False
    duration: float = 0.0
    last_success: float | None = None
    error: str = ""
    cpu: float = 0.0  # CPU seconds of the last run: its thread's, and its child process's (Collector.child_cpu_seconds)
    # The same, summed over every run that completed since start; None where it is not measured (the coordination and
    # probe services, whose health the daemon makes).
    cpu_total: float | None = None


class CollectorTimeout(Exception):
    """A collector still running at its deadline."""


class _Worker:
    """A long-lived daemon thread running one collector at a time (a thread per run would be thousands an hour)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Collector, Root, queue.SimpleQueue[Answer]] | None] = queue.SimpleQueue()
        self._running = threading.Event()
        threading.Thread(target=self._serve, name="collector-worker", daemon=True).start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            collector, root, answer = job
            start = time.thread_time()
            try:
                result: tuple[str, Any] = ("samples", collector.collect(root))
            except Exception as e:
                result = ("error", e)
            self._running.clear()  # before answering: the next run must never find it busy
            answer.put((*result, time.thread_time() - start))

    def busy(self) -> bool:
        """Whether a run that timed out is still going."""
        return self._running.is_set()

    def stop(self) -> None:
        """End the thread once its current run is over."""
        self._jobs.put(None)

    def run(self, collector: Collector, root: Root, timeout: float) -> tuple[list[Sample], float]:
        """The collector's samples within timeout and this thread's CPU seconds for them; CollectorTimeout past it
        (the run goes on, busy() says so)."""
        answer: queue.SimpleQueue[Answer] = queue.SimpleQueue()
        self._running.set()
        self._jobs.put((collector, root, answer))
        try:
            kind, value, cpu = answer.get(timeout=timeout)
        except queue.Empty:
            raise CollectorTimeout(f"timed out after {timeout:g}s") from None
        if kind == "error":
            raise value
        return value, cpu


class CollectorSet:
    """Runs a group of collectors, each isolated: one failing or hanging source never stops the others.

    With a timeout, the collectors run one after another in a worker thread; a run past its deadline counts as failed
    (a blocked read cannot be interrupted), keeps that thread, and its collector is not started again while it goes.
    """

    def __init__(self, collectors: list[Collector]):
        self.collectors = collectors
        self.health: dict[str, Health] = {c.name: Health(cpu_total=0.0) for c in collectors}
        self._worker: _Worker | None = None
        self._hung: dict[str, _Worker] = {}  # a collector's run past its deadline, and the worker it holds

    def close(self) -> None:
        """Stop the processes collectors keep (JmxTool readers, the AdminClient's worker)."""
        for c in self.collectors:
            c.close()

    def run(self, root: Root, timeout: float | None = None) -> list[Sample]:
        """Samples from every collector that succeeded, each within timeout (None: in this thread, without one);
        failures are logged once per failure streak."""
        samples: list[Sample] = []
        for c in self.collectors:
            health = self.health[c.name]
            start = time.perf_counter()
            try:
                got, cpu = self._collect(c, root, timeout)
            except Exception as e:  # any failure of one source only degrades that source
                message = str(e) if isinstance(e, CollectorTimeout) else f"{type(e).__name__}: {e}"
                if health.success or not health.error:
                    log.warning("collector %s failed: %s", c.name, message)
                self.health[c.name] = replace(health, success=False, error=message,
                                              duration=time.perf_counter() - start)
                continue
            cost = cpu + c.child_cpu_seconds
            self.health[c.name] = Health(True, time.perf_counter() - start, root.now(), "", cost,
                                          (health.cpu_total or 0.0) + cost)
            samples.extend(got)
        return samples

    def _collect(self, c: Collector, root: Root, timeout: float | None) -> tuple[list[Sample], float]:
        """The collector's samples and the CPU seconds of the thread that ran it."""
        if timeout is None:
            start = time.thread_time()
            return c.collect(root), time.thread_time() - start
        hung = self._hung.get(c.name)
        if hung is not None:
            if hung.busy():
                raise CollectorTimeout(f"timed out after {timeout:g}s (that run still hangs)")
            self._hung.pop(c.name).stop()
        if self._worker is None:
            self._worker = _Worker()
        worker = self._worker
        try:
            return worker.run(c, root, timeout)
        except CollectorTimeout:
            # The worker stays with the hung run; the other collectors get a new one.
            self._hung[c.name], self._worker = worker, None
            raise



@dataclass
class State:
    """What one cycle produced: the published view served by the exporter and the CLI."""

    host: str
    time: float
    samples: list[Sample]
    health: dict[str, Health]
    signals: dict[str, dict[str, Signals]]
    diagnoses: list[Diagnosis]
    resolved: list[Diagnosis] = field(default_factory=list)
    cluster: str = ""  # the `cluster` label (kdiag.analysis.scope.cluster_of); empty while unknown
    local_broker: int | None = None
    reporting: Reporting = field(default_factory=Reporting)  # the daemon's coordinator's word, added after the step
    # The lists samples was joined from, in order (a carried batch is the same list while its job did not run again):
    # the exporter renders each once. Empty: samples is the only one.
    sources: list[list[Sample]] = field(default_factory=list, repr=False)
    blinded: dict[str, list[str]] = field(default_factory=dict)  # failing collector -> the rules it blinds

    def to_json(self) -> dict[str, Any]:
        """The contract shape of `kdiag diagnose --format json` and /api/diagnoses (plus scope fields)."""
        me = Member(self.host, self.local_broker)
        coordination = ({"coordination": {"reporting": self.reporting.reporting, "why": self.reporting.why,
                                          "authenticated": self.reporting.authenticated}} if self.reporting.why else {})
        refused = {"refused_brokers": r} if (r := self.refused_brokers()) else {}
        failing = {"failing_sources": f} if (f := self.failing_sources()) else {}
        return {"host": self.host, "time": self.time, **coordination, **refused, **failing,
                "diagnoses": [diagnosis_json(d, self.cluster, self.reporting, me) for d in self.diagnoses]}

    def failing_sources(self) -> list[dict[str, Any]]:
        """Each collector failing this cycle: its error and the rules it blinds (they cannot hold while it fails)."""
        return [{"collector": name, "error": h.error, "blinds": self.blinded.get(name, [])}
                for name, h in sorted(self.health.items()) if not h.success]

    def refused_brokers(self) -> list[dict[str, Any]]:
        """The kafka.Kafka processes the trust rule refused this cycle: pid, comm and why."""
        out = []
        for s in self.samples:
            if s.name == PROCESS_BROKER_REFUSED.name:
                labels = dict(s.labels)
                out.append({"pid": int(labels.get("pid", "0")), "comm": labels.get("comm", ""),
                            "why": labels.get("reason", "")})
        return out


class Pipeline:
    """Collectors -> history -> signals -> rules, one step per snapshot."""

    def __init__(self, collectors: CollectorSet, rules: list[Rule], host: str,
                 history_seconds: float = 900.0, window: float = 30.0, cluster_name: str = "",
                 local_broker: int | None = None, collector_timeout: float | None = None):
        self.collectors = collectors
        self.collector_timeout = collector_timeout
        self.local_broker = local_broker
        self.engine = Engine(rules, local_broker)
        self.judged = EngineState()  # the engine's last judgement, which its next evaluation goes on from
        self.cluster_name = cluster_name
        self.cluster = cluster_name
        self.history = History(history_seconds)
        self.signals = SignalCache()
        self.host = host
        self.window = window
        self._hold = False

    def restart_history(self) -> None:
        """Forget the history (a replay looping back to its start) but keep the diagnoses' state."""
        self.history = History(self.history.retention)
        self._hold = True

    def restore(self, diagnoses: list[Diagnosis]) -> None:
        """Start from diagnoses kept across a restart; the first step judges nothing (it has no rates yet)."""
        self.judged = EngineState({(d.rule.id, d.subject): d for d in diagnoses})
        self._hold = bool(diagnoses)

    def adopt(self, judged: EngineState) -> None:
        """Go on from a judgement the cluster-scope handover changed (kdiag.runtime.handover)."""
        self.judged = judged

    def reloaded(self, rules: list[Rule], window: float, collector_timeout: float | None) -> Pipeline:
        """A pipeline over this one's collectors and history judging a new catalog; diagnoses whose rule it still has
        keep their state. Only the new one steps from then on."""
        new = Pipeline(self.collectors, rules, self.host, self.history.retention, window, self.cluster_name,
                       self.local_broker, collector_timeout)
        new._go_on_from(self)
        return new

    def _go_on_from(self, before: Pipeline) -> None:
        by_id = {r.id: r for r in self.engine.rules}
        self.history, self.signals, self.cluster, self._hold = before.history, before.signals, before.cluster, before._hold
        self.judged = EngineState({key: replace(d, rule=by_id[key[0]])
                                   for key, d in before.judged.active.items() if key[0] in by_id})

    def step(self, root: Root, extra: list[list[Sample]] | None = None,
             extra_health: dict[str, Health] | None = None, carried: list[list[Sample]] | None = None) -> State:
        """Collect at root.now() (plus lists of samples gathered elsewhere, and batches of carried ones an earlier step
        already added), then derive signals and diagnoses."""
        t = root.now()
        new = [self.collectors.run(root, self.collector_timeout), *(extra or ())]
        fresh = [s for source in new for s in source]
        sources = [*new, *(carried or ())]
        samples = fresh + [s for batch in carried or () for s in batch]
        self.cluster = cluster_of(samples, self.cluster_name, self.cluster)
        self.history.add_batches(t, new, carried or ())
        signals = self.signals.compute(self.history, self.window)
        if self._hold:
            # One snapshot gives no rates: judging on it would resolve everything that needs them.
            self._hold = False
            self.judged = EngineState(self.judged.active)
        else:
            self.judged = self.engine.evaluate(self.judged, t, signals)
        health = {**self.collectors.health, **(extra_health or {})}
        return State(self.host, t, samples, health, signals, self.judged.current(), list(self.judged.resolved),
                     self.cluster, self.local_broker, sources=sources, blinded=self.blinded(health, signals))

    def blinded(self, health: dict[str, Health], signals: dict[str, dict[str, Signals]]) -> dict[str, list[str]]:
        """Per failing collector, the rules it blinds (kdiag.runtime.blindness)."""
        families = {name: r.families for name, r in REGISTERED.items()} | {
            c.name: c.families for c in self.collectors.collectors}
        failing = {name: families.get(name, ()) for name, h in health.items() if not h.success}
        return blinded(self.engine.rules, failing, self.signals.reads(), signals) if failing else {}
