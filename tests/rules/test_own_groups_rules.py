"""kdiag's own consumer groups (the election's, the probes') never reach a consumer-group rule; a user's group does."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from tests.collectors.golden import FIXTURES

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Engine, EngineState
from kdiag.analysis.subject_kinds import compute_signals
from kdiag.collectors.kafka.admin import KafkaAdminCollector, own_groups
from kdiag.config.settings import Config
from kdiag.core.history import History
from kdiag.core.archive import KAFKA_STATE_VERSION
from kdiag.core.root import SnapshotRoot

START = 1764430000.0
STEP = 5.0


def idle_members_flagged(tmp_path: Path, groups: tuple[str, ...]) -> set[str]:
    """The groups consumer_members_idle fires on when each of `groups` has 1 of its 2 members with no partition."""
    state = json.loads((FIXTURES / "kafka" / "admin-state.json").read_text())
    template = next(iter(state["consumer_groups"].values()))
    state["consumer_groups"] = {g: {**copy.deepcopy(template), "members": 2, "idle_members": 1} for g in groups}
    (tmp_path / "meta.json").write_text(json.dumps({"time": START}))
    (tmp_path / "kafka.json").write_text(json.dumps({"version": KAFKA_STATE_VERSION, "sources": {"admin": state}}))
    collector = KafkaAdminCollector("127.0.0.1:1", own_groups=own_groups(Config()))
    samples = collector.collect(SnapshotRoot(tmp_path))
    history, engine = History(900.0), Engine(load_catalog([default_rules_dir()]))
    judged = EngineState()
    diagnoses = []
    for i in range(25):
        history.add(START + i * STEP, samples)
        judged = engine.evaluate(judged, START + i * STEP, compute_signals(history, 30.0))
        diagnoses = judged.current()
    return {d.subject for d in diagnoses if d.rule.id == "consumer_members_idle" and d.state == "firing"}


def test_the_coordination_group_with_an_idle_standby_is_not_consumer_members_idle(tmp_path: Path):
    assert idle_members_flagged(tmp_path, ("kdiag-coordination", "kdiag-probe-broker-1")) == set()


def test_a_users_group_with_an_idle_member_is(tmp_path: Path):
    flagged = idle_members_flagged(tmp_path, ("kdiag-coordination", "orders-readers"))
    assert len(flagged) == 1 and "orders-readers" in flagged.pop()
