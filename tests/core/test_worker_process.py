"""A child process's answers framed over its pipe: any size, one after another."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kdiag.core.worker_process import WorkerProcess

CHILD = """
from kdiag.core.worker_process import serve
serve(lambda settings: lambda request: {"data": settings["fill"] * request["size"]})
"""


@pytest.mark.integration
def test_answers_larger_than_the_pipe_arrive_whole_and_the_child_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "echo_child.py").write_text(CHILD)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(Path(__file__).parents[2])]))
    worker = WorkerProcess("echo_child", {"fill": "ab"}, "the echo process")
    try:
        # 0 bytes, less than a pipe's 64 KB, many pipefuls (the child trims its heap after those over 1 MB), then small.
        for size in (0, 10, 3_000_000, 700_000, 5):
            assert worker.request({"size": size}, 60) == {"data": "ab" * size}
        assert worker.restarts == 0
    finally:
        worker.close()
