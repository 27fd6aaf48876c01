"""The container drills refuse a lab that runs no containers."""

import json
from pathlib import Path

import pytest

from kdiag.tools.drill.catalog import BY_NAME
from kdiag.tools.drill.container_faults import lab_base
from kdiag.tools.drill.faults import Target

pytestmark = pytest.mark.unit


def test_container_memory_is_refused_on_a_lab_of_plain_processes(tmp_path: Path) -> None:
    plain = Target("127.0.0.1:9092", 3, lab_dir=tmp_path)
    assert "kdiag lab up --containers" in BY_NAME["container-memory"].refusal(plain)
    assert BY_NAME["container-memory"].refusal(Target("10.77.9.2:9092", 3, lab_dir=tmp_path, containers=True)) == ""


def test_lab_base_names_a_container_lab_only(tmp_path: Path) -> None:
    (tmp_path / "lab.json").write_text(json.dumps({"brokers": 1, "base_port": 31092, "pids": {}}))
    with pytest.raises(RuntimeError, match="runs no containers"):
        lab_base(Target("127.0.0.1:9092", 1, lab_dir=tmp_path))
    (tmp_path / "lab.json").write_text(json.dumps({"brokers": 1, "base_port": 31092, "pids": {},
                                                   "containers": {"memory": 1.0, "cpus": 1.0}}))
    assert lab_base(Target("10.77.9.2:9092", 1, lab_dir=tmp_path, containers=True)) == 31092
