"""The daemon's lifecycle on real processes and real signals: hung collectors, SIGTERM, SIGHUP reloads, restarts."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
from tests.promstack import RECORDINGS, Shared, Stack, free_port, get_json
from tests.waiting import wait_until
from tests.paths import FIXTURES

from kdiag.alerting.alertmanager import timestamp
from kdiag.app.build import build
from kdiag.app.daemon import Daemon
from kdiag.config.settings import Config, load_config
from kdiag.recording.recording import Recording
from kdiag.collectors.host.loadavg import LoadavgCollector
from kdiag.app.background import Background
from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.serve.exporter import Published
from kdiag.runtime.pipeline import State
from kdiag.core.root import Root
from kdiag.analysis.statefile import RESTORE_WITHIN_SECONDS, decode

pytestmark = pytest.mark.integration

# Liveness bounds, not performance asserts: generous for a loaded 2-core CI machine.
EXIT_BOUND = 20.0
WAIT = 120.0
# Always true on any host, so its diagnosis is there from the first evaluation; `for` decides pending or firing.
MARKER_RULE = """
- id: {id}
  kind: lint
  severity: info
  each: host
  when: it.cpu_count > 0.0
  for: {for_}
  summary: "{id} holds"
  remediation: nothing to do
  source: tests/app/test_daemon_lifecycle.py
"""


class Kdiag:
    """One `kdiag run` process logging to a file."""

    def __init__(self, tmp: Path, *args: str):
        self.port = free_port()
        self.log = tmp / f"kdiag-{self.port}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--no-discover", "--listen", f"127.0.0.1:{self.port}",
                                          *args], stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def get(self, path: str) -> tuple[int, str]:
        """Status and body of a GET; OSError while nothing listens."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def alive(self) -> bool:
        """Running; fails the test with the log when the process died."""
        assert self.proc.poll() is None, f"kdiag exited with {self.proc.returncode}:\n{self.text()[-3000:]}"
        return True

    def diagnoses(self) -> dict[str, dict]:
        """/api/diagnoses by rule id (empty before the first cycle)."""
        self.alive()
        return {d["rule"]: d for d in json.loads(self.get("/api/diagnoses")[1])["diagnoses"]}

    def metric(self, line_start: str) -> float | None:
        """The value of the first /metrics line starting with line_start."""
        self.alive()
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return None

    def text(self) -> str:
        """The log so far."""
        return self.log.read_text(errors="replace")

    def wait(self, check, what: str, timeout: float = WAIT):
        """wait_until with this process's log on failure."""
        return wait_until(lambda: self.alive() and check(), timeout, what, [self.log])

    def terminate(self) -> float:
        """SIGTERM; the seconds until it exited (asserts exit code 0 within EXIT_BOUND)."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(EXIT_BOUND)
        assert rc == 0, self.text()[-3000:]
        return time.monotonic() - t0

    def close(self) -> None:
        """Kill it if a test left it running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def kdiag(tmp_path):
    """Start `kdiag run` processes; every one still running is killed at the end."""
    started: list[Kdiag] = []

    def start(*args: str) -> Kdiag:
        started.append(Kdiag(tmp_path, *args))
        return started[-1]

    yield start
    for k in started:
        k.close()


def fast_recording(name: str, out: Path) -> Path:
    """A copy of a test recording with its snapshots 1 s apart, so `kdiag run --from` replays it at 1 s cycles."""
    shutil.copytree(RECORDINGS / name, out, symlinks=True)
    manifest = json.loads((out / "manifest.json").read_text())
    # A host name of its own: Alertmanager may hold alerts from an earlier run of the same test.
    host = f"lifecycle-{out.name}-{uuid.uuid4().hex[:8]}"
    (out / "manifest.json").write_text(json.dumps({**manifest, "host": host, "interval_s": 1.0}))
    snapshots = sorted(p for p in out.iterdir() if (p / "meta.json").is_file())
    first = json.loads((snapshots[0] / "meta.json").read_text())["time"]
    for i, snap in enumerate(snapshots):
        (snap / "meta.json").write_text(json.dumps({"time": first + i}))
    return out


def write_config(path: Path, **keys: object) -> Path:
    """A YAML config of top-level keys (JSON is YAML)."""
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in keys.items()))
    return path


# --- #7: hangs -------------------------------------------------------------------------------------------------------


