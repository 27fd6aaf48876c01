"""The drill runner's bookkeeping, the replay drills and the HTML reports (checked in headless chromium)."""

from __future__ import annotations

import json
import os
import re
import signal
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kdiag.tools.drill.drill import Interrupted, Runner
from kdiag.tools.drill.results import DrillResult, accounted, false_attributions, first_time, owned_rows, owner, table, waves
from kdiag.tools.drill.faults import Target, assignment
from kdiag.tools.drill.catalog import BY_NAME, DRILLS, Drill, firing
from kdiag.analysis.catalog import Rule
from kdiag.analysis.engine import Diagnosis
from kdiag.runtime.pipeline import State
from tests.paths import RECORDINGS


ROWS = [
    (100.0, set()),
    (101.0, {("forced_fsync", "t", "pending"), ("partition_skew", "u", "pending")}),
    (116.0, {("forced_fsync", "t", "firing"), ("partition_skew", "u", "firing"), ("broker_down", "cluster", "pending")}),
    (130.0, {("broker_down", "cluster", "firing"), ("forced_fsync_broker", "broker 1", "firing")}),
    (131.0, set()),
]


def kdiag(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdiag", *args], capture_output=True, text=True, timeout=timeout)


def test_seconds_to_pending_and_firing_count_from_the_injection_and_need_every_expected_rule():
    assert first_time(ROWS, ["forced_fsync"], ("pending", "firing"), 100.0) == 1.0
    assert first_time(ROWS, ["forced_fsync"], ("firing",), 100.0) == 16.0
    # Each rule counts from its own first firing: a cause still firing after its transient symptom cleared.
    assert first_time(ROWS, ["forced_fsync", "broker_down"], ("firing",), 100.0) == 30.0
    assert first_time(ROWS, ["forced_fsync", "swap_in_use"], ("firing",), 100.0) is None
    assert first_time(ROWS, [], ("firing",), 100.0) is None
    assert first_time(ROWS, ["forced_fsync"], ("firing",), 120.0) is None  # before `since` does not count


def test_a_cause_that_fires_unexpected_is_a_false_attribution_unless_it_was_active_at_the_baseline():
    causes = {"forced_fsync", "partition_skew", "broker_down", "forced_fsync_broker"}
    fsync = owner([Drill("f", "", ["forced_fsync"])])
    assert false_attributions(ROWS, fsync, causes, set(), 100.0) == [
        "broker_down (cluster)", "forced_fsync_broker (broker 1)", "partition_skew (u)"]
    baseline = {("partition_skew", "u"), ("broker_down", "cluster")}
    assert false_attributions(ROWS, fsync, causes, baseline, 100.0) == ["forced_fsync_broker (broker 1)"]
    # Symptoms and lints are not attributions; pending is not firing.
    assert false_attributions(ROWS, fsync, {"forced_fsync"}, set(), 100.0) == []


def test_a_side_effect_a_drill_names_is_no_false_attribution_on_its_subject_only():
    causes = {"forced_fsync", "partition_skew", "broker_down", "forced_fsync_broker"}
    down = Drill("d", "", ["broker_down"], side_effects={"forced_fsync_broker": "broker 1"})
    assert false_attributions(ROWS, accounted([down]), causes, set(), 100.0) == [
        "forced_fsync (t)", "partition_skew (u)"]
    elsewhere = Drill("d", "", ["broker_down"], side_effects={"forced_fsync_broker": "broker 2"})
    assert "forced_fsync_broker (broker 1)" in false_attributions(ROWS, accounted([elsewhere]), causes, set(), 100.0)
    # A side effect is never what the drill detects, nor does it block its baseline.
    assert not down.owns("forced_fsync_broker", "broker 1") and down.accounts_for("forced_fsync_broker", "broker 1")


def test_in_a_wave_each_drill_owns_its_rules_on_its_subjects_only():
    fsync = Drill("f", "", ["forced_fsync"], subject="t", shares=True)
    skew = Drill("s", "", ["partition_skew"], subject="other", shares=True)
    causes = {"forced_fsync", "partition_skew", "broker_down", "forced_fsync_broker"}
    # partition_skew fired on u, a subject no drill of the wave names: a false attribution of both.
    assert false_attributions(ROWS, owner([fsync, skew]), causes, set(), 100.0) == [
        "broker_down (cluster)", "forced_fsync_broker (broker 1)", "partition_skew (u)"]
    assert false_attributions(ROWS, owner([fsync, Drill("s", "", ["partition_skew"], subject="u")]), causes,
                              {("broker_down", "cluster"), ("forced_fsync_broker", "broker 1")}, 100.0) == []
    # The expected rule on another subject detects nothing.
    assert first_time(owned_rows(ROWS, skew), ["partition_skew"], ("firing",), 100.0) is None
    assert first_time(owned_rows(ROWS, fsync), ["forced_fsync"], ("firing",), 100.0) == 16.0
    lone = Drill("l", "", ["broker_down"])
    assert [[d.name for d in w] for w in waves([fsync, skew, lone, fsync])] == [["f", "s"], ["l"], ["f"]]
    assert [[d.name for d in w] for w in waves([fsync, skew], serial=True)] == [["f"], ["s"]]


def test_every_sharing_drill_names_its_subjects_and_no_two_of_a_wave_own_one_diagnosis():
    for wave in waves(DRILLS):
        assert len(wave) == 1 or all(d.subject != ".*" for d in wave), [d.name for d in wave]
        for d in wave:
            for other in wave:
                if other is not d and set(d.expected) & set(other.expected):
                    assert d.subject != other.subject, (d.name, other.name)


def test_a_drill_check_must_hold_in_some_state_of_the_fault_window():
    check = firing("forced_fsync", lambda d: d.evidence["flush_messages"] == 1.0)
    rule = Rule("forced_fsync", "cause", "warning", "topic", "true", None, "", "", "")

    def state(*diagnoses):
        return State("h", 0.0, [], {}, {}, list(diagnoses))

    assert check(state(Diagnosis(rule, "t", 0.0, "firing", evidence={"flush_messages": 1.0})))
    assert not check(state(Diagnosis(rule, "t", 0.0, "pending", evidence={"flush_messages": 1.0})))
    assert not check(state(Diagnosis(rule, "t", 0.0, "firing", evidence={"flush_messages": 2.0})))
    failed = DrillResult("d", ["r"], detected=True, reverted=True, failed_checks=["evidence"])
    assert not failed.passed and "checks failed: evidence" in table([failed])


def test_a_result_passes_only_detected_reverted_and_without_false_attributions():
    ok = DrillResult("d", ["r"], detected=True, seconds_to_firing=3.0, reverted=True)
    assert ok.passed and ok.to_json()["passed"]
    assert not DrillResult("d", ["r"], detected=True, reverted=False).passed
    assert not DrillResult("d", ["r"], detected=True, reverted=True, false_attributions=["x (y)"]).passed
    assert not DrillResult("d", ["r"], detected=False, reverted=True).passed
    keys = {"name", "expected", "detected", "seconds_to_firing", "seconds_to_resolved", "reverted", "false_attributions",
            "rule_for_seconds", "intervals"}
    assert keys <= set(ok.to_json())
    text = table([ok, DrillResult("e", ["r"], reverted=True, false_attributions=["x (y)"])])
    assert re.search(r"^d +r +yes .* 3\.0 .* yes +ok$", text, re.M)
    assert re.search(r"^e +r +no .*FAILED +\(false attributions: x \(y\); r did not fire\)$", text, re.M)


def test_drills_refuse_a_cluster_too_small_or_not_the_lab():
    one = Target("127.0.0.1:1", 1, lab_dir=Path("/tmp/x"))
    remote = Target("127.0.0.1:1", 3)
    assert "needs 3 brokers" in BY_NAME["leader-skew"].refusal(one)
    assert "needs the kdiag lab" in BY_NAME["broker-kill"].refusal(remote)
    assert BY_NAME["forced-fsync"].refusal(one) == "" and BY_NAME["forced-fsync"].refusal(remote) == ""
    assert assignment(Target("b", 3), 3) == [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
    assert assignment(one, 2) == [[1], [1]]


@pytest.mark.integration
def test_unknown_drills_and_no_drills_are_usage_errors():
    bad = kdiag("drill", "run", "nosuch")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "kdiag: unknown drill(s) nosuch; `kdiag drill list` shows them"]
    assert kdiag("drill", "run").returncode == 2
    listed = kdiag("drill", "list")
    assert listed.returncode == 0 and "forced-fsync " in listed.stdout and "nic_irq_on_cpu0" in listed.stdout
    assert "probe-loss             probe_messages_lost,broker_down" in listed.stdout


@pytest.mark.integration
def test_diagnose_html_needs_a_recording_and_an_output():
    out = kdiag("diagnose", "--format", "html")
    assert out.returncode == 2 and "needs --from RECORDING and -o PATH" in out.stderr


def chromium_check(page: Path, tmp_path: Path) -> str:
    """The page's DOM after rendering in headless chromium; fails on console errors; leaves a screenshot."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (Debian package: chromium)")
    flags = [browser, "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "page.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1100,1400", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000
    dumped = subprocess.run([*flags, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
                            capture_output=True, text=True, timeout=120, check=True)
    assert not [line for line in dumped.stderr.splitlines() if "CONSOLE" in line], dumped.stderr
    return dumped.stdout


@pytest.mark.integration
def test_replay_drills_detect_their_host_fault_and_the_html_shows_a_timeline_each(tmp_path, monkeypatch):
    page = tmp_path / "drills.html"
    monkeypatch.setenv("KDIAG_LAB_DIR", str(tmp_path / "no-lab"))  # replays need no cluster: none is started
    run = kdiag("drill", "run", "nic-irq-on-cpu0", "swap-in-use", "--json", "--html", str(page))
    assert run.returncode == 0, run.stderr
    assert "starting the kdiag lab" not in run.stderr and not (tmp_path / "no-lab" / "lab.json").exists()
    results = {r["name"]: r for r in json.loads(run.stdout)}
    # Recorded every 5 s: pending at the second snapshot, firing once `for` (20 s, 30 s) has passed.
    assert results["nic-irq-on-cpu0"]["seconds_to_firing"] == 25.0 and results["swap-in-use"]["seconds_to_firing"] == 35.0
    assert all(r["detected"] and r["reverted"] and not r["false_attributions"] and r["replayed"] for r in results.values())
    text = page.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    dom = chromium_check(page, tmp_path)
    assert dom.count('class="run"') == 2 and dom.count("fault injected") == 0  # replays made no fault window
    assert dom.count('class="band firing"') >= 2 and dom.count('class="signal"') >= 4


@pytest.mark.integration
def test_diagnose_html_of_a_recording_plots_each_diagnosis_evidence(tmp_path):
    page = tmp_path / "rec.html"
    run = kdiag("diagnose", "--from", str(RECORDINGS / "foreign-io-scanner"), "--format", "html", "-o", str(page))
    assert run.returncode == 0, run.stderr
    dom = chromium_check(page, tmp_path)
    assert 'data-rule="foreign_io_scanner"' in dom and "Fix:" in dom and dom.count('class="run"') == 1
    assert dom.count('class="signal"') == 3  # read_bytes, rchar and the page cache change


def test_sigint_and_sigterm_are_only_noted_until_a_wait_acts_on_them():
    runner = Runner(Target("127.0.0.1:1", 1), progress=lambda _: None)
    before = signal.getsignal(signal.SIGINT)  # Python's default_int_handler, or SIG_IGN when started in the background
    with runner.signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)  # a revert running here would go on: nothing is raised
        os.kill(os.getpid(), signal.SIGTERM)
        assert runner.interrupted == signal.SIGTERM
        with pytest.raises(Interrupted):
            runner._wait(lambda: False, 5)
    assert signal.getsignal(signal.SIGINT) is before
