"""Collectors: one module per source, each a pure parse function plus a thin class over a Root.

A collector has a `name`, the `families` it emits (declared in kdiag/families) and `collect(root) -> list[Sample]`,
which raises on failure; the caller records success, duration and the error. Collectors subclass `Collector` for the
defaults of the optional parts: `ready()`, `close()` and `child_cpu_seconds`.
"""

from __future__ import annotations

from typing import Protocol

from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.family import Family, FamilyPattern


class Collector(Protocol):
    """What the scheduler needs from a collector."""

    name: str
    families: tuple[Family | FamilyPattern, ...]
    child_cpu_seconds: float = 0.0  # what the last collect cost a child process the collector keeps

    def collect(self, root: Root) -> list[Sample]:
        """Samples from this source at root.now(); raises when the source cannot be read."""
        ...

    def ready(self) -> bool:
        """Whether a collect now would find anything new (a JmxTool row since the last one)."""
        return True

    def close(self) -> None:
        """Stop what the collector keeps running (a child process, a JmxTool reader)."""
        return None  # a body of only a docstring would make it abstract to mypy
