"""The 3-minute chaos soak (benchmarks/chaos.py): three daemons on a 3-broker lab of this run's own while brokers are
killed and frozen, the cluster is cut off, a JmxTool hangs, hostile process names come and go, configs reload and a
hostile Kafka client forges, floods, deletes and hijacks the election."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests import services
from tests.paths import ROOT

from kdiag.tools.lab.lab import read_lab

pytestmark = [pytest.mark.drills,
              pytest.mark.skipif("not config.getoption('own_lab')",
                                 reason="kills, freezes and cuts off brokers: --own-lab, on a lab of your own")]
EVENTS = {"hostile_processes", "reload_valid", "reload_broken", "jmx_hang", "broker_freeze", "broker_kill", "cluster_cut",
          "hostile_records", "hostile_flood", "coordination_deleted", "group_hijack"}


def test_three_minutes_of_chaos_leave_every_daemon_alive_fresh_and_valid(tmp_path: Path) -> None:
    info = read_lab()
    if not info or info["brokers"] != 3:
        pytest.skip("needs a 3-broker lab of your own: KDIAG_LAB_DIR=DIR kdiag lab up --brokers 3 --base-port P --dir DIR")
    if not shutil.which("promtool"):
        services.unavailable("promtool is not installed: apt-get install prometheus (the exposition is checked with it)")
    out = tmp_path / "chaos.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--duration", "180", "--port", "19861",
                          "--lab-dir", info["dir"], "--json", str(out)], capture_output=True, text=True, timeout=1200)
    print(run.stdout)  # the progress lines and the table, with -s
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert {name for name, n in result["events"].items() if n} == EVENTS, result["events"]
    assert result["promtool"]
    assert result["expositions"] >= 6 and not result["invalid_expositions"], result["invalid_expositions"]
    assert all(result["hostile_seen"]), "the hostile processes never reached /metrics: the check checked nothing"
    hostile = result["hostile_client"]
    assert hostile["forged_shown"] == [], hostile  # a signed fleet never shows a forged diagnosis
    assert hostile["nobody_reported_seconds"] < 40, hostile
    assert hostile["foreign_members_seen"] >= 1 and hostile["refused"].get("bad_mac", 0) >= 1, hostile
    for daemon in result["daemons"]:
        assert daemon["exits"] == [], daemon
        assert daemon["longest_gap_cycles"] <= 2, daemon
        assert 0 < daemon["longest_restart_seconds"] <= 30, daemon  # the hijack restarts every daemon on purpose
        assert daemon["tracebacks"] == [], daemon
    assert run.returncode == 0, run.stdout[-3000:]
