"""Record and replay agree on a host whose log disks hide behind dm-crypt over LVM over md RAID of NVMe partitions,
with multipath, bonds and an interface that went away."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from kdiag.config.settings import Config
from kdiag.app.wiring import host_collectors
from kdiag.runtime.pipeline import CollectorSet, Pipeline, State
from kdiag.recording.recording import Recording, record
from kdiag.core.root import Root
from tests.paths import FIXTURES

HOST = FIXTURES / "storage-host"
START, INTERVAL, SNAPSHOTS = 1_700_000_000.0, 5.0, 3
LOG_DISKS = {"dm-1", "dm-0", "md0", "nvme0n1", "nvme1n1", "nvme2n1"}


class Clock:
    """A clock that only moves when record() sleeps."""

    def __init__(self) -> None:
        self.t = START

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += INTERVAL


def fixture_root(clock) -> Root:
    return Root(HOST / "proc", HOST / "sys", clock)


def collectors() -> CollectorSet:
    """Every host collector but statvfs, which asks this machine (not the fixture) about the mount points' space."""
    return CollectorSet([c for c in host_collectors(Config()) if c.name != "statvfs"])


def states(roots) -> list[State]:
    """The states of a fresh pipeline over the roots, in order."""
    pipeline = Pipeline(collectors(), [], "storage-host")
    return [pipeline.step(root) for root in roots]


@pytest.fixture(scope="module", params=["rec", "rec.tar.gz"])
def recording(tmp_path_factory, request) -> Path:
    clock = Clock()
    return record(tmp_path_factory.mktemp("rec") / request.param, (SNAPSHOTS - 1) * INTERVAL, INTERVAL,
                  collectors(), fixture_root(clock), progress=lambda m: None, sleep=clock.sleep)


def links(recording: Path) -> dict[str, str]:
    """Every symbolic link of the recording's first snapshot, by its path inside it, and where it points."""
    if recording.is_file():
        with tarfile.open(recording) as archive:
            return {m.name.split("/", 2)[2]: m.linkname for m in archive.getmembers()
                    if m.issym() and m.name.split("/")[1] == "0000"}
    return {str(p.relative_to(recording / "0000")): os.readlink(p)
            for p in (recording / "0000").rglob("*") if p.is_symlink()}


def test_slaves_are_kept_as_links_inside_the_recording(recording):
    kept = links(recording)
    slaves = "sys/devices/virtual/block/md0/slaves"
    assert sorted(k.rpartition("/")[2] for k in kept if k.startswith(slaves + "/")) == ["nvme0n1p1", "nvme1n1p1"]
    for name in ("nvme0n1p1", "nvme1n1p1"):
        assert kept[f"{slaves}/{name}"] == os.readlink(HOST / "sys/block/md0/slaves" / name)
    assert kept["sys/block/dm-1"] == "../devices/virtual/block/dm-1"


def test_every_signal_of_the_replay_equals_the_live_one(recording):
    clock = Clock()
    live = []
    for _ in range(SNAPSHOTS):
        live.append(fixture_root(lambda t=clock.t: t))
        clock.sleep(INTERVAL)
    rec = Recording(recording)
    try:
        replayed = states(rec.roots())
    finally:
        rec.close()
    lived = states(live)
    assert [s.time for s in replayed] == [s.time for s in lived]
    for got, want in zip(replayed, lived, strict=True):
        assert {n: h.success for n, h in got.health.items()} == {n: h.success for n, h in want.health.items()}
        assert sorted(got.samples) == sorted(want.samples)
        assert got.signals == want.signals
    disks = lived[-1].signals["disk"]
    assert {d for d, s in disks.items() if s.get("holds_kafka_logs") == 1.0} == LOG_DISKS
