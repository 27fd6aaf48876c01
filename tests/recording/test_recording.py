"""Recordings: write one over the live machine and over a fixture tree, read them back, dir and .tar.gz."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tarfile
import time
from pathlib import Path

import pytest

from kdiag.config.settings import Config
from kdiag.app.wiring import host_collectors, replay
from kdiag.serve.exporter import render_metrics
from kdiag.runtime.pipeline import CollectorSet, Pipeline
from kdiag.recording.recording import FORMAT, VERSION, Recording, RecordingError, record
from kdiag.core.archive import KAFKA_STATE_VERSION
from kdiag.core.root import Root, SnapshotRoot
from tests.paths import FIXTURES

FIXTURE = FIXTURES / "host-vm2"
# Files of the contract that every host has and the collectors read.
PROC_FILES = ("stat", "interrupts", "softirqs", "net/dev", "net/snmp", "net/netstat", "net/softnet_stat", "diskstats",
              "vmstat", "meminfo", "loadavg", "mounts", "sys/vm/swappiness", "sys/fs/file-nr")


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> tuple[Path, list[str], list[float]]:
    """A two-snapshot recording of this machine, its progress lines and the sleeps it asked for."""
    out = tmp_path_factory.mktemp("live") / "rec"
    progress: list[str] = []
    sleeps: list[float] = []
    before = time.time()
    assert record(out, 1.0, 1.0, CollectorSet(host_collectors(Config())), Root(), progress=progress.append,
                  sleep=sleeps.append) == out
    assert before <= json.loads((out / "0000" / "meta.json").read_text())["time"] <= time.time()
    return out, progress, sleeps


class Clock:
    """A clock that only moves when record() sleeps: snapshot times are exact."""

    def __init__(self, t: float = 1_700_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += 5.0


def record_fixture(out: Path) -> Path:
    """A two-snapshot recording of the host-vm2 fixture tree, snapshots 5 s apart."""
    clock = Clock()
    return record(out, 5.0, 5.0, CollectorSet(host_collectors(Config())), Root(FIXTURE / "proc", FIXTURE / "sys", clock),
                  progress=lambda m: None, sleep=clock.sleep)


@pytest.fixture(scope="module")
def from_fixture(tmp_path_factory) -> Path:
    """A two-snapshot recording of the host-vm2 fixture tree."""
    return record_fixture(tmp_path_factory.mktemp("fixture") / "rec")


def test_manifest_and_meta_shapes(live):
    out, progress, sleeps = live
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest == {"format": FORMAT, "version": VERSION, "host": socket.gethostname(), "interval_s": 1.0}
    assert (FORMAT, VERSION) == ("kdiag-recording", 1)
    assert sorted(p.name for p in out.iterdir()) == ["0000", "0001", "manifest.json"]
    times = []
    for snap in ("0000", "0001"):
        meta = json.loads((out / snap / "meta.json").read_text())
        assert set(meta) == {"time"} and isinstance(meta["time"], float)
        times.append(meta["time"])
    assert times[0] < times[1]
    assert len(progress) == 2 and progress[0].startswith("snapshot 1/2 taken")
    assert len(sleeps) == 1 and 0.0 <= sleeps[0] <= 1.0  # one wait, between the two snapshots


def test_contract_files_are_copied(live):
    out, _, _ = live
    for snap in ("0000", "0001"):
        for rel in PROC_FILES:
            assert (out / snap / "proc" / rel).is_file(), f"{snap}/proc/{rel}"
        assert (out / snap / "sys" / "class" / "net").is_dir()


@pytest.mark.integration
def test_live_copies_parse_like_the_live_files(live):
    out, _, _ = live
    # Counters move between reads; the structure of a verbatim copy does not.
    for rel in ("stat", "interrupts", "net/dev", "diskstats", "meminfo"):
        copied = (out / "0000" / "proc" / rel).read_text().splitlines()
        now = Path("/proc", rel).read_text().splitlines()
        assert [line.split()[0] for line in copied if line.split()] == [line.split()[0] for line in now if line.split()], rel
    assert (out / "0000" / "proc" / "sys/vm/swappiness").read_text() == Path("/proc/sys/vm/swappiness").read_text()


@pytest.mark.integration
def test_sysfs_symlinks_preserved_and_read_back_identically(live):
    out, _, _ = live
    live_root = Root()
    for snap in ("0000", "0001"):
        snap_root = SnapshotRoot(out / snap)
        recorded = snap_root.listdir("sys", "class/net")
        assert set(recorded) == set(live_root.listdir("sys", "class/net"))  # lo too: the listing is kept whole
        assert recorded
        for name in set(recorded) - {"lo"}:
            link = out / snap / "sys" / "class" / "net" / name
            assert link.is_symlink(), link
            assert os.readlink(link) == os.readlink(f"/sys/class/net/{name}")
            assert snap_root.readlink("sys", f"class/net/{name}") == live_root.readlink("sys", f"class/net/{name}")
            # Reading through the link lands on the copied file under devices/.
            assert snap_root.read_sys(f"class/net/{name}/mtu") == live_root.read_sys(f"class/net/{name}/mtu")
            assert snap_root.exists("sys", f"class/net/{name}/operstate")


def test_process_links_copied_as_symlinks(live):
    out, _, _ = live
    procs = [p for p in (out / "0000" / "proc").iterdir() if p.name.isdigit() and (p / "limits").is_file()]
    assert procs, "no per-process details recorded"
    # A process can exit between its limits and its cwd being read: this host runs other work meanwhile.
    assert any((p / "cwd").is_symlink() for p in procs)
    for p in procs:
        for rel in ("stat", "io", "cmdline"):
            assert (p / rel).is_file(), p / rel
        assert (p / "fd").is_dir()
        assert all(fd.is_symlink() for fd in (p / "fd").iterdir())
        if (p / "cwd").is_symlink():
            assert SnapshotRoot(out / "0000").readlink("proc", f"{p.name}/cwd") == os.readlink(p / "cwd")


def test_fixture_files_copied_verbatim(from_fixture):
    for snap in ("0000", "0001"):
        for rel in PROC_FILES:
            if (FIXTURE / "proc" / rel).exists():
                assert (from_fixture / snap / "proc" / rel).read_bytes() == (FIXTURE / "proc" / rel).read_bytes(), rel
        assert (from_fixture / snap / "proc/stat").exists()
        for rel in ("class/net/eth0/speed", "class/net/eth0/mtu", "class/net/eth0/operstate"):
            assert (from_fixture / snap / "sys" / rel).read_bytes() == (FIXTURE / "sys" / rel).read_bytes(), rel
    times = [json.loads((from_fixture / s / "meta.json").read_text())["time"] for s in ("0000", "0001")]
    assert times == [1_700_000_000.0, 1_700_000_005.0]


def test_fixture_device_link_preserved(from_fixture):
    link = from_fixture / "0000" / "sys" / "class" / "net" / "eth0" / "device"
    if not link.is_symlink():
        pytest.skip("the interrupts collector did not follow the device link of this fixture")
    assert os.readlink(link) == os.readlink(FIXTURE / "sys/class/net/eth0/device")


def test_recording_reads_back_in_order_with_offsets(from_fixture):
    rec = Recording(from_fixture)
    assert rec.host == socket.gethostname()
    assert rec.interval == 5.0
    assert [s.name for s in rec.snapshots] == ["0000", "0001"]
    assert [r.now() for r in rec.roots()] == [1_700_000_000.0, 1_700_000_005.0]
    assert [r.now() for r in rec.roots(time_offset=100.0)] == [1_700_000_100.0, 1_700_000_105.0]
    assert next(rec.roots()).read_proc("stat") == (FIXTURE / "proc/stat").read_text()


def test_snapshots_in_lexical_order_other_dirs_ignored(tmp_path, from_fixture):
    d = tmp_path / "rec"
    d.mkdir()
    for name, t in (("b", 20.0), ("a", 10.0), ("c", 30.0)):
        shutil.copytree(from_fixture / "0000", d / name, symlinks=True)
        (d / name / "meta.json").write_text(json.dumps({"time": t}))
    (d / "notes").mkdir()
    rec = Recording(d)
    assert [s.name for s in rec.snapshots] == ["a", "b", "c"]
    assert [r.now() for r in rec.roots()] == [10.0, 20.0, 30.0]


def test_missing_manifest_still_reads(tmp_path, from_fixture):
    d = tmp_path / "nomanifest"
    shutil.copytree(from_fixture, d, symlinks=True)
    (d / "manifest.json").unlink()
    rec = Recording(d)
    assert rec.manifest == {}
    assert rec.host == "nomanifest"
    assert rec.interval == 5.0  # from the snapshot times
    state = replay(rec, Config())
    assert state.host == "nomanifest"
    assert state.time == 1_700_000_005.0


def tar_contents_at_top(src: Path, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        for child in sorted(src.iterdir()):
            tar.add(child, arcname=child.name)
    return out


def tar_single_dir(src: Path, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        tar.add(src, arcname="some-recording")
    return out


@pytest.mark.parametrize("layout", [tar_contents_at_top, tar_single_dir])
def test_tar_gz_layouts_read(tmp_path, live, layout):
    src, _, _ = live
    rec = Recording(layout(src, tmp_path / "rec.tar.gz"))
    try:
        assert rec.host == socket.gethostname()
        assert rec.interval == 1.0
        assert [s.name for s in rec.snapshots] == ["0000", "0001"]
        for root, snap in zip(rec.roots(), ("0000", "0001"), strict=True):
            assert root.read_proc("stat") == (src / snap / "proc/stat").read_text()
            for name in set(root.listdir("sys", "class/net")) - {"lo"}:  # lo is listed, its files not read
                assert root.readlink("sys", f"class/net/{name}") == os.readlink(src / snap / "sys/class/net" / name)
                assert root.read_sys(f"class/net/{name}/mtu") == (src / snap / "sys/class/net" / name / "mtu").read_text()
        extracted = rec.directory
    finally:
        rec.close()
    assert not extracted.exists()


def test_record_writes_tar_gz(tmp_path):
    out = record_fixture(tmp_path / "rec.tar.gz")
    assert out.is_file() and tarfile.is_tarfile(out)
    with tarfile.open(out) as tar:
        top = {n.split("/")[0] for n in tar.getnames()}
    assert top == {"rec"}  # one top-level directory
    rec = Recording(out)
    try:
        assert [r.now() for r in rec.roots()] == [1_700_000_000.0, 1_700_000_005.0]
        assert next(rec.roots()).read_proc("meminfo") == (FIXTURE / "proc/meminfo").read_text()
        assert rec.manifest["format"] == FORMAT
    finally:
        rec.close()


@pytest.mark.integration
def test_snapshot_missing_a_file_only_fails_that_collector(tmp_path, live):
    src, _, _ = live
    d = tmp_path / "rec"
    shutil.copytree(src, d, symlinks=True)
    (d / "0001" / "proc" / "meminfo").unlink()
    rec = Recording(d)
    collectors = CollectorSet(host_collectors(Config()))
    pipeline = Pipeline(collectors, [], rec.host)
    first, last = (pipeline.step(root) for root in rec.roots())
    assert first.health["meminfo"].success
    assert not last.health["meminfo"].success
    assert "meminfo" in last.health["meminfo"].error
    assert last.health["meminfo"].last_success == first.time
    for name, h in first.health.items():
        if name != "meminfo":
            assert last.health[name].success == h.success, (name, last.health[name].error)
    assert last.health["stat"].success and last.health["netdev"].success
    # The memory signals are absent for this snapshot, the others are there.
    host = last.signals["host"]["host"]
    assert "memory_available_bytes" not in host and "swap_used_bytes" not in host
    assert "cpu_count" in host
    assert "memory_available_bytes" in first.signals["host"]["host"]
    assert not any(s.name.startswith("kdiag_memory_") for s in last.samples)
    text = render_metrics(last).decode()
    assert 'kdiag_collector_success{collector="meminfo"} 0.0' in text
    assert 'kdiag_collector_success{collector="stat"} 1.0' in text


def test_record_into_non_empty_directory_fails(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(RecordingError, match=rf"{tmp_path}: not empty"):
        record(tmp_path, 1.0, 1.0, CollectorSet([]), Root(FIXTURE / "proc", FIXTURE / "sys", Clock()),
               progress=lambda m: None, sleep=lambda s: None)


def test_errors_name_the_path(tmp_path, from_fixture):
    with pytest.raises(RecordingError, match=rf"{tmp_path / 'absent'}: no such recording"):
        Recording(tmp_path / "absent")

    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"this is not gzip")
    with pytest.raises(RecordingError, match=rf"{garbage}: not a readable .tar.gz recording"):
        Recording(garbage)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RecordingError, match=rf"{empty}: no snapshots"):
        Recording(empty)

    other = tmp_path / "other"
    shutil.copytree(from_fixture, other, symlinks=True)
    (other / "manifest.json").write_text(json.dumps({"format": "something-else", "version": 1}))
    with pytest.raises(RecordingError, match=rf"{other / 'manifest.json'}: format is 'something-else'"):
        Recording(other)


def test_corrupt_manifest_is_a_recording_error(tmp_path, from_fixture):
    d = tmp_path / "corrupt"
    shutil.copytree(from_fixture, d, symlinks=True)
    (d / "manifest.json").write_text("{not json")
    with pytest.raises(RecordingError, match=str(d / "manifest.json")):
        Recording(d)


def test_broker_open_fd_count_replays_when_its_links_were_not_followed(tmp_path):
    from kdiag.collectors.host.processes import ProcessesCollector

    fixture = FIXTURES / "procs-t0"
    live_root = Root(fixture / "proc", fixture / "sys")
    # Log dirs are discovered on the first snapshot only: later ones list the broker's fds without reading them.
    out = record(tmp_path / "rec", 10, 5, CollectorSet([ProcessesCollector()]), live_root,
                 progress=lambda _: None, sleep=lambda _: None)
    expected = len(os.listdir(fixture / "proc" / "2000" / "fd"))
    collector = ProcessesCollector()
    for root in Recording(out).roots():
        fds = {dict(s.labels)["pid"]: s.value for s in collector.collect(root) if s.name == "kdiag_process_open_fds"}
        assert fds["2000"] == expected


@pytest.mark.parametrize("meta", ["", "{not json", '{"taken": 1}', '{"time": "noon"}', "[1]"])
def test_unreadable_meta_json_is_a_recording_error_naming_it(tmp_path, from_fixture, meta):
    d = tmp_path / "rec"
    shutil.copytree(from_fixture, d, symlinks=True)
    (d / "0001" / "meta.json").write_text(meta)
    with pytest.raises(RecordingError, match=rf'{d / "0001" / "meta.json"}: expected {{"time": <epoch seconds>}}'):
        Recording(d)


def test_unreadable_kafka_json_fails_only_that_snapshots_kafka_collector(tmp_path, from_fixture):
    d = tmp_path / "rec"
    shutil.copytree(from_fixture, d, symlinks=True)
    admin = json.loads((FIXTURES / "kafka" / "admin-state.json").read_text())
    (d / "0000" / "kafka.json").write_text(json.dumps({"version": KAFKA_STATE_VERSION, "sources": {"admin": admin}}))
    (d / "0001" / "kafka.json").write_text('{"version": 1, "sources": {"admin": ')  # cut short
    recording = Recording(d)
    assert recording.kafka_sources() == {"admin"}
    state = replay(recording, Config())
    assert not state.health["kafka_admin"].success
    assert str(d / "0001" / "kafka.json") in state.health["kafka_admin"].error
    assert state.health["stat"].success and state.signals["cpu"]
