"""Golden-file checks for collectors: compare format_samples output, rewrite it with UPDATE_GOLDEN=1."""

from __future__ import annotations

import os

from kdiag.core.root import Root
from kdiag.core.sample import Sample, format_samples
from tests.paths import FIXTURES, TESTS

GOLDEN = TESTS / "golden"


def fixture_root(proc: str, sys: str | None = None) -> Root:
    """A Root over tests/fixtures/<proc>/proc and the sys/ tree of fixture `sys` (default: the same)."""
    return Root(proc=FIXTURES / proc / "proc", sys=FIXTURES / (sys or proc) / "sys")


def assert_golden(name: str, samples: list[Sample]) -> None:
    """format_samples(samples) equals tests/golden/<name>.txt."""
    path = GOLDEN / f"{name}.txt"
    text = format_samples(samples)
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; rerun with UPDATE_GOLDEN=1 if the change is intended"
