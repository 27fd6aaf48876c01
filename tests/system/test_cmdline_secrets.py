"""Other processes' secrets stay out of /metrics, /api/diagnoses, Alertmanager and recordings (real process, real daemon)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from tests.promstack import RECORDINGS, Stack, get_json
from tests.waiting import wait_until

from kdiag.cli.main import main
from kdiag.collectors.host.processes import ProcessesCollector
from kdiag.config.settings import ConfigError, load_config
from kdiag.core.root import Root

pytestmark = pytest.mark.integration

SECRETS = ("hunter2", "tok3n", "s3cretPW")
SECRET_ARGS = ["--db-password=hunter2", "--api-token", "tok3n", "http://admin:s3cretPW@host/"]
MASKED = "--db-password=*** --api-token *** ***"  # processes.cmdline: masked (the default) shows flags, not values
REDACTED = "--db-password=*** --api-token *** http://admin:***@host/"  # full: values, but no known secret form
# Reads every file of its last argument about 20 times a second: ~150 MB/s through read(2), all from the page cache.
READER = """
import os, sys, time
d = sys.argv[-1]
while True:
    for n in os.listdir(d):
        with open(os.path.join(d, n), "rb") as f:
            while f.read(1 << 20):
                pass
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def scanner(tmp_path_factory: pytest.TempPathFactory):
    """A python3 process with secrets in its argv, reading a directory the config names as a Kafka log dir."""
    work = tmp_path_factory.mktemp("scanner")
    log_dir = work / "kafka-logs"
    log_dir.mkdir()
    (log_dir / "00000000000000000000.log").write_bytes(b"k" * (8 << 20))
    (work / "reader.py").write_text(READER)
    proc = subprocess.Popen([sys.executable, str(work / "reader.py"), *SECRET_ARGS, str(log_dir)])
    config = work / "kdiag.yaml"
    config.write_text(json.dumps({"interval": "1s", "processes": {"log_dirs": [str(log_dir)], "top_n": 50}}))
    yield {"pid": proc.pid, "work": work, "config": config, "log_dir": log_dir}
    proc.kill()
    proc.wait()


def assert_no_secret(text: str, where: str) -> None:
    found = [s for s in SECRETS if s in text]
    assert not found, f"{found} in {where}"


