"""`kdiag drill run` through the real CLI against the lab: detection, no false attribution, the cluster whole after.

The `drills` tier (`pytest -m drills`). Drills that stop brokers or set cluster-wide configs run only with `--own-lab`:
point KDIAG_LAB_DIR at a lab of your own (`KDIAG_LAB_DIR=/tmp/lab-drills kdiag lab up --brokers 3 --base-port 23092`),
never a shared one. `kdiag drill run --all` is the live proof of the Kafka rules the
drills make: each drill's detection, its evidence checks, no false attribution, the revert, and the cluster after.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from tests.waiting import wait_until

from kdiag.tools.lab import lab

pytestmark = pytest.mark.drills
breaking = pytest.mark.skipif("not config.getoption('own_lab')",
                              reason="stops brokers or sets cluster-wide configs: --own-lab, on a lab of your own")
# The drills that stop brokers or set cluster-wide configs.
BREAKING = {"forced-fsync-broker", "broker-kill", "broker-freeze", "follower-stopped", "probe-loss", "broker-stall",
            "broker-throttled", "follower-stall", "follower-throttled", "leader-stall"}


@pytest.fixture(scope="module")
def cluster(kafka_lab: dict) -> dict:
    """The lab, with the brokers' configs as the module found them (cluster_whole compares against them)."""
    if kafka_lab["brokers"] < 3:
        pytest.skip("the drills need a 3-broker lab: kdiag lab up --brokers 3")
    return {**kafka_lab, "configs": broker_configs(kafka_lab)}


def broker_configs(cluster: dict) -> dict[str, dict[str, str]]:
    """Every broker's configs that are not Kafka's defaults (dynamic ones, cluster-wide defaults included)."""
    admin = AdminClient({"bootstrap.servers": cluster["bootstrap"]})
    configs = {}
    for n in range(1, cluster["brokers"] + 1):  # one broker resource per call
        resource = ConfigResource(ConfigResource.Type.BROKER, str(n))
        entries = admin.describe_configs([resource])[resource].result(timeout=30)
        configs[str(n)] = {k: str(v.value) for k, v in entries.items() if not v.is_default}
    return configs


def drill(*args: str, timeout: float = 900) -> list[dict]:
    """Run `kdiag drill run ARGS --json`; its results, after checking the exit code matches them."""
    run = subprocess.run([sys.executable, "-m", "kdiag", "drill", "run", *args, "--json"], capture_output=True,
                         text=True, timeout=timeout)
    results = json.loads(run.stdout)
    assert run.returncode == (0 if all(r["passed"] for r in results) else 1), run.stderr
    return results


def scanners(cluster: dict) -> list[int]:
    """Pids of the log-dir-scanner drill's processes (its code and the lab's log dirs on their command line)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(cluster["dir"].encode() in a for a in argv) and any(b"os.walk" in a for a in argv):
            found.append(int(proc.name))
    return found


def cluster_whole(cluster: dict) -> str:
    """'' when the lab is as before any drill, else what is not: drill topics and groups, flush defaults, broker
    configs changed, brokers down, frozen or not live in the cluster, scanners."""
    admin = AdminClient({"bootstrap.servers": cluster["bootstrap"]})
    metadata = admin.list_topics(timeout=30)
    problems = [f"topic {t} left" for t in metadata.topics if t.startswith("drill-")]
    problems += [f"group {g.group_id} left" for g in admin.list_consumer_groups().result(timeout=30).valid
                 if g.group_id.startswith("drill-")]
    if len(metadata.brokers) != cluster["brokers"]:
        problems.append(f"{len(metadata.brokers)} of {cluster['brokers']} brokers live")
    for node, pid in lab.status(cluster["dir"])[1].items():
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] if pid else "gone"
        if state in ("T", "gone"):
            problems.append(f"broker {node} is {'stopped' if state == 'gone' else 'frozen'}")
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    flush = admin.describe_configs([resource])[resource].result(timeout=30)["log.flush.interval.messages"]
    if not flush.is_default:
        problems.append(f"log.flush.interval.messages is {flush.value}")
    now = broker_configs(cluster)
    problems += [f"broker {b} config {k}: {cluster['configs'][b].get(k)} before, {now[b].get(k)} now"
                 for b in now for k in sorted(set(now[b]) | set(cluster["configs"][b]))
                 if now[b].get(k) != cluster["configs"][b].get(k)]
    problems += [f"scanner pid {p} alive" for p in scanners(cluster)]
    return "; ".join(problems)


def assert_passed(results: list[dict], names: list[str]) -> None:
    assert [r["name"] for r in results] == names
    for r in results:
        assert r["detected"] and r["reverted"] and r["false_attributions"] == [] and r["seconds_to_firing"] is not None, r
        assert r["seconds_to_resolved"] is not None, r


def interrupt_mid_injection(name: str, sig: int = signal.SIGINT) -> tuple[int, list[dict], str]:
    """Start one drill, send sig once it has injected; exit code, results and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "kdiag", "drill", "run", name, "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("injected" in line for line in lines) or proc.poll() is not None, 300,
                   f"drill {name} injected")
        proc.send_signal(sig)
        out = proc.stdout.read()
        proc.wait(300)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    return proc.returncode, json.loads(out or "[]"), "".join(lines)


