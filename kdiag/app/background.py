"""Kafka collectors on their own schedule (AdminClient, JMX), their last good samples merged into each cycle."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from kdiag.collectors import Collector
from kdiag.core import malloc
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.runtime.pipeline import CollectorSet, Health

# An adaptive background run taking t seconds waits at least STRETCH * t (at most MAX_STRETCH intervals) for the next,
# and one costing c CPU seconds (its child process's included) at least c / CPU_BUDGET: a quarter percent of one core.
STRETCH = 20.0
CPU_BUDGET = 0.0025
# 6 x 15 s keeps two fetches inside the 120 s over which lag growth is measured (kafka/lag.py GROWTH_SECONDS); at
# 100,000 partitions and 10,000 groups a fetch costs the daemon and its AdminClient process about 2.5 s of CPU.
MAX_STRETCH = 6.0

T = TypeVar("T")


class Background:
    """Collectors on their own schedule (AdminClient, JMX): each cycle merges their last good samples."""

    def __init__(self, collectors: list[Collector], root: Root, every: float, timeout: float, adaptive: bool = False,
                 trims: bool = False):
        self.collectors = CollectorSet(collectors)
        self.trims = trims  # give the heap's free pages back after each run (a fetch of tens of MB)
        self.timeout = timeout
        self.root = root
        self.every = every
        self.adaptive = adaptive
        self.period = every  # every, or longer (adaptive) while runs take long
        self.slowdown = 1.0  # the period is at least slowdown x every (slow_down)
        self._next = 0.0
        self._runs = 0
        self._samples: list[Sample] = []
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def run(self) -> None:
        """Collect now unless a slow last run stretched the period; a failed collector's samples are dropped, not kept."""
        start = time.monotonic()
        if self.adaptive and start < self._next:
            return
        if not any(c.ready() for c in self.collectors.collectors):
            with self._lock:  # nothing new to collect (no JmxTool row since): the job is alive, its samples stay
                self._at = start
            return
        samples = self.collectors.run(self.root, self.timeout)
        self._runs += 1
        # A fetch that takes long or costs much (tens of thousands of partitions, a thousand groups) spaces out the
        # next ones so Kafka work stays a small share of the host; the job still fires every `every` and skips until
        # then. The first run is left out: it pays for connecting and reading every config. A failed run is retried
        # at the pace.
        if self.adaptive and self._runs > 1:
            took = time.monotonic() - start
            health = self.collectors.health.values()
            cost = sum(h.cpu for h in health)
            floor = self.slowdown * self.every
            stretched = min(max(floor, took * STRETCH, cost / CPU_BUDGET), max(MAX_STRETCH * self.every, floor))
            self.period = stretched if all(h.success for h in health) else self.every
        self._next = start + self.period - min(1.0, self.every / 2)
        with self._lock:
            self._samples, self._at = samples, time.monotonic()
        if self.trims:
            del samples  # the last run's samples, and what made them, are free now
            malloc.trim()

    def slow_down(self, factor: float) -> None:
        """Run at most every factor x every from the next run on (1: the usual pace); a factor lower than before runs
        the job at its next tick."""
        if factor < self.slowdown:
            self._next = 0.0
        self.slowdown = factor

    def retime(self, timeout: float) -> None:
        """Give each run this deadline from the next on (a reload)."""
        self.timeout = timeout

    def latest(self) -> tuple[list[Sample], dict[str, Health]]:
        """The last samples and the health of each collector; none, and failed, when the job has not run for long."""
        with self._lock:
            samples, health = self._samples, dict(self.collectors.health)
            age = time.monotonic() - self._at
        if age <= 2 * self.period + self.timeout:
            return samples, health
        stale = f"stale: its job last completed {age:.0f}s ago"
        return [], {k: dataclasses.replace(h, success=False, error=stale) for k, h in health.items()}


class Asked(Generic[T]):
    """A child process asked on its own job each cycle: the cycle takes the last answer and never waits for one."""

    def __init__(self, ask: Callable[[], T]):
        self.ask = ask
        self._answer: T | None = None
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def run(self) -> None:
        """Ask now (the asking times out by itself when the child hangs or dies)."""
        answer = self.ask()
        with self._lock:
            self._answer, self._at = answer, time.monotonic()

    def fresh(self, within: float) -> tuple[T | None, float]:
        """The last answer if it is at most `within` seconds old, else None (also before the first); and its age."""
        with self._lock:
            answer, age = self._answer, time.monotonic() - self._at
        return (answer if age <= within else None), age
