"""Real kdiag, Prometheus and Alertmanager processes on loopback ports, for the dashboard and alerting tests.

scripts/test starts one Prometheus and one Alertmanager before the kafka tier (`python3 -m tests.promstack up DIR`, which
prints the KDIAG_SERVICES setting); the tests then register their kdiag targets, rule files and Alertmanager
config there and reload. Without KDIAG_SERVICES each test session starts its own processes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from tests.waiting import wait_until

from tests import services
from tests.paths import RECORDINGS, ROOT

INSTALL = "apt-get install prometheus prometheus-alertmanager"
SERVICES = "services.json"


def binary(name: str) -> str:
    """Path of a Debian-packaged binary; skips (fails under --require-services) when it is not installed."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if path is None:
        services.unavailable(f"{name} is not installed: {INSTALL}")
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


def post(url: str) -> None:
    """POST with an empty body (the lifecycle /-/reload endpoints); raises on an error status."""
    with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=30):
        pass


def prometheus_config(jobs: dict[str, str], rule_files: list[str], alertmanager: str | None) -> dict:
    """A Prometheus config scraping and evaluating every second: one job per {job name: target}."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": rule_files,
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in jobs.items()],
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager.removeprefix("http://")]}]}]}
    return config


class Shared:
    """The Prometheus and Alertmanager CI started (`up`): their URLs and the config files the tests rewrite."""

    def __init__(self, directory: Path):
        services = json.loads((directory / SERVICES).read_text())
        self.prometheus, self.alertmanager = services["prometheus"], services["alertmanager"]
        self.prometheus_config = directory / "prometheus.yml"
        self.alertmanager_config = directory / "alertmanager.yml"

    @classmethod
    def from_env(cls) -> Shared | None:
        """The services KDIAG_SERVICES names, None when it is unset."""
        directory = os.environ.get("KDIAG_SERVICES")
        return cls(Path(directory)) if directory else None

    def _read_prometheus(self) -> tuple[dict[str, str], list[str], bool]:
        """The shared config's {job: target}, rule files, and whether it sends alerts to the shared Alertmanager."""
        config = yaml.safe_load(self.prometheus_config.read_text())
        jobs = {c["job_name"]: c["static_configs"][0]["targets"][0] for c in config.get("scrape_configs") or []}
        return jobs, config.get("rule_files") or [], bool(config.get("alerting"))

    def _write_prometheus(self, jobs: dict[str, str], rule_files: list[str], alerting: bool) -> None:
        self.prometheus_config.write_text(yaml.safe_dump(
            prometheus_config(jobs, rule_files, self.alertmanager if alerting else None), sort_keys=False))
        post(f"{self.prometheus}/-/reload")

    def add_targets(self, targets: list[str], rule_files: list[Path], alertmanager: bool) -> None:
        """Scrape targets (a job each) in one reload, evaluate rule_files too, alert to the shared Alertmanager if asked.

        Returns once Prometheus lists every target as active: a reload is asked again while one is missing.
        """
        jobs, files, alerting = self._read_prometheus()
        self._write_prometheus({**jobs, **{f"kdiag-{t}": t for t in targets}}, sorted({*files, *map(str, rule_files)}),
                               alerting or alertmanager)

        asked = time.monotonic()

        def listed() -> bool:
            nonlocal asked
            if set(targets) <= {t["labels"].get("instance") for t in active_targets(self.prometheus)}:
                return True
            if time.monotonic() - asked > 10:
                post(f"{self.prometheus}/-/reload")
                asked = time.monotonic()
            return False

        wait_until(listed, 60, f"Prometheus to list {targets} as targets")

    def remove_target(self, target: str) -> None:
        """Stop scraping target."""
        jobs, files, alerting = self._read_prometheus()
        self._write_prometheus({j: t for j, t in jobs.items() if t != target}, files, alerting)

    def configure_alertmanager(self, config: dict) -> None:
        """Replace the shared Alertmanager's configuration."""
        self.alertmanager_config.write_text(yaml.safe_dump(config, sort_keys=False))
        post(f"{self.alertmanager}/-/reload")


