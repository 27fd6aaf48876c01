"""A `kdiag run` on the lab whose librdkafka children (AdminClient, probe, election) are killed by SIGABRT and then
SIGSEGV, as librdkafka's assertions and NULL dereferences kill them: the daemon lives, its host collectors and
/metrics stay fresh, the killed source shows success 0 naming the signal, and its child comes back."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from confluent_kafka.admin import AdminClient
from tests.promstack import Stack
from tests.kafka.test_coordination_live import delete_topic
from tests.waiting import wait_until

from kdiag.kafka.coordination_process import CoordinatorProcess
from kdiag.kafka.client import ClientSettings
from kdiag.config.probe import ProbeConfig
from kdiag.probe.process import ProbeProcess
from kdiag.kafka.coordination_records import Member

INTERVAL = 2.0
# The module each source's child runs (`python -m MODULE`), as its /proc/PID/cmdline shows it.
CHILDREN = {"kafka_admin": "kdiag.kafka.admin_worker", "probe": "kdiag.probe.process",
            "coordination": "kdiag.kafka.coordination_process"}
HOST = ("stat", "meminfo", "diskstats", "netdev", "processes")


def children(parent: int) -> dict[str, int]:
    """Source -> pid of the daemon's librdkafka children running now."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # not a process, or gone
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) != parent or fields[0] == "Z":
            continue
        for source, module in CHILDREN.items():
            if module.encode() in argv:
                found[source] = int(entry.name)
    return found


def scrape(address: str) -> tuple[dict[str, float], dict[str, str], float]:
    """(collector -> success, collector -> last error reason, last cycle time) of the daemon's /metrics."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as r:
        text = r.read().decode()
    success, reasons, cycle = {}, {}, 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "kdiag_collector_success":
                success[s.labels["collector"]] = s.value
            elif s.name == "kdiag_collector_last_error_info":
                reasons[s.labels["collector"]] = s.labels["reason"]
            elif s.name == "kdiag_last_cycle_timestamp_seconds":
                cycle = s.value
    return success, reasons, cycle


def write_config(tmp_path: Path, tag: str, bootstrap: str) -> Path:
    """A daemon config with the probe and the election on topics and a group of the test's own."""
    config = tmp_path / "kdiag.yaml"
    config.write_text(yaml.safe_dump({
        "interval": f"{INTERVAL:g}s", "state_dir": "",
        "probe": {"enabled": True, "topic": f"{tag}-probe", "interval": 1.0},
        "kafka": {"bootstrap_servers": bootstrap, "interval": "5s", "timeout": "20s", "local_broker_id": 1,
                  "coordination_topic": f"__kdiag_coordination_{tag}", "coordination_group": f"kdiag-{tag}"}}))
    return config


def healthz(address: str) -> int:
    with urllib.request.urlopen(f"http://{address}/healthz", timeout=30) as r:
        return r.status