def procfs_with_hung_loadavg(tmp: Path) -> Path:
    """A copy of a fixture host whose /proc/loadavg is a FIFO nobody writes: reading it blocks forever."""
    shutil.copytree(FIXTURES / "host-vm2", tmp / "host", symlinks=True)
    (tmp / "host" / "proc" / "loadavg").unlink()
    os.mkfifo(tmp / "host" / "proc" / "loadavg")
    return tmp / "host"


def test_a_hung_collector_fails_alone_and_sigterm_still_exits(tmp_path, kdiag):
    host = procfs_with_hung_loadavg(tmp_path)
    config = write_config(tmp_path / "kdiag.yaml", collector_timeout="2s", state_dir="")
    k = kdiag("--procfs", str(host / "proc"), "--sysfs", str(host / "sys"), "--interval", "1s", "--config", str(config))
    k.wait(lambda: k.metric('kdiag_collector_success{collector="loadavg"}') == 0.0, "loadavg failed")
    body = k.get("/metrics")[1]
    successes = {line.split('"')[1]: line.rsplit(" ", 1)[1] for line in body.splitlines()
                 if line.startswith("kdiag_collector_success{")}
    assert {name for name, value in successes.items() if value != "1.0"} == {"loadavg"}, successes
    assert len(successes) > 10
    assert k.text().count("collector loadavg failed: timed out after 2s") == 1
    # Cycles go on past the hung read: the served snapshot keeps getting newer and /healthz stays truthful (200).
    first = k.metric("kdiag_last_cycle_timestamp_seconds ")
    k.wait(lambda: k.metric("kdiag_last_cycle_timestamp_seconds ") > first + 2, "two more cycles")
    code, body = k.get("/healthz")
    assert code == 200 and body.splitlines()[0] == "ok"  # the failing collector is listed below the status line
    assert k.metric('kdiag_collector_success{collector="loadavg"}') == 0.0
    assert k.text().count("collector loadavg failed") == 1  # logged once per failure streak
    seconds = k.terminate()
    print(f"SIGTERM with a hung collector: exited in {seconds:.2f}s")


def test_sigterm_in_the_middle_of_a_hung_cycle_exits_through_the_watchdog(tmp_path, kdiag):
    host = procfs_with_hung_loadavg(tmp_path)
    config = write_config(tmp_path / "kdiag.yaml", collector_timeout="10m", state_dir="")
    k = kdiag("--procfs", str(host / "proc"), "--sysfs", str(host / "sys"), "--interval", "1s", "--config", str(config))
    # The first cycle waits on loadavg for 10 minutes: nothing is published yet.
    k.wait(lambda: k.get("/healthz") == (503, "starting\n"), "serving, first cycle hung")
    seconds = k.terminate()
    assert "kdiag: still stopping after 5s (something hangs): exiting now" in k.text()
    print(f"SIGTERM during a hung cycle: exited in {seconds:.2f}s")


def test_a_hung_background_collector_serves_no_stale_samples(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "loadavg").write_text((FIXTURES / "host-vm2" / "proc" / "loadavg").read_text())
    background = Background([LoadavgCollector()], Root(proc, tmp_path / "sys"), every=0.2, timeout=0.5)
    background.run()
    samples, health = background.latest()
    assert samples and health["loadavg"].success
    (proc / "loadavg").unlink()
    os.mkfifo(proc / "loadavg")
    t0 = time.monotonic()
    background.run()
    assert time.monotonic() - t0 < 30  # returned at the deadline, not blocked on the FIFO
    samples, health = background.latest()
    assert samples == [] and not health["loadavg"].success
    assert health["loadavg"].error == "timed out after 0.5s"
    background.run()  # the hung run still blocks: not started again on top of it
    assert background.latest()[1]["loadavg"].error == "timed out after 0.5s (that run still hangs)"


def test_background_samples_expire_when_its_job_stops_running(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "loadavg").write_text((FIXTURES / "host-vm2" / "proc" / "loadavg").read_text())
    background = Background([LoadavgCollector()], Root(proc, tmp_path / "sys"), every=0.2, timeout=0.3)
    background.run()
    assert background.latest()[0]
    # No more runs (a stuck scheduler): past 2 x every + timeout, its last samples are no longer served.
    health = wait_until(lambda: not (got := background.latest())[0] and got[1], 30, "samples expire")
    assert not health["loadavg"].success and health["loadavg"].error.startswith("stale: its job last completed")


