"""Why a broker is slow, seen from its host (issue 21 items 2 and 5): each cause fires on its recording, through the
real collectors, signals and catalog, and stays quiet on a healthy look-alike."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.paths import FIXTURES

sys.path.insert(0, str(FIXTURES))
from build_recordings import HZ, Host, healthy, write_recording

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Diagnosis
from kdiag.cli.main import main

BROKER = 2000  # build_recordings' broker pid
CGROUP = "system.slice/kafka.service"
Extra = Callable[[Path, float], None]  # writes more files into a snapshot directory at t seconds


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def steal(share: float) -> Extra:
    """Every CPU's steal column growing at `share` of a second per second."""
    def extra(snap: Path, t: float) -> None:
        lines = []
        for line in (snap / "proc/stat").read_text().splitlines():
            fields = line.split()
            if fields[0][:3] == "cpu" and fields[0][3:].isdigit():  # kdiag reads the per-CPU lines only
                fields[8] = str(int(1000 + share * HZ * t))
            lines.append(" ".join(fields))
        (snap / "proc/stat").write_text("\n".join(lines) + "\n")
    return extra


def quota(cores: float, throttled_share: float, stopped_per_second: float) -> Extra:
    """The broker in a systemd service with CPUQuota (cgroup v2): 10 periods/s, this share of them throttled."""
    def extra(snap: Path, t: float) -> None:
        write(snap / f"proc/{BROKER}/cgroup", f"0::/{CGROUP}\n")
        with open(snap / "proc/mounts", "a") as mounts:
            mounts.write("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n")
        base = snap / "sys/fs/cgroup"
        write(base / "system.slice/cpu.max", "max 100000\n")
        write(base / "system.slice/cpu.stat", "usage_usec 1\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")
        write(base / CGROUP / "cpu.max", f"{int(cores * 100000)} 100000\n")
        write(base / CGROUP / "cpu.stat", f"usage_usec {int(9e9 + 1e6 * t)}\nuser_usec 1\nsystem_usec 1\n"
              f"nr_periods {int(5000 + 10 * t)}\nnr_throttled {int(300 + 10 * throttled_share * t)}\n"
              f"throttled_usec {int(7e6 + 1e6 * stopped_per_second * t)}\nnr_bursts 0\nburst_usec 0\n")
    return extra


def threads(wait_per_second: float, blocked: int) -> Extra:
    """The broker's four threads waiting for a CPU this many seconds per second in all, `blocked` of them in D."""
    def extra(snap: Path, t: float) -> None:
        stat = (snap / f"proc/{BROKER}/stat").read_text()
        for k, tid in enumerate(range(BROKER, BROKER + 4)):
            wait = int(1e9 * (5 + wait_per_second / 4 * t))
            write(snap / f"proc/{BROKER}/task/{tid}/schedstat", f"{int(1e9 * (20 + 0.6 * t))} {wait} {int(1000 + t)}\n")
            state = "D" if k < blocked else "S"
            write(snap / f"proc/{BROKER}/task/{tid}/stat", stat.replace(f"{BROKER} (java) S", f"{tid} (java) {state}", 1))
    return extra


def journal(commit_seconds: float, commits_per_second: float) -> Extra:
    """ext4's journal of /data (on sdb1: build_recordings' log dirs) with this average commit time."""
    def extra(snap: Path, t: float) -> None:
        (snap / "proc/mounts").write_text((snap / "proc/mounts").read_text().replace("/data xfs", "/data ext4"))
        write(snap / "proc/fs/jbd2/sdb1-8/info",
              f"{int(2000 + commits_per_second * t)} transactions (12 requested), each up to 8192 blocks\naverage: \n"
              "  0ms waiting for transaction\n  0ms request delay\n  4990ms running transaction\n"
              "  3ms transaction was being locked\n  210ms flushing data (in ordered mode)\n  90ms logging transaction\n"
              f"  {int(commit_seconds * 1e6)}us average transaction commit time\n  70 handles per transaction\n"
              "  9 blocks per transaction\n  11 logged blocks per transaction\n")
    return extra


def smartctl_polled(since_boot: int = 0, every: float = 15.0) -> Extra:
    """Both disks' SCSI ioerr_cnt stepping together each time smartctl polls (60 s live; 15 s fits this recording)."""
    def extra(snap: Path, t: float) -> None:
        for disk in ("sda", "sdb"):
            write(snap / f"sys/block/{disk}/device/ioerr_cnt", f"{since_boot + int(t // every):#x}\n")
    return extra


def kernel_logged(at: float, name: str) -> Extra:
    """The kernel log records of tests/fixtures/kmsg/<name>, read in the snapshot taken at `at` seconds."""
    def extra(snap: Path, t: float) -> None:
        if t == at:
            write(snap / "kmsg", (FIXTURES / "kmsg" / name).read_text())
    return extra


def recording(out: Path, name: str, host: Host, *extras: Extra) -> Path:
    top = write_recording(name, host, out)
    for snap in sorted(p for p in top.iterdir() if p.is_dir()):
        t = json.loads((snap / "meta.json").read_text())["time"] - json.loads(
            (top / "0000/meta.json").read_text())["time"]
        for extra in extras:
            extra(snap, t)
    return top


