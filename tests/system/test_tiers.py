"""The unit tier's guard: a unit test that reaches the network, a subprocess or the live host fails loudly."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiers import TIERS, UnitTierViolation
from tests.paths import FIXTURES


def test_this_test_is_in_the_unit_tier(request):
    assert [m.name for m in request.node.iter_markers() if m.name in TIERS] == ["unit"]


@pytest.mark.parametrize("reach", [
    lambda: socket.socket().bind(("127.0.0.1", 0)),
    lambda: socket.create_connection(("127.0.0.1", 9092), timeout=1),
    lambda: subprocess.run([sys.executable, "-c", "pass"]),
    lambda: os.fork(),
    lambda: Path("/proc/self/stat").read_text(),
    lambda: Path("/sys/class/net").iterdir().__next__(),
    lambda: os.listdir("/proc"),
    lambda: os.open("/proc/meminfo", os.O_RDONLY),
], ids=["bind", "connect", "subprocess", "fork", "read-proc", "iterdir-sys", "listdir-proc", "os-open-proc"])
def test_a_unit_test_cannot_reach_sockets_processes_or_the_live_host(reach):
    with pytest.raises(UnitTierViolation, match="mark it `integration`"):
        reach()


def test_fixture_copies_of_proc_still_read():
    assert any(FIXTURES.rglob("meminfo"))
    assert next(p for p in FIXTURES.rglob("meminfo") if p.is_file()).read_text()


@pytest.mark.integration
def test_an_integration_test_may_reach_the_live_host():
    assert Path("/proc/self/stat").read_text()
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0