def test_a_slowed_down_job_keeps_its_slower_pace_and_runs_at_once_when_sped_up(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "loadavg").write_text((FIXTURES / "host-vm2" / "proc" / "loadavg").read_text())
    background = Background([LoadavgCollector()], Root(proc, tmp_path / "sys"), every=0.2, timeout=5, adaptive=True)
    background.slow_down(500.0)  # a standby's admin job: 100 s at this `every`
    # The first run is never stretched; the second, due a tick later, sets the pace.
    wait_until(lambda: background.run() or background._runs == 2, 30, "two runs")
    assert background.period == 100.0
    background.run()
    assert background._runs == 2  # not due for 100 s
    background.slow_down(1.0)  # elected: the next tick runs it
    background.run()
    assert background._runs == 3


def test_a_cycle_due_while_the_host_stalled_runs_when_it_wakes(kdiag):
    k = kdiag("--interval", "10s")
    cycle = "kdiag_last_cycle_timestamp_seconds "
    first = k.wait(lambda: k.metric(cycle), "a first cycle")
    os.kill(k.proc.pid, signal.SIGSTOP)  # the whole process stalls, as on a host starved of CPU
    assert time.time() < first + 8, "stopped too late to stall across the next cycle's time"
    time.sleep(first + 13 - time.time())  # the stall: 3 s past the next cycle's time, beyond APScheduler's 1 s grace
    woke = time.time()
    os.kill(k.proc.pid, signal.SIGCONT)
    ran = k.wait(lambda: (t := k.metric(cycle)) and t > first and t, "the cycle due during the stall")
    # Not skipped to the cycle after (first + 20 s, 7 s after waking).
    assert ran - woke < 5, (first, woke, ran)


def test_healthz_turns_503_when_no_cycle_completes(tmp_path):
    published = Published(stale_after=0.5)
    assert published.health() == (503, b"starting\n")
    published.publish(State("h", time.time(), [], {}, {}, []))
    assert published.health() == (200, b"ok\n")
    text = wait_until(lambda: (got := published.health())[0] == 503 and got[1], 30, "stale")
    assert text.decode().startswith("stale: the last cycle completed ") and text.endswith(b"s ago\n")
    published.publish(State("h", time.time(), [], {}, {}, []))
    assert published.health() == (200, b"ok\n")
    never = Published(stale_after=0.5)
    wait_until(lambda: never.health()[0] == 503 and never.health()[1].startswith(b"stale: no cycle completed in "),
               30, "stale before the first cycle")


# --- #9: SIGHUP ------------------------------------------------------------------------------------------------------


class InProcess:
    """A daemon built by build() over a recording and stepped by hand: no scheduler, no subprocess."""

    def __init__(self, config: Path, *rules_dirs: Path, recording: Path):
        self.args = {"rules_dirs": [str(d) for d in rules_dirs], "listen": f"127.0.0.1:{free_port()}"}
        self.config_path = config
        self.daemon = Daemon(build(self.load(), Recording(recording)), reload_config=self.load)

    def load(self) -> Config:
        """The config file with the command line's overrides, as `kdiag run` reads it."""
        return load_config(self.config_path, self.args)

    def diagnoses(self) -> dict[str, dict]:
        """The published /api/diagnoses by rule id."""
        return {d["rule"]: d for d in json.loads(self.daemon.services.published.diagnoses)["diagnoses"]}

    def step_until(self, check, what: str, steps: int = 200):
        """Step cycles until check() holds."""
        for _ in range(steps):
            self.daemon.step()
            if got := check():
                return got
        raise AssertionError(f"{what}: not after {steps} cycles")

    def close(self) -> None:
        """Release the exporter's socket (never started) and the state dir's lock."""
        self.daemon.services.exporter.socket.close()
        if self.daemon.services.state_file:
            self.daemon.services.state_file.close()


