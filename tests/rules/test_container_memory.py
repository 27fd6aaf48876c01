"""A container's memory limit as a cause (issue 32): broker_page_cache_starved and broker_oom_killed fire on their
recordings, through the real collectors, signals and catalog, and stay quiet on their look-alikes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.paths import FIXTURES

sys.path.insert(0, str(FIXTURES))
from build_recordings import MB, broker, healthy
from tests.rules.test_broker_host_causes import BROKER, Extra, diagnose, recording, write

# A Kubernetes pod's container (cgroup v2, systemd driver): the limit is set on the container's scope.
CONTAINER = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e.slice/cri-containerd-4c2a.scope"
GiB = 2**30


def memory(limit: int, anon: int, file: int, hits_per_second: float, oom_kill_at: float | None = None) -> Extra:
    """The broker's container at this limit, anonymous memory and page cache, reclaiming at the limit this often; with
    oom_kill_at, one process of it OOM-killed at that second."""
    def extra(snap: Path, t: float) -> None:
        write(snap / f"proc/{BROKER}/cgroup", f"0::/{CONTAINER}\n")
        with open(snap / "proc/mounts", "a") as mounts:
            mounts.write("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n")
        base = snap / "sys/fs/cgroup" / CONTAINER
        write(base / "memory.max", f"{limit}\n")
        write(base / "memory.current", f"{anon + file + 4 * MB}\n")
        kills = 2 + int(oom_kill_at is not None and t >= oom_kill_at)  # 2 long ago: not recent
        write(base / "memory.events", f"low 0\nhigh 0\nmax {int(500 + hits_per_second * t)}\n"
              f"oom {kills}\noom_kill {kills}\noom_group_kill 0\n")
        write(base / "memory.stat", f"anon {anon}\nfile {file}\nkernel 4194304\nshmem 0\n")
    return extra


FIRING = {
    # A 2 GiB limit over a 1.5 GiB heap: 0.5 GiB of cache at most, reclaimed 40 times/s, 5 MB/s read from disk.
    "cache-starved": ((memory(2 * GiB, int(1.5 * GiB), int(0.49 * GiB), 40.0),), "broker_page_cache_starved"),
    "oom-killed": ((memory(2 * GiB, int(1.2 * GiB), int(0.2 * GiB), 0.0, oom_kill_at=20.0),),
                   "broker_oom_killed"),
}
QUIET = {
    "limit-with-room": (memory(8 * GiB, int(1.5 * GiB), 2 * GiB, 0.0),),
    # At the limit, but every read is a page cache hit: the limit costs nothing.
    "at-limit-no-disk-reads": (memory(2 * GiB, int(1.5 * GiB), int(0.49 * GiB), 40.0),),
}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("container-memory")
    for name, (extras, _) in FIRING.items():
        recording(out, name, healthy(), *extras)
    recording(out, "limit-with-room", healthy(), *QUIET["limit-with-room"])
    host = healthy()
    host.procs[0] = broker(read_bps=0.0)
    recording(out, "at-limit-no-disk-reads", host, *QUIET["at-limit-no-disk-reads"])
    return out


@pytest.mark.parametrize("name", sorted(FIRING))
def test_each_cause_fires_on_its_recording(recordings: Path, name: str, capsys: pytest.CaptureFixture) -> None:
    found = diagnose(recordings / name, capsys)
    assert [(d["rule"], d["subject"]) for d in found] == [(FIRING[name][1], f"pid {BROKER} java")]
    assert found[0]["state"] == "firing" and found[0]["remediation"]


@pytest.mark.parametrize("name", sorted(QUIET))
def test_a_look_alike_fires_nothing(recordings: Path, name: str, capsys: pytest.CaptureFixture) -> None:
    assert diagnose(recordings / name, capsys) == []


def test_the_starved_broker_is_named_with_its_cgroup_and_cache_room(recordings: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    (d,) = diagnose(recordings / "cache-starved", capsys)
    assert d["evidence"]["memory_cgroup"] == f"/{CONTAINER}"
    assert d["evidence"]["memory_cache_room_bytes"] == 0.5 * GiB
    assert d["evidence"]["read_bytes_per_second"] == pytest.approx(5 * MB, rel=0.05)
    assert json.dumps(d["summary"]).count("cri-containerd-4c2a.scope") == 1
    assert "while its pod 0f1e container 4c2a (cgroup /kubepods.slice/" in d["summary"]


def test_the_oom_kill_names_the_cgroup_where_it_was_counted(recordings: Path, capsys: pytest.CaptureFixture) -> None:
    (d,) = diagnose(recordings / "oom-killed", capsys)
    assert d["evidence"]["memory_oom_cgroup"] == f"/{CONTAINER}" and d["evidence"]["memory_oom_kills_recent"] >= 1
