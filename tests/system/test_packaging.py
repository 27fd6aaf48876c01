"""The systemd unit and the Dockerfile: valid, bounded, and what the unit's sandbox leaves kdiag is enough to run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.paths import ROOT

pytestmark = pytest.mark.integration

UNIT = ROOT / "systemd" / "kdiag.service"


def unit_settings() -> dict[str, list[str]]:
    """Each Key= of the unit with its values, in order."""
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_the_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that ExecStart exists; kdiag is not installed at /usr/local/bin here.
    unit = tmp_path / "kdiag.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/kdiag", "/bin/true"))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "kdiag.service" not in done.stderr, done.stderr


def test_the_unit_bounds_kdiag_and_blocks_writes_to_other_processes() -> None:
    settings = unit_settings()
    assert settings["MemoryMax"] and settings["TasksMax"]
    assert "/proc" in settings["ReadOnlyPaths"]
    assert "~process_vm_readv process_vm_writev" in settings["SystemCallFilter"]
    for text in (UNIT.read_text(), (ROOT / "docs" / "DEPLOY.md").read_text(), (ROOT / "Dockerfile").read_text()):
        assert "jmxquery" not in text


def test_the_image_has_a_jre_a_healthcheck_and_a_non_root_run() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "jre-headless" in dockerfile and "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    assert "--user 0" not in dockerfile and "--security-opt no-new-privileges" in dockerfile


def with_proc_read_only(command: str) -> subprocess.CompletedProcess:
    """command in a private mount namespace whose /proc is remounted read-only, as ReadOnlyPaths=/proc leaves it."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare")
    if subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("no mount namespaces here")
    script = f"mount --make-rprivate / && mount -o remount,bind,ro /proc && {command}"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_kdiag_runs_with_proc_read_only_as_the_unit_mounts_it() -> None:
    done = with_proc_read_only(f"{sys.executable} -m kdiag diagnose --duration 2s --step 1s --format json")
    assert done.returncode == 0, done.stderr
    assert "diagnoses" in json.loads(done.stdout)
    # And on such a /proc no process's memory can be opened for writing, even by root.
    done = with_proc_read_only(f"{sys.executable} -c \"open('/proc/self/mem', 'r+b')\"")
    assert done.returncode != 0 and "Read-only file system" in done.stderr, done.stderr