def test_a_reload_swaps_rules_keeps_history_and_refuses_broken_input(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    recording = fast_recording("small-packet-storm", tmp_path / "storm")
    extra = tmp_path / "extra"
    extra.mkdir()
    config = write_config(tmp_path / "kdiag.yaml", state_dir="")
    k = InProcess(config, default_rules_dir(), extra, recording=recording)
    running = k.daemon.services
    storm = k.step_until(lambda: (d := k.diagnoses().get("small_packet_storm")) and d["state"] == "firing" and d,
                         "small_packet_storm firing")

    (extra / "marker.yaml").write_text(MARKER_RULE.format(id="reload_marker", for_="0s"))
    k.daemon.reload()
    k.daemon.step()
    # The new rule is evaluated at once; the rate-based cause kept its history and its state through the reload.
    assert "reload_marker" in k.diagnoses()
    assert (k.diagnoses()["small_packet_storm"]["state"], k.diagnoses()["small_packet_storm"]["since"]) == (
        "firing", storm["since"])

    shutil.copy(FIXTURES / "rules" / "cel_syntax.yaml", extra / "broken.yaml")
    k.daemon.reload()
    refused = [r.getMessage() for r in caplog.records if "reload refused" in r.getMessage()]
    assert len(refused) == 1 and f"{extra / 'broken.yaml'}:6:35: rule 'broken_cel': when: CEL Syntax error" in refused[0]
    k.daemon.step()
    assert {"reload_marker", "small_packet_storm"} <= set(k.diagnoses())
    (extra / "broken.yaml").unlink()

    config.write_text("interval: soon\n")
    k.daemon.reload()
    assert f"reload refused, the running config stays: {config}: interval: 'soon' is not a duration" in caplog.text
    write_config(config, state_dir="", signal_window="2m")
    k.daemon.reload()
    services = k.daemon.services
    assert services.pipeline.window == 120.0 and "reloaded: " in caplog.records[-1].getMessage()
    assert services.config.signal_window == 120.0 and "reload_marker" in {r.id for r in services.rules}
    # Swapped whole, over the same collectors, web server and published bytes: a reload restarts none of them.
    assert services is not running and services.pipeline is not running.pipeline
    assert all(getattr(services, part) is getattr(running, part) for part in ("collectors", "exporter", "published"))
    k.daemon.step()
    assert k.diagnoses()["small_packet_storm"]["since"] == storm["since"]
    k.close()


def test_a_sighup_burst_reloads_and_keeps_serving(tmp_path, kdiag):
    recording = fast_recording("swap-in-use", tmp_path / "swap")
    k = kdiag("--from", str(recording), "--config", str(write_config(tmp_path / "kdiag.yaml", state_dir="")))
    k.wait(lambda: k.get("/healthz")[0] == 200, "serving")
    for _ in range(3000):
        os.kill(k.proc.pid, signal.SIGHUP)
    k.wait(lambda: "reloaded: " in k.text(), "a reload after the SIGHUP burst")
    before = k.metric("kdiag_last_cycle_timestamp_seconds ")
    k.wait(lambda: k.metric("kdiag_last_cycle_timestamp_seconds ") > before + 1, "cycles after the burst")
    seconds = k.terminate()
    print(f"3000 SIGHUPs: {k.text().count('reloaded: ')} reload(s); SIGTERM exit in {seconds:.2f}s")


# --- #10: restarts ---------------------------------------------------------------------------------------------------


@pytest.fixture
def alertmanager(tmp_path):
    """A real Alertmanager's URL: CI's shared one (left configured as it is), else one started here."""
    shared = Shared.from_env()
    if shared:
        yield shared.alertmanager
        return
    stack = Stack(tmp_path)
    try:
        yield stack.alertmanager({"route": {"receiver": "none"}, "receivers": [{"name": "none"}]})
    finally:
        stack.close()


def test_a_restart_keeps_firing_and_pending_diagnoses_and_their_since(tmp_path, kdiag, alertmanager):
    recording = fast_recording("small-packet-storm", tmp_path / "storm")
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "pending.yaml").write_text(MARKER_RULE.format(id="held_for_an_hour", for_="1h"))
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    config = write_config(tmp_path / "kdiag.yaml", state_dir=str(state_dir))
    args = ("--from", str(recording), "--config", str(config), "--rules-dir", str(default_rules_dir()),
            "--rules-dir", str(extra))
    first = kdiag(*args)

    def both(k: Kdiag) -> dict | None:
        got = k.diagnoses()
        storm, held = got.get("small_packet_storm"), got.get("held_for_an_hour")
        return got if storm and storm["state"] == "firing" and held and held["state"] == "pending" else None

    before = first.wait(lambda: both(first), "a firing and a pending diagnosis")

    def saved() -> bool:
        entries = json.loads((state_dir / "state.json").read_text())["diagnoses"]
        return {(e["rule"], e["state"], e["since"]) for e in entries} >= {
            (r, before[r]["state"], before[r]["since"]) for r in ("small_packet_storm", "held_for_an_hour")}

    first.wait(saved, "both in the state file")
    first.terminate()
    # Only the restarted daemon talks to Alertmanager: what it holds was resent after the restart.
    write_config(config, state_dir=str(state_dir), alertmanager={"url": alertmanager})

    second = kdiag(*args)
    # The very first state served after the restart already has both, with their states and since times.
    after = second.wait(lambda: second.diagnoses() or None, "the first cycle after the restart")
    for rule in ("small_packet_storm", "held_for_an_hour"):
        assert (after[rule]["state"], after[rule]["since"]) == (before[rule]["state"], before[rule]["since"]), rule
    assert re.search(rf"INFO kdiag.analysis.statefile: restored {len(after)} diagnosis\(es\) from {state_dir}", second.text())
    # Evaluated again on fresh data, they keep their since: the storm stays firing, `for` was not reset.
    second.wait(lambda: second.metric("kdiag_last_cycle_timestamp_seconds ") > after["small_packet_storm"]["since"] + 25,
                "cycles after the restart")
    later = second.diagnoses()
    for rule in ("small_packet_storm", "held_for_an_hour"):
        assert (later[rule]["state"], later[rule]["since"]) == (before[rule]["state"], before[rule]["since"]), rule
    host = json.loads((recording / "manifest.json").read_text())["host"]
    query = f"{alertmanager}/api/v2/alerts?filter=" + urllib.parse.quote(f'instance="{host}"')
    alert = second.wait(lambda: next((a for a in get_json(query) if a["labels"]["rule"] == "small_packet_storm"), None),
                        "the firing cause resent to Alertmanager")
    assert alert["startsAt"] == timestamp(before["small_packet_storm"]["since"])
    assert all(a["labels"]["rule"] != "held_for_an_hour" for a in get_json(query))  # pending is not an alert
    second.terminate()


