"""Moving a broker's leaderships away and back: its replicas put last (kafka-reassign-partitions), then preferred
leader elections."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kdiag.tools.drill.faults import Target, kafka_tool, preferred_leaders

REASSIGN_TOOLS = ("org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "kafka.admin.ReassignPartitionsCommand")


def replica_lists(target: Target, spare: set[str]) -> dict[tuple[str, int], list[int]]:
    """(topic, partition) -> replicas of every partition outside the `spare` topics."""
    topics = target.admin().list_topics(timeout=10).topics
    return {(name, p): list(meta.replicas) for name, t in topics.items() if name not in spare
            for p, meta in t.partitions.items()}


def last(replicas: list[int], broker: int) -> list[int]:
    """The replica list with broker moved to its end (it is then nobody's preferred leader)."""
    return [b for b in replicas if b != broker] + ([broker] if broker in replicas else [])


def reassign(target: Target, lists: dict[tuple[str, int], list[int]], timeout: float = 120.0) -> None:
    """Apply these replica orders (same replicas, so no data moves) and wait until the reassignment is done."""
    plan = {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r} for (t, p), r in sorted(lists.items())]}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "reassign.json"
        path.write_text(json.dumps(plan))
        tool = run_reassign(target, "--execute", "--reassignment-json-file", str(path))
        deadline = time.monotonic() + timeout
        while True:
            current = replica_lists(target, set())
            if all(current.get(tp) == r for tp, r in lists.items()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"reassignment with {tool} not applied within {timeout:.0f} s")
            time.sleep(1)


def run_reassign(target: Target, *args: str) -> str:
    """Run whichever reassign tool the lab's Kafka has (4.x tools, or kafka.admin up to 3.x); its class name."""
    for tool in REASSIGN_TOOLS:
        try:
            kafka_tool(target, tool, *args)
            return tool
        except subprocess.CalledProcessError as e:
            if b"ClassNotFoundException" not in e.stderr and b"Could not find or load main class" not in e.stderr:
                raise RuntimeError(f"{tool} {' '.join(args)} failed: {e.stderr.decode(errors='replace')[-500:]}") from e
    raise RuntimeError("no kafka-reassign-partitions tool in the lab's jars")


@contextmanager
def leaderships_away(target: Target, broker: int, spare: set[str]) -> Iterator[None]:
    """Every partition outside `spare` with `broker` last in its replicas and led by another; restored at the end."""
    before = replica_lists(target, spare)
    moved = {tp: last(r, broker) for tp, r in before.items() if r and r[0] == broker and len(r) > 1}
    try:
        if moved:
            reassign(target, moved)
        preferred_leaders(target)
        yield
    finally:
        # A topic deleted meanwhile (the drill's own) would fail the whole plan.
        now = replica_lists(target, spare)
        if back := {tp: before[tp] for tp in moved if tp in now}:
            reassign(target, back)
        preferred_leaders(target)