def test_metrics_diagnoses_and_pushed_alerts_show_the_masked_command_line(scanner: dict, tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    try:
        alertmanager = stack.own_alertmanager({"route": {"receiver": "none"}, "receivers": [{"name": "none"}]})
        config = json.loads(scanner["config"].read_text())
        config["alertmanager"] = {"url": f"http://{alertmanager}", "resend_interval": "2s"}
        scanner["config"].with_name("push.yaml").write_text(json.dumps(config))
        kdiag = stack.kdiag_live("--config", str(scanner["config"].with_name("push.yaml")))
        comm = Path(f"/proc/{scanner['pid']}/comm").read_text().strip()  # python or python3, as it was started
        subject = f"pid {scanner['pid']} {comm}"

        def firing() -> dict | None:
            found = get_json(f"http://{kdiag}/api/diagnoses")["diagnoses"]
            return next((d for d in found if d["rule"] == "foreign_io_scanner" and d["subject"] == subject
                         and d["state"] == "firing"), None)

        diagnosis = wait_until(firing, 120, f"foreign_io_scanner firing for {subject}", stack.logs)
        assert diagnosis["evidence"]["cmdline"].endswith(f"reader.py {MASKED} {scanner['log_dir']}")
        with urllib.request.urlopen(f"http://{kdiag}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert f'pid="{scanner["pid"]}"' in metrics and MASKED in metrics
        assert_no_secret(metrics, "/metrics")
        with urllib.request.urlopen(f"http://{kdiag}/api/diagnoses", timeout=10) as r:
            assert_no_secret(r.read().decode(), "/api/diagnoses")

        def pushed() -> dict | None:
            alerts = get_json(f"http://{alertmanager}/api/v2/alerts")
            return next((a for a in alerts if a["labels"].get("subject") == subject
                         and a["labels"]["alertname"] == "KdiagForeignIoScanner"), None)  # not its KdiagExplains

        alert = wait_until(pushed, 60, "the pushed foreign_io_scanner alert in Alertmanager", stack.logs)
        assert MASKED in json.loads(alert["annotations"]["evidence"])["cmdline"]
        assert_no_secret(json.dumps(alert), "the alert Alertmanager received")
    finally:
        stack.close()
    for log in stack.logs:
        assert_no_secret(log.read_text(errors="replace"), log.name)


def test_a_recording_holds_only_the_masked_command_line(scanner: dict, tmp_path: Path) -> None:
    out = tmp_path / "rec"
    done = subprocess.run([sys.executable, "-m", "kdiag", "record", "-o", str(out), "--duration", "2s", "--interval", "1s",
                           "--config", str(scanner["config"])], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    recorded = (out / "0000" / "proc" / str(scanner["pid"]) / "cmdline").read_text()
    assert recorded.split("\0")[2:6] == MASKED.split(" ")
    for path in out.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert_no_secret(path.read_text(errors="replace"), str(path))


@pytest.mark.parametrize(("mode", "expected"), [("masked", MASKED), ("full", REDACTED), ("off", None)])
def test_processes_cmdline_mode_masks_redacts_or_drops_the_label(scanner: dict, mode: str, expected: str | None) -> None:
    collector = ProcessesCollector(top_n=50, log_dirs=[str(scanner["log_dir"])], cmdline=mode)

    def info() -> dict | None:
        found = [dict(s.labels) for s in collector.collect(Root()) if s.name == "kdiag_process_info"]
        return next((labels for labels in found if labels["pid"] == str(scanner["pid"])), None)

    labels = wait_until(info, 30, f"kdiag_process_info of pid {scanner['pid']}")
    assert labels.get("cmdline") is None if expected is None else expected in labels["cmdline"]


def test_a_recording_made_before_redaction_is_masked_when_replayed(tmp_path: Path, capsys) -> None:
    old = tmp_path / "old"
    shutil.copytree(RECORDINGS / "foreign-io-scanner", old, symlinks=True)
    for cmdline in old.glob("*/proc/3100/cmdline"):
        cmdline.write_text("\0".join(["python3", "/opt/ops/dir_stats.py", *SECRET_ARGS]) + "\0")
    main(["diagnose", "--from", str(old), "--format", "json"])
    out = capsys.readouterr().out
    assert json.loads(out)["diagnoses"][0]["evidence"]["cmdline"] == f"python3 /opt/ops/dir_stats.py {MASKED}"
    assert_no_secret(out, "kdiag diagnose --from")
    main(["diagnose", "--from", str(old), "--format", "json", "--config", str(full_config(tmp_path))])
    out = capsys.readouterr().out
    assert json.loads(out)["diagnoses"][0]["evidence"]["cmdline"] == f"python3 /opt/ops/dir_stats.py {REDACTED}"
    assert_no_secret(out, "kdiag diagnose --from, processes.cmdline: full")


def full_config(directory: Path) -> Path:
    """A config file asking for processes.cmdline: full."""
    config = directory / "full.yaml"
    config.write_text(json.dumps({"processes": {"cmdline": "full"}}))
    return config



@pytest.mark.parametrize("mode", ["masks", "", "FULL"])
def test_processes_cmdline_takes_only_its_modes(mode: str, tmp_path: Path) -> None:
    config = tmp_path / "kdiag.yaml"
    config.write_text(json.dumps({"processes": {"cmdline": mode}}))
    with pytest.raises(ConfigError, match=rf"{config}: processes\.cmdline: '{mode}' is not masked, full, off"):
        load_config(config)
    assert load_config().processes.cmdline == "masked"


def test_processes_cmdline_redacted_of_older_configs_means_masked(tmp_path: Path) -> None:
    config = tmp_path / "kdiag.yaml"
    config.write_text(json.dumps({"processes": {"cmdline": "redacted"}}))
    assert load_config(config).processes.cmdline == "masked"