@pytest.mark.parametrize("content, warning", [
    ("{not json", "is corrupt"),
    (json.dumps({"format": "kdiag-state", "version": 1, "host": "some-other-host", "saved": time.time(),
                 "diagnoses": [{"rule": "small_packet_storm", "subject": "eth0", "state": "firing",
                                "since": time.time() - 60}]}), "it is 'some-other-host''s state"),
])
def test_a_corrupt_or_foreign_state_file_is_dropped_with_one_warning(tmp_path, kdiag, content, warning):
    recording = fast_recording("swap-in-use", tmp_path / "swap")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "state.json").write_text(content)
    config = write_config(tmp_path / "kdiag.yaml", state_dir=str(state_dir))
    k = kdiag("--from", str(recording), "--config", str(config))
    k.wait(lambda: k.get("/healthz")[0] == 200, "serving")
    lines = [line for line in k.text().splitlines() if "state file" in line]
    assert len(lines) == 1 and warning in lines[0] and "WARNING" in lines[0], lines
    assert "small_packet_storm" not in k.diagnoses()
    # The file is replaced by this host's own state.
    host = json.loads((recording / "manifest.json").read_text())["host"]
    k.wait(lambda: json.loads((state_dir / "state.json").read_text())["host"] == host,
           "the state file rewritten")
    k.terminate()


def test_stale_unknown_and_malformed_entries_are_not_restored():
    rules = {r.id: r for r in load_catalog([default_rules_dir()])}
    now = time.time()
    entry = {"rule": "swap_in_use", "subject": "host", "state": "firing", "since": now - 100}
    data = {"format": "kdiag-state", "version": 1, "host": "h", "saved": now - 30,
            "diagnoses": [entry, {**entry, "rule": "gone"}, {**entry, "since": float("nan")}, "junk"]}
    restored, dropped = decode(data, "h", rules, now)
    assert [(d.rule.id, d.since, d.state) for d in restored] == [("swap_in_use", now - 100, "firing")]
    assert dropped[0] == "'gone': no such rule" and dropped[1].startswith("malformed entry")
    restored, dropped = decode({**data, "saved": now - RESTORE_WITHIN_SECONDS - 1}, "h", rules, now)
    assert restored == [] and dropped[0] == f"swap_in_use host: saved {RESTORE_WITHIN_SECONDS + 1:.0f}s ago"
    with pytest.raises(ValueError):
        decode({**data, "saved": "yesterday"}, "h", rules, now)
