"""The drills on a `kdiag lab up --containers` lab of the test's own (issue 32): each broker a container (uid 1001,
its own namespaces, a cgroup with limits), kdiag on the host reading its JMX in its network namespace; forced-fsync,
broker-throttled and container-memory are each named, reverted, and named by their own rule only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdiag.tools.lab import containers, lab

pytestmark = pytest.mark.drills
BASE = 33392  # ports and a subnet apart from every other lab of the run
DRILLS = ["forced-fsync", "broker-throttled", "container-memory"]


@pytest.fixture(scope="module")
def container_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("--containers needs root")
    missing = [t for t in (*containers.TOOLS, "nsenter", "java", "mvn") if not shutil.which(t)]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    d = tmp_path_factory.mktemp("lab-containers-drills")
    with lab.locked(d):
        lab.up(d, brokers=3, base_port=BASE, containers={"memory": containers.MEMORY, "cpus": containers.CPUS})
    try:
        yield d
    finally:
        lab.down(d, purge=True)


def test_the_container_drills_are_named_and_reverted(container_lab: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "kdiag", "drill", "run", *DRILLS, "--serial", "--json"],
                         capture_output=True, text=True, timeout=1500, env={**os.environ, "KDIAG_LAB_DIR": str(container_lab)})
    results = json.loads(run.stdout)
    print(json.dumps(results, indent=1))  # the timings, for the log
    assert [r["name"] for r in results] == DRILLS, run.stderr
    for r in results:
        assert r["passed"] and r["detected"] and r["reverted"] and r["false_attributions"] == [], r
    assert run.returncode == 0, run.stderr
    for n in range(1, 4):
        assert containers.memory_limit(BASE, n) == containers.MEMORY  # container-memory put the limit back
