"""Process churn: nothing a dead process left (series, signals, rule state, exposition) outlives the history."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from tests.waiting import wait_until

from kdiag.config.settings import Config
from kdiag.app.wiring import host_collectors, load_rules
from kdiag.serve.exporter import Published
from kdiag.runtime.pipeline import CollectorSet, Pipeline
from kdiag.core.root import Root

pytestmark = pytest.mark.integration

READER = "import sys, pathlib\nwhile True:\n  [p.read_bytes() for p in pathlib.Path(sys.argv[1]).iterdir()]"
RETENTION = 10.0


def held(pipeline: Pipeline) -> set[tuple[str, str]]:
    """(kind, subject) of every subject whose rules the engine holds for the next cycle."""
    return {(kind, sid) for kind, (_, _, subjects, _) in pipeline.engine._held.items() for sid in subjects}


def leftovers(pipeline: Pipeline, published: Published, pids: set[str]) -> list[str]:
    """Where any of these pids still appears in the state kept from cycle to cycle."""
    procs = next(c for c in pipeline.collectors.collectors if c.name == "processes")
    places = {
        "history": [dict(key[1]).get("pid") for key in pipeline.history._points],
        "processes collector": [str(pid) for pid in procs.table.known],
        "engine held": [sid for _, sid in held(pipeline)],
        "engine active": [d.subject.split()[1] for d in pipeline.judged.active.values() if d.subject.startswith("pid ")],
        "exposition": [pid for pid in pids if f'pid="{pid}"'.encode() in published.metrics],
    }
    return [f"{where}: pid {pid}" for where, found in places.items() for pid in set(found) & pids]


def test_a_dead_process_leaves_no_state_once_the_history_forgets_it(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    for i in range(4):
        (log_dir / f"{i:020d}.log").write_bytes(b"x" * 65536)
    config = Config()
    config.processes.log_dirs = [str(log_dir)]
    config.processes.top_n = 1000  # every reader gets its series on this busy host
    pipeline = Pipeline(CollectorSet(host_collectors(config)), load_rules(config), "churn",
                        history_seconds=RETENTION, window=2.0, collector_timeout=30.0)
    published = Published()

    def step() -> None:
        published.publish(pipeline.step(Root()))

    dead: set[str] = set()
    for _ in range(8):
        reader = subprocess.Popen([sys.executable, "-c", READER, str(log_dir)])
        try:
            pid = str(reader.pid)
            # Seen as a subject, with its series exported: the state under test exists.
            wait_until(lambda pid=pid: step() or (("proc", pid) in held(pipeline)
                                          and f'pid="{pid}"'.encode() in published.metrics),
                       60, f"reader {pid} as a proc subject")
        finally:
            reader.kill()
            reader.wait()
        dead.add(pid)
    assert leftovers(pipeline, published, dead), "the state under test was never there"
    forgotten = time.monotonic() + RETENTION
    wait_until(lambda: step() or (time.monotonic() > forgotten and not leftovers(pipeline, published, dead)),
               RETENTION + 60, "no state left of the dead readers")