def diagnose(path: Path, capsys: pytest.CaptureFixture) -> list[dict]:
    assert main(["diagnose", "--from", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["diagnoses"]


FIRING: dict[str, tuple[Host, tuple[Extra, ...], list[tuple[str, str]]]] = {
    "vm-steal": (healthy(), (steal(0.25),), [("cpu_steal_high", "host")]),
    "cpu-quota": (healthy(), (quota(2.0, 0.4, 0.3),), [("broker_cpu_throttled", f"pid {BROKER} java")]),
    # Throttling shows as run-queue wait too: named once, as the quota.
    "cpu-quota-and-its-wait": (healthy(), (quota(2.0, 0.4, 0.3), threads(3.2, 0)),
                               [("broker_cpu_throttled", f"pid {BROKER} java")]),
    "journal-slow": (healthy(), (journal(0.9, 0.2),), [("log_journal_busy", "sdb")]),
    "disk-errors": (healthy(), (smartctl_polled(), kernel_logged(20.0, "sdb-medium-error.txt")),
                    [("log_disk_errors", "sdb")]),
    # Issue 21 item 5: an affinity script put every queue of eth0 on cpu5.
    "nic-irq-cpu5": (healthy(cpu_busy=0.05, nic_irq_cpus=(5,), softirq_by_cpu={5: 0.9}),
                     (), [("nic_irq_single_core", "eth0"), ("softirq_core_saturated", "cpu5")]),
}
QUIET: dict[str, tuple[Host, tuple[Extra, ...]]] = {
    "vm-little-steal": (healthy(), (steal(0.02),)),
    "cpu-quota-unused": (healthy(), (quota(8.0, 0.0, 0.0),)),
    "threads-busy-not-waiting": (healthy(), (threads(0.3, 0),)),
    # Issue 35 item 3: a loaded host is not a broker problem unless the broker's latency moved; these recordings carry
    # no JMX, so broker_threads_waiting (tests/rules/test_broker_threads_waiting.py) has nothing to say.
    "threads-waiting-latency-unknown": (healthy(), (threads(3.2, 0),)),
    "threads-in-d-state-latency-unknown": (healthy(), (threads(0.1, 2),)),
    "journal-fast": (healthy(), (journal(0.02, 0.2),)),
    "disk-old-errors": (healthy(), (smartctl_polled(since_boot=12, every=1e9),)),
    # Issue 35 item 1: healthy disks polled by smartctl every 60 s, their ioerr_cnt rising, the kernel logging nothing
    # but the pass-through's recovered senses.
    "disk-smartctl-polled": (healthy(), (smartctl_polled(), kernel_logged(20.0, "not-disk-errors.txt"))),
}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("broker-host-causes")
    for name, (host, extras, _) in FIRING.items():
        recording(out, name, host, *extras)
    for name, (host, extras) in QUIET.items():
        recording(out, name, host, *extras)
    return out


@pytest.mark.parametrize("name", sorted(FIRING))
def test_each_cause_fires_on_its_recording(recordings: Path, name: str, capsys: pytest.CaptureFixture) -> None:
    found = diagnose(recordings / name, capsys)
    assert sorted((d["rule"], d["subject"]) for d in found) == FIRING[name][2]
    assert all(d["state"] == "firing" and d["evidence"] and d["remediation"] for d in found)


@pytest.mark.parametrize("name", sorted(QUIET))
def test_a_healthy_look_alike_fires_nothing(recordings: Path, name: str, capsys: pytest.CaptureFixture) -> None:
    assert diagnose(recordings / name, capsys) == []


def test_the_throttled_broker_is_named_with_its_quota_and_cgroup(recordings: Path, capsys: pytest.CaptureFixture) -> None:
    (d,) = diagnose(recordings / "cpu-quota", capsys)
    assert d["evidence"]["cpu_quota_cores"] == 2.0 and d["evidence"]["cgroup"] == f"/{CGROUP}"
    assert d["evidence"]["cpu_throttled_share"] == pytest.approx(0.4, rel=0.05)
    assert d["summary"].startswith(f"broker pid {BROKER} java runs out of its CPU quota of 2.00 cores")


def test_causes_explain_the_slow_broker_symptoms(recordings: Path, capsys: pytest.CaptureFixture) -> None:
    for name in ("vm-steal", "cpu-quota", "journal-slow", "disk-errors", "nic-irq-cpu5"):
        cause = next(d for d in diagnose(recordings / name, capsys) if d["kind"] == "cause")
        assert {"broker_latency_outlier", "probe_latency_high"} <= set(cause["explains"]), name
    nic = next(d for d in diagnose(recordings / "nic-irq-cpu5", capsys) if d["rule"] == "nic_irq_single_core")
    assert "softirq_core_saturated" in nic["explains"] and nic["evidence"]["irq_top_cpu"] == "5"


def test_steal_share_is_measured_over_all_cpus(recordings: Path, capsys: pytest.CaptureFixture) -> None:
    (d,) = diagnose(recordings / "vm-steal", capsys)
    # 0.25 s of steal per second added to each CPU's second of other modes: 0.25 / 1.25 of its time.
    assert d["evidence"]["host.steal_share"] == pytest.approx(0.2, rel=0.05)


@pytest.mark.parametrize("rule", ["cpu_steal_high", "broker_cpu_throttled", "broker_threads_waiting", "log_journal_busy",
                                  "log_disk_errors", "nic_irq_single_core"])
def test_a_host_cause_explains_the_outlier_on_its_own_broker_only(rule: str) -> None:
    rules = {r.id: r for r in load_catalog([default_rules_dir()])}
    cause = Diagnosis(rules[rule], "subject", 0.0, "firing", brokers=frozenset({"2"}))  # kafka.local_broker_id 2
    outlier = rules["broker_latency_outlier"]
    assert cause.explains(Diagnosis(outlier, "broker 2", 0.0, "firing", brokers=frozenset({"2"})))
    assert not cause.explains(Diagnosis(outlier, "broker 3", 0.0, "firing", brokers=frozenset({"3"})))
