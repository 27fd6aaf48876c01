"""lab.json: what `kdiag lab up` started, as the lab commands and the drills read it back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NotRequired, TypedDict


class LabInfo(TypedDict):
    """lab.json: the lab `kdiag lab up` started, keyed by node id where per node."""

    brokers: int
    bootstrap: str
    jmx: dict[str, str]
    pids: dict[str, int | None]
    kafka_version: str
    base_port: int
    cluster_id: str
    dir: str
    nodes: dict[str, dict[str, int]]  # node id -> client, controller and jmx_port
    # Labs written before secured modes, ZooKeeper mode and JVM options lack these.
    security: NotRequired[str]
    mode: NotRequired[str]
    jvm_opts: NotRequired[list[str]]
    zookeeper: NotRequired[str]
    containers: NotRequired[dict[str, float]]  # --containers: each node's memory limit (bytes) and cpus
    hosts: NotRequired[dict[str, str]]  # node id -> its address (a container's own; else 127.0.0.1)
    # `--partitions`/`--groups` labs: the brokers' -Xmx option and open files limit (lab/sizing.py).
    heap: NotRequired[str]
    nofile: NotRequired[int]


def lab_json(d: Path) -> LabInfo | None:
    """lab.json of the lab in d, None when it is absent or unreadable."""
    try:
        info: LabInfo = json.loads((d / "lab.json").read_text())
    except (OSError, ValueError):
        return None
    return info
