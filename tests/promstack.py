"""Real kdiag, Prometheus and Alertmanager processes on loopback ports, for the dashboard and alerting tests."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
RECORDINGS = ROOT / "tests" / "recordings"
INSTALL = "apt-get install prometheus prometheus-alertmanager"


def binary(name: str) -> str:
    """Path of a Debian-packaged binary; skips (fails under KDIAG_REQUIRE_E2E=1) when it is not installed."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if path is None:
        reason = f"{name} is not installed: {INSTALL}"
        if os.environ.get("KDIAG_REQUIRE_E2E") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0) -> Any:
    """GET a JSON document."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


class Stack:
    """Processes started for a test session, each logging to a file, all stopped by close()."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def _start(self, name: str, argv: list[str]) -> None:
        log = self.workdir / f"{name}.log"
        self.logs.append(log)
        with log.open("wb") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir))

    def _ready(self, url: str, what: str) -> None:
        def ok() -> bool:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status == 200
        wait_until(ok, 30, what, self.logs)

    def kdiag(self, recording: str) -> str:
        """`kdiag run --from` a recording; returns its host:port."""
        address = f"127.0.0.1:{free_port()}"
        self._start("kdiag", [sys.executable, "-m", "kdiag", "run", "--from", str(RECORDINGS / recording),
                              "--listen", address])
        self._ready(f"http://{address}/healthz", "kdiag /healthz")
        return address

    def kdiag_live(self, *args: str) -> str:
        """`kdiag run` on the live host with these extra arguments (e.g. --bootstrap-servers); returns its host:port."""
        address = f"127.0.0.1:{free_port()}"
        self._start("kdiag", [sys.executable, "-m", "kdiag", "run", "--listen", address, *args])
        self._ready(f"http://{address}/healthz", "kdiag /healthz")
        return address

    def alertmanager(self, config: dict) -> str:
        """prometheus-alertmanager with this config, clustering off; returns its base URL."""
        exe = binary("prometheus-alertmanager")
        path = self.workdir / "alertmanager.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        url = f"http://127.0.0.1:{free_port()}"
        self._start("alertmanager", [exe, f"--config.file={path}", f"--storage.path={self.workdir / 'am-data'}",
                                     f"--web.listen-address={url.removeprefix('http://')}", "--cluster.listen-address="])
        self._ready(f"{url}/-/ready", "Alertmanager /-/ready")
        return url

    def prometheus(self, target: str, rule_files: list[Path] = (), alertmanager: str | None = None) -> str:
        """Prometheus scraping target every second (and evaluating rule_files every second); returns its base URL."""
        exe = binary("prometheus")
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": "kdiag", "static_configs": [{"targets": [target]}]}],
        }
        if alertmanager:
            config["alerting"] = {"alertmanagers": [{"static_configs": [
                {"targets": [alertmanager.removeprefix("http://")]}]}]}
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        url = f"http://127.0.0.1:{free_port()}"
        self._start("prometheus", [exe, f"--config.file={path}", f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                                   f"--web.listen-address={url.removeprefix('http://')}"])
        self._ready(f"{url}/-/ready", "Prometheus /-/ready")
        return url

    def close(self) -> None:
        """Stop every process this stack started (TERM, then KILL after 10 s)."""
        for p in reversed(self.procs):
            p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def query(prometheus: str, expr: str) -> list[dict]:
    """The result of an instant query; raises with Prometheus's error on a bad expression."""
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        body = get_json(url)
    except urllib.error.HTTPError as e:
        raise AssertionError(f"Prometheus rejected {expr!r}: {e.read().decode(errors='replace')}") from None
    return body["data"]["result"]
