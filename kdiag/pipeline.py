"""One diagnosis cycle: run collectors over a Root, add to the history, derive signals, evaluate rules."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kdiag.collectors import Collector
from kdiag.engine import Diagnosis, Engine, Rule
from kdiag.history import History
from kdiag.root import Root
from kdiag.sample import Sample
from kdiag.signals import Signals, compute_signals

log = logging.getLogger(__name__)


@dataclass
class Health:
    """How one collector did on its last run."""

    success: bool = False
    duration: float = 0.0
    last_success: float | None = None
    error: str = ""


class CollectorSet:
    """Runs a group of collectors, each isolated: one failing source never stops the others."""

    def __init__(self, collectors: list[Collector]):
        self.collectors = collectors
        self.health: dict[str, Health] = {c.name: Health() for c in collectors}

    def run(self, root: Root) -> list[Sample]:
        """Samples from every collector that succeeded; failures are logged once per failure streak."""
        samples: list[Sample] = []
        for c in self.collectors:
            health = self.health[c.name]
            start = time.perf_counter()
            try:
                got = c.collect(root)
            except Exception as e:  # any failure of one source only degrades that source
                health.duration = time.perf_counter() - start
                message = f"{type(e).__name__}: {e}"
                if health.success or not health.error:
                    log.warning("collector %s failed: %s", c.name, message)
                health.success, health.error = False, message
                continue
            health.duration = time.perf_counter() - start
            health.success, health.error, health.last_success = True, "", root.now()
            samples.extend(got)
        return samples

    def help(self) -> dict[str, str]:
        """HELP text of every metric these collectors emit."""
        return {name: text for c in self.collectors for name, text in c.help.items()}


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

    def to_json(self) -> dict[str, Any]:
        """The contract shape of `kdiag diagnose --format json` and /api/diagnoses."""
        return {"host": self.host, "time": self.time, "diagnoses": [d.to_json() for d in self.diagnoses]}


class Pipeline:
    """Collectors -> history -> signals -> rules, one step per snapshot."""

    def __init__(self, collectors: CollectorSet, rules: list[Rule], host: str,
                 history_seconds: float = 900.0, window: float = 30.0):
        self.collectors = collectors
        self.engine = Engine(rules)
        self.history = History(history_seconds)
        self.host = host
        self.window = window
        self._hold = False

    def restart_history(self) -> None:
        """Forget the history (a replay looping back to its start) but keep the diagnoses' state."""
        self.history = History(self.history.retention)
        self._hold = True

    def step(self, root: Root, extra: list[Sample] | None = None,
             extra_health: dict[str, Health] | None = None) -> State:
        """Collect at root.now() (plus samples gathered elsewhere), then derive signals and diagnoses."""
        t = root.now()
        samples = self.collectors.run(root) + list(extra or [])
        self.history.add(t, samples)
        signals = compute_signals(self.history, self.window)
        if self._hold:
            # One snapshot gives no rates: judging on it would resolve everything that needs them.
            self._hold = False
            diagnoses = self.engine.current()
            self.engine.resolved = []
        else:
            diagnoses = self.engine.evaluate(t, signals)
        health = {**self.collectors.health, **(extra_health or {})}
        return State(self.host, t, samples, {k: Health(**vars(v)) for k, v in health.items()}, signals,
                     diagnoses, self.engine.resolved)
