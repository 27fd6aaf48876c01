"""The stall drills' faults on a process of the test's own: stopped part of every second, or under a CPU quota, and
whole again afterwards."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from tests.waiting import wait_until

from kdiag.tools.drill.faults import cgroup_of, cpu_controller, cpu_quota, duty_cycle_stall

pytestmark = pytest.mark.drills


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


@pytest.fixture
def busy():
    process = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    yield process.pid
    process.kill()
    process.wait(10)


def test_a_duty_cycle_stall_stops_the_process_part_of_each_second_and_leaves_it_running(busy):
    seen = set()
    with duty_cycle_stall(busy, 0.5):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and seen != {"T", "R"}:
            seen.add(state(busy))
            time.sleep(0.05)
    assert seen == {"T", "R"}
    wait_until(lambda: state(busy) != "T", 5, "the process running again")


def test_a_cpu_quota_throttles_the_process_and_is_removed(busy):
    if cpu_controller() is None:
        pytest.skip("no cgroup cpu controller on this host")
    version, _ = cpu_controller()
    home = cgroup_of(busy, version)
    with cpu_quota(busy, 0.1) as group:
        wait_until(lambda: "nr_throttled" in (text := (group / "cpu.stat").read_text())
                   and int(text.split("nr_throttled")[1].split()[0]) > 0, 30, "the process throttled")
    assert cgroup_of(busy, version) == home and not group.exists()
