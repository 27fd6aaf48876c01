"""Each host cause rule fires on its recording, and no rule fires on the healthy ones."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from kdiag.cli.main import main
from tests.paths import RECORDINGS

FAULTS = {
    "small-packet-storm": ("small_packet_storm", "eth0"),
    "nic-irq-on-cpu0": ("nic_irq_on_cpu0", "eth0"),
    "swap-in-use": ("swap_in_use", "host"),
    "foreign-io-scanner": ("foreign_io_scanner", "pid 3100 python3"),
}
HEALTHY = ["healthy-busy-broker", "healthy-broker-catchup-reads", "healthy-backup-other-disk"]


def diagnose(path: Path, capsys: pytest.CaptureFixture) -> dict:
    assert main(["diagnose", "--from", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_recording_names_its_cause(name: str, capsys: pytest.CaptureFixture) -> None:
    rule, subject = FAULTS[name]
    out = diagnose(RECORDINGS / name, capsys)
    assert [(d["rule"], d["subject"], d["state"]) for d in out["diagnoses"]] == [(rule, subject, "firing")]
    d = out["diagnoses"][0]
    assert d["kind"] == "cause" and d["remediation"] and d["evidence"]
    assert out["host"] == name and out["time"] == 1764430045.0


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_recording_has_no_diagnosis(name: str, capsys: pytest.CaptureFixture) -> None:
    assert diagnose(RECORDINGS / name, capsys)["diagnoses"] == []


def test_log_disk_lints_name_the_disk(capsys: pytest.CaptureFixture) -> None:
    out = diagnose(RECORDINGS / "log-disk-misconfigured", capsys)
    assert [(d["rule"], d["subject"], d["kind"]) for d in out["diagnoses"]] == [
        ("log_disk_scheduler", "sdb", "lint"), ("log_fs_atime", "sdb", "lint")]
    assert out["diagnoses"][0]["evidence"] == {"scheduler": "bfq", "media": "hdd"}


def test_foreign_io_scanner_evidence_names_the_process(capsys: pytest.CaptureFixture) -> None:
    d = diagnose(RECORDINGS / "foreign-io-scanner", capsys)["diagnoses"][0]
    assert d["evidence"]["cmdline"] == "python3 /opt/ops/dir_stats.py --every ***"  # processes.cmdline: masked
    assert d["evidence"]["read_bytes_per_second"] == pytest.approx(95 * 2**20, rel=0.01)
    assert d["evidence"]["host.page_cache_change_bytes"] < -5e9


@pytest.mark.parametrize("nested", [True, False])
def test_tar_gz_recording_reads_like_the_directory(tmp_path: Path, nested: bool, capsys) -> None:
    source = RECORDINGS / "swap-in-use"
    archive = tmp_path / "swap.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        if nested:
            tar.add(source, arcname="swap-in-use")
        else:
            for child in sorted(source.iterdir()):
                tar.add(child, arcname=child.name)
    assert diagnose(archive, capsys) == diagnose(source, capsys)


def test_text_report_lists_cause_with_fix(capsys: pytest.CaptureFixture) -> None:
    assert main(["diagnose", "--from", str(RECORDINGS / "nic-irq-on-cpu0")]) == 0
    out = capsys.readouterr().out
    assert "CAUSE nic_irq_on_cpu0" in out and "fix: Spread the NIC's interrupts" in out
