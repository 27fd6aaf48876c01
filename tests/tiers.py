"""The test tiers: which tier a test is in, and the guard that keeps the unit tier off the network, subprocesses and
the live host."""

from __future__ import annotations

import io
import os
import socket
import subprocess

import pytest

# Fastest first: the order scripts/test runs them in. `matrix` is outside it (scripts/version-matrix runs it).
TIERS = ("unit", "integration", "kafka", "e2e", "drills", "matrix")
# A test that asks for one of these fixtures is in that fixture's tier.
FIXTURE_TIERS = {"kafka_lab": "kafka", "secure_lab": "kafka"}
LIVE_HOST = ("/proc", "/sys")


def tier_of(item: pytest.Item) -> str:
    """The item's one tier: its explicit tier mark (on the test, its class or its module's `pytestmark`), else by the
    fixtures it uses, else unit."""
    marked = {m.name for m in item.iter_markers() if m.name in TIERS}
    if len(marked) > 1:
        raise pytest.UsageError(f"{item.nodeid} is marked with more than one tier: {sorted(marked)}")
    if marked:
        return marked.pop()
    by_fixture = {FIXTURE_TIERS[f] for f in item.fixturenames if f in FIXTURE_TIERS}
    if by_fixture:
        return by_fixture.pop()
    return "unit"


class UnitTierViolation(AssertionError):
    """A unit-tier test reached the network, a subprocess or the live host: mark it integration or use fixtures."""


def _refuse(what: str):
    def refused(*args, **kwargs):
        raise UnitTierViolation(f"a unit test {what}: mark it `integration` (tests/tiers.py) or use fixtures")
    return refused


def _live_host(path) -> bool:
    if isinstance(path, int):
        return False
    absolute = os.path.abspath(os.fsdecode(os.fspath(path)))
    return any(absolute == top or absolute.startswith(top + "/") for top in LIVE_HOST)


def _guard_paths(original, what: str):
    def guarded(path, *args, **kwargs):
        if _live_host(path):
            raise UnitTierViolation(f"a unit test {what} {path}: mark it `integration` (tests/tiers.py) or use fixtures")
        return original(path, *args, **kwargs)
    return guarded


def guard_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make sockets' connect/bind, process creation and opening or listing /proc and /sys raise."""
    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, _refuse(f"called socket.{name}"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("started a subprocess"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"called os.{name}"))
    for module, name in ((io, "open"), (os, "open"), (os, "listdir"), (os, "scandir"), (os, "stat"), (os, "lstat")):
        monkeypatch.setattr(module, name, _guard_paths(getattr(module, name), f"used os/io.{name} on"))
    monkeypatch.setattr("builtins.open", _guard_paths(open, "opened"))
