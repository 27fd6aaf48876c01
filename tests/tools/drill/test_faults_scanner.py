"""What a drill killed by SIGKILL leaves: its scanner process exits by itself, its topics go at the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from tests.waiting import wait_until

from kdiag.tools.drill.faults import Target, delete_leftover_topics

# A drill process: the fault's scanner over one log dir, then waiting to be killed.
DRILL = """
import sys, time
from kdiag.tools.drill.faults import scanner
with scanner([sys.argv[1]]) as process:
    print(process.pid, flush=True)
    time.sleep(600)
"""


def running(pid: int) -> bool:
    """The scanner still runs (not gone, not a zombie nobody reaps, not its pid reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and b"orphaned" in cmdline


@pytest.mark.integration
def test_the_scanner_exits_when_its_drill_is_killed(tmp_path):
    log_dir = tmp_path / "kafka-logs" / "topic-0"
    log_dir.mkdir(parents=True)
    (log_dir / "00000000000000000000.log").write_bytes(b"x" * (1 << 20))
    drill = subprocess.Popen([sys.executable, "-c", DRILL, str(log_dir.parent)], stdout=subprocess.PIPE, text=True)
    pid = int(drill.stdout.readline())
    try:
        wait_until(lambda: running(pid), 60, "the scanner running")
        drill.kill()
        drill.wait(60)
        wait_until(lambda: not running(pid), 60, f"scanner pid {pid} gone after its drill was killed with SIGKILL")
    finally:
        drill.kill()
        drill.wait(60)
        if running(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.kafka
def test_a_drill_run_first_deletes_the_topics_a_killed_run_left(kafka_lab):
    target = Target(kafka_lab["bootstrap"], kafka_lab["brokers"])
    admin = target.admin()
    name = f"drill-left-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    wait_until(lambda: name in admin.list_topics(timeout=10).topics, 60, f"topic {name} created")
    assert name in delete_leftover_topics(target)
    wait_until(lambda: name not in admin.list_topics(timeout=10).topics, 60, f"topic {name} deleted")
