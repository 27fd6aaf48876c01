"""The state file as root meets a hostile state_dir: planted symlinks, others' write access, corrupt files, two daemons."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.promstack import free_port
from tests.app.test_daemon_lifecycle import Kdiag, fast_recording, write_config
from tests.waiting import wait_until
from tests.paths import ROOT

from kdiag.analysis import statefile
from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.config.settings import ConfigError
from kdiag.analysis.engine import Diagnosis
from kdiag.analysis.statefile import FILE_NAME, StateFile

pytestmark = pytest.mark.integration

RULES = load_catalog([default_rules_dir()])
ROOT_ONLY = "root-only secret\n"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: chown to another user")


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700)
    return path


def state(host: str, entries: int = 1, now: float | None = None) -> str:
    """A valid state file's text with `entries` firing swap_in_use diagnoses."""
    now = now or time.time()
    rule = next(r for r in RULES if r.id == "swap_in_use")
    diagnoses = [Diagnosis(rule, f"host{i}", now - 100, "firing", "swap in use", {"swap_used_bytes": 1e9, "note": "x" * 200})
                 for i in range(entries)]
    return json.dumps(statefile.encode(host, now - 10, diagnoses))


def load_within(sf: StateFile, seconds: float = 20.0) -> list[Diagnosis]:
    """sf.load in a thread: a test fails, not hangs, when it blocks (a FIFO) or raises."""
    got: list = []
    thread = threading.Thread(target=lambda: got.append(sf.load(RULES, time.time())), daemon=True)
    thread.start()
    thread.join(seconds)
    assert got, "load() blocked or raised"
    return got[0]


def test_planted_symlinks_are_neither_written_nor_read_through(tmp_path, caplog):
    target = tmp_path / "shadow"
    target.write_text(ROOT_ONLY)
    target.chmod(0o600)
    foreign = tmp_path / "foreign-state.json"
    foreign_text = state("h")
    foreign.write_text(foreign_text)
    d = private_dir(tmp_path / "state")
    (d / f".{FILE_NAME}.tmp").symlink_to(target)  # the temp name kdiag used to write through
    (d / FILE_NAME).symlink_to(foreign)
    sf = StateFile(d / FILE_NAME, "h")
    with caplog.at_level(logging.WARNING, logger="kdiag.analysis.statefile"):
        assert load_within(sf) == []
    assert "symlink" in caplog.text
    sf.save([], force=True)
    assert target.read_text() == ROOT_ONLY and foreign.read_text() == foreign_text
    assert not (d / FILE_NAME).is_symlink()
    assert json.loads((d / FILE_NAME).read_text())["diagnoses"] == []
    assert {p.name for p in d.iterdir()} == {FILE_NAME, "lock"}
    sf.close()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702, 0o1777])
def test_a_state_dir_others_can_write_in_is_refused(tmp_path, mode):
    d = private_dir(tmp_path / "state")
    d.chmod(mode)
    with pytest.raises(ConfigError, match=rf"state_dir '{d}' is not kdiag's alone: {d} can be written by others.*chmod go-w"):
        StateFile(d / FILE_NAME, "h")
    assert list(d.iterdir()) == []