class Stack:
    """Processes started for a test session, each logging to a file, all stopped by close(); shared services reused."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.shared = Shared.from_env()
        self.targets: list[str] = []

    def _start(self, name: str, argv: list[str]) -> None:
        log = self.workdir / f"{name}.log"
        if log.exists():  # a second process of the same kind
            log = self.workdir / f"{name}-{len(self.logs)}.log"
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
        if self.shared:
            self.shared.configure_alertmanager(config)
            return self.shared.alertmanager
        url = start_alertmanager(self.workdir, config, self._start)
        self._ready(f"{url}/-/ready", "Alertmanager /-/ready")
        return url

    def own_alertmanager(self, config: dict, web_config: Path | None = None) -> str:
        """An Alertmanager of this stack's own, never the shared one; its host:port (ready unless behind web_config)."""
        extra = [f"--web.config.file={web_config}"] if web_config else []
        directory = Path(tempfile.mkdtemp(prefix="am-", dir=self.workdir))
        url = start_alertmanager(directory, config, self._start, extra)
        if not web_config:
            self._ready(f"{url}/-/ready", "Alertmanager /-/ready")
        return url.removeprefix("http://")

    def prometheus(self, target: str | list[str], rule_files: list[Path] = (), alertmanager: str | None = None) -> str:
        """Prometheus scraping the target(s) every second (and evaluating rule_files every second); returns its base URL."""
        targets = [target] if isinstance(target, str) else target
        if self.shared:
            self.shared.add_targets(targets, list(rule_files), alertmanager is not None)
            self.targets.extend(targets)
            return self.shared.prometheus
        jobs = {"kdiag": target} if isinstance(target, str) else {f"kdiag-{t}": t for t in targets}
        url = start_prometheus(self.workdir, prometheus_config(jobs, [str(p) for p in rule_files], alertmanager),
                               self._start)
        self._ready(f"{url}/-/ready", "Prometheus /-/ready")
        return url

    def close(self) -> None:
        """Stop every process this stack started (TERM, then KILL after 10 s) and unregister its shared targets."""
        for target in self.targets:
            self.shared.remove_target(target)
        stop(self.procs)


def start_alertmanager(workdir: Path, config: dict, start, extra: list[str] = ()) -> str:
    """Start prometheus-alertmanager on a free loopback port with config (reloadable), clustering off; its URL."""
    path = workdir / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    url = f"http://127.0.0.1:{free_port()}"
    start("alertmanager", [binary("prometheus-alertmanager"), f"--config.file={path}",
                           f"--storage.path={workdir / 'am-data'}", f"--web.listen-address={url.removeprefix('http://')}",
                           "--cluster.listen-address=", *extra])
    return url


def start_prometheus(workdir: Path, config: dict, start) -> str:
    """Start prometheus on a free loopback port with config, reloadable through /-/reload; its URL."""
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    url = f"http://127.0.0.1:{free_port()}"
    start("prometheus", [binary("prometheus"), f"--config.file={path}", f"--storage.tsdb.path={workdir / 'tsdb'}",
                         f"--web.listen-address={url.removeprefix('http://')}", "--web.enable-lifecycle"])
    return url


def stop(procs: list[subprocess.Popen]) -> None:
    """TERM every process, then KILL those still running after 10 s."""
    for p in reversed(procs):
        p.terminate()
    for p in reversed(procs):
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


def active_targets(prometheus: str) -> list[dict]:
    """Prometheus's active targets, with their labels and last scrape."""
    return get_json(f"{prometheus}/api/v1/targets?state=active")["data"]["activeTargets"]


def target_health(prometheus: str, targets: list[str]) -> str:
    """Prometheus's view of the targets' last scrapes, for a failure message: health, duration, last error."""
    active = active_targets(prometheus)
    return "; ".join(f"{t['labels'].get('instance')}: {t['health']} in {t['lastScrapeDuration']:.3f}s"
                     f"{' (' + t['lastError'] + ')' if t['lastError'] else ''}"
                     for t in active if t["labels"].get("instance") in targets) or f"none of {targets} is a target"


def services_up(directory: Path) -> None:
    """Start the shared Prometheus and Alertmanager in their own sessions; they outlive this command."""
    directory.mkdir(parents=True, exist_ok=True)
    pids = []

    def start(name: str, argv: list[str]) -> None:
        with (directory / f"{name}.log").open("wb") as out:
            pids.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=directory,
                                         start_new_session=True).pid)

    alertmanager = yaml.safe_load((ROOT / "deploy" / "alertmanager" / "alertmanager.yml").read_text())
    urls = {"alertmanager": start_alertmanager(directory, alertmanager, start),
            "prometheus": start_prometheus(directory, prometheus_config({}, [], None), start)}
    (directory / SERVICES).write_text(json.dumps({**urls, "pids": pids}))
    for name, url in urls.items():
        wait_until(lambda url=url: urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200, 60,
                   f"{name} /-/ready", sorted(directory.glob("*.log")))
        print(f"{name}: {url} (log {directory / (name + '.log')})", file=sys.stderr)
    print(f"export KDIAG_SERVICES={directory}")


def services_down(directory: Path) -> None:
    """Stop what services_up started and wait (10 s at most) for them to exit."""
    pids = json.loads((directory / SERVICES).read_text())["pids"]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

    def running(pid: int) -> bool:
        try:  # an exited child of a container's init that nobody reaps stays a zombie: it counts as gone
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    def gone() -> bool:
        return not any(map(running, pids))

    wait_until(gone, 10, "Prometheus and Alertmanager to exit")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Start or stop the Prometheus and Alertmanager the tests share.")
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("dir", type=Path, help="where their configs, data, logs and services.json live")
    args = parser.parse_args()
    if args.action == "up":
        services_up(args.dir.resolve())
    else:
        services_down(args.dir.resolve())
