"""The recordings and fixture trees are derived data: scripts/make-recordings remakes them and --check names any drift."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.paths import ROOT as REPO

pytestmark = pytest.mark.integration

SCRIPT = REPO / "scripts" / "make-recordings"
FIXTURE_TREES = ("bonded-host", "storage-host", "procs-t0", "procs-t1")


def make_recordings(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the committed recordings and fixture trees, laid out as in the repository."""
    shutil.copytree(REPO / "tests" / "recordings", tmp_path / "tests" / "recordings", symlinks=True)
    for name in FIXTURE_TREES:
        shutil.copytree(REPO / "tests" / "fixtures" / name, tmp_path / "tests" / "fixtures" / name, symlinks=True)
    return tmp_path


def test_the_committed_trees_are_what_the_generators_make() -> None:
    result = make_recordings("--check")
    assert result.returncode == 0, result.stderr
    assert "13 trees as generated" in result.stdout


def test_every_kind_of_drift_is_named_and_regenerating_undoes_it(checkout: Path) -> None:
    recordings, fixtures = checkout / "tests" / "recordings", checkout / "tests" / "fixtures"
    (recordings / "swap-in-use" / "0003" / "proc" / "meminfo").write_text("MemTotal: 1 kB\n")
    (recordings / "nic-irq-on-cpu0" / "0000" / "proc" / "vmstat").unlink()
    (recordings / "healthy-busy-broker" / "0001" / "proc" / "loadavg.orig").write_text("")
    cwd = fixtures / "procs-t0" / "proc" / "3100" / "cwd"
    cwd.unlink()
    cwd.symlink_to("/tmp")
    os.chmod(fixtures / "storage-host" / "proc" / "mounts", 0o755)
    (recordings / "hand-made").mkdir()
    (recordings / "real-host-metadata-walk.tar.gz").unlink()

    result = make_recordings("--check", "--root", checkout)

    assert result.returncode == 1
    for line in ("differs  tests/recordings/swap-in-use/0003/proc/meminfo (content or mode)",
                 "missing  tests/recordings/nic-irq-on-cpu0/0000/proc/vmstat",
                 "extra    tests/recordings/healthy-busy-broker/0001/proc/loadavg.orig",
                 "differs  tests/fixtures/procs-t0/proc/3100/cwd (link target)",
                 "differs  tests/fixtures/storage-host/proc/mounts (content or mode)",
                 "extra    tests/recordings/hand-made (neither generated nor a listed capture)",
                 "missing  tests/recordings/real-host-metadata-walk.tar.gz (a capture)"):
        assert line in result.stderr
    assert "7 paths differ" in result.stderr

    assert make_recordings("--root", checkout).returncode == 0  # regenerating in place undoes the drift in the trees
    shutil.rmtree(recordings / "hand-made")
    shutil.copy2(REPO / "tests" / "recordings" / "real-host-metadata-walk.tar.gz", recordings)
    result = make_recordings("--check", "--root", checkout)
    assert result.returncode == 0, result.stderr