def test_kdiag_run_on_a_state_dir_others_can_write_in_exits_2(tmp_path):
    d = private_dir(tmp_path / "state")
    d.chmod(0o777)
    config = write_config(tmp_path / "kdiag.yaml", state_dir=str(d))
    run = subprocess.run([sys.executable, "-m", "kdiag", "run", "--no-discover", "--listen", f"127.0.0.1:{free_port()}",
                          "--from", str(fast_recording("swap-in-use", tmp_path / "swap")), "--config", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and f"kdiag: state_dir '{d}' is not kdiag's alone" in run.stderr, run.stderr
    assert list(d.iterdir()) == []


@as_root
def test_a_state_dir_of_another_user_or_under_one_is_refused(tmp_path):
    d = private_dir(tmp_path / "state")
    os.chown(d, 65534, 65534)
    with pytest.raises(ConfigError, match=rf"state_dir '{d}' is not kdiag's alone: {d} belongs to uid 65534"):
        StateFile(d / FILE_NAME, "h")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    below = private_dir(theirs / "state")
    os.chown(theirs, 65534, 65534)  # its owner could rename `state` away and put a symlink in its place
    with pytest.raises(ConfigError, match=rf"state_dir '{below}' is not kdiag's alone: {theirs} belongs to uid 65534"):
        StateFile(below / FILE_NAME, "h")
    assert list(d.iterdir()) == list(below.iterdir()) == []


def test_a_symlinked_state_dir_is_refused_and_a_missing_one_made_private(tmp_path):
    real = private_dir(tmp_path / "real")
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(ConfigError, match=rf"state_dir '{tmp_path}/link' is a symlink: set state_dir to a directory"):
        StateFile(tmp_path / "link" / FILE_NAME, "h")
    assert list(real.iterdir()) == []
    sf = StateFile(tmp_path / "new" / FILE_NAME, "h")
    sf.save([], force=True)
    assert (tmp_path / "new").stat().st_mode & 0o7777 == 0o700
    assert (tmp_path / "new" / FILE_NAME).stat().st_mode & 0o7777 == 0o600
    sf.close()


NESTED_EVIDENCE = json.dumps({**json.loads(state("h")), "diagnoses": [
    {**json.loads(state("h"))["diagnoses"][0], "evidence": {"x": json.loads("[" * 900 + "]" * 900)}}]})


@pytest.mark.parametrize("content, reason", [
    ("[" * 200_000, "is corrupt (nested too deep)"),
    (NESTED_EVIDENCE, "not restored: malformed entry"),
    (None, "unreadable (not a regular file)"),  # a FIFO: reading it would wait for a writer forever
    (" " * (33 << 20), "unreadable (larger than the 32 MiB"),
])
def test_a_corrupt_state_file_is_dropped_with_its_reason(tmp_path, caplog, content, reason):
    d = private_dir(tmp_path / "state")
    if content is None:
        os.mkfifo(d / FILE_NAME)
    else:
        (d / FILE_NAME).write_text(content)
    sf = StateFile(d / FILE_NAME, "h")
    with caplog.at_level(logging.WARNING, logger="kdiag.analysis.statefile"):
        assert load_within(sf) == []
    assert reason in caplog.text
    sf.close()


def test_a_daemon_starts_past_a_deeply_nested_state_file(tmp_path):
    recording = fast_recording("swap-in-use", tmp_path / "swap")
    d = private_dir(tmp_path / "state")
    (d / FILE_NAME).write_text("[" * 200_000)
    k = Kdiag(tmp_path, "--from", str(recording), "--config", str(write_config(tmp_path / "kdiag.yaml", state_dir=str(d))))
    try:
        k.wait(lambda: k.get("/healthz")[0] == 200, "serving")
        assert "state file" in k.text() and "is corrupt (nested too deep): starting without it" in k.text()
        k.terminate()
    finally:
        k.close()


def test_a_second_daemon_on_the_same_state_dir_is_refused(tmp_path):
    recording = fast_recording("swap-in-use", tmp_path / "swap")
    d = tmp_path / "state"
    config = write_config(tmp_path / "kdiag.yaml", state_dir=str(d))
    first = Kdiag(tmp_path, "--from", str(recording), "--config", str(config))
    try:
        first.wait(lambda: first.get("/healthz")[0] == 200, "the first daemon serving")
        second = subprocess.run([sys.executable, "-m", "kdiag", "run", "--no-discover", "--listen", f"127.0.0.1:{free_port()}",
                                 "--from", str(recording), "--config", str(config)],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1, second.stderr
        assert f"kdiag: state_dir '{d}' is in use by another kdiag (pid {first.proc.pid})" in second.stderr
        assert (d / "lock").read_text() == f"{first.proc.pid}\n"
        first.alive()
        first.terminate()
    finally:
        first.close()


WRITER = """
import sys, time
from pathlib import Path
from tests.analysis.test_statefile import RULES, Diagnosis
from kdiag.analysis.statefile import StateFile
try:
    sf = StateFile(Path(sys.argv[1]), "h")
except Exception as e:
    print(e)
    sys.exit(3)
print("writing", flush=True)
rule = RULES[0]
diagnoses = [Diagnosis(rule, f"subject-{i}", time.time(), "firing", "s" * 100, {"v": i}) for i in range(300)]
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    sf.save(diagnoses, force=True)
"""

READER = """
import json, sys, time
ok = bad = 0
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    try:
        with open(sys.argv[1], "rb") as f:
            json.loads(f.read())
        ok += 1
    except FileNotFoundError:
        pass
    except ValueError:
        bad += 1
print(ok, bad)
"""


def test_two_writers_and_readers_in_processes_never_see_a_torn_file(tmp_path):
    d = private_dir(tmp_path / "state")
    path = d / FILE_NAME
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    seconds = "6"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), seconds], stdout=subprocess.PIPE, text=True,
                                env=env) for _ in range(2)]
    wait_until(path.exists, 60, "a first save")
    readers = [subprocess.Popen([sys.executable, "-c", READER, str(path), seconds], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    reads = [tuple(map(int, r.communicate(timeout=120)[0].split())) for r in readers]
    outcomes = sorted((w.wait(120), w.stdout.read()) for w in writers)
    assert sum(ok for ok, _ in reads) > 100 and sum(bad for _, bad in reads) == 0, reads
    holder = next(w.pid for w in writers if w.returncode == 0)
    assert [rc for rc, _ in outcomes] == [0, 3], outcomes
    assert f"state_dir '{d}' is in use by another kdiag (pid {holder})" in outcomes[1][1]


def test_a_second_kdiag_racing_the_first_still_names_its_pid(tmp_path):
    d = private_dir(tmp_path / "state")
    held = os.open(d / statefile.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # the holder has the lock but has not written its pid yet
    writer = threading.Timer(0.1, os.pwrite, (held, b"4242\n", 0))
    writer.start()
    try:
        with pytest.raises(statefile.StateDirBusy, match=r"in use by another kdiag \(pid 4242\)"):
            StateFile(d / FILE_NAME, "h")
    finally:
        writer.join()
        os.close(held)
