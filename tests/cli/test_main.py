"""The kdiag command: diagnose from a recording (JSON and text), run as a served daemon, and its exit codes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kdiag.cli.main import main
from tests.paths import FIXTURES

T0 = 1_700_000_000.0
GIB_KB = 2**20  # 1 GiB in kB


@pytest.fixture(scope="module")
def swapping(tmp_path_factory) -> Path:
    """Three snapshots of the host-vm2 fixture, 40 s apart, with 1 GiB of swap in use and paging: swap_in_use fires."""
    rec = tmp_path_factory.mktemp("swapping") / "rec"
    rec.mkdir()
    (rec / "manifest.json").write_text(json.dumps({"format": "kdiag-recording", "version": 1, "host": "broker-2",
                                                   "interval_s": 40}))
    for i, t in enumerate((T0, T0 + 40, T0 + 80)):
        snap = rec / f"{i:04d}"
        shutil.copytree(FIXTURES / "host-vm2", snap, symlinks=True)
        (snap / "meta.json").write_text(json.dumps({"time": t}))
        meminfo = snap / "proc" / "meminfo"
        text = re.sub(r"^SwapTotal:\s+\d+ kB$", f"SwapTotal:      {4 * GIB_KB} kB", meminfo.read_text(), flags=re.M)
        text = re.sub(r"^SwapFree:\s+\d+ kB$", f"SwapFree:       {3 * GIB_KB} kB", text, flags=re.M)
        meminfo.write_text(text)
        vmstat = snap / "proc" / "vmstat"
        # 200 pages/s swapped in and out between the snapshots.
        paged = i * 40 * 200
        vmstat.write_text(re.sub(r"^(pswp(?:in|out)) (\d+)$", lambda m, paged=paged: f"{m[1]} {int(m[2]) + paged}",
                                 vmstat.read_text(), flags=re.M))
    return rec


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_diagnose_json_contract(swapping, capsys):
    code, out, _ = run_main(capsys, "diagnose", "--from", str(swapping), "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"host", "time", "diagnoses"}
    assert data["host"] == "broker-2"
    assert data["time"] == T0 + 80
    keys = {"rule", "subject", "kind", "severity", "state", "since", "summary", "evidence", "remediation", "explains"}
    for d in data["diagnoses"]:
        # The contract's keys, plus the fleet fields (scope; cluster and reported_by where they apply).
        assert keys <= set(d) <= keys | {"scope", "cluster", "reported_by"}
        assert d["scope"] in ("host", "cluster")
        assert d["state"] in ("firing", "pending")
        assert d["kind"] in ("cause", "symptom", "lint")
        assert isinstance(d["evidence"], dict) and isinstance(d["explains"], list)
    swap = next(d for d in data["diagnoses"] if d["rule"] == "swap_in_use")
    assert (swap["subject"], swap["kind"], swap["state"], swap["since"]) == ("host", "cause", "firing", T0 + 40)
    assert swap["evidence"]["host.swap_used_bytes"] == 2**30
    assert "1.07e+09 B of swap in use" in swap["summary"]
    assert "swappiness" in swap["remediation"]


def test_diagnose_text(swapping, capsys):
    code, out, _ = run_main(capsys, "diagnose", "--from", str(swapping))
    assert code == 0
    assert out.startswith("kdiag on broker-2 at ")
    assert re.search(r"^  CAUSE swap_in_use \[warning, firing since .*\] host$", out, re.M), out
    assert re.search(r"^    evidence: .*host.swap_used_bytes=1.074e\+09", out, re.M), out
    assert "fix: Keep Kafka out of swap" in out


def test_diagnose_tar_gz(swapping, tmp_path, capsys):
    archive = shutil.make_archive(str(tmp_path / "rec"), "gztar", root_dir=swapping.parent, base_dir=swapping.name)
    code, out, _ = run_main(capsys, "diagnose", "--from", archive, "--format", "json")
    assert code == 0
    assert "swap_in_use" in {d["rule"] for d in json.loads(out)["diagnoses"]}


def test_diagnose_missing_recording_exits_2(tmp_path, capsys):
    code, _, err = run_main(capsys, "diagnose", "--from", str(tmp_path / "nope"))
    assert code == 2
    assert f"{tmp_path / 'nope'}: no such recording" in err


def test_bad_config_exits_2_with_the_key_path(tmp_path, swapping, capsys):
    config = tmp_path / "kdiag.yaml"
    config.write_text("kafka:\n  bootstrap_server: b1:9092\n")
    code, out, err = run_main(capsys, "diagnose", "--config", str(config), "--from", str(swapping))
    assert code == 2
    assert f"{config}: kafka.bootstrap_server: unknown key" in err
    assert out == ""
    config.write_text("interval: soon\n")
    code, _, err = run_main(capsys, "rules", "check", "--config", str(config))
    assert code == 2 and "interval: 'soon' is not a duration" in err


def test_rules_list(capsys):
    code, out, _ = run_main(capsys, "rules", "list")
    assert code == 0
    ids = [line.split()[0] for line in out.splitlines()]
    assert {"small_packet_storm", "nic_irq_on_cpu0", "swap_in_use", "foreign_io_scanner"} <= set(ids)


def test_rules_dir_used_by_diagnose(swapping, capsys):
    code, _, err = run_main(capsys, "diagnose", "--from", str(swapping),
                            "--rules-dir", str(FIXTURES / "rules" / "unknown_signal.yaml"))
    assert code == 1
    assert "unknown_signal.yaml:6:43: rule 'bad_signal'" in err


# --- kdiag run as a subprocess ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kdiag(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kdiag", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.integration
def test_run_from_recording_serves_and_stops_on_sigterm(swapping):
    port = free_port()
    proc = kdiag("run", "--from", str(swapping), "--listen", f"127.0.0.1:{port}")
    try:
        body = ""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate(timeout=5)
            try:
                status, body = get(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                status = 0
            if status == 200 and "kdiag_cpu_seconds_total{" in body:
                break
            time.sleep(0.1)
        assert "kdiag_cpu_seconds_total{" in body
        assert 'kdiag_collector_success{collector="stat"} 1.0' in body
        assert "# HELP kdiag_memory_MemAvailable_bytes Memory information field MemAvailable." in body
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        diagnoses = json.loads(get(f"http://127.0.0.1:{port}/api/diagnoses")[1])
        assert diagnoses["host"] == "broker-2"
        # Replayed as live: times are shifted to now.
        assert abs(diagnoses["time"] - time.time()) < 60

        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert f"serving http://127.0.0.1:{port}/metrics replaying {swapping}" in out
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


@pytest.mark.integration
def test_run_with_broken_rules_exits_1_before_serving(swapping):
    port = free_port()
    rules = FIXTURES / "rules" / "cel_syntax.yaml"
    proc = kdiag("run", "--from", str(swapping), "--listen", f"127.0.0.1:{port}", "--rules-dir", str(rules))
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1
    assert f"{rules}:6:35: rule 'broken_cel': when: CEL Syntax error" in err
    assert "serving" not in out


@pytest.mark.integration
def test_run_with_bad_config_exits_2(tmp_path):
    config = tmp_path / "kdiag.yaml"
    config.write_text("processes:\n  top_n: many\n")
    result = subprocess.run([sys.executable, "-m", "kdiag", "run", "--config", str(config), "--listen", "127.0.0.1:0"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "processes.top_n: expected an integer, got 'many'" in result.stderr
