"""Bounded polling for tests against real services."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def wait_until(check: Callable[[], Any], timeout: float, what: str, logs: list[Path] = ()) -> Any:
    """Poll check() until it returns something truthy; fail after timeout seconds with the processes' log tails."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            if result := check():
                return result
        except (OSError, ValueError) as e:  # not listening yet, or a half-written answer
            last_error = e
        time.sleep(0.5)
    tails = "\n".join(f"--- {p.name}:\n{p.read_text(errors='replace')[-2000:]}" for p in logs if p.exists())
    pytest.fail(f"timed out after {timeout:g}s waiting for {what} (last error: {last_error})\n{tails}")


def timed_wait(check: Callable[[], Any], timeout: float, what: str) -> float:
    """wait_until, returning the seconds it took."""
    t0 = time.monotonic()
    wait_until(check, timeout, what)
    return time.monotonic() - t0
