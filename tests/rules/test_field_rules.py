"""The field guide's host rules: each fires on its recording and stays quiet on a healthy look-alike."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.paths import FIXTURES, RECORDINGS

sys.path.insert(0, str(FIXTURES))
from build_recordings import write_recording
from field_recordings import FIRING, QUIET

from kdiag.cli.main import main


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every recording of this module, built once into a temporary directory."""
    out = tmp_path_factory.mktemp("field-recordings")
    for name, (host, _) in FIRING.items():
        write_recording(name, host, out)
    for name, host in QUIET.items():
        write_recording(name, host, out)
    return out


def diagnose(path: Path, capsys: pytest.CaptureFixture, *args: str) -> list[dict]:
    assert main(["diagnose", "--from", str(path), "--format", "json", *args]) == 0
    return json.loads(capsys.readouterr().out)["diagnoses"]


@pytest.mark.parametrize("name", sorted(FIRING))
def test_fault_recording_fires_its_rule(recordings: Path, name: str, capsys: pytest.CaptureFixture) -> None:
    found = diagnose(recordings / name, capsys)
    assert [(d["rule"], d["subject"]) for d in found] == FIRING[name][1]
    assert all(d["state"] == "firing" and d["evidence"] and d["remediation"] for d in found)


@pytest.mark.parametrize("name", sorted(QUIET))
def test_healthy_look_alike_fires_nothing(recordings: Path, name: str, capsys: pytest.CaptureFixture) -> None:
    assert diagnose(recordings / name, capsys) == []


def test_line_rate_evidence_names_the_link(recordings: Path, capsys: pytest.CaptureFixture) -> None:
    (d,) = diagnose(recordings / "nic-line-rate", capsys)
    assert d["evidence"]["link_speed_bytes"] == 1.25e9
    assert d["evidence"]["link_utilization"] == pytest.approx(800000 * 1440 / 1.25e9, rel=0.01)


def test_a_virtio_nic_at_line_rate_is_judged_once_its_speed_is_configured(recordings: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "kdiag.yaml"
    config.write_text("nics:\n  eth0:\n    speed_mbps: 10000\n")
    (d,) = diagnose(recordings / "virtio-no-speed", capsys, "--config", str(config))
    assert (d["rule"], d["subject"], d["evidence"]["link_speed_bytes"]) == ("nic_line_rate", "eth0", 1.25e9)


# Each extracts a 28,000-member archive (23,000 of them /proc symlinks): 8 s of file-system work, not a unit test's.
@pytest.mark.integration
@pytest.mark.parametrize(("name", "rule", "comm"), [
    ("real-host-perf-test-on-broker.tar.gz", "loadgen_host_saturated", "java"),  # ProducerPerformance beside the lab
    ("real-host-metadata-walk.tar.gz", "foreign_metadata_scanner", "python3"),  # os.walk + stat in a log dir
])
def test_recordings_captured_on_a_real_host_name_their_cause(name: str, rule: str, comm: str,
                                                             capsys: pytest.CaptureFixture) -> None:
    # Captured with `kdiag record` on this project's 2-core VM while the 3-broker lab ran (not built by a script).
    found = diagnose(RECORDINGS / name, capsys)
    causes = [d for d in found if d["kind"] == "cause" and d["state"] == "firing"]
    assert [d["rule"] for d in causes] == [rule] and causes[0]["subject"].endswith(f" {comm}")
