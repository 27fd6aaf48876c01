"""statvfs collector: the live host's filesystems, the same numbers from a recording, nothing from an old one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kdiag.collectors.host.mounts import parse_mounts
from kdiag.collectors.host.statvfs import StatvfsCollector, samples_from_statvfs
from kdiag.core.root import Root, SnapshotRoot, TeeRoot

pytestmark = pytest.mark.integration


def test_live_filesystems_match_statvfs():
    samples = {(s.name, dict(s.labels)["mountpoint"]): s.value for s in StatvfsCollector().collect(Root())}
    mounts = [m for m in parse_mounts(Path("/proc/mounts").read_text()) if m.device.startswith("/dev/")]
    assert mounts, "this host has a block-device filesystem"
    st = os.statvfs(mounts[0].mountpoint)
    assert samples[("kdiag_filesystem_size_bytes", mounts[0].mountpoint)] == st.f_blocks * st.f_frsize
    assert 0 < samples[("kdiag_filesystem_avail_bytes", mounts[0].mountpoint)] <= st.f_blocks * st.f_frsize


def test_a_recorded_snapshot_replays_the_same_samples(tmp_path: Path):
    tee = TeeRoot(Root(), tmp_path / "0000")
    live = StatvfsCollector().collect(tee)
    (tmp_path / "0000" / "meta.json").write_text(json.dumps({"time": tee.now()}))
    (tmp_path / "0000" / "kafka.json").write_text(json.dumps({"version": 1, "sources": tee.kafka_state}))
    assert StatvfsCollector().collect(SnapshotRoot(tmp_path / "0000")) == live


def test_a_recording_made_before_statvfs_gives_no_samples_and_no_failure(tmp_path: Path):
    snap = tmp_path / "0000"
    (snap / "proc").mkdir(parents=True)
    (snap / "proc" / "mounts").write_text("/dev/sdb1 /data xfs rw,noatime 0 0\n")
    (snap / "meta.json").write_text(json.dumps({"time": 1764430000.0}))
    assert StatvfsCollector().collect(SnapshotRoot(snap)) == []


def test_mountpoints_not_in_mounts_and_malformed_entries_are_ignored():
    mounts = {"/data": ("/dev/sdb1", "xfs")}
    state = {"/data": [100, 40], "/gone": [1, 1], "/bad": "x"}
    assert [(s.name, s.value) for s in samples_from_statvfs(state, mounts)] == [
        ("kdiag_filesystem_size_bytes", 100.0), ("kdiag_filesystem_avail_bytes", 40.0)]
    assert samples_from_statvfs(["not", "a", "dict"], mounts) == []