def test_an_interrupted_drill_reverts_its_fault(cluster):
    rc, results, err = interrupt_mid_injection("log-dir-scanner")
    assert rc == 130, err
    assert [r["name"] for r in results] == ["log-dir-scanner"] and results[0]["reverted"], err
    assert "interrupted: the drill in progress was reverted" in err
    assert not cluster_whole(cluster), cluster_whole(cluster)


@breaking
@pytest.mark.parametrize(("name", "sig"), [("forced-fsync-broker", signal.SIGINT), ("broker-kill", signal.SIGTERM),
                                           ("probe-loss", signal.SIGINT), ("broker-stall", signal.SIGTERM)])
def test_an_interrupted_cluster_drill_reverts_configs_and_brokers(cluster, name, sig):
    rc, results, err = interrupt_mid_injection(name, sig)
    assert rc == 130 and results[0]["reverted"], err
    assert not cluster_whole(cluster), cluster_whole(cluster)


def test_every_drill_is_diagnosed_alerted_and_reverted_and_leaves_the_cluster_whole(cluster, tmp_path, pytestconfig):
    from tests.promstack import Shared, Stack

    from kdiag.tools.drill.catalog import DRILLS

    # `kdiag drill run --all` (about 11 minutes); without --own-lab (a shared lab), the drills that neither stop
    # brokers nor set cluster-wide configs.
    breaking_allowed = pytestconfig.getoption("own_lab")
    names = [d.name for d in DRILLS if not d.replay and not d.containers and (breaking_allowed or d.name not in BREAKING)]
    shared = Shared.from_env()
    stack = None if shared else Stack(tmp_path)
    try:
        url = shared.alertmanager if shared else stack.alertmanager(
            {"route": {"receiver": "none"}, "receivers": [{"name": "none"}]})
        results = drill(*(["--all"] if breaking_allowed else names), "--alertmanager", url,
                        "--html", str(tmp_path / "drills.html"), timeout=2400)
    finally:
        if stack:
            stack.close()
    print(json.dumps(results, indent=1))  # the timings, for the log
    live = [r for r in results if not r["replayed"]]
    assert_passed(live, names)
    assert all(r["passed"] for r in results), results
    assert all(r["seconds_to_alert"] >= r["seconds_to_firing"] and r["rule_for_seconds"] for r in live), live
    wait_until(lambda: not cluster_whole(cluster), 60, "the cluster whole after the drills")


def test_a_drill_that_times_out_still_reverts(cluster, monkeypatch):
    from kdiag.tools.drill.drill import Runner
    from kdiag.tools.drill.catalog import Drill, forced_fsync

    monkeypatch.setenv("KDIAG_LAB_DIR", cluster["dir"])
    from kdiag.tools.drill.cli import lab_target

    # forced_fsync injected, but a rule it cannot fire expected: the wait times out, the revert still runs.
    never = Drill("never", "forced fsync expecting swap", ["swap_in_use"], forced_fsync, timeout=15,
                  resolve_timeout=5)
    [result] = Runner(lab_target(), progress=lambda _: None).run([never])
    assert not result.detected and result.reverted and not result.error
    assert not cluster_whole(cluster), cluster_whole(cluster)


def test_another_cluster_gets_a_plan_and_no_fault_without_the_explicit_flag(cluster):
    run = subprocess.run([sys.executable, "-m", "kdiag", "drill", "run", "forced-fsync", "broker-kill", "--against",
                          cluster["bootstrap"]], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert f"plan for {cluster['bootstrap']} (3 brokers)" in run.stderr
    assert "  forced-fsync: topic drill-forced-fsync with flush.messages=1 under keyed load\n" in run.stderr
    assert "broker-kill: kill -9 broker 3, then start it [refused: needs the kdiag lab" in run.stderr
    assert run.stderr.strip().endswith("add --yes-inject-faults to inject these faults")
    assert "drill-forced-fsync" not in AdminClient({"bootstrap.servers": cluster["bootstrap"]}).list_topics(timeout=30).topics
