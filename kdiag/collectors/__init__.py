"""Collectors: one module per source, each a pure parse function plus a thin class over a Root.

A collector has a `name`, a `help` dict (metric name -> HELP text) and `collect(root) -> list[Sample]`,
which raises on failure; the caller records success, duration and the error.
"""

from __future__ import annotations

from typing import Protocol

from kdiag.core.root import Root
from kdiag.core.sample import Sample


class Collector(Protocol):
    """What the scheduler needs from a collector."""

    name: str
    help: dict[str, str]

    def collect(self, root: Root) -> list[Sample]:
        """Samples from this source at root.now(); raises when the source cannot be read."""
        ...