@pytest.mark.kafka
def test_each_librdkafka_child_killed_by_sigabrt_then_sigsegv_costs_its_source_only(kafka_lab: dict,
                                                                                   tmp_path: Path) -> None:
    tag = f"crash{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path, tag, kafka_lab["bootstrap"])
    stack = Stack(tmp_path)
    try:
        address = stack.kdiag_live("--config", str(config), "--no-discover")  # no JmxTool: the box has 2 cores
        daemon = stack.procs[-1]

        def up(source: str) -> int | None:
            """The source's child pid once the source works through it."""
            pid = children(daemon.pid).get(source)
            return pid if pid and scrape(address)[0].get(source) == 1.0 else None

        for source in CHILDREN:
            wait_until(lambda source=source: up(source), 180, f"{source} working", stack.logs)
        for source in CHILDREN:
            for sig in (signal.SIGABRT, signal.SIGSEGV):
                killed = wait_until(lambda source=source: up(source), 180, f"{source} working", stack.logs)
                os.kill(killed, sig)

                def failed(source: str = source, sig: signal.Signals = sig) -> tuple | None:
                    success, reasons, cycle = scrape(address)
                    reason = reasons.get(source, "")
                    return (success, cycle) if success.get(source) == 0.0 and sig.name in reason \
                        and "restarting in" in reason else None

                success, cycle = wait_until(failed, 120, f"{source} failing with {sig.name}", stack.logs)
                assert daemon.poll() is None
                assert time.time() - cycle < 3 * INTERVAL + 10, "the snapshot went stale"
                assert all(success[c] == 1.0 for c in HOST), success
                assert healthz(address) == 200
                back = wait_until(lambda source=source: up(source), 180, f"{source} back after {sig.name}", stack.logs)
                assert back != killed
        assert daemon.poll() is None
        assert all(scrape(address)[0][c] == 1.0 for c in HOST)
    finally:
        stack.close()
        delete_topic(kafka_lab["bootstrap"], f"__kdiag_coordination_{tag}", f"kdiag-{tag}")
        admin = AdminClient({"bootstrap.servers": kafka_lab["bootstrap"]})
        admin.delete_topics([f"{tag}-probe"], operation_timeout=10)[f"{tag}-probe"].result(timeout=15)


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["probe", "coordination"])
def test_a_dead_child_is_reported_with_its_signal_and_restarted_after_a_backoff_with_secrets_off_argv(kind: str) -> None:
    settings = ClientSettings.resolve({"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
                                       "sasl.username": "kdiag", "sasl.password": "hunter2-child"})
    if kind == "probe":
        child = ProbeProcess("127.0.0.1:1", ProbeConfig(topic="kdiag-probe-none"), "unit", settings)
        ask = lambda: child.status()[:2]  # noqa: E731
    else:
        child = CoordinatorProcess("127.0.0.1:1", settings, Member("unit", 1), "t", "g")
        ask = child.poll
    try:
        child.start()
        first = child.worker.pid()
        for name in ("cmdline", "environ"):
            assert b"hunter2" not in Path(f"/proc/{first}/{name}").read_bytes()
        ask()  # answers (nobody listens at 127.0.0.1:1: not up, and no secret in why)
        os.kill(first, signal.SIGSEGV)
        wait_until(lambda: child.worker.pid() is None, 30, "the child gone after SIGSEGV")
        ok, reason = ask()
        assert not ok and re.fullmatch(r"the \w+ process died from SIGSEGV since its last answer; restarting in 1 s", reason)
        if kind == "coordination":
            assert not child.reporting().reporting and child.reporting().reporter is None
        wait_until(lambda: "restarting" not in ask()[1] and child.worker.pid() not in (None, first), 30,
                   "a new child answering after the backoff")
        assert "hunter2" not in ask()[1]
    finally:
        child.stop()


@pytest.mark.kafka
def test_a_hung_child_never_holds_a_cycle(kafka_lab: dict, tmp_path: Path) -> None:
    tag = f"hang{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path, tag, kafka_lab["bootstrap"])
    stack = Stack(tmp_path)
    hung: dict[str, int] = {}
    try:
        address = stack.kdiag_live("--config", str(config), "--no-discover")
        daemon = stack.procs[-1]
        for source in ("probe", "coordination"):
            hung[source] = wait_until(lambda source=source: (pid := children(daemon.pid).get(source)) and
                                      scrape(address)[0].get(source) == 1.0 and pid, 180, f"{source} working",
                                      stack.logs)
        for pid in hung.values():
            os.kill(pid, signal.SIGSTOP)
        # Each child is asked on a job of its own: while both hang (until each asking times out and the child is
        # replaced) the cycles go on at their interval. Asked from the cycle, each would hold it for its timeout.
        ages: list[float] = []

        def replaced() -> bool:
            ages.append(time.time() - scrape(address)[2])
            found = children(daemon.pid)
            return all(found.get(source) not in (None, pid) for source, pid in hung.items())

        wait_until(replaced, 180, "both hung children replaced", stack.logs)
        assert daemon.poll() is None
        assert max(ages) < 3 * INTERVAL + 4, f"a cycle waited on a hung child: snapshot ages {ages}"
        for source in hung:
            wait_until(lambda source=source: scrape(address)[0].get(source) == 1.0, 180, f"{source} back", stack.logs)
    finally:
        for pid in hung.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stack.close()
        delete_topic(kafka_lab["bootstrap"], f"__kdiag_coordination_{tag}", f"kdiag-{tag}")
        admin = AdminClient({"bootstrap.servers": kafka_lab["bootstrap"]})
        admin.delete_topics([f"{tag}-probe"], operation_timeout=10)[f"{tag}-probe"].result(timeout=15)
